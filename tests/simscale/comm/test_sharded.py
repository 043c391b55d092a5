"""DDP's buckets and ZeRO/FSDP's sharded collectives (simscale.comm.sharded), end to end.

A model of communication only (explicit arrays, no FLOPs) on two hosts of one GPU each, so an
iteration lasts as long as its collectives: DDP all-reduces the gradients once, ZeRO stages 1
and 2 reduce-scatter and all-gather them (the same bytes), stage 3 gathers the parameters twice
and reduce-scatters the gradients (1.5 times the bytes).
"""

from __future__ import annotations

import pytest

from simscale import zoo
from simscale.comm.sharded import (
    MIB,
    collective_library,
    gather_stagger,
    reverse_buckets,
    root_layers,
)
from simscale.simulator import Simulation, simulate
from simscale.spec.scenario import load_scenario, scenario_from_dict
from tests.support.paths import SCENARIOS

TINY_DDP = SCENARIOS / "emulated" / "gpt2-tiny-ddp.yaml"


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


def _block_fraction() -> float:
    """gpt2_tiny's transformer blocks' share of its parameters (the rest, 94%, is the root)."""
    model = zoo.get("gpt2_tiny")
    root = set(root_layers(model))
    sizes = [sum(a.elements for a in layer.arrays) for layer in model.layers]
    return sum(n for i, n in enumerate(sizes) if i not in root) / sum(sizes)


def _sent_per_rank_per_step(hosts: int, gpu: str, overrides: list[str]) -> float:
    """Bytes host 0's NIC sent per measured iteration, as a multiple of (n-1)/n of the
    gradients' bytes B (gpt2_tiny, one rank per host, the emulated-cluster scenario)."""
    s = load_scenario(
        TINY_DDP,
        [f"cluster.hosts[0].count={hosts}", f"cluster.hosts[0].gpu={gpu}", *overrides],
    )
    sim = Simulation(s, path="exact")
    result = sim.run()
    grads = sum(a.elements * 4 for a in s.model_spec().arrays)
    sent = next(st.bytes_carried for st in sim.net.link_stats() if st.name == "host0.egress")
    return sent / result.iterations_measured / ((hosts - 1) / hosts * grads)


ZERO2 = ["kvstore.mode=zero", "kvstore.zero.stage=2"]


@pytest.mark.parametrize("hosts", [2, 3])
def test_gloo_sends_what_realrun_measured_ddp_twice_and_fsdp_three_times(hosts: int) -> None:
    """CPU ranks run gloo, whose reduce-scatter is an all-reduce: per step a rank sends
    2(n-1)/n B under DDP and 3(n-1)/n B under FSDP's SHARD_GRAD_OP, the formulas realrun's
    kernel byte counts hold to 2% and 0.5% (tests/realrun/allreduce/test_data_parallel.py)."""
    assert _sent_per_rank_per_step(hosts, "cpu", ["kvstore.mode=ddp"]) == pytest.approx(2.0)
    assert _sent_per_rank_per_step(hosts, "cpu", ZERO2) == pytest.approx(3.0)


def test_nccl_reduce_scatters_half_an_all_reduce() -> None:
    """On GPUs (NCCL) ZeRO-2 sends what DDP sends, 2(n-1)/n B: the reduce-scatter and the
    all-gather are half an all-reduce each."""
    assert _sent_per_rank_per_step(2, "V100", ZERO2) == pytest.approx(2.0)


def _step_s(hosts: int, gpu: str, mode: str, stage: int = 2, gpus_per_host: int = 1) -> float:
    """Communication only (module doc) on ``hosts`` hosts of ``gpus_per_host`` ``gpu`` each
    over 1 Gbit/s NICs."""
    host = {"count": hosts, "gpus_per_host": gpus_per_host, "gpu": gpu, "nic_gbps": 1}
    scenario = scenario_from_dict(
        {
            "cluster": {"hosts": [host]},
            "model": {"arrays": [{"name": f"w{i}", "elements": 25_000_000} for i in range(8)]},
            "training": {"batch_per_gpu": 1},
            "kvstore": {"mode": mode, "zero": {"stage": stage}},
            "simulation": {"warmup_iterations": 1, "measured_iterations": 3},
        }
    )
    return simulate(scenario).iteration_time_s


