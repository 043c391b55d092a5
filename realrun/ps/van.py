"""The transport (ps-lite's ``Van``): zmq sockets that move ``Message``s between nodes.

A node that serves requests binds one ROUTER socket; a node that sends requests connects one
DEALER socket per peer. ROUTER/DEALER lets a server hold many requests from many workers and
answer each whenever it is ready, in any order. Array frames are sent with ``copy=False`` and
received as views of zmq's buffers. Only the thread that runs ``poll`` may call ``send`` or
``reply``; other threads call ``wake`` to make it look at its queues.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import zmq

from realrun import auth
from realrun.ps.message import Message, MessageError, decode, encode

log = logging.getLogger(__name__)

# Long enough for a final FINISH/BYE to leave, short enough that closing towards a dead peer
# never holds a process up noticeably.
LINGER_MS = 500
RECV_BATCH = 64  # messages drained from one socket per poll round, so no socket starves another
# Messages a socket queues per peer before it pushes back: a DEALER's send then waits (the
# sender slows down), a ROUTER's reply to a peer that does not read is dropped (logged) instead
# of growing without bound (issue 13: unread PULL replies did). A worker has at most its send
# window of requests in flight (kv_worker), far below this.
QUEUE_MESSAGES = 10_000


class RateLimitedLog:
    """Warnings that a peer can provoke at will: the first of each kind in full, then at most
    one line per ``interval_s`` with how many more there were, so a flood cannot fill a disk."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warning(self, kind: str, message: str, *args: Any) -> None:
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return
        more = self._suppressed.pop(kind, 0)
        self._last[kind] = now
        suffix = f" (and {more} more like it in the last {self.interval_s:.0f} s)" if more else ""
        self.logger.warning(message + suffix, *args)

    def handler_failed(self, msg: Message, who: object, error: Exception) -> None:
        """A message whose handler raised: it is dropped, the node goes on."""
        self.warning(
            "handler", "dropped %s from %r: %s: %s", msg.kind.name, who, type(error).__name__, error
        )


@dataclass(frozen=True)
class Incoming:
    """A received message: from ``peer`` (a DEALER we connected) or ``identity`` (our ROUTER)."""

    msg: Message
    peer: str | None = None
    identity: bytes | None = None


