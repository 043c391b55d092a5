"""Authentication: a handshake proves each connection holds the job's secret, then every
message carries a cheap tag under that connection's own session key.

Without it, anyone who could reach a node's port was a member (issue 13): a stranger's PUSH of
NaNs turned a live job's weights to NaN, a forged REGISTER stole a rank. Until issue 36 each
message carried an HMAC-SHA256 over every byte of every frame; that cost 2.8 ms of CPU per 4 MB
on each side (benchmarks/bench_auth_candidates.py), and made a signed job 0.2-0.3x as fast as
MXNet ps-lite. Now:

1. **Handshake** (once per DEALER connection). The connecting side sends HELLO with a fresh
   nonce; the serving side answers WELCOME with its own fresh nonce and a proof
   ``HMAC(secret, identity, both nonces, mode)`` that it holds the secret (a fake server is
   refused). Both derive the session key ``HMAC(secret, ..., same inputs)``. The connecting
   side's first tagged message is its proof: only a secret holder can derive the key. A
   replayed HELLO gets a new nonce, hence a new key, so nothing recorded verifies under it.
2. **Per message**: ``counter (8 bytes) || BLAKE2b-256(session key, direction, counter, frame
   count, every frame's length, header, body)``, appended to the meta frame (header and body,
   realrun.ps.message) so that the tag costs no frame of its own. The counter strictly
   increases per direction of a session (a recorded message cannot be replayed within it), the
   direction byte stops a message being reflected back, and the lengths stop frames being
   re-cut.
   With ``REALRUN_MESSAGE_MAC=full`` the array bytes are covered too, by a Poly1305 over them
   whose one-time key is ChaCha20(session key, counter, direction) (RFC 8439's construction,
   the fastest candidate measured here: 6 GB/s per core) folded into the BLAKE2b tag.

What the default mode does not protect (docs/auth.md argues it): the contents of array frames
against someone who can rewrite packets of an established TCP connection (on-path). Everyone
else, a stranger who can only reach the ports, can neither connect as a member nor make a node
act on anything they send.

The secret is per job: the launcher draws it (``secrets.token_hex(32)``) and passes it as
``REALRUN_JOB_SECRET`` with the ``DMLC_*`` variables; a user starting nodes by hand sets it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

SECRET_VARIABLE = "REALRUN_JOB_SECRET"
MAC_VARIABLE = "REALRUN_MESSAGE_MAC"
MAC_MODES = ("header", "full")  # the meta data and array lengths only, or every byte
MIN_SECRET_HEX = 32  # 128 bits
NONCE_BYTES = 16
_COUNTER = struct.Struct("<Q")
_LENGTH = struct.Struct("<Q")
TAG_BYTES = _COUNTER.size + 32
TO_SERVER = b"\x01"  # DEALER -> ROUTER
TO_CLIENT = b"\x02"  # ROUTER -> DEALER
_PERSON = b"realrun-msg-v3"  # v3: the tag ends the meta frame


class AuthError(ValueError):
    """A message without a valid tag, a replayed one, or a failed handshake."""


def parse_secret(text: str) -> bytes:
    """The key from ``REALRUN_JOB_SECRET`` (hex, at least 128 bits); ValueError if unusable."""
    text = text.strip()
    if len(text) < MIN_SECRET_HEX:
        raise ValueError(
            f"{SECRET_VARIABLE} has {len(text)} hex digits, expected at least {MIN_SECRET_HEX}"
        )
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"{SECRET_VARIABLE} is not hexadecimal") from None


def parse_mode(text: str) -> str:
    """``REALRUN_MESSAGE_MAC``'s value ("" means header); ValueError naming the choices."""
    mode = text.strip() or "header"
    if mode not in MAC_MODES:
        raise ValueError(f"{MAC_VARIABLE}={text!r}, expected one of {', '.join(MAC_MODES)}")
    if mode == "full":
        _poly1305_parts()  # fail at start, not at the first array
    return mode


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def _derive(secret: bytes, label: bytes, identity: bytes, nonces: bytes, mode: str) -> bytes:
    h = hmac.new(secret, b"realrun-" + label + b"-v2", "sha256")
    h.update(_LENGTH.pack(len(identity)))
    h.update(identity)
    h.update(nonces)
    h.update(mode.encode())
    return h.digest()


def welcome_proof(
    secret: bytes, identity: bytes, client_nonce: bytes, server_nonce: bytes, mode: str
) -> bytes:
    """What the serving side sends in WELCOME to prove it holds the secret."""
    return _derive(secret, b"welcome", identity, client_nonce + server_nonce, mode)


