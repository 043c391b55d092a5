"""The worker side of the KVStore (MXNet's KVStoreDist, ps-lite's KVWorker): init, push, pull
and pushpull of whole arrays, each returning a handle to ``wait()`` on.

An array (one key) is cut into server slices by ``simscale.spec.sharding.assign_key``, the same
function the simulator uses, so the bytes each server receives here are the bytes it is
predicted to receive there. Requests are only queued here; the Postoffice's I/O thread sends
them in priority order and many stay in flight at once. This module never touches zmq.

``pushpull`` orders a key's pull as the scenario's ``kvstore.pull_request`` says, the field the
simulator models (simscale.comm.ps.client):

- ``after_ack`` (MXNet, the default): the key's pull requests leave once every server holding
  a slice of it has acknowledged that slice's push, and a server acknowledges a sync push only
  after the round's update. MXNet's KVStoreDist does this through its engine: the pull writes
  the key's buffer that the push reads (kvstore_dist.h, ``comm_buf_``), so it runs only after
  ZPush's callback, which ps-lite's KVWorker fires once *every* server's answer to the key's
  slices is in; the pull is then one ZPull to all of them. A big array's pulls therefore wait
  for its slowest server, and no server answers a pull of it while another server still
  receives its pushes. Pulling each slice as its own ack came (as realrun did) let the first
  servers to finish send their replies while their hosts' workers were still pushing to the
  others: on co-located shapes the replies slowed those pushes, the workers fell out of step,
  and realrun ran at 0.76-0.85 of MXNet's speed (docs/realrun-scheduling.md).
- ``with_push`` (realrun's pipelined pushpull, as BytePS): the pull request leaves right behind
  the push and waits at the server, saving the ack's and the request's trips.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

from realrun.ps import compression
from realrun.ps.message import Flag, Kind, Message
from realrun.ps.optimizer import SGD
from realrun.ps.postoffice import Postoffice, server_peer
from realrun.ps.tracker import Handle
from simscale.spec.sharding import DEFAULT_BIGARRAY_BOUND, Slice, assign_key

# When a worker asks for a key's new weights (simscale.spec.scenario, kvstore.pull_request).
PullRequest = Literal["after_ack", "with_push"]


class KVWorker:
    """A worker's view of the parameter servers of one job."""

    def __init__(
        self,
        po: Postoffice,
        bigarray_bound: int = DEFAULT_BIGARRAY_BOUND,
        compression_threshold: float | None = None,
        pull_request: PullRequest = "after_ack",
    ) -> None:
        if po.assignment is None:
            raise RuntimeError("start the Postoffice (get a rank) before creating a KVWorker")
        self.po = po
        self.rank = po.assignment.rank
        self.num_servers = po.assignment.num_servers
        self.bigarray_bound = bigarray_bound
        self.compression_threshold = compression_threshold
        if pull_request not in ("after_ack", "with_push"):
            raise ValueError(f"pull_request {pull_request!r}, expected after_ack or with_push")
        self.pull_request = pull_request
        self._slices: dict[int, tuple[Slice, ...]] = {}
        self._residuals: dict[tuple[int, int], np.ndarray] = {}

    def slices(self, key: int, elements: int | None = None) -> tuple[Slice, ...]:
        """Where key's elements live; ``elements`` is needed the first time a key is seen."""
        if key not in self._slices:
            if elements is None:
                raise KeyError(f"key {key} is unknown: init it first")
            self._slices[key] = assign_key(key, elements, self.num_servers, self.bigarray_bound)
        found = self._slices[key]
        if elements is not None and found[-1].stop != elements:
            raise ValueError(f"key {key} has {found[-1].stop} elements, not {elements}")
        return found

    def configure(self, sync: bool, optimizer: SGD | None) -> Handle:
        """Tell every server the mode and optimizer (worker 0's job, as in MXNet)."""
        handle = Handle(self.num_servers if self.rank == 0 else 0, "configure servers")
        if self.rank == 0:
            body = {"sync": sync, "optimizer": optimizer.to_dict() if optimizer else None}
            for s in range(self.num_servers):
                self.po.request(server_peer(s), Message(Kind.CONFIGURE, body=body), handle)
        return handle

    def init(self, key: int, value: np.ndarray) -> Handle:
        """Declare ``key``; worker 0's ``value`` becomes its initial value on the servers."""
        flat = _flat(value)
        parts = self.slices(key, flat.size)
        handle = Handle(len(parts) if self.rank == 0 else 0, f"init key {key}")
        if self.rank == 0:
            for p in parts:
                self.po.request(
                    server_peer(p.server),
                    Message(
                        Kind.INIT,
                        key=key,
                        start=p.start,
                        stop=p.stop,
                        arrays=(flat[p.start : p.stop],),
                    ),
                    handle,
                )
        return handle

    def push(self, key: int, grad: np.ndarray, priority: int = 0) -> Handle:
        """Send this worker's gradient of ``key``; the array must not change until done."""
        parts = self.slices(key, grad.size)
        handle = Handle(len(parts), f"push key {key}")
        self._push(key, _flat(grad), parts, handle, priority)
        return handle

    def pull(self, key: int, out: np.ndarray, priority: int = 0) -> Handle:
        """Fetch key's value into ``out`` (after this worker's own pushes of it are applied)."""
        parts = self.slices(key, out.size)
        handle = Handle(len(parts), f"pull key {key}")
        self._pull(key, _flat_out(out), parts, handle, priority)
        return handle

    def pushpull(self, key: int, grad: np.ndarray, out: np.ndarray, priority: int = 0) -> Handle:
        """Push then pull in one handle, each slice's pull ordered by ``pull_request`` (module
        docstring): after the push's ack, or queued with the push."""
        parts = self.slices(key, grad.size)
        if out.size != grad.size:
            raise ValueError(f"key {key}: gradient has {grad.size} elements, output {out.size}")
        handle = Handle(2 * len(parts), f"pushpull key {key}")
        flat, flat_out = _flat(grad), _flat_out(out)
        if self.pull_request == "with_push":
            self._push(key, flat, parts, handle, priority)
            self._pull(key, flat_out, parts, handle, priority)
            return handle
        # Without a send window (fifo) nothing waits for RECEIVED: the server sends none.
        ack_flags = Flag.ACK_AFTER_UPDATE
        if self.po.scheduling == "fifo":
            ack_flags |= Flag.NO_RECEIVED
        # Runs on the I/O thread as each slice's ack arrives; the last one sends every slice's
        # pull request (module docstring: after the whole key's push, as MXNet's engine).
        unacked = [len(parts)]

        def acked(_ack: Message) -> None:
            unacked[0] -= 1
            if unacked[0] == 0:
                self._pull(key, flat_out, parts, handle, priority)

        self._push(key, flat, parts, handle, priority, ack_flags, acked)
        return handle

    def server_stats(self, server: int) -> dict:
        """A server's per-slice counters (versions, updates, pushes)."""
        got: list[dict] = []
        handle = Handle(1, f"stats of server {server}")
        self.po.request(
            server_peer(server),
            Message(Kind.STATS),
            handle,
            on_response=lambda m: got.append(m.body),
        )
        handle.wait(30.0)
        return got[0]

    def _push(
        self,
        key: int,
        flat: np.ndarray,
        parts: tuple[Slice, ...],
        handle: Handle,
        priority: int,
        flags: int = 0,
        on_ack: Callable[[Message], None] | None = None,
    ) -> None:
        ack_flags = flags
        for p in parts:
            part = flat[p.start : p.stop]
            flags, value = ack_flags, 0.0
            if self.compression_threshold is not None:
                residual = self._residuals.setdefault(
                    (key, p.start), np.zeros(p.elements, dtype=np.float32)
                )
                part = compression.compress(part, residual, self.compression_threshold)
                flags, value = flags | Flag.COMPRESSED_2BIT, self.compression_threshold
            self.po.request(
                server_peer(p.server),
                Message(
                    Kind.PUSH,
                    key=key,
                    start=p.start,
                    stop=p.stop,
                    value=value,
                    flags=flags,
                    arrays=(part,),
                ),
                handle,
                priority,
                on_response=on_ack,
            )

    def _pull(
        self, key: int, out: np.ndarray, parts: tuple[Slice, ...], handle: Handle, priority: int
    ) -> None:
        for p in parts:
            self.po.request(
                server_peer(p.server),
                Message(Kind.PULL, key=key, start=p.start, stop=p.stop),
                handle,
                priority,
                on_response=_writer(out, p),
            )


def _writer(out: np.ndarray, p: Slice):
    def write(msg: Message) -> None:
        if len(msg.arrays) != 1 or msg.arrays[0].size != p.elements:
            raise ValueError(f"expected {p.elements} values for [{p.start}, {p.stop})")
        out[p.start : p.stop] = msg.arrays[0]

    return write


def _flat(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).reshape(-1)


def _flat_out(out: np.ndarray) -> np.ndarray:
    if out.dtype != np.float32 or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("pull output must be a writeable, C-contiguous float32 array")
    return out.reshape(-1)
