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
from dataclasses import dataclass

import zmq

from realrun.message import Message, MessageError, decode, encode

log = logging.getLogger(__name__)

# Long enough for a final FINISH/BYE to leave, short enough that closing towards a dead peer
# never holds a process up noticeably.
LINGER_MS = 500
RECV_BATCH = 64  # messages drained from one socket per poll round, so no socket starves another


@dataclass(frozen=True)
class Incoming:
    """A received message: from ``peer`` (a DEALER we connected) or ``identity`` (our ROUTER)."""

    msg: Message
    peer: str | None = None
    identity: bytes | None = None


class Van:
    """The sockets of one node."""

    def __init__(self) -> None:
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
        self._dealers[peer] = sock
        self._peer_of[sock] = peer
        self._poller.register(sock, zmq.POLLIN)

    def send(self, peer: str, msg: Message) -> None:
        self._dealers[peer].send_multipart(encode(msg), copy=False)
        self.bytes_sent += msg.nbytes

    def reply(self, identity: bytes, msg: Message) -> bool:
        """Answer on the ROUTER; False (logged) when that peer is gone."""
        assert self._router is not None
        try:
            self._router.send_multipart([identity, *encode(msg)], copy=False)
        except zmq.ZMQError as e:
            log.warning("cannot answer %r: %s", identity, e)
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

    def _parse(self, sock: zmq.Socket, frames: list[zmq.Frame]) -> Incoming | None:
        identity = None
        if sock is self._router:
            identity = frames[0].bytes
            frames = frames[1:]
        try:
            msg = decode(frames)
        except MessageError as e:
            self.rejected += 1
            who = identity if identity is not None else self._peer_of.get(sock)
            log.warning("dropped a malformed message from %r: %s", who, e)
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
        # Unbounded queues: the KV layer bounds what is in flight itself (see kv_worker), and a
        # full high-water mark would silently drop (ROUTER) or block the only I/O thread.
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        return sock
