"""The scenario file: one YAML document describing a cluster, a model and how it trains.

Shared by the simulator, realrun and calibration. Loading validates everything up front; any
problem becomes a ``ScenarioError`` whose message names the file, the field path, the bad value
and what was expected.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from simscale import zoo
from simscale.spec import hardware
from simscale.spec.config import (
    ConfigError,
    above,
    apply_overrides,
    between,
    count_in,
    from_mapping,
    read_yaml,
    to_mapping,
)
from simscale.spec.sharding import DEFAULT_BIGARRAY_BOUND
from simscale.spec.unknowns import FactRange
from simscale.zoo.batchnorm_layout import transposed_batchnorms
from simscale.zoo.checkpointing import checkpointed
from simscale.zoo.memory import MemoryUse, memory_use

ScenarioError = ConfigError

Mode = Literal[
    "local",
    "device",
    "dist_sync",
    "dist_async",
    "dist_sync_device",
    "dist_async_device",
    "allreduce",
    "ddp",
    "zero",
]
DIST_MODES = ("dist_sync", "dist_async", "dist_sync_device", "dist_async_device")
# Modes of collective data parallelism (one rank per GPU, NCCL): PyTorch DDP and ZeRO/FSDP.
COLLECTIVE_MODES = ("allreduce", "ddp", "zero")

# Physical ranges of the numbers a scenario may hold. Generous on purpose (a scenario for next
# decade's hardware must still load), but bounded, so that an absurd or mistyped value (10^12
# hosts, a NIC of 5e-324 Gbit/s, a batch of 1e308) is refused with a clear line instead of
# exhausting memory or spinning the simulator. The largest clusters built so far have about
# 10^5 GPUs; the fastest NICs sold run at 800 Gbit/s; light crosses the Earth in ~70 ms.
MAX_HOSTS = 100_000  # worker hosts in all groups together, and servers
MAX_GPUS_PER_HOST = 64
MIN_NIC_GBPS, MAX_NIC_GBPS = 0.001, 100_000.0  # 1 Mbit/s .. 100 Tbit/s
MAX_LATENCY_US = 1_000_000.0  # one second one-way
MAX_CPU_CORES = 4096
MAX_ARRAY_ELEMENTS = 10**11  # 400 GB in fp32: larger than any single tensor trained today
MAX_LAYER_GFLOPS = 1e6  # forward GFLOP per sample of one layer (a whole GPT-3 pass: ~3.5e2/token)
MAX_BATCH_PER_GPU = 1_000_000
MAX_ITERATIONS = 1_000_000
MAX_SEED = 2**63 - 1  # numpy's Generator takes any non-negative integer; this bounds its size
MAX_MB = 1e6  # buffers and windows, in MB (1 TB)
MAX_MS = 1e6  # cycles, in ms (1000 s)
MAX_NCCL_SOCKETS = 64  # NCCL's MAX_SOCKETS (src/transport/net_socket.cc)
# The precisions NVIDIA's FusedLAMBAMP steps (fp32 parameters: fp32, tf32, amp; half ones: fp16).
LAMB_PRECISIONS = ("fp32", "tf32", "amp", "fp16")


def _known(name: str, choices: Sequence[str], what: str) -> None:
    if name not in choices:
        close = difflib.get_close_matches(name, list(choices), n=1)
        hint = f"did you mean {close[0]!r}?" if close else "known: " + ", ".join(sorted(choices))
        raise ConfigError("", f"unknown {what} {name!r} ({hint})")


def _known_at(path: str, name: str, choices: Sequence[str], what: str) -> None:
    try:
        _known(name, choices, what)
    except ConfigError as e:
        raise ConfigError(path, e.problem) from None


def _network_and_cpu(
    preset: hardware.InstanceSpec | None,
    nic_gbps: float | None,
    latency_us: float | None,
    cpu_cores: int | None,
) -> tuple[float, float, int]:
    """(NIC Gbit/s, one-way latency us, CPU cores): explicit values, else the preset's (cores:
    half the vCPUs, i.e. physical cores), else the defaults."""
    nic = nic_gbps if nic_gbps is not None else preset.nic_gbps  # type: ignore[union-attr]
    lat = latency_us if latency_us is not None else hardware.DEFAULT_LATENCY_US
    cores = cpu_cores if cpu_cores is not None else (preset.vcpus // 2 if preset else 8)
    return nic, lat, cores


# Checks shared by worker and server host groups (a host is a host, whoever runs on it).
NIC_GBPS = between(MIN_NIC_GBPS, MAX_NIC_GBPS, "Gbit/s")
LATENCY_US = between(0.0, MAX_LATENCY_US, "us, one-way per NIC")
CPU_CORES = count_in(1, MAX_CPU_CORES)
USD_PER_HOUR = between(0.0, 10_000.0, "USD per host-hour")


@dataclass(frozen=True)
class HostGroup:
    """``count`` identical worker hosts: an instance preset, or GPUs and NIC given explicitly
    (explicit fields override the preset's)."""

    count: int = field(metadata=count_in(1, MAX_HOSTS, "hosts"))
    instance: str | None = None
    gpus_per_host: int | None = field(default=None, metadata=count_in(1, MAX_GPUS_PER_HOST))
    gpu: str | None = None
    nic_gbps: float | None = field(default=None, metadata=NIC_GBPS)
    latency_us: float | None = field(default=None, metadata=LATENCY_US)
    cpu_cores: int | None = field(default=None, metadata=CPU_CORES)
    # Price of one host per hour; overrides the instance preset's on-demand price.
    usd_per_hour: float | None = field(default=None, metadata=USD_PER_HOUR)
    # Worker processes per host, each driving gpus_per_host / workers_per_host GPUs. 1 is
    # MXNet's layout: one worker sums its GPUs' gradients before they leave the host. The
    # host's GPU count is one worker per GPU, as TensorFlow's parameter_server and
    # PyTorch-style PS jobs run: every GPU pushes and pulls the whole model over the host's NIC.
    workers_per_host: int = field(default=1, metadata=count_in(1, MAX_GPUS_PER_HOST))
    # How the NIC carries collectives: "tcp" sockets, whose single connection has a throughput
    # ceiling of its own (costs.connection_gbps) and whose host moves at most
    # costs.socket_host_gbps; "rdma" (InfiniBand, RoCE with NCCL's IB transport), where the NIC
    # moves the bytes at the link's rate; or "efa" (AWS's Elastic Fabric Adapter through its
    # libfabric plugin), whose ring reaches costs.efa_ring_share of the link. Unset: the
    # instance preset's (efa on EFA instances), else tcp. All-reduce only: a parameter server's
    # connections are TCP either way (ps-lite's ZMQ van, gRPC).
    transport: Literal["tcp", "rdma", "efa"] | None = None
    # NICs of the host, rail-aligned (GPU i's channels on NIC i mod nics, as NCCL places them).
    # With it, nic_gbps is ONE NIC's rate. Unset: the instance preset's NICs (nic_gbps, if
    # given, then one of them), else 1. The network carries the host as one link of all its NICs
    # together: a collective spreads over every rail evenly, so they fill and empty alike.
    nics_per_host: int | None = field(default=None, metadata=count_in(1, 64, "NICs"))

    def validate(self) -> None:
        self._validate_hardware()
        gpus = self.resolved()[0]
        if gpus % self.workers_per_host:
            raise ConfigError(
                "workers_per_host",
                f"got {self.workers_per_host}, expected a divisor of the host's {gpus} GPUs "
                "(every worker drives the same number of GPUs)",
            )

    def _validate_hardware(self) -> None:
        if self.instance is not None:
            _known_at("instance", self.instance, list(hardware.INSTANCES), "instance")
            preset = hardware.INSTANCES[self.instance]
            if preset.gpus == 0 and self.gpus_per_host is None:
                raise ConfigError(
                    "instance",
                    f"{self.instance!r} has no GPUs, expected a GPU instance for "
                    "worker hosts (or set gpus_per_host and gpu)",
                )
        else:
            for name in ("gpus_per_host", "gpu", "nic_gbps"):
                if getattr(self, name) is None:
                    raise ConfigError(name, "missing, expected it (or an instance preset)")
        if self.gpu is not None:
            _known_at("gpu", self.gpu, list(hardware.GPUS), "gpu")

    def _preset(self) -> hardware.InstanceSpec | None:
        return hardware.INSTANCES.get(self.instance) if self.instance else None

    def resolved(self) -> tuple[int, str, float, float, int]:
        """(gpus, gpu name, nic Gbit/s of all the host's NICs, one-way latency us, cpu cores)
        after applying presets."""
        p = self._preset()
        gpus = self.gpus_per_host if self.gpus_per_host is not None else p.gpus  # type: ignore[union-attr]
        gpu = self.gpu if self.gpu is not None else p.gpu  # type: ignore[union-attr]
        nic, lat, cores = _network_and_cpu(p, self.nic_gbps, self.latency_us, self.cpu_cores)
        nics = self.resolved_nics()
        if self.nic_gbps is not None:
            nic = self.nic_gbps * nics
        elif p is not None and nics != p.nics:
            nic = p.nic_gbps / p.nics * nics
        return gpus, str(gpu), nic, lat, cores

    def resolved_nics(self) -> int:
        """NICs of each host: the group's own, else its preset's, else 1."""
        if self.nics_per_host is not None:
            return self.nics_per_host
        p = self._preset()
        return p.nics if p is not None else 1

    def resolved_nccl_sockets(self) -> int:
        """The TCP sockets NCCL opens per ring neighbour by default on these hosts: the
        instance preset's (16 on AWS), else 1."""
        p = self._preset()
        return p.nccl_sockets if p is not None else 1

    def resolved_transport(self) -> str:
        """ "tcp", "rdma" or "efa": the group's own, else its instance preset's, else tcp."""
        if self.transport is not None:
            return self.transport
        p = self._preset()
        return p.transport if p is not None else "tcp"


@dataclass(frozen=True)
class ServerHostGroup:
    """Dedicated parameter-server hosts (placement: dedicated)."""

    count: int = field(metadata=count_in(1, MAX_HOSTS, "hosts"))
    instance: str | None = None
    nic_gbps: float | None = field(default=None, metadata=NIC_GBPS)
    latency_us: float | None = field(default=None, metadata=LATENCY_US)
    cpu_cores: int | None = field(default=None, metadata=CPU_CORES)
    # Price of one host per hour; overrides the instance preset's on-demand price.
    usd_per_hour: float | None = field(default=None, metadata=USD_PER_HOUR)

    def validate(self) -> None:
        if self.instance is not None:
            _known_at("instance", self.instance, list(hardware.INSTANCES), "instance")
        elif self.nic_gbps is None:
            raise ConfigError("nic_gbps", "missing, expected it (or an instance preset)")

    def resolved(self) -> tuple[float, float, int]:
        """(nic Gbit/s, one-way latency us, cpu cores) after applying the preset."""
        p = hardware.INSTANCES.get(self.instance) if self.instance else None
        return _network_and_cpu(p, self.nic_gbps, self.latency_us, self.cpu_cores)


@dataclass(frozen=True)
class ClusterConfig:
    """Worker host groups, optional dedicated server hosts, and the switch core."""

    hosts: tuple[HostGroup, ...]
    server_hosts: ServerHostGroup | None = None
    # Ratio of the hosts' total NIC bandwidth to the core's capacity; 1 = non-blocking.
    core_oversubscription: float = field(default=1.0, metadata=between(1.0, 1000.0))
    # All processes of all hosts share this many CPU cores (an emulated cluster on one
    # machine); unset, every process has CPU of its own.
    shared_cpu_cores: int | None = field(default=None, metadata=count_in(1, MAX_CPU_CORES))

    def validate(self) -> None:
        if not self.hosts:
            raise ConfigError("hosts", "empty, expected at least one host group")
        total = sum(g.count for g in self.hosts)
        if total > MAX_HOSTS:
            raise ConfigError(
                "hosts", f"{total:,} worker hosts in all, expected at most {MAX_HOSTS:,}"
            )


@dataclass(frozen=True)
class ArrayConfig:
    """One parameter array of an explicitly described model."""

    name: str
    elements: int = field(metadata=count_in(1, MAX_ARRAY_ELEMENTS))
    fwd_gflops: float = field(
        default=0.0, metadata=between(0.0, MAX_LAYER_GFLOPS, "GFLOP per sample")
    )


@dataclass(frozen=True)
class ModelConfig:
    """A zoo model by name, or explicit parameter arrays (each array its own layer)."""

    name: str | None = None
    arrays: tuple[ArrayConfig, ...] | None = None

    def validate(self) -> None:
        if (self.name is None) == (self.arrays is None):
            raise ConfigError("", "expected exactly one of 'name' (a zoo model) or 'arrays'")
        if self.name is not None:
            _known_at("name", self.name, zoo.names(), "model")
        if self.arrays is not None and not self.arrays:
            raise ConfigError("arrays", "empty, expected at least one array")

    def spec(self, seq_len: int | None = None) -> zoo.ModelSpec:
        """The model's parameter arrays and per-layer FLOPs (a sequence model's at ``seq_len``
        tokens per sample, else at the zoo's default)."""
        if self.name is not None:
            return zoo.get(self.name, seq_len)
        assert self.arrays is not None
        layers = tuple(
            zoo.Layer(a.name, a.fwd_gflops * 1e9, (zoo.ParamArray(a.name, (a.elements,)),))
            for a in self.arrays
        )
        return zoo.ModelSpec("custom", layers, source="explicit arrays in the scenario")


@dataclass(frozen=True)
class OptimizerConfig:
    """SGD with momentum and weight decay, applied on the servers (MXNet's updater), Adam, as
    transformers train, or LAMB (NVIDIA's FusedLAMBAMP for BERT: Adam's moments, six passes
    over the parameters per step; fp16 or fp32 parameters only); the kind sets the optimizer
    state a GPU holds (simscale.zoo.memory) and, under DDP and ZeRO, the bytes its step streams
    (simscale.model.optimizer_step)."""

    type: Literal["sgd", "adam", "lamb"] = "sgd"
    learning_rate: float = field(default=0.1, metadata=above(0.0, 1000.0))
    momentum: float = field(default=0.9, metadata=between(0.0, 0.999))
    weight_decay: float = field(default=1e-4, metadata=between(0.0, 1.0))


@dataclass(frozen=True)
class TrainingConfig:
    batch_per_gpu: int = field(metadata=count_in(1, MAX_BATCH_PER_GPU, "samples"))
    # "fp16": the network itself is cast to half precision (MXNet's net.cast('float16'), NVIDIA's
    # --dtype float16), so gradients travel as fp16. "amp": automatic mixed precision (torch
    # autocast and apex O1, TensorFlow's AMP rewrite and Keras' mixed_float16, MXNet's
    # contrib.amp, Paddle's mixed_precision.decorate): fp16 math on fp32 weights, so gradients
    # and weights travel as fp32, twice fp16's bytes.
    # "tf32": fp32 weights and gradients, matrix products on TF32 tensor cores (A100, H100).
    # "bf16": bf16 compute with fp32 master weights, gradients reduced in bf16 (Megatron-LM,
    # DeepSpeed and FSDP's bf16 mixed precision). "fp8": bf16 as above with the matrix products
    # in FP8 (Transformer Engine, H100).
    precision: Literal["fp32", "tf32", "fp16", "amp", "bf16", "fp8"] = "fp32"
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    # Samples in one epoch and epochs to train: with both, results report time and cost to train.
    dataset_samples: int | None = field(default=None, metadata=count_in(1, 10**13, "samples"))
    epochs: float | None = field(default=None, metadata=above(0.0, 1e6, "epochs"))
    # Where samples come from: "synthetic" tensors already on the GPUs (benchmark scripts'
    # default), or "images" read and decoded on each host's CPU cores
    # (simscale.model.input_pipeline).
    data: Literal["synthetic", "images"] = "synthetic"
    # With images: the threads (or loader processes) each training process decodes with, as its
    # script sets them (gluon-cv's --data-nthreads, MXNet's preprocess_threads). None: the
    # processes on a host share all of its cores. A process never gets more than its share.
    data_threads: int | None = field(default=None, metadata=count_in(1, MAX_CPU_CORES, "threads"))
    # Tokens per sample of a sequence model (GPT-2, BERT, Llama); unset: the zoo's default.
    seq_len: int | None = field(default=None, metadata=count_in(1, 10**7, "tokens"))
    # Gradient accumulation: micro-batches of batch_per_gpu each GPU runs per optimizer step,
    # communicating after the last only (DDP's no_sync, DeepSpeed's accumulation steps).
    micro_batches: int = field(default=1, metadata=count_in(1, 100_000, "micro-batches"))
    # How attention keeps its s x s scores for backward: "eager" stores them (Korthikanti et
    # al.'s 5·a·s² bytes per block); "flash" (FlashAttention, PyTorch SDPA's flash kernel,
    # llm-foundry's triton attn_impl) recomputes them in backward and stores none. Memory only.
    attention: Literal["eager", "flash"] = "eager"
    # Activation checkpointing of each transformer block (Korthikanti et al. 2022): "selective"
    # recomputes attention's s x s part in backward instead of storing it, "full" keeps only
    # each block's input and reruns its forward (simscale.zoo.checkpointing). Memory and
    # compute.
    activation_checkpointing: Literal["none", "selective", "full"] = "none"
    # "transposed": the framework runs each batch norm in NCHW inside an NHWC graph and
    # transposes around it (TensorFlow 2's fused batch norm on a fp16 graph without
    # TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT=1; simscale.zoo.batchnorm_layout). Compute.
    batchnorm_layout: Literal["native", "transposed"] = "native"

    @property
    def compute_precision(self) -> str:
        """The precision the GPUs compute in (its peak and efficiency): amp computes in fp16."""
        return "fp16" if self.precision == "amp" else self.precision

    @property
    def gradient_precision(self) -> str:
        """The precision gradients and weights cross the network in: amp and tf32 keep fp32
        weights; bf16 and fp8 reduce gradients in bf16."""
        return {"amp": "fp32", "tf32": "fp32", "fp8": "bf16"}.get(self.precision, self.precision)


@dataclass(frozen=True)
class CompressionConfig:
    """MXNet's 2-bit gradient compression (worker→server only)."""

    type: Literal["none", "2bit"] = "none"
    threshold: float = field(default=0.5, metadata=above(0.0, 1e6))


@dataclass(frozen=True)
class AllreduceConfig:
    """Ring all-reduce in the style of Horovod, the alternative to a parameter server."""

    algorithm: Literal["ring", "hierarchical"] = "hierarchical"
    # Horovod's default buffer and cycle
    fusion_mb: float = field(default=64.0, metadata=above(0.0, MAX_MB, "MB"))
    cycle_ms: float = field(default=5.0, metadata=between(0.0, MAX_MS, "ms"))
    # TCP sockets NCCL opens to each ring neighbour (NCCL_SOCKET_NTHREADS x
    # NCCL_NSOCKS_PERTHREAD), each at most costs.connection_gbps. Unset: NCCL's own choice,
    # 16 on the AWS presets (ENA NIC, NCCL 2.4.8 and later), else 1. tcp hosts only.
    # The flat ring's only: hierarchical crosses hosts with MPI, a connection per local rank.
    sockets: int | None = field(default=None, metadata=count_in(1, MAX_NCCL_SOCKETS))
    # Where the sums happen: "gpu" (NCCL, Horovod's HOROVOD_GPU_ALLREDUCE=NCCL) or "host":
    # Horovod without it, whose MPI_Allreduce runs in host memory (each fused buffer copied
    # GPU->host over PCIe and into Horovod's fusion buffer, reduced by Open MPI's lockstep ring
    # (in 1 MiB segments above a MiB per rank) over every GPU's rank with the CPU summing,
    # copied back; simscale.comm.allreduce, costs.host_reduce_gbytes_per_s).
    reduce_in: Literal["gpu", "host"] = "gpu"


@dataclass(frozen=True)
class DDPConfig:
    """PyTorch DistributedDataParallel's gradient buckets (torch/nn/parallel/distributed.py)."""

    # bucket_cap_mb's default, in MiB as torch counts it (25 * 1024 * 1024 bytes)
    bucket_mb: float = field(default=25.0, metadata=above(0.0, MAX_MB, "MiB"))
    # dist._DEFAULT_FIRST_BUCKET_BYTES: 1 MiB, so the first all-reduce starts early
    first_bucket_mb: float = field(default=1.0, metadata=above(0.0, MAX_MB, "MiB"))
    # Element-wise passes a registered comm hook makes over each bucket before its all-reduce,
    # each reading and writing the bucket at the GPU memory's bandwidth
    # (simscale.comm.sharded.DDPMember). torch's default_hooks.allreduce_hook divides by the
    # world size (1); NVIDIA's BERT pre-training wraps it to divide by the accumulation steps
    # first (2). 0, no hook: the reducer divides while it copies each gradient into its bucket
    # (reducer.cpp, mark_variable_ready_dense's mul_out), no pass of its own.
    comm_hook_passes: int = field(default=0, metadata=count_in(0, 16, "passes"))


@dataclass(frozen=True)
class ZeroConfig:
    """ZeRO (DeepSpeed) and FSDP sharding: what each rank keeps only its 1/N of."""

    # 1: optimizer state; 2: and gradients; 3: and parameters (FSDP's FULL_SHARD; 2 is its
    # SHARD_GRAD_OP).
    stage: int = field(default=3, metadata=count_in(1, 3, "stage"))
    # Gradient bytes reduce-scattered together in stages 1 and 2 (DeepSpeed's reduce_bucket_size
    # default, 5e8 elements, in bf16: 1,000 MB). Stage 3 gathers and reduces one zoo layer (an
    # FSDP unit: a transformer block) at a time.
    bucket_mb: float = field(default=1000.0, metadata=above(0.0, MAX_MB, "MB"))
    # Stage 3: units gathered ahead of the one computing (FSDP's forward/backward prefetch).
    prefetch: int = field(default=1, metadata=count_in(0, 64, "units"))
    # The GPUs a shard is spread over: "world" (every rank, ZeRO and FSDP's FULL_SHARD /
    # SHARD_GRAD_OP) or "host" (HSDP: FSDP's HYBRID_SHARD at stage 3, _HYBRID_SHARD_ZERO2 at 2,
    # the idea of DeepSpeed's MiCS: shard inside each host, replicate across hosts; gradients
    # reduce-scattered in the host and their shard all-reduced between hosts, parameters
    # gathered inside the host only).
    shard_group: Literal["world", "host"] = "world"


@dataclass(frozen=True)
class KVStoreConfig:
    mode: Mode = "dist_sync"
    # 0 is a mode without servers (allreduce, local, device) said explicitly, as the tables
    # print it; a dist_* mode needs at least one (checked with the mode).
    servers: int | None = field(default=None, metadata=count_in(0, MAX_HOSTS))
    placement: Literal["colocated", "dedicated"] = "colocated"
    bigarray_bound: int = field(
        default=DEFAULT_BIGARRAY_BOUND, metadata=count_in(1, MAX_ARRAY_ELEMENTS, "elements")
    )
    gradient_compression: CompressionConfig = field(default_factory=CompressionConfig)
    # How a worker's and a server's messages leave: "fifo" as MXNet over ps-lite (in order, per
    # connection), or "priority" as P3/ByteScheduler (control first, then earliest layer).
    scheduling: Literal["fifo", "priority"] = "fifo"
    # With "priority": data bytes a connection may have in flight before later messages wait in
    # the application queue (0: one message at a time, P3's credit; realrun, which honours both
    # fields, reads 0 as its own 0.25).
    send_window_mb: float = field(default=0.0, metadata=between(0.0, MAX_MB, "MB"))
    # When a worker asks for a key's new weights: "after_ack" as MXNet (the pull depends on the
    # push, whose ack the server sends after the update), or "with_push" as BytePS and realrun's
    # pipelined pushpull (the request follows the push at once and waits at the server). realrun
    # runs both; records written before it honoured this field ran with_push.
    pull_request: Literal["after_ack", "with_push"] = "after_ack"
    # The RPC stack the PS messages go through: "ps-lite" as MXNet (zmq sends tensors from their
    # own buffers), or "grpc" as TensorFlow's parameter servers, whose server process copies every
    # tensor byte through protobuf and gRPC buffers (costs.grpc_ns_per_byte). realrun speaks
    # ps-lite only.
    rpc: Literal["ps-lite", "grpc"] = "ps-lite"
    # Which server holds each array kept whole (simscale.spec.sharding.place_keys): "hash" as MXNet
    # (key * 9973 mod servers), or as TensorFlow's parameter servers place variables, "greedy"
    # (each, in creation order, to the PS holding the fewest bytes: tf_cnn_benchmarks'
    # parameter_server) or "round_robin" (to the PS tasks in turn after the global step: its
    # distributed_replicated; use the model as TensorFlow builds it, e.g. inception_v3_tf).
    # realrun places keys by MXNet's hash only.
    key_placement: Literal["hash", "greedy", "round_robin"] = "hash"
    # How a synchronous PS job waits for its workers: "key" as MXNet's dist_sync (a server
    # merges every worker's push of a key, updates it once, then answers its pulls; TensorFlow's
    # distributed_replicated alike, with a barrier per variable), or "step" as tf_cnn_benchmarks'
    # parameter_server (each worker's gradient applied on its server as it comes, the workers
    # meeting at a barrier at the end of the step, the next step reading every variable anew;
    # simscale.comm.ps.step_barrier). realrun runs "key" only.
    sync: Literal["key", "step"] = "key"
    allreduce: AllreduceConfig = field(default_factory=AllreduceConfig)
    ddp: DDPConfig = field(default_factory=DDPConfig)
    zero: ZeroConfig = field(default_factory=ZeroConfig)


@dataclass(frozen=True)
class SimulationConfig:
    warmup_iterations: int = field(default=2, metadata=count_in(0, MAX_ITERATIONS))
    measured_iterations: int = field(default=10, metadata=count_in(1, MAX_ITERATIONS))
    # Stop measuring early once the last iterations agree within this relative tolerance.
    stable_tolerance: float = field(default=0.01, metadata=between(0.0, 1.0))
    seed: int = field(default=0, metadata=count_in(0, MAX_SEED))
    network_model: Literal["fairshare", "fifo"] = "fairshare"
    # Relative standard deviation of each GPU's compute time per iteration (stragglers).
    compute_jitter: float = field(default=0.0, metadata=between(0.0, 1.0))


@dataclass(frozen=True)
class RealrunConfig:
    """How realrun executes the scenario (ignored by the simulator)."""

    compute: Literal["real", "emulated"] = "real"
    # Where emulated compute takes its per-layer times: "measured" on this machine's device
    # (realrun.training.compute_profile), "model" for the scenario's GPU
    # (simscale.model.compute), "auto"
    # =
    # measured when the workers' GPU is "cpu" (the device here), model for an accelerator.
    compute_times: Literal["auto", "measured", "model"] = "auto"
    dilation: float = field(default=1.0, metadata=between(1.0, 10_000.0))
    threads_per_worker: int = field(default=1, metadata=count_in(1, MAX_CPU_CORES))
    device: Literal["auto", "cpu", "cuda"] = "auto"


@dataclass(frozen=True)
class Scenario:
    cluster: ClusterConfig
    model: ModelConfig
    training: TrainingConfig
    kvstore: KVStoreConfig = field(default_factory=KVStoreConfig)
    simulation: SimulationConfig = field(default_factory=SimulationConfig)
    realrun: RealrunConfig = field(default_factory=RealrunConfig)
    name: str = ""
    description: str = ""
    # Facts the scenario does not know, as ranges with their public source (simscale.spec.
    # unknowns): `predict --interval` samples them. A preset's ranges apply without this.
    unknowns: tuple[FactRange, ...] = ()

    def validate(self) -> None:
        kv = self.kvstore
        for i, r in enumerate(self.unknowns):
            if r.group is not None and r.group >= len(self.cluster.hosts):
                raise ConfigError(
                    f"unknowns[{i}].group",
                    f"got {r.group}, expected a host group index below "
                    f"{len(self.cluster.hosts)} (cluster.hosts)",
                )
        n_hosts = self.num_worker_hosts
        if self.training.data_threads is not None and self.training.data != "images":
            raise ConfigError(
                "training.data_threads",
                f"got {self.training.data_threads} with training.data "
                f"{self.training.data!r}, expected training.data 'images' (threads decode images)",
            )
        if kv.mode not in DIST_MODES:
            for i, g in enumerate(self.cluster.hosts):
                if g.workers_per_host > 1:
                    raise ConfigError(
                        f"cluster.hosts[{i}].workers_per_host",
                        f"got {g.workers_per_host} with kvstore.mode {kv.mode!r}, expected 1: "
                        "it applies to the parameter-server (dist_*) modes; all-reduce already "
                        "runs one rank per GPU (ring) or per host (hierarchical)",
                    )
        if kv.mode in ("local", "device") and n_hosts != 1:
            raise ConfigError(
                "kvstore.mode",
                f"got {kv.mode!r} with {n_hosts} worker hosts, expected a dist_* "
                "mode (or allreduce) for more than one host",
            )
        if kv.sync == "step" and (
            kv.mode not in ("dist_sync", "dist_sync_device") or kv.pull_request != "after_ack"
        ):
            raise ConfigError(
                "kvstore.sync",
                f"got 'step' with kvstore.mode {kv.mode!r} and pull_request "
                f"{kv.pull_request!r}, expected mode dist_sync or dist_sync_device with "
                "pull_request after_ack (a step barrier synchronises parameter-server workers "
                "that read their weights after it)",
            )
        self._validate_model_and_precision()
        if kv.zero.shard_group == "host":
            self._validate_host_shards()
        if kv.mode in ("ddp", "zero"):
            self._validate_memory()
        if kv.mode not in DIST_MODES:
            return
        if kv.servers == 0:
            raise ConfigError(
                "kvstore.servers",
                f"got 0 with kvstore.mode {kv.mode!r}, expected at least 1: a parameter-server "
                "mode needs servers (0 fits the modes without them: allreduce, local, device)",
            )
        if kv.placement == "colocated":
            if kv.servers is not None and kv.servers > n_hosts:
                raise ConfigError(
                    "kvstore.servers",
                    f"got {kv.servers}, expected at most {n_hosts} (one per "
                    "worker host) with placement 'colocated'; use placement 'dedicated' and "
                    "cluster.server_hosts for more",
                )
            if self.cluster.server_hosts is not None:
                raise ConfigError(
                    "cluster.server_hosts",
                    "given, but kvstore.placement is 'colocated'; "
                    "expected placement 'dedicated' to use dedicated server hosts",
                )
        else:
            if self.cluster.server_hosts is None:
                raise ConfigError(
                    "cluster.server_hosts",
                    "missing, expected dedicated server hosts because "
                    "kvstore.placement is 'dedicated'",
                )

    def _validate_model_and_precision(self) -> None:
        t = self.training
        name = self.model.name
        if t.seq_len is not None:
            if name is None or not zoo.is_sequence_model(name):
                raise ConfigError(
                    "training.seq_len",
                    f"got {t.seq_len} with model {name or 'of explicit arrays'}, expected a "
                    "sequence model (gpt2*, bert_*, llama*); an image model's sample is an image",
                )
            try:
                self.model_spec()
            except ValueError as e:
                raise ConfigError("training.seq_len", str(e)) from None
        layers = self.model.spec(t.seq_len).layers
        for key, value, off, applies, expected in (
            (
                "activation_checkpointing",
                t.activation_checkpointing,
                "none",
                any(layer.input_bytes > 0 for layer in layers),
                "a transformer (its blocks are what is checkpointed)",
            ),
            (
                "batchnorm_layout",
                t.batchnorm_layout,
                "native",
                any(layer.batchnorm_elements > 0 for layer in layers),
                "a model with batch norms (resnet*, inception_v3*)",
            ),
        ):
            if value != off and not applies:
                raise ConfigError(
                    f"training.{key}",
                    f"got {value!r} with model {name or 'of explicit arrays'}, "
                    f"expected {off!r} or {expected}",
                )
        if t.optimizer.type == "lamb" and t.precision not in LAMB_PRECISIONS:
            raise ConfigError(
                "training.optimizer.type",
                f"got 'lamb' with training.precision {t.precision!r}, expected precision "
                f"{', '.join(LAMB_PRECISIONS)} (NVIDIA's FusedLAMBAMP steps fp16 and fp32 "
                "parameters only) or optimizer adam",
            )
        for i, g in enumerate(self.cluster.hosts):
            gpu = hardware.GPUS[g.resolved()[1]]
            if not gpu.supports(t.compute_precision):
                have = [p for p in ("tf32", "bf16", "fp8") if gpu.supports(p)]
                raise ConfigError(
                    "training.precision",
                    f"got {t.precision!r}, but cluster.hosts[{i}]'s {gpu.name} has no "
                    f"{t.compute_precision} units; expected fp32, fp16, amp"
                    + "".join(f", {p}" for p in have),
                )

    def _validate_host_shards(self) -> None:
        """HSDP shards inside each host: only under zero, and every host must hold as many GPUs
        (its replicas all-reduce shard by shard between hosts)."""
        kv = self.kvstore
        if kv.mode != "zero":
            raise ConfigError(
                "kvstore.zero.shard_group",
                f"got 'host' with kvstore.mode {kv.mode!r}, expected kvstore.mode zero "
                "(HSDP shards a zero job inside each host)",
            )
        gpus = sorted({g.resolved()[0] for g in self.cluster.hosts})
        if len(gpus) > 1:
            raise ConfigError(
                "kvstore.zero.shard_group",
                f"got 'host' with hosts of {', '.join(map(str, gpus))} GPUs, expected hosts "
                "that all hold as many GPUs (each host is one shard group) or shard_group world",
            )

    def _validate_memory(self) -> None:
        """Refuse a sharded or DDP job whose rank does not fit its GPU (simscale.zoo.memory)."""
        for i, g in enumerate(self.cluster.hosts):
            use = self.memory_use(i)
            if not use.fits:
                gpu = g.resolved()[1]
                raise ConfigError(
                    "training.batch_per_gpu",
                    f"does not fit: {use.describe()} on a {gpu} of cluster.hosts[{i}]; expected "
                    "a smaller batch or seq_len, more micro_batches, activation_checkpointing, "
                    "a higher kvstore.zero.stage or more GPUs",
                )

    def memory_use(self, group: int = 0) -> MemoryUse:
        """Peak memory of one rank on host group ``group`` (simscale.zoo.memory)."""
        g = self.cluster.hosts[group]
        t, kv = self.training, self.kvstore
        return memory_use(
            self.model_spec(),
            precision=t.precision,
            optimizer=t.optimizer.type,
            batch_per_gpu=t.batch_per_gpu,
            ranks=self.shard_ranks,
            mode=kv.mode,
            stage=kv.zero.stage,
            prefetch=kv.zero.prefetch,
            capacity_gib=hardware.GPUS[g.resolved()[1]].memory_gib,
            flash_attention=t.attention == "flash",
            checkpointing=t.activation_checkpointing,
        )

    # ---- derived facts every consumer needs ----

    @property
    def num_worker_hosts(self) -> int:
        return sum(g.count for g in self.cluster.hosts)

    @property
    def num_workers(self) -> int:
        """Worker processes: one per worker host as MXNet runs it, unless workers_per_host."""
        return sum(g.count * g.workers_per_host for g in self.cluster.hosts)

    @property
    def num_servers(self) -> int:
        """Server processes (0 outside the dist_* modes)."""
        if self.kvstore.mode not in DIST_MODES:
            return 0
        if self.kvstore.servers is not None:
            return self.kvstore.servers
        if self.kvstore.placement == "dedicated":
            assert self.cluster.server_hosts is not None
            return self.cluster.server_hosts.count
        return self.num_worker_hosts

    def worker_groups(self) -> list[HostGroup]:
        """The host group of each worker rank, in rank order (a host's workers together)."""
        return [g for g in self.cluster.hosts for _ in range(g.count * g.workers_per_host)]

    def gpus_per_worker(self, rank: int) -> int:
        group = self.worker_groups()[rank]
        return group.resolved()[0] // group.workers_per_host

    @property
    def num_gpus(self) -> int:
        return sum(g.resolved()[0] * g.count for g in self.cluster.hosts)

    @property
    def shard_ranks(self) -> int:
        """The GPUs a ZeRO/FSDP shard is spread over: every GPU, or one host's under HSDP
        (``kvstore.zero.shard_group`` host)."""
        if self.kvstore.zero.shard_group == "host":
            return self.cluster.hosts[0].resolved()[0]
        return self.num_gpus

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step: every GPU's micro-batches."""
        return self.num_gpus * self.training.batch_per_gpu * self.training.micro_batches

    def model_spec(self) -> zoo.ModelSpec:
        """The model at the scenario's sequence length (its FLOPs depend on it), with the
        backward recompute its activation checkpointing adds and the transposes its batch-norm
        layout adds."""
        t = self.training
        model = checkpointed(self.model.spec(t.seq_len), t.activation_checkpointing)
        return transposed_batchnorms(model, t.batchnorm_layout, t.compute_precision)

    def to_dict(self) -> dict[str, Any]:
        """Plain data that ``scenario_from_dict`` reads back to an equal Scenario."""
        return to_mapping(self)


def _normalise(data: Any) -> Any:
    # ``model: resnet50`` is shorthand for ``model: {name: resnet50}``.
    if isinstance(data, dict) and isinstance(data.get("model"), str):
        data = {**data, "model": {"name": data["model"]}}
    return data


def scenario_from_dict(data: Any, source: str | None = None) -> Scenario:
    """Validate plain data (e.g. a run record's scenario) into a Scenario."""
    try:
        return from_mapping(Scenario, _normalise(data))
    except ConfigError as e:
        raise e.in_file(source) if source else e from None


def load_scenario(path: str | Path, overrides: Sequence[str] = ()) -> Scenario:
    """Read, override (``--set path=value``) and validate the scenario in ``path``."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(
            "",
            f"expected a YAML mapping with sections cluster, model, training, "
            f"got {type(data).__name__}",
            str(path),
        )
    try:
        data = apply_overrides(data, overrides)
    except ConfigError as e:
        raise e.in_file(str(path)) from None
    scenario = scenario_from_dict(data, str(path))
    if not scenario.name:
        scenario = _with_name(scenario, Path(path).stem)
    return scenario


def _with_name(s: Scenario, name: str) -> Scenario:
    from dataclasses import replace

    return replace(s, name=name)


def is_real_hardware(scenario: Scenario) -> bool:
    """Every worker is an accelerator (not a CPU stand-in) and realrun would compute for real."""
    return scenario.realrun.compute == "real" and all(
        g.resolved()[1] != "cpu" for g in scenario.cluster.hosts
    )
