"""The symmetric collective path against the exact model (simscale.model.ring_symmetry).

Each shape runs twice, ``path`` forced to "exact" and to "symmetric": the representative worker
must give the exact model's throughput, iteration breakdown and NIC load within ``TOLERANCE``,
on ring and hierarchical all-reduce, DDP and ZeRO stages 2 and 3, over 2 to 16 hosts.
"""

from __future__ import annotations

from typing import Any

import pytest

from simscale.model import cluster, ring_symmetry, symmetry
from simscale.simulator import Simulation
from simscale.spec.costs import CostModel
from simscale.spec.profile import default_costs
from simscale.spec.scenario import scenario_from_dict

# Measured: every shape below agrees to better than 1e-9; the bound leaves room for the float
# order of a different number of simultaneous flows, and nothing else.
TOLERANCE = 1e-6

V100_HOST = {"gpus_per_host": 8, "gpu": "V100", "nic_gbps": 25}


def _scenario(hosts: int, model: str, kvstore: dict[str, Any], **training: Any) -> dict[str, Any]:
    group = {"count": hosts, **V100_HOST} if model.startswith("resnet") else {}
    if not group:
        group = {"count": hosts, "instance": "p5.48xlarge"}
    train = {"batch_per_gpu": 32, **training}
    return {
        "name": f"ring-{model}-{hosts}",
        "cluster": {"hosts": [group]},
        "model": model,
        "training": train,
        "kvstore": kvstore,
        "simulation": {"warmup_iterations": 1, "measured_iterations": 4},
    }


GPT = {"precision": "bf16", "seq_len": 256, "batch_per_gpu": 4, "optimizer": {"type": "adam"}}
SHAPES = [
    _scenario(2, "resnet50", {"mode": "allreduce", "allreduce": {"algorithm": "ring"}}),
    _scenario(4, "resnet50", {"mode": "allreduce", "allreduce": {"algorithm": "hierarchical"}}),
    _scenario(8, "resnet18", {"mode": "allreduce"}),
    _scenario(2, "gpt2", {"mode": "ddp"}, **GPT),
    _scenario(8, "gpt2", {"mode": "ddp"}, **GPT),
    _scenario(4, "gpt2", {"mode": "zero", "zero": {"stage": 2}}, **GPT),
    _scenario(16, "gpt2", {"mode": "zero", "zero": {"stage": 3}}, **GPT),
    # Every micro-batch gathers and reduce-scatters (simscale.comm.sharded).
    _scenario(4, "gpt2", {"mode": "zero", "zero": {"stage": 3}}, **GPT, micro_batches=3),
]


@pytest.mark.parametrize(
    "data", SHAPES, ids=[s["name"] + "-" + s["kvstore"]["mode"] for s in SHAPES]
)
def test_one_representative_predicts_what_every_worker_does(data: dict[str, Any]) -> None:
    scenario = scenario_from_dict(data)
    costs = default_costs(scenario)[0]
    exact = Simulation(scenario, costs, path="exact").run()
    fast = Simulation(scenario, costs, path="symmetric").run()
    assert fast.path == "symmetric" and exact.path == "exact"
    assert fast.throughput_samples_per_s == pytest.approx(
        exact.throughput_samples_per_s, rel=TOLERANCE
    )
    for part, value in exact.breakdown.items():
        assert fast.breakdown[part] == pytest.approx(value, rel=TOLERANCE, abs=1e-12)
    nic = {u.resource: u.busy_fraction for u in exact.utilization if u.kind == "nic"}
    fast_nic = [u.busy_fraction for u in fast.utilization if u.kind == "nic"]
    assert len(fast_nic) == 2  # the representative's egress and ingress, not its successor's
    assert fast_nic == pytest.approx([nic["host0.egress"], nic["host0.ingress"]], rel=1e-6)
    assert len(fast.per_worker) == len(exact.per_worker)
    assert fast.events < exact.events


def _layout_and_costs(data: dict[str, Any]) -> tuple[Any, Any, CostModel]:
    scenario = scenario_from_dict(data)
    return scenario, cluster.layout(scenario), default_costs(scenario)[0]


def test_auto_keeps_a_small_job_on_the_exact_model_and_says_why() -> None:
    scenario, full, costs = _layout_and_costs(SHAPES[0])
    choice = symmetry.choose_path(scenario, full, costs)
    assert not choice.reduced
    assert "the exact model is cheap" in choice.reason


def test_auto_takes_the_representative_where_the_exact_model_is_expensive() -> None:
    data = _scenario(128, "gpt2_xl", {"mode": "zero", "zero": {"stage": 3}}, **GPT)
    scenario, full, costs = _layout_and_costs(data)
    choice = symmetry.choose_path(scenario, full, costs)
    assert choice.reduced and not choice.approximate
    assert "128 identical workers simulated as one" in choice.reason


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: d["simulation"].update(compute_jitter=0.05), "compute jitter"),
        (lambda d: d["simulation"].update(network_model="fifo"), "network model fifo"),
        (lambda d: d["cluster"].update(core_oversubscription=2.0), "oversubscribed core"),
        (
            lambda d: d["cluster"]["hosts"].append({"count": 1, **V100_HOST, "nic_gbps": 10}),
            "worker hosts differ",
        ),
    ],
)
def test_the_reduction_is_refused_where_workers_are_not_alike(change: Any, reason: str) -> None:
    data = _scenario(4, "resnet50", {"mode": "allreduce"})
    change(data)
    scenario, full, costs = _layout_and_costs(data)
    assert reason in (ring_symmetry.reason_for_exact(scenario, full, costs) or "")
    with pytest.raises(ValueError, match="the symmetric path does not apply"):
        symmetry.choose_path(scenario, full, costs, "symmetric")


def test_a_trace_keeps_every_worker() -> None:
    scenario, full, costs = _layout_and_costs(SHAPES[0])
    assert "trace" in (ring_symmetry.reason_for_exact(scenario, full, costs, trace=True) or "")


def test_the_reduced_ring_flow_loads_the_representatives_own_links() -> None:
    _, full, _ = _layout_and_costs(SHAPES[2])
    reduced = ring_symmetry.reduce(full)
    assert reduced.copies == 8 and reduced.layout.worker_hosts == (0,)
    assert reduced.route(0, 1) == ((0, 1), (1.0, 1.0), -1)
    with pytest.raises(ValueError, match="no traffic"):
        reduced.route(1, 0)
