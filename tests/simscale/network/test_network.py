"""The network models as the simulator sees them: transfer events fire at the derived times."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simscale.network import (
    FairShareNetwork,
    FifoNetwork,
    NetworkConfig,
    Nic,
    Topology,
    gbit_per_s,
    make_network,
    max_min_fair,
)

GB = 1e9  # bytes
B = 1e9  # NIC bytes/s in every direction: 1 GB takes exactly 1 s
LAT = 5e-6  # one-way NIC latency, s; a path costs 2 * LAT

BOTH = ["fairshare", "fifo"]


def run_transfers(net, env, transfers):
    """Start ``(name, at_s, src, dst, nbytes)`` transfers; return ``{name: arrival time}``."""
    done = {}

    def one(name, at, src, dst, nbytes):
        yield env.timeout(at)
        yield net.transfer(src, dst, nbytes)
        done[name] = env.now

    for t in transfers:
        env.process(one(*t))
    env.run()
    return done


def build(kind, hosts=4, **topo):
    env = simpy.Environment()
    net = make_network(kind, env, Topology.uniform(hosts, B, LAT, **topo))
    return env, net


@pytest.mark.parametrize("kind", BOTH)
def test_a_lone_transfer_takes_path_latency_plus_size_over_bandwidth(kind):
    """0.3 GB from host 0 to host 1: 2 * 5 us + 0.3 s."""
    env, net = build(kind)
    done = run_transfers(net, env, [("a", 0.0, 0, 1, 0.3 * GB)])
    assert done["a"] == pytest.approx(2 * LAT + 0.3, rel=1e-12)


@pytest.mark.parametrize("kind", BOTH)
def test_calibration_factors_scale_bandwidth_and_latency(kind):
    """bandwidth_factor 0.5 halves the usable rate, latency_factor 3 triples the latency:
    1 GB takes 1 / 0.5 = 2 s plus 3 * 2 * 5 us."""
    env = simpy.Environment()
    topo = Topology.uniform(2, B, LAT)
    net = make_network(kind, env, topo, NetworkConfig(bandwidth_factor=0.5, latency_factor=3.0))
    done = run_transfers(net, env, [("a", 0.0, 0, 1, GB)])
    assert done["a"] == pytest.approx(2.0 + 3 * 2 * LAT, rel=1e-12)


@pytest.mark.parametrize("kind", BOTH)
def test_a_stream_cap_limits_one_transfer_below_the_nic(kind):
    """stream_max_Bps 0.25 GB/s on a 1 GB/s NIC: 1 GB takes 4 s (plus latency)."""
    env = simpy.Environment()
    net = make_network(
        kind, env, Topology.uniform(2, B, LAT), NetworkConfig(stream_max_Bps=0.25 * B)
    )
    done = run_transfers(net, env, [("a", 0.0, 0, 1, GB)])
    assert done["a"] == pytest.approx(4.0 + 2 * LAT, rel=1e-12)


def test_two_simultaneous_transfers_out_of_one_host_each_take_twice_as_long():
    """Host 0 sends 1 GB to host 1 and 1 GB to host 2 at once: its egress is shared 1/2 each,
    so both last 2 s instead of 1 s."""
    env, net = build("fairshare")
    done = run_transfers(net, env, [("a", 0.0, 0, 1, GB), ("b", 0.0, 0, 2, GB)])
    assert done == pytest.approx({"a": 2.0 + 2 * LAT, "b": 2.0 + 2 * LAT}, rel=1e-12)


def test_a_late_joining_flow_slows_the_first_which_speeds_back_up_when_it_ends():
    """A: 1 GB h0->h1 at t=0; B: 0.25 GB h0->h2 at t=0.25.

    0 .. 0.25: A alone at 1 GB/s, 0.75 GB left. From 0.25 both at 0.5 GB/s: B needs
    0.25 / 0.5 = 0.5 s, ends sending at 0.75, while A sends 0.25 GB (0.5 GB left). Then A alone
    again at 1 GB/s: ends sending at 1.25 (instead of 1.0 without B). Each arrives 2 * LAT later.
    """
    env, net = build("fairshare")
    done = run_transfers(net, env, [("A", 0.0, 0, 1, GB), ("B", 0.25, 0, 2, 0.25 * GB)])
    assert done["B"] == pytest.approx(0.75 + 2 * LAT, rel=1e-12)
    assert done["A"] == pytest.approx(1.25 + 2 * LAT, rel=1e-12)


def test_incast_of_unequal_senders_into_one_ingress():
    """Hosts 1, 2, 3 send 1, 2 and 3 GB to host 0 at t=0; host 0's ingress is the bottleneck.

    All three at 1/3 GB/s: the 1 GB ends at 3 s (2 and 1 GB left on the others). Two at 1/2:
    the 2 GB one's last 1 GB takes 2 s, ends at 5 (1 GB left on the third). The third alone:
    ends at 6 = (1 + 2 + 3) GB / 1 GB/s — the ingress never idles.
    """
    env, net = build("fairshare")
    done = run_transfers(net, env, [(f"h{h}", 0.0, h, 0, h * GB) for h in (1, 2, 3)])
    assert done == pytest.approx({"h1": 3.0, "h2": 5.0, "h3": 6.0}, abs=3 * LAT)
    assert done["h3"] == pytest.approx(6.0 + 2 * LAT, rel=1e-12)


@pytest.mark.parametrize("senders", [2, 7, 31])
def test_incast_of_equal_senders_finishes_all_together(senders):
    """n senders of 1 GB into one host: each gets 1/n, all arrive at n seconds (+ latency)."""
    env, net = build("fairshare", hosts=senders + 1)
    done = run_transfers(net, env, [(h, 0.0, h, 0, GB) for h in range(1, senders + 1)])
    assert len(done) == senders
    assert list(done.values()) == pytest.approx([senders + 2 * LAT] * senders, rel=1e-12)


@pytest.mark.parametrize("kind", BOTH)
def test_a_same_host_transfer_skips_the_nic(kind):
    """A same-host copy of 1 GB at 4 GB/s takes 0.25 s, no latency, and does not slow a
    concurrent 1 GB transfer leaving that host (which still takes 1 s); no NIC carries it."""
    env = simpy.Environment()
    net = make_network(kind, env, Topology.uniform(2, B, LAT, intra_host_Bps=4 * B))
    done = run_transfers(net, env, [("local", 0.0, 0, 0, GB), ("remote", 0.0, 0, 1, GB)])
    assert done["local"] == pytest.approx(0.25, rel=1e-12)
    assert done["remote"] == pytest.approx(1.0 + 2 * LAT, rel=1e-12)
    carried = {s.name: s.bytes_carried for s in net.link_stats()}
    assert carried == pytest.approx(
        {"host0.egress": GB, "host0.ingress": 0, "host1.egress": 0, "host1.ingress": GB}
    )


@pytest.mark.parametrize("kind", BOTH)
def test_a_same_host_transfer_is_instant_without_an_intra_host_rate(kind):
    """Without intra_host_Bps a same-host transfer arrives at the instant it is sent."""
    env, net = build(kind)
    done = run_transfers(net, env, [("local", 0.5, 2, 2, GB)])
    assert done["local"] == 0.5


@pytest.mark.parametrize("kind", BOTH)
def test_an_empty_transfer_costs_only_the_latency(kind):
    """Zero bytes between hosts arrive one path latency later."""
    env, net = build(kind)
    assert run_transfers(net, env, [("z", 1.0, 0, 3, 0)])["z"] == pytest.approx(1.0 + 2 * LAT)


def test_oversubscribed_core_is_shared_by_disjoint_host_pairs():
    """4 hosts of 1 GB/s, oversubscription 4: one core link of 4 GB/s / 4 = 1 GB/s. Two
    transfers 0->1 and 2->3 share no NIC but share the core: 0.5 GB/s each, 1 GB takes 2 s."""
    env, net = build("fairshare", oversubscription=4.0)
    done = run_transfers(net, env, [("a", 0.0, 0, 1, GB), ("b", 0.0, 2, 3, GB)])
    assert done == pytest.approx({"a": 2.0 + 2 * LAT, "b": 2.0 + 2 * LAT}, rel=1e-12)
    core = next(s for s in net.link_stats() if s.name == "core")
    assert core.capacity_Bps == pytest.approx(1e9)
    assert core.bytes_carried == pytest.approx(2 * GB)


def test_a_non_blocking_core_changes_nothing():
    """Oversubscription 1 gives a core as fast as all NICs together: 0->1 and 2->3 take 1 s."""
    env, net = build("fairshare", oversubscription=1.0)
    done = run_transfers(net, env, [("a", 0.0, 0, 1, GB), ("b", 0.0, 2, 3, GB)])
    assert done == pytest.approx({"a": 1.0 + 2 * LAT, "b": 1.0 + 2 * LAT}, rel=1e-12)


def test_path_latency_is_the_sum_of_both_nics_latencies():
    """Host 0 NIC latency 1 ms, host 1 3 ms: an empty transfer takes 4 ms either way."""
    env = simpy.Environment()
    topo = Topology((Nic(B, B, 1e-3), Nic(B, B, 3e-3)))
    net = make_network("fairshare", env, topo)
    done = run_transfers(net, env, [("ab", 0.0, 0, 1, 0), ("ba", 0.0, 1, 0, 0)])
    assert done == pytest.approx({"ab": 4e-3, "ba": 4e-3}, rel=1e-12)


def test_asymmetric_nic_directions_limit_by_the_slower_end():
    """Host 0 egress 2 GB/s, host 1 ingress 0.5 GB/s: 1 GB moves at 0.5 GB/s, takes 2 s."""
    env = simpy.Environment()
    topo = Topology((Nic(2 * B, B, 0.0), Nic(B, 0.5 * B, 0.0)))
    for kind in BOTH:
        env = simpy.Environment()
        net = make_network(kind, env, topo)
        assert run_transfers(net, env, [("a", 0.0, 0, 1, GB)])["a"] == pytest.approx(2.0)


def test_fifo_serves_each_nic_in_arrival_order_without_backfilling():
    """FIFO rule: start = max(request, free(src egress), free(dst ingress)), hold both.

    a: 0->1, 1 GB at t=0: sends 0..1. b: 0->2, 1 GB at t=0.1: waits for h0.egress, 1..2.
    c: 3->2, 0.5 GB at t=0.2: h2.ingress is reserved by b until 2, so c sends 2..2.5 although
    h2.ingress is idle until 1 (no backfilling). d: 3->1 at t=0.3: h3.egress free at 2.5,
    h1.ingress at 1: sends 2.5..3.5 (d's 1 GB). Each arrives 2 * LAT after it ends.
    """
    env, net = build("fifo")
    done = run_transfers(
        net,
        env,
        [
            ("a", 0.0, 0, 1, GB),
            ("b", 0.1, 0, 2, GB),
            ("c", 0.2, 3, 2, 0.5 * GB),
            ("d", 0.3, 3, 1, GB),
        ],
    )
    expected = {"a": 1.0, "b": 2.0, "c": 2.5, "d": 3.5}
    assert done == pytest.approx({k: v + 2 * LAT for k, v in expected.items()}, rel=1e-12)


@pytest.mark.parametrize("kind", BOTH)
def test_stats_cover_only_the_window_after_reset(kind):
    """1 GB h0->h1 sends during 0..1 s; stats reset at 0.25 and read at 2 count the 0.75 GB
    sent after the reset, 0.75 busy seconds, over a 1.75 s window (utilisation 0.75 / 1.75)."""
    env, net = build(kind)
    net.transfer(0, 1, GB)
    env.run(until=0.25)
    net.reset_stats()
    env.run(until=2.0)
    stats = {s.name: s for s in net.link_stats()}
    for name in ("host0.egress", "host1.ingress"):
        s = stats[name]
        assert s.bytes_carried == pytest.approx(0.75 * GB, rel=1e-12)
        assert s.busy_s == pytest.approx(0.75, rel=1e-12)
        assert s.window_s == pytest.approx(1.75)
        assert s.utilization == pytest.approx(0.75 / 1.75, rel=1e-12)
        assert s.busy_fraction == pytest.approx(0.75 / 1.75, rel=1e-12)
    assert stats["host1.egress"].bytes_carried == 0
    assert stats["host1.egress"].busy_s == 0
    assert [s.name for s in net.link_stats()] == [
        f"host{h}.{d}" for h in range(4) for d in ("egress", "ingress")
    ]


def test_busy_time_counts_any_traffic_while_bytes_count_the_rate():
    """Incast 2 x 1 GB into host 0 from hosts 1, 2 over 0..2 s: host0.ingress is busy 2 s at
    full rate (2 GB), each sender's egress busy 2 s at half rate (1 GB, utilisation 0.5)."""
    env, net = build("fairshare")
    net.transfer(1, 0, GB)
    net.transfer(2, 0, GB)
    env.run(until=2.0)
    stats = {s.name: s for s in net.link_stats()}
    assert stats["host0.ingress"].bytes_carried == pytest.approx(2 * GB)
    assert stats["host0.ingress"].utilization == pytest.approx(1.0)
    assert stats["host1.egress"].busy_s == pytest.approx(2.0)
    assert stats["host1.egress"].utilization == pytest.approx(0.5)


def test_starts_at_one_instant_share_one_re_solve(monkeypatch):
    """100 transfers requested at t=0, some after zero-delay hops of their process (later
    events of the same instant), cause one re-solve for their start; all 100 (equal, disjoint
    pairs round-robin) end together, so their ends cause one more."""
    env = simpy.Environment()
    net = FairShareNetwork(env, Topology.uniform(10, B, 0.0))
    solves = []
    original = net._solve
    monkeypatch.setattr(net, "_solve", lambda: (solves.append(env.now), original())[1])

    def sender(i):
        for _ in range(i % 3):
            yield env.timeout(0)
        yield net.transfer(i % 10, (i + 1) % 10, GB)

    for i in range(100):
        env.process(sender(i))
    env.run()
    # Each host sends 10 and receives 10 flows: 1 GB/s / 10 each, 1 GB takes 10 s.
    assert env.now == pytest.approx(10.0)
    assert solves == [0.0, pytest.approx(10.0)]


@pytest.mark.parametrize("kind", BOTH)
def test_every_byte_sent_is_counted_once_on_each_link_of_its_path(kind):
    """Random traffic among 6 hosts: each NIC direction's bytes equal the sum of the transfers
    crossing it, and no transfer arrives sooner than latency + size / NIC rate."""
    rng = np.random.default_rng(7)
    env, net = build(kind, hosts=6)
    transfers = []
    for i in range(300):
        src, dst = rng.choice(6, size=2, replace=False).tolist()
        transfers.append((i, float(rng.uniform(0, 1.0)), src, dst, float(rng.uniform(1e3, 1e8))))
    done = run_transfers(net, env, transfers)
    expected_egress = np.zeros(6)
    expected_ingress = np.zeros(6)
    for name, at, src, dst, nbytes in transfers:
        expected_egress[src] += nbytes
        expected_ingress[dst] += nbytes
        assert done[name] >= at + 2 * LAT + nbytes / B - 1e-9
    stats = {s.name: s for s in net.link_stats()}
    for h in range(6):
        assert stats[f"host{h}.egress"].bytes_carried == pytest.approx(expected_egress[h])
        assert stats[f"host{h}.ingress"].bytes_carried == pytest.approx(expected_ingress[h])


def test_make_network_names_the_choices_for_an_unknown_kind():
    """An unknown model name raises a ValueError listing the valid ones."""
    env = simpy.Environment()
    with pytest.raises(ValueError, match="fairshare, fifo"):
        make_network("packet", env, Topology.uniform(2, B))


@pytest.mark.parametrize("kind", BOTH)
def test_make_network_builds_the_named_model(kind):
    """'fairshare' and 'fifo' build the matching class."""
    net = make_network(kind, simpy.Environment(), Topology.uniform(2, B))
    assert isinstance(net, {"fairshare": FairShareNetwork, "fifo": FifoNetwork}[kind])


@pytest.mark.parametrize("kind", BOTH)
@pytest.mark.parametrize(
    ("src", "dst", "nbytes", "message"),
    [
        (0, 4, 1.0, "host 4 out of range 0..3"),
        (0, 1, -1.0, "non-negative"),
        (0, 1, np.inf, "finite"),
    ],
)
def test_bad_transfers_are_rejected(kind, src, dst, nbytes, message):
    """Unknown hosts and negative or infinite sizes raise a ValueError at the call."""
    _env, net = build(kind)
    with pytest.raises(ValueError, match=message):
        net.transfer(src, dst, nbytes)


def test_topology_rejects_impossible_hardware():
    """Zero bandwidth, negative latency and an oversubscription below 1 are refused."""
    with pytest.raises(ValueError, match="egress_Bps"):
        Nic(0.0, B)
    with pytest.raises(ValueError, match="latency_s"):
        Nic(B, B, -1.0)
    with pytest.raises(ValueError, match="oversubscription"):
        Topology.uniform(2, B, oversubscription=0.5)


def test_gbit_conversion_uses_decimal_giga_and_eight_bits():
    """A 25 Gbit/s NIC carries 3.125e9 bytes/s."""
    assert gbit_per_s(25) == 3.125e9


@pytest.mark.parametrize("start_s", [0.0, 1e4, 1e8])
def test_tiny_and_large_transfers_complete_late_in_a_long_run(start_s):
    """Where the clock's resolution is coarse (ulp(1e8 s) = 15 ns), a 1-byte transfer (1 ns at
    1 GB/s) still completes, within a few ulps of start + 1 ns, and a 1 GB one at start + 1 s."""
    env = simpy.Environment(initial_time=start_s)
    net = make_network("fairshare", env, Topology.uniform(2, B, 0.0))
    done = run_transfers(net, env, [("byte", 0.0, 0, 1, 1.0), ("gb", 0.0, 1, 0, GB)])
    assert done["byte"] == pytest.approx(start_s + 1e-9, abs=4 * math.ulp(start_s) + 1e-12)
    assert done["gb"] == pytest.approx(start_s + 1.0, abs=4 * math.ulp(start_s) + 1e-12)


def reference_fluid_arrivals(topo, transfers, latency_s):
    """Independent fluid simulation: re-solve every flow from scratch at every start and end.

    ``transfers`` are ``(start_s, src, dst, nbytes)`` between distinct hosts; returns each one's
    arrival time. No classes, no incremental state: the yardstick for FairShareNetwork.
    """
    cap = topo.link_capacities_Bps()
    starts = sorted(range(len(transfers)), key=lambda i: transfers[i][0])
    remaining = {}
    arrival = {}
    now = 0.0
    while starts or remaining:
        while starts and transfers[starts[0]][0] <= now:
            i = starts.pop(0)
            remaining[i] = transfers[i][3]
        live = sorted(remaining)
        paths = [topo.path(transfers[i][1], transfers[i][2]) for i in live]
        rates = max_min_fair(cap, paths) if live else []
        next_start = transfers[starts[0]][0] if starts else math.inf
        next_end = min(
            (remaining[i] / r for i, r in zip(live, rates, strict=True)), default=math.inf
        )
        step = min(next_start - now, next_end)
        for i, r in zip(live, rates, strict=True):
            remaining[i] -= r * step
        now += step
        for i in live:
            if remaining[i] <= 1e-9 * transfers[i][3]:
                del remaining[i]
                arrival[i] = now + latency_s
    return arrival


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.1, 0.25, 0.5]),
            st.integers(0, 3),
            st.integers(1, 3),
            st.sampled_from([0.05, 0.1, 0.3, 1.0]),
        ),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from([None, 2.0]),
)
def test_fair_share_network_matches_a_from_scratch_fluid_simulation(raw, oversubscription):
    """Random transfers among 4 hosts (some starting together, some ending together): every
    arrival equals that of an independent fluid simulation that re-solves all flows at each
    event, so batching, per-pair classes and packed state change no timing."""
    transfers = [(t, src, (src + hop) % 4, size * GB) for t, src, hop, size in raw]
    topo = Topology.uniform(4, B, LAT, oversubscription=oversubscription)
    env = simpy.Environment()
    net = make_network("fairshare", env, topo)
    done = run_transfers(net, env, [(i, *tr) for i, tr in enumerate(transfers)])
    expected = reference_fluid_arrivals(topo, transfers, 2 * LAT)
    assert done == pytest.approx(expected, rel=1e-9)