@dataclass
class Session:
    """One authenticated connection: its key, and the counters of both directions."""

    key: bytes
    full: bool = False
    sent: int = 0  # counter of the last message this side tagged
    seen: int = 0  # counter of the last message this side accepted
    proven: bool = False  # the peer has sent a message that verified (serving side)
    _poly: Any = field(default=None, repr=False)
    _keyed: Any = field(default=None, repr=False)

    @classmethod
    def derive(
        cls,
        secret: bytes,
        identity: bytes,
        client_nonce: bytes,
        server_nonce: bytes,
        mode: str,
    ) -> Session:
        """The session both ends of a handshake compute (only a secret holder can)."""
        if len(client_nonce) != NONCE_BYTES or len(server_nonce) != NONCE_BYTES:
            raise AuthError(f"nonces of {NONCE_BYTES} bytes expected")
        key = _derive(secret, b"session", identity, client_nonce + server_nonce, mode)
        return cls(key, full=mode == "full")

    def tag(self, direction: bytes, frames: Sequence[Any]) -> bytes:
        """The tag to append to the meta frame ``frames[0]`` before sending in ``direction``."""
        self.sent += 1
        packed = _COUNTER.pack(self.sent)
        return packed + self._mac(direction, packed, frames)

    def seal(self, direction: bytes, frames: list[Any]) -> list[Any]:
        """``frames`` with the tag appended to their meta frame, ready to send."""
        frames[0] = bytes(frames[0]) + self.tag(direction, frames)
        return frames

    def verify(self, direction: bytes, frames: Sequence[Any]) -> memoryview:
        """Check the tag at the end of the meta frame ``frames[0]`` of a message received in
        ``direction``; the meta frame without it.

        AuthError when it is missing or wrong, or its counter does not exceed the last one
        accepted (a replay)."""
        if not frames:
            raise AuthError("no frames")
        meta = _view(frames[0])
        if len(meta) <= TAG_BYTES:
            raise AuthError("no authentication tag")
        untagged = meta[:-TAG_BYTES]
        raw = bytes(meta[-TAG_BYTES:])
        packed, mac = raw[: _COUNTER.size], raw[_COUNTER.size :]
        if not hmac.compare_digest(mac, self._mac(direction, packed, [untagged, *frames[1:]])):
            raise AuthError("bad authentication tag (not from this connection's key holder)")
        (counter,) = _COUNTER.unpack(packed)
        if counter <= self.seen:
            raise AuthError(f"replayed message (counter {counter}, already at {self.seen})")
        self.seen = counter
        self.proven = True
        return untagged

    def _mac(self, direction: bytes, packed: bytes, frames: Sequence[Any]) -> bytes:
        # A copy of the keyed state costs half of a keyed start (the key block is compressed
        # once per session, not once per message).
        if self._keyed is None:
            self._keyed = hashlib.blake2b(key=self.key, digest_size=32, person=_PERSON)
        h = self._keyed.copy()
        views = [_view(f) for f in frames]
        # direction, counter, frame count and every frame's length in bytes (``nbytes``: a view
        # of float32 or of 2-D data has a ``len`` in elements or rows) in one update; then the
        # meta frame (the fixed header and the JSON body): always covered.
        lengths = struct.pack(f"<{len(views) + 1}Q", len(views), *(v.nbytes for v in views))
        h.update(direction + packed + lengths)
        h.update(views[0])
        if self.full and len(views) > 1:
            h.update(self._poly1305(direction, packed, views[1:]))
        return h.digest()

    def _poly1305(self, direction: bytes, packed: bytes, views: list[memoryview]) -> bytes:
        if self._poly is None:
            self._poly = _poly1305_parts()
        chacha20, poly1305 = self._poly
        # RFC 8439 2.6: the one-time key is the first 32 bytes of ChaCha20's keystream under
        # a nonce used once: (block 0, counter, direction).
        nonce = b"\0\0\0\0" + packed + direction * 4
        one_time = chacha20(self.key, nonce).encryptor().update(bytes(32))
        mac = poly1305(one_time)
        for view in views:
            mac.update(view)
        return mac.finalize()


def _poly1305_parts() -> tuple[Any, Any]:
    try:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
        from cryptography.hazmat.primitives.poly1305 import Poly1305
    except ImportError:
        raise ValueError(
            f"{MAC_VARIABLE}=full needs the 'cryptography' package "
            "(pip install 'simscale[realrun]')"
        ) from None

    def chacha20(key: bytes, nonce: bytes) -> Any:
        return Cipher(algorithms.ChaCha20(key, nonce), mode=None)

    return chacha20, Poly1305


def _view(frame: Any) -> memoryview:
    return memoryview(frame.buffer if hasattr(frame, "buffer") else frame)
