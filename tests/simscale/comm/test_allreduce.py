"""Ring and hierarchical all-reduce with tensor fusion (simscale.comm.allreduce), timed by hand.

Two hosts on a fair-share network of B = 1 GB/s NICs, 50 us of latency each (100 us a hop);
Horovod's cycle of 5 ms, 20 us of coordination per tensor, 10 us to send a message. A
collective costs its bytes over the NIC, one latency for the last byte, and the alpha-beta
model's fixed part: (network hops - 1) x (latency + send) + one send, plus NCCL's latency per
hop inside a host.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import simpy

from simscale.comm.allreduce import NVLINK_STEP_S, AllReduce, open_mpi_allreduce_steps
from simscale.network import Topology, make_network

B = 1e9
HOP_S = 100e-6  # one network hop's latency (two NICs of 50 us)
CYCLE_S = 5e-3
TENSOR_S = 20e-6
MSG_S = 10e-6
N = 1e6
PEER_Bps = 10e9  # NVLink-class link between a host's GPUs
FIXED_S = (2 - 1) * (HOP_S + MSG_S) + MSG_S  # two hosts: 2 network hops per collective


def ring(
    keys: list[float], *, gpus: int = 1, algorithm: str = "ring", fusion: float = 64e6, **kw: float
) -> tuple[simpy.Environment, AllReduce]:
    env = simpy.Environment()
    net = make_network("fairshare", env, Topology.uniform(2, B, HOP_S / 2))
    ar = AllReduce(
        env,
        net,
        (0, 1),
        gpus,
        PEER_Bps,
        keys,
        algorithm,
        fusion,
        CYCLE_S,
        MSG_S,
        HOP_S,
        tensor_overhead_s=TENSOR_S,
        **kw,  # type: ignore[arg-type]
    )
    return env, ar


def ready(
    env: simpy.Environment, ar: AllReduce, worker: int, key: int, at_s: float, done: dict
) -> None:
    hook = ar.member(worker)
    record: Callable[[float], None] = lambda w: done.__setitem__((worker, key), (env.now, w))  # noqa: E731
    env.timeout(at_s).callbacks.append(lambda _e: hook.communicate(0, key, record))


def test_a_ring_of_two_hosts_starts_a_cycle_after_the_last_worker_is_ready() -> None:
    """Worker 1 has the 1 MB gradient 1 ms after worker 0. The coordinator waits for it, then
    a cycle (5 ms), one tensor's coordination (20 us); the ring moves 2(N-1)/N x 1 MB = 1 MB
    each way (1000 + 100 us) and pays its fixed part (120 us): done at 7.24 ms for both, worker
    0 having waited 1 ms for worker 1."""
    env, ar = ring([N])
    done: dict = {}
    ready(env, ar, 0, 0, 0.0, done)
    ready(env, ar, 1, 0, 1e-3, done)
    env.run(until=1.0)
    end = 1e-3 + CYCLE_S + TENSOR_S + N / B + HOP_S + FIXED_S
    assert end == pytest.approx(7240e-6, rel=1e-12)
    assert done[(0, 0)] == pytest.approx((end, 1e-3), rel=1e-9)
    assert done[(1, 0)] == pytest.approx((end, 0.0), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(
    ("fusion", "expected"),
    [
        # 1.5 MB buffers: one key each, reduced one after the other (5000 + 1240 + 1240 us).
        (1.5e6, {0: 6240e-6, 1: 7480e-6}),
        # 64 MB: both in one buffer, 2 x 20 us of coordination, 2 MB on the ring: 7260 us.
        (64e6, {0: 7260e-6, 1: 7260e-6}),
    ],
)
def test_tensors_ready_in_one_cycle_are_fused_up_to_the_buffer(fusion: float, expected) -> None:
    env, ar = ring([N, N], fusion=fusion)
    done: dict = {}
    for w in (0, 1):
        for key in (0, 1):
            ready(env, ar, w, key, 0.0, done)
    env.run(until=1.0)
    for key, t in expected.items():
        assert done[(0, key)][0] == pytest.approx(t, rel=1e-9)
        assert done[(1, key)][0] == pytest.approx(t, rel=1e-9)


def test_a_transport_ceiling_holds_the_ring_and_is_reported() -> None:
    """At a 4 Gbit/s ceiling (0.5 GB/s) a host's 1 MB leaves in 2 ms, longer than the NIC's
    1.1 ms: done at 5000 + 20 + 2000 + 120 us, the transport busy 2 ms of the window."""
    env, ar = ring([N], ceiling_gbps=4.0, ceiling_why="2 NCCL TCP connection(s)")
    done: dict = {}
    ready(env, ar, 0, 0, 0.0, done)
    ready(env, ar, 1, 0, 0.0, done)
    env.run(until=1.0)
    end = CYCLE_S + TENSOR_S + N / 0.5e9 + FIXED_S
    assert done[(0, 0)][0] == pytest.approx(end, rel=1e-9)
    (u,) = ar.utilization(0.0, end)
    assert (u.resource, u.kind) == ("ring.transport", "transport")
    assert u.busy_fraction == pytest.approx(2e-3 / end, rel=1e-9)
    assert u.description == (
        "each host's ring between hosts at its 4.0 Gbit/s (2 NCCL TCP connection(s))"
    )


def test_without_a_ceiling_nothing_is_reported_for_the_transport() -> None:
    _env, ar = ring([N])
    assert ar.utilization(0.0, 1.0) == []


def test_hierarchical_reduces_inside_the_host_around_the_ring_between_hosts() -> None:
    """Two GPUs per host: reduce-scatter and all-gather over the 10 GB/s peer link take
    2(g-1)/g x 1 MB / 10 GB/s = 100 us together (50 before, 50 after); between the hosts a
    ring of two moves 1 MB each way (1100 us) and pays 120 us: 5000 + 20 + 50 + 1220 + 50."""
    env, ar = ring([N], gpus=2, algorithm="hierarchical")
    done: dict = {}
    ready(env, ar, 0, 0, 0.0, done)
    ready(env, ar, 1, 0, 0.0, done)
    env.run(until=1.0)
    intra_s = 2 * (2 - 1) / 2 * N / PEER_Bps
    end = CYCLE_S + TENSOR_S + intra_s / 2 + N / B + HOP_S + FIXED_S + intra_s / 2
    assert end == pytest.approx(6340e-6, rel=1e-12)
    assert done[(0, 0)][0] == pytest.approx(end, rel=1e-9)


def test_a_flat_ring_over_four_gpus_pays_nccls_latency_per_hop_inside_a_host() -> None:
    """Four GPUs on two hosts, one ring: 2(4-1) = 6 steps of a 250 kB chunk, of which 2 cross
    the network: each host sends 1.5 MB (1500 + 100 us; the 6 x 25 us inside the host overlap
    it); fixed part 120 us plus 4 hops inside a host at NCCL's 3.4 us."""
    env, ar = ring([N], gpus=2)
    done: dict = {}
    ready(env, ar, 0, 0, 0.0, done)
    ready(env, ar, 1, 0, 0.0, done)
    env.run(until=1.0)
    end = CYCLE_S + TENSOR_S + 6 * N / 4 / B + HOP_S + FIXED_S + 4 * NVLINK_STEP_S
    assert end == pytest.approx(6753.6e-6, rel=1e-12)
    assert done[(0, 0)][0] == pytest.approx(end, rel=1e-9)


