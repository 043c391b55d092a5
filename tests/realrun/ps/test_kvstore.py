"""KVStore semantics on real servers: placement of keys, sync and async aggregation, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import zmq

from realrun.ps.kv_worker import KVWorker
from realrun.ps.message import Kind, Message, encode
from realrun.ps.optimizer import SGD
from realrun.ps.tracker import Handle, RequestFailed
from simscale.spec.sharding import assign_key
from tests.support.realrun_inprocess import InProcessJob

BOUND = 1000


def test_a_big_array_is_split_over_every_server_and_small_ones_go_where_assign_key_says():
    sizes = {0: 10, 1: 2500, 2: 999, 3: 1000, 4: 7}  # 1000 >= bound: split; 999 is not
    servers = 3

    def init(po):
        kv = KVWorker(po, bigarray_bound=BOUND)
        kv.configure(True, None).wait(10)
        for h in [kv.init(k, np.arange(n, dtype=np.float32)) for k, n in sizes.items()]:
            h.wait(10)
        po.barrier().wait(10)

    with InProcessJob(1, servers) as job:
        job.run_workers(init)
    held = {
        (s, key, x.start, x.stop)
        for s, srv in enumerate(job.servers)
        for (key, _), x in srv.slices.items()
    }
    expected = {
        (p.server, k, p.start, p.stop)
        for k, n in sizes.items()
        for p in assign_key(k, n, servers, BOUND)
    }
    assert held == expected
    # Key 1 (2,500 elements): parts of round(2500/3*(i+1)) - round(2500/3*i) on all 3 servers.
    assert sorted((s, a, b) for s, k, a, b in held if k == 1) == [
        (0, 0, 833),
        (1, 833, 1667),
        (2, 1667, 2500),
    ]
    # Small keys land whole on (key * 9973) % 3: keys 0, 2, 3... by MXNet's hash.
    assert {k: s for s, k, a, b in held if k in (0, 2, 4)} == {0: 0, 2: 2, 4: 1}
    # The values are the initial ones, sliced.
    srv = job.servers[1].slices[(1, 833)]
    np.testing.assert_array_equal(srv.weight, np.arange(833, 1667, dtype=np.float32))


@pytest.mark.parametrize(
    # realrun.auth's two tag modes; both pull orderings; both send schedulings
    ("message_mac", "pull_request", "scheduling"),
    [
        ("header", "after_ack", "priority"),
        ("full", "with_push", "priority"),
        ("header", "after_ack", "fifo"),
    ],
)
def test_dist_sync_sums_every_workers_push_before_one_update_per_round(
    message_mac, pull_request, scheduling
):
    workers, rounds, n = 3, 4, 1500  # split over both servers
    lr, momentum, wd = 0.1, 0.9, 0.01
    w0 = np.linspace(-1, 1, n, dtype=np.float32)

    def grad(rank, r):
        return np.full(n, (rank + 1) * 0.01 * (r + 1), dtype=np.float32) + w0

    def train(po):
        po.schedule(scheduling)
        kv = KVWorker(po, bigarray_bound=BOUND, pull_request=pull_request)
        kv.configure(True, SGD(lr, momentum, wd)).wait(10)
        kv.init(0, w0).wait(10)
        po.barrier().wait(10)
        out = np.empty(n, dtype=np.float32)
        for r in range(rounds):
            kv.pushpull(0, grad(po.assignment.rank, r), out).wait(10)
        return out

    with InProcessJob(workers, 2, message_mac=message_mac) as job:
        results = job.run_workers(train)
    # MXNet's sgd_mom_update applied by hand to the sum of the three workers' gradients.
    w, state = w0.astype(np.float64), np.zeros(n)
    for r in range(rounds):
        g = sum(grad(k, r).astype(np.float64) for k in range(workers))
        state = momentum * state - lr * (wd * w + g)
        w = w + state
    for out in results:
        np.testing.assert_allclose(out, w, rtol=1e-5, atol=1e-6)
    assert [s.updates for srv in job.servers for s in srv.slices.values()] == [rounds, rounds]


def test_dist_async_applies_every_push_exactly_once():
    workers, pushes, n = 2, 25, 1200

    # Each push carries a distinct power-of-two-free value, so a lost or doubled push shows.
    def train(po):
        kv = KVWorker(po, bigarray_bound=BOUND)
        kv.configure(False, SGD(learning_rate=1.0)).wait(10)
        kv.init(0, np.zeros(n, dtype=np.float32)).wait(10)
        kv.init(1, np.zeros(3, dtype=np.float32)).wait(10)
        po.barrier().wait(10)
        rank = po.assignment.rank
        handles = []
        for i in range(pushes):
            handles.append(kv.push(0, np.full(n, rank * 1000 + i, dtype=np.float32)))
            handles.append(kv.push(1, np.ones(3, dtype=np.float32)))
        for h in handles:
            h.wait(10)
        po.barrier().wait(10)  # everyone's pushes are in
        out = np.empty(n, dtype=np.float32)
        kv.pull(0, out).wait(10)
        return out

    with InProcessJob(workers, 2) as job:
        results = job.run_workers(train)
    total = sum(r * 1000 + i for r in range(workers) for i in range(pushes))
    for out in results:
        np.testing.assert_array_equal(out, np.full(n, -total, dtype=np.float32))
    counts = sorted(
        (k, s.start, s.updates) for srv in job.servers for (k, _), s in srv.slices.items()
    )
    assert counts == [(0, 0, 50), (0, 600, 50), (1, 0, 50)]


def test_a_server_rejects_malformed_and_wrong_requests_and_keeps_serving():
    def probe(po):
        kv = KVWorker(po)
        kv.configure(True, None).wait(10)
        kv.init(0, np.zeros(4, dtype=np.float32)).wait(10)
        # Garbage straight onto the server's socket, from a stranger.
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.connect(po.assignment.servers[0])
        sock.send_multipart([b"not a header", b"{"])
        sock.send_multipart([b"not a header {"])
        sock.send_multipart(
            encode(Message(Kind.PUSH, 7, key=0, start=0, stop=4, arrays=(np.zeros(4, np.float32),)))
        )
        assert sock.poll(5000)
        answer = sock.recv_multipart()
        sock.close(linger=0)
        ctx.term()
        # A push of the wrong size and of an unknown key fail their handles with the reason.
        with pytest.raises(RequestFailed, match="carries 3 values, expected 4"):
            short = Handle(1, "short push")
            short_push = Message(
                Kind.PUSH, key=0, start=0, stop=4, arrays=(np.zeros(3, np.float32),)
            )
            kv.po.request("server-0", short_push, short)
            short.wait(10)
        with pytest.raises(RequestFailed, match="never initialised"):
            kv.pull(5, np.empty(2, dtype=np.float32)).wait(10)
        # Still serving.
        out = np.ones(4, dtype=np.float32)
        kv.pull(0, out).wait(10)
        return answer, out

    # Without a job secret, so that the stranger's messages reach the server's own checks
    # (with one, the transport drops them first: tests/test_realrun_hostile.py).
    with InProcessJob(1, 1, secret="") as job:
        [(answer, out)] = job.run_workers(probe)
    assert b"not a worker of this job" in answer[0]  # the meta frame: header, body
    np.testing.assert_array_equal(out, np.zeros(4))
    assert job.servers[0].rejected == 3  # the stranger's push, the short push, the unknown key
