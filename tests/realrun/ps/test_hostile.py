"""Hostile peers against a live job: it finishes with the weights of an undisturbed one.

A job of 2 workers and 2 servers (real zmq over TCP on 127.0.0.1, realrun/auth.py on) trains
a split key and a small one in dist_sync with SGD. While it trains, an attacker who can reach
every port but lacks the job's secret pushes NaNs and huge values as worker 1, pulls weights,
asks for STATS, registers with the scheduler, sends bodies nested 100,000 deep or holding
Infinity and 5,000-digit numbers, frames far larger than any key slice, and floods the servers.
A member (with the secret) also registers late and twice. Issue 13 saw each of these corrupt
the weights, steal a rank, kill a node or grow a server by a GB.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import zmq

from realrun import auth
from realrun.ps.kv_worker import KVWorker
from realrun.ps.message import Kind, Message, encode
from realrun.ps.optimizer import SGD
from tests.support.realrun_inprocess import TEST_SECRET, InProcessJob

N_SPLIT, N_SMALL = 1500, 7  # key 0 is split over both servers (bound 1000), key 1 is not
ROUNDS = 12
MAX_MESSAGE_BYTES = 1 << 20  # the servers' bound here; the attacker's big frames are 16 MB


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _train(po, attack=None):
    """Deterministic sync training; rank 0 starts ``attack`` once the keys exist."""
    kv = KVWorker(po, bigarray_bound=1000)
    rank = po.assignment.rank
    if rank == 0:
        kv.configure(True, SGD(0.05, momentum=0.9, weight_decay=1e-3)).wait(10)
        kv.init(0, np.linspace(-1, 1, N_SPLIT, dtype=np.float32)).wait(10)
        kv.init(1, np.ones(N_SMALL, dtype=np.float32)).wait(10)
    po.barrier().wait(10)
    attacker = None
    if attack is not None and rank == 0:
        attacker = threading.Thread(target=attack, args=(po.assignment.servers,))
        attacker.start()
    w0 = np.empty(N_SPLIT, dtype=np.float32)
    w1 = np.empty(N_SMALL, dtype=np.float32)
    for i in range(ROUNDS):
        g0 = np.sin(np.arange(N_SPLIT, dtype=np.float32) * (rank + 1) + i)
        g1 = np.full(N_SMALL, (rank + 1) * 0.1 * (i + 1), dtype=np.float32)
        h = [kv.pushpull(0, g0, w0), kv.pushpull(1, g1, w1)]
        for x in h:
            x.wait(30)
        time.sleep(0.05)  # leave the attacker time to act between rounds
    if attacker is not None:
        attacker.join(60)
        assert not attacker.is_alive(), "the attack itself hung"
    po.barrier().wait(30)
    return w0.copy(), w1.copy()


def _frames(kind: Kind, body: bytes = b"", arrays: tuple = (), **header) -> list[bytes]:
    frames = [bytes(f) for f in encode(Message(kind, arrays=arrays, **header))]
    frames[0] += body  # the meta frame: the header, then the body
    return frames


class Attacker:
    """Everything a stranger (and one misbehaving member) tries; counts answers it got."""

    def __init__(self, scheduler_port: int) -> None:
        self.scheduler = f"tcp://127.0.0.1:{scheduler_port}"
        self.answers = 0
        self.ctx = zmq.Context()

    def socket(self, address: str, identity: bytes) -> zmq.Socket:
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.IDENTITY, identity)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 0)
        s.connect(address)
        return s

    def __call__(self, servers: tuple[str, ...]) -> None:
        deep = b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        socks = []
        for i, address in enumerate(servers):
            forged = self.socket(address, b"w1")  # claims to be worker 1
            stranger = self.socket(address, f"stranger{i}".encode())
            socks += [forged, stranger]
            nan = np.full(750, np.nan, dtype=np.float32)
            for s in (forged, stranger):
                s.send_multipart(_frames(Kind.PUSH, key=0, start=0, stop=750, arrays=(nan,)))
                s.send_multipart(
                    _frames(
                        Kind.PUSH,
                        key=1,
                        start=0,
                        stop=N_SMALL,
                        arrays=(np.full(N_SMALL, 1e30, dtype=np.float32),),
                    )
                )
                # A forged tag at the end of the meta frame: right length, wrong key.
                meta, *arrays = _frames(Kind.PUSH, key=0, start=0, stop=750, arrays=(nan,))
                s.send_multipart([meta + os.urandom(auth.TAG_BYTES), *arrays])
                s.send_multipart(
                    _frames(
                        Kind.CONFIGURE,
                        b'{"sync":false,"optimizer":'
                        b'{"learning_rate":1e30,"momentum":0,'
                        b'"weight_decay":0,"rescale_grad":1}}',
                        request_id=9,
                    )
                )
                s.send_multipart(_frames(Kind.PULL, key=0, start=0, stop=750, request_id=7))
                s.send_multipart(_frames(Kind.STATS, request_id=8))
                s.send_multipart(
                    _frames(
                        Kind.INIT,
                        key=99,
                        start=0,
                        stop=4_000_000,
                        arrays=(np.zeros(4_000_000, dtype=np.float32),),
                    )
                )
                s.send_multipart(_frames(Kind.PUSH, deep, key=0, start=0, stop=750))
                s.send_multipart(_frames(Kind.PUSH, b'{"x":Infinity,"y":' + b"9" * 5000 + b"}"))
            for _ in range(5_000):  # a flood of small messages
                stranger.send_multipart(_frames(Kind.HEARTBEAT), zmq.NOBLOCK)
        # The scheduler: a stranger's registrations, one with an infinite port.
        for j in range(3):
            s = self.socket(self.scheduler, f"racer{j}".encode())
            socks.append(s)
            s.send_multipart(
                _frames(
                    Kind.REGISTER, b'{"role":"worker","host":"127.0.0.1","port":Infinity,"pid":1}'
                )
            )
            s.send_multipart(
                _frames(Kind.REGISTER, b'{"role":"worker","host":"127.0.0.1","port":1,"pid":1}')
            )
            s.send_multipart(_frames(Kind.FAIL, b'{"message":"stolen"}'))
        # Anything that came back would be a leak.
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            for s in socks:
                while s.poll(0):
                    s.recv_multipart()
                    self.answers += 1
            time.sleep(0.05)
        for s in socks:
            s.close(linger=0)
        self.ctx.term()


class LateMember:
    """A member holding the secret who registers after the job started, and again."""

    def __init__(self, job: InProcessJob) -> None:
        self.job = job

    def __call__(self, servers: tuple[str, ...]) -> None:
        from realrun.ps.van import Van

        van = Van(auth.parse_secret(TEST_SECRET))
        try:
            van.connect("scheduler", f"tcp://127.0.0.1:{self.job.port}", "late-member")
            body = {"role": "worker", "host": "127.0.0.1", "port": 0, "pid": os.getpid()}
            for _ in range(3):
                van.send("scheduler", Message(Kind.REGISTER, body=body))
            time.sleep(0.5)
        finally:
            van.close()


def _run(attack_factory=None):
    with InProcessJob(2, 2, max_message_bytes=MAX_MESSAGE_BYTES) as job:
        attack = attack_factory(job) if attack_factory else None
        results = job.run_workers(lambda po: _train(po, attack))
    return job, results


def test_hostile_peers_change_nothing_and_kill_nothing() -> None:
    _, undisturbed = _run()
    rss_before = _rss_mb()
    attackers: list[Attacker] = []

    def make(job):
        a = Attacker(job.port)
        attackers.append(a)
        return a

    job, attacked = _run(make)
    grown_mb = _rss_mb() - rss_before
    # The job finished: the scheduler exited 0 after every worker finished.
    assert job.exit_code == 0
    assert sorted(e["rank"] for e in job.events if e["event"] == "finished") == [0, 1]
    # Bit for bit the weights of the undisturbed job (2 workers: the sums are exact).
    for (a0, a1), (u0, u1) in zip(attacked, undisturbed, strict=True):
        np.testing.assert_array_equal(a0, u0)
        np.testing.assert_array_equal(a1, u1)
        assert np.isfinite(a0).all()
    # Nothing answered the stranger, nothing it sent reached a handler.
    assert attackers[0].answers == 0
    assert all(srv.rejected == 0 for srv in job.servers)
    assert {k for srv in job.servers for (k, _) in srv.slices} == {0, 1}  # no key 99
    # The 16 MB INITs never got buffered; the flood left no lasting growth.
    assert grown_mb < 100, f"resident memory grew by {grown_mb:.0f} MB"


def test_a_late_member_registration_is_refused_and_the_job_goes_on() -> None:
    _, undisturbed = _run()
    job, results = _run(LateMember)
    assert job.exit_code == 0
    registered = [e for e in job.events if e["event"] == "registered"]
    assert len(registered) == 4  # 2 servers + 2 workers, not the latecomer
    for (a0, a1), (u0, u1) in zip(results, undisturbed, strict=True):
        np.testing.assert_array_equal(a0, u0)
        np.testing.assert_array_equal(a1, u1)
