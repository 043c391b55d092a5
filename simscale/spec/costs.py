"""The simulator's uncertain parameters, in one place, with where each default comes from.

These are the knobs calibration fits (a profile overrides them); everything else the simulator
uses is either in the scenario or a data-sheet number in simscale.spec.hardware.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from simscale.spec.config import ConfigError, between, check, count_in, from_mapping

# A backward pass costs about twice the forward FLOPs (gradients w.r.t. both inputs and weights);
# the usual 1:2 split, e.g. Kaplan et al. 2020 "Scaling laws", section 2.1 (6N vs 2N per token).
BACKWARD_TO_FORWARD = 2.0

# Achieved fraction of peak FLOP/s when training, by (device, precision).
#   V100 fp32 0.602: DLPerf (Oneflow-Inc/DLPerf, MxNet/Classification/RN50v1b) measured 384 img/s
#     for ResNet-50, batch 128, one V100 under MXNet 1.6; with the zoo's 8.21 GFLOP forward and a
#     2x backward that is 384 * 3 * 8.21e9 / 15.7e12 = 0.602 (tests/test_compute.py re-derives it).
#   Every other entry is an assumption (not measured here) for calibration to replace: 0.5 of
#   FP32 peak is the same order as the V100 figure; tensor-core FP16 rarely exceeds a quarter of
#   its peak on convnets; a PyTorch CPU thread reaches a fraction of its AVX2 peak.
DEFAULT_COMPUTE_EFFICIENCY: dict[str, float] = {
    "V100/fp32": 0.602,
    "V100/fp16": 0.25,
    "K80/fp32": 0.5,
    "K80/fp16": 0.5,
    "P100/fp32": 0.5,
    "P100/fp16": 0.3,
    "A100/fp32": 0.5,
    "A100/fp16": 0.25,
    "H100/fp32": 0.5,
    "H100/fp16": 0.25,
    "cpu/fp32": 0.3,
    "cpu/fp16": 0.1,
}


# Bounds of the per-message and per-byte costs a profile may set: a second per message and a
# microsecond per byte (1 MB/s) are far slower than any software that would be calibrated, yet
# finite, so a corrupt profile cannot stall the simulator. Calibration's search bounds
# (calibration/fit.py) lie well inside.
MAX_US = 1e6
MAX_NS_PER_BYTE = 1e3


# One core summing two float32 arrays far larger than its caches into one of them (a = a + b,
# what Open MPI's MPI_SUM loop does per received chunk), GB/s of the summed buffer:
# benchmarks/bench_host_reduce.py (numpy.add in place, 64 MB, median of 7) on this project's
# shared 2-core machine, 2026-11-28: 5.4 at load 4.0 and 3.4 at load 6.9 (wall clock), 8.1 by
# CPU time. The wall figure of the lighter load is kept: a training host's MPI rank has its
# core. A memory-bound loop moving 3 bytes per byte summed, the same order as STREAM's
# single-thread Add on server CPUs (several GB/s per core). A copy pass (memcpy: Horovod's copies
# into and out of its fusion buffer, Open MPI's copy of a lone tensor into its output buffer)
# runs at the same rate: the same script, copyto beside add, alternating, 2026-11-29 at load 6.3:
# 8.76 and 8.65 GB/s in one run, 4.22 and 4.26 in the next, 7.7 and 7.8 ms of CPU each.
HOST_REDUCE_GBYTES_PER_S = 5.4


def _stack_quantiles_problem(values: tuple[float, ...]) -> str | None:
    """Quantiles of a delay: each in [0, MAX_US], in non-decreasing order."""
    if any(not 0 <= v <= MAX_US for v in values) or list(values) != sorted(values):
        return f"non-decreasing quantiles, each in [0, {MAX_US:,.0f}]"
    return None


@dataclass(frozen=True)
class CostModel:
    """Software and hardware efficiencies the scenario does not state. Units in every name."""

    # Achieved fraction of peak compute, "GPU/precision" -> fraction; missing keys use defaults.
    compute_efficiency: dict[str, float] = field(default_factory=dict)
    # Usable fraction of a NIC's line rate (TCP/IP and framing overhead). SimGrid's LV08 model
    # uses 0.97 (Velho & Legrand 2009); a calibrated value replaces it.
    bandwidth_factor: float = field(default=0.97, metadata=between(0.01, 1.0))
    # Multiplies every configured latency (SimGrid LV08 fits 13.01 for its TCP model).
    latency_factor: float = field(default=1.0, metadata=between(1e-3, 1e3))
    # Spread of the shares concurrent TCP flows get of a link (log-normal sigma of a weight per
    # host pair and busy period; simscale.network.flows). 0 = equal max-min shares, the default,
    # since how unevenly a real cluster's TCP splits its links is not known here; calibration
    # fits it (about 0.5 on the emulated cluster, where equal shares over-predicted co-located
    # 4- and 8-host sync jobs by 53%).
    tcp_share_sigma: float = field(default=0.0, metadata=between(0.0, 10.0))
    # Software cost of sending one message (ps-lite van: serialise, syscall) on the sender's
    # communication thread. Assumption: tens of microseconds for a zmq send from C++.
    message_overhead_us: float = field(default=20.0, metadata=between(0.0, MAX_US, "us"))
    # Server CPU to merge one pushed byte into the aggregation buffer. Assumption: a
    # memory-bound sum at ~10 GB/s.
    server_merge_ns_per_byte: float = field(
        default=0.1, metadata=between(0.0, MAX_NS_PER_BYTE, "ns/byte")
    )
    # Server CPU to apply the optimizer update to one byte of weights: an MXNet server took
    # ~780 us to update a 2 MB key (apache/mxnet#14485), i.e. 0.39 ns/byte.
    server_update_ns_per_byte: float = field(
        default=0.39, metadata=between(0.0, MAX_NS_PER_BYTE, "ns/byte")
    )
    # Server CPU per request handled (parse, look up the key, bookkeeping). Assumption.
    server_request_us: float = field(default=10.0, metadata=between(0.0, MAX_US, "us"))
    # Fraction of a layer's gradient communication that cannot start before the whole backward
    # pass ends: 0 = perfect push-as-ready overlap (MXNet), 1 = no overlap (apache/mxnet#6975).
    overlap_loss: float = field(default=0.0, metadata=between(0.0, 1.0))

    # A real PS's stack between a message's arrival and its handling, beyond the costs above
    # (I/O threads waking, zmq): per message each way, microseconds, as K
    # quantiles at probabilities (i + 0.5) / K that each message draws from; empty, the
    # default: none (the simulator's own costs are the whole stack). Measured by ``realrun
    # probe``'s psrtt step (calibration/probe_profile.py); parameter-server connections only.
    # simscale.comm.ps.stack_delay.
    message_stack_quantiles_us: tuple[float, ...] = field(
        default=(), metadata=check(_stack_quantiles_problem, "us")
    )

    # ---- Mechanisms of real GPU clusters (issue 9) ----
    # Each defaults to "no effect": the emulated cluster has none of them, and its profile was
    # fitted without them. REAL_HARDWARE_COSTS below holds the published figure each starts
    # from on real hardware; profiles/real-v1.yaml holds the value fitted on published runs.
    #
    # Speed-up of 3x3 convolutions over their direct FLOP count: cuDNN runs them with
    # Winograd's minimal filtering (Lavin & Gray 2016), so a network made of 3x3 convolutions
    # (VGG-16) reaches a far higher share of "peak" than one of 1x1 ones. simscale.model.compute.
    winograd_3x3_speedup: float = field(default=1.0, metadata=between(1.0, 16.0))
    # Fixed time every layer costs per forward pass on a GPU, whatever the batch, in
    # microseconds (kernel launches, the framework's per-operator dispatch); backward pays it
    # BACKWARD_TO_FORWARD times. It is why a GPU is slow at small batches. simscale.model.compute.
    layer_overhead_us: float = field(default=0.0, metadata=between(0.0, MAX_US, "us"))
    # Throughput of one TCP connection in Gbit/s (0: no limit of its own, only its NIC share).
    # A ring all-reduce sends each step over one connection to its neighbour, and a worker and
    # a server talk over one, so on fast NICs the connection, not the NIC, sets their pace.
    # simscale.comm.allreduce, simscale.comm.ps.connections (ps_connection_Bps).
    connection_gbps: float = field(default=0.0, metadata=between(0.0, 100_000.0, "Gbit/s"))
    # Horovod's per-tensor cost on the coordinator each cycle (readiness negotiation, copying
    # the tensor into and out of the fusion buffer), in microseconds. simscale.comm.allreduce.
    allreduce_tensor_us: float = field(default=0.0, metadata=between(0.0, MAX_US, "us"))
    # CPU threads a dist_sync worker sums a big array's GPU copies with (arrays of at least
    # kvstore.bigarray_bound elements; smaller ones take one thread). simscale.model.worker.
    worker_reduction_threads: int = field(default=1, metadata=count_in(1, 1024, "threads"))
    # Relative spread (standard deviation over mean) of one GPU's compute time per iteration:
    # a synchronous job waits for the slowest of its GPUs each iteration. simscale.model.stragglers.
    straggler_sigma: float = field(default=0.0, metadata=between(0.0, 1.0))
    # CPU time one core spends reading, decoding and augmenting one training image, in
    # microseconds; a host's cores cap its samples/s when training.data is "images".
    # simscale.model.input_pipeline.
    decode_us_per_sample: float = field(default=0.0, metadata=between(0.0, MAX_US, "us"))
    # Server CPU to move one tensor byte through gRPC (kvstore.rpc "grpc": TensorFlow's parameter
    # servers copy every received gradient and every sent weight through protobuf and gRPC
    # buffers on top of the merge and update), in ns/byte: one process moves at most 1/this
    # GB/s each way, whatever its NIC (GRPC_STREAM_MB_PER_S below). simscale.comm.ps.server.
    grpc_ns_per_byte: float = field(default=0.0, metadata=between(0.0, MAX_NS_PER_BYTE, "ns/byte"))
    # The most NCCL's socket transport moves out of one host, all its sockets together, in
    # Gbit/s (0: no ceiling of its own): its threads stage every byte through pinned host
    # buffers and the kernel's TCP stack, so a 100 Gbit/s NIC does not fill however many
    # sockets it opens (NCCL_SOCKET_HOST_GBPS below). The flat ring's only. simscale.comm.allreduce.
    socket_host_gbps: float = field(default=0.0, metadata=between(0.0, 100_000.0, "Gbit/s"))
    # Share of an Elastic Fabric Adapter's line rate NCCL's ring reaches through AWS's libfabric
    # plugin (transport "efa"; 1: all of it). EFA_RING_SHARE below. simscale.comm.allreduce.
    efa_ring_share: float = field(default=1.0, metadata=between(0.01, 1.0))
    # One MPI rank's CPU summing a received chunk into its own in host memory, GB/s of the
    # buffer (kvstore.allreduce.reduce_in "host": Open MPI's ring reduces each chunk with one
    # thread before passing it on; 0: no cost), and likewise copying a buffer (Horovod's and
    # Open MPI's copy passes, simscale.comm.allreduce). Only scenarios that ask for host sums
    # pay it, so it starts at its measured figure everywhere (HOST_REDUCE_GBYTES_PER_S above).
    host_reduce_gbytes_per_s: float = field(
        default=HOST_REDUCE_GBYTES_PER_S, metadata=between(0.0, 100_000.0, "GB/s")
    )

    def validate(self) -> None:
        for key, value in self.compute_efficiency.items():
            if "/" not in key:
                raise ConfigError(
                    f"compute_efficiency.{key}",
                    "expected a key of the form GPU/precision, e.g. V100/fp32",
                )
            if not 0 < value <= 1:
                raise ConfigError(
                    f"compute_efficiency.{key}", f"got {value!r}, expected a fraction in (0, 1]"
                )

    def efficiency(self, gpu: str, precision: str) -> float:
        key = f"{gpu}/{precision}"
        if key in self.compute_efficiency:
            return self.compute_efficiency[key]
        return DEFAULT_COMPUTE_EFFICIENCY.get(key, 0.5)

    def unfitted_efficiencies(self, keys: Iterable[str]) -> dict[str, float]:
        """Of the "GPU/precision" ``keys``, those a fitted model (one that holds any compute
        efficiency) has no value for, each with the assumed default it falls back to: where a
        calibrated prediction's compute rests on an assumption. Empty for the plain defaults."""
        if not self.compute_efficiency:
            return {}
        return {
            key: self.efficiency(*key.split("/", 1))
            for key in sorted(set(keys))
            if key not in self.compute_efficiency
        }

    def with_values(self, **values: Any) -> CostModel:
        return replace(self, **values)


