"""The transport (ps-lite's ``Van``): zmq sockets that move ``Message``s between nodes.

A node that serves requests binds one ROUTER socket; a node that sends requests connects one
DEALER socket per peer. ROUTER/DEALER lets a server hold many requests from many workers and
answer each whenever it is ready, in any order. A message is one meta frame and its array
frames (realrun.ps.message); array frames are sent with ``copy=False`` and received as views of
zmq's buffers. Frames are sent and received one ``send``/``recv`` call each, with the flags as
plain ints: pyzmq's ``send_multipart``/``recv_multipart`` build an ``IntFlag`` per frame and a
``zmq.Frame`` per received part, which was a measurable share of realrun's CPU per message.
Only the thread that runs ``poll`` may call ``send`` or ``reply``; other threads call ``wake``
to make it look at its queues.

With the job's secret, every DEALER connection starts with realrun.auth's handshake (HELLO,
WELCOME), handled here; messages sent before it completes wait for it, and every other message
carries its session's tag at the end of its meta frame, checked before it is decoded.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import zmq

from realrun import auth
from realrun.ps.message import Kind, Message, MessageError, decode, encode, peek_kind

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
# Handshakes begun (HELLO) whose peer has not yet sent a message that verified: a stranger's
# HELLOs cost at most this many sessions of memory; a job has one per node and peer.
MAX_UNPROVEN = 4096
# zmq's flags as ints: or-ing pyzmq's IntFlag members goes through enum.py on every frame.
_SNDMORE = int(zmq.SNDMORE)
_NOBLOCK = int(zmq.NOBLOCK)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)


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

    def __init__(
        self, secret: bytes = b"", max_message_bytes: int | None = None, mac_mode: str = "header"
    ) -> None:
        # An empty secret turns authentication off: only for nodes built inside one process
        # (tests, benchmarks); node processes refuse to start without one (realrun.ps.roles).
        self._secret = secret
        self._mac_mode = mac_mode
        self._max_message_bytes = max_message_bytes
        # realrun.auth's sessions: a DEALER's (by socket) once its WELCOME verified, and a
        # ROUTER peer's (by identity) from its HELLO on; until a peer proves it holds the key,
        # its session is one of at most MAX_UNPROVEN, the oldest dropped first.
        self._sessions: dict[Any, auth.Session] = {}
        self._unproven: OrderedDict[bytes, None] = OrderedDict()
        self._hello: dict[zmq.Socket, bytes] = {}  # DEALER -> the nonce of its HELLO
        self._waiting: dict[zmq.Socket, list[Message]] = {}  # sent before the WELCOME came
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
        # A wake-up byte is in the pipe and poll has not yet taken it: a further wake-up would
        # only cost a system call and an extra poll round (a worker posts one message per
        # slice, each with a wake-up, while the I/O thread is still waking from the first).
        self._wake_pending = False
        self._closed = False
        self.rejected = 0  # malformed or unauthenticated messages dropped
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
        if self._secret:
            nonce = auth.new_nonce()
            self._hello[sock] = nonce
            self._waiting[sock] = []
            hello = Message(Kind.HELLO, body={"nonce": nonce.hex(), "mac": self._mac_mode})
            _send(sock, encode(hello), 0)

    def send(self, peer: str, msg: Message) -> None:
        """Send on the DEALER to ``peer``; held back until its handshake has completed."""
        sock = self._dealers[peer]
        frames = encode(msg)
        if self._secret:
            session = self._sessions.get(sock)
            if session is None:
                self._waiting[sock].append(msg)
                return
            session.seal(auth.TO_SERVER, frames)
        _send(sock, frames, 0)
        self.bytes_sent += msg.nbytes

    def reply(self, identity: bytes, msg: Message) -> bool:
        """Answer on the ROUTER; False (logged) when that peer is gone."""
        assert self._router is not None
        frames = encode(msg)
        if self._secret:
            session = self._sessions.get(identity)
            if session is None:
                self._warn.warning("nosession", "cannot answer %r: no session", identity)
                return False
            session.seal(auth.TO_CLIENT, frames)
        if not self._route(identity, frames):
            return False
        self.bytes_sent += msg.nbytes
        return True

    def _route(self, identity: bytes, frames: list[Any]) -> bool:
        assert self._router is not None
        try:
            # ROUTER_MANDATORY: an unknown or full peer fails on the identity frame, before
            # any of the message is queued.
            self._router.send(identity, _NOBLOCK | _SNDMORE)
            _send(self._router, frames, _NOBLOCK)
        except zmq.Again:
            self._warn.warning("full", "dropped an answer to %r: it reads nothing", identity)
            return False
        except zmq.ZMQError as e:
            self._warn.warning("unroutable", "cannot answer %r: %s", identity, e)
            return False
        return True

    def wake(self) -> None:
        """Make a pending ``poll`` return; safe from any thread, a no-op once closed."""
        # The lock keeps a late wake-up from writing to a descriptor number that close()
        # has already released (and the OS may have handed to another file).
        with self._wake_lock:
            if self._closed or self._wake_pending:
                return
            self._wake_pending = True
            with contextlib.suppress(BlockingIOError):  # full of wake-ups: poll returns anyway
                os.write(self._wake_w, b"!")

    def poll(self, timeout_s: float) -> list[Incoming]:
        """Messages that arrived within ``timeout_s`` (fewer, sooner, after a ``wake``)."""
        ready = self._poller.poll(max(0, int(timeout_s * 1000)))
        out: list[Incoming] = []
        for sock, _ in ready:
            if not isinstance(sock, zmq.Socket):  # the wake-up pipe
                # Cleared before the caller looks at its queues (after this poll), so that a
                # message posted from now on wakes the next poll.
                with self._wake_lock:
                    self._wake_pending = False
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)  # one byte per pending flag: all of them
                continue
            router = sock is self._router
            for i in range(RECV_BATCH):
                # Asking first is cheaper than the zmq.Again a drained socket raises, which
                # every socket of every poll round used to end with; poll has answered for
                # the first message.
                if i and not sock.get(_EVENTS) & _POLLIN:
                    break
                try:
                    first = sock.recv(_NOBLOCK, copy=False)
                except zmq.Again:
                    break
                # A frame's own ``more`` is much cheaper than asking the socket for RCVMORE
                # (pyzmq's getsockopt looks the option up in an enum on every call).
                frame = first
                parts: list[zmq.Frame] = []
                while frame.more:
                    frame = sock.recv(_NOBLOCK, copy=False)
                    parts.append(frame)
                if router:
                    identity = first.bytes
                    meta = parts[0] if parts else None
                    arrays = parts[1:]
                else:
                    identity, meta, arrays = None, first, parts
                incoming = self._parse(sock, identity, meta, arrays)
                if incoming is not None:
                    out.append(incoming)
        return out

    def _parse(
        self, sock: zmq.Socket, identity: bytes | None, meta: Any, arrays: list[zmq.Frame]
    ) -> Incoming | None:
        peer = self._peer_of.get(sock)
        if meta is None:  # a ROUTER message of nothing but the sender's identity
            self.rejected += 1
            self._warn.warning("malformed", "dropped an empty message from %r", identity)
            return None
        frames = [meta, *arrays]
        if self._secret:
            try:
                untagged = self._authenticate(sock, identity, frames)
            except (auth.AuthError, MessageError) as e:
                self.rejected += 1
                self._warn.warning("auth", "dropped a message from %r: %s", identity or peer, e)
                return None
            if untagged is None:
                return None  # a handshake message, handled here
            frames[0] = untagged
        try:
            msg = decode(frames)
        except MessageError as e:
            self.rejected += 1
            who = identity if identity is not None else peer
            self._warn.warning("malformed", "dropped a malformed message from %r: %s", who, e)
            return None
        return Incoming(msg, peer, identity)

    def _authenticate(
        self, sock: zmq.Socket, identity: bytes | None, frames: list[Any]
    ) -> memoryview | None:
        """The meta frame without its tag, for a message whose tag verified; None for a
        handshake message it handled; AuthError (or MessageError) for anything else."""
        kind = peek_kind(frames)
        if identity is not None:  # our ROUTER: a connecting peer
            if kind == Kind.HELLO:
                self._welcome(identity, decode(frames))
                return None
            session = self._sessions.get(identity)
            if session is None:
                raise auth.AuthError("no handshake on this connection")
            untagged = session.verify(auth.TO_SERVER, frames)
            self._unproven.pop(identity, None)
            return untagged
        if kind == Kind.WELCOME and sock in self._hello:
            self._welcomed(sock, decode(frames))
            return None
        session = self._sessions.get(sock)
        if session is None:
            raise auth.AuthError("a message before the handshake completed")
        return session.verify(auth.TO_CLIENT, frames)

    def _welcome(self, identity: bytes, hello: Message) -> None:
        """Answer a HELLO: a fresh nonce, our proof, and a new session for ``identity``."""
        old = self._sessions.get(identity)
        if old is not None and old.proven:
            # The peer holding this identity has proven the key; a second HELLO could only
            # come from someone else after a disconnect, and must not reset its session.
            raise auth.AuthError("a HELLO on an identity already authenticated")
        client_nonce = _nonce(hello.body.get("nonce"))
        mode = hello.body.get("mac")
        if mode != self._mac_mode:
            raise auth.AuthError(f"message MAC {mode!r}, this job uses {self._mac_mode!r}")
        server_nonce = auth.new_nonce()
        args = (self._secret, identity, client_nonce, server_nonce, self._mac_mode)
        self._sessions[identity] = auth.Session.derive(*args)
        self._unproven[identity] = None
        self._unproven.move_to_end(identity)
        while len(self._unproven) > MAX_UNPROVEN:
            stale, _ = self._unproven.popitem(last=False)
            self._sessions.pop(stale, None)
        proof = auth.welcome_proof(*args)
        body = {"nonce": server_nonce.hex(), "proof": proof.hex()}
        self._route(identity, encode(Message(Kind.WELCOME, body=body)))

    def _welcomed(self, sock: zmq.Socket, welcome: Message) -> None:
        """Check a WELCOME's proof; start the session and send what waited for it."""
        identity = self._identity_of[sock]
        client_nonce = self._hello[sock]
        server_nonce = _nonce(welcome.body.get("nonce"))
        args = (self._secret, identity, client_nonce, server_nonce, self._mac_mode)
        proof = auth.welcome_proof(*args)
        if not hmac.compare_digest(proof, _nonce(welcome.body.get("proof"), len(proof))):
            raise auth.AuthError("a WELCOME whose proof does not hold the job's secret")
        del self._hello[sock]
        self._sessions[sock] = auth.Session.derive(*args)
        peer = self._peer_of[sock]
        for msg in self._waiting.pop(sock, []):
            self.send(peer, msg)

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


def _send(sock: zmq.Socket, frames: list[Any], flags: int) -> None:
    """Send one message's frames; the meta frame is small bytes, the arrays go without a copy."""
    last = len(frames) - 1
    sock.send(frames[0], flags | _SNDMORE if last else flags)
    for i in range(1, last + 1):
        sock.send(frames[i], flags | _SNDMORE if i < last else flags, copy=False)


def _nonce(text: object, nbytes: int = auth.NONCE_BYTES) -> bytes:
    """A hex field of a handshake body, as bytes; AuthError unless it has ``nbytes``."""
    try:
        raw = bytes.fromhex(text) if isinstance(text, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != nbytes:
        raise auth.AuthError(f"a handshake field of {nbytes} hex bytes expected")
    return raw
