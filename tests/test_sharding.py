"""Key-to-server assignment equals MXNet's KVStoreDist formulas (src/kvstore/kvstore_dist.h)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from simscale import zoo
from simscale.sharding import assign_key, server_loads


def test_small_array_goes_whole_to_the_hashed_server() -> None:
    """Below the bound, key k lives on server (k * 9973) % S, whole."""
    for key in range(50):
        (s,) = assign_key(key, 999_999, 7)
        assert (s.server, s.start, s.stop) == ((key * 9973) % 7, 0, 999_999)


def test_bound_is_exclusive() -> None:
    """An array of exactly bigarray_bound elements is already big (MXNet: size < bound is small)."""
    assert len(assign_key(3, 1_000_000, 4)) == 4
    assert len(assign_key(3, 999_999, 4)) == 1


def test_big_array_split_by_c_rounding() -> None:
    """10 elements over 3 servers: round(3.33)=3, round(6.67)=7, 10 → parts 3, 4, 3."""
    parts = assign_key(0, 10, 3, bigarray_bound=5)
    assert [(p.server, p.start, p.stop) for p in parts] == [(0, 0, 3), (1, 3, 7), (2, 7, 10)]


def test_halves_round_away_from_zero_as_in_c() -> None:
    """5 over 2: C's round(2.5) = 3 (Python's would give 2): parts 3 and 2."""
    parts = assign_key(0, 5, 2, bigarray_bound=1)
    assert [p.elements for p in parts] == [3, 2]


@given(n=st.integers(1, 10_000_000), servers=st.integers(1, 64), key=st.integers(0, 10_000))
def test_slices_cover_the_array_exactly_once(n: int, servers: int, key: int) -> None:
    parts = assign_key(key, n, servers)
    assert parts[0].start == 0 and parts[-1].stop == n
    assert all(a.stop == b.start for a, b in itertools.pairwise(parts))
    assert all(0 <= p.server < servers for p in parts)
    if len(parts) > 1:
        sizes = [p.elements for p in parts]
        assert max(sizes) - min(sizes) <= 1


def test_resnet50_small_key_placement_is_uneven() -> None:
    """Hashing small keys leaves servers unevenly loaded (users saw 4 vs 7 Gb/s, mxnet#8290)."""
    elements = [a.elements for a in zoo.get("resnet50").arrays]
    loads = server_loads(elements, 4)
    assert sum(loads) == 25_557_032
    assert max(loads) > 1.05 * min(loads)
