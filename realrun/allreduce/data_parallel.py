"""``kvstore.mode: ddp`` and ``zero``: PyTorch's own DistributedDataParallel and
FullyShardedDataParallel, trained for real on the job's process group (gloo on CPU).

Unlike the Horovod-style trainer (``realrun.allreduce.trainer``), nothing here reimplements the
communication: DDP's reducer buckets the gradients (``kvstore.ddp.bucket_mb``, the first bucket
``first_bucket_mb``) and all-reduces each bucket as backward fills it; FSDP wraps each
transformer block (its transformer auto-wrap policy, the zoo's layers), all-gathers a unit's
parameters before its forward and backward and reduce-scatters its gradients after backward.
``kvstore.zero.stage`` 3 runs FSDP's ``FULL_SHARD``; stages 1 and 2 run ``SHARD_GRAD_OP``
(ZeRO-2: gradients and optimizer state sharded, parameters kept whole between forward and
backward; FSDP has no stage 1, whose traffic is the same). FSDP runs on CPU over gloo here
(torch 2.13), checked in ``tests/realrun/allreduce/test_data_parallel.py``.

The optimizer is ``torch.optim.SGD`` with the scenario's momentum and weight decay, on the
averaged gradient: with a constant learning rate that is the PS servers' rule
(``realrun.ps.optimizer.SGD``). Under FSDP it holds and updates this rank's shard only.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from realrun.allreduce.tcp_bytes import sent_bytes
from realrun.records.record import IterationTiming
from realrun.records.timeline import SpanRecorder
from realrun.training.overlap import DATA_POOL, batch_seed

if TYPE_CHECKING:
    from realrun.allreduce.emulated_model import EmulatedModels

MIB = 2**20
_BUILD_LOCK = threading.Lock()  # ranks run as threads in tests


@dataclass(frozen=True)
class DataParallelPlan:
    """What one DDP/FSDP rank (one GPU of the scenario) trains and how."""

    mode: str  # ddp | zero
    model: str
    batch_per_gpu: int
    seq_len: int | None
    micro_batches: int
    host: int
    replica: int  # this rank's GPU on its host: names its data, as the other backends do
    iterations: int
    warmup: int
    seed: int
    learning_rate: float
    momentum: float
    weight_decay: float
    bucket_mb: float = 25.0  # ddp
    first_bucket_mb: float = 1.0  # ddp
    stage: int = 3  # zero
    prefetch: int = 1  # zero: units all-gathered ahead (0: none)
    store_port: int | None = None  # the store's connections are not training traffic


def wrap_ddp(model: nn.Module, group: dist.ProcessGroup, plan: DataParallelPlan) -> nn.Module:
    """DDP with the scenario's bucket sizes. torch honours a first bucket only with its default
    cap (distributed.py, BucketCapacityConfig), so both defaults are set for this process."""
    import torch.nn.parallel.distributed as ddp_module
    from torch.nn.parallel import DistributedDataParallel

    ddp_module._DEFAULT_BUCKET_CAP_MB = plan.bucket_mb
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(plan.first_bucket_mb * MIB)
    return DistributedDataParallel(model, process_group=group, bucket_cap_mb=None)


def wrap_fsdp(
    model: nn.Module,
    group: dist.ProcessGroup,
    plan: DataParallelPlan,
    units: frozenset[type[nn.Module]] | None = None,
) -> nn.Module:
    """FSDP over the zoo's units: each transformer block (or ``units``) wrapped, the rest in
    the root."""
    from torch.distributed.fsdp import BackwardPrefetch, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    from realrun.training.torch_transformers import Block

    strategy = ShardingStrategy.FULL_SHARD if plan.stage == 3 else ShardingStrategy.SHARD_GRAD_OP
    with warnings.catch_warnings():  # FSDP1's deprecation notice for FSDP2 (fully_shard)
        warnings.simplefilter("ignore", FutureWarning)
        return FSDP(
            model,
            process_group=group,
            sharding_strategy=strategy,
            auto_wrap_policy=ModuleWrapPolicy(set(units or {Block})),
            device_id=torch.device("cpu"),
            backward_prefetch=BackwardPrefetch.BACKWARD_PRE if plan.prefetch else None,
            forward_prefetch=plan.prefetch > 0,
            use_orig_params=True,  # parameters() lists the model's own, for SGD and checks
        )


class DataParallelTrainer:
    """One rank of a DDP or FSDP job; ``models`` is ``realrun.training.torch_models``, or an
    emulated device (``realrun.allreduce.emulated_model.EmulatedModels``)."""

    def __init__(
        self,
        group: dist.ProcessGroup,
        rank: int,
        plan: DataParallelPlan,
        models: ModuleType | EmulatedModels,
    ) -> None:
        self.group, self.rank, self.plan, self.models = group, rank, plan, models
        self.recorder = SpanRecorder(rank)
        with _BUILD_LOCK:  # the global RNG: every rank builds the same start
            torch.manual_seed(plan.seed)
            model = models.build(plan.model)
        if plan.mode == "ddp":
            self.module = wrap_ddp(model, group, plan)
        else:
            self.module = wrap_fsdp(model, group, plan, getattr(models, "fsdp_units", None))
        self.optimizer = torch.optim.SGD(
            self.module.parameters(),
            lr=plan.learning_rate,
            momentum=plan.momentum,
            weight_decay=plan.weight_decay,
        )
        self.sent_bytes_measured = 0  # TCP payload this rank sent over the measured iterations

    def describe(self) -> dict[str, Any]:
        """The compute and communication side of the environment, for the run record."""
        p = self.plan
        comm: dict[str, Any] = {"backend": "gloo", "mode": p.mode}
        if p.mode == "ddp":
            comm |= {"bucket_mb": p.bucket_mb, "first_bucket_mb": p.first_bucket_mb}
        else:
            comm |= {
                "stage": p.stage,
                "fsdp_sharding": "FULL_SHARD" if p.stage == 3 else "SHARD_GRAD_OP",
                "prefetch": p.prefetch,
            }
        compute = getattr(self.models, "describe", None)
        return {
            **(compute() if compute else {}),
            "gradient_aggregation": p.mode,
            "data_parallel": comm,
            "device": "cpu",
            "threads": torch.get_num_threads(),
            "parameters": sum(t.numel() for t in self.module.parameters()),
            "measured_sent_bytes": self.sent_bytes_measured,
            "measured_iterations": p.iterations - p.warmup,
        }

    def batches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """This GPU's synthetic micro-batches, the same seeds as every realrun backend's."""
        p = self.plan
        out = []
        for index in range(DATA_POOL):
            gen = torch.Generator().manual_seed(batch_seed(p.seed, p.host, p.replica, index))
            out.append(
                self.models.synthetic_batch(p.model, p.batch_per_gpu, gen, seq_len=p.seq_len)
            )
        return out

    def run(
        self, on_iteration: Callable[[IterationTiming], None] = lambda t: None
    ) -> list[IterationTiming]:
        """Train ``plan.iterations`` optimizer steps; the bytes sent are counted from the end
        of the warm-up on."""
        batches = self.batches()
        self.group.barrier().wait()
        self.recorder.clock_reference()
        timings = []
        before = 0
        for it in range(self.plan.iterations):
            if it == self.plan.warmup:
                before = sent_bytes(self.plan.store_port)
            timing = self.step(it, batches)
            timings.append(timing)
            on_iteration(timing)
        self.sent_bytes_measured = sent_bytes(self.plan.store_port) - before
        return timings

    def step(self, it: int, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> IterationTiming:
        """One optimizer step: ``micro_batches`` forward/backward passes (DDP's ``no_sync`` on
        all but the last), then SGD. The communication runs inside backward (and forward under
        FSDP), overlapped: no wait of its own is separable, so ``wait_s`` is 0."""
        p = self.plan
        start_wall, start = time.time(), time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for m in range(p.micro_batches):
            x, y = batches[(it * p.micro_batches + m) % len(batches)]
            last = m == p.micro_batches - 1
            accumulate = p.mode == "ddp" and not last
            ctx = self.module.no_sync() if accumulate else contextlib.nullcontext()  # type: ignore[operator]
            with ctx:
                t0 = time.time()
                loss = self.models.loss(self.module(x), y) / p.micro_batches
                t1 = time.time()
                loss.backward()
                self.recorder.add("", "forward", t0, t1, it)
                self.recorder.add("", "backward", t1, time.time(), it)
            loss_sum += float(loss.detach())
        t0 = time.time()
        self.optimizer.step()
        self.recorder.add("", "update", t0, time.time(), it)
        total = time.perf_counter() - start
        return IterationTiming(self.rank, it, start_wall, total, 0.0, total, loss_sum)

    def weights(self) -> list[torch.Tensor]:
        """The full parameters in the zoo's key order, on every rank (FSDP gathers them)."""
        if self.plan.mode == "ddp":
            return [t.detach().clone() for t in self.module.module.parameters()]  # type: ignore[union-attr]
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        with FSDP.summon_full_params(self.module, writeback=False):
            return [t.detach().clone() for t in self.module.parameters()]


def wrap_group(backend: Any, store: dist.Store, rank: int, world_size: int) -> dist.ProcessGroup:
    """A ``ProcessGroup`` around a gloo backend built on this rank's own address
    (``realrun.allreduce.rendezvous.process_group``): DDP and FSDP take a ProcessGroup, not a
    bare backend, and ``init_process_group`` would bind the address the hostname names."""
    if isinstance(backend, dist.ProcessGroup):  # NCCL's, from init_process_group
        return backend
    group = dist.ProcessGroup(store, rank, world_size)
    gloo = dist.ProcessGroup.BackendType.GLOO
    group._set_default_backend(gloo)
    group._register_backend(torch.device("cpu"), gloo, backend)
    return group
