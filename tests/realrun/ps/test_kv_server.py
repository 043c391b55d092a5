"""The server's aggregation rules, driven message by message without a network."""

from __future__ import annotations

import numpy as np

from realrun.ps.kv_server import KVServer
from realrun.ps.message import Flag, Kind, Message
from realrun.ps.optimizer import SGD
from realrun.ps.van import Incoming

W0, W1 = b"w0", b"w1"


def send(server: KVServer, who: bytes, kind: Kind, rid: int, value=None, body=None):
    arrays = () if value is None else (np.asarray(value, dtype=np.float32),)
    msg = Message(kind, rid, key=0, start=0, stop=2, body=body or {}, arrays=arrays)
    return [
        (to, m.kind, m.request_id, m.arrays[0].tolist() if m.arrays else None)
        for to, m in server.handle(Incoming(msg, identity=who))
    ]


def test_a_worker_a_round_ahead_is_held_for_the_next_round_and_its_pull_waits():
    s = KVServer(num_workers=2)
    send(s, W0, Kind.CONFIGURE, 1, body={"sync": True, "optimizer": None})
    send(s, W0, Kind.INIT, 2, [0, 0])
    # Worker 0 pushes rounds 1 and 2 before worker 1 pushes anything.
    assert send(s, W0, Kind.PUSH, 3, [1, 1]) == [(W0, Kind.RESPONSE, 3, None)]
    assert send(s, W0, Kind.PUSH, 4, [10, 10]) == [(W0, Kind.RESPONSE, 4, None)]
    assert send(s, W0, Kind.PULL, 5) == []  # needs round 2: waits
    # Worker 1's first push completes round 1 (1 + 2); worker 0's pull still needs round 2.
    assert send(s, W1, Kind.PUSH, 6, [2, 2]) == [(W1, Kind.RESPONSE, 6, None)]
    assert send(s, W1, Kind.PULL, 7) == [(W1, Kind.RESPONSE, 7, [3, 3])]
    # Its second push completes round 2 (10 + 20) and releases worker 0's pull.
    assert send(s, W1, Kind.PUSH, 8, [20, 20]) == [
        (W1, Kind.RESPONSE, 8, None),
        (W0, Kind.RESPONSE, 5, [30, 30]),
    ]
    assert s.slices[(0, 0)].version == 2


def test_async_needs_an_optimizer_and_sync_without_one_keeps_the_sum():
    s = KVServer(num_workers=1)
    send(s, W0, Kind.CONFIGURE, 1, body={"sync": False, "optimizer": None})
    send(s, W0, Kind.INIT, 2, [5, 5])
    [(_, kind, _, _)] = send(s, W0, Kind.PUSH, 3, [1, 1])
    assert kind is Kind.ERROR and s.slices[(0, 0)].updates == 0
    send(s, W0, Kind.CONFIGURE, 4, body={"sync": False, "optimizer": SGD(0.5, 0.0, 0.0).to_dict()})
    send(s, W0, Kind.PUSH, 5, [1, 2])
    assert send(s, W0, Kind.PULL, 6) == [(W0, Kind.RESPONSE, 6, [4.5, 4.0])]


def test_a_second_init_does_not_overwrite_the_trained_value():
    s = KVServer(num_workers=1)
    send(s, W0, Kind.CONFIGURE, 1, body={"sync": True, "optimizer": None})
    send(s, W0, Kind.INIT, 2, [1, 1])
    send(s, W0, Kind.PUSH, 3, [7, 7])
    send(s, W1, Kind.INIT, 4, [0, 0])
    assert send(s, W0, Kind.PULL, 5) == [(W0, Kind.RESPONSE, 5, [7, 7])]


def push_after_update(
    server: KVServer, who: bytes, rid: int, value, flags: int = Flag.ACK_AFTER_UPDATE
):
    """A push flagged as MXNet's worker expects it answered: after the update."""
    msg = Message(
        Kind.PUSH,
        rid,
        key=0,
        start=0,
        stop=2,
        flags=flags,
        arrays=(np.asarray(value, dtype=np.float32),),
    )
    return [(to, m.kind, m.request_id) for to, m in server.handle(Incoming(msg, identity=who))]


def test_a_sync_push_flagged_ack_after_update_is_acknowledged_when_its_round_is_applied():
    """MXNet's server answers a sync push once every worker's push of the round is merged and
    the update done (kvstore_dist_server.h, ApplyUpdates); until then only RECEIVED goes."""
    s = KVServer(num_workers=2)
    send(s, W0, Kind.CONFIGURE, 1, body={"sync": True, "optimizer": None})
    send(s, W0, Kind.INIT, 2, [0, 0])
    assert push_after_update(s, W0, 3, [1, 1]) == [(W0, Kind.RECEIVED, 3)]
    # Worker 1's push completes the round: both pushes are acknowledged, its own first.
    assert push_after_update(s, W1, 4, [2, 2]) == [(W1, Kind.RESPONSE, 4), (W0, Kind.RESPONSE, 3)]
    # The pull each worker sends on that ack is answered at once with the round's sum.
    assert send(s, W0, Kind.PULL, 5) == [(W0, Kind.RESPONSE, 5, [3, 3])]


def test_a_worker_without_a_send_window_gets_no_received_before_the_ack():
    """A "fifo" worker (ps-lite's sending) has no window to credit: the server sends only the
    RESPONSE after the update, as MXNet's does."""
    s = KVServer(num_workers=2)
    send(s, W0, Kind.CONFIGURE, 1, body={"sync": True, "optimizer": None})
    send(s, W0, Kind.INIT, 2, [0, 0])
    flags = Flag.ACK_AFTER_UPDATE | Flag.NO_RECEIVED
    assert push_after_update(s, W0, 3, [1, 1], flags) == []
    assert push_after_update(s, W1, 4, [2, 2], flags) == [
        (W1, Kind.RESPONSE, 4),
        (W0, Kind.RESPONSE, 3),
    ]


def test_a_push_a_round_ahead_is_acknowledged_after_its_own_round():
    s = KVServer(num_workers=2)
    send(s, W0, Kind.CONFIGURE, 1, body={"sync": True, "optimizer": None})
    send(s, W0, Kind.INIT, 2, [0, 0])
    assert push_after_update(s, W0, 3, [1, 1]) == [(W0, Kind.RECEIVED, 3)]
    assert push_after_update(s, W0, 4, [10, 10]) == [(W0, Kind.RECEIVED, 4)]
    assert push_after_update(s, W1, 5, [2, 2]) == [(W1, Kind.RESPONSE, 5), (W0, Kind.RESPONSE, 3)]
    assert push_after_update(s, W1, 6, [20, 20]) == [
        (W1, Kind.RESPONSE, 6),
        (W0, Kind.RESPONSE, 4),
    ]


def test_an_async_push_flagged_ack_after_update_is_acknowledged_at_once():
    """dist_async applies every push as it comes, so its update is done on receipt."""
    s = KVServer(num_workers=2)
    send(s, W0, Kind.CONFIGURE, 1, body={"sync": False, "optimizer": SGD(1.0, 0.0, 0.0).to_dict()})
    send(s, W0, Kind.INIT, 2, [0, 0])
    assert push_after_update(s, W0, 3, [1, 1]) == [(W0, Kind.RESPONSE, 3)]
