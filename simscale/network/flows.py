"""Flow-level network: concurrent transfers share links by max-min fair rates (SimGrid style).

Every transfer between two hosts is a flow over its path (sender egress, core if any, receiver
ingress). Between events every flow moves at its max-min fair rate; when flows start or end
the rates are re-solved and the clock jumps to the next completion.

Latency: bytes start flowing at once, and a transfer's event fires one path latency after its
last byte was sent (the pipe holds the last byte that long). For a lone transfer that is
``latency + nbytes / B``, the same as SimGrid's "latency first, then bandwidth"; under sharing it
lets a flow compete for bandwidth from its start, a choice that matters only for flows shorter
than a latency, whose timing is dominated by that latency either way.

Cost per event instant: every start and end at one simulated instant is batched into ONE
re-solve, run after all other events of that instant (priority ``AFTER_NORMAL``). Per-flow state
lives in packed numpy arrays so that advancing the clock and finding the next completion are
O(F) vectorised; the only per-flow SimPy event is the transfer's own arrival. A single "next
completion" wake-up is pending at a time; a re-solve that moves it leaves the old one to fire as
a no-op (it is recognised by identity), which costs one cheap event, never a cancellation.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import simpy
from simpy.events import Event

from simscale.network.arrival import AFTER_NORMAL, Arrival, Call
from simscale.network.fairshare import NUMPY_MIN_FLOWS, solve_heap, solve_rounds
from simscale.network.stats import LinkStat
from simscale.network.topology import Topology

# A flow whose remaining bytes would take less than this at its current rate is finished: it
# absorbs the rounding of ``now + remaining / rate`` (ulp of a 1e4 s clock is ~2e-12 s) and moves a
# completion by at most a nanosecond, far below any NIC latency.
FINISH_TOLERANCE_S = 1e-9


class FairShareNetwork:
    """Transfers share every link they cross by max-min fair rates, re-solved per event instant."""

    def __init__(
        self,
        env: simpy.Environment,
        topology: Topology,
        *,
        bandwidth_factor: float = 1.0,
        latency_factor: float = 1.0,
        stream_max_Bps: float | None = None,
    ) -> None:
        check_factors(bandwidth_factor, latency_factor, stream_max_Bps)
        self.env = env
        self.topology = topology
        self._latency_factor = latency_factor
        self._stream_max_Bps = stream_max_Bps
        cap = [c * bandwidth_factor for c in topology.link_capacities_Bps()]
        self._n_links = len(cap)
        self._cap = cap
        self._cap_ext = np.append(np.array(cap), np.inf)  # sentinel slot for solve_rounds
        self._core = topology.core_link
        self._width = 3 if self._core is not None else 2  # links per inter-host path
        # Packed per-flow state: flows 0..n-1 are live; removal moves the last flow into the hole.
        size = 64
        self._n = 0
        self._remaining = np.zeros(size)
        self._rate = np.zeros(size)
        self._links = np.zeros((size, self._width), dtype=np.int_)
        self._paths: list[tuple[int, ...]] = []
        self._latency: list[float] = []
        self._events: list[Arrival] = []
        self._pending: list[
            tuple[tuple[int, ...], float, float, Arrival, Callable[[], None] | None]
        ] = []
        self._on_sent: list[Callable[[], None] | None] = []
        self._resolve_scheduled = False
        self._wakeup: Event | None = None
        self._last_s = env.now
        # Per-link rate and whether any flow crosses it, valid since the last re-solve.
        self._link_rate = np.zeros(self._n_links + 1)
        self._link_busy = np.zeros(self._n_links + 1, dtype=bool)
        self._bytes = np.zeros(self._n_links + 1)
        self._busy_s = np.zeros(self._n_links + 1)
        self._window_start_s = env.now

    # ----- the Network contract -------------------------------------------------------------

    def transfer(
        self, src: int, dst: int, nbytes: float, on_sent: Callable[[], None] | None = None
    ) -> Arrival:
        """Send ``nbytes`` from host ``src`` to host ``dst``; the event fires on the last byte.
        ``on_sent`` is called when the last byte has left the sender (a latency earlier)."""
        check_transfer(self.topology, src, dst, nbytes)
        arrival = Arrival(self.env)
        if src == dst:
            copy_s = self.topology.copy_time_s(nbytes)
            arrival.arrive_in(copy_s)
            _notify_in(self.env, on_sent, copy_s)
            return arrival
        latency_s = self.topology.path_latency_s(src, dst) * self._latency_factor
        if nbytes == 0:
            arrival.arrive_in(latency_s)
            _notify_in(self.env, on_sent, 0.0)
            return arrival
        if self._core is None:
            path: tuple[int, ...] = (2 * src, 2 * dst + 1)
        else:
            path = (2 * src, self._core, 2 * dst + 1)
        self._pending.append((path, float(nbytes), latency_s, arrival, on_sent))
        self._request_resolve()
        return arrival

    def link_stats(self) -> list[LinkStat]:
        """Bytes and busy time of every NIC direction (and the core) since ``reset_stats``."""
        self._advance()
        window = self.env.now - self._window_start_s
        names = self.topology.link_names()
        return [
            LinkStat(names[i], self._cap[i], float(self._bytes[i]), float(self._busy_s[i]), window)
            for i in range(self._n_links)
        ]

    def reset_stats(self) -> None:
        """Start the measured window now: traffic before this instant (warm-up) is forgotten."""
        self._advance()
        self._bytes[:] = 0.0
        self._busy_s[:] = 0.0
        self._window_start_s = self.env.now

    @property
    def active_flows(self) -> int:
        """Transfers still sending bytes (started, last byte not yet sent)."""
        return self._n + len(self._pending)

    # ----- event handling -------------------------------------------------------------------

    def _request_resolve(self) -> None:
        if not self._resolve_scheduled:
            self._resolve_scheduled = True
            Call(self.env, self._on_resolve, 0.0, AFTER_NORMAL)

    def _on_wakeup(self, event: Event) -> None:
        """The earliest flow should have finished: complete what has, then re-solve."""
        if event is not self._wakeup:
            return  # superseded by a later re-solve
        self._wakeup = None
        self._advance()
        if self._complete_finished():
            self._request_resolve()
        else:
            # Rounding left the earliest flow a hair short of the tolerance: look again then.
            self._plan_wakeup()

    def _on_resolve(self, _event: Event) -> None:
        """Once per instant with changes: admit new flows, share links, plan the next wake-up."""
        self._resolve_scheduled = False
        self._advance()
        self._complete_finished()
        self._admit_pending()
        self._solve()
        self._plan_wakeup()

    def _advance(self) -> None:
        """Move every live flow and the link counters forward to now at the current rates."""
        now = self.env.now
        dt = now - self._last_s
        if dt > 0 and self._n:
            n = self._n
            self._remaining[:n] -= self._rate[:n] * dt
            self._bytes += self._link_rate * dt
            self._busy_s[self._link_busy] += dt
        self._last_s = now

    def _complete_finished(self) -> bool:
        """Fire the arrivals of flows whose last byte has left; return whether any did."""
        n = self._n
        if not n:
            return False
        done = np.flatnonzero(self._remaining[:n] <= self._rate[:n] * FINISH_TOLERANCE_S)
        if not done.size:
            return False
        sent = []
        for i in done.tolist():
            self._events[i].arrive_in(self._latency[i])
            if self._on_sent[i] is not None:
                sent.append(self._on_sent[i])
        self._remove(done)
        for notify in sent:  # after removal: a notified sender may start its next transfer
            notify()
        return True

    def _remove(self, done: np.ndarray) -> None:
        """Drop flows ``done`` (sorted) by moving surviving flows from the tail into the holes."""
        n = self._n
        m = n - done.size
        holes = done[done < m]
        if holes.size:
            tail = np.setdiff1d(np.arange(m, n), done, assume_unique=True)
            self._remaining[holes] = self._remaining[tail]
            self._rate[holes] = self._rate[tail]
            self._links[holes] = self._links[tail]
            for h, t in zip(holes.tolist(), tail.tolist(), strict=True):
                self._paths[h] = self._paths[t]
                self._latency[h] = self._latency[t]
                self._events[h] = self._events[t]
                self._on_sent[h] = self._on_sent[t]
        del self._paths[m:], self._latency[m:], self._events[m:], self._on_sent[m:]
        self._n = m

    def _admit_pending(self) -> None:
        pending = self._pending
        if not pending:
            return
        n = self._n
        need = n + len(pending)
        if need > self._remaining.shape[0]:
            size = max(need, 2 * self._remaining.shape[0])
            self._remaining = np.resize(self._remaining, size)
            self._rate = np.resize(self._rate, size)
            self._links = np.resize(self._links, (size, self._width))
        for path, _nbytes, latency_s, arrival, on_sent in pending:
            self._paths.append(path)
            self._latency.append(latency_s)
            self._events.append(arrival)
            self._on_sent.append(on_sent)
        self._remaining[n:need] = [p[1] for p in pending]
        self._links[n:need] = [p[0] for p in pending]
        self._n = need
        pending.clear()

    def _solve(self) -> None:
        """Max-min fair rates of the live flows and the per-link totals they imply."""
        n = self._n
        if not n:
            self._link_rate[:] = 0.0
            self._link_busy[:] = False
            return
        stream = self._stream_max_Bps
        if n < NUMPY_MIN_FLOWS:
            bound = None if stream is None else [stream] * n
            self._rate[:n] = solve_heap(self._cap, self._paths, bound)
        else:
            bound_arr = np.full(n, math.inf if stream is None else stream)
            self._rate[:n] = solve_rounds(self._cap_ext, self._links[:n], bound_arr)
        links = self._links[:n].ravel()
        weights = np.repeat(self._rate[:n], self._width)
        self._link_rate = np.bincount(links, weights=weights, minlength=self._n_links + 1)
        self._link_busy = self._link_rate > 0

    def _plan_wakeup(self) -> None:
        n = self._n
        if not n:
            self._wakeup = None
            return
        to_finish = self._remaining[:n] / self._rate[:n]
        delay = max(float(to_finish.min()), 0.0)
        self._wakeup = Call(self.env, self._on_wakeup, delay)


def _notify_in(env: simpy.Environment, fn: Callable[[], None] | None, delay_s: float) -> None:
    """Call ``fn()`` after ``delay_s`` (never synchronously inside ``transfer``)."""
    if fn is not None:
        Call(env, lambda _e: fn(), delay_s)


def check_factors(
    bandwidth_factor: float, latency_factor: float, stream_max_Bps: float | None
) -> None:
    """Reject calibration factors that would make the model meaningless."""
    if not (bandwidth_factor > 0 and math.isfinite(bandwidth_factor)):
        raise ValueError(f"bandwidth_factor must be positive and finite, got {bandwidth_factor}")
    if not (latency_factor >= 0 and math.isfinite(latency_factor)):
        raise ValueError(f"latency_factor must be non-negative and finite, got {latency_factor}")
    if stream_max_Bps is not None and not stream_max_Bps > 0:
        raise ValueError(f"stream_max_Bps must be positive, got {stream_max_Bps}")


def check_transfer(topology: Topology, src: int, dst: int, nbytes: float) -> None:
    """Reject a transfer naming an unknown host or a negative or non-finite size."""
    topology.check_host(src)
    topology.check_host(dst)
    if not (nbytes >= 0 and math.isfinite(nbytes)):
        raise ValueError(f"nbytes must be non-negative and finite, got {nbytes}")
