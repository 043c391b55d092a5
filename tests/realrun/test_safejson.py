"""JSON from outside is parsed within bounds: what Python's json accepts and JSON forbids, and
what would exhaust a node (huge integers, overflowing floats, deep nesting), is refused with one
JsonLimitError that says what was wrong; valid JSON within bounds parses as json.loads does."""

from __future__ import annotations

import json

import pytest

from realrun.safejson import MAX_INT_DIGITS, JsonLimitError, depth, loads

BIG = {"max_bytes": 1 << 20, "max_depth": 8}


def test_valid_json_within_bounds_parses_as_json_does() -> None:
    text = '{"a": [1, 2.5, -3e2, null, true, "x\\u00e9"], "b": {"c": 12345678901234567890}}'
    assert loads(text, **BIG) == json.loads(text)
    assert loads(text.encode(), **BIG) == json.loads(text)
    assert loads(memoryview(text.encode()), **BIG) == json.loads(text)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("NaN", "NaN is not a JSON number"),
        ("[Infinity]", "Infinity is not a JSON number"),
        ("-Infinity", "-Infinity is not a JSON number"),
        ("1e999", "1e999 overflows a double"),
        ("1" * (MAX_INT_DIGITS + 1), f"an integer of {MAX_INT_DIGITS + 1} digits"),
        ("{", "not JSON"),
        (b"\xff\xfe", "not UTF-8 at byte 0"),
    ],
)
def test_what_json_forbids_or_cannot_hold_is_refused_by_name(raw: str | bytes, says: str) -> None:
    with pytest.raises(JsonLimitError, match=says.replace("+", r"\+")):
        loads(raw, **BIG)


def test_an_integer_of_the_most_digits_allowed_still_parses() -> None:
    assert loads("9" * MAX_INT_DIGITS, **BIG) == int("9" * MAX_INT_DIGITS)


def test_size_is_checked_before_parsing() -> None:
    with pytest.raises(JsonLimitError, match="11 bytes, expected at most 10"):
        loads(b'"123456789"', max_bytes=10, max_depth=8)
    assert loads(b'"12345678"', max_bytes=10, max_depth=8) == "12345678"


def test_nesting_is_bounded_without_recursion_errors() -> None:
    assert depth(1) == 0
    assert depth([[1], {"a": {"b": []}}]) == 4  # list > dict > dict "a" > list "b"
    assert loads("[[[]]]", max_bytes=100, max_depth=3) == [[[]]]
    with pytest.raises(JsonLimitError, match="nested deeper than 2 levels"):
        loads("[[[]]]", max_bytes=100, max_depth=2)
    deep = "[" * 100_000 + "]" * 100_000  # json's recursion would fail long before the end
    with pytest.raises(JsonLimitError, match="nested deeper than 8 levels"):
        loads(deep, max_bytes=1 << 20, max_depth=8)
