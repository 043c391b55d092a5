"""Emulated GPUs: a worker that replays per-layer compute times instead of running PyTorch.

The network and parameter-server path stay real (the same KVWorker, Postoffice, servers and
bytes); only the device is replaced by a timeline. Per-layer forward and backward seconds come
from the simulator's compute model (``simscale.model.compute.layer_times`` with the default
``CostModel``), multiplied by the time dilation D. Gradients are fixed, seeded float32 arrays
of each key's real size, pushed the moment their layer's backward "finishes", last layer first,
and each layer's next forward waits only for its own keys: the push/pull pattern of
``realrun.training.worker_loop``, at no CPU cost, so many emulated hosts fit on one small machine.

A host with G emulated GPUs runs them as one timeline (they compute in parallel in lock step).
Summing a key over the G GPUs and copying the pulled weights back to them are *not* done as
numpy work: their cost on the emulated host would be this machine's memory speed, not the
emulated one's. They are replayed as time instead, with the simulator's own formulas
(``simscale.model.worker.HostCopies``): the sum on a serial copy engine between backward and push,
the broadcast on another as each pull arrives; a layer's forward waits for its keys' broadcast
(time waiting for it counts as exposed communication, as in the simulator's breakdown).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import simpy

from realrun.ps.kv_worker import KVWorker
from realrun.ps.optimizer import SGD
from realrun.ps.tracker import Handle
from realrun.records.record import IterationTiming
from simscale.model.cluster import layout
from simscale.model.compute import layer_times
from simscale.model.worker import HostCopies
from simscale.spec.costs import CostModel
from simscale.spec.hardware import GPUS

PULL_WAIT_LIMIT_S = 300.0  # as realrun.training.overlap (no torch here): bounds a wedged job
BARRIER_WAIT_LIMIT_S = 120.0
GRADIENT_SCALE = 1e-3  # synthetic gradients: small enough that SGD weights stay finite
TIMES_SOURCE = "simscale.model.compute.layer_times with the default CostModel"


@dataclass(frozen=True)
class EmulatedDevice:
    """What one worker replays: per-layer times (already dilated) and which keys each layer owns.

    All times are seconds on this machine's clock, i.e. the emulated times multiplied by D.
    """

    layer_keys: tuple[tuple[int, ...], ...]  # keys of layer l, in key order
    key_elements: tuple[int, ...]
    forward_s: tuple[float, ...]
    backward_s: tuple[float, ...]
    reduce_s: tuple[float, ...]  # per key: sum over the host's GPUs before the push
    broadcast_s: tuple[float, ...]  # per key: copy the pulled weights back to every GPU
    gpus: int
    gpu: str
    dilation: float

    @property
    def iteration_s(self) -> float:
        """Compute of one iteration with free communication (dilated seconds)."""
        return sum(self.forward_s) + sum(self.backward_s)


def emulated_times_source(scenario) -> str:
    """ "measured" (profile of this machine's device) or "model" (simscale's, for the GPU)."""
    chosen = scenario.realrun.compute_times
    if chosen != "auto":
        return chosen
    gpus = {layout(scenario).hosts[h].gpu for h in layout(scenario).worker_hosts}
    return "measured" if gpus == {"cpu"} else "model"


def emulated_device(scenario, rank: int) -> EmulatedDevice:
    """The timeline of worker ``rank`` of ``scenario`` under its ``realrun.dilation``."""
    spec = scenario.model_spec()  # at the scenario's seq_len, with checkpointing's recompute
    lay = layout(scenario)
    host = lay.hosts[lay.worker_hosts[rank]]
    gpus = lay.gpus_of(rank)
    gpu = GPUS[str(host.gpu)]
    d = scenario.realrun.dilation
    costs = CostModel()
    times = layer_times(
        spec, gpu.name, scenario.training.compute_precision, scenario.training.batch_per_gpu, costs
    )
    copies = HostCopies(
        simpy.Environment(),
        rank,
        gpus,
        on_cpu=gpu.name == "cpu",
        device_mode=scenario.kvstore.mode.endswith("_device"),
        host_link_Bps=gpu.host_link_gbytes_per_s * 1e9,
        peer_link_Bps=gpu.peer_link_gbytes_per_s * 1e9,
        merge_s_per_byte=costs.server_merge_ns_per_byte * 1e-9,
    )
    layer_keys: list[list[int]] = [[] for _ in spec.layers]
    for key, layer in enumerate(spec.array_layer):
        layer_keys[layer].append(key)
    nbytes = [a.elements * 4 for a in spec.arrays]  # realrun pushes fp32
    return EmulatedDevice(
        layer_keys=tuple(tuple(k) for k in layer_keys),
        key_elements=tuple(a.elements for a in spec.arrays),
        forward_s=tuple(float(t) * d for t in times.forward_s),
        backward_s=tuple(float(t) * d for t in times.backward_s),
        reduce_s=tuple(copies.reduce_s(b) * d for b in nbytes),
        broadcast_s=tuple(copies.broadcast_s(b) * d for b in nbytes),
        gpus=gpus,
        gpu=gpu.name,
        dilation=d,
    )


def synthetic_gradients(elements: Sequence[int], seed: int, rank: int) -> list[np.ndarray]:
    """One fixed float32 array per key, seeded by (seed, rank): the same bytes every run."""
    rng = np.random.default_rng([seed, rank])
    return [
        (rng.standard_normal(n, dtype=np.float32) * np.float32(GRADIENT_SCALE)) for n in elements
    ]


def sleep_until(deadline: float) -> None:
    """Sleep until ``time.perf_counter()`` reaches ``deadline`` (no-op if it already has)."""
    left = deadline - time.perf_counter()
    if left > 0:
        time.sleep(left)


class EmulatedTrainer:
    """Drives one worker's KV traffic on an emulated device's timeline (see module docstring)."""

    def __init__(
        self,
        kv: KVWorker,
        device: EmulatedDevice,
        iterations: int,
        seed: int,
        sync: bool,
        optimizer: SGD,
    ) -> None:
        self.kv = kv
        self.device = device
        self.iterations = iterations
        self.sync = sync
        self.optimizer = optimizer
        self.grads = synthetic_gradients(device.key_elements, seed, kv.rank)
        self.buffers = [np.zeros(n, dtype=np.float32) for n in device.key_elements]
        self._pending: dict[int, tuple[Handle, threading.Event]] = {}
        self._broadcasts: queue.SimpleQueue[tuple[int, Handle, threading.Event] | None] = (
            queue.SimpleQueue()
        )
        self._outstanding: set[int] = set()  # handed to the copy engine, not yet awaited
        self._posted = threading.Condition()
        self._copies: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._copy_error: BaseException | None = None
        self._wait_s = 0.0

    def describe(self) -> dict:
        """The compute side of the environment, for the run record."""
        d = self.device
        return {
            "compute": "emulated",
            "compute_times_source": TIMES_SOURCE,
            "device": "emulated",
            "device_name": f"emulated {d.gpu}",
            "replicas": d.gpus,
            "gradient_aggregation": "replayed as time (simscale.model.worker.HostCopies)",
            "time_dilation": d.dilation,
            "emulated_compute_s_per_iteration": d.iteration_s / d.dilation,
            "keys": len(d.key_elements),
        }

    def run(
        self, on_iteration: Callable[[IterationTiming], None] = lambda t: None
    ) -> list[IterationTiming]:
        """Initialise the servers, replay ``iterations`` steps, return the timings."""
        self._initialise()
        engine = threading.Thread(target=self._copy_engine, name="copy-engine", daemon=True)
        broadcaster = threading.Thread(
            target=self._broadcast_engine, name="broadcast-engine", daemon=True
        )
        engine.start()
        broadcaster.start()
        d = self.device
        timings = []
        try:
            for it in range(self.iterations):
                wall = time.time()
                start = time.perf_counter()
                self._wait_s = 0.0
                clock = start  # where the emulated device's timeline has got to
                for layer, keys in enumerate(d.layer_keys):
                    if keys:
                        self._await(keys)
                        clock = max(clock, time.perf_counter())
                    clock += d.forward_s[layer]
                    sleep_until(clock)
                for layer in reversed(range(len(d.layer_keys))):
                    clock += d.backward_s[layer]
                    sleep_until(clock)
                    for key in reversed(d.layer_keys[layer]):
                        with self._posted:
                            self._outstanding.add(key)
                        self._copies.put(key)
                # Iteration i waits (in its forward) for round i-1: one round each. The last
                # round is drained below, outside any iteration, so that the last iteration
                # does not count two rounds.
                total = time.perf_counter() - start
                t = IterationTiming(
                    self.kv.rank, it, wall, total - self._wait_s, self._wait_s, total, None
                )
                timings.append(t)
                on_iteration(t)
            self._await(range(len(d.key_elements)))
        finally:
            self._copies.put(None)
            engine.join(PULL_WAIT_LIMIT_S)
            self._broadcasts.put(None)
            broadcaster.join(PULL_WAIT_LIMIT_S)
        return timings

    # ---- set-up ----

    def _initialise(self) -> None:
        kv = self.kv
        kv.configure(self.sync, self.optimizer).wait(60.0)
        for h in [kv.init(k, buf) for k, buf in enumerate(self.buffers)]:
            h.wait(60.0)
        kv.po.barrier("worker").wait(BARRIER_WAIT_LIMIT_S)
        for h in [kv.pull(k, buf) for k, buf in enumerate(self.buffers)]:
            h.wait(60.0)

    # ---- the copy engine and the overlap ----

    def _copy_engine(self) -> None:
        """Sum each key over the GPUs (as time), then push it; serial, like one DMA engine."""
        clock = time.perf_counter()
        try:
            while (key := self._copies.get()) is not None:
                clock = max(clock, time.perf_counter()) + self.device.reduce_s[key]
                sleep_until(clock)
                # Priority -key: the first layers' keys are needed first by the next forward.
                handle = self.kv.pushpull(key, self.grads[key], self.buffers[key], priority=-key)
                done = threading.Event()
                self._broadcasts.put((key, handle, done))
                with self._posted:
                    self._pending[key] = (handle, done)
                    self._posted.notify_all()
        except BaseException as e:  # surfaced by _await, never lost
            with self._posted:
                self._copy_error = e
                self._posted.notify_all()

    def _broadcast_engine(self) -> None:
        """Copy each pulled key back to the GPUs (as time), in the order keys were pushed,
        serially like one DMA engine; the key's forward waits for it (simscale does the same)."""
        clock = time.perf_counter()
        while (item := self._broadcasts.get()) is not None:
            key, handle, done = item
            try:
                handle.wait(PULL_WAIT_LIMIT_S)
            except BaseException:  # _await re-raises it from the handle
                done.set()
                continue
            clock = max(clock, time.perf_counter()) + self.device.broadcast_s[key]
            sleep_until(clock)
            done.set()

    def _await(self, keys) -> None:
        for k in keys:
            t = time.perf_counter()
            with self._posted:
                if k not in self._outstanding:
                    continue
                while k not in self._pending:
                    if self._copy_error is not None:
                        raise RuntimeError(f"copy engine failed: {self._copy_error}")
                    self._posted.wait(1.0)
                self._outstanding.discard(k)
                handle, broadcast = self._pending.pop(k)
            handle.wait(PULL_WAIT_LIMIT_S)
            if not broadcast.wait(PULL_WAIT_LIMIT_S):
                raise TimeoutError(f"key {k}: no copy back to the GPUs")
            self._wait_s += time.perf_counter() - t
