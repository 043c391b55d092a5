"""The simpler network model: each NIC direction is a first-come-first-served server.

Rule, exactly: a transfer from ``src`` to ``dst`` requested at time ``t`` starts sending at
``start = max(t, free(src egress), free(dst ingress))``, holds BOTH links for
``nbytes / min(capacities on its path)`` (the core, when present, and a per-stream cap limit
that rate), releases both at ``end``, and fires at ``end + path latency``. Links are reserved in
request order and never backfilled: a later transfer cannot use an idle gap before an earlier
reservation. The core is not a FIFO server (it carries many transfers at once in any real
fabric); it only caps a transfer's rate and has its bytes and busy time counted.

Compared with fair sharing, this serialises what a real NIC interleaves, so one large transfer
delays every small one queued behind it; it is kept as the cheap baseline the fair-share model
must beat, and needs one SimPy event per transfer and no solver.

A ``connection`` serialises its messages: the next one is requested (and reserves the links)
only when the one before it has left, exactly as if its sender waited for ``on_sent`` first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import simpy

from simscale.network.arrival import Arrival, call_in
from simscale.network.config import NetworkConfig
from simscale.network.flows import check_transfer
from simscale.network.stats import LinkStat
from simscale.network.topology import Topology

_OnSent = Callable[[], None] | None


@dataclass(frozen=True)
class _Busy:
    """One interval during which a link carried ``nbytes`` at a constant rate."""

    start_s: float
    end_s: float
    nbytes: float


class FifoNetwork:
    """Transfers queue first-come-first-served on the sender's egress and receiver's ingress."""

    def __init__(
        self,
        env: simpy.Environment,
        topology: Topology,
        config: NetworkConfig | None = None,
    ) -> None:
        # The config's share_sigma and seed go unused: a FIFO NIC serves whole messages in
        # turn, it does not share its rate between flows.
        config = NetworkConfig() if config is None else config
        self.env = env
        self.topology = topology
        self._latency_factor = config.latency_factor
        self._stream_max_Bps = config.stream_max_Bps
        self._cap = [c * config.bandwidth_factor for c in topology.link_capacities_Bps()]
        self._core = topology.core_link
        self._free_at_s = [env.now] * len(self._cap)
        self._intervals: list[list[_Busy]] = [[] for _ in self._cap]
        self._window_start_s = env.now
        # Busy connections -> the messages behind the one now leaving.
        self._waiting: dict[Hashable, deque[tuple[int, int, float, Arrival, _OnSent]]] = {}
        self._route: dict[Hashable, tuple[int, int]] = {}  # of each busy connection

    def transfer(
        self,
        src: int,
        dst: int,
        nbytes: float,
        on_sent: Callable[[], None] | None = None,
        connection: Hashable | None = None,
    ) -> Arrival:
        """Send ``nbytes`` from host ``src`` to host ``dst``; the event fires on the last byte.
        ``on_sent`` is called when the last byte has left the sender (a latency earlier).
        Messages with the same ``connection`` (any hashable id) leave in order, one at a time."""
        check_transfer(self.topology, src, dst, nbytes)
        arrival = Arrival(self.env)
        if connection is None:
            self._start(src, dst, nbytes, arrival, on_sent)
        elif connection in self._waiting:
            waiting = self._waiting[connection]
            busy_src, busy_dst = self._route[connection]
            if (busy_src, busy_dst) != (src, dst):
                raise ValueError(
                    f"connection {connection!r} is busy from host {busy_src} to host "
                    f"{busy_dst}; it cannot also carry {src} -> {dst}"
                )
            waiting.append((src, dst, nbytes, arrival, on_sent))
        else:
            self._route[connection] = (src, dst)
            self._waiting[connection] = deque()
            self._start(src, dst, nbytes, arrival, self._then_next(connection, on_sent))
        return arrival

    def _then_next(self, connection: Hashable, on_sent: _OnSent) -> Callable[[], None]:
        """``on_sent``, then the connection's next message starts (or the connection idles)."""

        def left() -> None:
            if on_sent is not None:
                on_sent()
            waiting = self._waiting[connection]
            if not waiting:
                del self._waiting[connection], self._route[connection]
                return
            src, dst, nbytes, arrival, then = waiting.popleft()
            self._start(src, dst, nbytes, arrival, self._then_next(connection, then))

        return left

    def _start(self, src: int, dst: int, nbytes: float, arrival: Arrival, on_sent: _OnSent) -> None:
        """Reserve the path for one message now and schedule its arrival and ``on_sent``."""
        now = self.env.now
        if src == dst:
            copy_s = self.topology.copy_time_s(nbytes)
            arrival.arrive_in(copy_s)
            call_in(self.env, on_sent, copy_s)
            return
        latency_s = self.topology.path_latency_s(src, dst) * self._latency_factor
        if nbytes == 0:
            arrival.arrive_in(latency_s)
            call_in(self.env, on_sent, 0.0)
            return
        egress, ingress = 2 * src, 2 * dst + 1
        rate = min(self._cap[egress], self._cap[ingress])
        if self._core is not None:
            rate = min(rate, self._cap[self._core])
        if self._stream_max_Bps is not None:
            rate = min(rate, self._stream_max_Bps)
        start = max(now, self._free_at_s[egress], self._free_at_s[ingress])
        end = start + nbytes / rate
        self._free_at_s[egress] = self._free_at_s[ingress] = end
        busy = _Busy(start, end, float(nbytes))
        self._intervals[egress].append(busy)
        self._intervals[ingress].append(busy)
        if self._core is not None:
            self._intervals[self._core].append(busy)
        arrival.arrive_in(end + latency_s - now)
        call_in(self.env, on_sent, end - now)

    def link_stats(self) -> list[LinkStat]:
        """Bytes and busy time of every NIC direction (and the core) since ``reset_stats``."""
        lo, hi = self._window_start_s, self.env.now
        names = self.topology.link_names()
        stats = []
        for i, intervals in enumerate(self._intervals):
            carried = 0.0
            busy = 0.0
            covered_to = lo
            # Sorted by start, the union of the (possibly overlapping, on the core) intervals
            # clipped to the window is their busy time; bytes are prorated to the clipped part.
            for b in sorted(intervals, key=lambda b: b.start_s):
                s, e = max(b.start_s, lo), min(b.end_s, hi)
                if e <= s:
                    continue
                carried += b.nbytes * (e - s) / (b.end_s - b.start_s)
                busy += max(0.0, e - max(s, covered_to))
                covered_to = max(covered_to, e)
            stats.append(LinkStat(names[i], self._cap[i], carried, busy, hi - lo))
        return stats

    def reset_stats(self) -> None:
        """Start the measured window now: traffic before this instant (warm-up) is forgotten."""
        now = self.env.now
        self._window_start_s = now
        # Reservations still running or queued keep counting, for their part after now.
        self._intervals = [[b for b in ivs if b.end_s > now] for ivs in self._intervals]
