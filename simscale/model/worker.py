"""A worker host's iteration: forward waits per layer for its keys, backward pushes as it goes.

One worker process drives all GPUs of its host (MXNet's convention). Backward produces gradients
last layer first; each key is aggregated over the host's GPUs (into CPU memory over PCIe for
``dist_sync``, on the GPUs over their peer links for ``*_device``), pushed to its server slices,
pulled back, and broadcast to the GPUs; the forward of layer l in the next iteration waits only
for layer l's keys. What the worker spends blocked in forward is the exposed communication.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import simpy

from simscale.des.serial import CorePool, SerialQueue
from simscale.des.utilization import Utilization, busy_fraction
from simscale.spec.costs import CostModel
from simscale.spec.hardware import GPUSpec
from simscale.spec.scenario import Scenario
from simscale.zoo import BYTES_PER_ELEMENT


@dataclass
class WorkerStats:
    """What one worker measured, per iteration."""

    starts_s: list[float] = field(default_factory=list)
    compute_s: list[float] = field(default_factory=list)
    blocked_s: list[float] = field(default_factory=list)
    waited_for_others_s: list[float] = field(default_factory=list)
    input_wait_s: list[float] = field(default_factory=list)  # waiting for decoded images


@dataclass
class Span:
    """A timed activity for the Chrome trace: who, what, when."""

    track: str
    name: str
    start_s: float
    end_s: float
    iteration: int


class ShardedParameters(Protocol):
    """ZeRO stage 3 / FSDP full shard (simscale.comm.sharded.Zero3Member): parameters gathered
    before each pass over a layer, gradients reduce-scattered every micro-batch."""

    def gather(
        self, iteration: int, layer: int, backward: bool, micro: int = 0
    ) -> simpy.Event | None: ...

    def accumulate(self, iteration: int, micro: int, key: int) -> None: ...


@dataclass
class _Tally:
    """One iteration's seconds so far, summed in the order they happen (the golden
    predictions are compared to the byte)."""

    compute_s: float = 0.0
    blocked_s: float = 0.0
    others_s: float = 0.0  # of blocked_s, waiting for other workers


class LayerGate:
    """Per-layer readiness of one worker's keys: the forward of a layer waits on it."""

    __slots__ = ("env", "event", "pending", "waited_for_others_s")

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.pending = 0
        self.event: simpy.Event | None = None
        self.waited_for_others_s = 0.0

    def open_for(self, keys: int) -> None:
        self.pending = keys
        self.event = self.env.event()
        self.waited_for_others_s = 0.0

    def key_done(self, waited_for_others_s: float) -> None:
        self.waited_for_others_s = max(self.waited_for_others_s, waited_for_others_s)
        self.pending -= 1
        if self.pending == 0 and self.event is not None:
            self.event.succeed()