# One TensorFlow process sending tensors to another over gRPC, MB/s, as published (worker to
# worker or worker to PS, no Python fetch), 2016-2017, the years of the dataset's TF sources:
# tensorflow/tensorflow#4498: 161.6 (local_distributed_benchmark.py, TF 0.10) and 1.3 Gbit/s of
# a PS's traffic in training on 40 GbE (162); #6256: 569.3 (benchmark_grpc_recv.py, 128 MB);
# #6116: 900 (Dec 2016, Xeon E5-2630 v3), after the August 2017 gRPC upgrade 800 (one 10 GbE
# link), 287.9 (one machine) and ~500 (three machines); #11261: 196.1 (master, July 2017).
GRPC_STREAM_MB_PER_S = (161.6, 162.0, 569.3, 900.0, 800.0, 287.9, 500.0, 196.1)

# NCCL all-reduce over its socket transport between 100 Gbit/s hosts, with the NCCL (2.4.8 and
# later) that spreads a peer's traffic over many sockets: bus bandwidth, which for a ring is the
# rate each host's NIC carries each way, Gbit/s, as published in NVIDIA/nccl's issues.
# #398 (2020-10, p3dn.24xlarge, NCCL 2.4.8, ring): 2 nodes x 1 GPU about 4.7 GB/s, and with
# 8 GPUs per node "the bus can sustain around 6GB/s"; more sockets or threads did not help.
# #450 (2021-01, 4 nodes x 8 V100, 100 Gbit/s TCP): best bus bandwidth "between 4~6GB/s".
NCCL_SOCKET_HOST_GBPS = (37.6, 48.0, 32.0, 48.0)

