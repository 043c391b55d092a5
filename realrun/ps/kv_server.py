"""The server side of the KVStore: holds slices of the parameter arrays, aggregates the workers'
pushes and applies the optimizer (MXNet's KVStoreDistServer).

Sync mode: a slice's pushes are summed until every worker has pushed it once, then the update
runs and the slice's version goes up by one. Async mode: every push is applied as it arrives.
Each slice is updated by the single I/O thread, so an update is atomic per key.

A push is acknowledged in one of two ways, as the worker asks (``kvstore.pull_request``):

- plain (``with_push``, realrun's pushpull): RESPONSE on receipt; the worker has already sent its
  pull request, which waits here until the slice's version covers every push that worker made.
- flagged ``ACK_AFTER_UPDATE`` (``after_ack``, MXNet's KVStoreDist): RESPONSE only once the
  update that includes the push is done, as MXNet's server answers a sync push after the round
  (kvstore_dist_server.h, ApplyUpdates); the worker sends its pull request on that answer. Until
  then a RECEIVED tells the worker the bytes arrived, so that they leave its send window: a
  window held until other workers push could deadlock two workers whose priorities reorder their
  pushes differently (ps-lite has no window; TCP's own acknowledgement plays RECEIVED's part).
  A worker without a window ("fifo" scheduling) flags its pushes ``NO_RECEIVED`` and gets none.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

import numpy as np

from realrun.ps import compression
from realrun.ps.message import Flag, Kind, Message
from realrun.ps.optimizer import SGD
from realrun.ps.postoffice import worker_rank_of
from realrun.ps.van import Incoming

log = logging.getLogger(__name__)

Reply = tuple[bytes, Message]


class Rejected(ValueError):
    """A request this server will not serve; the message goes back to the sender."""


@dataclass
class SliceState:
    """Everything the server keeps for elements ``[start, stop)`` of array ``key``."""

    key: int
    start: int
    stop: int
    weight: np.ndarray
    momentum: np.ndarray | None = None
    merged: np.ndarray | None = None  # sum of this round's pushes (sync)
    round_workers: set[int] = field(default_factory=set)
    deferred: list[tuple[int, np.ndarray]] = field(default_factory=list)  # next round's pushes
    pushes: dict[int, int] = field(default_factory=dict)  # per worker, all rounds
    # (who, request, version it needs, answer with the value: a pull; or without: a push's ack)
    waiting: list[tuple[bytes, int, int, bool]] = field(default_factory=list)
    version: int = 0  # rounds completed (sync) or pushes applied (async)
    updates: int = 0  # optimizer updates applied


class KVServer:
    """Request handler of one server; plug ``handle`` into a server's Postoffice."""

    def __init__(self, num_workers: int) -> None:
        self.num_workers = num_workers
        self.sync = True
        self.optimizer: SGD | None = None
        self.slices: dict[tuple[int, int], SliceState] = {}
        self.rejected = 0

    def handle(self, inc: Incoming) -> list[Reply]:
        """Serve one request; a bad one is answered with ERROR and logged, never raised."""
        msg, who = inc.msg, inc.identity
        assert who is not None
        try:
            if msg.kind is Kind.PUSH:
                return self._push(who, msg)
            if msg.kind is Kind.PULL:
                return self._pull(who, msg)
            if msg.kind is Kind.INIT:
                return self._init(who, msg)
            if msg.kind is Kind.CONFIGURE:
                return self._configure(who, msg)
            if msg.kind is Kind.STATS:
                return [(who, Message(Kind.RESPONSE, msg.request_id, body=self.stats()))]
            raise Rejected(f"a server does not handle {msg.kind.name}")
        except (Rejected, ValueError, KeyError, TypeError) as e:
            self.rejected += 1
            log.warning("rejected %s from %r: %s", msg.kind.name, who, e)
            return [
                (
                    who,
                    Message(
                        Kind.ERROR,
                        msg.request_id,
                        msg.key,
                        msg.start,
                        msg.stop,
                        body={"message": str(e)},
                    ),
                )
            ]

    def stats(self) -> dict:
        """Per-slice counters, for tests and for a look at a live server."""
        return {
            "sync": self.sync,
            "rejected": self.rejected,
            "slices": [
                {
                    "key": s.key,
                    "start": s.start,
                    "stop": s.stop,
                    "version": s.version,
                    "updates": s.updates,
                    "pushes": sum(s.pushes.values()),
                }
                for s in sorted(self.slices.values(), key=lambda s: (s.key, s.start))
            ],
        }

    # ---- requests ----

    def _configure(self, who: bytes, msg: Message) -> list[Reply]:
        sync = msg.body.get("sync")
        if not isinstance(sync, bool):
            raise Rejected("CONFIGURE needs a boolean 'sync'")
        opt = msg.body.get("optimizer")
        self.sync = sync
        self.optimizer = SGD.from_dict(opt) if opt else None
        return [(who, Message(Kind.RESPONSE, msg.request_id))]

    def _init(self, who: bytes, msg: Message) -> list[Reply]:
        value = self._one_array(msg)
        # Only the first INIT counts (MXNet: rank 0 initialises, later inits are ignored).
        self.slices.setdefault(
            (msg.key, msg.start),
            SliceState(msg.key, msg.start, msg.stop, np.array(value, dtype=np.float32)),
        )
        return [(who, Message(Kind.RESPONSE, msg.request_id, msg.key, msg.start, msg.stop))]

    def _push(self, who: bytes, msg: Message) -> list[Reply]:
        rank = worker_rank_of(who)
        if rank is None or not 0 <= rank < self.num_workers:
            raise Rejected(f"push from {who!r}, which is not a worker of this job")
        s = self._slice(msg)
        if msg.flags & Flag.COMPRESSED_2BIT:
            grad = compression.decompress(
                self._one_array(msg, compressed=True), msg.stop - msg.start, msg.value
            )
        else:
            grad = self._one_array(msg)
        if not self.sync and self.optimizer is None:
            raise Rejected("dist_async needs an optimizer on the server (as in MXNet)")
        s.pushes[rank] = s.pushes.get(rank, 0) + 1
        needed = s.pushes[rank] if self.sync else 0  # async: applied right here
        if self.sync:
            self._merge(s, rank, grad)
        else:
            self._apply(s, grad)
        ack = Message(Kind.RESPONSE, msg.request_id, msg.key, msg.start, msg.stop)
        if msg.flags & Flag.ACK_AFTER_UPDATE and s.version < needed:
            s.waiting.append((who, msg.request_id, needed, False))
            if msg.flags & Flag.NO_RECEIVED:
                return self._answer_waiting(s)
            ack = replace(ack, kind=Kind.RECEIVED)
        return [(who, ack), *self._answer_waiting(s)]

    def _pull(self, who: bytes, msg: Message) -> list[Reply]:
        s = self._slice(msg)
        rank = worker_rank_of(who)
        needed = s.pushes.get(rank, 0) if (self.sync and rank is not None) else 0
        if s.version < needed:
            s.waiting.append((who, msg.request_id, needed, True))
            return []
        return [(who, self._value(s, msg.request_id))]

    # ---- aggregation and update ----

    def _merge(self, s: SliceState, rank: int, grad: np.ndarray) -> None:
        if rank in s.round_workers:
            # This worker is a round ahead (it pushed again before the others caught up).
            s.deferred.append((rank, grad))
            return
        s.round_workers.add(rank)
        if s.merged is None:
            s.merged = grad  # the received frame itself: no copy for the first push
        elif s.merged.flags.writeable:
            s.merged += grad
        else:
            s.merged = s.merged + grad  # a read-only frame: the sum becomes our own array
        if len(s.round_workers) == self.num_workers:
            merged, s.merged = s.merged, None
            s.round_workers = set()
            if self.optimizer is None:
                s.weight = merged  # no updater: the store keeps the aggregate (MXNet)
                s.version += 1
            else:
                self._apply(s, merged)
            deferred, s.deferred = s.deferred, []
            for r, g in deferred:
                self._merge(s, r, g)

    def _apply(self, s: SliceState, grad: np.ndarray) -> None:
        assert self.optimizer is not None
        # The optimizer returns a new weight array: the old one may still be queued in zmq
        # (sent without copying) and must not change under it.
        s.weight, s.momentum = self.optimizer.update(s.weight, grad, s.momentum)
        s.version += 1
        s.updates += 1

    def _answer_waiting(self, s: SliceState) -> list[Reply]:
        if not s.waiting:
            return []
        ready = [w for w in s.waiting if w[2] <= s.version]
        s.waiting = [w for w in s.waiting if w[2] > s.version]
        return [
            (
                who,
                self._value(s, rid)
                if value
                else Message(Kind.RESPONSE, rid, s.key, s.start, s.stop),
            )
            for who, rid, _, value in ready
        ]

    # ---- helpers ----

    def _value(self, s: SliceState, request_id: int) -> Message:
        return Message(Kind.RESPONSE, request_id, s.key, s.start, s.stop, arrays=(s.weight,))

    def _slice(self, msg: Message) -> SliceState:
        s = self.slices.get((msg.key, msg.start))
        if s is None or s.stop != msg.stop:
            raise Rejected(f"key {msg.key} [{msg.start}, {msg.stop}) was never initialised here")
        return s

    def _one_array(self, msg: Message, compressed: bool = False) -> np.ndarray:
        if len(msg.arrays) != 1:
            raise Rejected(f"{msg.kind.name} needs exactly one array, got {len(msg.arrays)}")
        a = msg.arrays[0]
        n = msg.stop - msg.start
        expected = compression.words_for(n) if compressed else n
        if a.size != expected:
            raise Rejected(
                f"{msg.kind.name} of key {msg.key} [{msg.start}, {msg.stop}) carries "
                f"{a.size} values, expected {expected}"
            )
        return a
