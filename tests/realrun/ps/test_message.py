"""The wire format: a message survives encoding, and anything else is refused with a reason."""

from __future__ import annotations

import numpy as np
import pytest

from realrun.ps.message import (
    HEADER_BYTES,
    MAX_FRAMES,
    Flag,
    Kind,
    Message,
    MessageError,
    decode,
    encode,
)


def test_a_push_round_trips_with_its_array_as_a_view_of_the_frame():
    grad = np.arange(5, dtype=np.float32)
    msg = Message(Kind.PUSH, request_id=42, key=3, start=10, stop=15, body={"a": 1}, arrays=(grad,))
    frames = [bytes(f) for f in encode(msg)]
    assert len(frames) == 2  # one meta frame (header, body), one array frame
    assert len(frames[0]) == HEADER_BYTES + len(b'{"a":1}') and HEADER_BYTES == 44
    back = decode(frames)
    assert (back.kind, back.request_id, back.key, back.start, back.stop, back.body) == (
        Kind.PUSH,
        42,
        3,
        10,
        15,
        {"a": 1},
    )
    np.testing.assert_array_equal(back.arrays[0], grad)
    assert back.arrays[0].base is not None  # no copy was made


def test_compressed_frames_decode_as_32_bit_words():
    words = np.array([7, 1 << 31], dtype=np.uint32)
    back = decode(
        encode(Message(Kind.PUSH, flags=Flag.COMPRESSED_2BIT, value=0.5, arrays=(words,)))
    )
    assert back.arrays[0].dtype == np.uint32 and back.arrays[0].tolist() == [7, 1 << 31]
    assert back.value == 0.5


@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        ([], "no frames"),
        ([b"short"], "meta frame of 5 bytes"),
        ([b"XXXX" + bytes(HEADER_BYTES - 4)], "bad magic"),
        ([encode(Message(Kind.PULL))[0][:4] + bytes([1]) + bytes(HEADER_BYTES - 5)], "version"),
        (
            [encode(Message(Kind.PULL))[0][:5] + bytes([99]) + bytes(HEADER_BYTES - 6)],
            "unknown message kind 99",
        ),
        ([encode(Message(Kind.PULL, start=5, stop=2))[0]], "bad slice"),
        ([encode(Message(Kind.PULL))[0] + b"{not json"], "not JSON"),
        ([encode(Message(Kind.PULL))[0] + b"[1]"], "not a JSON object"),
        ([encode(Message(Kind.PUSH))[0], b"abc"], "whole number"),
        ([encode(Message(Kind.PUSH))[0], *[b""] * MAX_FRAMES], "at most 5"),
    ],
)
def test_malformed_frames_are_refused_with_the_reason(frames, reason):
    with pytest.raises(MessageError, match=reason):
        decode([bytes(f) for f in frames])


def test_decoded_and_renumbered_messages_are_frozen_messages_with_every_field():
    """decode and with_request_id skip the dataclass's __init__ (realrun.ps.message._message);
    what they build must still be an ordinary, frozen Message."""
    import dataclasses

    grad = np.arange(3, dtype=np.float32)
    sent = Message(Kind.PUSH, 5, 2, 0, 3, 0.25, Flag.NO_RECEIVED, {"b": [1]}, (grad,))
    for msg in (decode(encode(sent)), sent.with_request_id(5)):
        assert type(msg) is Message
        fields = {f.name: getattr(msg, f.name) for f in dataclasses.fields(Message)}
        assert fields.pop("arrays")[0].tolist() == [0.0, 1.0, 2.0]
        assert fields == {f: getattr(sent, f) for f in fields}
        with pytest.raises(dataclasses.FrozenInstanceError):
            msg.key = 7
    renumbered = sent.with_request_id(9)
    assert (renumbered.request_id, sent.request_id) == (9, 5)
    assert decode(encode(Message(Kind.PULL))) == Message(Kind.PULL)
