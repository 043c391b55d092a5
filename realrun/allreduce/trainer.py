"""An all-reduce worker's training loop: real forward/backward in PyTorch, gradients fused and
all-reduced as backward produces them, and each layer's next forward waiting only for its own
gradient's reduction.

The loop and the overlap are ``realrun.training.overlap``'s, shared with the PS trainer
(``realrun.training.worker_loop``), with the servers taken out: a post-accumulate-grad hook
hands each gradient to the communication thread the moment it exists (summed first over this
process's replicas: the intra-host reduce of hierarchical all-reduce), the thread runs Horovod's
cycle (``realrun.allreduce.fusion``) and all-reduces fused buffers, and a forward pre-hook
applies the update of a module's parameters once their sums are back. The update is the PS
servers' rule, SGD with momentum and ``rescale_grad = 1/GPUs`` (``realrun.ps.optimizer.SGD``),
applied by every rank to its own copy: the sum all-reduced is the sum a server would hold, so
the weights are the PS run's weights.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist

from realrun.allreduce.fusion import agreed_order, fuse
from realrun.allreduce.rendezvous import backend_for
from realrun.ps.optimizer import SGD
from realrun.records.record import IterationTiming
from realrun.records.timeline import WAIT_THREAD
from realrun.training.overlap import (
    PULL_WAIT_LIMIT_S,
    WAIT_SPAN_MIN_S,
    OverlapTrainer,
    resolve_devices,
    synthetic_batches,
)
from simscale.report.trace import BUFFER_THREAD

WAIT_POLL_S = 0.5  # how often a blocked forward checks that the communication thread lives


@dataclass(frozen=True)
class AllreducePlan:
    """What one rank trains and how; built from the scenario by ``realrun.allreduce.worker``."""

    model: str
    batch_per_gpu: int
    host: int  # worker host index: names the data, as the PS worker rank does
    first_replica: int  # this process's first GPU on its host
    replicas: int  # GPUs this process drives
    iterations: int
    seed: int
    optimizer: SGD
    fusion_bytes: float
    cycle_s: float
    algorithm: str = "hierarchical"
    device: str = "auto"  # auto | cpu | cuda
    local_rank: int = 0  # the CUDA device of a one-GPU rank


def sgd_step(opt: SGD, weight: torch.Tensor, grad: torch.Tensor, state: torch.Tensor | None):
    """``realrun.ps.optimizer.SGD.update`` on torch tensors, in place: the same rule
    (state = momentum*state - lr*(wd*w + rescale*g); w += state), on the weight's device."""
    step = grad * opt.rescale_grad
    if opt.weight_decay:
        step.add_(weight, alpha=opt.weight_decay)
    step.mul_(opt.learning_rate)
    if opt.momentum == 0.0:
        weight.sub_(step)
        return None
    if state is None:
        state = torch.zeros_like(weight)
    state.mul_(opt.momentum).sub_(step)
    weight.add_(state)
    return state


def rank_devices(plan: AllreducePlan) -> list[torch.device]:
    """One device per replica: a one-GPU rank takes GPU ``local_rank`` (torchrun's
    convention), a host rank takes its host's GPUs, the CPU when there is no CUDA."""
    devices = resolve_devices(plan.device, plan.replicas)
    if plan.replicas == 1 and devices[0].type == "cuda":
        return [torch.device("cuda", plan.local_rank)]
    return devices