class Worker:
    """One worker host's training loop; ``communicate(it, key, done)`` is the transport hook
    (parameter server or all-reduce) that calls ``done(waited_for_others_s)`` when the key's new
    weights are back in the GPUs."""

    def __init__(
        self,
        env: simpy.Environment,
        rank: int,
        layer_keys: list[list[int]],
        fwd_s: np.ndarray,
        bwd_s: np.ndarray,
        jitter: np.ndarray,
        communicate: Callable[[int, int, Callable[[float], None]], None],
        overlap_loss: float,
        spans: list[Span] | None,
        on_start: Callable[[int], None],
        next_batch: Callable[[], simpy.Event] | None = None,
        micro_batches: int = 1,
        sharded: ShardedParameters | None = None,
        step_s: float = 0.0,
    ) -> None:
        self.env = env
        # The optimizer step each rank runs once every gradient is reduced, before the next
        # forward (DDP, ZeRO: simscale.model.optimizer_step); 0: none on the worker.
        self.step_s = step_s
        # Gradient accumulation: the micro-batches before the last run forward and backward
        # between the gated forward and the last backward, which communicates. Without
        # sharded parameters they do not communicate (DDP's no_sync); with them each runs its
        # own forward and backward, gathering and reduce-scattering as FSDP does.
        self.micro_batches = micro_batches
        # ZeRO stage 3 / FSDP: a layer's parameters gathered before its forward and its
        # backward (simscale.comm.sharded); None: weights stay whole.
        self.sharded = sharded
        self.next_batch = next_batch  # the host's input pipeline; None: synthetic data
        self.rank = rank
        self.layer_keys = layer_keys
        self.fwd_s = fwd_s
        self.bwd_s = bwd_s
        self.jitter = jitter  # per iteration: slowest GPU's compute-time factor on this host
        self.communicate = communicate
        self.overlap_loss = overlap_loss
        self.spans = spans
        self.gates = [LayerGate(env) for _ in layer_keys]
        self.stats = WorkerStats()
        self.on_start = on_start  # told when this worker starts each iteration

    def run(self, iterations: int, start_delay_s: float = 0.0) -> simpy.events.ProcessGenerator:
        env = self.env
        track = f"worker{self.rank}"
        if start_delay_s > 0:
            yield env.timeout(start_delay_s)
        for it in range(iterations):
            self.stats.starts_s.append(env.now)
            self.on_start(it)
            factor = float(self.jitter[it])
            if self.next_batch is not None:
                t0 = env.now
                yield self.next_batch()
                self.stats.input_wait_s.append(env.now - t0)
            tally = _Tally()
            yield from self._forward(it, 0, factor, tally)
            if self.micro_batches > 1 and self.sharded is None:
                dt = (self.micro_batches - 1) * float(self.fwd_s.sum() + self.bwd_s.sum()) * factor
                if self.spans is not None:
                    self.spans.append(Span(track, "accumulate", env.now, env.now + dt, it))
                yield env.timeout(dt)
                tally.compute_s += dt
            elif self.micro_batches > 1:
                for micro in range(self.micro_batches - 1):
                    yield from self._backward(it, micro, factor, tally)
                    yield from self._forward(it, micro + 1, factor, tally)
            yield from self._backward(it, self.micro_batches - 1, factor, tally)
            if self.step_s > 0:
                yield from self._step(it, factor, tally)
            self.stats.compute_s.append(tally.compute_s)
            self.stats.blocked_s.append(tally.blocked_s)
            self.stats.waited_for_others_s.append(tally.others_s)

    def _forward(
        self, it: int, micro: int, factor: float, tally: _Tally
    ) -> simpy.events.ProcessGenerator:
        """Micro-batch ``micro``'s forward, layer by layer, the first waiting for each layer's
        new weights; its seconds added to ``tally``."""
        track = f"worker{self.rank}"
        for layer, gate in enumerate(self.gates):
            if micro == 0 and gate.event is not None and not gate.event.triggered:
                t0 = self.env.now
                yield gate.event
                wait = self.env.now - t0
                tally.blocked_s += wait
                tally.others_s += min(wait, gate.waited_for_others_s)
                if self.spans is not None:
                    self.spans.append(Span(track, f"wait layer {layer}", t0, self.env.now, it))
            if self.sharded is not None:
                tally.blocked_s += yield from self._gathered(it, micro, layer, False)
            dt = self.fwd_s[layer] * factor
            if dt > 0:
                if self.spans is not None:
                    self.spans.append(
                        Span(track, f"fwd {layer}", self.env.now, self.env.now + dt, it)
                    )
                yield self.env.timeout(dt)
                tally.compute_s += dt

    def _backward(
        self, it: int, micro: int, factor: float, tally: _Tally
    ) -> simpy.events.ProcessGenerator:
        """Micro-batch ``micro``'s backward, last layer first, each layer's gradients handed on
        as they are ready: the last micro-batch's to ``communicate`` (and the gates), an
        earlier one's to the sharded parameters' reduce-scatter; its seconds added to
        ``tally``."""
        track = f"worker{self.rank}"
        last = micro == self.micro_batches - 1
        bwd_end = self.env.now + float(self.bwd_s.sum()) * factor
        for layer in range(len(self.gates) - 1, -1, -1):
            if self.sharded is not None:
                tally.blocked_s += yield from self._gathered(it, micro, layer, True)
            dt = self.bwd_s[layer] * factor
            if dt > 0:
                if self.spans is not None:
                    self.spans.append(
                        Span(track, f"bwd {layer}", self.env.now, self.env.now + dt, it)
                    )
                yield self.env.timeout(dt)
                tally.compute_s += dt
            keys = self.layer_keys[layer]
            if keys and last:
                self.gates[layer].open_for(len(keys))
                delay = self.overlap_loss * (bwd_end - self.env.now)
                for key in keys:
                    self._start(it, layer, key, delay)
            elif keys and self.sharded is not None:
                for key in keys:
                    self.sharded.accumulate(it, micro, key)

    def _step(self, it: int, factor: float, tally: _Tally) -> simpy.events.ProcessGenerator:
        """Wait for every layer's reduced gradients, then run the optimizer step."""
        track = f"worker{self.rank}"
        t0 = self.env.now
        for gate in self.gates:
            if gate.event is not None and not gate.event.triggered:
                t1 = self.env.now
                yield gate.event
                tally.others_s += min(self.env.now - t1, gate.waited_for_others_s)
        tally.blocked_s += self.env.now - t0
        if self.spans is not None and self.env.now > t0:
            self.spans.append(Span(track, "wait gradients", t0, self.env.now, it))
        dt = self.step_s * factor
        if self.spans is not None:
            self.spans.append(Span(track, "optimizer step", self.env.now, self.env.now + dt, it))
        yield self.env.timeout(dt)
        tally.compute_s += dt

    def _gathered(
        self, it: int, micro: int, layer: int, backward: bool
    ) -> simpy.events.ProcessGenerator:
        """Wait for layer ``layer``'s parameters to be gathered; the seconds waited."""
        assert self.sharded is not None
        event = self.sharded.gather(it, layer, backward, micro)
        if event is None or event.triggered:
            return 0.0
        t0 = self.env.now
        yield event
        if self.spans is not None:
            what = "bwd" if backward else "fwd"
            name = f"gather {what} {layer}"
            self.spans.append(Span(f"worker{self.rank}", name, t0, self.env.now, it))
        return self.env.now - t0

    def _start(self, it: int, layer: int, key: int, delay_s: float) -> None:
        gate = self.gates[layer]
        t0 = self.env.now + delay_s

        def done(waited_for_others_s: float) -> None:
            if self.spans is not None:
                self.spans.append(
                    Span(f"worker{self.rank} comm", f"key {key}", t0, self.env.now, it)
                )
            gate.key_done(waited_for_others_s)

        if delay_s > 0:
            self.env.timeout(delay_s).callbacks.append(lambda _e: self.communicate(it, key, done))
        else:
            self.communicate(it, key, done)


