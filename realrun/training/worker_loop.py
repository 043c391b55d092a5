"""A worker's training loop: real forward/backward in PyTorch, gradients pushed as backward
produces them, and each layer's next forward waiting only for its own key.

This is the overlap MXNet gets from its dependency engine (losing it is apache/mxnet#6975):
a post-accumulate-grad hook pushes a key the moment its gradient exists (last layer first),
and a forward pre-hook on each module blocks on that module's pulls alone, so communication of
late layers hides behind the forward of early ones. A worker drives all the GPUs of its host
(one replica each) and sums their gradients before one push per key leaves the host.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import torch
from torch import nn

from realrun.ps.kv_worker import KVWorker
from realrun.ps.optimizer import SGD
from realrun.ps.tracker import Handle
from realrun.records.record import IterationTiming
from realrun.records.timeline import WAIT_THREAD, SpanRecorder

# A pull that takes this long means the job is wedged; the Postoffice normally fails handles
# much sooner (heartbeats), this only bounds the wait if everything else has failed.
PULL_WAIT_LIMIT_S = 300.0
INIT_WAIT_LIMIT_S = 60.0
BARRIER_WAIT_LIMIT_S = 120.0  # worker 0 initialising a large model on every server
_BUILD_LOCK = threading.Lock()
# Waits shorter than this are not drawn (a handle already answered still costs a check).
WAIT_SPAN_MIN_S = 1e-4
DATA_POOL = 4  # distinct synthetic batches per replica, cycled: data loading is not measured


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


def batch_seed(seed: int, rank: int, replica: int, index: int) -> int:
    """Seed of synthetic batch ``index`` of one replica of worker ``rank``: all different."""
    return ((seed * 1_000_003 + rank) * 257 + replica) * 64 + index


def resolve_devices(device: str, gpus: int) -> list[torch.device]:
    """One torch device per replica: the host's GPUs, or the CPU for every replica."""
    cuda = torch.cuda.is_available()
    if device == "cuda" and not cuda:
        raise RuntimeError("realrun.device is 'cuda' but torch sees no CUDA device here")
    if cuda and device != "cpu":
        have = torch.cuda.device_count()
        if gpus > have:
            raise RuntimeError(f"{gpus} GPUs per worker asked for, this host has {have}")
        return [torch.device("cuda", i) for i in range(gpus)]
    return [torch.device("cpu")] * gpus


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


def forward_backward(
    models: ModuleType,
    replicas: list[nn.Module],
    batches: list[list[tuple[torch.Tensor, torch.Tensor]]],
    it: int,
    recorder: SpanRecorder,
) -> list[torch.Tensor]:
    """Iteration ``it``'s forward and backward of every replica, one after the other, each
    recorded as a span; the losses, kept as tensors (reading a value now would make GPU r+1
    wait for GPU r)."""
    losses = []
    for r, model in enumerate(replicas):
        x, y = batches[r][it % len(batches[r])]
        t0 = time.time()
        loss = models.loss(model(x), y)
        t1 = time.time()
        loss.backward()
        recorder.add("", "forward", t0, t1, it, replica=r)
        recorder.add("", "backward", t1, time.time(), it, replica=r)
        losses.append(loss.detach())
    return losses


def build_replicas(
    models: ModuleType, model: str, seed: int, devices: list[torch.device]
) -> list[nn.Module]:
    """One copy of ``model`` per device, initialised from ``seed``.

    Initialisation draws from torch's global generator; the lock keeps it reproducible when
    several workers share one process (tests). Only worker 0's values reach the servers (or
    rank 0's the other ranks) anyway."""
    replicas = []
    with _BUILD_LOCK:
        torch.manual_seed(seed)
        for dev in devices:
            with torch.device(dev):
                replicas.append(models.build(model))
    return replicas


