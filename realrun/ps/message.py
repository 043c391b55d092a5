"""The wire format of one PS message: one meta frame (a fixed binary header, then a JSON body),
then raw array frames.

A fixed ``struct`` header keeps the per-message cost of the many small keys low; control data
that is rare (registration, barriers, reports) rides in a small JSON body right behind it, in
the same frame. Array frames travel as raw buffers so that the transport can send and receive
them without copying (ps-lite's Meta + SArray data split). A pull request is one frame, a push
or a pull's answer two: every frame costs a zmq call on each side and a Python object on the
receiving one (issue 36 measured the receive path's CPU per message). realrun.auth appends its
tag to the meta frame. This module knows nothing about sockets.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from realrun import safejson
from realrun.safejson import JsonLimitError

MAGIC = b"RRPS"
# 2: header and body share the meta frame (1: they were two frames, the tag a third)
VERSION = 2
# magic, version, kind, flags, request_id, key, start, stop, value
_HEADER = struct.Struct("<4sBBHqiqqd")
HEADER_BYTES = _HEADER.size
# Bounds on what a peer may make us parse. Bodies are control data: a registration or an
# iteration report is well under 4 kB, the environment report a few kB, STATS of a big model
# tens of kB; messages carry at most one array (PUSH, INIT, RESPONSE).
MAX_BODY_BYTES = 1 << 20
MAX_BODY_DEPTH = 8
MAX_FRAMES = 1 + 4


class Kind(IntEnum):
    """What a message asks for or answers."""

    REGISTER = 1  # node -> scheduler: here I am (body: role, host, port, pid, ...)
    ASSIGN = 2  # scheduler -> node: your rank and every server's address
    BARRIER = 3  # node -> scheduler (body: group)
    BARRIER_DONE = 4  # scheduler -> node
    HEARTBEAT = 5  # both ways: still alive
    ABORT = 6  # scheduler -> node: the job failed (body: message)
    FAIL = 7  # node -> scheduler: I failed (body: message)
    REPORT = 8  # worker -> scheduler: timings of one iteration (body)
    FINISH = 9  # worker -> scheduler: my training is done
    SHUTDOWN = 10  # scheduler -> node: exit now
    BYE = 11  # server -> scheduler: exiting after SHUTDOWN
    HELLO = 12  # connecting side -> serving side, untagged: a handshake's nonce (realrun.auth)
    WELCOME = 13  # serving side -> connecting side, untagged: its nonce and proof of the secret
    CONFIGURE = 20  # worker 0 -> server: sync mode and optimizer (body)
    INIT = 21  # worker 0 -> server: initial value of a slice (1 frame)
    PUSH = 22  # worker -> server: gradient of a slice (1 frame, maybe compressed)
    PULL = 23  # worker -> server: send me the slice's value
    RESPONSE = 24  # server -> worker: answer to request_id (0 or 1 frame)
    ERROR = 25  # server -> worker: request_id was rejected (body: message)
    STATS = 26  # anyone -> server: describe your state (reply body), for tests and debugging
    # server -> worker: push request_id arrived (credits its bytes in the worker's send window);
    # its RESPONSE follows once the push is applied (a push flagged ACK_AFTER_UPDATE)
    RECEIVED = 27


_KINDS = {int(k): k for k in Kind}  # a dict lookup is 5x cheaper than Kind(number)


class Flag:
    """Bits of the header's flags field."""

    COMPRESSED_2BIT = 1  # the array frame holds 2-bit codes; ``value`` is the threshold
    # A push answered as MXNet's server answers it: RESPONSE once the update that includes it
    # is done (in sync mode, after every worker's push of the round), RECEIVED before that.
    ACK_AFTER_UPDATE = 2
    # With ACK_AFTER_UPDATE: no RECEIVED before the RESPONSE. A worker sending "fifo" keeps no
    # send window, so RECEIVED would be a message per push that nobody needs (ps-lite has none).
    NO_RECEIVED = 4


class MessageError(ValueError):
    """A message that does not follow this format; the receiver drops it and logs why."""