def test_fifo_core_caps_the_rate_but_queues_nothing():
    """FIFO with oversubscription 8 on 4 hosts of 1 GB/s: the core is 4 / 8 = 0.5 GB/s. It caps
    each transfer at 0.5 GB/s but is no FIFO server, so 0->1 and 2->3 (1 GB each) both take 2 s
    at once; the core is busy 2 s (the union of the two intervals) and carried 2 GB."""
    env, net = build("fifo", oversubscription=8.0)
    done = run_transfers(net, env, [("a", 0.0, 0, 1, GB), ("b", 0.0, 2, 3, GB)])
    assert done == pytest.approx({"a": 2.0 + 2 * LAT, "b": 2.0 + 2 * LAT}, rel=1e-12)
    core = next(s for s in net.link_stats() if s.name == "core")
    assert core.bytes_carried == pytest.approx(2 * GB)
    assert core.busy_s == pytest.approx(2.0)


# ----- connections: messages of one connection leave back to back as one flow ----------------


def test_a_busy_connection_is_one_flow_re_solved_only_when_it_starts_and_stops(monkeypatch):
    """Ten 0.1 GB messages handed at once to one connection from host 0 to host 1 leave one
    after another at the full 1 GB/s: message k (k = 1..10) has left at 0.1 k s and arrives
    2 * LAT later. The flow set changes only at 0 (busy) and 1.0 s (idle): two re-solves,
    where ten separate transfers sent one after another would need eleven."""
    env, net = build("fairshare")
    solves = []
    original = net._solve
    monkeypatch.setattr(net, "_solve", lambda: (solves.append(env.now), original())[1])
    sent, arrived = {}, {}
    for k in range(1, 11):
        net.transfer(
            0, 1, 0.1 * GB, on_sent=lambda k=k: sent.setdefault(k, env.now), connection="c"
        ).callbacks.append(lambda _e, k=k: arrived.setdefault(k, env.now))
    env.run()
    assert sent == pytest.approx({k: 0.1 * k for k in range(1, 11)}, rel=1e-12)
    assert arrived == pytest.approx({k: 0.1 * k + 2 * LAT for k in range(1, 11)}, rel=1e-12)
    assert solves == [0.0, pytest.approx(1.0)]