def hook_keys(
    first: nn.Module,
    params: list[list[torch.Tensor]],
    on_grad: Callable[[int, int], Callable[[torch.Tensor], None]],
    before_forward: Callable[[list[int]], None],
) -> None:
    """The overlap's two hooks: ``on_grad(key, replica)`` as every replica's post-accumulate-
    grad hook of each key, and ``before_forward(keys)`` before each module of replica ``first``
    (whose parameters are ``params[0]``) runs, with that module's own keys."""
    for r, replica_params in enumerate(params):
        for k, p in enumerate(replica_params):
            p.register_post_accumulate_grad_hook(on_grad(k, r))
    key_of = {id(p): k for k, p in enumerate(params[0])}
    for module in first.modules():
        keys = [key_of[id(p)] for p in module.parameters(recurse=False)]
        if keys:
            module.register_forward_pre_hook(lambda m, args, keys=keys: before_forward(keys))


def synthetic_batches(
    models: ModuleType,
    model: str,
    batch_per_gpu: int,
    seed: int,
    rank: int,
    first_replica: int,
    devices: list[torch.device],
    iterations: int,
) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Each replica's pool of synthetic batches; replica r here is GPU ``first_replica + r``
    of worker host ``rank`` (``batch_seed``)."""
    pool = min(DATA_POOL, iterations)
    return [
        [
            models.synthetic_batch(
                model,
                batch_per_gpu,
                torch.Generator().manual_seed(batch_seed(seed, rank, first_replica + r, j)),
                dev,
            )
            for j in range(pool)
        ]
        for r, dev in enumerate(devices)
    ]


class Trainer:
    """Trains ``plan.model`` through ``kv``; ``models`` provides build/synthetic_batch/loss."""

    def __init__(self, kv: KVWorker, plan: TrainPlan, models: ModuleType) -> None:
        self.kv = kv
        self.plan = plan
        self.models = models
        self.devices = resolve_devices(plan.device, plan.gpus)
        self.on_gpu = self.devices[0].type == "cuda"
        self.aggregation = "gpu" if (plan.device_aggregation and self.on_gpu) else "cpu"
        self.replicas = build_replicas(models, plan.model, plan.seed, self.devices)
        self.params = [[p for _, p in m.named_parameters()] for m in self.replicas]
        self.buffers = [np.empty(p.numel(), dtype=np.float32) for p in self.params[0]]
        self._grads: list[list[torch.Tensor | None]] = [
            [None] * len(self.replicas) for _ in self.buffers
        ]
        self._pending: dict[int, tuple[Handle, float, int]] = {}  # handle, sent at, iteration
        self._lock = threading.Lock()
        self._wait_s = 0.0
        self._iteration = 0
        self.recorder = SpanRecorder(kv.rank)  # the measured timeline (realrun.records.timeline)

    def describe(self) -> dict:
        """The compute side of the environment, for the run record."""
        dev = self.devices[0]
        return {
            "device": str(dev.type),
            "device_name": torch.cuda.get_device_name(dev) if self.on_gpu else "cpu",
            "replicas": len(self.replicas),
            # dist_*_device without CUDA runs the CPU path; the record says so.
            "gradient_aggregation": self.aggregation,
            "device_aggregation_requested": self.plan.device_aggregation,
            "torch_threads": torch.get_num_threads(),
            "keys": len(self.buffers),
        }

    def run(
        self, on_iteration: Callable[[IterationTiming], None] = lambda t: None
    ) -> list[IterationTiming]:
        """Initialise the servers' weights, train ``plan.iterations`` steps, return timings."""
        self._initialise()
        self._hook()
        batches = self._batches()
        timings = []
        for it in range(self.plan.iterations):
            wall = time.time()
            start = time.perf_counter()
            self._wait_s = 0.0
            self._iteration = it
            losses = forward_backward(self.models, self.replicas, batches, it, self.recorder)
            if it == self.plan.iterations - 1:
                self._await(range(len(self.buffers)))  # the last pulls end the last iteration
            if self.on_gpu:
                torch.cuda.synchronize()
            total = time.perf_counter() - start
            t = IterationTiming(
                self.kv.rank,
                it,
                wall,
                total - self._wait_s,
                self._wait_s,
                total,
                float(torch.stack([v.cpu() for v in losses]).mean()),
            )
            timings.append(t)
            on_iteration(t)
        return timings

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

    def _hook(self) -> None:
        hook_keys(self.replicas[0], self.params, self._grad_hook, self._await)

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
