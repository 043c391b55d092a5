"""One interface over the fair-share solvers: the rates of the live path classes, re-solved.

The fair-share network (simscale.network.flows) re-solves max-min fair rates whenever its flow
set changes, and hands the solver its path classes (simscale.network.classes) and the classes
whose flow count changed. Which solver answers depends only on how the network was built:

- ``GroupedSolver``: a symmetry-reduced cluster's routes carry per-link multiplicities and
  groups (simscale.model.symmetry); solved from scratch by ``solve_grouped``, compiled with
  numba where that pays (simscale.network.fairshare_compiled; the two answer the same to
  rounding), and memoised, since a training iteration repeats the same few hundred states.
- ``IncrementalSolver``: equal shares; replays what the change left alone of the previous solve
  (simscale.network.refill, bit for bit a solve from scratch), and solves from scratch above
  ``REFILL_MAX_CLASSES``, where replaying stops paying.
- ``WeightedSolver``: unequal TCP shares (``share_sigma`` > 0); weighted max-min from scratch
  by ``solve_rounds``.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from simscale.network.classes import PathClasses
from simscale.network.fairshare import FloatArray, IntArray, solve_grouped, solve_rounds
from simscale.network.fairshare_compiled import solve_grouped_compiled
from simscale.network.refill import RefillSolver

# Below this many live path classes a re-solve replays what it can of the previous one
# (simscale.network.refill); at and above it the vectorised solver starts from scratch. On the
# 64-GPU scenario, one iteration, replaying at every size took 14.4 s CPU at 32 hosts (up to 992
# classes) and 125 s at 64 hosts (up to 4032), against 19.9 s and 146 s with the vectorised
# solver from 512 classes up. Above 4096 classes (128 hosts and more) it is not measured.
REFILL_MAX_CLASSES = 4096

# Solved states the symmetric path's grouped solve keeps: emptied when full, so memory stays
# bounded. The 64-GPU scenario needs 289 distinct states for 2,980 solves, 128 hosts 4,631 for
# 19,465; at 256 hosts and more nearly every state is new (4% hits), and keeping them costs
# memory (113 against 97 MiB at 1,024 hosts) and some time (13.9 against 13.2 CPU s at 256 hosts,
# medians of 3) for 4% fewer solves.
GROUPED_MEMO_ENTRIES = 8192
# So the memo stops once it has proved useless: after this many look-ups, if fewer than
# GROUPED_MEMO_MIN_HIT_RATE of them hit, it is dropped for the rest of the run. 128 hosts hit 43%
# of their first 8,192 (the first iteration's states are all new), 256 hosts 5%.
GROUPED_MEMO_PROBATION = 8192
GROUPED_MEMO_MIN_HIT_RATE = 0.25

Rates = tuple[IntArray, FloatArray]  # class ids, and the rate of each one's flows (bytes/s)


class Solver(Protocol):
    """Max-min fair rates of the live path classes on links of fixed capacity."""

    def solve(self, classes: PathClasses, dirty: set[int]) -> Rates:
        """The rate of every live class whose rate may differ from the previous solve's (each
        other live class keeps its rate). ``dirty``: the classes whose flow count changed
        since then."""
        ...


class GroupedSolver:
    """Routes with per-link multiplicities and groups: from scratch, memoised (module doc).
    ``cap_ext``: link capacities and a sentinel; ``group_mask_ext``: (groups, links + 1), the
    links each group loads; ``bound_Bps``: every flow's own ceiling."""

    def __init__(self, cap_ext: FloatArray, group_mask_ext: FloatArray, bound_Bps: float) -> None:
        self.cap_ext = cap_ext
        self.group_mask_ext = group_mask_ext
        self.bound_Bps = bound_Bps
        # (live classes, their counts) -> the solve's answer; None once it has proved useless.
        self.memo: dict[tuple[tuple[int, ...], tuple[int, ...]], Rates] | None = {}
        self.lookups = self.hits = 0

    def solve(self, classes: PathClasses, dirty: set[int]) -> Rates:
        # The answer depends only on which classes are live and their counts (paths,
        # capacities and groups never change), so it is memoised.
        live, memo = classes.live, self.memo
        key: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        known = None
        if memo is not None:  # the key costs O(live classes) to build: only while useful
            key = (tuple(live), tuple(map(classes.count.__getitem__, live)))
            known = memo.get(key)
        if known is None:
            known = self._solve(classes)
            if memo is not None and key is not None and GROUPED_MEMO_ENTRIES:
                if len(memo) >= GROUPED_MEMO_ENTRIES:
                    memo.clear()
                memo[key] = known
        else:
            self.hits += 1
        if memo is not None:
            self.lookups += 1
            if (
                self.lookups == GROUPED_MEMO_PROBATION
                and self.hits < GROUPED_MEMO_MIN_HIT_RATE * self.lookups
            ):
                self.memo = None
        return known

    def _solve(self, classes: PathClasses) -> Rates:
        live = classes.live
        idx = np.fromiter(live, dtype=np.int_, count=len(live))
        counts = classes.counts(live)
        weight = classes.link_weight[idx] * counts[:, None]
        problem = (
            self.cap_ext,
            classes.links[idx],
            weight,
            classes.group[idx],
            counts,
            self.group_mask_ext,
            self.bound_Bps,
        )
        rates = solve_grouped_compiled(*problem)
        if rates is None:
            rates = solve_grouped(*problem)
        return idx, rates


