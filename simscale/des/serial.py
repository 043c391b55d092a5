"""A FIFO single-thread resource whose service times are known when work is queued.

A server's handler thread, a worker's send thread and a host's GPU<->CPU copy engine all serve
work one item at a time, in arrival order, with a cost known up front. For such a queue the finish
time is arithmetic (``max(now, free_at) + cost``), so it needs one timeout instead of a SimPy
Resource's request/release events — the simulator's hot path queues tens of thousands of items.
"""

from __future__ import annotations

import simpy


class CorePool:
    """CPU cores shared by many threads (an emulated cluster on one machine): a thread's work
    also waits for a free core. Cores are handed out in request order, without pre-emption —
    a coarse stand-in for the OS scheduler that gets the total CPU demand right."""

    __slots__ = ("free_at",)

    def __init__(self, cores: int) -> None:
        self.free_at = [0.0] * cores

    def reserve(self, earliest_s: float, cost_s: float) -> float:
        """Start time of ``cost_s`` of work that may start at ``earliest_s``."""
        i = min(range(len(self.free_at)), key=self.free_at.__getitem__)
        start = max(earliest_s, self.free_at[i])
        self.free_at[i] = start + cost_s
        return start


class SerialQueue:
    """One thread serving work in FIFO order; keeps its busy time for utilisation."""

    __slots__ = ("busy_s", "cores", "env", "free_at", "name")

    def __init__(self, env: simpy.Environment, name: str, cores: CorePool | None = None) -> None:
        self.env = env
        self.name = name
        self.cores = cores  # None: the thread has a core of its own
        self.free_at = 0.0
        self.busy_s = 0.0

    def run(self, cost_s: float) -> simpy.Event:
        """Queue ``cost_s`` seconds of work; the event fires when it is done."""
        self.occupy(cost_s)
        return self.env.timeout(self.free_at - self.env.now)

    def occupy(self, cost_s: float) -> None:
        """Queue ``cost_s`` seconds of work that nothing waits for (no event to process)."""
        now = self.env.now
        start = self.free_at if self.free_at > now else now
        if self.cores is not None and cost_s > 0:
            start = self.cores.reserve(start, cost_s)
        self.free_at = start + cost_s
        self.busy_s += cost_s

    def busy_within(self, start_s: float, end_s: float) -> float:
        """Busy seconds inside the window, assuming the counter was reset at ``start_s``."""
        # Work queued before the window but still running inside it is counted from reset time;
        # work queued inside the window that runs past its end is clipped.
        return max(0.0, min(self.busy_s - max(0.0, self.free_at - end_s), end_s - start_s))

    def reset(self) -> None:
        """Start counting busy time afresh (the measured window begins now)."""
        self.busy_s = max(0.0, self.free_at - self.env.now)
