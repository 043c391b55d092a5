"""A PS worker's training loop: real forward/backward in PyTorch, gradients pushed as backward
produces them, and each layer's next forward waiting only for its own key's pull.

The loop and the overlap are ``realrun.training.overlap``'s, shared with the all-reduce rank:
here a ready gradient is pushed to its server(s) and pulled back, and a module's forward waits
for its keys' pulls. A worker drives all the GPUs of its host (one replica each) and sums their
gradients before one push per key leaves the host.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import torch

from realrun.ps.kv_worker import KVWorker
from realrun.ps.optimizer import SGD
from realrun.ps.tracker import Handle
from realrun.records.record import IterationTiming
from realrun.records.timeline import WAIT_THREAD
from realrun.training.overlap import (
    PULL_WAIT_LIMIT_S,
    WAIT_SPAN_MIN_S,
    OverlapTrainer,
    resolve_devices,
    synthetic_batches,
)

INIT_WAIT_LIMIT_S = 60.0
BARRIER_WAIT_LIMIT_S = 120.0  # worker 0 initialising a large model on every server


@dataclass(frozen=True)
class TrainPlan:
    """What one worker trains and how; built from the scenario by ``realrun.node``."""

    model: str
    batch_per_gpu: int
    gpus: int
    iterations: int
    seed: int
    sync: bool
    optimizer: SGD
    device_aggregation: bool = False  # dist_*_device: sum the host's gradients on a GPU
    device: str = "auto"  # auto | cpu | cuda


def initialise_keys(
    kv: KVWorker, plan: TrainPlan, values: list[np.ndarray], buffers: list[np.ndarray]
) -> float:
    """MXNet's start of training: worker 0 configures the servers and pushes the initial
    values, everyone meets at a barrier, then every worker pulls them into ``buffers``.
    Returns the wall clock just after the barrier (``realrun.records.timeline`` aligns clocks by
    it)."""
    kv.configure(plan.sync, plan.optimizer).wait(INIT_WAIT_LIMIT_S)
    for h in [kv.init(k, v) for k, v in enumerate(values)]:
        h.wait(INIT_WAIT_LIMIT_S)
    kv.po.barrier("worker").wait(BARRIER_WAIT_LIMIT_S)
    after_barrier = time.time()
    for h in [kv.pull(k, buf) for k, buf in enumerate(buffers)]:
        h.wait(INIT_WAIT_LIMIT_S)
    return after_barrier


class Trainer(OverlapTrainer):
    """Trains ``plan.model`` through ``kv``; ``models`` provides build/synthetic_batch/loss."""

    def __init__(self, kv: KVWorker, plan: TrainPlan, models: ModuleType) -> None:
        devices = resolve_devices(plan.device, plan.gpus)
        super().__init__(kv.rank, models, plan.model, plan.seed, devices)
        self.kv = kv
        self.plan = plan
        self.aggregation = "gpu" if (plan.device_aggregation and self.on_gpu) else "cpu"
        self.buffers = [np.empty(p.numel(), dtype=np.float32) for p in self.params[0]]
        self._grads: list[list[torch.Tensor | None]] = [
            [None] * len(self.replicas) for _ in self.buffers
        ]
        self._pending: dict[int, tuple[Handle, float, int]] = {}  # handle, sent at, iteration
        self._lock = threading.Lock()

    def describe(self) -> dict:
        """The compute side of the environment, for the run record."""
        # dist_*_device without CUDA runs the CPU path; the record says so.
        return self._describe(
            {
                "gradient_aggregation": self.aggregation,
                "device_aggregation_requested": self.plan.device_aggregation,
            }
        )

    def run(
        self, on_iteration: Callable[[IterationTiming], None] = lambda t: None
    ) -> list[IterationTiming]:
        """Initialise the servers' weights, train ``plan.iterations`` steps, return timings."""
        self._initialise()
        self._hook()
        return self._iterate(self._batches(), self.plan.iterations, on_iteration)

    def weights(self) -> list[np.ndarray]:
        """Copies of replica 0's parameters, in key order."""
        return [p.detach().cpu().numpy().copy() for p in self.params[0]]

    # ---- set-up ----

    def _initialise(self) -> None:
        values = [p.detach().cpu().numpy() for p in self.params[0]]
        self.recorder.barrier_exit_unix_s = initialise_keys(
            self.kv, self.plan, values, self.buffers
        )
        for k in range(len(self.buffers)):
            self._copy_in(k)

    def _batches(self) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
        p = self.plan
        return synthetic_batches(
            self.models,
            p.model,
            p.batch_per_gpu,
            p.seed,
            self.kv.rank,
            0,
            self.devices,
            p.iterations,
        )

    # ---- the overlap ----

    def _grad_hook(self, key: int, replica: int) -> Callable[[torch.Tensor], None]:
        def ready(param: torch.Tensor) -> None:
            grad = param.grad
            # Ownership moves to the push: zmq sends the buffer without copying, so torch must
            # not accumulate into it next iteration.
            param.grad = None
            with self._lock:
                slot = self._grads[key]
                slot[replica] = grad
                if any(g is None for g in slot):
                    return
                grads, self._grads[key] = slot, [None] * len(slot)
            self._push(key, grads)

        return ready

    def _push(self, key: int, grads: list[torch.Tensor | None]) -> None:
        ready = time.time()
        if len(grads) == 1:
            total = grads[0]
        elif self.aggregation == "gpu":
            total = sum(g.to(self.devices[0]) for g in grads)  # dist_*_device: sum on GPU 0
        else:
            total = sum(g.cpu() for g in grads)  # dist_*: sum in host memory
        flat = total.detach().reshape(-1).to("cpu", torch.float32).contiguous().numpy()
        sent = time.time()
        if len(grads) > 1:
            self.recorder.add(f"key {key}", "reduce", ready, sent, self._iteration)
        # Priority -key: the first layers' keys are needed first by the next forward.
        handle = self.kv.pushpull(key, flat, self.buffers[key], priority=-key)
        self._pending[key] = (handle, sent, self._iteration)

    def _await(self, keys) -> None:
        for k in keys:
            pending = self._pending.pop(k, None)
            if pending is None:
                continue
            handle, sent, it = pending
            t = time.perf_counter()
            t_wall = time.time()
            handle.wait(PULL_WAIT_LIMIT_S)
            waited = time.perf_counter() - t
            self._wait_s += waited
            back = handle.done_unix_s if handle.done_unix_s is not None else time.time()
            # The worker sees only its request and the answer: the server's part is inside.
            self.recorder.add(f"key {k}", "push+update+pull", sent, back, it)
            if waited > WAIT_SPAN_MIN_S:
                self.recorder.add(WAIT_THREAD, f"wait key {k}", t_wall, time.time(), it)
            copy_start = time.time()
            self._copy_in(k)
            self.recorder.add(f"key {k}", "broadcast", copy_start, time.time(), it)

    def _copy_in(self, key: int) -> None:
        src = torch.from_numpy(self.buffers[key])
        with torch.no_grad():
            for params in self.params:
                p = params[key]
                p.copy_(src.view(p.shape), non_blocking=True)