class HostCopies:
    """The GPU<->CPU copy engine of one host, for aggregating and broadcasting a key."""

    def __init__(
        self,
        env: simpy.Environment,
        rank: int,
        gpus: int,
        on_cpu: bool,
        device_mode: bool,
        host_link_Bps: float,
        peer_link_Bps: float,
        merge_s_per_byte: float,
        cores: CorePool | None = None,
        big_bytes: float = float("inf"),
        reduction_threads: int = 1,
        to_host: bool = True,
    ) -> None:
        self.rank = rank
        self.queue = SerialQueue(env, f"worker{rank}.copies", cores)
        # Seconds per byte for a key summed on the GPUs to cross to host memory (and back): a
        # dist_*_device worker pushes it from there (ps-lite sends CPU buffers); MXNet's
        # single-host "device" kvstore updates and broadcasts it on the GPUs (CommDevice).
        self.device_host_s_per_byte = 1.0 / host_link_Bps if to_host else 0.0
        # MXNet sums a big array (at least ``big_bytes``) with several CPU threads
        # (MXNET_KVSTORE_REDUCTION_NTHREADS); simscale.spec.costs.worker_reduction_threads.
        self.big_bytes = big_bytes
        self.reduction_threads = reduction_threads
        self.gpus = gpus
        self.on_cpu = on_cpu
        self.device_mode = device_mode
        self.host_link_Bps = host_link_Bps
        self.peer_link_Bps = peer_link_Bps
        self.merge_s_per_byte = merge_s_per_byte

    @classmethod
    def for_worker(
        cls,
        env: simpy.Environment,
        rank: int,
        gpus: int,
        gpu: GPUSpec,
        scenario: Scenario,
        costs: CostModel,
        cores: CorePool | None = None,
    ) -> HostCopies:
        """Worker ``rank``'s copy engine for its ``gpus`` GPUs of kind ``gpu``, as the
        scenario's kvstore mode moves gradients (module doc)."""
        mode = scenario.kvstore.mode
        bpe = BYTES_PER_ELEMENT[scenario.training.gradient_precision]
        return cls(
            env,
            rank,
            gpus,
            on_cpu=gpu.name == "cpu",
            device_mode=mode.endswith("device"),
            host_link_Bps=gpu.host_link_gbytes_per_s * 1e9,
            peer_link_Bps=gpu.peer_link_gbytes_per_s * 1e9,
            merge_s_per_byte=costs.server_merge_ns_per_byte * 1e-9,
            cores=cores,
            big_bytes=scenario.kvstore.bigarray_bound * bpe,
            reduction_threads=costs.worker_reduction_threads,
            to_host=mode != "device",
        )

    def reduce_s(self, nbytes: float) -> float:
        """Seconds to sum a key over the host's GPUs into the CPU buffer that is pushed."""
        if self.on_cpu:
            # CPU "GPUs": gradients already live in host memory; only the sum remains.
            return (self.gpus - 1) * nbytes * self.merge_s_per_byte
        if self.device_mode:
            return nbytes * ((self.gpus - 1) / self.peer_link_Bps + self.device_host_s_per_byte)
        threads = self.reduction_threads if nbytes >= self.big_bytes else 1
        return (
            self.gpus * nbytes / self.host_link_Bps
            + (self.gpus - 1) * nbytes * self.merge_s_per_byte / threads
        )

    def broadcast_s(self, nbytes: float) -> float:
        """Seconds to copy a pulled key back to every GPU of the host."""
        if self.on_cpu:
            return 0.0
        if self.device_mode:
            return nbytes * (self.device_host_s_per_byte + (self.gpus - 1) / self.peer_link_Bps)
        return self.gpus * nbytes / self.host_link_Bps

    def reset_counters(self) -> None:
        self.queue.reset()

    def utilization(self, t0: float, t1: float) -> list[Utilization]:
        """The copy engine's busy fraction, where it did any work at all."""
        if self.queue.busy_s <= 0:
            return []
        what = f"worker {self.rank} GPU<->CPU copies and local aggregation"
        return [busy_fraction(self.queue, t0, t1, "copies", what)]


def async_start_delay_s(
    rank: int, workers: int, compute_s: float, model_bytes: float, nic_Bps: float
) -> float:
    """When async worker ``rank`` of ``workers`` starts: out of phase, spread over one rough
    iteration (compute plus pushing and pulling the model at line rate). Real async workers
    drift apart at once (any noise does it, and nothing pulls them back into step); a
    symmetric, deterministic simulation would otherwise keep them in lock-step, all pushing,
    then all pulling, leaving each NIC direction idle half the time. (Sync workers all start
    together.)"""
    rough_s = compute_s + 2 * model_bytes / nic_Bps
    return rough_s * rank / workers