def test_a_connection_keeps_its_fair_share_across_message_boundaries(monkeypatch):
    """Connection 0->1 carries two 0.5 GB messages while a plain 1 GB transfer 0->2 shares
    host 0's egress: 0.5 GB/s each. The first message leaves at 1 s, the second at 2 s, the
    plain transfer at 2 s; the boundary at 1 s changes no rate and needs no re-solve."""
    env, net = build("fairshare")
    solves = []
    original = net._solve
    monkeypatch.setattr(net, "_solve", lambda: (solves.append(env.now), original())[1])
    done = {}
    for name, dst, nbytes, conn in (
        ("m1", 1, GB / 2, "c"),
        ("m2", 1, GB / 2, "c"),
        ("p", 2, GB, None),
    ):
        net.transfer(0, dst, nbytes, connection=conn).callbacks.append(
            lambda _e, n=name: done.setdefault(n, env.now)
        )
    env.run()
    assert done == pytest.approx({"m1": 1 + 2 * LAT, "m2": 2 + 2 * LAT, "p": 2 + 2 * LAT})
    assert solves == [0.0, pytest.approx(2.0)]
    carried = {s.name: s.bytes_carried for s in net.link_stats()}
    assert carried["host1.ingress"] == pytest.approx(GB)
    assert carried["host0.egress"] == pytest.approx(2 * GB)