def _submitted(gpus: int, fraction: float, across: float) -> float:
    """When one 1 MB collective (``fraction`` inside a host, ``across`` of the ring between
    hosts, ``AllReduce.submit``) ends, both workers ready at 0."""
    env, ar = ring([N], gpus=gpus, algorithm="hierarchical")
    ends: list[float] = []
    for _ in range(2):
        ar.submit("c", 0, 0, N, fraction, lambda _w: ends.append(env.now), across)
    env.run(until=1.0)
    assert len(ends) == 2
    return ends[0]


def test_an_hsdp_gather_stays_inside_the_host_and_pays_nvlink_hops_only() -> None:
    """HSDP's all-gather of 1 MB over a host of 4 GPUs: (g-1)/g x 1 MB at 10 GB/s = 75 us and
    g-1 = 3 ring hops at NCCL's 3.4 us; no network hop at all: 5000 + 20 + 75 + 10.2 us."""
    end = CYCLE_S + TENSOR_S + 3 / 4 * N / PEER_Bps + 3 * NVLINK_STEP_S
    assert end == pytest.approx(5105.2e-6, rel=1e-12)
    assert _submitted(4, 0.5, 0.0) == pytest.approx(end, rel=1e-9)


def test_an_hsdp_reduction_scatters_in_the_host_and_all_reduces_the_shard_between_hosts() -> None:
    """HSDP's gradient collective over 4 GPUs per host: the reduce-scatter inside the host (75
    us), then each GPU's 1/4 shard all-reduced between the two hosts, four rings whose sends
    leave the host together: 2(W-1)/W x 1 MB = 1 MB each way (1000 + 100 us) and the fixed part
    (120 us), as a whole all-reduce between hosts costs: 5000 + 20 + 75 + 1220 us."""
    end = CYCLE_S + TENSOR_S + 3 / 4 * N / PEER_Bps + N / B + HOP_S + FIXED_S
    assert end == pytest.approx(6315e-6, rel=1e-12)
    assert _submitted(4, 0.5, 1.0) == pytest.approx(end, rel=1e-9)


