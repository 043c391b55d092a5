"""DDP's buckets and ZeRO/FSDP's sharded collectives (simscale.comm.sharded), end to end.

A model of communication only (explicit arrays, no FLOPs) on two hosts of one GPU each, so an
iteration lasts as long as its collectives: DDP all-reduces the gradients once, ZeRO stages 1
and 2 reduce-scatter and all-gather them (the same bytes), stage 3 gathers the parameters twice
and reduce-scatters the gradients (1.5 times the bytes).
"""

from __future__ import annotations

import pytest

from simscale.comm.sharded import MIB, reverse_buckets
from simscale.simulator import simulate
from simscale.spec.scenario import scenario_from_dict


def test_ddp_buckets_fill_in_reverse_order_first_small_then_at_the_cap() -> None:
    # Keys 0..5 of 0.6 MiB each: the first bucket closes at 1 MiB (keys 5, 4), the next at the
    # 2 MiB cap (3, 2, 1, 0 reach 2.4 MiB only with key 0, so all four).
    sizes = [0.6 * MIB] * 6
    assert reverse_buckets(sizes, 1 * MIB, 2 * MIB) == [[5, 4], [3, 2, 1, 0]]


def test_a_bucket_left_below_its_cap_is_still_reduced() -> None:
    assert reverse_buckets([3.0, 1.0], 10.0, 10.0) == [[1, 0]]


def _comm_only(mode: str, stage: int = 3) -> float:
    scenario = scenario_from_dict(
        {
            "cluster": {"hosts": [{"count": 2, "gpus_per_host": 1, "gpu": "H100", "nic_gbps": 8}]},
            "model": {"arrays": [{"name": f"w{i}", "elements": 25_000_000} for i in range(8)]},
            "training": {"batch_per_gpu": 1, "precision": "bf16"},
            "kvstore": {"mode": mode, "zero": {"stage": stage}},
            "simulation": {"warmup_iterations": 1, "measured_iterations": 3},
        }
    )
    return simulate(scenario).iteration_time_s


def test_zero_stage_1_and_2_move_what_ddp_moves_and_stage_3_half_as_much_again() -> None:
    ddp = _comm_only("ddp")
    stage1, stage2, stage3 = (_comm_only("zero", s) for s in (1, 2, 3))
    # 400 MB of bf16 gradients over a 1 GB/s NIC (x0.97): an all-reduce between two hosts sends
    # each host's half twice: ~0.41 s.
    assert ddp == pytest.approx(0.4 / 0.97, rel=0.05)
    assert stage1 == pytest.approx(ddp, rel=0.05)
    assert stage2 == pytest.approx(stage1, rel=1e-9)
    assert stage3 == pytest.approx(1.5 * ddp, rel=0.05)
