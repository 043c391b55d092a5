"""The optimizer step's own time (simscale.model.optimizer_step): bytes over memory bandwidth."""

from __future__ import annotations

import pytest

from simscale.model.optimizer_step import LAMB_PASSES, optimizer_step_s, step_bytes_per_param
from simscale.simulator import simulate
from simscale.spec.config import ConfigError
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


@pytest.mark.parametrize(
    ("precision", "expected"),
    [
        # FusedLAMBAMP on fp32 parameters, pass by pass (gradient 4, weight 4, moments 2 x 4):
        # global gradient norm 4; parameter norms 4; stage 1 reads gradient, weight, moments
        # (4 + 4 + 8) and writes the update into the gradient and the moments (4 + 8); update
        # norms 4; stage 2 reads update and weight (4 + 4) and writes the weight (4).
        ("fp32", 4 + 4 + (16 + 12) + 4 + (8 + 4)),
        ("tf32", 52),
        # amp: the same fp32 parameters and gradients, plus GradScaler's inf check, which
        # reads and rewrites every gradient (4 + 4).
        ("amp", 8 + 52),
        # fp16: a half model with fp32 master copies (gradient 2, master 4, half weight 2):
        # inf check 2 + 2; gradient norm 2; master norms 4; stage 1 (2 + 4 + 8) + (2 + 8);
        # update norms 2; stage 2 reads update, master and the half copy (2 + 4 + 2) and
        # writes master and half copy (4 + 2).
        ("fp16", 4 + 2 + 4 + (14 + 10) + 2 + (8 + 6)),
    ],
)
def test_lamb_streams_what_its_six_passes_read_and_write(precision: str, expected: int) -> None:
    assert step_bytes_per_param(precision, "lamb") == expected


def test_lamb_runs_the_passes_nvidia_s_kernel_runs_in_its_order() -> None:
    """fused_lamb.py step, then multi_tensor_lamb_cuda: the norms before the update that needs
    them, the update norms between its two stages."""
    names = [p.name.split(" (")[0] for p in LAMB_PASSES]
    assert names == [
        "GradScaler inf check",
        "global gradient norm",
        "per-tensor parameter norms",
        "stage 1: moments and update",
        "per-tensor update norms",
        "stage 2: weights by the trust ratio",
    ]


def _lamb_job(precision: str, mode: str = "ddp") -> dict:
    job = _job(mode, gpu="A100-80GB")
    job["training"] = {"batch_per_gpu": 1, "precision": precision, "optimizer": {"type": "lamb"}}
    return job


def test_a_lamb_step_is_its_bytes_over_the_hbm_bandwidth() -> None:
    """200 M fp32 parameters x 52 bytes over an A100 80GB's 2,039 GB/s: 5.10 ms, against
    Adam's 28 bytes: 2.75 ms."""
    s = scenario_from_dict(_lamb_job("tf32"))
    expected = ELEMENTS * 52 / 2.039e12
    assert optimizer_step_s(s, GPUS["A100-80GB"]) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(5.101e-3, rel=1e-3)
    assert simulate(s).iteration_time_s == pytest.approx(expected)


def test_lamb_holds_adam_s_state_but_fp16_keeps_fp32_copies_and_moments() -> None:
    for precision in ("fp32", "tf32", "amp"):
        lamb = scenario_from_dict(_lamb_job(precision)).memory_use()
        job = _lamb_job(precision)
        job["training"]["optimizer"] = {"type": "adam"}
        assert lamb == scenario_from_dict(job).memory_use()
    # FusedLAMBAMP on a half model: an fp32 copy and two fp32 moments, 12 bytes per parameter
    # (Adam on the half model as simscale.zoo.memory counts it: two fp16 moments, 4).
    fp16 = scenario_from_dict(_lamb_job("fp16")).memory_use()
    assert fp16.optimizer_state == ELEMENTS * 12
    assert fp16.weights == fp16.gradients == ELEMENTS * 2


def test_lamb_shards_its_step_under_zero_as_adam_does() -> None:
    s = scenario_from_dict(_lamb_job("tf32", "zero"))
    assert optimizer_step_s(s, GPUS["A100-80GB"]) == pytest.approx(ELEMENTS * 52 / 2.039e12)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_lamb_is_refused_where_fused_lamb_has_no_kernel(precision: str) -> None:
    job = _lamb_job(precision)
    job["cluster"]["hosts"][0]["gpu"] = "H100"
    with pytest.raises(ConfigError, match="FusedLAMBAMP steps fp16 and fp32"):
        scenario_from_dict(job)
