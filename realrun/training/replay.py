"""Emulated compute: a worker that replays a measured ComputeProfile instead of running torch.

Everything on the PS side stays real (keys, sizes, pushes, pulls, servers, the network); only
forward and backward become waits of the measured lengths, multiplied by the time dilation
(an emulated cluster whose links run ``dilation`` times slower must slow compute alike). The
gradients pushed are constant arrays of the real sizes; their values do not matter for
throughput. A multi-GPU host replays one replica: its GPUs would compute side by side.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from realrun.ps.kv_worker import KVWorker
from realrun.ps.tracker import Handle
from realrun.records.record import IterationTiming
from realrun.training.compute_profile import ComputeProfile
from realrun.training.overlap import PULL_WAIT_LIMIT_S
from realrun.training.worker_loop import TrainPlan, initialise_keys

REPLAYED_GRADIENT = 1e-4  # any small constant: only the bytes matter


class ReplayTrainer:
    """Same contract as ``training.Trainer``: ``run(on_iteration)`` and ``describe()``."""

    def __init__(
        self, kv: KVWorker, plan: TrainPlan, profile: ComputeProfile, dilation: float = 1.0
    ) -> None:
        if profile.model != plan.model:
            raise ValueError(f"compute profile is of {profile.model!r}, not {plan.model!r}")
        if dilation < 1.0:
            raise ValueError(f"time dilation must be at least 1, got {dilation}")
        self.kv = kv
        self.plan = plan
        self.profile = profile
        self.dilation = dilation
        sizes = profile.key_elements
        self.buffers = [np.empty(n, dtype=np.float32) for n in sizes]
        # Never written after creation, so zmq may send them without copying, again and again.
        self.grads = [np.full(n, REPLAYED_GRADIENT, dtype=np.float32) for n in sizes]
        self.push_order = sorted(range(len(sizes)), key=lambda k: profile.grad_ready_s[k])
        self._pending: dict[int, Handle] = {}

    def describe(self) -> dict:
        p = self.profile
        return {
            "compute": "emulated",
            "time_dilation": self.dilation,
            "profile_device": p.device,
            "profile_batch": p.batch,
            "profile_iteration_s": p.iteration_s,
            "replicas": self.plan.gpus,
            "keys": len(self.buffers),
        }

    def run(
        self, on_iteration: Callable[[IterationTiming], None] = lambda t: None
    ) -> list[IterationTiming]:
        initialise_keys(
            self.kv,
            self.plan,
            [np.zeros(n, np.float32) for n in self.profile.key_elements],
            self.buffers,
        )
        d, p = self.dilation, self.profile
        timings = []
        for it in range(self.plan.iterations):
            wall = time.time()
            start = time.perf_counter()
            wait_s = 0.0
            for layer in p.layers:
                _sleep(layer.gap_before_s * d)
                wait_s += self._await(layer.keys)
                _sleep(layer.forward_s * d)
            _sleep(p.forward_tail_s * d)
            backward = time.perf_counter()
            for k in self.push_order:
                _sleep(backward + p.grad_ready_s[k] * d - time.perf_counter())
                self._pending[k] = self.kv.pushpull(k, self.grads[k], self.buffers[k], priority=-k)
            _sleep(backward + p.backward_s * d - time.perf_counter())
            if it == self.plan.iterations - 1:
                wait_s += self._await(range(len(self.buffers)))
            total = time.perf_counter() - start
            t = IterationTiming(self.kv.rank, it, wall, total - wait_s, wait_s, total, None)
            timings.append(t)
            on_iteration(t)
        return timings

    def _await(self, keys) -> float:
        waited = 0.0
        for k in keys:
            handle = self._pending.pop(k, None)
            if handle is not None:
                t = time.perf_counter()
                handle.wait(PULL_WAIT_LIMIT_S)
                waited += time.perf_counter() - t
        return waited


def _sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)
