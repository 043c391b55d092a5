"""The max-min fair solver: hand-derived shares, then the properties that define the allocation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simscale.network.fairshare import (
    LEVEL_RTOL,
    WEIGHT_RESIDUE,
    link_loads_Bps,
    max_min_fair,
    paths_to_array,
    solve_grouped,
    solve_heap,
    solve_rounds,
)
from tests.support.paths import ROOT

INF = math.inf


def test_three_flows_on_one_link_split_it_equally():
    """One 9 B/s link, three flows: each gets 9 / 3 = 3."""
    assert max_min_fair([9.0], [[0], [0], [0]]).tolist() == pytest.approx([3.0, 3.0, 3.0])


def test_parking_lot_gives_the_long_flow_the_same_share_as_each_short_one():
    """Links 0 and 1 of 10 B/s; flow L crosses both, S0 only link 0, S1 only link 1.

    Both links have 2 flows and fill together at level 10 / 2 = 5: L = S0 = S1 = 5.
    """
    rates = max_min_fair([10.0, 10.0], [[0, 1], [0], [1]])
    assert rates.tolist() == pytest.approx([5.0, 5.0, 5.0])


def test_parking_lot_with_a_narrow_second_link():
    """Link 0: 10 B/s, link 1: 4 B/s; L crosses both, S0 link 0, S1 link 1.

    Link 1 fills first, at 4 / 2 = 2: L = S1 = 2. Link 0 then has 10 - 2 = 8 left for S0 alone.
    """
    rates = max_min_fair([10.0, 4.0], [[0, 1], [0], [1]])
    assert rates.tolist() == pytest.approx([2.0, 8.0, 2.0])


def test_a_flow_bounded_by_its_own_rate_releases_capacity_to_the_others():
    """One 12 B/s link, flows A (bound 2), B, C unbounded.

    The level reaches A's bound 2 first (12 / 3 = 4 > 2): A freezes at 2. B and C share the
    remaining 10: 5 each.
    """
    rates = max_min_fair([12.0], [[0], [0], [0]], [2.0, INF, INF])
    assert rates.tolist() == pytest.approx([2.0, 5.0, 5.0])


def test_a_bound_above_the_fair_share_changes_nothing():
    """One 12 B/s link, three flows, A bounded at 7: the fair share 4 is below 7, all get 4."""
    rates = max_min_fair([12.0], [[0], [0], [0]], [7.0, INF, INF])
    assert rates.tolist() == pytest.approx([4.0, 4.0, 4.0])


def test_flows_on_disjoint_links_each_get_their_own_link():
    """Flows on links of 3, 5 and 7 B/s that share nothing run at 3, 5 and 7."""
    rates = max_min_fair([3.0, 5.0, 7.0], [[0], [1], [2]])
    assert rates.tolist() == pytest.approx([3.0, 5.0, 7.0])


def test_incast_and_a_bystander_on_the_senders_nic():
    """NICs of 6 B/s (host h: egress link 2h, ingress 2h+1); A: h0->h2, B: h1->h2, C: h0->h3.

    h2.ingress (link 5) holds A, B: fills at 3. h0.egress (link 0) holds A, C: also fills at 3.
    Both fill together at 3, freezing A, B, C at 3 — although h3.ingress could give C 6, C's
    sender is full. Every flow: 3.
    """
    rates = max_min_fair([6.0] * 8, [[0, 5], [2, 5], [0, 7]])
    assert rates.tolist() == pytest.approx([3.0, 3.0, 3.0])


def test_second_level_after_the_first_bottleneck_freezes():
    """Links 0: 4 B/s (flows A, B), 1: 10 B/s (flows B, C, D).

    Link 0 fills at 2 (link 1 would fill at 10/3 = 3.33): A = B = 2. Link 1 has 10 - 2 = 8 left
    for C and D: 4 each.
    """
    rates = max_min_fair([4.0, 10.0], [[0], [0, 1], [1], [1]])
    assert rates.tolist() == pytest.approx([2.0, 2.0, 4.0, 4.0])


def test_a_flow_crossing_no_link_is_limited_only_by_its_bound():
    """A flow on no link gets its bound, or inf without one; it takes nothing from others."""
    rates = max_min_fair([5.0], [[], [], [0]], [3.0, INF, INF])
    assert rates.tolist() == [3.0, INF, 5.0]


def test_no_flows_gives_no_rates():
    """An empty problem is valid and has an empty answer."""
    assert max_min_fair([1.0], []).shape == (0,)


@pytest.mark.parametrize(
    ("cap", "paths", "bounds", "message"),
    [
        ([0.0], [[0]], None, "capacities must be positive"),
        ([1.0], [[1]], None, "outside 0..0"),
        ([1.0], [[0, 0]], None, "twice"),
        ([1.0], [[0]], [0.0], "bounds must be positive"),
        ([1.0], [[0]], [1.0, 2.0], "one entry per flow"),
    ],
)
def test_invalid_problems_are_rejected_with_the_reason(cap, paths, bounds, message):
    """Bad capacities, unknown or repeated links and bad bounds raise a ValueError saying so."""
    with pytest.raises(ValueError, match=message):
        max_min_fair(cap, paths, bounds)


def test_raising_one_capacity_can_slow_another_flow():
    """Why "more capacity never slows a flow" is false for a single link.

    Links 0: 2 B/s, 1: 3 B/s; A on link 0, B on both, C on link 1. Link 0 fills first, at
    2 / 2 = 1 (link 1 would at 1.5): A = B = 1, and C gets 3 - 1 = 2. Raise link 0 to 10: now
    link 1 fills first, at 1.5: B = C = 1.5, A gets 10 - 1.5 = 8.5 — and C drops from 2 to 1.5.
    """
    before = max_min_fair([2.0, 3.0], [[0], [0, 1], [1]])
    after = max_min_fair([10.0, 3.0], [[0], [0, 1], [1]])
    assert before.tolist() == pytest.approx([1.0, 1.0, 2.0])
    assert after.tolist() == pytest.approx([8.5, 1.5, 1.5])


# ----- properties --------------------------------------------------------------------------

REL = 1e-9


@st.composite
def problems(draw, max_links: int = 6, max_flows: int = 14):
    """A random sharing problem: capacities, paths of distinct links, some flows bounded."""
    n_links = draw(st.integers(1, max_links))
    cap = draw(st.lists(st.floats(0.5, 100.0), min_size=n_links, max_size=n_links))
    n_flows = draw(st.integers(0, max_flows))
    paths = [
        draw(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=3, unique=True))
        for _ in range(n_flows)
    ]
    bounds = draw(
        st.lists(st.one_of(st.just(INF), st.floats(0.1, 60.0)), min_size=n_flows, max_size=n_flows)
    )
    return cap, paths, bounds


@settings(max_examples=150, deadline=None)
@given(problems())
def test_no_link_carries_more_than_its_capacity_and_no_flow_exceeds_its_bound(problem):
    """Feasibility: every link load <= capacity, every rate <= its bound (within rounding)."""
    cap, paths, bounds = problem
    rates = max_min_fair(cap, paths, bounds)
    load = link_loads_Bps(len(cap), paths, rates)
    assert np.all(load <= np.array(cap) * (1 + REL))
    assert np.all(rates <= np.array(bounds) * (1 + REL))
    assert np.all(rates > 0)


@settings(max_examples=150, deadline=None)
@given(problems())
def test_every_flow_has_a_bottleneck(problem):
    """The max-min characterisation: each flow is at its own bound, or crosses a saturated link
    on which no other flow is faster. Together with feasibility this defines the allocation."""
    cap, paths, bounds = problem
    rates = max_min_fair(cap, paths, bounds)
    load = link_loads_Bps(len(cap), paths, rates)
    fastest = np.zeros(len(cap))
    for route, r in zip(paths, rates, strict=True):
        for link in route:
            fastest[link] = max(fastest[link], r)
    for route, r, b in zip(paths, rates, bounds, strict=True):
        at_bound = r >= b * (1 - REL)
        bottlenecked = any(
            load[link] >= cap[link] * (1 - REL) and r >= fastest[link] * (1 - REL) for link in route
        )
        assert at_bound or bottlenecked


@settings(max_examples=100, deadline=None)
@given(problems(), st.floats(1.0, 10.0))
def test_scaling_every_capacity_and_bound_scales_every_rate(problem, factor):
    """Homogeneity: the problem scaled by c has the allocation scaled by c."""
    cap, paths, bounds = problem
    base = max_min_fair(cap, paths, bounds)
    scaled = max_min_fair([c * factor for c in cap], paths, [b * factor for b in bounds])
    np.testing.assert_allclose(scaled, base * factor, rtol=1e-9)


@settings(max_examples=150, deadline=None)
@given(problems(), st.floats(1.0, 10.0))
def test_scaling_every_capacity_up_never_slows_any_flow(problem, factor):
    """With the flows' own bounds fixed, a uniformly faster network slows no flow.

    (Unlike raising a single link, see test_raising_one_capacity_can_slow_another_flow.)
    """
    cap, paths, bounds = problem
    base = max_min_fair(cap, paths, bounds)
    faster = max_min_fair([c * factor for c in cap], paths, bounds)
    assert np.all(faster >= base * (1 - REL))


def _lex_not_smaller(new: np.ndarray, old: np.ndarray, scale: float) -> bool:
    """Whether sorted(new) >= sorted(old) lexicographically, ties within rounding."""
    tol = REL * scale
    for a, b in zip(np.sort(new), np.sort(old), strict=True):
        if a > b + tol:
            return True
        if a < b - tol:
            return False
    return True


@settings(max_examples=150, deadline=None)
@given(problems(), st.data())
def test_raising_one_capacity_never_lowers_the_sorted_rates(problem, data):
    """What does hold for one link: the max-min allocation is the leximin-best feasible one, and
    a larger capacity only enlarges the feasible set, so the sorted rate vector can only rise
    lexicographically; in particular the slowest flow never gets slower."""
    cap, paths, bounds = problem
    link = data.draw(st.integers(0, len(cap) - 1))
    factor = data.draw(st.floats(1.0, 10.0))
    raised = list(cap)
    raised[link] *= factor
    base = max_min_fair(cap, paths, bounds)
    after = max_min_fair(raised, paths, bounds)
    if len(paths):
        assert _lex_not_smaller(after, base, max(raised))
        assert after.min() >= base.min() * (1 - REL)


@settings(max_examples=100, deadline=None)
@given(problems(max_links=12, max_flows=40))
def test_heap_and_numpy_solvers_agree(problem):
    """The two implementations of progressive filling give the same rates."""
    cap, paths, bounds = problem
    heap = np.array(solve_heap(cap, paths, bounds))
    padded = paths_to_array(paths, width=3)
    padded = np.where(padded < 0, len(cap), padded)
    rounds = solve_rounds(np.append(cap, INF), padded, np.array(bounds, dtype=float))
    np.testing.assert_allclose(rounds, heap, rtol=1e-9)


def test_large_symmetric_all_to_all_takes_the_numpy_path_and_shares_equally():
    """32 hosts of 1 GB/s, every ordered pair one flow (992 flows, numpy solver): each NIC
    direction carries 31 flows, all fill together, so every flow gets 1e9 / 31."""
    hosts = 32
    paths = [[2 * s, 2 * d + 1] for s in range(hosts) for d in range(hosts) if s != d]
    rates = max_min_fair([1e9] * (2 * hosts), paths)
    np.testing.assert_allclose(rates, 1e9 / 31, rtol=1e-12)


@settings(max_examples=100, deadline=None)
@given(problems(max_links=8, max_flows=12), st.data())
def test_a_counted_entry_equals_that_many_identical_flows(problem, data):
    """``count=[n]`` for a path solves exactly as n separate copies of that flow (how the network
    model solves per host pair), in both solvers."""
    cap, paths, bounds = problem
    counts = data.draw(st.lists(st.integers(1, 4), min_size=len(paths), max_size=len(paths)))
    expanded_paths = [p for p, c in zip(paths, counts, strict=True) for _ in range(c)]
    expanded_bounds = [b for b, c in zip(bounds, counts, strict=True) for _ in range(c)]
    expanded = max_min_fair(cap, expanded_paths, expanded_bounds)
    per_entry = np.repeat(np.array(solve_heap(cap, paths, bounds, counts)), counts)
    np.testing.assert_allclose(per_entry, expanded, rtol=1e-9)
    padded = np.where(paths_to_array(paths, width=3) < 0, len(cap), paths_to_array(paths, width=3))
    rounds = solve_rounds(
        np.append(cap, INF), padded, np.array(bounds, dtype=float), np.array(counts, dtype=float)
    )
    np.testing.assert_allclose(np.repeat(rounds, counts), expanded, rtol=1e-9)


# --- The compiled grouped solver (simscale/network/fairshare_compiled.py) ----------------------


def _grouped_problem(seed: int) -> tuple:
    """A random grouped problem as the symmetric path builds them: flows over up to 3 links of
    `n` (the last a sentinel), some in one of 2 groups loading a random set of links."""
    rng = np.random.default_rng(seed)
    n_ext = int(rng.integers(4, 40))
    n_flows = int(rng.integers(1, 30))
    cap = np.append(rng.uniform(1.0, 10.0, n_ext - 1), 0.0)
    links = rng.integers(0, n_ext, (n_flows, 3))
    weight = rng.integers(1, 4, (n_flows, 3)).astype(np.float64)
    weight[links == n_ext - 1] = 0.0
    group = rng.integers(-1, 2, n_flows)
    group_weight = rng.integers(1, 5, n_flows).astype(np.float64)
    mask = rng.random((2, n_ext)) < 0.3
    mask[:, -1] = False
    bound = float(rng.choice([math.inf, 3.0]))
    return cap, links, weight, group, group_weight, mask, bound


@pytest.mark.parametrize("seed", range(200))
def test_compiled_grouped_solver_gives_the_reference_rates(seed: int) -> None:
    """numba's loops freeze the same flows in the same rounds as the numpy reference; sums run in
    another order, so rates agree to rounding."""
    pytest.importorskip("numba")
    from simscale.network.fairshare_compiled import compiled

    kernel = compiled()
    assert kernel is not None
    cap, links, weight, group, group_weight, mask, bound = _grouped_problem(seed)
    reference = solve_grouped(cap, links, weight, group, group_weight, mask, bound)
    fast = kernel(
        cap, links, weight, group, group_weight, mask.astype(np.float64), bound,
        WEIGHT_RESIDUE, LEVEL_RTOL,
    )  # fmt: skip
    np.testing.assert_allclose(fast, reference, rtol=1e-9)


def test_small_networks_and_an_explicit_request_take_the_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Below MIN_LINKS (where numba's import would cost more than it saves) and with
    SIMSCALE_SOLVER=reference the compiled entry point declines, and the caller solves in numpy."""
    from simscale.network import fairshare_compiled

    cap, links, weight, group, group_weight, mask, bound = _grouped_problem(0)
    assert fairshare_compiled.solve_grouped_compiled(
        cap, links, weight, group, group_weight, mask, bound
    ) is None  # fmt: skip
    monkeypatch.setenv("SIMSCALE_SOLVER", "reference")
    fairshare_compiled.compiled.cache_clear()
    try:
        assert fairshare_compiled.compiled() is None
    finally:
        monkeypatch.delenv("SIMSCALE_SOLVER")
        fairshare_compiled.compiled.cache_clear()


