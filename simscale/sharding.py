"""Key-to-server assignment exactly as MXNet's KVStoreDist does it.

One function shared by the simulator and realrun, so that the shard loads the simulator
predicts are the bytes realrun really sends (style.md, ps-lite).

Source: MXNet src/kvstore/kvstore_dist.h, EncodeDefaultKey: an array with fewer than
``bigarray_bound`` elements goes whole to server ``(key * 9973) % num_servers``; a larger one is
split over *all* servers, part i holding ``round(N/S*(i+1)) - round(N/S*i)`` elements, where
``round`` is C's (halves away from zero), not Python's banker's rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_BIGARRAY_BOUND = 1_000_000  # MXNET_KVSTORE_BIGARRAY_BOUND default
KEY_HASH_MULTIPLIER = 9973  # the prime MXNet multiplies the key by


@dataclass(frozen=True)
class Slice:
    """A contiguous part ``[start, stop)`` of one array's elements, held by one server."""

    server: int
    start: int
    stop: int

    @property
    def elements(self) -> int:
        return self.stop - self.start


def _c_round(x: float) -> int:
    """C's round() for non-negative values: halves go up, as MXNet's static_cast(round(...))."""
    return math.floor(x + 0.5)


def assign_key(
    key: int, elements: int, num_servers: int, bigarray_bound: int = DEFAULT_BIGARRAY_BOUND
) -> tuple[Slice, ...]:
    """Where the ``elements`` of array ``key`` live among ``num_servers`` servers."""
    if num_servers < 1:
        raise ValueError(f"num_servers must be at least 1, got {num_servers}")
    if key < 0 or elements < 0:
        raise ValueError(f"key and elements must be non-negative, got {key}, {elements}")
    if elements < bigarray_bound or num_servers == 1:
        return (Slice((key * KEY_HASH_MULTIPLIER) % num_servers, 0, elements),)
    slices = []
    for i in range(num_servers):
        start = _c_round(elements / num_servers * i)
        stop = _c_round(elements / num_servers * (i + 1))
        slices.append(Slice(i, start, stop))
    return tuple(slices)


def server_loads(
    array_elements: list[int] | tuple[int, ...],
    num_servers: int,
    bigarray_bound: int = DEFAULT_BIGARRAY_BOUND,
) -> list[int]:
    """Elements each server holds when the arrays are keys 0, 1, 2, … in order."""
    loads = [0] * num_servers
    for key, n in enumerate(array_elements):
        for s in assign_key(key, n, num_servers, bigarray_bound):
            loads[s.server] += s.elements
    return loads
