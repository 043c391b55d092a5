"""The connection table of a parameter-server job: one stream per worker-server pair and way.

ps-lite's van keeps one TCP connection per pair of processes (simscale.network.stream): a
worker's pushes and pull requests to a server leave on one, the server's acks and replies come
back on another, each in order. Streams are made on first use, so a job of many workers and
servers holds only the pairs that talk.

realrun's shape (``kvstore.pull_request: with_push``) differs in two ways that move timings: its
server acknowledges each push without waiting for the other workers, on its one connection back
to that worker, behind any pull reply already in it (realrun/ps/kv_server.py), which is what
credits the worker's byte window; and it answers on its ROUTER socket in handling order, with no
priority queue or byte window on replies (realrun/ps/postoffice.py ``_serve`` -> ``van.reply``),
unlike a worker's requests. The ack is one of the handler's answers to the push, so it leaves
only once the server's one thread has handled that push: merged it and, if it completed the
round, applied the update (``_push`` returns ``[ack, *pull replies]``). The credit of a push
that has arrived therefore waits here (``credit``) until the server's handler sends it
(simscale.comm.ps.server), not one latency after the arrival.

Where the costs carry a real PS's stack delay (simscale.comm.ps.stack_delay), every connection
draws its messages' delays from it, both ways.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import simpy

from simscale.comm.ps.stack_delay import StackDelay
from simscale.network import Network, Topology
from simscale.network.stream import Stream
from simscale.spec.costs import CostModel
from simscale.spec.scenario import DIST_MODES, Scenario


class Connections:
    """Every worker's connection to every server and back, made when first asked for."""

    def __init__(
        self,
        env: simpy.Environment,
        net: Network,
        topology: Topology,
        worker_hosts: tuple[int, ...],
        server_hosts: tuple[int, ...],
        *,
        latency_factor: float = 1.0,
        priority: bool = False,
        window_bytes: float = 0.0,
        ack_on_receipt: bool = False,
        stack_delay: StackDelay | None = None,
    ) -> None:
        self.env = env
        self.net = net
        self.topology = topology
        self.worker_hosts = worker_hosts
        self.server_hosts = server_hosts
        self.latency_factor = latency_factor
        self.priority = priority  # kvstore.scheduling: priority (simscale.network.stream)
        self.window_bytes = window_bytes
        self.ack_on_receipt = ack_on_receipt  # realrun's server (module doc)
        self.stack_delay = stack_delay
        self._streams: dict[tuple[str, int, int], Stream] = {}
        # Per (worker, server): the byte-window credits of pushes that have arrived and whose
        # ack the server's handler has not sent yet, oldest first (the handler takes a
        # worker's pushes to it in arrival order).
        self._credits: dict[tuple[int, int], deque[Callable[[], None]]] = {}

    def to_server(self, worker: int, server: int) -> Stream:
        """Worker ``worker``'s connection to server ``server``."""
        stream = self._streams.get(("w2s", worker, server))
        if stream is None:
            stream = self._open(self.worker_hosts[worker], self.server_hosts[server], True)
            if self.ack_on_receipt:
                # The server's handler acknowledges each push once it has handled it, on its
                # connection back (``credit``).
                stream.ack = self._credits.setdefault((worker, server), deque()).append
            self._streams[("w2s", worker, server)] = stream
        return stream

    def to_worker(self, server: int, worker: int) -> Stream:
        """Server ``server``'s connection back to worker ``worker``."""
        stream = self._streams.get(("s2w", worker, server))
        if stream is None:
            src, dst = self.server_hosts[server], self.worker_hosts[worker]
            stream = self._open(src, dst, scheduled=not self.ack_on_receipt)
            self._streams[("s2w", worker, server)] = stream
        return stream

    def credit(self, server: int, worker: int) -> Callable[[], None]:
        """What the ack of ``worker``'s oldest unacknowledged push to ``server`` credits back
        when it reaches the worker (nothing where no byte window waits for acks)."""
        pending = self._credits.get((worker, server))
        return pending.popleft() if pending else _nothing

    def _open(self, src_host: int, dst_host: int, scheduled: bool) -> Stream:
        """A stream; ``scheduled`` False: in order, with no priority queue or byte window
        whatever ``priority`` says."""
        latency_s = self.topology.path_latency_s(src_host, dst_host) * self.latency_factor
        return Stream(
            self.env,
            self.net,
            src_host,
            dst_host,
            latency_s,
            priority=scheduled and self.priority,
            window_bytes=self.window_bytes,
            receive_delay=None if self.stack_delay is None else self.stack_delay.for_connection(),
        )


def _nothing() -> None:
    pass


def ps_connection_Bps(scenario: Scenario, costs: CostModel) -> float | None:
    """The ceiling of one parameter-server connection, bytes/s (None: none). Each worker and
    server pair talks over one TCP connection (ps-lite's ZMQ van, TensorFlow's gRPC channel),
    which cannot go faster than ``costs.connection_gbps``: BytePS's best practice runs two
    server instances per machine on 25 Gbit/s, three on 40/50, because "a single TCP
    connection usually cannot run up to 25Gbps". An all-reduce ring applies the same ceiling
    per ring connection itself (simscale.comm.allreduce), and none over RDMA."""
    gbps = costs.connection_gbps
    if scenario.kvstore.mode not in DIST_MODES or gbps <= 0:
        return None
    return gbps * 1e9 / 8
