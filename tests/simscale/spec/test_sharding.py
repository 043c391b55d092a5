"""Key-to-server assignment equals MXNet's KVStoreDist formulas (src/kvstore/kvstore_dist.h),
and TensorFlow's greedy and round-robin variable placement (tf_cnn_benchmarks'
GreedyLoadBalancingStrategy, replica_device_setter's default)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simscale import zoo
from simscale.spec.sharding import assign_key, place_keys, server_loads


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


def _owners(slices: tuple[tuple, ...]) -> list[int]:
    return [parts[0].server for parts in slices]


def test_greedy_places_each_variable_on_the_least_loaded_server() -> None:
    """Sizes 5, 3, 2, 4, 1 on 2 servers: 5 -> s0 (tie, lowest); 3 -> s1 (0 < 5); 2 -> s1 (3 < 5);
    4 -> s0 (5 = 5, lowest); 1 -> s1 (5 < 9). Loads 9 and 6."""
    slices = place_keys([5, 3, 2, 4, 1], 2, bigarray_bound=100, placement="greedy")
    assert _owners(slices) == [0, 1, 1, 0, 1]
    assert server_loads([5, 3, 2, 4, 1], 2, 100, "greedy") == [9, 6]


def test_round_robin_places_variables_in_turn_after_the_global_step() -> None:
    """replica_device_setter's default: the global step on task 0, then variable i on task
    (i + 1) mod S, whatever its size."""
    slices = place_keys([5, 3, 2, 4, 1], 3, bigarray_bound=100, placement="round_robin")
    assert _owners(slices) == [1, 2, 0, 1, 2]
    assert _owners(place_keys([5, 3], 1, placement="round_robin")) == [0, 0]


def test_round_robin_puts_tensorflows_inception_kernels_on_odd_tasks() -> None:
    """Two variables per convolution (kernel, beta) and an even number of tasks: every kernel
    on an odd task, so the even ones hold only betas and the classifier's bias."""
    model = zoo.get("inception_v3_tf")
    slices = place_keys([a.elements for a in model.arrays], 4, 10**9, "round_robin")
    loads = server_loads([a.elements for a in model.arrays], 4, 10**9, "round_robin")
    kernels = {s[0].server for a, s in zip(model.arrays, slices, strict=True) if len(a.shape) > 1}
    assert kernels == {1, 3}
    assert loads[0] + loads[2] < 0.001 * sum(loads)


def test_hash_placement_is_mxnets() -> None:
    sizes = [a.elements for a in zoo.get("resnet18").arrays]
    assert place_keys(sizes, 5) == tuple(assign_key(k, n, 5) for k, n in enumerate(sizes))


def test_arrays_at_the_bound_are_split_whatever_the_placement() -> None:
    """A big array goes to every server evenly, and counts in greedy's loads: 6 split over 2
    (3 + 3), then 2 -> s0 (tie), then 1 -> s1."""
    slices = place_keys([6, 2, 1], 2, bigarray_bound=5, placement="greedy")
    assert [p.elements for p in slices[0]] == [3, 3]
    assert _owners(slices[1:]) == [0, 1]


def test_greedy_balances_whole_variables_better_than_the_hash() -> None:
    """Inception v3 on 8 servers, whole variables: greedy's busiest server holds less than the
    hash's (why TensorFlow's default placement matters to its PS rows)."""
    sizes = [a.elements for a in zoo.get("inception_v3_noaux").arrays]
    greedy = server_loads(sizes, 8, 10**9, "greedy")
    hashed = server_loads(sizes, 8, 10**9, "hash")
    assert sum(greedy) == sum(hashed) == 23_834_568
    assert max(greedy) < max(hashed)


def test_unknown_placement_is_refused() -> None:
    with pytest.raises(ValueError, match="greedy"):
        place_keys([1, 2], 2, placement="random")
