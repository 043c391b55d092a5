"""The servers' side of the protocol (simscale.comm.ps.server), timed on their handler thread.

Messages here are delivered the instant they are sent (a recording connection), so every time
is the handler thread's own work: REQUEST_S = 5 us per request, merging 1 MB 100 us, updating
it 400 us, MSG_S = 10 us to send a message (tests/support/ps_rig.py's costs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import simpy

from simscale.comm.ps.server import HEADER_BYTES, ServerGroup
from simscale.spec.costs import CostModel
from tests.support.ps_rig import COSTS, MERGE_S_PER_BYTE, MSG_S, REQUEST_S, UPDATE_S_PER_BYTE, N

MERGE_S = N * MERGE_S_PER_BYTE  # 100 us
UPDATE_S = N * UPDATE_S_PER_BYTE  # 400 us


class Recorder:
    """A connection that delivers at once and notes (time, bytes) of what it carried."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.sent: list[tuple[float, float]] = []

    def send(
        self, nbytes: float, deliver: Callable[[], None], key: int | None = None, tag: Any = None
    ) -> None:
        self.sent.append((self.env.now, nbytes))
        deliver()


def group(
    workers: int = 1, costs: CostModel = COSTS, **kw: object
) -> tuple[simpy.Environment, ServerGroup, dict[int, Recorder]]:
    """One server on host 7 for ``workers`` workers; its connection back to each is recorded."""
    env = simpy.Environment()
    back = {w: Recorder(env) for w in range(workers)}
    servers = ServerGroup(env, lambda s, w: back[w], costs, (7,), workers, **kw)  # type: ignore[arg-type]
    return env, servers, back


def at(env: simpy.Environment, t: float, fn: Callable[[], None]) -> None:
    env.timeout(t).callbacks.append(lambda _e: fn())


def test_sync_acks_every_push_only_after_the_round_is_applied() -> None:
    """Two workers push 1 MB at 0 and at 1 ms. Worker 0's merge runs 0-105 us, worker 1's
    1000-1105 us; only then the update (to 1505 us) and the acks, in arrival order, 10 us each:
    1515 and 1525 us. Worker 0 waited 1 ms for the other push, worker 1 none."""
    env, servers, _ = group(2, sync=True)
    acks: dict[int, tuple[float, float]] = {}
    for w, t in ((0, 0.0), (1, 1e-3)):
        on_ack = lambda waited, w=w: acks.__setitem__(w, (env.now, waited))  # noqa: E731
        at(env, t, lambda w=w, on_ack=on_ack: servers.push(0, 0, 0, N, w, on_ack))
    env.run()
    update_done = 1e-3 + REQUEST_S + MERGE_S + UPDATE_S
    assert acks[0] == pytest.approx((update_done + MSG_S, 1e-3), rel=1e-12)
    assert acks[1] == pytest.approx((update_done + 2 * MSG_S, 0.0), rel=1e-12, abs=1e-15)
    assert servers.state == {}  # the round is over


def test_async_updates_on_every_push_and_an_ack_queues_behind_queued_work() -> None:
    """Async: each push is one request and one update on the handler thread (405 us) and is
    acked at once. Pushes at 0 and at 100 us: the second update is queued (405-810 us) before
    the first push's ack (queued at 405 us), so the acks leave at 820 and 830 us: one thread."""
    env, servers, _ = group(2, sync=False)
    acks: dict[int, float] = {}
    at(env, 0.0, lambda: servers.push(0, 0, 0, N, 0, lambda _w: acks.__setitem__(0, env.now)))
    at(env, 100e-6, lambda: servers.push(0, 0, 0, N, 1, lambda _w: acks.__setitem__(1, env.now)))
    env.run()
    update_s = REQUEST_S + UPDATE_S
    assert acks[0] == pytest.approx(2 * update_s + MSG_S, rel=1e-12)
    assert acks[1] == pytest.approx(2 * update_s + 2 * MSG_S, rel=1e-12)