def test_a_prediction_is_the_same_with_either_solver(monkeypatch: pytest.MonkeyPatch) -> None:
    """scenarios/64gpu.yaml on its symmetric path, every grouped solve compiled (the size
    threshold lowered to 0) against every one in numpy."""
    pytest.importorskip("numba")
    from simscale.network import fairshare_compiled
    from simscale.simulator import simulate
    from simscale.spec.scenario import load_scenario

    path = ROOT / "scenarios" / "64gpu.yaml"
    scenario = load_scenario(path, ["cluster.hosts[0].count=16"])
    reference = simulate(scenario)
    monkeypatch.setattr(fairshare_compiled, "MIN_LINKS", 0)
    fast = simulate(scenario)
    assert fast.path == reference.path == "symmetric"
    assert fast.throughput_samples_per_s == pytest.approx(
        reference.throughput_samples_per_s, rel=1e-9
    )
    assert fast.events == reference.events


def test_a_kernel_that_cannot_be_built_leaves_the_reference_in_charge(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where numba cannot compile or cache the kernel, one warning, and the numpy reference
    answers instead of the prediction failing."""
    numba = pytest.importorskip("numba")
    from simscale.network import fairshare_compiled

    def broken(*args: object, **kwargs: object) -> object:
        def build(func: object) -> object:
            def run(*a: object) -> object:
                raise RuntimeError("cannot cache function '_kernel': no locator available")

            return run

        return build

    monkeypatch.setattr(numba, "njit", broken)
    fairshare_compiled.compiled.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="numpy reference"):
            assert fairshare_compiled.compiled() is None
    finally:
        monkeypatch.undo()
        fairshare_compiled.compiled.cache_clear()