def test_a_reduce_scatter_over_the_world_takes_half_the_ring_between_hosts() -> None:
    """FSDP's reduce-scatter over both hosts (``across`` left to ``fraction``): half the
    host's time (75 us) and one of the ring's two steps, 0.5 MB each way (500 + 100 us); a
    single step has no further hop to wait for (``_ring``'s fixed part)."""
    end = CYCLE_S + TENSOR_S + 3 / 4 * N / PEER_Bps + N / 2 / B + HOP_S
    assert _submitted(4, 0.5, 0.5) == pytest.approx(end, rel=1e-9)


def test_host_memory_allreduce_copies_rings_over_every_gpu_and_sums_on_the_cpu() -> None:
    """reduce_in host, two GPUs per host: 1 MB copied to the host at 2 GB/s (500 us); one lone
    tensor, which Open MPI copies into the output buffer first (one pass at the 1 GB/s host
    rate: 1000 us); MPI's ring over the 4 ranks (1 MB is under 4 MiB: the plain ring), 6 steps
    of 250 kB: each host sends 1.5 MB (1500 + 100 us), and every step waits for the hop between
    hosts, whose latency and send the lockstep ring pays on all 6 (5 x 110 + 10 us); each rank
    sums 3 chunks of 250 kB at 1 GB/s (750 us); 500 us back to the GPU:
    5000 + 20 + 500 + 1000 + 2160 + 750 + 500."""
    env, ar = ring([N], gpus=2, host_copy_Bps=2e9, host_reduce_Bps=1e9)
    done: dict = {}
    ready(env, ar, 0, 0, 0.0, done)
    ready(env, ar, 1, 0, 0.0, done)
    env.run(until=1.0)
    ring_s = 6 * N / 4 / B + HOP_S + 5 * (HOP_S + MSG_S) + MSG_S
    end = CYCLE_S + TENSOR_S + N / 2e9 + N / 1e9 + ring_s + 3 * (N / 4) / 1e9 + N / 2e9
    assert end == pytest.approx(9930e-6, rel=1e-12)
    assert done[(0, 0)][0] == pytest.approx(end, rel=1e-9)


