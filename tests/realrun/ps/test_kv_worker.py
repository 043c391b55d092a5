"""When a worker's pull of a key leaves (``kvstore.pull_request``): after its push's ack, as
MXNet's KVStoreDist orders them, or right behind the push, as realrun's pipelined pushpull.

The worker's Postoffice is driven by hand: its sockets are replaced by a recorder, and the
server's answers are handed to it one by one, so each test states exactly what is on the wire
after each answer."""

from __future__ import annotations

import numpy as np
import pytest

from realrun.ps.kv_worker import KVWorker
from realrun.ps.message import Flag, Kind, Message
from realrun.ps.postoffice import Assignment, Postoffice
from realrun.ps.roles import NodeEnv

MB = 1 << 20


class WireRecorder:
    """Stands in for the worker's sockets: every message sent, in order."""

    def __init__(self) -> None:
        self.sent: list[Message] = []

    def send(self, peer: str, msg: Message) -> None:
        self.sent.append(msg)

    def wake(self) -> None:
        pass

    def kinds(self) -> list[Kind]:
        return [m.kind for m in self.sent]


def worker(
    pull_request: str, window_bytes: int = MB, servers: int = 1, bigarray_bound: int = 1000
) -> tuple[KVWorker, Postoffice]:
    po = Postoffice(
        NodeEnv("worker", "127.0.0.1", 1, 2, servers, "127.0.0.1"), window_bytes=window_bytes
    )
    po.van.close()
    po.van = WireRecorder()
    addresses = tuple(f"tcp://127.0.0.1:{1 + s}" for s in range(servers))
    po.assignment = Assignment(0, 2, servers, addresses)
    return KVWorker(po, bigarray_bound=bigarray_bound, pull_request=pull_request), po


def answer(po: Postoffice, kind: Kind, request: Message, value=None) -> None:
    arrays = () if value is None else (np.asarray(value, dtype=np.float32),)
    po._from_server(
        "server-0",
        Message(kind, request.request_id, request.key, request.start, request.stop, arrays=arrays),
    )
    po._flush()


def test_after_ack_the_pull_request_leaves_only_when_the_push_is_acknowledged():
    kv, po = worker("after_ack")
    out = np.zeros(3, dtype=np.float32)
    handle = kv.pushpull(4, np.ones(3, dtype=np.float32), out)
    po._flush()
    [push] = po.van.sent
    assert push.kind is Kind.PUSH and push.flags & Flag.ACK_AFTER_UPDATE
    # The server has the bytes but waits for the other worker: nothing more leaves.
    answer(po, Kind.RECEIVED, push)
    assert po.van.kinds() == [Kind.PUSH] and not handle.done()
    # The round's update is done and the push acknowledged: now the pull request goes.
    answer(po, Kind.RESPONSE, push)
    assert po.van.kinds() == [Kind.PUSH, Kind.PULL] and not handle.done()
    answer(po, Kind.RESPONSE, po.van.sent[1], [7, 8, 9])
    handle.wait(1)
    assert out.tolist() == [7, 8, 9]


def test_after_ack_a_split_key_is_pulled_only_once_every_slice_is_acknowledged():
    """MXNet's pull of a key waits for ZPush's callback, which ps-lite fires when every server
    has answered its slice; the pull is then one request to each server. A slice pulled as
    soon as its own server acked would let that server's replies share its host's NIC with
    pushes to the servers still waiting (docs/realrun-scheduling.md)."""
    kv, po = worker("after_ack", servers=3, bigarray_bound=4)
    out = np.zeros(6, dtype=np.float32)
    handle = kv.pushpull(0, np.ones(6, dtype=np.float32), out)
    po._flush()
    pushes = list(po.van.sent)
    assert [(m.kind, m.start, m.stop) for m in pushes] == [
        (Kind.PUSH, 0, 2),
        (Kind.PUSH, 2, 4),
        (Kind.PUSH, 4, 6),
    ]
    answer(po, Kind.RESPONSE, pushes[2])
    answer(po, Kind.RESPONSE, pushes[0])
    assert po.van.kinds() == [Kind.PUSH] * 3  # one slice still unacknowledged: no pull yet
    answer(po, Kind.RESPONSE, pushes[1])
    pulls = po.van.sent[3:]
    assert [(m.kind, m.start) for m in pulls] == [(Kind.PULL, 0), (Kind.PULL, 2), (Kind.PULL, 4)]
    for i, pull in enumerate(pulls):
        answer(po, Kind.RESPONSE, pull, [i, i])
    handle.wait(1)
    assert out.tolist() == [0, 0, 1, 1, 2, 2]


def test_with_push_the_pull_request_follows_the_push_at_once():
    kv, po = worker("with_push")
    kv.pushpull(4, np.ones(3, dtype=np.float32), np.zeros(3, dtype=np.float32))
    po._flush()
    assert po.van.kinds() == [Kind.PUSH, Kind.PULL]
    assert not po.van.sent[0].flags & Flag.ACK_AFTER_UPDATE


def test_a_received_push_leaves_the_send_window_before_its_ack():
    """The window counts bytes not yet received, not pushes not yet applied: a push waiting
    for the other workers must not hold back this worker's next key."""
    kv, po = worker("after_ack", window_bytes=MB)
    megabyte = np.ones(MB // 4, dtype=np.float32)
    kv.pushpull(1, megabyte, np.zeros_like(megabyte), priority=-1)
    kv.pushpull(2, megabyte, np.zeros_like(megabyte), priority=-2)
    po._flush()
    assert [(m.kind, m.key) for m in po.van.sent] == [(Kind.PUSH, 1)]  # 1 MB fills the window
    answer(po, Kind.RECEIVED, po.van.sent[0])
    assert [(m.kind, m.key) for m in po.van.sent] == [(Kind.PUSH, 1), (Kind.PUSH, 2)]


def test_an_unknown_pull_ordering_is_refused():
    with pytest.raises(ValueError, match="after_ack or with_push"):
        worker("eventually")