class Van:
    """The sockets of one node."""

    def __init__(self, secret: bytes = b"", max_message_bytes: int | None = None) -> None:
        # An empty secret turns authentication off: only for nodes built inside one process
        # (tests, benchmarks); node processes refuse to start without one (realrun.ps.roles).
        self._secret = secret
        self._max_message_bytes = max_message_bytes
        self._counter = 0  # tags' counter, increasing over every message this van sends
        self._last_seen: dict[Any, int] = {}  # per connection: the last counter accepted
        self._identity_of: dict[zmq.Socket, bytes] = {}
        self._warn = RateLimitedLog(log)
        self._ctx = zmq.Context()
        self._router: zmq.Socket | None = None
        self._dealers: dict[str, zmq.Socket] = {}
        self._peer_of: dict[zmq.Socket, str] = {}
        self._poller = zmq.Poller()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poller.register(self._wake_r, zmq.POLLIN)
        self._wake_lock = threading.Lock()
        self._closed = False
        self.rejected = 0  # malformed messages dropped
        self.bytes_sent = 0

    def bind(self, host: str, port: int = 0) -> int:
        """Listen on ``host:port`` (0: a free port the OS picks, no race); return the port."""
        sock = self._socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # an unknown peer raises instead of vanishing
        if self._max_message_bytes is not None:
            # A peer sending a larger frame is disconnected before it is buffered.
            sock.setsockopt(zmq.MAXMSGSIZE, self._max_message_bytes)
        try:
            sock.bind(f"tcp://{host}:{port if port else '*'}")
        except zmq.ZMQError as e:
            sock.close()
            raise OSError(f"cannot bind tcp://{host}:{port or '*'}: {e}") from None
        self._router = sock
        self._poller.register(sock, zmq.POLLIN)
        endpoint = sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        return int(endpoint.rsplit(":", 1)[1])

    def connect(self, peer: str, address: str, identity: str) -> None:
        """Open a DEALER to ``address`` (tcp://host:port), known to it as ``identity``."""
        sock = self._socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, identity.encode())
        sock.connect(address)
        self._identity_of[sock] = identity.encode()
        self._dealers[peer] = sock
        self._peer_of[sock] = peer
        self._poller.register(sock, zmq.POLLIN)

    def send(self, peer: str, msg: Message) -> None:
        sock = self._dealers[peer]
        sock.send_multipart(self._signed(self._identity_of[sock], encode(msg)), copy=False)
        self.bytes_sent += msg.nbytes

    def reply(self, identity: bytes, msg: Message) -> bool:
        """Answer on the ROUTER; False (logged) when that peer is gone."""
        assert self._router is not None
        try:
            self._router.send_multipart(
                [identity, *self._signed(identity, encode(msg))], zmq.NOBLOCK, copy=False
            )
        except zmq.Again:
            self._warn.warning("full", "dropped an answer to %r: it reads nothing", identity)
            return False
        except zmq.ZMQError as e:
            self._warn.warning("unroutable", "cannot answer %r: %s", identity, e)
            return False
        self.bytes_sent += msg.nbytes
        return True

    def wake(self) -> None:
        """Make a pending ``poll`` return; safe from any thread, a no-op once closed."""
        # The lock keeps a late wake-up from writing to a descriptor number that close()
        # has already released (and the OS may have handed to another file).
        with self._wake_lock:
            if self._closed:
                return
            with contextlib.suppress(BlockingIOError):  # full of wake-ups: poll returns anyway
                os.write(self._wake_w, b"!")

    def poll(self, timeout_s: float) -> list[Incoming]:
        """Messages that arrived within ``timeout_s`` (fewer, sooner, after a ``wake``)."""
        ready = dict(self._poller.poll(max(0, int(timeout_s * 1000))))
        out: list[Incoming] = []
        if self._wake_r in ready:
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
        for sock in list(ready):
            if not isinstance(sock, zmq.Socket):
                continue
            for _ in range(RECV_BATCH):
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                incoming = self._parse(sock, frames)
                if incoming is not None:
                    out.append(incoming)
        return out

    def _signed(self, identity: bytes, frames: list[Any]) -> list[Any]:
        if not self._secret:
            return frames
        self._counter += 1
        return [*frames, auth.tag(self._secret, identity, self._counter, frames)]

    def _parse(self, sock: zmq.Socket, frames: list[zmq.Frame]) -> Incoming | None:
        identity = None
        if sock is self._router:
            identity = frames[0].bytes
            frames = frames[1:]
        who = identity if identity is not None else self._peer_of.get(sock)
        if self._secret:
            # Whose connection this is: the DEALER side's identity, whichever end we are.
            signer = identity if identity is not None else self._identity_of[sock]
            connection = identity if identity is not None else sock
            try:
                self._last_seen[connection] = auth.verify(
                    self._secret, signer, frames, self._last_seen.get(connection, 0)
                )
            except auth.AuthError as e:
                self.rejected += 1
                self._warn.warning("auth", "dropped a message from %r: %s", who, e)
                return None
            frames = frames[:-1]
        try:
            msg = decode(frames)
        except MessageError as e:
            self.rejected += 1
            self._warn.warning("malformed", "dropped a malformed message from %r: %s", who, e)
            return None
        return Incoming(msg, self._peer_of.get(sock), identity)

    def close(self) -> None:
        for sock in [*self._dealers.values(), *([self._router] if self._router else [])]:
            sock.close(linger=LINGER_MS)
        self._dealers.clear()
        self._ctx.term()
        with self._wake_lock:
            self._closed = True
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _socket(self, kind: int) -> zmq.Socket:
        sock = self._ctx.socket(kind)
        sock.setsockopt(zmq.SNDHWM, QUEUE_MESSAGES)
        sock.setsockopt(zmq.RCVHWM, QUEUE_MESSAGES)
        return sock
