"""Streams: one in-order connection per process pair, over either network model.

Hosts have 1 GB/s NICs and 5 us latency each, so 1 GB takes 1 s and a path costs 10 us; a
stream's own latency (what a control message takes) is given as the path's.
"""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simscale.network import Topology, make_network
from simscale.network.arrival import Arrival
from simscale.network.stream import CONTROL_MESSAGE_BYTES, Stream

GB = 1e9
B = 1e9
LAT = 5e-6
PATH = 2 * LAT
CTRL = CONTROL_MESSAGE_BYTES


def sends(env, stream, messages, done):
    """Hand ``(name, at_s, nbytes, rank)`` messages to ``stream``; ``done[name]`` = arrival."""
    for name, at, nbytes, rank in messages:

        def hand_over(_e, name=name, nbytes=nbytes, rank=rank):
            stream.send(nbytes, lambda: done.setdefault(name, env.now), rank)

        env.timeout(at).callbacks.append(hand_over)


def one_stream(kind, messages, priority=False, window_bytes=0.0):
    env = simpy.Environment()
    net = make_network(kind, env, Topology.uniform(2, B, LAT))
    stream = Stream(env, net, 0, 1, PATH, priority=priority, window_bytes=window_bytes)
    done = {}
    sends(env, stream, messages, done)
    env.run()
    return done


@pytest.mark.parametrize("kind", ["fairshare", "fifo"])
def test_fifo_messages_leave_back_to_back_in_order(kind):
    """Three messages at t=0 of 0.5, 0.25 and 0.25 GB leave at 0.5, 0.75 and 1.0 s."""
    done = one_stream(kind, [("a", 0, GB / 2, 0), ("b", 0, GB / 4, 0), ("c", 0, GB / 4, 0)])
    assert done == pytest.approx({"a": 0.5 + PATH, "b": 0.75 + PATH, "c": 1.0 + PATH})


@pytest.mark.parametrize("kind", ["fairshare", "fifo"])
def test_a_control_message_waits_for_the_data_ahead_of_it(kind):
    """Data 1 GB, then a control message, then 0.5 GB, all at t=0: the control message leaves
    when the 1 GB has left (1 s) and takes one latency; the 0.5 GB follows the 1 GB."""
    done = one_stream(kind, [("d1", 0, GB, 0), ("ctl", 0, CTRL, 0), ("d2", 0, GB / 2, 0)])
    assert done == pytest.approx({"d1": 1 + PATH, "ctl": 1 + PATH, "d2": 1.5 + PATH})


def test_a_control_message_on_an_idle_stream_takes_only_the_latency():
    """Nothing ahead of it: it arrives one latency after it was sent."""
    assert one_stream("fairshare", [("ctl", 0.25, CTRL, 0)]) == {"ctl": 0.25 + PATH}


def test_priority_with_no_window_sends_the_lowest_rank_next():
    """Window 0: one message in the socket at a time. At t=0 ranks 5, 9, 1 (0.5 GB each) are
    sent; rank 5 is in the socket at once and leaves at 0.5 s; then rank 1 (at 1.0 s), then
    rank 9 (at 1.5 s). A control message without a rank (an ack) sent at 0.1 s leaves before
    any data still waiting: right after rank 5 has left, at 0.5 s."""
    done = one_stream(
        "fairshare",
        [
            ("r5", 0, GB / 2, 5),
            ("r9", 0, GB / 2, 9),
            ("r1", 0, GB / 2, 1),
            ("ack", 0.1, CTRL, None),
        ],
        priority=True,
    )
    assert done == pytest.approx(
        {"r5": 0.5 + PATH, "ack": 0.5 + PATH, "r1": 1.0 + PATH, "r9": 1.5 + PATH}
    )


def test_a_pull_request_queues_at_its_keys_rank_behind_its_push():
    """realrun's Postoffice orders a connection's messages by (priority, sequence), so a
    pushpull's pull request (no payload, its key's rank) sits right behind its own push. Window
    0; at t=0 pushes of ranks 5, 9 and 7 (0.5 GB each), at 0.1 s key 7's pull request: rank 5
    leaves at 0.5 s, rank 7 at 1.0 s, the pull request once rank 7 has left (1.0 s, plus the
    latency), ahead of rank 9 (1.5 s). Before, as a control message, it went first of all the
    waiting data and reached the server before its own push (0.5 s)."""
    done = one_stream(
        "fairshare",
        [("r5", 0, GB / 2, 5), ("r9", 0, GB / 2, 9), ("r7", 0, GB / 2, 7), ("pull7", 0.1, CTRL, 7)],
        priority=True,
    )
    assert done == pytest.approx(
        {"r5": 0.5 + PATH, "r7": 1.0 + PATH, "pull7": 1.0 + PATH, "r9": 1.5 + PATH}
    )


def test_a_priority_window_lets_what_fits_into_the_socket_in_order():
    """Window 0.6 GB: ranks 3 (0.5 GB) and 2 (0.1 GB) sent at t=0 both fit and leave in the
    order they entered (0.5 s, 0.6 s); rank 1 (0.5 GB) sent at 0.05 s waits until the socket
    has room: at 0.5 s 0.1 GB is still in it and 0.1 + 0.5 <= 0.6, so it follows (1.1 s)."""
    done = one_stream(
        "fairshare",
        [("r3", 0, GB / 2, 3), ("r2", 0, GB / 10, 2), ("r1", 0.05, GB / 2, 1)],
        priority=True,
        window_bytes=0.6 * GB,
    )
    assert done == pytest.approx({"r3": 0.5 + PATH, "r2": 0.6 + PATH, "r1": 1.1 + PATH})


