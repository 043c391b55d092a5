"""TensorFlow's end-of-step barrier: how tf_cnn_benchmarks' parameter servers stay in step.

With ``variable_update=parameter_server`` (tensorflow/benchmarks fd87986,
scripts/tf_cnn_benchmarks) a worker applies its own gradients to the PS variables as they come
(``VariableMgr.append_apply_gradients_ops``: ``opt.apply_gradients``), so a server never waits
for the other workers' gradient of a variable, and the workers meet once per step instead
(``add_sync_queues_and_barrier('sync_queues_step_end_', ...)``): each worker, its applies done,
enqueues a token in every worker's queue on one PS task and dequeues W - 1 tokens from its own.
Only then does the next step start and read every variable anew. MXNet's ``dist_sync`` (and TF's
``distributed_replicated``, a barrier per variable) answers a key's pulls as soon as that key is
merged instead (``kvstore.sync: key``, simscale.comm.ps.server).

The model (``kvstore.sync: step``): a worker whose pushes of an iteration are all acknowledged
sends its W tokens to the barrier's server (W messages on its send thread, one request each on
the server's handler thread); once every worker's tokens are in, the server answers each
worker's dequeue, and each worker then asks for every key's new weights, in key order. On the
symmetric path (simscale.model.symmetry) the one representative's tokens and reads stand for all W
workers', and the barrier opens once its own tokens are in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import simpy

from simscale.comm.ps.server import HEADER_BYTES, ServerGroup
from simscale.des.serial import SerialQueue
from simscale.network.stream import Stream

Pull = Callable[[float], None]  # sends one key slice's pull; its argument: seconds waited


def barrier_server(num_servers: int) -> int:
    """The PS task holding the step-end sync queues: tf_cnn_benchmarks puts the n-th barrier's
    queues on task ``n % servers``, and the step-end barrier is its first (n = 1)."""
    return 1 % num_servers


@dataclass
class _Round:
    """One iteration's barrier: who has arrived, and each worker's pulls held until release."""

    acked: dict[int, int] = field(default_factory=dict)  # worker -> pushes acknowledged
    tokens_in: int = 0  # workers whose tokens the server has handled
    arrived_s: dict[int, float] = field(default_factory=dict)
    held: dict[int, list[tuple[int, Pull]]] = field(default_factory=dict)


class StepBarrier:
    """The step-end barrier of every worker of one job."""

    def __init__(
        self,
        env: simpy.Environment,
        servers: ServerGroup,
        server: int,
        num_workers: int,
        job_workers: int,
        pushes_per_iteration: int,
        to_server: Callable[[int, int], Stream],
        vans: Callable[[int], SerialQueue],
        message_overhead_s: float,
    ) -> None:
        self.env = env
        self.servers = servers
        self.server = server
        self.num_workers = num_workers  # simulated: all of them, or one representative
        # The job's workers: each enqueues a token for every one of them (on the symmetric path
        # a representative's messages stand for its copies' on the server, simscale.comm.ps.server).
        self.job_workers = job_workers
        self.pushes_per_iteration = pushes_per_iteration
        self.to_server = to_server  # (worker, server) -> the worker's connection to it
        self.vans = vans  # worker -> its send thread
        self.msg_s = message_overhead_s
        self.rounds: dict[int, _Round] = {}

    def acked(self, it: int, worker: int, key: int, pull: Pull) -> None:
        """One of ``worker``'s pushes of iteration ``it`` (of key ``key``) is acknowledged;
        ``pull`` asks for that slice's new weights once the barrier lets the worker go."""
        r = self.rounds.setdefault(it, _Round())
        r.held.setdefault(worker, []).append((key, pull))
        r.acked[worker] = r.acked.get(worker, 0) + 1
        if r.acked[worker] == self.pushes_per_iteration:
            self._arrive(it, r, worker)

    def _arrive(self, it: int, r: _Round, worker: int) -> None:
        """The worker enqueues a token in each of the W queues: W requests to one server."""
        r.arrived_s[worker] = self.env.now
        w = self.job_workers
        sent = self.vans(worker).run(w * self.msg_s)
        stream = self.to_server(worker, self.server)

        def handle() -> None:
            done = self.servers.handle_requests(self.server, w)
            done.callbacks.append(lambda _e: self._token_handled(it, r))

        sent.callbacks.append(lambda _e: stream.send(w * HEADER_BYTES, handle))

    def _token_handled(self, it: int, r: _Round) -> None:
        r.tokens_in += 1
        if r.tokens_in < self.num_workers:
            return
        del self.rounds[it]
        for worker in sorted(r.held):
            self.servers.reply(self.server, worker, lambda worker=worker: self._release(r, worker))

    def _release(self, r: _Round, worker: int) -> None:
        """The worker's dequeue returned: the next step reads every variable, in key order."""
        waited = self.env.now - r.arrived_s[worker]
        for _key, pull in sorted(r.held[worker], key=lambda kp: kp[0]):
            pull(waited)
