"""The worker side of the parameter-server protocol: push, pull and pushpull of a key's slices.

The named operations mirror realrun's KVWorker (realrun/ps/kv_worker.py) and MXNet's
KVStoreDist, one key slice at a time:

- ``push``: the worker's send thread (its van) spends a message's overhead, then the slice's
  gradient (2-bit compressed where asked, plus a header) leaves on the connection to its server;
  the server acknowledges it (simscale.comm.ps.server).
- ``pull``: after a turn of the van, a pull request follows on the same connection; the server
  answers it with the slice's new weights once its update is done.
- ``pushpull``: realrun's pushpull posts the pull request together with its push: it enters the
  connection right behind the push, ahead of any later key's push, and its send costs the van a
  turn that nothing waits for.

How a key goes round (``communicate``, the worker's one hook, simscale.comm.communicator): the
host's GPUs' gradients are summed on its copy engine, every slice is pushed, and the key's
slices are pulled once every one of its pushes is acknowledged (MXNet: the pull of a key depends
on its push, whose callback ps-lite fires when every server has answered), or each with its push
(``pull_request: with_push``), or once every push of the iteration is acknowledged (TensorFlow's
step barrier, simscale.comm.ps.step_barrier). When the last slice's weights are
back, the copy engine broadcasts them to the GPUs and the worker is told.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import simpy

from simscale.comm.communicator import Done
from simscale.comm.ps.connections import Connections
from simscale.comm.ps.server import HEADER_BYTES, ServerGroup
from simscale.comm.ps.step_barrier import StepBarrier, StepBarrierClient
from simscale.des.serial import CorePool, SerialQueue
from simscale.des.utilization import Utilization
from simscale.model.symmetry import TWO_BIT_RATIO
from simscale.model.worker import HostCopies
from simscale.spec.costs import CostModel
from simscale.spec.scenario import Scenario
from simscale.spec.sharding import place_keys
from simscale.zoo import BYTES_PER_ELEMENT, ModelSpec

# Per key: (server, bytes) of each of its slices (simscale.spec.sharding.place_keys).
Slices = tuple[tuple[tuple[int, float], ...], ...]
# Trace hook: (worker, iteration, key, phase, time) when a key's phase begins on one slice
# (simscale.report.trace.KeyPhases.mark).
Mark = Callable[[int, int, int, str, float], None]


def last_array_first(layer_keys: list[list[int]]) -> list[list[int]]:
    """Each layer's keys in the order realrun's worker hands them to its KV client: last one
    first, the bias before the weight (realrun/training/emulated_compute.py). Behind a byte
    window the order decides whether a layer's big weight leaves alone or waits while small
    keys pass it (simscale.network.stream): with the weight first, an MLP at 50 Mbit/s ran push
    and pull one after the other, 0.718 s an iteration where realrun took 0.584 s (0.631 s last
    first)."""
    return [keys[::-1] for keys in layer_keys]


@dataclass(frozen=True)
class PSProtocol:
    """What every worker of one job sends to the servers, and how."""

    slices: Slices
    key_bytes: tuple[float, ...]  # each key's whole gradient, bytes
    message_overhead_s: float  # the sender's software cost of one message
    compress_2bit: bool = False  # pushes carry 2-bit gradients (pulls stay full size)
    pull_with_push: bool = False  # realrun's pushpull instead of MXNet's pull after ack

    @classmethod
    def for_scenario(
        cls, scenario: Scenario, model: ModelSpec, num_servers: int, costs: CostModel
    ) -> PSProtocol:
        """Each key cut into server slices as MXNet places them (simscale.spec.sharding), and
        the scenario's compression and pull discipline."""
        kv = scenario.kvstore
        bpe = BYTES_PER_ELEMENT[scenario.training.gradient_precision]
        elements = [a.elements for a in model.arrays]
        placed = place_keys(elements, num_servers, kv.bigarray_bound, kv.key_placement)
        return cls(
            slices=tuple(tuple((sl.server, sl.elements * bpe) for sl in key) for key in placed),
            key_bytes=tuple(n * bpe for n in elements),
            message_overhead_s=costs.message_overhead_us * 1e-6,
            compress_2bit=kv.gradient_compression.type == "2bit",
            pull_with_push=kv.pull_request == "with_push",
        )

    @property
    def pushes_per_iteration(self) -> int:
        return sum(len(key) for key in self.slices)


class _KeyRound:
    """One key's round trip in one iteration: slices still out, pushes not yet acknowledged,
    the longest wait for others."""

    __slots__ = ("done", "it", "key", "left", "others", "unacked")

    def __init__(self, it: int, key: int, slices: int, done: Done) -> None:
        self.it = it
        self.key = key
        self.left = slices
        self.unacked = slices
        self.others = 0.0
        self.done = done

    def waited(self, waited_for_others_s: float) -> None:
        self.others = max(self.others, waited_for_others_s)