@pytest.mark.parametrize("stage", [2, 3])
def test_a_two_rank_gloo_all_gather_overlaps_its_two_directions_by_half(stage: int) -> None:
    """Between exactly two gloo ranks an all-gather takes 1.5 times its bytes' time: the rank
    that arrives second queues its shard's two halves ahead of its receive announcements, so
    the first rank's halves follow one half behind (sharded.GLOO_PAIR_GATHER_STAGGER). gloo's
    reduce-scatter is an all-reduce (1 DDP step), a gather half of one: stage 2 takes
    1 + 1.5/2 DDP steps and stage 3 (two gathers) 1 + 2 x 1.5/2, where their bytes are 1.5
    and 2 DDP steps'. From three ranks on each gather takes its bytes' time, and NCCL's
    never staggers. What counts is the ranks, not the hosts."""
    gathers = stage - 1
    two = _step_s(2, "cpu", "zero", stage) / _step_s(2, "cpu", "ddp")
    assert two == pytest.approx(1 + gathers * 1.5 / 2, rel=0.01)
    three = _step_s(3, "cpu", "zero", stage) / _step_s(3, "cpu", "ddp")
    assert three == pytest.approx(1 + gathers / 2, rel=0.01)
    # Two hosts of two ranks each are a ring of four: its neighbours differ, nothing waits.
    four = _step_s(2, "cpu", "zero", stage, 2) / _step_s(2, "cpu", "ddp", gpus_per_host=2)
    assert four == pytest.approx(1 + gathers / 2, rel=0.01)
    nccl = _step_s(2, "V100", "zero", stage) / _step_s(2, "V100", "ddp")
    assert nccl == pytest.approx(gathers / 2 + 0.5, rel=0.01)


def test_a_two_rank_gloo_gather_still_sends_each_shard_once() -> None:
    """The stagger delays the first rank's halves; it adds no bytes: each of two hosts sends
    its shard once per gather (3(n-1)/n B per ZeRO-2 step, as without it)."""
    assert _sent_per_rank_per_step(2, "cpu", ZERO2) == pytest.approx(3.0)
    assert gather_stagger("gloo", 2) == 0.5
    assert gather_stagger("gloo", 3) == gather_stagger("nccl", 2) == 0.0
    assert gather_stagger("gloo", 2, hybrid=True) == 0.0


def test_the_library_is_gloo_on_cpus_and_nccl_on_gpus() -> None:
    path = TINY_DDP
    assert collective_library(load_scenario(path)) == "gloo"
    assert collective_library(load_scenario(path, ["cluster.hosts[0].gpu=A100"])) == "nccl"


def test_fsdp_wraps_each_block_and_keeps_the_rest_in_its_root_unit() -> None:
    """Embeddings and the head (with the final norm) are the root; the numbered blocks are
    units of their own. A model with no numbered blocks is wrapped layer by layer."""
    gpt2 = zoo.get("gpt2")
    assert [gpt2.layers[i].name for i in root_layers(gpt2)] == [
        "transformer.embeddings",
        "lm_head",
    ]
    vit = zoo.get("vit_b_16")
    assert [vit.layers[i].name for i in root_layers(vit)] == ["conv_proj", "heads"]
    assert root_layers(zoo.get("resnet50")) == []


ZERO3 = ["kvstore.mode=zero", "kvstore.zero.stage=3"]


@pytest.mark.parametrize("hosts", [2, 3])
def test_stage_3_keeps_the_root_unit_gathered_from_forward_to_backward(hosts: int) -> None:
    """FULL_SHARD gathers every unit before forward, only the blocks again before backward
    (the root stays gathered), and reduce-scatters every gradient: over gloo 3(n-1)/n B plus
    (n-1)/n of the blocks' bytes, what realrun's kernel byte counts hold to 0.5%
    (tests/realrun/allreduce/test_data_parallel.py)."""
    sent = _sent_per_rank_per_step(hosts, "cpu", ZERO3)
    assert sent == pytest.approx(3.0 + _block_fraction())


@pytest.mark.parametrize("micro_batches", [2, 3])
def test_stage_3_gathers_and_reduce_scatters_every_micro_batch(micro_batches: int) -> None:
    """Under gradient accumulation FSDP (without no_sync, as Composer and realrun run it) and
    DeepSpeed's stage 3 gather each unit for every micro-batch's forward and backward and
    reduce-scatter every micro-batch's gradients: a step sends ``micro_batches`` times what a
    single micro-batch's step sends, where DDP (no_sync) sends the same once."""
    accumulate = [f"training.micro_batches={micro_batches}"]
    one = _sent_per_rank_per_step(2, "cpu", ZERO3)
    assert _sent_per_rank_per_step(2, "cpu", ZERO3 + accumulate) == pytest.approx(
        micro_batches * one
    )
    ddp = ["kvstore.mode=ddp"]
    assert _sent_per_rank_per_step(2, "cpu", ddp + accumulate) == pytest.approx(2.0)


def _arrays_job(hosts: int, stage: int, shard_group: str, mode: str = "zero") -> dict:
    """Communication only (module doc) on ``hosts`` hosts of 4 H100 over 8 Gbit/s NICs."""
    return {
        "cluster": {"hosts": [{"count": hosts, "gpus_per_host": 4, "gpu": "H100", "nic_gbps": 8}]},
        "model": {"arrays": [{"name": f"w{i}", "elements": 25_000_000} for i in range(8)]},
        "training": {"batch_per_gpu": 1, "precision": "bf16"},
        "kvstore": {"mode": mode, "zero": {"stage": stage, "shard_group": shard_group}},
        "simulation": {"warmup_iterations": 1, "measured_iterations": 3},
    }