@pytest.mark.parametrize("kind", BOTH)
def test_a_busy_connection_cannot_change_its_hosts(kind):
    """A connection joins one host pair while it has messages queued."""
    _env, net = build(kind)
    net.transfer(0, 1, GB, connection="c")
    with pytest.raises(ValueError, match="connection 'c' is busy from host 0 to host 1"):
        net.transfer(0, 2, GB, connection="c")


def send_per_message(net, env, messages, record):
    """The per-message path: each connection's messages are separate transfers, each requested
    when the one before it has left (what Stream did before connections existed). ``messages``
    are ``(name, at_s, conn, src, dst, nbytes)``; ``record[name]`` gets (sent, arrived)."""
    queues, busy = {}, set()

    def start(name, conn, src, dst, nbytes):
        busy.add(conn)

        def left():
            record[name][0] = env.now
            busy.discard(conn)
            if queues[conn]:
                start(*queues[conn].pop(0))

        net.transfer(src, dst, nbytes, on_sent=left).callbacks.append(
            lambda _e: record[name].__setitem__(1, env.now)
        )

    def hand_over(name, conn, src, dst, nbytes):
        record[name] = [None, None]
        queues.setdefault(conn, [])
        if conn in busy:
            queues[conn].append((name, conn, src, dst, nbytes))
        else:
            start(name, conn, src, dst, nbytes)

    for name, at, conn, src, dst, nbytes in messages:
        env.timeout(at).callbacks.append(lambda _e, m=(name, conn, src, dst, nbytes): hand_over(*m))
    env.run()


