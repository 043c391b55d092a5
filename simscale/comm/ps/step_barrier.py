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

Two halves, as in the job: ``StepBarrier`` is the sync queues on their PS task (it counts the
tokens handled and answers the dequeues), ``StepBarrierClient`` a worker's side (it counts its
acknowledged pushes, holds its pulls, and sends its tokens on its own send thread and
connection, simscale.comm.ps.client).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import simpy

from simscale.comm.ps.connections import Connections
from simscale.comm.ps.server import HEADER_BYTES, ServerGroup
from simscale.des.serial import SerialQueue

Pull = Callable[[float], None]  # sends one key slice's pull; its argument: seconds waited


def barrier_server(num_servers: int) -> int:
    """The PS task holding the step-end sync queues: tf_cnn_benchmarks puts the n-th barrier's
    queues on task ``n % servers``, and the step-end barrier is its first (n = 1)."""
    return 1 % num_servers


@dataclass
class _Round:
    """One iteration's barrier on its server: tokens handled, and whom to answer."""

    tokens_in: int = 0  # workers whose tokens the server has handled
    dequeues: dict[int, Callable[[], None]] = field(default_factory=dict)  # worker -> release


class StepBarrier:
    """The step-end sync queues of one job, on PS task ``server`` of ``servers``."""

    def __init__(
        self,
        env: simpy.Environment,
        servers: ServerGroup,
        server: int,
        num_workers: int,
        job_workers: int,
    ) -> None:
        self.env = env
        self.servers = servers
        self.server = server
        self.num_workers = num_workers  # simulated: all of them, or one representative
        # The job's workers: each enqueues a token for every one of them (on the symmetric path
        # a representative's messages stand for its copies' on the server, simscale.comm.ps.server).
        self.job_workers = job_workers
        self.rounds: dict[int, _Round] = {}

    def tokens(self, it: int, worker: int, release: Callable[[], None]) -> None:
        """``worker``'s W tokens of iteration ``it`` have reached the server: one request each
        on its handler thread. ``release()`` runs when the answer to its dequeue arrives."""
        r = self.rounds.setdefault(it, _Round())
        r.dequeues[worker] = release
        done = self.servers.handle_requests(self.server, self.job_workers)
        done.callbacks.append(lambda _e: self._token_handled(it, r))

    def _token_handled(self, it: int, r: _Round) -> None:
        r.tokens_in += 1
        if r.tokens_in < self.num_workers:
            return
        del self.rounds[it]
        for worker in sorted(r.dequeues):
            self.servers.reply(self.server, worker, r.dequeues[worker])


@dataclass
class _Held:
    """A worker's pushes of one iteration acknowledged so far, and their pulls held."""

    acked: int = 0
    pulls: list[tuple[int, Pull]] = field(default_factory=list)  # (key, pull) in ack order
    arrived_s: float = 0.0


class StepBarrierClient:
    """Worker ``worker``'s side of ``barrier``: its tokens leave on its send thread ``van``
    over its connection to the barrier's server, once all ``pushes_per_iteration`` of its
    pushes of an iteration are acknowledged."""

    def __init__(
        self,
        env: simpy.Environment,
        barrier: StepBarrier,
        worker: int,
        van: SerialQueue,
        connections: Connections,
        pushes_per_iteration: int,
        message_overhead_s: float,
    ) -> None:
        self.env = env
        self.barrier = barrier
        self.worker = worker
        self.van = van
        self.connections = connections
        self.pushes_per_iteration = pushes_per_iteration
        self.msg_s = message_overhead_s
        self.rounds: dict[int, _Held] = {}

    def acked(self, it: int, key: int, pull: Pull) -> None:
        """One of the worker's pushes of iteration ``it`` (of key ``key``) is acknowledged;
        ``pull`` asks for that slice's new weights once the barrier lets the worker go."""
        held = self.rounds.setdefault(it, _Held())
        held.pulls.append((key, pull))
        held.acked += 1
        if held.acked == self.pushes_per_iteration:
            self._arrive(it, held)

    def _arrive(self, it: int, held: _Held) -> None:
        """The worker enqueues a token in each of the W queues: W requests to one server."""
        held.arrived_s = self.env.now
        w = self.barrier.job_workers
        sent = self.van.run(w * self.msg_s)
        stream = self.connections.to_server(self.worker, self.barrier.server)

        def arrived() -> None:
            self.barrier.tokens(it, self.worker, lambda: self._release(it))

        sent.callbacks.append(lambda _e: stream.send(w * HEADER_BYTES, arrived))

    def _release(self, it: int) -> None:
        """The worker's dequeue returned: the next step reads every variable, in key order."""
        held = self.rounds.pop(it)
        waited = self.env.now - held.arrived_s
        for _key, pull in sorted(held.pulls, key=lambda kp: kp[0]):
            pull(waited)
