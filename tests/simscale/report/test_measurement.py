"""The report's words about what limits an iteration do not contradict each other, and name
the way the mode moves gradients."""

from __future__ import annotations

import pytest

from simscale.des.utilization import Utilization
from simscale.report.measurement import bottleneck
from simscale.simulator import simulate
from simscale.spec.profile import default_costs
from simscale.spec.scenario import load_scenario
from tests.support.paths import ROOT


@pytest.mark.slow  # measured over 2 CPU s (tests/support/cpu_report.py)
def test_an_unsaturated_chain_is_not_called_communication_bound() -> None:
    """One server for 8 hosts (scenarios/server-ratio): the model path's a-priori estimate
    (the busiest NIC's traffic at full rate, against compute) and the measured bottleneck (no
    resource busy all the iteration) are worded as what they are, so the report does not say
    "communication-bound" beside "no resource saturated"."""
    s = load_scenario(ROOT / "scenarios" / "server-ratio" / "64gpu-servers-1.yaml")
    r = simulate(s, default_costs(s)[0])
    assert "no resource saturated" in r.bottleneck
    assert "busiest over the iteration: " in r.bottleneck
    assert "-bound" not in r.path_reason
    assert "at full rate, the busiest NIC's traffic" in r.path_reason
    assert "an iteration's compute time" in r.path_reason


UNSATURATED = [
    Utilization("host0.egress", "nic", 0.4, "host 0 (worker 0) NIC egress"),
    Utilization("worker0.gpu", "gpu", 0.6, "worker 0 GPU compute"),
]
EXPOSED = {"exposed_comm_s": 0.02, "wait_for_workers_s": 0.0}


@pytest.mark.parametrize(
    ("mode", "stage", "words"),
    [
        ("dist_sync", 3, "the push-update-pull chain takes turns"),
        ("allreduce", 3, "the ring's step latencies and per-tensor costs add up"),
        ("ddp", 3, "the gradient buckets' all-reduces run one at a time"),
        ("zero", 2, "reduce-scatters and the parameters' all-gather after backward"),
        ("zero", 3, "forward and backward wait for units' parameter all-gathers"),
    ],
)
def test_exposed_communication_is_explained_as_the_mode_moves_gradients(
    mode: str, stage: int, words: str
) -> None:
    """With no resource saturated, only a parameter server's chain "takes turns"; DDP's and
    ZeRO/FSDP's collectives, which run one at a time, are worded as what they are."""
    text = bottleneck(UNSATURATED, EXPOSED, mode, zero_stage=stage)
    assert "no resource saturated" in text
    assert words in text
    if mode != "dist_sync":
        assert "push-update-pull" not in text


def test_collectives_held_to_their_transport_are_named_so_for_every_collective_mode() -> None:
    transport = [Utilization("worker0.transport", "transport", 0.7, "worker 0 NCCL sockets")]
    assert "the ring between hosts is held" in bottleneck(transport, EXPOSED, "allreduce")
    for mode in ("ddp", "zero"):
        assert "the collectives between hosts are held to their transport's ceiling" in (
            bottleneck(transport, EXPOSED, mode)
        )
