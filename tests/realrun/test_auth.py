"""Message tags (realrun/auth.py) and the bounds on what a message may make a node parse."""

from __future__ import annotations

import numpy as np
import pytest

from realrun import auth
from realrun.ps.message import Kind, Message, MessageError, decode, encode

SECRET = auth.parse_secret("ab" * 32)
NONCES = (b"c" * auth.NONCE_BYTES, b"s" * auth.NONCE_BYTES)


def _pair(mode: str = "header", identity: bytes = b"w0") -> tuple[auth.Session, auth.Session]:
    """Both ends of one handshake: the connecting side's session and the serving side's."""
    return (
        auth.Session.derive(SECRET, identity, *NONCES, mode),
        auth.Session.derive(SECRET, identity, *NONCES, mode),
    )


def _frames(value: float = 1.0) -> list[bytes]:
    msg = Message(Kind.PUSH, 1, 0, 0, 3, arrays=(np.full(3, value, "f4"),))
    return [bytes(f) for f in encode(msg)]


def _signed(session: auth.Session, frames: list[bytes] | None = None) -> list[bytes]:
    return session.seal(auth.TO_SERVER, frames or _frames())  # the tag ends the meta frame


def test_a_tagged_message_verifies_and_moves_the_counter() -> None:
    client, server = _pair()
    for _ in range(3):
        signed = _signed(client)
        assert bytes(server.verify(auth.TO_SERVER, signed)) == _frames()[0]  # the tag removed
        assert len(signed) == 2  # meta and array: the tag takes no frame of its own
    assert server.seen == 3 and server.proven


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda f: [f[0][: auth.TAG_BYTES], *f[1:]], "no authentication tag"),
        (lambda f: [f[0][: -auth.TAG_BYTES], *f[1:]], "bad authentication tag"),  # tag cut off
        (lambda f: [b"\1" + f[0][1:], *f[1:]], "bad authentication tag"),  # header changed
        (lambda f: [f[0][:44] + b'{"x":1}' + f[0][44:], *f[1:]], "bad authentication tag"),
        (lambda f: [f[0] + f[1]], "bad authentication tag"),  # frames re-cut
        (lambda f: [f[0], f[1][:-4]], "bad authentication tag"),  # array shortened
    ],
)
def test_a_changed_or_untagged_message_is_refused(damage, why) -> None:
    client, server = _pair()
    with pytest.raises(auth.AuthError, match=why):
        server.verify(auth.TO_SERVER, damage(_signed(client)))


def test_another_identity_key_direction_or_a_replay_is_refused() -> None:
    client, _ = _pair(identity=b"w0")
    _, other_rank = _pair(identity=b"w1")
    with pytest.raises(auth.AuthError, match="bad authentication tag"):
        other_rank.verify(auth.TO_SERVER, _signed(client))  # a rank is bound to its key
    stranger = auth.Session.derive(auth.parse_secret("cd" * 32), b"w0", *NONCES, "header")
    _, server = _pair()
    with pytest.raises(auth.AuthError, match="bad authentication tag"):
        server.verify(auth.TO_SERVER, _signed(stranger))
    client, server = _pair()
    with pytest.raises(auth.AuthError, match="bad authentication tag"):
        server.verify(auth.TO_CLIENT, _signed(client))  # reflected back
    message = _signed(client)
    server.verify(auth.TO_SERVER, message)
    with pytest.raises(auth.AuthError, match="replayed"):
        server.verify(auth.TO_SERVER, message)


def test_another_handshake_gives_another_key_so_a_recording_does_not_verify() -> None:
    client, _ = _pair()
    later = auth.Session.derive(SECRET, b"w0", NONCES[0], b"n" * auth.NONCE_BYTES, "header")
    with pytest.raises(auth.AuthError, match="bad authentication tag"):
        later.verify(auth.TO_SERVER, _signed(client))


def test_header_mode_binds_array_lengths_and_full_mode_every_byte() -> None:
    """The default tag leaves array contents to the connection (docs/auth.md); full covers them."""
    changed = _frames(2.0)
    client, server = _pair("header")
    tagged = _signed(client)
    server.verify(auth.TO_SERVER, [tagged[0], changed[1]])
    client, server = _pair("full")
    tagged = _signed(client)
    with pytest.raises(auth.AuthError, match="bad authentication tag"):
        server.verify(auth.TO_SERVER, [tagged[0], changed[1]])
    server.verify(auth.TO_SERVER, tagged)


def test_a_frame_is_bound_by_its_bytes_whatever_view_the_sender_holds() -> None:
    """A sender may hand the tag an array's own view (float32, or 2-D); the receiver only
    ever sees bytes. The tag binds each frame's length in bytes, so the two agree."""
    meta = _frames()[0]
    for array in (np.ones(6, "f4"), np.ones((2, 3), "f4")):
        client, server = _pair()
        sealed = client.seal(auth.TO_SERVER, [meta, memoryview(array)])
        server.verify(auth.TO_SERVER, [sealed[0], array.tobytes()])


def test_a_mode_other_than_header_or_full_is_refused() -> None:
    assert auth.parse_mode("") == "header"
    with pytest.raises(ValueError, match="REALRUN_MESSAGE_MAC='sha1', expected one of"):
        auth.parse_mode("sha1")


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 8"),
        (b'{"port": Infinity}', "Infinity is not a JSON number"),
        (b'{"port": 1e999}', "overflows a double"),
        (b'{"pid": ' + b"9" * 5000 + b"}", "5000 digits"),
        (b'{"x": "' + b"a" * (2 << 20) + b'"}', "expected at most 1,048,576"),
        (b"\xff{}", "not UTF-8"),
    ],
)
def test_a_body_outside_the_bounds_is_a_message_error(body, why) -> None:
    frames = [bytes(f) for f in encode(Message(Kind.REGISTER))]
    with pytest.raises(MessageError, match="body: .*" + why.replace("(", r"\(")):
        decode([frames[0] + body])


def test_a_non_finite_header_value_is_a_message_error() -> None:
    frames = encode(Message(Kind.PUSH, value=float("nan")))
    with pytest.raises(MessageError, match="expected a finite number"):
        decode(frames)


@pytest.mark.parametrize(
    ("name", "value"),
    [("learning_rate", 1e30), ("learning_rate", 0.0), ("momentum", 2.0), ("rescale_grad", "x")],
)
def test_an_optimizer_outside_the_scenarios_ranges_is_refused(name, value) -> None:
    """Even a member cannot CONFIGURE a learning rate of 1e30 (issue 13)."""
    from realrun.ps.optimizer import SGD

    good = {"learning_rate": 0.1, "momentum": 0.9, "weight_decay": 0.0, "rescale_grad": 0.5}
    assert SGD.from_dict(good) == SGD(0.1, 0.9, 0.0, 0.5)
    with pytest.raises(ValueError, match=f"optimizer {name}"):
        SGD.from_dict({**good, name: value})