@dataclass(frozen=True)
class Message:
    """One message; ``start``/``stop`` delimit the slice of array ``key`` it concerns."""

    kind: Kind
    request_id: int = 0
    key: int = -1
    start: int = 0
    stop: int = 0
    value: float = 0.0
    flags: int = 0
    body: dict[str, Any] = field(default_factory=dict)
    arrays: tuple[np.ndarray, ...] = ()

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    def with_request_id(self, request_id: int) -> Message:
        """``dataclasses.replace(self, request_id=...)``, a sixth of its cost (every request
        goes through it)."""
        msg = _new(Message)
        fields = msg.__dict__
        fields.update(self.__dict__)
        fields["request_id"] = request_id
        return msg


_new = object.__new__
_FIELDS = tuple(Message.__dataclass_fields__)


def _message(*values: Any) -> Message:
    """``Message(*values)`` without the frozen dataclass's ``__init__``, which sets each field
    through ``object.__setattr__`` (twice the cost, on every message received); the values are
    already checked and of the right types."""
    msg = _new(Message)
    msg.__dict__.update(zip(_FIELDS, values, strict=True))
    return msg


def encode(msg: Message) -> list[Any]:
    """Frames for the transport: the meta frame (header and body), then the arrays' own
    buffers (no copy)."""
    meta = _HEADER.pack(
        MAGIC,
        VERSION,
        msg.kind,
        msg.flags,
        msg.request_id,
        msg.key,
        msg.start,
        msg.stop,
        msg.value,
    )
    if msg.body:
        meta += json.dumps(msg.body, separators=(",", ":")).encode()
    if not msg.arrays:
        return [meta]
    frames: list[Any] = [meta]
    for a in msg.arrays:
        if not a.flags.c_contiguous:
            raise MessageError("array frames must be C-contiguous")
        frames.append(memoryview(a).cast("B"))
    return frames


def decode(frames: list[Any]) -> Message:
    """Parse received frames (bytes, memoryviews or zmq.Frame); arrays are views of the frame
    buffers."""
    if not frames:
        raise MessageError("expected a meta frame, got no frames")
    meta = _buffer(frames[0])
    if len(meta) < HEADER_BYTES:
        raise MessageError(f"meta frame of {len(meta)} bytes, expected at least {HEADER_BYTES}")
    magic, version, number, flags, request_id, key, start, stop, value = _HEADER.unpack_from(meta)
    if magic != MAGIC or version != VERSION:
        raise MessageError(f"bad magic/version {magic!r}/{version}")
    kind = _KINDS.get(number)
    if kind is None:
        raise MessageError(f"unknown message kind {number}")
    if start < 0 or stop < start:
        raise MessageError(f"bad slice [{start}, {stop})")
    if not math.isfinite(value):
        raise MessageError(f"header value {value}, expected a finite number")
    if len(frames) > MAX_FRAMES:
        raise MessageError(f"{len(frames)} frames, expected at most {MAX_FRAMES}")
    body: dict[str, Any] = {}
    if len(meta) > HEADER_BYTES:
        try:
            body = safejson.loads(
                meta[HEADER_BYTES:], max_bytes=MAX_BODY_BYTES, max_depth=MAX_BODY_DEPTH
            )
        except JsonLimitError as e:
            raise MessageError(f"body: {e}") from None
        if not isinstance(body, dict):
            raise MessageError("body is not a JSON object")
    if len(frames) == 1:
        return _message(kind, request_id, key, start, stop, value, flags, body, ())
    dtype = _WORD if flags & Flag.COMPRESSED_2BIT else _FLOAT
    arrays = []
    for f in frames[1:]:
        buf = _buffer(f)
        if len(buf) % dtype.itemsize:
            raise MessageError(f"array frame of {len(buf)} bytes is not a whole number of {dtype}")
        arrays.append(np.frombuffer(buf, dtype=dtype))
    return _message(kind, request_id, key, start, stop, value, flags, body, tuple(arrays))


_WORD = np.dtype(np.uint32)
_FLOAT = np.dtype(np.float32)


def peek_kind(frames: list[Any]) -> int | None:
    """The kind number in a message's header, without parsing the rest (None if no header)."""
    if not frames:
        return None
    meta = _buffer(frames[0])
    if len(meta) < HEADER_BYTES or bytes(meta[:4]) != MAGIC:
        return None
    return meta[5]


def _buffer(frame: Any) -> memoryview:
    # zmq.Frame exposes .buffer (a memoryview of the received message, no copy).
    return memoryview(frame.buffer if hasattr(frame, "buffer") else frame)
