"""Max-min fair bandwidth sharing: the pure solver behind the flow-level network model.

Links (constraints) have capacities; flows (variables) each cross a few links and may carry their
own rate bound. The max-min fair allocation is the one where no flow can get faster without
slowing a flow that is already no faster than it. It is found by progressive filling, as
SimGrid's ``lmm`` solver does: every unfrozen flow grows at the same rate (the "water level"
``t``); when a link fills up, the flows crossing it freeze at ``t``; when ``t`` reaches a flow's
own bound, that flow freezes at its bound; repeat until every flow is frozen.

Both solvers work on levels rather than increments: a link ``l`` with frozen load ``F_l`` and
``n_l`` unfrozen flows fills exactly when ``t = (c_l - F_l) / n_l``, so a step is "find the
smallest such level, freeze what it saturates" and no unfrozen flow's rate is touched in between.
Fill levels only rise as flows freeze (a flow frozen at ``t <= (c-F)/n`` leaves
``(c-F-t)/(n-1) >= (c-F)/n``), which is what lets ``solve_heap`` keep links in a heap.

Two implementations, one answer (the tests hold them to each other). With F flows (or path
classes), K links per flow, L links, B bounded flows and R distinct bottleneck levels:

- ``solve_heap`` (pure Python): a heap of links keyed by fill level; each freeze updates the
  K links of the frozen flow. O((F*K + L) log L + B log B), whatever R is.
- ``solve_rounds`` (numpy): one vectorised round per level, O(L + frozen*K) per round through
  a link->flows (CSC) index, O(F*K) for a round where many links fill together: O(R*L + F*K)
  typically, O(R*(L + F*K)) at worst, R <= L + B. Fixed numpy call overhead (~20 us a round
  on the development machine) makes it lose on small problems and on heterogeneous traffic
  with many levels, and win on thousands of flows with few levels.

``max_min_fair`` uses the heap below ``NUMPY_MIN_FLOWS`` flows. Measured with
benchmarks/bench_network.py: at 64 flows the heap is ~3x faster on heterogeneous traffic and
on par on symmetric traffic; at 512 the heap is ~2.5x faster on heterogeneous traffic and ~3x
slower on a symmetric all-to-all; at 4096 numpy is faster on both (10x on all-to-all).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

# Two levels closer than this (relative) are the same level: links that fill within rounding of
# each other freeze in the same round, so ties (the common symmetric case) cost one round, and a
# flow is never left a rounding error below a level it should have reached.
LEVEL_RTOL = 1e-12

# At and above this many flows max_min_fair uses the numpy rounds solver.
NUMPY_MIN_FLOWS = 512

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int_]


def max_min_fair(
    capacity_Bps: Sequence[float] | FloatArray,
    paths: Sequence[Sequence[int]],
    bound_Bps: Sequence[float] | FloatArray | None = None,
    count: Sequence[int] | None = None,
) -> FloatArray:
    """Max-min fair rate (bytes/s) of every flow.

    ``capacity_Bps``: one positive capacity per link. ``paths``: for each flow the distinct
    indices of the links it crosses. ``bound_Bps``: each flow's own maximum rate, ``inf`` for
    none; default no bounds. ``count``: how many identical flows each entry stands for (they
    get equal rates, so a path class of n flows is solved as one entry that loads its links n
    times); default 1 each. The rate returned is per flow. A flow that crosses no link and has
    no bound gets ``inf``.
    """
    cap = [float(c) for c in capacity_Bps]
    if not all(c > 0 and not math.isnan(c) for c in cap):
        raise ValueError("link capacities must be positive")
    n_links = len(cap)
    routes = [tuple(int(link) for link in p) for p in paths]
    for i, route in enumerate(routes):
        if any(not 0 <= link < n_links for link in route):
            raise ValueError(f"flow {i} crosses a link outside 0..{n_links - 1}: {route}")
        if len(set(route)) != len(route):
            raise ValueError(f"flow {i} lists a link twice: {route}")
    bound: list[float] | None = None
    if bound_Bps is not None:
        bound = [float(b) for b in bound_Bps]
        if len(bound) != len(routes):
            raise ValueError("bound_Bps must have one entry per flow")
        if not all(b > 0 for b in bound):
            raise ValueError("flow bounds must be positive (inf for none)")
    counts: list[int] | None = None
    if count is not None:
        counts = [int(c) for c in count]
        if len(counts) != len(routes) or not all(c >= 1 for c in counts):
            raise ValueError("count must give each flow a multiplicity of at least 1")
    if len(routes) < NUMPY_MIN_FLOWS:
        return np.array(solve_heap(cap, routes, bound, counts), dtype=np.float64)
    links = paths_to_array(routes)
    padded = np.where(links < 0, n_links, links)
    bounds = np.full(len(routes), np.inf) if bound is None else np.array(bound)
    weights = None if counts is None else np.array(counts, dtype=np.float64)
    return solve_rounds(np.append(np.array(cap), np.inf), padded, bounds, weights)


def solve_heap(
    cap: Sequence[float],
    paths: Sequence[Sequence[int]],
    bound: Sequence[float] | None,
    count: Sequence[int] | None = None,
) -> list[float]:
    """Progressive filling with a heap of link fill levels (small problems, pre-validated)."""
    weight = [1] * len(paths) if count is None else count
    members: list[list[int]] = [[] for _ in cap]
    n_on_link = [0] * len(cap)
    for f, route in enumerate(paths):
        for link in route:
            members[link].append(f)
            n_on_link[link] += weight[f]
    rate = fill_heap(cap, members, n_on_link, paths, weight, bound)
    if bound is None:
        return [rate.get(f, math.inf) for f in range(len(paths))]
    return [rate.get(f, bound[f]) for f in range(len(paths))]


def fill_heap(
    cap: Sequence[float],
    members: Sequence[Iterable[int]],
    n_on_link: Sequence[int],
    paths: Sequence[Sequence[int]],
    weight: Sequence[int],
    bound: Sequence[float] | None = None,
    uniform_bound: float = math.inf,
) -> dict[int, float]:
    """The heap solver's core on a ready incidence, so a caller can keep it between solves.

    ``members[l]``: ids of the flows on link l (only flows to solve); ``n_on_link[l]``: the sum
    of their weights; ``paths``, ``weight`` and ``bound`` are indexed by flow id and may hold
    entries for other ids. ``uniform_bound`` caps every flow. Returns ``{flow id: rate}`` for
    every flow on some link; a flow absent from it has no link (its rate is its bound).
    """
    # This runs at every network event, so it is written for CPython speed: local aliases, no
    # per-round allocation beyond the heap entries, per-flow bounds handled only if present.
    heappop, heappush = heapq.heappop, heapq.heappush
    n_unfrozen = list(n_on_link)
    headroom = list(cap)
    # Entries go stale when a link's load changes; a stale entry is recognised because its
    # level no longer equals headroom/n recomputed the same way (exact float equality).
    heap = [(headroom[link] / n, link) for link, n in enumerate(n_unfrozen) if n]
    heapq.heapify(heap)
    rate: dict[int, float] = {}
    by_bound = []
    if bound is not None:
        flows = {f for m in members for f in m}
        by_bound = sorted((bound[f], f) for f in flows if bound[f] < math.inf)
    next_bounded = 0
    next_bound = by_bound[0][0] if by_bound else math.inf
    level = 0.0
    while True:
        while heap:
            fill, link = heap[0]
            n = n_unfrozen[link]
            if n and fill == headroom[link] / n:
                break
            heappop(heap)
        if not heap:
            break
        t_link = heap[0][0]
        if t_link >= uniform_bound and uniform_bound <= next_bound:
            # Every unfrozen flow reaches the common cap before any link fills.
            for m in members:
                for f in m:
                    if f not in rate:
                        rate[f] = uniform_bound
            break
        touched = set()
        if next_bound < t_link:
            # Flows reaching their own bound first freeze at it; no link fills.
            level = max(level, next_bound)
            limit = level * (1.0 + LEVEL_RTOL)
            newly = []
            while next_bounded < len(by_bound) and by_bound[next_bounded][0] <= limit:
                f = by_bound[next_bounded][1]
                if f not in rate:
                    newly.append(f)
                next_bounded += 1
        else:
            # Rounding can put a refilled link a hair below the last level; levels only rise.
            if t_link > level:
                level = t_link
            newly = members[heappop(heap)[1]]
        # Freeze the new flows and take their load off every link they cross.
        for f in newly:
            if f in rate:
                continue
            r = level if bound is None else min(level, bound[f])
            rate[f] = r
            w = weight[f]
            load = r * w
            for link in paths[f]:
                headroom[link] -= load
                n_unfrozen[link] -= w
                touched.add(link)
        for link in touched:
            n = n_unfrozen[link]
            if n:
                heappush(heap, (headroom[link] / n, link))
        if by_bound:
            while next_bounded < len(by_bound) and by_bound[next_bounded][1] in rate:
                next_bounded += 1
            next_bound = by_bound[next_bounded][0] if next_bounded < len(by_bound) else math.inf
    return rate


# Below this, a link's unfrozen weight is rounding residue of fractional weights, not a flow.
WEIGHT_RESIDUE = 1e-9


def solve_rounds(
    cap_ext: FloatArray, links: IntArray, bound: FloatArray, weight: FloatArray | None = None
) -> FloatArray:
    """Progressive filling in vectorised rounds, one per distinct fill level (large problems).

    ``cap_ext`` has the real capacities followed by one sentinel entry (its value is ignored);
    ``links`` (F, K) uses the sentinel's index as padding; ``bound`` (F,) uses ``inf`` for none;
    ``weight`` (F,) is each entry's flow count (see ``max_min_fair``), default 1; a (F, K)
    weight gives each entry its own count on each link it crosses (a symmetry class standing for
    copies that share one link and spread over many of another, simscale.model.symmetry).
    """
    n_ext = cap_ext.shape[0]
    sentinel = n_ext - 1
    n_flows, k = links.shape
    rate = np.full(n_flows, np.inf)
    if n_flows == 0:
        return rate
    flat = links.ravel()
    per_link = weight is not None and weight.ndim == 2
    flat_weight = None if weight is None else weight.ravel() if per_link else np.repeat(weight, k)
    # Link -> flows incidence (CSC): the flows of link l are by_link[start[l]:start[l + 1]].
    by_link = np.argsort(flat, kind="stable") // k
    count = np.bincount(flat, minlength=n_ext)
    start = np.zeros(n_ext + 1, dtype=np.int_)
    np.cumsum(count, out=start[1:])
    n_unfrozen = np.bincount(flat, weights=flat_weight, minlength=n_ext).astype(np.float64)
    n_unfrozen[sentinel] = 0.0
    # headroom / n_unfrozen is the level at which a link fills; a link with no unfrozen flow
    # gets headroom inf so that the division gives inf (never fills) instead of 0/0.
    headroom = np.array(cap_ext, dtype=np.float64)
    headroom[n_unfrozen == 0] = np.inf
    frozen = np.zeros(n_flows, dtype=bool)
    n_frozen = 0
    bounded = np.flatnonzero(bound < np.inf)
    bounded = bounded[np.argsort(bound[bounded], kind="stable")]
    bounded_sorted = bound[bounded]
    next_bounded = 0
    level = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        while n_frozen < n_flows:
            fill = headroom / n_unfrozen
            t_link = float(fill.min())
            while next_bounded < bounded.size and frozen[bounded[next_bounded]]:
                next_bounded += 1
            t_bound = bounded_sorted[next_bounded] if next_bounded < bounded.size else np.inf
            if t_bound < t_link:
                # Flows reaching their own bound first freeze at it; no link fills.
                level = max(level, float(t_bound))
                stop = np.searchsorted(bounded_sorted, level * (1.0 + LEVEL_RTOL), side="right")
                newly = bounded[next_bounded:stop]
                newly = newly[~frozen[newly]]
                new_rate = bound[newly]
                saturated = None
            elif t_link < np.inf:
                # Rounding can put a refilled link a hair below the last level; levels only rise.
                level = max(level, t_link)
                saturated = np.flatnonzero(fill <= level * (1.0 + LEVEL_RTOL))
                if saturated.size == 1:
                    sat = int(saturated[0])
                    newly = by_link[start[sat] : start[sat + 1]]
                    newly = newly[~frozen[newly]]
                else:
                    # Many links filling together (symmetric traffic): one pass over the flows
                    # beats gathering every link's slice, and freezes a flow on two of them once.
                    is_sat = np.zeros(n_ext, dtype=bool)
                    is_sat[saturated] = True
                    newly = np.flatnonzero(is_sat[links].any(axis=1) & ~frozen)
                new_rate = np.minimum(level, bound[newly])
            else:
                # Flows crossing no link and having no bound grow without limit: rate stays inf.
                break
            frozen[newly] = True
            n_frozen += newly.size
            rate[newly] = new_rate
            touched = links[newly].ravel()
            if weight is None:
                w = None
            else:
                w = weight[newly].ravel() if per_link else np.repeat(weight[newly], k)
            load = np.repeat(new_rate, k) if w is None else np.repeat(new_rate, k) * w
            headroom -= np.bincount(touched, weights=load, minlength=n_ext)
            n_unfrozen -= np.bincount(touched, weights=w, minlength=n_ext)
            if w is not None:
                # Fractional weights leave rounding residue where every flow is frozen.
                done = n_unfrozen <= WEIGHT_RESIDUE
                n_unfrozen[done] = 0.0
                headroom[done] = np.inf
            if saturated is not None:
                headroom[saturated] = np.inf
            n_unfrozen[sentinel] = 0.0
            headroom[sentinel] = np.inf
    return rate


def paths_to_array(paths: Sequence[Sequence[int]], width: int | None = None) -> IntArray:
    """Pad variable-length link lists into an (F, K) array, ``-1`` marking unused slots."""
    k = max((len(p) for p in paths), default=0) if width is None else width
    out = np.full((len(paths), max(k, 1)), -1, dtype=np.int_)
    for i, p in enumerate(paths):
        if len(p) > k:
            raise ValueError(f"path {i} crosses {len(p)} links, more than width {k}")
        out[i, : len(p)] = p
    return out


def link_loads_Bps(
    n_links: int, paths: Sequence[Sequence[int]], rate_Bps: Sequence[float] | FloatArray
) -> FloatArray:
    """Total rate each link carries under the given flow rates (for checking and statistics)."""
    load = np.zeros(n_links)
    for route, r in zip(paths, rate_Bps, strict=True):
        for link in route:
            load[link] += r
    return load


def solve_grouped(
    cap_ext: FloatArray,
    links: IntArray,
    weight: FloatArray,
    group: IntArray,
    group_weight: FloatArray,
    group_links: npt.NDArray[np.bool_] | FloatArray,
    bound: float = math.inf,
) -> FloatArray:
    """Progressive filling where some flows also load whole sets of links (symmetry classes).

    Entry i loads each link ``links[i, k]`` with ``weight[i, k]`` flows (the sentinel pads;
    a negative weight cancels part of a group's load on that link), and, when ``group[i] = g``
    (>= 0), every link of ``group_links[g]`` with ``group_weight[i]`` flows more. That is how a
    representative worker's flow stands for the same flow leaving (or reaching) every worker
    host (simscale.model.symmetry): a group of F flows over L links costs O(F + L) per round instead
    of O(F * L). Every rate is capped at ``bound``. Same rounds as ``solve_rounds``: one per
    distinct fill level, where an entry freezes once a link it loads (net weight > 0) fills.
    """
    n_ext = cap_ext.shape[0]
    sentinel = n_ext - 1
    n_flows = links.shape[0]
    n_groups = group_links.shape[0]
    rate = np.empty(n_flows)
    rate.fill(bound)
    if n_flows == 0:
        return rate
    mask = np.asarray(group_links, dtype=np.float64)  # (G, n_ext)
    ones_k = np.ones(links.shape[1])  # row sums as a product: a third of .sum(axis=1)'s cost
    grouped = group >= 0
    gw_of = np.where(grouped, group_weight, 0.0)
    g_index = np.where(grouped, group, 0)
    unfrozen_g = np.bincount(g_index, weights=gw_of, minlength=n_groups)
    n_unfrozen = np.bincount(links.ravel(), weights=weight.ravel(), minlength=n_ext)
    n_unfrozen += unfrozen_g @ mask
    n_unfrozen[sentinel] = 0.0
    headroom = cap_ext.astype(np.float64, copy=True)
    headroom[sentinel] = np.inf
    frozen = np.zeros(n_flows, dtype=bool)
    fill = np.empty(n_ext)
    n_frozen = 0
    level = 0.0
    # Most solves end in their first or second round, so the last round stops as soon as it has
    # set the rates (no link state is read again) and a round does no work it can skip:
    # together half the cost of a solve at 256-1,024 hosts, with bit-identical rates.
    while n_frozen < n_flows:
        fill.fill(np.inf)
        np.divide(headroom, n_unfrozen, out=fill, where=n_unfrozen > WEIGHT_RESIDUE)
        t_link = float(fill.min())
        if t_link >= bound or t_link == np.inf:
            break  # every unfrozen flow reaches the cap (or crosses nothing) first
        level = max(level, t_link)
        sat = fill <= level * (1.0 + LEVEL_RTOL)
        sat_f = sat.astype(np.float64)
        # Net weight of each entry on the links that filled: its own entries there, plus its
        # group's share of them.
        net = (weight * sat_f[links]) @ ones_k
        net += gw_of * (mask @ sat_f)[g_index]
        hit = net > WEIGHT_RESIDUE
        if n_frozen:
            hit &= ~frozen
        newly = hit.nonzero()[0]
        new_rate = min(level, bound)
        rate[newly] = new_rate
        n_frozen += newly.size
        if n_frozen == n_flows:
            break
        frozen[newly] = True
        touched = links[newly].ravel()
        w = weight[newly].ravel()
        headroom -= np.bincount(touched, weights=w * new_rate, minlength=n_ext)
        n_unfrozen -= np.bincount(touched, weights=w, minlength=n_ext)
        moved = np.bincount(g_index[newly], weights=gw_of[newly], minlength=n_groups)
        if moved.any():
            headroom -= (moved * new_rate) @ mask
            n_unfrozen -= moved @ mask
        headroom[sat] = np.inf
        n_unfrozen[sat] = 0.0
        n_unfrozen[sentinel] = 0.0
        headroom[sentinel] = np.inf
    return rate