class WeightedSolver:
    """Weighted max-min from scratch: class c's flows each get their share weight times the
    fill level (every weight is 1 without a share spread)."""

    def __init__(self, cap_ext: FloatArray, bound_Bps: float) -> None:
        self.cap_ext = cap_ext
        self.bound_Bps = bound_Bps

    def solve(self, classes: PathClasses, dirty: set[int]) -> Rates:
        live = classes.live
        idx = np.fromiter(live, dtype=np.int_, count=len(live))
        weight = classes.share_weight[idx]
        counts = np.array([classes.count[c] for c in live], dtype=np.float64)
        bound = np.full(idx.size, self.bound_Bps) / weight
        level = solve_rounds(self.cap_ext, classes.links[idx], bound, counts * weight)
        return idx, level * weight


class IncrementalSolver:
    """Equal shares: the previous solve's rounds replayed where the change cannot reach them,
    from scratch at and above ``REFILL_MAX_CLASSES`` live classes."""

    def __init__(self, cap: list[float], cap_ext: FloatArray, bound_Bps: float) -> None:
        self.refill = RefillSolver(cap)
        self.bound_Bps = bound_Bps
        self.from_scratch = WeightedSolver(cap_ext, bound_Bps)

    def solve(self, classes: PathClasses, dirty: set[int]) -> Rates:
        if len(classes.live) >= REFILL_MAX_CLASSES:
            self.refill.forget()
            return self.from_scratch.solve(classes, dirty)
        # Only classes whose rate the solver recomputed are returned; the others keep theirs.
        changed: set[int] = set()
        for cls in dirty:
            changed.update(classes.paths[cls])
        rates = self.refill.solve(
            classes.members,
            classes.n_on_link,
            classes.paths,
            classes.count,
            changed,
            uniform_bound=self.bound_Bps,
        )
        idx = np.fromiter(rates.keys(), dtype=np.int_, count=len(rates))
        return idx, np.fromiter(rates.values(), dtype=np.float64, count=len(rates))


def choose_solver(
    cap: list[float],
    cap_ext: FloatArray,
    bound_Bps: float,
    share_sigma: float,
    group_mask_ext: FloatArray | None,
) -> Solver:
    """The solver a network needs: grouped where its routes have groups
    (``group_mask_ext``), weighted where shares are unequal, else incremental."""
    if group_mask_ext is not None:
        return GroupedSolver(cap_ext, group_mask_ext, bound_Bps)
    if share_sigma > 0:
        return WeightedSolver(cap_ext, bound_Bps)
    return IncrementalSolver(cap, cap_ext, bound_Bps)
