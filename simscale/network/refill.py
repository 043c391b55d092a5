"""Re-solving after a small change: progressive filling that replays what the change left alone.

The fair-share network re-solves max-min fair rates every time its flow set changes, usually by a
few path classes. Progressive filling (simscale.network.fairshare.fill_heap) saturates links in
order of rising fill level and freezes the classes crossing each; the first rounds of the next
solve often saturate the same links at the same levels and freeze the same classes, because the
change touches links that fill only later. Measured on the 64-GPU ResNet-50 scenario at 8 and 32
hosts, about two thirds of all class freezes are such a common prefix of consecutive solves.

``RefillSolver`` keeps the rounds of its last solve (the level, the saturated link, the classes
frozen, and the links' headroom and unfrozen load before the round) and starts the next solve at
the first round the change can affect. Round j replays unchanged when its saturated link is not
one the change touched (so it has the same member classes, none of them changed) and every
touched link still fills strictly after it: its fill level ``headroom_j / n_j`` with the new
unfrozen load ``n_j`` sorts after the round's ``(level, link)`` as the heap orders them. Then a
solve from scratch would pop the same link at the same level in round j, so the state after the
replayed rounds is exactly, bit for bit, what it would have computed; the rest is solved as
``fill_heap`` does, from that state. The answer is identical to a solve from scratch (the tests
hold it to ``fill_heap`` with exact equality).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence


class _Round:
    """One saturation: the state before it and what it froze."""

    __slots__ = ("base", "fill", "frozen", "headroom", "level", "link", "n_unfrozen")

    def __init__(
        self,
        fill: float,
        link: int,
        level: float,
        headroom: list[float],
        n_unfrozen: list[int],
        base: list[int],
    ) -> None:
        self.fill = fill  # the heap key that was popped
        self.link = link
        self.level = level  # the rate given to the classes frozen in this round
        self.headroom = headroom  # before the round
        self.n_unfrozen = n_unfrozen  # before the round, against the link loads ``base``
        self.base = base
        self.frozen: list[int] = []


class RefillSolver:
    """Max-min fair rates of path classes on links of capacity ``cap``, re-solved incrementally.

    Each ``solve`` is told which links the flow set changed since the previous one; it returns
    the rate of every class whose rate it recomputed, and every other live class keeps the rate
    the previous solve gave it.
    """

    def __init__(self, cap: Sequence[float]) -> None:
        self._cap = list(cap)
        self._rounds: list[_Round] = []

    def forget(self) -> None:
        """Drop the remembered rounds: the next solve starts from scratch."""
        self._rounds = []

    def solve(
        self,
        members: Sequence[Iterable[int]],
        n_on_link: Sequence[int],
        paths: Sequence[Sequence[int]],
        weight: Sequence[int],
        changed_links: set[int],
        uniform_bound: float = math.inf,
    ) -> dict[int, float]:
        """Rates of the classes on ``members`` (as ``fill_heap`` takes them) whose rate may
        differ from the previous solve's. ``changed_links``: every link whose member classes or
        their weights changed since then (all links of a class whose count changed)."""
        base = list(n_on_link)
        rounds = self._rounds
        k = self._replayable(rounds, base, changed_links)
        del rounds[k:]
        frozen: set[int] = set()
        if k:
            last = rounds[k - 1]
            for r in rounds:
                frozen.update(r.frozen)
            # State after round k - 1: before it, minus what it froze (recomputed the same way).
            headroom = list(last.headroom)
            n_unfrozen = [
                n + now - b for n, now, b in zip(last.n_unfrozen, base, last.base, strict=True)
            ]
            level = last.level
            for f in last.frozen:
                w = weight[f]
                load = level * w
                for link in paths[f]:
                    headroom[link] -= load
                    n_unfrozen[link] -= w
        else:
            headroom = list(self._cap)
            n_unfrozen = list(base)
            level = 0.0
        return self._fill(
            members, paths, weight, uniform_bound, headroom, n_unfrozen, level, frozen, base
        )

    @staticmethod
    def _replayable(rounds: list[_Round], base: list[int], changed: set[int]) -> int:
        """How many leading rounds a solve from scratch would repeat exactly."""
        for j, r in enumerate(rounds):
            if r.link in changed:
                return j
            for link in changed:
                n = r.n_unfrozen[link] + base[link] - r.base[link]
                if n and (r.headroom[link] / n, link) <= (r.fill, r.link):
                    return j
        return len(rounds)

    def _fill(
        self,
        members: Sequence[Iterable[int]],
        paths: Sequence[Sequence[int]],
        weight: Sequence[int],
        uniform_bound: float,
        headroom: list[float],
        n_unfrozen: list[int],
        level: float,
        frozen: set[int],
        base: list[int],
    ) -> dict[int, float]:
        """``fill_heap``'s loop (uniform bound only) from the given state, logging its rounds.

        The round bookkeeping is applied to a state whose last round's freezes have already been
        subtracted, so the recorded snapshot of a round is taken before its own freezes."""
        heappop, heappush = heapq.heappop, heapq.heappush
        rounds = self._rounds
        heap = [(headroom[link] / n, link) for link, n in enumerate(n_unfrozen) if n]
        heapq.heapify(heap)
        rate: dict[int, float] = {}
        while heap:
            fill, link = heappop(heap)
            n = n_unfrozen[link]
            if not n or fill != headroom[link] / n:
                continue  # stale: the link's load changed since this entry was pushed
            if fill >= uniform_bound:
                # Every unfrozen class reaches the common cap before any link fills.
                for m in members:
                    for f in m:
                        if f not in frozen:
                            frozen.add(f)
                            rate[f] = uniform_bound
                break
            # Rounding can put a refilled link a hair below the last level; levels only rise.
            if fill > level:
                level = fill
            r = _Round(fill, link, level, list(headroom), list(n_unfrozen), base)
            rounds.append(r)
            newly = r.frozen
            touched = set()
            for f in members[link]:
                if f in frozen:
                    continue
                frozen.add(f)
                newly.append(f)
                rate[f] = level
                w = weight[f]
                load = level * w
                for t in paths[f]:
                    headroom[t] -= load
                    n_unfrozen[t] -= w
                    touched.add(t)
            for t in touched:
                n = n_unfrozen[t]
                if n:
                    heappush(heap, (headroom[t] / n, t))
        return rate
