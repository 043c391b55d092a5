"""A resource that serves all its queued work side by side (processor sharing).

Where a process serves several requests at once, as a gRPC server serves concurrent RPCs on
their own streams, n jobs in progress each advance at 1/n of the resource's rate: a small reply
queued behind a large one is not held up by all of it, and n equal jobs started together all
finish together, after n times the work of one. A FIFO thread (simscale.des.serial) would serve the
large one first, whole.

Finish times change whenever a job arrives or leaves. With n jobs in progress each gets 1/n of
the rate, so the queue keeps a virtual clock, the work any one job in progress has received,
which advances at 1/n of real time; a job arriving at virtual time v with c seconds of work
finishes when the clock reaches v + c. Those finish tags never change, so a heap orders them and
each arrival or departure costs O(log n), however many RPCs are in flight (a hot parameter
server of a 128-host job has thousands). One pending wake-up serves the earliest tag; a wake-up
made stale by a later arrival is ignored.
"""

from __future__ import annotations

import heapq
import itertools

import simpy


class SharedQueue:
    """Work served side by side at an equal share each; keeps its busy time for utilisation."""

    __slots__ = (
        "busy",
        "busy_since",
        "env",
        "jobs",
        "name",
        "order",
        "updated_at",
        "version",
        "virtual_s",
    )

    def __init__(self, env: simpy.Environment, name: str) -> None:
        self.env = env
        self.name = name
        self.jobs: list[tuple[float, int, simpy.Event]] = []  # heap: (finish tag, order, done)
        self.order = itertools.count()  # ties finish in arrival order
        self.virtual_s = 0.0  # work received by any one job in progress
        self.updated_at = 0.0
        self.version = 0  # bumped on every change: a wake-up from an older one is stale
        self.busy: list[tuple[float, float]] = []  # closed busy periods since the last reset
        self.busy_since: float | None = None  # start of the open busy period

    def run(self, cost_s: float) -> simpy.Event:
        """Queue ``cost_s`` seconds of work (its time alone); the event fires when it is done."""
        done = self.env.event()
        if cost_s <= 0:
            done.succeed()
            return done
        self._advance()
        if self.busy_since is None:
            self.busy_since = self.env.now
        heapq.heappush(self.jobs, (self.virtual_s + cost_s, next(self.order), done))
        self._schedule()
        return done

    def _advance(self) -> None:
        """Move the virtual clock on by the share each job in progress got since the last change."""
        now = self.env.now
        if self.jobs:
            self.virtual_s += (now - self.updated_at) / len(self.jobs)
        self.updated_at = now

    def _schedule(self) -> None:
        self.version += 1
        if self.jobs:
            left_s = max(0.0, self.jobs[0][0] - self.virtual_s)
            wake = self.env.timeout(left_s * len(self.jobs), self.version)
            wake.callbacks.append(self._wake)

    def _wake(self, event: simpy.Event) -> None:
        if event.value != self.version:
            return
        self._advance()
        # The earliest tag is due by construction (whatever the rounding); equal tags with it.
        tag = self.jobs[0][0]
        self.virtual_s = max(self.virtual_s, tag)
        finished = []
        while self.jobs and self.jobs[0][0] <= tag:
            finished.append(heapq.heappop(self.jobs)[2])
        if not self.jobs and self.busy_since is not None:
            self.busy.append((self.busy_since, self.env.now))
            self.busy_since = None
        self._schedule()
        for done in finished:
            done.succeed()

    def busy_within(self, start_s: float, end_s: float) -> float:
        """Seconds inside the window during which some work was in progress."""
        periods = list(self.busy)
        if self.busy_since is not None:
            periods.append((self.busy_since, self.env.now))
        return sum(max(0.0, min(b, end_s) - max(a, start_s)) for a, b in periods)

    def reset(self) -> None:
        """Start counting busy time afresh (the measured window begins now)."""
        self.busy = []
        if self.busy_since is not None:
            self.busy_since = self.env.now