def test_a_window_credit_sent_back_on_the_reverse_connection_waits_behind_its_data():
    """realrun's server acknowledges a push on its one connection back to the worker: with a
    1 GB reply leaving on it from t=0, the ack of push a (0.2 GB, arrived at 0.2 s) leaves only
    at 1 s, so push b (0.05 GB, beyond the 0.1 GB window) starts then, not at 0.2 s."""
    env = simpy.Environment()
    net = make_network("fairshare", env, Topology.uniform(2, B, LAT))
    forward = Stream(env, net, 0, 1, PATH, priority=True, window_bytes=0.1 * GB)
    back = Stream(env, net, 1, 0, PATH, priority=True, window_bytes=0.1 * GB)
    forward.ack = lambda credit: back.send(0, credit)
    done = {}
    sends(env, back, [("reply", 0, GB, 0)], done)
    sends(env, forward, [("a", 0, GB / 5, 0), ("b", 0, GB / 20, 1)], done)
    env.run()
    assert done["a"] == pytest.approx(0.2 + PATH)
    assert done["b"] == pytest.approx(1.0 + PATH + 0.05 + PATH)


def test_without_a_reverse_connection_the_credit_comes_one_latency_after_arrival():
    done = one_stream(
        "fairshare",
        [("a", 0, GB / 5, 0), ("b", 0, GB / 20, 1)],
        priority=True,
        window_bytes=0.1 * GB,
    )
    assert done["b"] == pytest.approx(0.2 + 2 * PATH + 0.05 + PATH)


class PerMessage:
    """A network wrapper that ignores connections the old way: the Stream's messages are
    separate transfers, each requested only when the one before it on its connection has left.
    The reference the connection path must match."""

    def __init__(self, env, net):
        self.env = env
        self.net = net
        self.queues = {}

    def transfer(self, src, dst, nbytes, on_sent=None, connection=None):
        arrival = Arrival(self.env)
        message = (src, dst, nbytes, on_sent, arrival)
        if connection in self.queues:
            self.queues[connection].append(message)
        else:
            self.queues[connection] = []
            self._start(connection, message)
        return arrival

    def _start(self, connection, message):
        src, dst, nbytes, on_sent, arrival = message

        def left():
            if on_sent is not None:
                on_sent()
            queue = self.queues[connection]
            if queue:
                self._start(connection, queue.pop(0))
            else:
                del self.queues[connection]

        inner = self.net.transfer(src, dst, nbytes, on_sent=left)
        inner.callbacks.append(lambda _e: arrival.arrive_in(0.0))


# Six streams over 3 hosts (one same-host), so connections share egress and ingress.
ROUTES = [(0, 1), (0, 2), (1, 0), (2, 0), (1, 2), (2, 2)]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.05, 0.2]),
            st.integers(0, len(ROUTES) - 1),
            st.sampled_from([CTRL, 0.01 * GB, 0.1 * GB, 0.4 * GB]),
            st.integers(0, 3),
        ),
        min_size=1,
        max_size=24,
    ),
    st.sampled_from(["fairshare", "fifo"]),
    st.sampled_from([(False, 0.0), (True, 0.0), (True, 0.15 * GB)]),
)
def test_streams_on_connections_time_every_message_as_one_transfer_each(raw, kind, discipline):
    """Random messages on six streams (control and data, several ranks, each discipline):
    every arrival is the same whether a stream's socket is the network's connection (one flow)
    or every message is its own transfer requested when the one before it has left."""
    priority, window = discipline
    results = []
    for wrap in (False, True):
        env = simpy.Environment()
        topo = Topology.uniform(3, B, LAT, intra_host_Bps=4 * B)
        net = make_network(kind, env, topo)
        if wrap:
            net = PerMessage(env, net)
        streams = [
            Stream(env, net, s, d, topo.path_latency_s(s, d), priority, window) for s, d in ROUTES
        ]
        done = {}
        for i, (at, route, nbytes, rank) in enumerate(raw):
            sends(env, streams[route], [(i, at, nbytes, rank)], done)
        env.run()
        results.append(done)
    new, old = results
    assert set(new) == set(old) == set(range(len(raw)))
    assert new == pytest.approx(old, rel=1e-9, abs=1e-12)


def test_a_receive_delay_holds_each_message_and_keeps_their_order():
    """Per-message delays by tag: "a" (0.5 GB at t=0) arrives at 0.5 s + PATH and is handled
    3 ms later; the control message "b" behind it arrives at the same instant with a 1 ms delay
    of its own, but is handled only after "a" (one receiving thread, in order); "c" alone at
    t=2 s waits its 2 ms after its arrival."""
    env = simpy.Environment()
    net = make_network("fairshare", env, Topology.uniform(2, B, LAT))
    delays = {"a": 3e-3, "b": 1e-3, "c": 2e-3}
    stream = Stream(env, net, 0, 1, PATH, receive_delay=delays.__getitem__)
    done = {}
    for name, at, nbytes in (("a", 0, GB / 2), ("b", 0, CTRL), ("c", 2.0, CTRL)):

        def hand_over(_e, name=name, nbytes=nbytes):
            stream.send(nbytes, lambda: done.setdefault(name, env.now), tag=name)

        env.timeout(at).callbacks.append(hand_over)
    env.run()
    assert done == pytest.approx(
        {"a": 0.5 + PATH + 3e-3, "b": 0.5 + PATH + 3e-3, "c": 2.0 + PATH + 2e-3}
    )