def send_on_connections(net, env, messages, record):
    """The connection path: every message handed to the network at once with its connection."""

    def hand_over(name, conn, src, dst, nbytes):
        record[name] = [None, None]
        net.transfer(
            src,
            dst,
            nbytes,
            on_sent=lambda: record[name].__setitem__(0, env.now),
            connection=conn,
        ).callbacks.append(lambda _e: record[name].__setitem__(1, env.now))

    for name, at, conn, src, dst, nbytes in messages:
        env.timeout(at).callbacks.append(lambda _e, m=(name, conn, src, dst, nbytes): hand_over(*m))
    env.run()


# Four connections over 4 hosts, two sharing host 0's egress, one same-host (a copy).
CONNECTIONS = {"a": (0, 1), "b": (0, 2), "c": (3, 0), "local": (2, 2)}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.1, 0.25, 0.5]),
            st.sampled_from(sorted(CONNECTIONS)),
            st.sampled_from([0.0, 0.05, 0.1, 0.3, 1.0]),
        ),
        min_size=1,
        max_size=16,
    ),
    st.sampled_from(BOTH),
    st.sampled_from([None, 2.0]),
)
def test_connections_change_no_timing_against_one_transfer_per_message(raw, kind, oversub):
    """Random messages on four connections (some at one instant, some empty, one a same-host
    copy): sending each connection's messages as one flow gives every message the same sent
    and arrival time as sending each as its own transfer once the one before it has left, and
    every link the same bytes."""
    messages = [
        (i, at, conn, *CONNECTIONS[conn], size * GB) for i, (at, conn, size) in enumerate(raw)
    ]
    topo = Topology.uniform(4, B, LAT, oversubscription=oversub, intra_host_Bps=4 * B)
    results = []
    for send in (send_per_message, send_on_connections):
        env = simpy.Environment()
        net = make_network(kind, env, topo)
        record = {}
        send(net, env, messages, record)
        results.append((record, {s.name: s.bytes_carried for s in net.link_stats()}))
    (old, old_bytes), (new, new_bytes) = results
    assert set(new) == set(old)
    for name in old:
        assert new[name] == pytest.approx(old[name], rel=1e-9, abs=1e-12), name
    assert new_bytes == pytest.approx(old_bytes, rel=1e-9)