def test_host_memory_allreduce_on_one_host_pays_no_hop_between_hosts() -> None:
    """reduce_in host, four GPUs on ONE host: the same copies, pass and sums as above, but the
    lockstep ring's 6 steps stay inside the host (shared memory), each at the in-host hop's
    latency, not the network's: 5000 + 20 + 500 + 1000 + 6 x NVLINK_STEP_S + 750 + 500."""
    env = simpy.Environment()
    net = make_network("fairshare", env, Topology.uniform(1, B, HOP_S / 2))
    ar = AllReduce(
        env, net, (0,), 4, PEER_Bps, [N], "ring", 64e6, CYCLE_S, MSG_S, HOP_S,
        tensor_overhead_s=TENSOR_S, host_copy_Bps=2e9, host_reduce_Bps=1e9,
    )  # fmt: skip
    done: dict = {}
    ready(env, ar, 0, 0, 0.0, done)
    env.run(until=1.0)
    end = CYCLE_S + TENSOR_S + N / 2e9 + N / 1e9 + 6 * NVLINK_STEP_S + 3 * (N / 4) / 1e9
    end += N / 2e9
    assert done[(0, 0)][0] == pytest.approx(end, rel=1e-9)


def test_a_fused_host_buffer_above_a_mib_per_rank_goes_round_in_segments() -> None:
    """reduce_in host, one GPU per host (2 ranks), two 3 MB tensors fused into one 6 MB
    buffer: Horovod copies them into its fusion buffer and back out (two passes of 6 MB at
    1 GB/s: 12 ms); 6 MB is above 2 ranks x 1 MiB, so Open MPI runs the segmented ring:
    6e6 // 2,097,152 = 2 phases and a rest of 1,805,696 bytes, more than half a phase: 3
    phases x 1 step, then 1 all-gather step, 4 lockstep steps against the plain ring's 2; the
    ring's bytes are the same (2 blocks of 3 MB: 6000 + 100 us, 120 us fixed) and the 2 further
    steps pay 110 us each; one 3 MB block summed (3 ms); copies at 2 GB/s (3 ms each way):
    5000 + 40 + 3000 + 12000 + 6220 + 220 + 3000 + 3000."""
    env, ar = ring([3 * N, 3 * N], host_copy_Bps=2e9, host_reduce_Bps=1e9)
    done: dict = {}
    for worker in (0, 1):
        for key in (0, 1):
            ready(env, ar, worker, key, 0.0, done)
    env.run(until=1.0)
    ring_s = 2 * 3 * N / B + HOP_S + FIXED_S + 2 * (HOP_S + MSG_S)
    end = CYCLE_S + 2 * TENSOR_S + 6 * N / 2e9 + 2 * 6 * N / 1e9 + ring_s + 3 * N / 1e9
    end += 6 * N / 2e9
    assert end == pytest.approx(32480e-6, rel=1e-12)
    assert done[(1, 1)][0] == pytest.approx(end, rel=1e-9)


@pytest.mark.parametrize(
    ("nbytes", "ranks", "expected"),
    [
        # Under 10,000 bytes: recursive doubling, log2(8) = 3 exchanges; 6 ranks fold 2 extra
        # ranks in and out around log2(4) = 2.
        (4_000, 8, ("recursive_doubling", 3)),
        (4_000, 6, ("recursive_doubling", 4)),
        # Up to ranks MiB the plain ring: 2(n-1) steps.
        (16 * 2**20, 16, ("ring", 30)),
        # A 411,058,176-byte buffer (VGG-16's fc6 weights and bias) over 64 ranks: 64 MiB
        # phases, 6 whole (402,653,184 bytes) and a rest of 8,404,992, under half a phase:
        # 6 x 63 + 63 steps.
        (411_058_176, 64, ("segmented_ring", 441)),
        # The same over 16 ranks: 16 MiB phases, 24 whole and a rest of 8,404,992, above half
        # a phase (8,388,608): 25 x 15 + 15.
        (411_058_176, 16, ("segmented_ring", 390)),
        (1e9, 1, ("none", 0)),
    ],
)
def test_open_mpi_picks_its_allreduce_by_size_and_ranks(
    nbytes: float, ranks: int, expected: tuple[str, int]
) -> None:
    """Open MPI's fixed decision (coll_tuned_decision_fixed.c) and each algorithm's lockstep
    steps (coll_base_allreduce.c), derived by hand in the cases' comments."""
    assert open_mpi_allreduce_steps(nbytes, ranks) == expected
