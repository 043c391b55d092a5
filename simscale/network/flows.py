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
from typing import Protocol

import numpy as np
import simpy
from simpy.events import Event

from simscale.network.arrival import AFTER_NORMAL, Arrival, Call
from simscale.network.fairshare import FloatArray, IntArray, solve_grouped, solve_rounds
from simscale.network.fairshare_compiled import solve_grouped_compiled
from simscale.network.refill import RefillSolver
from simscale.network.stats import LinkStat
from simscale.network.topology import Topology

# A flow whose remaining bytes would take less than this at its current rate is finished: it
# absorbs the rounding of ``now + remaining / rate`` (ulp of a 1e4 s clock is ~2e-12 s) and moves a
# completion by at most a nanosecond, far below any NIC latency.
FINISH_TOLERANCE_S = 1e-9

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


class Routes(Protocol):
    """Where a host pair's flows go and how many physical flows each one stands for per link
    (simscale.network.fairshare.solve_grouped explains the groups)."""

    @property
    def width(self) -> int:
        """The most links any route lists."""
        ...

    @property
    def group_links(self) -> np.ndarray:
        """(groups, links + 1) bool: the links each group's flows all load once more."""
        ...

    def route(self, src: int, dst: int) -> tuple[tuple[int, ...], tuple[float, ...], int]:
        """The links a ``src`` -> ``dst`` flow loads, its multiplicity on each (negative:
        cancels the group's load there), and its group (-1: none)."""
        ...


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
    """Transfers share every link they cross by max-min fair rates, re-solved per event instant."""

    def __init__(
        self,
        env: simpy.Environment,
        topology: Topology,
        *,
        bandwidth_factor: float = 1.0,
        latency_factor: float = 1.0,
        stream_max_Bps: float | None = None,
        share_sigma: float = 0.0,
        seed: int = 0,
        routes: Routes | None = None,
    ) -> None:
        check_factors(bandwidth_factor, latency_factor, stream_max_Bps)
        check_share_sigma(share_sigma)
        if routes is not None and share_sigma > 0:
            raise ValueError("weighted routes (symmetry classes) need equal shares: share_sigma 0")
        # How a host pair's flows load the links: None is the physical path, each flow once;
        # a symmetry-reduced cluster (simscale.model.symmetry) gives each link its own multiplicity.
        self._routes = routes
        self.env = env
        self.topology = topology
        self._latency_factor = latency_factor
        self._stream_max_Bps = math.inf if stream_max_Bps is None else stream_max_Bps
        cap = [c * bandwidth_factor for c in topology.link_capacities_Bps()]
        n_links = len(cap)
        self._n_links = n_links
        self._cap = cap
        self._cap_ext = np.append(np.array(cap), np.inf)  # sentinel slot for solve_rounds
        self._core = topology.core_link
        # Links per inter-host path (shorter paths are padded with the sentinel link n_links).
        self._width = routes.width if routes is not None else 3 if self._core is not None else 2
        # Flows between the same two hosts always get the same rate, so the solver works on
        # path classes (one per host pair), each loading its links once per live flow: a worker
        # pushing 20 keys to one server is one entry of weight 20, not 20 entries.
        self._class_of: dict[tuple[int, int], int] = {}
        self._class_paths: list[tuple[int, ...]] = []
        self._class_count: list[int] = []
        self._class_links = np.zeros((16, self._width), dtype=np.int_)
        self._class_link_weight = np.ones((16, self._width))  # flows per live flow, per link
        self._class_weights: list[tuple[float, ...]] = []
        self._class_group = np.full(16, -1, dtype=np.int_)
        n_groups = 0 if routes is None else routes.group_links.shape[0]
        self._group_mask = (
            np.zeros((0, n_links)) if routes is None else routes.group_links[:, :n_links] * 1.0
        )
        self._group_bytes = np.zeros(n_groups)  # bytes completed by each group's flows
        self._group_mask_ext = (
            np.zeros((0, n_links + 1)) if routes is None else routes.group_links * 1.0
        )
        self._class_rate = np.zeros(16)
        self._live_classes: dict[int, None] = {}  # insertion-ordered set
        # Classes whose flow count changed since the last re-solve: what it must not replay.
        self._dirty: set[int] = set()
        self._refill = RefillSolver(cap)
        # (live classes, their counts) -> (class ids, rates) of the grouped solve (see _solve);
        # None once it has proved useless on this run.
        self._grouped_memo: (
            dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[IntArray, FloatArray]] | None
        ) = {}
        self._memo_lookups = self._memo_hits = 0
        self._share_sigma = share_sigma
        self._seed = seed
        # Per path class: its flows' share weight, and the host pair's own random stream, so
        # that the k-th busy period of a pair gets the same draw whatever else changes (common
        # random numbers: a fit that varies share_sigma sees a smooth response).
        self._class_weight = np.ones(16)
        self._class_rng: dict[int, np.random.Generator] = {}  # made on a class's first draw
        # The link -> live classes incidence and per-link live flow counts are kept up to date
        # as flows come and go, so a re-solve does not rebuild them.
        self._members: list[dict[int, None]] = [{} for _ in range(n_links)]
        self._n_on_link = [0] * n_links
        # Packed per-flow state: flows 0..n-1 are live; removal moves the last flow into the hole.
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
        self._last_s = env.now
        # Statistics are kept lazily, off the per-event path: a link's busy time accrues when
        # its live-flow count returns to 0, its bytes when a flow crossing it completes; the
        # part still in flight is added when stats are read.
        self._busy_since_s = [0.0] * n_links
        self._busy_acc_s = [0.0] * n_links
        self._done_bytes = [0.0] * n_links
        self._bytes_base = np.zeros(n_links)
        self._window_start_s = env.now

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
            _notify_in(self.env, on_sent, copy_s)
            return arrival
        latency_s = self.topology.path_latency_s(src, dst) * self._latency_factor
        if nbytes == 0:
            arrival.arrive_in(latency_s)
            _notify_in(self.env, on_sent, 0.0)
            return arrival
        cls = self._class_of.get((src, dst))
        if cls is None:
            cls = self._new_class(src, dst)
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
        return len(self._live_classes)

    # ----- connections ----------------------------------------------------------------------

    def _open(self, key: Hashable, src: int, dst: int) -> _Connection:
        """Register a connection that just became busy."""
        if src == dst:
            cls = -1
            latency_s = 0.0
        else:
            cls = self._class_of.get((src, dst))
            if cls is None:
                cls = self._new_class(src, dst)
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
        for link, w in zip(self._class_paths[cls], self._class_weights[cls], strict=True):
            self._done_bytes[link] += size * w
        group = self._class_group[cls]
        if group >= 0:
            self._group_bytes[group] += size
        self._size[i] = nbytes
        self._remaining[i] = nbytes  # the old message's rounding residue is dropped, as before
        self._events[i] = arrival
        self._on_sent[i] = on_sent

    def _remove(self, done: np.ndarray) -> None:
        """Drop flows ``done`` (sorted): each hole gets the current last flow."""
        now = self.env.now
        count = self._class_count
        n_on_link = self._n_on_link
        for i in reversed(done.tolist()):
            cls = int(self._flow_class[i])
            size = float(self._size[i])
            path = self._class_paths[cls]
            count[cls] -= 1
            self._dirty.add(cls)
            if not count[cls]:
                del self._live_classes[cls]
                for link in path:
                    del self._members[link][cls]
            for link, w in zip(path, self._class_weights[cls], strict=True):
                n_on_link[link] -= 1
                self._done_bytes[link] += size * w
                if not n_on_link[link]:
                    self._busy_acc_s[link] += now - self._busy_since_s[link]
            group = self._class_group[cls]
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

    def _new_class(self, src: int, dst: int) -> int:
        weights: tuple[float, ...]
        group = -1
        if self._routes is not None:
            path, weights, group = self._routes.route(src, dst)
        else:
            if self._core is None:
                path = (2 * src, 2 * dst + 1)
            else:
                path = (2 * src, self._core, 2 * dst + 1)
            weights = (1.0,) * len(path)
        cls = len(self._class_paths)
        self._class_of[(src, dst)] = cls
        self._class_paths.append(path)
        self._class_weights.append(weights)
        self._class_count.append(0)
        if cls >= self._class_links.shape[0]:
            size = 2 * cls
            self._class_links = np.resize(self._class_links, (size, self._width))
            self._class_link_weight = np.resize(self._class_link_weight, (size, self._width))
            self._class_group = np.resize(self._class_group, size)
            self._class_rate = np.resize(self._class_rate, size)
        pad = self._width - len(path)
        self._class_links[cls] = path + (self._n_links,) * pad
        self._class_link_weight[cls] = weights + (0.0,) * pad
        self._class_group[cls] = group
        if cls >= self._class_weight.shape[0]:
            self._class_weight = np.resize(self._class_weight, 2 * cls)
        self._class_weight[cls] = 1.0
        return cls

    def _pair_rng(self, cls: int) -> np.random.Generator:
        """The seeded random stream of class ``cls``'s host pair (its path: egress of the
        sender 2*src, ingress of the receiver 2*dst + 1)."""
        rng = self._class_rng.get(cls)
        if rng is None:
            path = self._class_paths[cls]
            src, dst = path[0] // 2, (path[-1] - 1) // 2
            rng = self._class_rng[cls] = np.random.default_rng((self._seed, src, dst))
        return rng

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
        count = self._class_count
        n_on_link = self._n_on_link
        for cls, _nbytes, latency_s, arrival, on_sent, conn in pending:
            path = self._class_paths[cls]
            if not count[cls]:
                if self._share_sigma > 0:  # a new busy period: a new share weight
                    z = self._pair_rng(cls).standard_normal()
                    self._class_weight[cls] = math.exp(self._share_sigma * z)
                self._live_classes[cls] = None
                for link in path:
                    self._members[link][cls] = None
            count[cls] += 1
            self._dirty.add(cls)
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
        live = self._live_classes
        dirty = self._dirty
        self._dirty = set()
        if self._routes is not None:
            # Per-link multiplicities: the vectorised solver, from scratch (the incremental one
            # knows one count per class only). Its answer depends only on which classes are live
            # and their counts (paths, capacities and groups never change), and a training
            # iteration repeats the same few hundred of those states, so it is memoised.
            memo = self._grouped_memo
            key: tuple[tuple[int, ...], tuple[int, ...]] | None = None
            known = None
            if memo is not None:  # the key costs O(live classes) to build: only while useful
                key = (tuple(live), tuple(map(self._class_count.__getitem__, live)))
                known = memo.get(key)
            if known is None:
                idx = np.fromiter(live, dtype=np.int_, count=len(live))
                counts = np.fromiter(
                    map(self._class_count.__getitem__, live), dtype=np.float64, count=len(live)
                )
                weight = self._class_link_weight[idx] * counts[:, None]
                problem = (
                    self._cap_ext,
                    self._class_links[idx],
                    weight,
                    self._class_group[idx],
                    counts,
                    self._group_mask_ext,
                    self._stream_max_Bps,
                )
                rates = solve_grouped_compiled(*problem)
                if rates is None:
                    rates = solve_grouped(*problem)
                known = (idx, rates)
                if memo is not None and key is not None and GROUPED_MEMO_ENTRIES:
                    if len(memo) >= GROUPED_MEMO_ENTRIES:
                        memo.clear()
                    memo[key] = known
            else:
                self._memo_hits += 1
            if memo is not None:
                self._memo_lookups += 1
                if (
                    self._memo_lookups == GROUPED_MEMO_PROBATION
                    and self._memo_hits < GROUPED_MEMO_MIN_HIT_RATE * self._memo_lookups
                ):
                    self._grouped_memo = None
            self._class_rate[known[0]] = known[1]
        elif self._share_sigma == 0 and len(live) < REFILL_MAX_CLASSES:
            # Only classes whose rate the solver recomputed are returned; the others keep theirs.
            changed: set[int] = set()
            for cls in dirty:
                changed.update(self._class_paths[cls])
            rates = self._refill.solve(
                self._members,
                self._n_on_link,
                self._class_paths,
                self._class_count,
                changed,
                uniform_bound=self._stream_max_Bps,
            )
            idx = np.fromiter(rates.keys(), dtype=np.int_, count=len(rates))
            self._class_rate[idx] = np.fromiter(rates.values(), dtype=np.float64, count=len(rates))
        else:
            # From scratch, by weighted max-min: class c's flows each get weight_c times the
            # fill level (every weight is 1 without a share spread; the incremental solver knows
            # equal shares only).
            self._refill.forget()
            idx = np.fromiter(live, dtype=np.int_, count=len(live))
            weight = self._class_weight[idx]
            counts = np.array([self._class_count[c] for c in live], dtype=np.float64)
            bound = np.full(idx.size, self._stream_max_Bps) / weight
            level = solve_rounds(self._cap_ext, self._class_links[idx], bound, counts * weight)
            self._class_rate[idx] = level * weight
        self._rate[:n] = self._class_rate[self._flow_class[:n]]

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
        n_classes = len(self._class_paths)
        sent = self._size[:n] - self._remaining[:n]
        class_sent = np.bincount(self._flow_class[:n], weights=sent, minlength=n_classes)
        in_flight = np.bincount(
            self._class_links[:n_classes].ravel(),
            weights=(class_sent[:, None] * self._class_link_weight[:n_classes]).ravel(),
            minlength=self._n_links + 1,
        )[: self._n_links]
        group_sent = self._group_bytes.copy()
        if group_sent.size:
            groups = self._class_group[:n_classes]
            for g in range(group_sent.size):
                group_sent[g] += class_sent[groups == g].sum()
        carried = np.array(self._done_bytes) + in_flight + group_sent @ self._group_mask
        busy = np.array(self._busy_acc_s)
        for link, k in enumerate(self._n_on_link):
            if k:
                busy[link] += now - self._busy_since_s[link]
        return carried, busy


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


def check_share_sigma(share_sigma: float) -> None:
    """Reject a negative or non-finite spread of TCP share weights."""
    if not (share_sigma >= 0 and math.isfinite(share_sigma)):
        raise ValueError(f"share_sigma must be non-negative and finite, got {share_sigma}")


def check_transfer(topology: Topology, src: int, dst: int, nbytes: float) -> None:
    """Reject a transfer naming an unknown host or a negative or non-finite size."""
    topology.check_host(src)
    topology.check_host(dst)
    if not (nbytes >= 0 and math.isfinite(nbytes)):
        raise ValueError(f"nbytes must be non-negative and finite, got {nbytes}")