# ----- re-solving by replaying the unchanged start of the previous solve ---------------------


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 29), st.booleans()), min_size=1, max_size=3),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from([None, 3.0]),
    st.sampled_from([math.inf, 0.3 * B]),
    st.integers(0, 2**32 - 1),
)
def test_refill_gives_exactly_the_rates_of_a_solve_from_scratch(steps, oversub, bound, seed):
    """Random changes of the flow counts of path classes among 6 hosts of unequal NICs (a
    batch of 1-3 per step): after every step the rates RefillSolver recomputed, over the rates
    it kept from earlier solves, equal fill_heap's from scratch bit for bit."""
    from simscale.network.fairshare import fill_heap
    from simscale.network.refill import RefillSolver

    rng = np.random.default_rng(seed)
    nics = [Nic(float(e), float(i), 0.0) for e, i in rng.choice([0.5, 1.0, 2.0], (6, 2)) * B]
    topo = Topology(tuple(nics), oversub)
    cap = topo.link_capacities_Bps()
    paths = [topo.path(s, d) for s in range(6) for d in range(6) if s != d]
    count = [0] * len(paths)
    members = [{} for _ in cap]
    n_on_link = [0] * len(cap)
    solver = RefillSolver(cap)
    kept = {}
    for batch in steps:
        changed = set()
        for cls, grow in batch:
            delta = 1 if grow or not count[cls] else -1
            count[cls] += delta
            for link in paths[cls]:
                n_on_link[link] += delta
                if count[cls]:
                    members[link][cls] = None
                else:
                    del members[link][cls]
            changed.update(paths[cls])
        kept.update(solver.solve(members, n_on_link, paths, count, changed, bound))
        fresh = fill_heap(cap, members, n_on_link, paths, count, uniform_bound=bound)
        assert {cls: kept[cls] for cls in fresh} == fresh


