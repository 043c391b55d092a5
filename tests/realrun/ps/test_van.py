"""The Van's handshake (realrun/auth.py): only a holder of the job's secret gets a session,
on either side, and nothing recorded from one session is accepted again."""

from __future__ import annotations

import time

import numpy as np
import zmq

from realrun import auth
from realrun.ps.message import Kind, Message, decode, encode
from realrun.ps.van import Van

SECRET = auth.parse_secret("5e" * 32)
OTHER = auth.parse_secret("07" * 32)


def _poll(van: Van, seconds: float = 1.0) -> list:
    got, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        got += van.poll(0.05)
    return got


def _pair(server_secret: bytes, client_secret: bytes, mode: str = "header"):
    server = Van(server_secret, mac_mode=mode)
    port = server.bind("127.0.0.1")
    client = Van(client_secret, mac_mode=mode)
    client.connect("s", f"tcp://127.0.0.1:{port}", "w0")
    return server, client, port


class Recorder:
    """A raw DEALER that does the handshake by hand, so a test can keep and replay its frames."""

    def __init__(self, port: int, identity: bytes = b"rec") -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, identity)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(f"tcp://127.0.0.1:{port}")
        self.identity = identity

    def handshake(self, server: Van, hello: list[bytes] | None = None) -> tuple[list[bytes], bytes]:
        """Send a HELLO (a recorded one if given); return it and the WELCOME's nonce."""
        nonce = auth.new_nonce()
        hello = hello or [
            bytes(f)
            for f in encode(Message(Kind.HELLO, body={"nonce": nonce.hex(), "mac": "header"}))
        ]
        self.sock.send_multipart(hello)
        deadline = time.monotonic() + 5
        while not self.sock.poll(0):
            assert server.poll(0.05) == [] and time.monotonic() < deadline, "no WELCOME"
        return hello, bytes.fromhex(decode(self.sock.recv_multipart()).body["nonce"])

    def close(self) -> None:
        self.sock.close()
        self.ctx.term()


def test_a_peer_with_the_secret_is_served_both_ways() -> None:
    server, client, _ = _pair(SECRET, SECRET)
    try:
        client.send("s", Message(Kind.PUSH, 5, arrays=(np.arange(4, dtype=np.float32),)))
        got = []
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            got = server.poll(0.05)
            client.poll(0)  # the client reads the WELCOME, then sends what waited for it
        assert [g.msg.kind for g in got] == [Kind.PUSH] and got[0].identity == b"w0"
        assert server.reply(b"w0", Message(Kind.RESPONSE, 5))
        assert [g.msg.kind for g in _poll(client)] == [Kind.RESPONSE]
        assert server.rejected == client.rejected == 0
    finally:
        client.close()
        server.close()


def test_a_client_with_the_wrong_key_is_refused_and_refuses_the_server() -> None:
    server, client, _ = _pair(SECRET, OTHER)
    try:
        client.send("s", Message(Kind.REGISTER, body={"role": "worker"}))
        for _ in range(20):
            assert server.poll(0.05) == []
            assert client.poll(0.05) == []
        # The client found the WELCOME's proof false: it sends nothing to a fake server.
        assert client.rejected == 1
        assert client.bytes_sent == 0
    finally:
        client.close()
        server.close()


def test_a_mode_mismatch_is_refused_at_the_handshake() -> None:
    server = Van(SECRET, mac_mode="full")
    port = server.bind("127.0.0.1")
    client = Van(SECRET, mac_mode="header")
    client.connect("s", f"tcp://127.0.0.1:{port}", "w0")
    try:
        client.send("s", Message(Kind.REGISTER))
        assert _poll(server) == [] and _poll(client, 0.2) == []
        assert server.rejected == 1
    finally:
        client.close()
        server.close()


def test_a_replayed_handshake_or_message_is_refused() -> None:
    """A recorded HELLO gets a new nonce (so a new key); a recorded message verifies once."""
    server = Van(SECRET)
    port = server.bind("127.0.0.1")
    recorder = Recorder(port)
    try:
        hello, server_nonce = recorder.handshake(server)
        session = auth.Session.derive(
            SECRET, b"rec", bytes.fromhex(decode(hello).body["nonce"]), server_nonce, "header"
        )
        message = session.seal(auth.TO_SERVER, [bytes(f) for f in encode(Message(Kind.STATS, 3))])
        recorder.sock.send_multipart(message)
        assert [g.msg.kind for g in _poll(server, 0.5)] == [Kind.STATS]
        recorder.sock.send_multipart(message)  # replayed on the same connection
        assert _poll(server, 0.5) == [] and server.rejected == 1
        recorder.sock.send_multipart(hello)  # a HELLO on an identity already authenticated
        assert _poll(server, 0.5) == [] and server.rejected == 2
    finally:
        recorder.close()
        server.close()
    # The same recording against a fresh node of a job with the same secret.
    server = Van(SECRET)
    port = server.bind("127.0.0.1")
    replayer = Recorder(port)
    try:
        _, new_nonce = replayer.handshake(server, hello)
        assert new_nonce != server_nonce
        replayer.sock.send_multipart(message)
        assert _poll(server, 0.5) == [] and server.rejected == 1
    finally:
        replayer.close()
        server.close()


def test_a_strangers_flood_of_hellos_holds_a_bounded_number_of_sessions() -> None:
    from realrun.ps import van as van_module

    server = Van(SECRET)
    port = server.bind("127.0.0.1")
    ctx = zmq.Context()
    socks = []
    try:
        for i in range(50):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.IDENTITY, f"x{i}".encode())
            s.setsockopt(zmq.LINGER, 0)
            s.connect(f"tcp://127.0.0.1:{port}")
            hello = Message(Kind.HELLO, body={"nonce": auth.new_nonce().hex(), "mac": "header"})
            s.send_multipart(encode(hello))
            socks.append(s)
        old, van_module.MAX_UNPROVEN = van_module.MAX_UNPROVEN, 10
        try:
            assert _poll(server) == []
        finally:
            van_module.MAX_UNPROVEN = old
        assert len(server._sessions) <= 10
    finally:
        for s in socks:
            s.close()
        ctx.term()
        server.close()