class AllreduceTrainer(OverlapTrainer):
    """Trains ``plan.model`` with the ranks of ``group``; ``models`` is
    ``realrun.training.torch_models`` (build/synthetic_batch/loss)."""

    def __init__(
        self, group: dist.ProcessGroup, rank: int, plan: AllreducePlan, models: ModuleType
    ) -> None:
        super().__init__(rank, models, plan.model, plan.seed, rank_devices(plan))
        self.group = group
        self.plan = plan
        # NCCL reduces CUDA tensors; gloo reduces host memory.
        self.comm_device = self.devices[0] if self.on_gpu else torch.device("cpu")
        self.keys = len(self.params[0])
        self.nbytes = [p.numel() * p.element_size() for p in self.params[0]]
        self._cond = threading.Condition()
        self._grads: list[list[torch.Tensor | None]] = [
            [None] * len(self.replicas) for _ in range(self.keys)
        ]
        self._local: list[torch.Tensor | None] = [None] * self.keys  # this rank's sums
        self._ready: set[int] = set()  # keys whose local sum is waiting for the collective
        self._reduced: list[torch.Tensor | None] = [None] * self.keys
        self._done = [threading.Event() for _ in range(self.keys)]
        self._expected: set[int] = set()  # keys with a reduction the next forward must apply
        self._state: list[torch.Tensor | None] = [None] * self.keys
        self._error: BaseException | None = None
        self._stop = False
        self._ready_at = [0.0] * self.keys  # when each key's local sum was ready
        self._reduced_in = [0] * self.keys  # the iteration of each key's pending reduction
        self.collectives = 0  # fused all-reduces issued (not counting the agreement rounds)

    def describe(self) -> dict[str, Any]:
        """The compute and communication side of the environment, for the run record."""
        return self._describe(
            {
                "gradient_aggregation": "allreduce",
                "allreduce": {
                    "backend": backend_for(self.comm_device),
                    "algorithm": self.plan.algorithm,
                    "host": self.plan.host,
                    "fusion_bytes": self.plan.fusion_bytes,
                    "cycle_s": self.plan.cycle_s,
                },
            }
        )

    def run(
        self, on_iteration: Callable[[IterationTiming], None] = lambda t: None
    ) -> list[IterationTiming]:
        """Start from rank 0's weights, train ``plan.iterations`` steps, return timings."""
        self._broadcast_initial_weights()
        self.group.barrier().wait()
        self.recorder.clock_reference()
        self._hook()
        batches = self._batches()
        comm = threading.Thread(target=self._communicate, name="allreduce", daemon=True)
        comm.start()
        try:
            timings = self._iterate(batches, self.plan.iterations, on_iteration)
        finally:
            with self._cond:
                self._stop = True
                self._cond.notify_all()
        comm.join(PULL_WAIT_LIMIT_S)
        return timings

    def weights(self) -> list[torch.Tensor]:
        """Copies of replica 0's parameters, in key order, on the CPU."""
        return [p.detach().cpu().clone() for p in self.params[0]]

    # ---- set-up ----

    def _broadcast_initial_weights(self) -> None:
        """Every rank starts from rank 0's weights (Horovod's broadcast_parameters), sent as
        one flat buffer."""
        flat = torch.cat([p.detach().reshape(-1) for p in self.params[0]]).to(self.comm_device)
        self.group.broadcast([flat]).wait()
        offset = 0
        with torch.no_grad():
            for k, p in enumerate(self.params[0]):
                n = p.numel()
                for params in self.params:
                    params[k].copy_(flat[offset : offset + n].view_as(p))
                offset += n

    def _batches(self) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
        p = self.plan
        return synthetic_batches(
            self.models,
            p.model,
            p.batch_per_gpu,
            p.seed,
            p.host,
            p.first_replica,
            self.devices,
            p.iterations,
        )

    # ---- backward side: gradients become ready ----

    def _grad_hook(self, key: int, replica: int) -> Callable[[torch.Tensor], None]:
        def ready(param: torch.Tensor) -> None:
            grad = param.grad
            param.grad = None  # the communication thread owns it now
            with self._cond:
                slot = self._grads[key]
                slot[replica] = grad
                if any(g is None for g in slot):
                    return
                self._grads[key] = [None] * len(slot)
            # The intra-host reduce: this process's replicas summed before the collective.
            started = time.time()
            total = slot[0] if len(slot) == 1 else sum(g.to(self.comm_device) for g in slot)
            assert total is not None
            flat = total.detach().reshape(-1).to(self.comm_device)
            if len(slot) > 1:
                self.recorder.add(f"key {key}", "reduce", started, time.time(), self._iteration)
            with self._cond:
                self._ready_at[key] = time.time()
                self._local[key] = flat
                self._ready.add(key)
                self._expected.add(key)
                self._cond.notify_all()

        return ready

    # ---- the communication thread: Horovod's cycle ----

    def _communicate(self) -> None:
        try:
            for it in range(self.plan.iterations):
                if not self._reduce_iteration(it):
                    return
        except BaseException as e:  # wake the training thread, which raises it
            self._error = e
            for event in self._done:
                event.set()

    def _reduce_iteration(self, it: int) -> bool:
        remaining = set(range(self.keys))
        last_cycle = 0.0
        while remaining:
            with self._cond:
                while not (self._ready & remaining) and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return False
            # Horovod negotiates once per cycle: what became ready meanwhile goes together.
            pause = last_cycle + self.plan.cycle_s - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            last_cycle = time.monotonic()
            t0 = time.time()
            with self._cond:
                bits = [1 if k in self._ready else 0 for k in range(self.keys)]
            agreed = torch.tensor(bits, dtype=torch.uint8, device=self.comm_device)
            options = dist.AllreduceOptions()
            options.reduceOp = dist.ReduceOp.MIN
            self.group.allreduce([agreed], options).wait()
            keys = [k for k in agreed_order(agreed.tolist()) if k in remaining]
            self.recorder.add(BUFFER_THREAD, "negotiate", t0, time.time(), it, agreed=len(keys))
            for buffer in fuse(keys, self.nbytes, self.plan.fusion_bytes):
                self._allreduce(it, buffer)
                remaining.difference_update(buffer)
        return True

    def _allreduce(self, it: int, buffer: list[int]) -> None:
        with self._cond:
            parts = [self._local[k] for k in buffer]
            for k in buffer:
                self._ready.discard(k)
                self._local[k] = None
        t0 = time.time()
        flat = torch.cat(parts) if len(parts) > 1 else parts[0]  # type: ignore[arg-type]
        assert flat is not None
        self.group.allreduce([flat]).wait()
        self.collectives += 1
        t1 = time.time()
        nbytes = int(sum(self.nbytes[k] for k in buffer))
        self.recorder.add(
            BUFFER_THREAD, f"allreduce {len(buffer)} keys", t0, t1, it, keys=buffer, bytes=nbytes
        )
        offset = 0
        for k in buffer:
            n = self.params[0][k].numel()
            self.recorder.add(f"key {k}", "negotiate", self._ready_at[k], t0, it)
            self.recorder.add(f"key {k}", "allreduce", t0, t1, it)
            self._reduced[k] = flat[offset : offset + n]
            self._reduced_in[k] = it
            offset += n
            self._done[k].set()

    # ---- forward side: a module's update waits for its reductions only ----

    def _await(self, keys) -> None:
        for k in keys:
            if k not in self._expected:
                continue
            t = time.perf_counter()
            t_wall = time.time()
            while not self._done[k].wait(WAIT_POLL_S):
                if time.perf_counter() - t > PULL_WAIT_LIMIT_S:
                    raise TimeoutError(f"key {k}'s all-reduce took over {PULL_WAIT_LIMIT_S:.0f} s")
            if self._error is not None:
                raise RuntimeError(f"all-reduce failed: {self._error}") from self._error
            waited = time.perf_counter() - t
            self._wait_s += waited
            if waited > WAIT_SPAN_MIN_S:
                self.recorder.add(
                    WAIT_THREAD, f"wait key {k}", t_wall, time.time(), self._reduced_in[k]
                )
            self._done[k].clear()
            with self._cond:
                self._expected.discard(k)
            self._apply(k)

    def _apply(self, key: int) -> None:
        t0 = time.time()
        reduced = self._reduced[key]
        self._reduced[key] = None
        assert reduced is not None
        with torch.no_grad():
            weight = self.params[0][key]
            grad = reduced.to(weight.device).view_as(weight)
            self._state[key] = sgd_step(self.plan.optimizer, weight.data, grad, self._state[key])
            for params in self.params[1:]:
                params[key].copy_(weight, non_blocking=True)
        self.recorder.add(f"key {key}", "update", t0, time.time(), self._reduced_in[key])