def test_refill_replays_the_rounds_a_change_cannot_reach():
    """Host 0's egress at 0.5 GB/s carries 0->1 and 0->2 (0.25 GB/s each, round 1); 3->4 alone
    fills its 1 GB/s link later (round 2). Adding a flow 5->4 touches host 4's ingress only:
    round 1 replays, and only the classes on host 4's ingress are recomputed (0.5 each)."""
    from simscale.network.refill import RefillSolver

    nics = [Nic(0.5 * B, B, 0.0)] + [Nic(B, B, 0.0)] * 5
    topo = Topology(tuple(nics), None)
    cap = topo.link_capacities_Bps()
    paths = [topo.path(0, 1), topo.path(0, 2), topo.path(3, 4), topo.path(5, 4)]
    count = [1, 1, 1, 0]
    members = [{} for _ in cap]
    n_on_link = [0] * len(cap)
    for cls in range(3):
        for link in paths[cls]:
            members[link][cls] = None
            n_on_link[link] += 1
    solver = RefillSolver(cap)
    assert solver.solve(members, n_on_link, paths, count, set(range(len(cap)))) == {
        0: 0.25 * B,
        1: 0.25 * B,
        2: B,
    }
    count[3] = 1
    for link in paths[3]:
        members[link][3] = None
        n_on_link[link] += 1
    assert solver.solve(members, n_on_link, paths, count, set(paths[3])) == {2: B / 2, 3: B / 2}


# ----- unequal TCP shares (fair-share model) --------------------------------------------------


def test_unequal_shares_split_a_link_by_weight_and_waste_none_of_it():
    """Host 0 sends 0.5 GB to host 1 and 0.5 GB to host 2: with share weights the two finish
    at different times, but the egress stays full, so the last finishes at 1 s as with equal
    shares, and the first finishes no later than with equal shares."""
    env = simpy.Environment()
    net = make_network(
        "fairshare", env, Topology.uniform(3, B, LAT), NetworkConfig(share_sigma=0.5, seed=3)
    )
    done = run_transfers(net, env, [("a", 0.0, 0, 1, GB / 2), ("b", 0.0, 0, 2, GB / 2)])
    first, last = sorted(done.values())
    assert last == pytest.approx(1.0 + 2 * LAT, rel=1e-9)
    assert first < 1.0 + 2 * LAT - 1e-3


