"""Flow-level network: concurrent transfers share links by max-min fair rates (SimGrid style).

Every transfer between two hosts is a flow over its path (sender egress, core if any, receiver
ingress). Between events every flow moves at its max-min fair rate; when flows start or end
the rates are re-solved and the clock jumps to the next completion.

Connections: messages handed over with the same ``connection`` id leave one after another, in
order, as on one TCP connection (ps-lite's van keeps one per process pair). While a connection
has bytes queued it is ONE flow: when its current message's last byte has left, that message's
``on_sent`` runs and its arrival is scheduled one path latency later, and the flow goes straight
on with the next message at the rate it already has. Only a connection that becomes busy or idle
changes the flow set and needs a re-solve, not every message boundary. This is exactly the
timing of sending each message as its own flow once the previous one has left (the rates are a
function of the flow set, which a boundary leaves unchanged); only the solver work differs.

Latency: bytes start flowing at once, and a transfer's event fires one path latency after its
last byte was sent (the pipe holds the last byte that long). For a lone transfer that is
``latency + nbytes / B``, the same as SimGrid's "latency first, then bandwidth"; under sharing it
lets a flow compete for bandwidth from its start, a choice that matters only for flows shorter
than a latency, whose timing is dominated by that latency either way.

Unequal TCP shares: TCP flows through one drop-tail FIFO do not split it evenly, and in
synchronous training the flow that loses out makes its worker late, whose next pushes then make
every server wait. With ``share_sigma`` > 0, each host pair's flows weigh exp(sigma * z), z drawn
whenever the pair's busy period starts, from that pair's own seeded standard-normal stream, and
links are shared by weighted max-min (still work-conserving); 0 is plain max-min fairness.
Measured on the emulated cluster: the co-located 4- and 8-host jobs idled their NICs a fifth of
the time waiting on such a late worker, which equal shares cannot reproduce.

Cost per event instant: every start and end at one simulated instant is batched into ONE
re-solve, run after all other events of that instant (priority ``AFTER_NORMAL``); it replays the
rounds of the previous solve that the change cannot reach (simscale.network.refill). The solver
sees path classes (host pairs with live flows, weighted by their flow count), at most H(H-1)
however many flows there are, on a link->class incidence kept up to date as flows come and go.
Per-flow state lives in packed numpy arrays so that advancing the clock and finding the next
completion are O(F) vectorised; the only per-flow SimPy event is the transfer's own arrival. A
single "next completion" wake-up is pending at a time; a re-solve that moves it leaves the old
one to fire as a no-op (it is recognised by identity), one cheap event, never a cancellation.
Link statistics cost nothing per event: busy time accrues when a link's flow count returns to
zero, bytes when a flow completes, and what is in flight is added when they are read.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable

import numpy as np
import simpy
from simpy.events import Event

from simscale.network.arrival import AFTER_NORMAL, Arrival, Call, call_in
from simscale.network.classes import PathClasses, Routes
from simscale.network.config import NetworkConfig
from simscale.network.solvers import choose_solver
from simscale.network.stats import LinkStat
from simscale.network.topology import Topology

# A flow whose remaining bytes would take less than this at its current rate is finished: it
# absorbs the rounding of ``now + remaining / rate`` (ulp of a 1e4 s clock is ~2e-12 s) and moves a
# completion by at most a nanosecond, far below any NIC latency.
FINISH_TOLERANCE_S = 1e-9

# A message waiting on a connection: its size, the event of its arrival, its ``on_sent``.
_Message = tuple[float, Arrival, Callable[[], None] | None]


class _Connection:
    """A busy connection: its route and the messages behind the one now leaving."""

    __slots__ = ("cls", "dst", "key", "latency_s", "queue", "src")

    def __init__(self, key: Hashable, src: int, dst: int, latency_s: float, cls: int) -> None:
        self.key = key
        self.src = src
        self.dst = dst
        self.latency_s = latency_s
        self.cls = cls  # path class; -1 for a same-host connection (copies, no flow)
        self.queue: deque[_Message] = deque()


class FairShareNetwork:
    """Transfers share every link they cross by max-min fair rates, re-solved per event instant.

    ``routes`` gives each host pair's flows their links and per-link multiplicities (a
    symmetry-reduced cluster, simscale.model.symmetry); None: each flow loads its physical
    path once."""

    def __init__(
        self,
        env: simpy.Environment,
        topology: Topology,
        config: NetworkConfig | None = None,
        routes: Routes | None = None,
    ) -> None:
        config = NetworkConfig() if config is None else config
        if routes is not None and config.share_sigma > 0:
            raise ValueError("weighted routes (symmetry classes) need equal shares: share_sigma 0")
        self.env = env
        self.topology = topology
        self._latency_factor = config.latency_factor
        self._share_sigma = config.share_sigma
        bound_Bps = math.inf if config.stream_max_Bps is None else config.stream_max_Bps
        cap = [c * config.bandwidth_factor for c in topology.link_capacities_Bps()]
        n_links = len(cap)
        self._n_links = n_links
        self._cap = cap
        cap_ext = np.append(np.array(cap), np.inf)  # sentinel slot for the vectorised solvers
        self._classes = PathClasses(n_links, topology.core_link, routes, config.seed)
        # A reduced cluster's groups: the links each loads, and the bytes its flows completed.
        group_mask_ext = None if routes is None else routes.group_links * 1.0
        self._group_mask = (
            np.zeros((0, n_links)) if routes is None else routes.group_links[:, :n_links] * 1.0
        )
        self._group_bytes = np.zeros(self._group_mask.shape[0])
        self._solver = choose_solver(cap, cap_ext, bound_Bps, config.share_sigma, group_mask_ext)
        self._init_flows()
        self._init_stats()

    def _init_flows(self) -> None:
        """Packed per-flow state: flows 0..n-1 are live; removal moves the last flow into the
        hole."""
        size = 64
        self._n = 0
        self._remaining = np.zeros(size)
        self._size = np.zeros(size)
        self._rate = np.zeros(size)
        self._flow_class = np.zeros(size, dtype=np.int_)
        self._latency: list[float] = []
        self._events: list[Arrival] = []
        self._pending: list[
            tuple[int, float, float, Arrival, Callable[[], None] | None, _Connection | None]
        ] = []
        self._on_sent: list[Callable[[], None] | None] = []
        self._conn: list[_Connection | None] = []  # the connection a flow carries, if any
        self._connections: dict[Hashable, _Connection] = {}  # busy ones only
        self._resolve_scheduled = False
        self._wakeup: Event | None = None
        self._last_s = self.env.now

    def _init_stats(self) -> None:
        """Statistics are kept lazily, off the per-event path: a link's busy time accrues when
        its live-flow count returns to 0, its bytes when a flow crossing it completes; the part
        still in flight is added when stats are read."""
        n_links, now = self._n_links, self.env.now
        self._busy_since_s = [0.0] * n_links
        self._busy_acc_s = [0.0] * n_links
        self._done_bytes = [0.0] * n_links
        self._bytes_base = np.zeros(n_links)
        self._window_start_s = now

    # ----- the Network contract -------------------------------------------------------------

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
        Messages with the same ``connection`` (any hashable id; None: none) leave in order, each
        once the one before it has left; a connection joins one src, dst pair while busy."""
        check_transfer(self.topology, src, dst, nbytes)
        arrival = Arrival(self.env)
        if connection is not None:
            conn = self._connections.get(connection)
            if conn is None:
                conn = self._open(connection, src, dst)
                self._start_head(conn, (float(nbytes), arrival, on_sent))
            else:
                if (conn.src, conn.dst) != (src, dst):
                    raise ValueError(
                        f"connection {connection!r} is busy from host {conn.src} to host "
                        f"{conn.dst}; it cannot also carry {src} -> {dst}"
                    )
                conn.queue.append((float(nbytes), arrival, on_sent))
            return arrival
        if src == dst:
            copy_s = self.topology.copy_time_s(nbytes)
            arrival.arrive_in(copy_s)
            call_in(self.env, on_sent, copy_s)
            return arrival
        latency_s = self.topology.path_latency_s(src, dst) * self._latency_factor
        if nbytes == 0:
            arrival.arrive_in(latency_s)
            call_in(self.env, on_sent, 0.0)
            return arrival
        cls = self._classes.of_pair(src, dst)
        self._pending.append((cls, float(nbytes), latency_s, arrival, on_sent, None))
        self._request_resolve()
        return arrival

    def link_stats(self) -> list[LinkStat]:
        """Bytes and busy time of every NIC direction (and the core) since ``reset_stats``."""
        carried, busy = self._totals()
        carried -= self._bytes_base
        window = self.env.now - self._window_start_s
        names = self.topology.link_names()
        return [
            LinkStat(names[i], self._cap[i], float(carried[i]), float(busy[i]), window)
            for i in range(self._n_links)
        ]

    def reset_stats(self) -> None:
        """Start the measured window now: traffic before this instant (warm-up) is forgotten."""
        carried, _ = self._totals()
        self._bytes_base = carried
        now = self.env.now
        self._busy_acc_s = [0.0] * self._n_links
        self._busy_since_s = [now] * self._n_links
        self._window_start_s = now

    @property
    def active_flows(self) -> int:
        """Flows still sending bytes (a busy connection is one however many messages it has)."""
        return self._n + len(self._pending)

    @property
    def queued_messages(self) -> int:
        """Messages waiting on a busy connection behind the one now leaving."""
        return sum(len(c.queue) for c in self._connections.values())

    @property
    def live_path_classes(self) -> int:
        """Host pairs with at least one live flow: the size of each re-solve."""
        return len(self._classes.live)

    # ----- connections ----------------------------------------------------------------------

    def _open(self, key: Hashable, src: int, dst: int) -> _Connection:
        """Register a connection that just became busy."""
        if src == dst:
            cls = -1
            latency_s = 0.0
        else:
            cls = self._classes.of_pair(src, dst)
            latency_s = self.topology.path_latency_s(src, dst) * self._latency_factor
        conn = _Connection(key, src, dst, latency_s, cls)
        self._connections[key] = conn
        return conn

    def _start_head(self, conn: _Connection, message: _Message) -> None:
        """Start sending ``message``, now the first of ``conn`` not yet sent."""
        nbytes, arrival, on_sent = message
        if conn.cls >= 0 and nbytes > 0:
            self._pending.append((conn.cls, nbytes, conn.latency_s, arrival, on_sent, conn))
            self._request_resolve()
            return
        # Copies and empty messages take no bandwidth share: the same timing as an unconnected
        # transfer, and the connection moves on when the last byte has left.
        if conn.cls < 0:
            delay_s = arrive_s = self.topology.copy_time_s(nbytes)
        else:
            delay_s, arrive_s = 0.0, conn.latency_s
        arrival.arrive_in(arrive_s)

        def left(_event: Event) -> None:
            if on_sent is not None:
                on_sent()
            self._next_head(conn)

        Call(self.env, left, delay_s)

    def _next_head(self, conn: _Connection) -> None:
        """The head of ``conn`` has left: start the next message, or the connection is idle."""
        if conn.queue:
            self._start_head(conn, conn.queue.popleft())
        else:
            del self._connections[conn.key]

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
            # Only connections moved on to their next message (rates unchanged), or rounding
            # left the earliest flow a hair short of the tolerance: plan the next boundary.
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
        """Move every live flow forward to now at the current rates."""
        now = self.env.now
        dt = now - self._last_s
        if dt > 0 and self._n:
            n = self._n
            self._remaining[:n] -= self._rate[:n] * dt
        self._last_s = now

    def _complete_finished(self) -> bool:
        """Fire the arrivals of messages whose last byte has left; a flow whose connection has
        more queued goes on with the next one, any other leaves. Return whether any left."""
        n = self._n
        if not n:
            return False
        # Late in a long run the clock's own resolution can exceed the tolerance; a flow within
        # a few ulps of the end must count as finished or its wake-up would never move the clock.
        tolerance_s = max(FINISH_TOLERANCE_S, 4 * math.ulp(self.env.now))
        done = (self._remaining[:n] <= self._rate[:n] * tolerance_s).nonzero()[0].tolist()
        if not done:
            return False
        for i in done:
            self._events[i].arrive_in(self._latency[i])
        # Notify before deciding who leaves: a sender told its message has left may queue the
        # next one on the same connection, which then carries on without a re-solve. Anything
        # else it starts only joins the pending list, so flow indices stay put meanwhile.
        for i in done:
            notify = self._on_sent[i]
            if notify is not None:
                notify()
        leaving = []
        for i in done:
            conn = self._conn[i]
            if conn is not None and conn.queue and conn.queue[0][0] > 0:
                self._next_message(i, conn.queue.popleft())
            else:
                leaving.append(i)
        if not leaving:
            return False
        conns = [self._conn[i] for i in leaving]
        self._remove(np.array(leaving))
        for conn in conns:  # an empty message next takes the unconnected path (no flow)
            if conn is not None:
                self._next_head(conn)
        return True

    def _next_message(self, i: int, message: _Message) -> None:
        """Flow ``i`` goes on with its connection's next message; its rate stays as it is."""
        nbytes, arrival, on_sent = message
        size = float(self._size[i])
        cls = int(self._flow_class[i])
        classes = self._classes
        for link, w in zip(classes.paths[cls], classes.weights[cls], strict=True):
            self._done_bytes[link] += size * w
        group = classes.group[cls]
        if group >= 0:
            self._group_bytes[group] += size
        self._size[i] = nbytes
        self._remaining[i] = nbytes  # the old message's rounding residue is dropped, as before
        self._events[i] = arrival
        self._on_sent[i] = on_sent

    def _remove(self, done: np.ndarray) -> None:
        """Drop flows ``done`` (sorted): each hole gets the current last flow."""
        now = self.env.now
        classes = self._classes
        count = classes.count
        n_on_link = classes.n_on_link
        for i in reversed(done.tolist()):
            cls = int(self._flow_class[i])
            size = float(self._size[i])
            path = classes.paths[cls]
            count[cls] -= 1
            classes.dirty.add(cls)
            if not count[cls]:
                del classes.live[cls]
                for link in path:
                    del classes.members[link][cls]
            for link, w in zip(path, classes.weights[cls], strict=True):
                n_on_link[link] -= 1
                self._done_bytes[link] += size * w
                if not n_on_link[link]:
                    self._busy_acc_s[link] += now - self._busy_since_s[link]
            group = classes.group[cls]
            if group >= 0:
                self._group_bytes[group] += size
            last = self._n - 1
            if i != last:
                self._remaining[i] = self._remaining[last]
                self._size[i] = self._size[last]
                self._rate[i] = self._rate[last]
                self._flow_class[i] = self._flow_class[last]
                self._latency[i] = self._latency[last]
                self._events[i] = self._events[last]
                self._on_sent[i] = self._on_sent[last]
                self._conn[i] = self._conn[last]
            del self._latency[last], self._events[last], self._on_sent[last], self._conn[last]
            self._n = last

    def _admit_pending(self) -> None:
        pending = self._pending
        if not pending:
            return
        now = self.env.now
        n = self._n
        need = n + len(pending)
        if need > self._remaining.shape[0]:
            size = max(need, 2 * self._remaining.shape[0])
            self._remaining = np.resize(self._remaining, size)
            self._size = np.resize(self._size, size)
            self._rate = np.resize(self._rate, size)
            self._flow_class = np.resize(self._flow_class, size)
        classes = self._classes
        count = classes.count
        n_on_link = classes.n_on_link
        for cls, _nbytes, latency_s, arrival, on_sent, conn in pending:
            path = classes.paths[cls]
            if not count[cls]:
                if self._share_sigma > 0:  # a new busy period: a new share weight
                    z = classes.pair_rng(cls).standard_normal()
                    classes.share_weight[cls] = math.exp(self._share_sigma * z)
                classes.live[cls] = None
                for link in path:
                    classes.members[link][cls] = None
            count[cls] += 1
            classes.dirty.add(cls)
            for link in path:
                if not n_on_link[link]:
                    self._busy_since_s[link] = now
                n_on_link[link] += 1
            self._latency.append(latency_s)
            self._events.append(arrival)
            self._on_sent.append(on_sent)
            self._conn.append(conn)
        sizes = [p[1] for p in pending]
        self._remaining[n:need] = sizes
        self._size[n:need] = sizes
        self._flow_class[n:need] = [p[0] for p in pending]
        self._n = need
        pending.clear()

    def _solve(self) -> None:
        """Max-min fair rates of the live path classes, hence of every live flow."""
        n = self._n
        if not n:
            return
        classes = self._classes
        dirty, classes.dirty = classes.dirty, set()
        idx, rates = self._solver.solve(classes, dirty)
        classes.rate[idx] = rates
        self._rate[:n] = classes.rate[self._flow_class[:n]]

    def _plan_wakeup(self) -> None:
        n = self._n
        if not n:
            self._wakeup = None
            return
        to_finish = self._remaining[:n] / self._rate[:n]
        delay = max(float(to_finish.min()), 0.0)
        self._wakeup = Call(self.env, self._on_wakeup, delay)

    def _totals(self) -> tuple[np.ndarray, np.ndarray]:
        """Bytes every link has carried and seconds it was busy, all time, up to now."""
        self._advance()
        now = self.env.now
        n = self._n
        classes = self._classes
        n_classes = len(classes.paths)
        sent = self._size[:n] - self._remaining[:n]
        class_sent = np.bincount(self._flow_class[:n], weights=sent, minlength=n_classes)
        in_flight = np.bincount(
            classes.links[:n_classes].ravel(),
            weights=(class_sent[:, None] * classes.link_weight[:n_classes]).ravel(),
            minlength=self._n_links + 1,
        )[: self._n_links]
        group_sent = self._group_bytes.copy()
        if group_sent.size:
            groups = classes.group[:n_classes]
            for g in range(group_sent.size):
                group_sent[g] += class_sent[groups == g].sum()
        carried = np.array(self._done_bytes) + in_flight + group_sent @ self._group_mask
        busy = np.array(self._busy_acc_s)
        for link, k in enumerate(classes.n_on_link):
            if k:
                busy[link] += now - self._busy_since_s[link]
        return carried, busy


def check_transfer(topology: Topology, src: int, dst: int, nbytes: float) -> None:
    """Reject a transfer naming an unknown host or a negative or non-finite size."""
    topology.check_host(src)
    topology.check_host(dst)
    if not (nbytes >= 0 and math.isfinite(nbytes)):
        raise ValueError(f"nbytes must be non-negative and finite, got {nbytes}")
