"""What realrun's two PyTorch trainers share: one worker's replicas, their synthetic batches,
the overlap's two hooks, and the timed iteration loop.

Both trainers (the PS worker, ``realrun.training.worker_loop``, and the all-reduce rank,
``realrun.allreduce.trainer``) train the same way and differ only in where a gradient goes: a
post-accumulate-grad hook hands each key's gradient to the communication side the moment it
exists (last layer first), and a forward pre-hook on each module waits for that module's keys
alone, so the communication of late layers hides behind the forward of early ones (the overlap
MXNet gets from its dependency engine; losing it is apache/mxnet#6975). ``OverlapTrainer`` is
that shape; a subclass says what a ready gradient does (``_grad_hook``) and what waiting for a
key means (``_await``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import torch
from torch import nn

from realrun.records.record import IterationTiming
from realrun.records.timeline import SpanRecorder

# A wait for a key that takes this long means the job is wedged; the transport normally fails
# much sooner (heartbeats, the coordinator's watch), this only bounds the wait if all else failed.
PULL_WAIT_LIMIT_S = 300.0
_BUILD_LOCK = threading.Lock()
# Waits shorter than this are not drawn (a handle already answered still costs a check).
WAIT_SPAN_MIN_S = 1e-4
DATA_POOL = 4  # distinct synthetic batches per replica, cycled: data loading is not measured


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


class OverlapTrainer:
    """One worker's replicas trained with the overlap; a subclass supplies the two hooks.

    ``_grad_hook(key, replica)`` returns the callback that takes a ready gradient;
    ``_await(keys)`` blocks until those keys' new weights are in place and adds the time it
    blocked to ``self._wait_s`` (the iteration's exposed communication)."""

    def __init__(
        self, rank: int, models: ModuleType, model: str, seed: int, devices: list[torch.device]
    ) -> None:
        self.rank = rank
        self.models = models
        self.devices = devices
        self.on_gpu = devices[0].type == "cuda"
        self.replicas = build_replicas(models, model, seed, devices)
        self.params = [[p for _, p in m.named_parameters()] for m in self.replicas]
        self.recorder = SpanRecorder(rank)  # the measured timeline (realrun.records.timeline)
        self._wait_s = 0.0
        self._iteration = 0

    def _grad_hook(self, key: int, replica: int) -> Callable[[torch.Tensor], None]:
        raise NotImplementedError

    def _await(self, keys: Iterable[int]) -> None:
        raise NotImplementedError

    def _hook(self) -> None:
        hook_keys(self.replicas[0], self.params, self._grad_hook, self._await)

    def _describe(self, aggregation: dict[str, Any]) -> dict[str, Any]:
        """The compute side of the environment for the run record, with ``aggregation`` (how
        this trainer combines gradients) between the device and the thread count."""
        dev = self.devices[0]
        return {
            "device": str(dev.type),
            "device_name": torch.cuda.get_device_name(dev) if self.on_gpu else "cpu",
            "replicas": len(self.replicas),
            **aggregation,
            "torch_threads": torch.get_num_threads(),
            "keys": len(self.params[0]),
        }

    def _iterate(
        self,
        batches: list[list[tuple[torch.Tensor, torch.Tensor]]],
        iterations: int,
        on_iteration: Callable[[IterationTiming], None],
    ) -> list[IterationTiming]:
        """``iterations`` timed steps: forward and backward of every replica, the last step
        also waiting for every key (its communication ends the run), each step's time split
        into compute and the time ``_await`` blocked."""
        timings = []
        for it in range(iterations):
            wall = time.time()
            start = time.perf_counter()
            self._wait_s = 0.0
            self._iteration = it
            losses = forward_backward(self.models, self.replicas, batches, it, self.recorder)
            if it == iterations - 1:
                self._await(range(len(self.params[0])))
            if self.on_gpu:
                torch.cuda.synchronize()
            total = time.perf_counter() - start
            t = IterationTiming(
                self.rank,
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
