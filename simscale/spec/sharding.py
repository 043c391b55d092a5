"""Key-to-server assignment exactly as MXNet's KVStoreDist does it, and as TensorFlow places
whole variables on its parameter servers.

One function shared by the simulator and realrun, so that the shard loads the simulator
predicts are the bytes realrun really sends (style.md, ps-lite).

Source: MXNet src/kvstore/kvstore_dist.h, EncodeDefaultKey: an array with fewer than
``bigarray_bound`` elements goes whole to server ``(key * 9973) % num_servers``; a larger one is
split over *all* servers, part i holding ``round(N/S*(i+1)) - round(N/S*i)`` elements, where
``round`` is C's (halves away from zero), not Python's banker's rounding.

TensorFlow (tf_cnn_benchmarks, tensorflow/benchmarks fd87986 of 2017, the version the published
2017 campaigns ran) never hashes. With ``--variable_update parameter_server`` each variable goes,
in creation order, to the PS task holding the fewest bytes so far (``variable_mgr.py``,
``GreedyLoadBalancingStrategy``: the lowest task on a tie); by bytes, that hardly depends on
which small arrays a framework creates. With ``distributed_replicated`` the PS copy of every
trainable variable, in creation order, goes to the tasks in turn (``replica_device_setter``'s
default round-robin), after the global step, which the same device function put on task 0; so
variable i lands on task (i + 1) mod S, and which arrays a model creates matters: TensorFlow's
Inception v3 has two per convolution (kernel and beta, ``inception_v3_tf``), so with an even
number of tasks every kernel lands on an odd one. ``place_keys`` offers the three as
``key_placement`` "hash", "greedy" and "round_robin"; arrays at or above the bound are still
split over all servers (TensorFlow's rows set a bound no array reaches).
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


KEY_PLACEMENTS = ("hash", "greedy", "round_robin")


def place_keys(
    array_elements: list[int] | tuple[int, ...],
    num_servers: int,
    bigarray_bound: int = DEFAULT_BIGARRAY_BOUND,
    placement: str = "hash",
) -> tuple[tuple[Slice, ...], ...]:
    """Each array's slices when the arrays are keys 0, 1, 2, … in order, the arrays kept whole
    placed by ``placement`` (MXNet's "hash", TensorFlow's "greedy" or "round_robin")."""
    if placement == "hash":
        return tuple(
            assign_key(key, n, num_servers, bigarray_bound) for key, n in enumerate(array_elements)
        )
    if placement not in KEY_PLACEMENTS:
        known = ", ".join(KEY_PLACEMENTS)
        raise ValueError(f"key placement must be one of {known}, got {placement!r}")
    loads = [0] * num_servers  # elements held so far (greedy's bytes, at one width)
    turn = 1 % num_servers  # round-robin's next task: the global step took task 0's turn
    out = []
    for key, n in enumerate(array_elements):
        if n >= bigarray_bound and num_servers > 1:
            slices = assign_key(key, n, num_servers, bigarray_bound)
        else:
            if placement == "greedy":
                server = min(range(num_servers), key=loads.__getitem__)
            else:
                server, turn = turn, (turn + 1) % num_servers
            slices = (Slice(server, 0, n),)
        for sl in slices:
            loads[sl.server] += sl.elements
        out.append(slices)
    return tuple(out)


def server_loads(
    array_elements: list[int] | tuple[int, ...],
    num_servers: int,
    bigarray_bound: int = DEFAULT_BIGARRAY_BOUND,
    placement: str = "hash",
) -> list[int]:
    """Elements each server holds when the arrays are keys 0, 1, 2, … in order."""
    loads = [0] * num_servers
    for slices in place_keys(array_elements, num_servers, bigarray_bound, placement):
        for s in slices:
            loads[s.server] += s.elements
    return loads