class PSClient:
    """One worker's KV client: its send thread and its connections to every server."""

    def __init__(
        self,
        env: simpy.Environment,
        rank: int,
        protocol: PSProtocol,
        servers: ServerGroup,
        connections: Connections,
        copies: HostCopies,
        *,
        cores: CorePool | None = None,
        barrier: StepBarrier | None = None,
        mark: Mark | None = None,
    ) -> None:
        self.env = env
        self.rank = rank
        self.protocol = protocol
        self.servers = servers
        self.connections = connections
        self.copies = copies
        self.mark = mark  # per-key phases for the trace (None: not traced)
        self.msg_s = protocol.message_overhead_s
        self.van = SerialQueue(env, f"worker{rank}.van", cores)  # the worker's send thread
        self.barrier = (
            None
            if barrier is None
            else StepBarrierClient(
                env, barrier, rank, self.van, connections, protocol.pushes_per_iteration, self.msg_s
            )
        )

    # ---- the worker's hook ----

    def communicate(self, iteration: int, key: int, done: Done) -> None:
        """Sum the key over the host's GPUs, push its slices, pull them back, broadcast."""
        copies = self.copies
        summed = copies.queue.run(copies.reduce_s(self.protocol.key_bytes[key]))
        summed.callbacks.append(lambda _e: self._send_key(iteration, key, done))

    def _send_key(self, it: int, key: int, done: Done) -> None:
        if self.mark is not None:
            self.mark(self.rank, it, key, "push", self.env.now)
        parts = self.protocol.slices[key]
        r = _KeyRound(it, key, len(parts), done)
        for server, nbytes in parts:
            if self.protocol.pull_with_push:
                self.pushpull(r, server, nbytes)
            else:
                self.push(r, server, nbytes)

    # ---- the KV operations, one slice each ----

    def push(self, r: _KeyRound, server: int, nbytes: float) -> simpy.Event:
        """Send this worker's gradient slice of ``nbytes`` to ``server``; the returned event
        fires when the van has handed it to the connection."""
        stream = self.connections.to_server(self.rank, server)
        wire = (nbytes * TWO_BIT_RATIO if self.protocol.compress_2bit else nbytes) + HEADER_BYTES
        sent = self.van.run(self.msg_s)

        def arrived() -> None:
            if self.mark is not None:
                self.mark(self.rank, r.it, r.key, "update", self.env.now)
            self.servers.push(
                r.it, r.key, server, nbytes, self.rank, lambda w: self._acked(r, server, nbytes, w)
            )

        sent.callbacks.append(lambda _e: stream.send(wire, arrived, r.key))
        servers = self.servers
        if servers.pipelined:  # the pushes it stands for arrive from here on
            sent.callbacks.append(lambda _e: servers.push_sent(server, nbytes))
        return sent

    def pull(self, r: _KeyRound, server: int, nbytes: float) -> None:
        """Ask ``server`` for the slice's new weights after a turn of the van."""
        self.van.run(self.msg_s).callbacks.append(lambda _e: self._request(r, server, nbytes))

    def pushpull(self, r: _KeyRound, server: int, nbytes: float) -> None:
        """Push the slice and post its pull request right behind it (realrun's pushpull)."""
        sent = self.push(r, server, nbytes)
        sent.callbacks.append(lambda _e: self.van.occupy(self.msg_s))
        sent.callbacks.append(lambda _e: self._request(r, server, nbytes))

    # ---- what happens on the way back ----

    def _acked(self, r: _KeyRound, server: int, nbytes: float, waited: float) -> None:
        """A push's ack reached the worker. MXNet's pull of a key depends on its push, and
        ps-lite calls the push done once every server holding a slice has answered: the key's
        pull requests follow its last ack (kvstore_dist.h, ZPush's callback; realrun's
        KVWorker does the same). Behind a step barrier it waits for every worker's every push
        instead; with pushpull it is already on its way."""
        if self.barrier is not None:
            self.barrier.acked(r.it, r.key, lambda w: self._pull_after(r, server, nbytes, w))
        elif self.protocol.pull_with_push:
            r.waited(waited)
        else:
            r.waited(waited)
            r.unacked -= 1
            if r.unacked == 0:
                for s, n in self.protocol.slices[r.key]:
                    self.pull(r, s, n)

    def _pull_after(self, r: _KeyRound, server: int, nbytes: float, waited: float) -> None:
        r.waited(waited)
        self.pull(r, server, nbytes)

    def _request(self, r: _KeyRound, server: int, nbytes: float) -> None:
        """The pull request leaves on the connection; the server answers on arrival."""
        stream = self.connections.to_server(self.rank, server)
        rank = self.rank

        def at_server() -> None:
            self.servers.pull(r.it, r.key, server, nbytes, rank, lambda w: self._slice_back(r, w))

        stream.send(0, at_server, r.key)

    def _slice_back(self, r: _KeyRound, waited: float) -> None:
        """One slice's weights are back; after the last, broadcast the key to the GPUs."""
        if self.mark is not None:
            self.mark(self.rank, r.it, r.key, "broadcast", self.env.now)
        r.waited(waited)
        r.left -= 1
        if r.left == 0:
            copies = self.copies
            back = copies.queue.run(copies.broadcast_s(self.protocol.key_bytes[r.key]))
            back.callbacks.append(lambda _e: r.done(r.others))

    # ---- measurement ----

    def reset_counters(self) -> None:
        self.van.reset()

    def utilization(self, t0: float, t1: float) -> list[Utilization]:
        """Nothing reported: the send thread's busy time is counted, not yet shown."""
        return []
