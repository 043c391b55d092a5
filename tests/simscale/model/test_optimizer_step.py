"""The optimizer step's own time (simscale.model.optimizer_step): bytes over memory bandwidth."""

from __future__ import annotations

import pytest

from simscale.model.optimizer_step import optimizer_step_s, step_bytes_per_param
from simscale.simulator import simulate
from simscale.spec.hardware import GPUS
from simscale.spec.scenario import scenario_from_dict

ELEMENTS = 8 * 25_000_000


@pytest.mark.parametrize(
    ("precision", "optimizer", "expected"),
    [
        # grad read + state read and written + weights read and written (in place)
        ("fp32", "adam", 4 + 2 * 8 + 2 * 4),
        ("amp", "sgd", 4 + 2 * 4 + 2 * 4),
        ("fp16", "adam", 2 + 2 * 4 + 2 * 2),
        # bf16: the state holds the fp32 master weights; the bf16 copy is only written
        ("bf16", "adam", 2 + 2 * 12 + 2),
        ("bf16", "sgd", 2 + 2 * 8 + 2),
    ],
)
def test_a_step_streams_the_gradient_the_state_and_the_weights(
    precision: str, optimizer: str, expected: int
) -> None:
    assert step_bytes_per_param(precision, optimizer) == expected


def _job(mode: str, hosts: int = 1, gpus: int = 1, gpu: str = "H100", **zero: object) -> dict:
    return {
        "cluster": {
            "hosts": [{"count": hosts, "gpus_per_host": gpus, "gpu": gpu, "nic_gbps": 100}]
        },
        "model": {"arrays": [{"name": f"w{i}", "elements": 25_000_000} for i in range(8)]},
        "training": {"batch_per_gpu": 1, "precision": "bf16", "optimizer": {"type": "adam"}},
        "kvstore": {"mode": mode, "zero": {"stage": 3, **zero}},
        "simulation": {"warmup_iterations": 1, "measured_iterations": 3},
    }


def test_ddp_steps_every_parameter_at_the_hbm_rate() -> None:
    """200 M parameters x 28 bytes over an H100's 3.35 TB/s: 1.67 ms."""
    s = scenario_from_dict(_job("ddp"))
    expected = ELEMENTS * 28 / 3.35e12
    assert optimizer_step_s(s, GPUS["H100"]) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(1.672e-3, rel=1e-3)


def test_zero_steps_its_shard_over_the_world_or_the_host() -> None:
    """ZeRO over 2 hosts x 4 GPUs steps 1/8 of the parameters; HSDP 1/4 (one host's)."""
    ddp = optimizer_step_s(scenario_from_dict(_job("ddp", 2, 4)), GPUS["H100"])
    world = optimizer_step_s(scenario_from_dict(_job("zero", 2, 4)), GPUS["H100"])
    host = optimizer_step_s(
        scenario_from_dict(_job("zero", 2, 4, shard_group="host")), GPUS["H100"]
    )
    assert world == pytest.approx(ddp / 8, rel=1e-12)
    assert host == pytest.approx(ddp / 4, rel=1e-12)


def test_modes_that_step_elsewhere_and_cpu_ranks_pay_nothing_here() -> None:
    ring = scenario_from_dict(_job("allreduce"))
    assert optimizer_step_s(ring, GPUS["H100"]) == 0.0
    assert optimizer_step_s(scenario_from_dict(_job("ddp")), GPUS["cpu"]) == 0.0


def test_a_lone_gpu_with_nothing_to_compute_or_send_spends_its_iteration_stepping() -> None:
    """One H100, explicit arrays without FLOPs: the iteration is the optimizer step alone."""
    s = scenario_from_dict(_job("ddp"))
    assert simulate(s).iteration_time_s == pytest.approx(optimizer_step_s(s, GPUS["H100"]))
