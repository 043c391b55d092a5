"""JSON from outside, parsed within bounds: run records read from disk, message bodies from peers.

Python's ``json`` accepts what JSON forbids (``NaN``, ``Infinity``), turns ``1e999`` into
infinity, converts integers of any length (a 5,000-digit one raises ValueError under Python's
int-digit limit, smaller ones are slow and then overflow a float), and recurses once per nesting
level (100,000 ``[`` is a RecursionError). Every one of these killed a command or a node
(issue 13). ``loads`` refuses them all with one ``JsonLimitError`` naming what was wrong.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_INT_DIGITS = 30  # beyond any count, byte offset or timestamp a record or message holds


class JsonLimitError(ValueError):
    """Input that is not JSON, or JSON outside the bounds; ``str()`` says which."""


def _constant(name: str) -> Any:
    raise JsonLimitError(f"{name} is not a JSON number (expected a finite number)")


def _int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise JsonLimitError(f"an integer of {len(text)} digits, expected at most {MAX_INT_DIGITS}")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonLimitError(f"{text[:40]} overflows a double (expected a finite number)")
    return value


def depth(value: Any) -> int:
    """Nesting depth of parsed JSON (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
            deepest = max(deepest, d + 1)
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)
            deepest = max(deepest, d + 1)
    return deepest


def loads(raw: bytes | bytearray | memoryview | str, *, max_bytes: int, max_depth: int) -> Any:
    """Parse ``raw`` as strict UTF-8 JSON of at most ``max_bytes`` bytes and ``max_depth`` levels
    of nesting, with finite numbers and integers of at most MAX_INT_DIGITS digits."""
    if len(raw) > max_bytes:
        raise JsonLimitError(f"{len(raw):,} bytes, expected at most {max_bytes:,}")
    if isinstance(raw, str):
        text = raw
    else:
        try:
            text = bytes(raw).decode("utf-8")
        except UnicodeDecodeError as e:
            raise JsonLimitError(f"not UTF-8 at byte {e.start}") from None
    try:
        value = json.loads(text, parse_constant=_constant, parse_int=_int, parse_float=_float)
    except RecursionError:
        raise JsonLimitError(f"nested deeper than {max_depth} levels") from None
    except json.JSONDecodeError as e:
        raise JsonLimitError(f"not JSON: {e}") from None
    if depth(value) > max_depth:
        raise JsonLimitError(f"nested deeper than {max_depth} levels")
    return value