def test_a_pull_after_the_ack_is_answered_at_once() -> None:
    """MXNet's order: the pull request comes after the ack, so the server answers it as soon
    as its handler is free: 15 us (request + send), the weights plus a header on the wire."""
    env, servers, back = group(1, sync=True)
    got: list[float] = []
    at(env, 2e-3, lambda: servers.pull(0, 0, 0, N, 0, lambda _w: got.append(env.now)))
    env.run()
    assert got == [pytest.approx(2e-3 + REQUEST_S + MSG_S, rel=1e-12)]
    assert back[0].sent == [(pytest.approx(2e-3 + REQUEST_S + MSG_S, rel=1e-12), N + HEADER_BYTES)]


@pytest.mark.parametrize(
    ("pull_at_s", "push_at_s"),
    [(0.0, 0.0), (0.0, 50e-6)],  # the request with its push; the request overtaking it
)
def test_with_push_the_request_is_parked_until_the_update(
    pull_at_s: float, push_at_s: float
) -> None:
    """realrun's pushpull: the push is acknowledged without waiting for other workers, but
    as the first of the handler's answers to it (realrun/ps/kv_server.py ``_push`` returns
    [ack, *replies]), and the pull request waits for the update. Push at t: merge to
    t + 105 us, update 400 us, ack 10 us (it leaves at t + 515 us, ahead of the reply, on the
    same connection), answer 15 us: weights leave at t + 530 us, also when the request
    arrived before its push had."""
    env, servers, back = group(1, sync=True, pull_with_push=True)
    got: list[float] = []
    at(env, push_at_s, lambda: servers.push(0, 0, 0, N, 0, lambda _w: None))
    at(env, pull_at_s, lambda: servers.pull(0, 0, 0, N, 0, lambda _w: got.append(env.now)))
    env.run()
    acked = push_at_s + REQUEST_S + MERGE_S + UPDATE_S + MSG_S
    expected = acked + REQUEST_S + MSG_S
    assert got == [pytest.approx(expected, rel=1e-12)]
    assert back[0].sent == [
        (pytest.approx(acked, rel=1e-12), 0),
        (pytest.approx(expected, rel=1e-12), N + HEADER_BYTES),
    ]


def test_grpc_copies_each_tensor_in_before_the_merge_and_out_after_the_handler() -> None:
    """TensorFlow's PS over gRPC at 1 ns/byte: the 1 MB gradient is copied in (1 ms) before its
    merge (to 1.105 ms), update (1.505) and ack (1.515 ms); a pull at 2 ms is handled (15 us)
    and its reply copied out (1 ms) before it leaves at 3.015 ms."""
    costs = COSTS.with_values(grpc_ns_per_byte=1.0)
    env, servers, back = group(1, costs, sync=True, grpc=True)
    acked: list[float] = []
    at(env, 0.0, lambda: servers.push(0, 0, 0, N, 0, lambda _w: acked.append(env.now)))
    at(env, 2e-3, lambda: servers.pull(0, 0, 0, N, 0, lambda _w: None))
    env.run()
    copy_s = N * 1e-9
    assert acked == [pytest.approx(copy_s + REQUEST_S + MERGE_S + UPDATE_S + MSG_S, rel=1e-12)]
    assert back[0].sent[-1] == (
        pytest.approx(2e-3 + REQUEST_S + MSG_S + copy_s, rel=1e-12),
        N + HEADER_BYTES,
    )


def test_a_server_reports_its_handler_threads_busy_time() -> None:
    """The sync round above keeps the handler busy 105 + 105 + 400 + 10 + 10 = 630 us of the
    1525 us until the last ack; the report names the server's host (here the real cluster's
    host 3, where the simulated layout calls it 7)."""
    env = simpy.Environment()
    back = Recorder(env)
    servers = ServerGroup(env, lambda s, w: back, COSTS, (7,), 2, sync=True, report_hosts=(3,))  # type: ignore[arg-type]
    at(env, 0.0, lambda: servers.push(0, 0, 0, N, 0, lambda _w: None))
    at(env, 1e-3, lambda: servers.push(0, 0, 0, N, 1, lambda _w: None))
    env.run()
    end = env.now
    assert end == pytest.approx(1525e-6, rel=1e-12)
    (u,) = servers.utilization(0.0, end)
    assert (u.resource, u.kind) == ("server0.cpu", "server")
    assert u.busy_fraction == pytest.approx(630e-6 / 1525e-6, rel=1e-12)
    assert u.description == "server 0 handler thread (host 3)"
    servers.reset_counters()
    assert servers.threads[0].busy_s == 0.0
