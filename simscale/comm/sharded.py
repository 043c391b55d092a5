"""PyTorch DDP's gradient buckets and ZeRO/FSDP's sharded collectives, over the all-reduce.

All three hand NCCL one collective at a time, in the order they issue them, and the job's
collectives run one after another (simscale.comm.allreduce.AllReduce, with no Horovod cycle or
fusion), each over NVLink inside a host and the NICs between hosts.

- **DDP** (torch/nn/parallel/distributed.py, reducer.cpp): parameters are assigned to buckets in
  reverse registration order, the first capped at 1 MiB and the rest at ``bucket_cap_mb`` (25
  MiB); a bucket is closed once it reaches its cap. When backward has produced every gradient of
  a bucket, its all-reduce is launched, overlapping the rest of backward. The optimizer steps
  when all buckets are reduced. A registered comm hook that scales the bucket first
  (``ddp.comm_hook_passes``: torch's ``allreduce_hook`` runs ``tensor.div_(world size)``,
  default_hooks.py ``_allreduce_fut``; NVIDIA's BERT wraps it in ``bucket.buffer().div_(K)``,
  run_pretraining.py 449-464 at a07d20a) runs those passes on the compute stream when the
  bucket is complete, and NCCL's all-reduce waits for them: each reads and writes the bucket at
  the GPU memory's bandwidth between the bucket's last gradient and its all-reduce. Backward
  kernels queued behind a hook's passes are not held back here, exact where the bucket is the
  last one (NVIDIA's BERT: one bucket after the 1 MiB first). Without a hook the reducer
  divides while copying each gradient into its bucket (reducer.cpp ``mul_out``), no pass of
  its own; that copy, per gradient during backward, is not modelled either way.
- **ZeRO stage 1 and 2** (DeepSpeed stage_1_and_2.py): gradients are reduce-scattered in
  buckets of ``reduce_bucket_size`` as backward fills them, each rank keeping the sum of its
  shard; after the last one every rank updates its shard and the updated parameters are
  all-gathered, the step ending when they all are (an all-reduce's traffic, as the ZeRO paper
  says, but the gather half after backward rather than overlapped with it). Stages 1 and 2 move
  the same bytes; they differ in memory (simscale.zoo.memory).
- **ZeRO stage 3 / FSDP full shard** (torch/distributed/fsdp, DeepSpeed stage3.py): each unit
  (a zoo layer: a transformer block) is all-gathered before its forward and again before its
  backward, ``prefetch`` units ahead, and its gradient reduce-scattered after its backward. The
  root unit (everything outside the blocks: embeddings, final norm, head; ``root_layers``) is
  gathered once before the first forward and kept to the end of backward, as FSDP's
  ``_post_forward_reshard`` leaves the root unsharded. The worker waits for a unit's gather
  (``gather``), which is where stage 3's communication shows.
- **Gradient accumulation at stage 3**: every micro-batch runs its own forward and backward,
  gathering each unit for both and reduce-scattering its gradients. FSDP reshards FULL_SHARD
  units after each backward even under ``no_sync`` (``_should_free_in_backward``), and
  Composer (llm-foundry) and realrun do not enter ``no_sync`` for FSDP, nor does DeepSpeed's
  stage 3 skip its per-micro-step reduce-scatter. Stages 1 and 2 still communicate after the
  last micro-batch only (DeepSpeed stage 1's boundary reduce; stage 2 and SHARD_GRAD_OP
  without no_sync reduce every micro-batch, which is not modelled).

- **HSDP** (``zero.shard_group: host``; FSDP's HYBRID_SHARD, stage 2 its _HYBRID_SHARD_ZERO2;
  DeepSpeed MiCS's idea): the same schedules with each host one shard group and the hosts
  replicas of one another. A gradient's collective is a reduce-scatter inside the host followed
  by the all-reduce of its shard between hosts (FSDP's ``_post_backward_hook``: the
  reduce-scatter, then ``dist.all_reduce`` over the inter-node group), so each host's NIC moves
  2(W-1)/W of the bytes as under DDP; a gather stays inside the host, over NVLink. Against
  full sharding over the world, stage 3 sends 2 instead of 3 times (W-1)/W of the bytes through
  every NIC per micro-batch and gathers at NVLink's rate. The job's collectives still run one
  after another (the module's one queue), though torch runs the host's gathers on a stream of
  their own beside the all-reduces.

The library matters (``collective_library``: gloo where the ranks are CPUs, as realrun and
torch run them, NCCL on GPUs): gloo's reduce-scatter is a whole all-reduce
(``REDUCE_SCATTER_FRACTION``), so FSDP over gloo moves 1.5 times DDP's bytes even at stage 2.
realrun's gpt2_tiny FULL_SHARD (94% of it in the root unit) sends 3(n-1)/n B plus (n-1)/n of
the blocks' bytes per step, what this model sends (tests/simscale/comm/test_sharded.py).
Between exactly two gloo ranks an all-gather also takes 1.5 times its bytes' time: gloo sends
only into announced receives and the two ranks share one connection, so the second rank's
announcements queue behind its own data (``GLOO_PAIR_GATHER_STAGGER``).

The optimizer step itself runs on the worker once its gradients are reduced
(simscale.model.optimizer_step: bytes over the GPU memory's bandwidth, on the rank's shard).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import simpy

from simscale.comm.allreduce import AllReduce
from simscale.comm.communicator import Done
from simscale.spec.scenario import Scenario
from simscale.zoo import ModelSpec
from simscale.zoo.fsdp_units import root_layers

MIB = 2**20
HALF = 0.5  # a reduce-scatter or an all-gather: half an all-reduce's ring steps

# Of an all-reduce's traffic, what each library's reduce-scatter moves. NCCL's ring
# reduce-scatter is half an all-reduce, (n-1)/n of the buffer per rank. gloo has no
# reduce-scatter of its own: torch's ProcessGroupGloo runs it as an all-reduce of the whole
# buffer and keeps the rank's shard, 2(n-1)/n per rank. Measured in realrun with the kernel's
# TCP_INFO byte counts (tests/realrun/allreduce/test_data_parallel.py, docs/realrun-ddp.md):
# FSDP over gloo sends 3(n-1)/n of the gradients' bytes per step at stage 2, where NCCL's
# ZeRO-2 sends 2(n-1)/n. All-gathers are half an all-reduce on both.
REDUCE_SCATTER_FRACTION = {"nccl": HALF, "gloo": 1.0}

# gloo's all-gather between exactly two ranks runs its two directions only half overlapped.
# gloo's TCP transport sends a message only once the peer has announced the matching receive
# (gloo/transport/tcp/pair.cc: ``send`` writes the data at once if the peer's
# NOTIFY_RECV_READY has arrived, else waits for it; ``recv`` writes its NOTIFY_RECV_READY to
# the same socket, behind whatever data is queued there), and its ring all-gather posts, per
# half of the shard, the send before the receive (gloo/allgather.cc). With two ranks a rank's
# left and right neighbour are one peer on one connection: the rank that arrives second (by
# more than one notification's latency, as FSDP ranks do after their own optimizer step) finds
# both of the first's receives announced, queues its two halves, and its own announcements go
# out behind them. The first rank sends its first half only when the second's has arrived and
# its second half when the second's second has: the second rank's half alone, then both
# directions, then the first's last half alone, 1.5 times the shard's time instead of 1. From
# three ranks on, the announcements and the data go to different peers and nothing waits.
# Measured on the emulated cluster (2 hosts, 200 Mbit/s, gloo, torch 2.13; scratch tracer,
# benchmarks/results/ddp_emulated_gloo_pair_gather.txt): a 12.9 MB shard's all-gather took
# 0.54-0.89 s (1.0-1.7x the 0.53 s of one shard at the link's rate, 1.5x typical) where a
# plain TCP exchange of the same bytes both ways at once took 0.534 s every time and gloo's
# all-reduce of twice the bytes 1.076 s every time (its ring posts receives first).
GLOO_PAIR_GATHER_STAGGER = HALF


def gather_stagger(library: str, ranks: int, hybrid: bool = False) -> float:
    """Of each rank's all-gather bytes, the share one rank of a two-rank gloo group sends
    alone before the two directions overlap, and the other alone after
    (GLOO_PAIR_GATHER_STAGGER); 0 for NCCL, for three ranks or more, and for HSDP's gathers
    (inside a host)."""
    if library == "gloo" and ranks == 2 and not hybrid:
        return GLOO_PAIR_GATHER_STAGGER
    return 0.0


def collective_library(scenario: Scenario) -> str:
    """The library torch hands the job's collectives to, as realrun and PyTorch choose it:
    gloo where the workers are CPUs (``gpu: cpu``), NCCL on GPUs."""
    gpus = {g.resolved()[1] for g in scenario.cluster.hosts}
    return "gloo" if gpus == {"cpu"} else "nccl"


def reverse_buckets(key_bytes: list[float], first_cap: float, cap: float) -> list[list[int]]:
    """Keys grouped as DDP's ``compute_bucket_assignment_by_size`` groups them: in reverse
    order, each bucket closed as soon as it holds at least its cap (the first bucket's
    ``first_cap``, the others' ``cap``)."""
    buckets: list[list[int]] = []
    current: list[int] = []
    size = 0.0
    limit = first_cap
    for key in range(len(key_bytes) - 1, -1, -1):
        current.append(key)
        size += key_bytes[key]
        if size >= limit:
            buckets.append(current)
            current, size, limit = [], 0.0, cap
    if current:
        buckets.append(current)
    return buckets


class _Buckets:
    """One worker's readiness per bucket within an iteration."""

    def __init__(self, buckets: list[list[int]], key_bytes: list[float]) -> None:
        self.buckets = buckets
        self.bucket_of = {k: b for b, keys in enumerate(buckets) for k in keys}
        self.bytes = [sum(key_bytes[k] for k in keys) for keys in buckets]
        self.waiting: dict[tuple[int, int], list[Done]] = {}

    def add(self, it: int, key: int, done: Done) -> int | None:
        """Record ``key`` ready; the bucket index once the bucket is complete, else None."""
        b = self.bucket_of[key]
        dones = self.waiting.setdefault((it, b), [])
        dones.append(done)
        return b if len(dones) == len(self.buckets[b]) else None

    def take(self, it: int, b: int) -> list[Done]:
        return self.waiting.pop((it, b))


def _call_all(dones: list[Done]) -> Callable[[float], None]:
    def finish(waited_s: float) -> None:
        for done in dones:
            done(waited_s)

    return finish


@dataclass(frozen=True)
class Span:
    """Where a sharded job's two collectives run, as shares of an all-reduce's traffic inside
    a host and of its ring steps between hosts (``AllReduce.submit``): over the world, a
    reduce-scatter and a gather take the same share of both; under HSDP (``hybrid``) the
    gradients' reduce-scatter in the host is followed by a whole all-reduce of the shard between
    hosts, and the gather stays inside the host."""

    reduce: tuple[float, float]
    gather_across: float

    @classmethod
    def of(cls, reduce_scatter: float, hybrid: bool) -> Span:
        """``reduce_scatter``: the library's REDUCE_SCATTER_FRACTION."""
        if hybrid:
            return cls((reduce_scatter, 1.0), 0.0)
        return cls((reduce_scatter, reduce_scatter), HALF)


class DDPMember:
    """One worker's DDP reducer: a bucket's all-reduce starts once its gradients are ready."""

    def __init__(
        self, ar: AllReduce, worker: int, buckets: _Buckets, hook_s_per_byte: float = 0.0
    ) -> None:
        self.ar, self.worker, self.b = ar, worker, buckets
        # A comm hook's passes over a complete bucket before its all-reduce (module doc), one
        # bucket's after another's on the rank's compute stream.
        self.hook_s_per_byte = hook_s_per_byte
        self.hook_free_at = 0.0

    def communicate(self, iteration: int, key: int, done: Done) -> None:
        b = self.b.add(iteration, key, done)
        if b is None:
            return
        finish = _call_all(self.b.take(iteration, b))
        nbytes = self.b.bytes[b]

        def submit(_event: object = None) -> None:
            self.ar.submit(("ddp", iteration, b), iteration, b, nbytes, 1.0, finish)

        if self.hook_s_per_byte <= 0:
            submit()
            return
        env = self.ar.env
        self.hook_free_at = max(env.now, self.hook_free_at) + nbytes * self.hook_s_per_byte
        env.timeout(self.hook_free_at - env.now).callbacks.append(submit)


class Zero12Member:
    """One worker's ZeRO stage 1/2: bucketed reduce-scatters, then the parameters' all-gather
    after the last, every key's new weights ready when the whole gather is done."""

    def __init__(
        self,
        ar: AllReduce,
        worker: int,
        buckets: _Buckets,
        reduce_scatter: float = HALF,
        hybrid: bool = False,
        stagger: float = 0.0,
    ) -> None:
        self.ar, self.worker, self.b = ar, worker, buckets
        self.reduce_scatter = reduce_scatter  # REDUCE_SCATTER_FRACTION of the library
        self.span = Span.of(reduce_scatter, hybrid)
        self.stagger = stagger  # gather_stagger of the library and the group
        self.reduced: dict[int, int] = {}
        self.dones: dict[int, list[Done]] = {}

    def communicate(self, iteration: int, key: int, done: Done) -> None:
        b = self.b.add(iteration, key, done)
        if b is None:
            return
        self.dones.setdefault(iteration, []).extend(self.b.take(iteration, b))

        def reduced(_waited_s: float) -> None:
            self.reduced[iteration] = self.reduced.get(iteration, 0) + 1
            if self.reduced[iteration] == len(self.b.buckets):
                del self.reduced[iteration]
                self._gather(iteration)

        nbytes, (fraction, across) = self.b.bytes[b], self.span.reduce
        self.ar.submit(("rs", iteration, b), iteration, b, nbytes, fraction, reduced, across)

    def _gather(self, iteration: int) -> None:
        dones = self.dones.pop(iteration)
        left = [len(self.b.buckets)]

        def gathered(waited_s: float) -> None:
            left[0] -= 1
            if left[0] == 0:
                _call_all(dones)(waited_s)

        # Gathered in forward order: the bucket holding the first layers last reduced.
        for b in range(len(self.b.buckets) - 1, -1, -1):
            tag, nbytes, across = ("ag", iteration, b), self.b.bytes[b], self.span.gather_across
            self.ar.submit(tag, iteration, b, nbytes, HALF, gathered, across, self.stagger)


ROOT_UNIT = -1  # the tag of FSDP's root unit (root_layers)


class Zero3Member:
    """One worker's ZeRO stage 3 / FSDP full shard, micro-batch by micro-batch: each unit's
    parameters all-gathered before its forward and its backward (``prefetch`` units ahead), its
    gradients reduce-scattered after its backward. The root unit (``root_layers``) is gathered
    once before the first forward and kept to the end of backward."""

    def __init__(
        self,
        env: simpy.Environment,
        ar: AllReduce,
        worker: int,
        model: ModelSpec,
        bytes_per_element: int,
        prefetch: int,
        reduce_scatter: float = HALF,
        hybrid: bool = False,
        stagger: float = 0.0,
    ) -> None:
        self.env, self.ar, self.worker, self.prefetch = env, ar, worker, prefetch
        self.reduce_scatter = reduce_scatter  # REDUCE_SCATTER_FRACTION of the library
        self.span = Span.of(reduce_scatter, hybrid)
        self.stagger = stagger  # gather_stagger of the library and the group
        layer_bytes = [
            float(sum(a.elements for a in layer.arrays) * bytes_per_element)
            for layer in model.layers
        ]
        root = set(root_layers(model))
        # A layer's unit: its own index, or ROOT_UNIT; the root's bytes are all its layers'.
        self.unit_of = [ROOT_UNIT if i in root else i for i in range(len(layer_bytes))]
        self.unit_bytes = {u: 0.0 for u in self.unit_of}
        self.first_layer: dict[int, int] = {}  # what the collective names (traces)
        for layer, unit in enumerate(self.unit_of):
            self.unit_bytes[unit] += layer_bytes[layer]
            self.first_layer.setdefault(unit, layer)
        # The blocks in forward order: what is gathered (again, before backward) per layer.
        self.blocks = [i for i, u in enumerate(self.unit_of) if u != ROOT_UNIT]
        self.layer_of = list(model.array_layer)
        self.keys_in = {u: 0 for u in self.unit_bytes}
        for layer in self.layer_of:
            self.keys_in[self.unit_of[layer]] += 1
        self.gathers: dict[tuple[int, int, bool, int], simpy.Event] = {}
        self.issued: set[tuple[int, int, bool, int]] = set()
        self.grads: dict[tuple[int, int, int], list[Done]] = {}

    def gather(
        self, iteration: int, layer: int, backward: bool, micro: int = 0
    ) -> simpy.Event | None:
        """The event of ``layer``'s parameters gathered for this pass of micro-batch ``micro``
        (None: nothing to wait for); issues the next ``prefetch`` blocks' gathers too. The
        root unit is gathered with the first forward and never before backward."""
        if not backward and layer == 0:
            # A new pass: forget the previous one's issued gathers.
            self.issued = {t for t in self.issued if t[:2] == (iteration, micro)}
            if ROOT_UNIT in self.unit_bytes:
                self._issue(iteration, micro, False, ROOT_UNIT)
        unit = self.unit_of[layer]
        # The blocks from this layer on in the pass's order: this one (if a block) and the
        # ``prefetch`` after it.
        if backward:
            ahead = [b for b in reversed(self.blocks) if b <= layer]
        else:
            ahead = [b for b in self.blocks if b >= layer]
        for block in ahead[: self.prefetch + (unit != ROOT_UNIT)]:
            self._issue(iteration, micro, backward, block)
        if unit == ROOT_UNIT:
            return self.gathers.pop((iteration, micro, False, ROOT_UNIT), None)
        return self.gathers.pop((iteration, micro, backward, unit), None)

    def _issue(self, iteration: int, micro: int, backward: bool, unit: int) -> None:
        tag = (iteration, micro, backward, unit)
        if tag in self.issued or self.unit_bytes[unit] == 0:
            return
        event = self.env.event()
        self.gathers[tag] = event
        self.issued.add(tag)
        nbytes, first = self.unit_bytes[unit], self.first_layer[unit]
        across, gathered = self.span.gather_across, lambda _w: event.succeed()
        self.ar.submit(
            ("ag3", *tag), iteration, first, nbytes, HALF, gathered, across, self.stagger
        )

    def communicate(self, iteration: int, key: int, done: Done) -> None:
        """The last micro-batch's gradient of ``key``: its unit's reduce-scatter, once the
        unit's every gradient is ready, gives the step its shard (``done``)."""
        self._reduce(iteration, -1, key, done)

    def accumulate(self, iteration: int, micro: int, key: int) -> None:
        """An earlier micro-batch's gradient of ``key``, reduce-scattered as the last one's is:
        FSDP without ``no_sync`` (what llm-foundry's Composer and realrun run: Composer enters
        ``no_sync`` only for DistributedDataParallel, composer/trainer/trainer.py) and DeepSpeed's
        stage 3 reduce every micro-batch into the sharded gradient. Nothing waits for it alone:
        the job's collectives run in order, so the last micro-batch's come after it."""
        self._reduce(iteration, micro, key, None)

    def _reduce(self, iteration: int, micro: int, key: int, done: Done | None) -> None:
        unit = self.unit_of[self.layer_of[key]]
        dones = self.grads.setdefault((iteration, micro, unit), [])
        dones.append(done if done is not None else _ignore)
        if len(dones) == self.keys_in[unit]:
            finish = _call_all(self.grads.pop((iteration, micro, unit)))
            tag, (fraction, across) = ("rs3", iteration, micro, unit), self.span.reduce
            nbytes, first = self.unit_bytes[unit], self.first_layer[unit]
            self.ar.submit(tag, iteration, first, nbytes, fraction, finish, across)


def _ignore(_waited_s: float) -> None:
    """An accumulation micro-batch's reduce-scatter done: nothing waits on it alone."""


def members(
    env: simpy.Environment,
    ar: AllReduce,
    workers: int,
    mode: str,
    model: ModelSpec,
    key_bytes: list[float],
    bytes_per_element: int,
    *,
    bucket_mb: float,
    first_bucket_mb: float,
    zero_stage: int,
    zero_bucket_mb: float,
    prefetch: int,
    library: str = "nccl",
    hybrid: bool = False,
    ranks: int | None = None,
    hook_s_per_byte: float = 0.0,
) -> list[DDPMember | Zero12Member | Zero3Member]:
    """Each worker's communicator for ``mode`` "ddp" or "zero" (module doc), its
    reduce-scatters as ``library`` ("nccl" or "gloo", ``collective_library``) runs them;
    ``hybrid``: zero sharded inside each host (HSDP); ``ranks``: the processes in the group
    (one per GPU, by default one per worker host), which decide gloo's two-rank stagger;
    ``hook_s_per_byte``: DDP's comm-hook passes, seconds per bucket byte."""
    rs = REDUCE_SCATTER_FRACTION[library]
    stagger = gather_stagger(library, workers if ranks is None else ranks, hybrid)
    if mode == "ddp":
        groups = reverse_buckets(key_bytes, first_bucket_mb * MIB, bucket_mb * MIB)
        return [
            DDPMember(ar, w, _Buckets(groups, key_bytes), hook_s_per_byte) for w in range(workers)
        ]
    if zero_stage in (1, 2):
        cap = zero_bucket_mb * 1e6
        groups = reverse_buckets(key_bytes, cap, cap)
        return [
            Zero12Member(ar, w, _Buckets(groups, key_bytes), rs, hybrid, stagger)
            for w in range(workers)
        ]
    return [
        Zero3Member(env, ar, w, model, bytes_per_element, prefetch, rs, hybrid, stagger)
        for w in range(workers)
    ]
