"""The wall clock of a run: how many events it processed, how long it may take, where it is.

A long prediction must say where it is and stop cleanly at a wall-clock limit with what it has.
Looking at the clock after every event would cost more than the events; ``WallClock.run_until``
looks every ``CHECK_EVERY_EVENTS`` events instead, and processes exactly the events, in exactly
the order, that ``env.run(until=...)`` would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import simpy

# How often the run looks at the wall clock: ~5 ms of events on a small cluster, and still under
# a second where one event re-solves a thousand hosts' network.
CHECK_EVERY_EVENTS = 1024
PROGRESS_EVERY_S = 1.0  # wall seconds between two progress reports


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes (for benchmarks)."""

    def __init__(self) -> None:
        super().__init__()
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


class IncompleteRun(Exception):
    """The wall-clock limit struck before one measured iteration was complete."""


@dataclass(frozen=True)
class Progress:
    """Where a running simulation is, for a progress display."""

    iteration: int  # iterations every worker has started
    iterations: int  # at most this many are simulated
    warmup: int
    simulated_s: float
    events: int
    wall_s: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class WallClock:
    """A run's wall-clock limit (None: none) and its progress reports, counted from
    ``start_s`` (``time.perf_counter()``); ``report(wall_s)`` is called about every
    ``PROGRESS_EVERY_S`` while the run goes on."""

    start_s: float
    max_seconds: float | None = None
    report: Callable[[float], None] | None = None
    next_report_s: float = 0.0

    def run_until(self, env: CountingEnvironment, target: simpy.Event, what: str) -> bool:
        """Process events until ``target`` is processed; False when the limit struck first.
        ``what`` names the target in the error raised if the events run out before it."""
        step = env.step
        while not target.processed:
            try:
                for _ in range(CHECK_EVERY_EVENTS):
                    step()
                    if target.processed:
                        return True
            except simpy.core.EmptySchedule:
                raise RuntimeError(f"simulation deadlocked: no events left before {what}") from None
            now = time.perf_counter()
            if self.max_seconds is not None and now - self.start_s > self.max_seconds:
                return False
            if self.report is not None and now >= self.next_report_s:
                self.next_report_s = now + PROGRESS_EVERY_S
                self.report(now - self.start_s)
        return True