# NCCL's ring over EFA, bus bandwidth as a share of the NIC's line rate, as published:
# NVIDIA/nccl-tests#22 (2019-06, 2 x p3dn.24xlarge, 100 Gbit/s EFA, ring forced): "60Gbps";
# NVIDIA/nccl#235 (2019-07, p3dn, NCCL's maintainer summing up): "50-60Gb/s (6-8 GB/s) when
# using 8 to 32 nodes"; NVIDIA/nccl#527 (2022-07, p4d.24xlarge, 4 x 100 Gbit/s EFA, NCCL 2.9.9,
# 1 GiB): 31.77 GB/s on 3 nodes and 29.61 GB/s on 4, of 50 GB/s.
EFA_RING_SHARE = (0.60, 0.50, 0.60, 31.77 / 50, 29.61 / 50)

# Where each real-cluster mechanism starts, from a public figure (calibration fits from here):
#   winograd_3x3_speedup 2.25: F(2x2, 3x3) needs 2.25x fewer multiplies than direct
#     convolution (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016,
#     section 4); cuDNN also offers F(4x4, 3x3) (4x), so the achieved figure lies between.
#   connection_gbps 16.7: BytePS's best practice (bytedance/byteps docs/best-practice.md): "a
#     single TCP connection usually cannot run up to 25Gbps"; two connections suffice for
#     25 Gbit/s, 40/50 Gbit/s needs three: one connection carries about 50/3 = 16.7 Gbit/s.
#   allreduce_tensor_us 0, layer_overhead_us 0: no public figure to start from; the fit
#     decides (from the published single-GPU throughputs at batch 1 to 512, for the latter).
#   straggler_sigma 0: no public figure of per-iteration GPU time spread on these clusters to
#     start from (Chen et al. 2016 show stragglers, not a spread); the fit decides.
#   decode_us_per_sample 0: no citable per-core figure for these pipelines (reports range from
#     50 to 200 images/s per core with the decoder and image size); the fit decides.
#   worker_reduction_threads 4: MXNET_KVSTORE_REDUCTION_NTHREADS, "the number of CPU threads
#     used for summing up big arrays on a single machine", default 4, used for arrays above
#     MXNET_KVSTORE_BIGARRAY_BOUND and by dist_sync (mxnet.apache.org/api/faq/env_var).
#   grpc_ns_per_byte 1/0.394 (394 MB/s): the median of the public measurements of one TensorFlow
#     process's gRPC tensor transfers to another (GRPC_STREAM_MB_PER_S), which span 160 to
#     900 MB/s with the build and the machines; sharding the variables over more PS processes
#     raised the total (0.9 -> 2.6 GB/s with 8, #6116), i.e. the limit is per process, not the
#     NIC's.
#   socket_host_gbps 42.8: the median of NCCL_SOCKET_HOST_GBPS (public nccl-tests figures on
#     100 Gbit/s TCP hosts); not fitted: no published training point has a NIC above 40 Gbit/s
#     with NCCL's many sockets.
#   efa_ring_share 0.60: the median of EFA_RING_SHARE (p3dn and p4d nccl-tests); not fitted: no
#     published training point ran over EFA.
#   host_reduce_gbytes_per_s: HOST_REDUCE_GBYTES_PER_S; not fitted: only Horovod's README
#     rows ran MPI in host memory, so a fit could learn it only from the campaign it judges.
REAL_HARDWARE_COSTS: dict[str, float] = {
    "winograd_3x3_speedup": 2.25,
    "connection_gbps": 50.0 / 3.0,
    "allreduce_tensor_us": 0.0,
    "layer_overhead_us": 0.0,
    "worker_reduction_threads": 4,
    "straggler_sigma": 0.0,
    "decode_us_per_sample": 0.0,
    "grpc_ns_per_byte": 1e3 / statistics.median(GRPC_STREAM_MB_PER_S),
    "socket_host_gbps": statistics.median(NCCL_SOCKET_HOST_GBPS),
    "efa_ring_share": statistics.median(EFA_RING_SHARE),
    "host_reduce_gbytes_per_s": HOST_REDUCE_GBYTES_PER_S,
}


def real_hardware_costs() -> CostModel:
    """The default costs with every real-cluster mechanism at its published starting figure."""
    return CostModel(**REAL_HARDWARE_COSTS)  # type: ignore[arg-type]


def cost_model_from_mapping(data: Any, path: str = "costs") -> CostModel:
    """A CostModel from plain data (a profile's ``costs`` section)."""
    return from_mapping(CostModel, data, path)
