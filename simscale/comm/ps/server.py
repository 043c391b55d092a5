"""The parameter servers and the push/pull protocol of one key slice, as MXNet runs it.

Protocol (MXNet src/kvstore/kvstore_dist_server.h, DataHandleDefault): a worker pushes a slice;
in sync mode the server merges pushes into a buffer and, once all W workers have pushed, applies
the optimizer update and only then acknowledges every waiting push; the worker's pull of the key
depends on its push (engine dependency), so it sends a pull request after the ack and the server
answers it with the new weights. In async mode the server updates on every push and acknowledges
at once. With ``pull_request: with_push`` (realrun's pushpull, BytePS) the pull request follows
the push on the same connection at once and the server parks it until the round's update is
done, which takes the ack's and the pull request's trips off the critical path.

With ``rpc: grpc`` (TensorFlow's parameter servers) every tensor also passes through gRPC's copies
on its way in and on its way out of a server process (costs.grpc_ns_per_byte), on two paths of
their own: a received gradient is copied before its merge, a weight reply before it is sent. They
cap a PS process at a few hundred MB/s each way whatever its NIC; more PS processes raise the
total. Each path is shared by the RPCs in progress on it (simscale.des.sharing), as gRPC serves
concurrent calls on their own streams: a small variable's reply is not queued behind a large
one's whole copy.

Every message costs its sender a software overhead on its one sending thread and then travels on
the connection between the two processes (simscale.network.stream: in order, one message at a
time), so acks queue behind pull responses already sent to the same worker.

On the symmetric path (simscale.model.symmetry) one push stands for W identical ones. In a
sync round those W do not reach the server at one instant: they come through its host's NIC one
after another, and its handler merges each as it comes (``push_sent``), so that once the
representative's own push is in, only its own merge is left before the update.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import simpy

from simscale.des.serial import CorePool, SerialQueue
from simscale.des.sharing import SharedQueue
from simscale.des.utilization import Utilization, busy_fraction
from simscale.network.stream import Stream
from simscale.spec.costs import CostModel

HEADER_BYTES = 64  # ps-lite meta header of a data message, order of magnitude


@dataclass
class SliceSync:
    """Per-iteration aggregation state of one slice on its server (sync mode)."""

    pushed: int = 0
    first_arrival_s: float = 0.0
    last_arrival_s: float = 0.0
    waiting: list[Callable[[], None]] = field(default_factory=list)  # deferred acks (MXNet)
    arrivals: dict[int, float] = field(default_factory=dict)  # worker -> its push's arrival
    updated: bool = False
    parked: list[Callable[[], None]] = field(default_factory=list)  # pulls awaiting the update
    served: int = 0


def _nothing() -> None:
    pass


def _no_credit(_server: int, _worker: int) -> Callable[[], None]:
    return _nothing


class ServerGroup:
    """All server processes: their handler threads and the per-slice aggregation state."""

    def __init__(
        self,
        env: simpy.Environment,
        to_worker: Callable[[int, int], Stream],
        costs: CostModel,
        server_hosts: tuple[int, ...],
        num_workers: int,
        sync: bool,
        pull_with_push: bool = False,
        cores: CorePool | None = None,
        on_updated: Callable[[int, int, int | None, float], None] | None = None,
        copies: int = 1,
        grpc: bool = False,
        report_hosts: tuple[int, ...] | None = None,
        credit: Callable[[int, int], Callable[[], None]] | None = None,
    ) -> None:
        self.env = env
        # (server, worker) -> what the ack of that worker's oldest unacknowledged push credits
        # back to its byte window on arrival (simscale.comm.ps.connections ``credit``).
        self.credit = credit if credit is not None else _no_credit
        # Trace hook: (iteration, key, worker or None for all, time) when a slice is updated.
        self.on_updated = on_updated
        self.to_worker = to_worker  # (server, worker) -> the server's connection to that worker
        self.costs = costs
        self.hosts = server_hosts
        # The hosts named in reports: the real cluster's, where a symmetry-reduced layout
        # renumbers them (simscale.model.symmetry).
        self.report_hosts = server_hosts if report_hosts is None else report_hosts
        self.num_workers = num_workers
        self.sync = sync
        self.pull_with_push = pull_with_push
        # Each message stands for this many identical ones from identical workers
        # (simscale.model.symmetry): the handler thread spends that many times the per-message
        # cost on it, the sender's own ack or reply in the middle turn and its push merged last. 1
        # in the exact model.
        self.copies = copies
        # Sync rounds of a representative's pushes: the other W - 1 copies are received and
        # merged as they arrive (push_sent), the representative's own when it arrives.
        self.pipelined = sync and copies > 1
        self.threads = [SerialQueue(env, f"server{s}", cores) for s in range(len(server_hosts))]
        self.state: dict[tuple[int, int, int], SliceSync] = {}
        self.msg_s = costs.message_overhead_us * 1e-6
        self.request_s = costs.server_request_us * 1e-6
        self.merge_s_per_byte = costs.server_merge_ns_per_byte * 1e-9
        self.update_s_per_byte = costs.server_update_ns_per_byte * 1e-9
        self.rpc_s_per_byte = costs.grpc_ns_per_byte * 1e-9
        # gRPC's receive and send copies per server process (empty unless kvstore.rpc is grpc),
        # each shared by the RPCs in progress on it.
        n = len(server_hosts) if grpc else 0
        self.rpc_in = [SharedQueue(env, f"server{s}.grpc-in") for s in range(n)]
        self.rpc_out = [SharedQueue(env, f"server{s}.grpc-out") for s in range(n)]

    def reset_counters(self) -> None:
        for q in self.threads + self.rpc_in + self.rpc_out:
            q.reset()

    def utilization(self, t0: float, t1: float) -> list[Utilization]:
        """Every server's handler thread, then its gRPC copies in and out (where it has them)."""
        hosts = self.report_hosts
        out = []
        for sv, q in enumerate(self.threads):
            what = f"server {sv} handler thread (host {hosts[sv]})"
            out.append(busy_fraction(q, t0, t1, "server", what, resource=f"server{sv}.cpu"))
        for sv, (qi, qo) in enumerate(zip(self.rpc_in, self.rpc_out, strict=True)):
            for q, way in ((qi, "in"), (qo, "out")):
                what = f"server {sv} gRPC copies {way} (host {hosts[sv]})"
                out.append(busy_fraction(q, t0, t1, "server", what))
        return out

    def push(
        self,
        it: int,
        key: int,
        server: int,
        nbytes: float,
        worker: int,
        on_ack: Callable[[float], None],
    ) -> None:
        """A push of ``nbytes`` of gradient from ``worker`` has arrived at ``server``;
        ``on_ack(wait_for_others_s)`` is called when the ack reaches the worker."""
        if self.rpc_in:  # gRPC copies the gradient in before the handler sees it
            copies = 1 if self.pipelined else self.copies
            copied = self.rpc_in[server].run(copies * nbytes * self.rpc_s_per_byte)
            copied.callbacks.append(
                lambda _e: self._handle_push(it, key, server, nbytes, worker, on_ack)
            )
        else:
            self._handle_push(it, key, server, nbytes, worker, on_ack)

    def _handle_push(self, *push: Any) -> None:
        """The handler thread's part of ``push`` (same arguments)."""
        it, key, server, nbytes, worker, on_ack = push
        thread = self.threads[server]
        if not self.sync:
            cost = self.copies * (self.request_s + nbytes * self.update_s_per_byte)
            upd = thread.run(cost)
            upd.callbacks.append(
                lambda _e: self._ack_push(server, worker, lambda: on_ack(0.0), key)
            )
            if self.on_updated is not None:
                upd.callbacks.append(lambda _e: self.on_updated(it, key, worker, self.env.now))
            return
        st = self.state.get((it, key, server))
        now = self.env.now
        if st is None:
            st = self.state[(it, key, server)] = SliceSync(first_arrival_s=now)
        st.last_arrival_s = now
        st.arrivals[worker] = now
        arrived = now
        if not self.pull_with_push:
            st.waiting.append(
                lambda: self._ack(server, worker, lambda: on_ack(st.last_arrival_s - arrived), key)
            )
        own = 1 if self.pipelined else self.copies  # the others merged as they came (push_sent)
        done = thread.run(own * (self.request_s + nbytes * self.merge_s_per_byte))

        def merged(_e: simpy.Event) -> None:
            st.pushed += 1
            if st.pushed == self.num_workers:
                if not self.pull_with_push:
                    del self.state[(it, key, server)]
                # The update, then the acks (MXNet) or the parked pulls, on the handler thread.
                upd = thread.run(nbytes * self.update_s_per_byte)
                upd.callbacks.append(lambda _e: self._updated(st))
                if self.on_updated is not None:
                    upd.callbacks.append(lambda _e: self.on_updated(it, key, None, self.env.now))
            if self.pull_with_push:
                # The push is acknowledged without waiting for the other workers, but as the
                # first of the handler's answers to it (realrun/ps/kv_server.py ``_push``):
                # after its merge and the update it may complete, ahead of the pull replies
                # that update releases. Nothing waits on it but the worker's byte window.
                self._ack_push(server, worker, _nothing, key)

        done.callbacks.append(merged)

    def push_sent(self, server: int, nbytes: float) -> None:
        """The representative's push of ``nbytes`` to ``server`` has left its worker. On the
        symmetric path the W - 1 identical pushes it stands for reach the server one after
        another through its host's NIC, and the server receives and merges each as it comes:
        their work is queued from now on, ahead of the representative's own. Back to back after
        the representative's arrival, as one copy standing for W, they were a burst the exact
        model never has: symmetric against exact (forced, real-v1 costs, ResNet-18 on 16, 24,
        32 p3.16xlarge hosts with a server per host) -6.1%, -4.1%, -5.2% before, -2.2%, +2.0%,
        +0.2% with it. Queued a latency and one copy's transfer later instead (the earliest a
        copy arrives), the same shapes moved by at most 0.03%, for an extra event per push."""
        if not self.pipelined:
            return
        others = self.copies - 1
        merge_s = others * (self.request_s + nbytes * self.merge_s_per_byte)
        if self.rpc_in:
            copied = self.rpc_in[server].run(others * nbytes * self.rpc_s_per_byte)
            copied.callbacks.append(lambda _e: self.threads[server].occupy(merge_s))
        else:
            self.threads[server].occupy(merge_s)

    @staticmethod
    def _updated(st: SliceSync) -> None:
        st.updated = True
        for release in st.waiting + st.parked:
            release()
        st.parked.clear()

    def handle_requests(self, server: int, count: int) -> simpy.Event:
        """``count`` small requests (a step barrier's tokens) on ``server``'s handler thread."""
        return self.threads[server].run(self.copies * count * self.request_s)

    def reply(self, server: int, worker: int, deliver: Callable[[], None]) -> None:
        """A small message from ``server`` to ``worker`` (``deliver`` on arrival)."""
        self._ack(server, worker, deliver)

    def _ack_push(
        self, server: int, worker: int, deliver: Callable[[], None], key: int | None = None
    ) -> None:
        """Acknowledge ``worker``'s oldest push to ``server`` not yet acknowledged; on arrival
        the ack credits the worker's byte window, then ``deliver()``. ``key``: the ack's tag
        (simscale.network.stream ``send``)."""
        credit = self.credit(server, worker)

        def arrived() -> None:
            credit()
            deliver()

        self._ack(server, worker, arrived, key)

    def _ack(
        self, server: int, worker: int, deliver: Callable[[], None], key: int | None = None
    ) -> None:
        stream = self.to_worker(server, worker)
        self._run_own_turn(server, self.msg_s).callbacks.append(
            lambda _e: stream.send(0, deliver, tag=key)
        )

    def _run_own_turn(self, server: int, cost_s: float) -> simpy.Event:
        """Queue one message's work on the server's thread, once per copy it stands for; the
        event fires at the representative's own turn, the middle one: identical workers' acks
        and replies are served in no fixed order, so on average a worker waits for half of the
        others (the exact model, tests/test_symmetry.py, agrees within 0.3% where serving it
        last was 1-2% slow on server-bound shapes)."""
        thread = self.threads[server]
        if self.copies == 1:
            return thread.run(cost_s)
        before = (self.copies - 1) // 2
        turn = thread.run((before + 1) * cost_s)
        thread.occupy((self.copies - 1 - before) * cost_s)
        return turn

    def pull(
        self,
        it: int,
        key: int,
        server: int,
        nbytes: float,
        worker: int,
        on_data: Callable[[float], None],
    ) -> None:
        """A pull request from ``worker`` has arrived; answer it with ``nbytes`` of weights.
        ``on_data(wait_for_others_s)`` is called when the weights have reached the worker."""
        stream = self.to_worker(server, worker)

        def respond(waited: float) -> None:
            def send(_e: simpy.Event) -> None:
                stream.send(nbytes + HEADER_BYTES, lambda: on_data(waited), key)

            handled = self._run_own_turn(server, self.request_s + self.msg_s)
            if self.rpc_out:
                # The identical replies a representative stands for are copied side by side.
                out = self.rpc_out[server]
                cost_s = self.copies * nbytes * self.rpc_s_per_byte
                handled.callbacks.append(lambda _e: out.run(cost_s).callbacks.append(send))
            else:
                handled.callbacks.append(send)

        if not (self.sync and self.pull_with_push):
            respond(0.0)
            return
        st = self.state.get((it, key, server))
        if st is None:  # the request overtook its push: the round has not started here yet
            st = self.state[(it, key, server)] = SliceSync(first_arrival_s=self.env.now)

        def serve() -> None:
            st.served += 1
            if st.served == self.num_workers:
                del self.state[(it, key, server)]
            respond(max(0.0, st.last_arrival_s - st.arrivals.get(worker, st.last_arrival_s)))

        if st.updated:
            serve()
        else:
            st.parked.append(serve)
