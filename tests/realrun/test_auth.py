"""Message tags (realrun/auth.py) and the bounds on what a message may make a node parse."""

from __future__ import annotations

import numpy as np
import pytest

from realrun import auth
from realrun.ps.message import Kind, Message, MessageError, decode, encode

KEY = auth.parse_secret("ab" * 32)


def _signed(counter: int = 1, identity: bytes = b"w0") -> list:
    frames = [bytes(f) for f in encode(Message(Kind.PUSH, 1, 0, 0, 3, arrays=(np.ones(3, "f4"),)))]
    return [*frames, auth.tag(KEY, identity, counter, frames)]


def test_a_tagged_message_verifies_and_returns_its_counter() -> None:
    assert auth.verify(KEY, b"w0", _signed(5), last_counter=4) == 5


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda f: f[:-1], "no authentication tag"),
        (lambda f: [*f[:-2], f[-2][:-4] + b"\0\0\0\0", f[-1]], "bad authentication tag"),
        (lambda f: [f[0], f[1] + f[2], f[3]], "bad authentication tag"),  # frames re-cut
    ],
)
def test_a_changed_or_untagged_message_is_refused(damage, why) -> None:
    with pytest.raises(auth.AuthError, match=why):
        auth.verify(KEY, b"w0", damage(_signed()), last_counter=0)


def test_another_identity_or_key_or_a_replay_is_refused() -> None:
    with pytest.raises(auth.AuthError, match="bad authentication tag"):
        auth.verify(KEY, b"w1", _signed(identity=b"w0"), last_counter=0)  # forged rank
    with pytest.raises(auth.AuthError, match="bad authentication tag"):
        auth.verify(auth.parse_secret("cd" * 32), b"w0", _signed(), last_counter=0)
    with pytest.raises(auth.AuthError, match="replayed"):
        auth.verify(KEY, b"w0", _signed(3), last_counter=3)


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
        decode([frames[0], body])


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