def test_share_weights_follow_the_seed():
    def times(seed):
        env = simpy.Environment()
        net = make_network(
            "fairshare", env, Topology.uniform(4, B, LAT), NetworkConfig(share_sigma=0.5, seed=seed)
        )
        return run_transfers(net, env, [(s, 0.0, s, 3, 0.1 * GB) for s in range(3)])

    assert times(1) == times(1)
    assert times(1) != times(2)


def test_weighted_shares_are_exact_for_drawn_weights():
    """Three senders into host 3 with weights w_s: sender s gets w_s / sum(w) of the ingress
    until the first finishes (all send the same 0.1 GB), so the first finishes at
    0.1 GB / (B w_max / sum w); the last at 0.3 s, the link never idle."""
    env = simpy.Environment()
    net = make_network(
        "fairshare", env, Topology.uniform(4, B, LAT), NetworkConfig(share_sigma=0.8, seed=7)
    )
    done = run_transfers(net, env, [(s, 0.0, s, 3, 0.1 * GB) for s in range(3)])
    # Each host pair's first busy period takes the first draw of its own stream (seed, src, dst).
    z = np.array([np.random.default_rng((7, s, 3)).standard_normal() for s in range(3)])
    w = np.exp(0.8 * z)
    assert min(done.values()) == pytest.approx(0.1 / (w.max() / w.sum()) + 2 * LAT, rel=1e-9)
    assert max(done.values()) == pytest.approx(0.3 + 2 * LAT, rel=1e-9)


def test_a_host_pairs_draws_do_not_depend_on_unrelated_traffic():
    """Common random numbers: 0 -> 3 and 1 -> 3 finish at the same times whether or not an
    unrelated pair (2 -> 1, sharing no link with them) started its busy period first."""

    def times(extra):
        env = simpy.Environment()
        net = make_network(
            "fairshare", env, Topology.uniform(4, B, LAT), NetworkConfig(share_sigma=0.8, seed=5)
        )
        return run_transfers(
            net, env, [*extra, ("a", 0.0, 0, 3, 0.1 * GB), ("b", 0.0, 1, 3, 0.1 * GB)]
        )

    alone = times([])
    with_other = times([("other", 0.0, 2, 1, 0.01 * GB)])
    assert (with_other["a"], with_other["b"]) == (alone["a"], alone["b"])


def test_zero_spread_is_plain_max_min():
    env = simpy.Environment()
    net = make_network(
        "fairshare", env, Topology.uniform(4, B, LAT), NetworkConfig(share_sigma=0.0, seed=7)
    )
    done = run_transfers(net, env, [(s, 0.0, s, 3, 0.1 * GB) for s in range(3)])
    assert done == pytest.approx({s: 0.3 + 2 * LAT for s in range(3)}, rel=1e-12)


@pytest.mark.parametrize("sigma", [-0.1, math.inf, math.nan])
def test_an_impossible_share_spread_is_rejected(sigma):
    with pytest.raises(ValueError, match="share_sigma"):
        make_network(
            "fairshare",
            simpy.Environment(),
            Topology.uniform(2, B, LAT),
            NetworkConfig(share_sigma=sigma),
        )


@given(
    weights=st.lists(st.floats(0.05, 20.0), min_size=1, max_size=6),
    caps=st.lists(st.floats(0.5, 5.0), min_size=3, max_size=3),
)
@settings(max_examples=60, deadline=None)
def test_fractional_weights_fill_progressively_and_terminate(weights, caps):
    """solve_rounds with real-valued weights (the share weights): every flow crosses link 0
    and one of links 1, 2; no link is overfilled and every flow meets a full link."""
    from simscale.network.fairshare import solve_rounds

    n = len(weights)
    links = np.array([[0, 1 + i % 2] for i in range(n)])
    cap_ext = np.array([*caps, np.inf])
    w = np.array(weights)
    rate = solve_rounds(cap_ext, links, np.full(n, np.inf), w)
    load = np.bincount(links.ravel(), weights=np.repeat(rate * w, 2), minlength=4)[:3]
    assert np.all(load <= cap_ext[:3] * (1 + 1e-9))
    full = load >= cap_ext[:3] * (1 - 1e-9)
    assert all(full[links[i]].any() for i in range(n))