def _nic_share_per_step(job: dict) -> tuple[float, float]:
    """Host 0's NIC bytes per step, as a multiple of (W-1)/W of the gradients' 400 MB, and
    the iteration's seconds."""
    s = scenario_from_dict(job)
    sim = Simulation(s, path="exact")
    result = sim.run()
    hosts = s.num_worker_hosts
    sent = next(st.bytes_carried for st in sim.net.link_stats() if st.name == "host0.egress")
    share = sent / result.iterations_measured / ((hosts - 1) / hosts * 400e6)
    return share, result.iteration_time_s


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("hosts", [2, 3])
def test_hsdp_sends_through_each_nic_what_ddp_sends(hosts: int, stage: int) -> None:
    """HSDP's gathers stay inside the host and its gradients' shards are all-reduced between
    hosts: 2(W-1)/W of the bytes leave each host per step, at stage 3 as at stage 2 (DDP's
    all-reduce), where FSDP's FULL_SHARD over the world sends 3(W-1)/W (two gathers and a
    reduce-scatter, each (W-1)/W between hosts)."""
    hsdp, _ = _nic_share_per_step(_arrays_job(hosts, stage, "host"))
    assert hsdp == pytest.approx(2.0)
    world, _ = _nic_share_per_step(_arrays_job(hosts, stage, "world"))
    assert world == pytest.approx(3.0 if stage == 3 else 2.0)


def test_hsdp_stage_3_takes_ddp_time_plus_its_gathers_over_nvlink() -> None:
    """With nothing but communication, HSDP at stage 3 lasts as long as DDP's all-reduce (400
    MB through a 1 GB/s NIC at 97%: 0.41 s) plus two gathers and the reduce-scatter inside the
    host, 3 x (g-1)/g x 400 MB at H100's NVLink rate (a few ms); FULL_SHARD over the world
    lasts 1.5 times as long."""
    ddp = _comm_only("ddp")
    _, hsdp = _nic_share_per_step(_arrays_job(2, 3, "host"))
    _, world = _nic_share_per_step(_arrays_job(2, 3, "world"))
    assert ddp == pytest.approx(0.4 / 0.97, rel=0.05)
    assert hsdp == pytest.approx(ddp, rel=0.02)
    assert hsdp > ddp
    assert world == pytest.approx(1.5 * hsdp, rel=0.05)


def test_hsdp_on_one_host_never_touches_the_network() -> None:
    s = scenario_from_dict(_arrays_job(1, 3, "host"))
    sim = Simulation(s, path="exact")
    sim.run()
    assert all(st.bytes_carried == 0 for st in sim.net.link_stats())


def _hooked(passes: int, arrays: int = 1, hosts: int = 2) -> float:
    """Communication only: ``arrays`` bf16 arrays of 25 M elements (50 MB each), over an H100's
    3,350 GB/s HBM, with ``passes`` comm-hook passes over each bucket."""
    scenario = scenario_from_dict(
        {
            "cluster": {
                "hosts": [{"count": hosts, "gpus_per_host": 1, "gpu": "H100", "nic_gbps": 8}]
            },
            "model": {"arrays": [{"name": f"w{i}", "elements": 25_000_000} for i in range(arrays)]},
            "training": {"batch_per_gpu": 1, "precision": "bf16"},
            "kvstore": {"mode": "ddp", "ddp": {"comm_hook_passes": passes}},
            "simulation": {"warmup_iterations": 1, "measured_iterations": 3},
        }
    )
    return simulate(scenario).iteration_time_s


@pytest.mark.parametrize("passes", [1, 2])
def test_a_comm_hook_reads_and_writes_the_bucket_before_its_all_reduce(passes: int) -> None:
    """One 50 MB bucket: each pass reads and writes it (100 MB) at 3,350 GB/s, 29.9 us, and
    the all-reduce (and so the step) starts that much later."""
    delay = _hooked(passes) - _hooked(0)
    assert delay == pytest.approx(passes * 2 * 50e6 / 3.35e12, rel=1e-6)


def test_a_comm_hook_s_passes_over_buckets_ready_together_run_one_after_another() -> None:
    """Four 50 MB buckets (each array above the 25 MiB cap) all complete at once on a lone GPU,
    whose all-reduce takes no time: the hooks share its compute stream, so the step waits for
    four passes, 4 x 29.9 us, not one."""
    assert _hooked(1, arrays=4, hosts=1) - _hooked(0, arrays=4, hosts=1) == pytest.approx(
        4 * 2 * 50e6 / 3.35e12, rel=1e-6
    )


def test_a_hook_before_a_long_all_reduce_delays_the_step_by_the_first_bucket_s_passes() -> None:
    """The same four buckets between two hosts: each all-reduce (~50 ms at 8 Gbit/s) outlasts
    the next bucket's passes, so only the first bucket's pass shows."""
    delay = _hooked(1, arrays=4) - _hooked(0, arrays=4)
    assert delay == pytest.approx(2 * 50e6 / 3.35e12, rel=1e-6)
