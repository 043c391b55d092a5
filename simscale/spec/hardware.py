"""Hardware presets: accelerators and cloud instances, each number with its public source.

Peak figures are vendor data-sheet numbers. What a device *achieves* on a real model is a separate,
named efficiency (simscale.model.compute) that calibration may override; keeping the two apart
is what lets a profile fitted on one machine leave other presets alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simscale.spec.unknowns import FactRange

if TYPE_CHECKING:
    import numpy as np

TFLOPS = 1e12
GBPS_BYTES = 1e9  # 1 GB/s in bytes/s


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator (or a CPU socket share standing in for one)."""

    name: str
    peak_fp32_tflops: float
    peak_fp16_tflops: float
    host_link_gbytes_per_s: float  # GPU <-> host memory (PCIe), bytes moved per second / 1e9
    peer_link_gbytes_per_s: float  # GPU <-> GPU inside a host (NVLink, or PCIe peer-to-peer)
    memory_gib: float
    source: str
    # Dense tensor-core peaks of the newer precisions (0: the GPU has no such unit). bf16 on a
    # GPU without bf16 units falls back to nothing: such a scenario is refused, as fp8 on A100.
    peak_tf32_tflops: float = 0.0
    peak_bf16_tflops: float = 0.0
    peak_fp8_tflops: float = 0.0
    # The device memory's peak bandwidth (HBM, GDDR), GB/s, from the same data sheet: what a
    # memory-bound kernel such as the optimizer step streams at (simscale.model.optimizer_step).
    # 0: not stated (a CPU core's share of DRAM), the step then costs nothing.
    memory_gbytes_per_s: float = 0.0

    def memory_stream_s(self, nbytes: float | np.ndarray) -> float | np.ndarray:
        """Seconds a memory-bound kernel takes to read and write ``nbytes`` (or each of an
        array of byte counts) at the memory's peak bandwidth, a lower bound; 0 where the
        device states none (a CPU rank)."""
        if self.memory_gbytes_per_s <= 0:
            return 0.0
        return nbytes / (self.memory_gbytes_per_s * GBPS_BYTES)

    def peak_flops(self, precision: str) -> float:
        """Peak FLOP/s at ``precision``; ``supports`` says whether the GPU has it at all."""
        tflops = {
            "fp32": self.peak_fp32_tflops,
            "fp16": self.peak_fp16_tflops,
            "tf32": self.peak_tf32_tflops,
            "bf16": self.peak_bf16_tflops,
            "fp8": self.peak_fp8_tflops,
        }[precision]
        return tflops * TFLOPS

    def supports(self, precision: str) -> bool:
        """Whether the GPU computes in ``precision`` (fp32 and fp16 everywhere)."""
        return self.peak_flops(precision) > 0


# PCIe 3.0 x16: 8 GT/s x 16 lanes x 128b/130b = 15.75 GB/s per direction (PCI-SIG PCIe 3.0 spec).
PCIE3_X16_GBYTES = 15.75
# PCIe 4.0 x16 doubles it; PCIe 5.0 x16 doubles again (PCI-SIG).
PCIE4_X16_GBYTES = 31.5
PCIE5_X16_GBYTES = 63.0

GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        # One GK210 die, which EC2 (p2) exposes as one GPU: a K80 board is 2 dies with
        # 8.73 TFLOPS FP32 at boost (NVIDIA Tesla K80 data sheet). No fast FP16 on Kepler.
        GPUSpec(
            "K80",
            4.365,
            4.365,
            PCIE3_X16_GBYTES,
            PCIE3_X16_GBYTES,
            12,
            "NVIDIA Tesla K80 data sheet (per GK210 die, boost); 480 GB/s GDDR5 per board",
            memory_gbytes_per_s=240.0,
        ),
        # Tesla P100 SXM2: 10.6 FP32 / 21.2 FP16 TFLOPS; NVLink 1.0 160 GB/s; 732 GB/s HBM2
        # (NVIDIA P100 data sheet).
        GPUSpec(
            "P100",
            10.6,
            21.2,
            PCIE3_X16_GBYTES,
            160.0,
            16,
            "NVIDIA Tesla P100 SXM2 data sheet",
            memory_gbytes_per_s=732.0,
        ),
        # Tesla V100 SXM2: 15.7 FP32, 125 tensor-core FP16 TFLOPS; NVLink 2.0 300 GB/s; 900
        # GB/s HBM2 (NVIDIA V100 data sheet). p3 instances use the SXM2 part.
        GPUSpec(
            "V100",
            15.7,
            125.0,
            PCIE3_X16_GBYTES,
            300.0,
            16,
            "NVIDIA Tesla V100 SXM2 data sheet",
            memory_gbytes_per_s=900.0,
        ),
        # A100 SXM4: 19.5 FP32, 156 TF32, 312 dense FP16 and BF16 tensor TFLOPS (the sheet's
        # 312 / 624 are with sparsity); no FP8; NVLink 3 600 GB/s; PCIe 4.0 (NVIDIA A100 data
        # sheet). 40 GB (p4d.24xlarge) and 80 GB (p4de, DGX A100 640 GB) parts: 1,555 and 2,039
        # GB/s of HBM2 / HBM2e (the same sheet).
        GPUSpec(
            "A100",
            19.5,
            312.0,
            PCIE4_X16_GBYTES,
            600.0,
            40,
            "NVIDIA A100 SXM4 40GB data sheet",
            peak_tf32_tflops=156.0,
            peak_bf16_tflops=312.0,
            memory_gbytes_per_s=1555.0,
        ),
        GPUSpec(
            "A100-80GB",
            19.5,
            312.0,
            PCIE4_X16_GBYTES,
            600.0,
            80,
            "NVIDIA A100 SXM4 80GB data sheet",
            peak_tf32_tflops=156.0,
            peak_bf16_tflops=312.0,
            memory_gbytes_per_s=2039.0,
        ),
        # H100 SXM5: 67 FP32, 494.7 TF32, 989.4 FP16 and BF16, 1,978.9 FP8 dense tensor TFLOPS
        # (the sheet's 989 / 1,979 / 3,958 "with sparsity" halved); NVLink 4 900 GB/s; PCIe 5.0;
        # 80 GB HBM3 at 3.35 TB/s (NVIDIA H100 data sheet).
        GPUSpec(
            "H100",
            67.0,
            989.0,
            PCIE5_X16_GBYTES,
            900.0,
            80,
            "NVIDIA H100 SXM5 data sheet",
            peak_tf32_tflops=494.7,
            peak_bf16_tflops=989.4,
            peak_fp8_tflops=1978.9,
            memory_gbytes_per_s=3350.0,
        ),
        # H100 SXM with 96 GB HBM2e (2.4 TB/s) at a 500 W power limit, Meta's Grand Teton hosts
        # (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, "Hardware"). Its
        # peak is not published: the source says it lies "between SXM and NVL, and we don't
        # know its exact value" and quotes MFU against the SXM5 peak, so the SXM5 figures are
        # kept here and the fitted fraction of peak absorbs the lower clock.
        GPUSpec(
            "H100-96GB",
            67.0,
            989.0,
            PCIE5_X16_GBYTES,
            900.0,
            96,
            "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (96 GB HBM2e, "
            "500 W, NVLink); peaks of the NVIDIA H100 SXM5 data sheet",
            peak_tf32_tflops=494.7,
            peak_bf16_tflops=989.4,
            peak_fp8_tflops=1978.9,
            memory_gbytes_per_s=2400.0,
        ),
        # A CPU worker thread for realrun's CPU world. One AVX2 core: 2 FMA units x 8 FP32
        # lanes x 2 FLOPs x ~2.5 GHz = 80 GFLOP/s peak; what PyTorch achieves on it is the
        # calibrated efficiency. Gradients already live in host memory, hence the high link.
        GPUSpec(
            "cpu",
            0.08,
            0.08,
            10.0,
            10.0,
            8,
            "AVX2 core: 2 FMA x 8 lanes x 2 FLOP x 2.5 GHz (Intel optimization manual)",
        ),
    )
}


# Since NCCL 2.4.8 (June 2019) the socket transport reads the NIC's PCI vendor and, on AWS's
# ENA (0x1d0f), runs 2 threads of 8 sockets to each peer instead of one socket (NVIDIA/nccl
# src/transport/net_socket.cc, ncclNetSocketGetNsockNthread; 4 x 1 on GCP's gVNIC). Every
# instance preset is an AWS instance with an ENA NIC.
AWS_NCCL_SOCKETS = 16


@dataclass(frozen=True)
class InstanceSpec:
    """A cloud instance type: its accelerators, NIC and CPUs."""

    name: str
    gpus: int
    gpu: str | None
    nic_gbps: float
    vcpus: int
    source: str
    # On-demand price per hour (Linux, US East) and where it was read; None where no public
    # source could be checked (a scenario can give ``usd_per_hour`` itself).
    usd_per_hour: float | None = None
    price_source: str = ""
    # How NCCL crosses the NIC by default: "efa" on instances with an Elastic Fabric Adapter,
    # where AWS's NCCL plugin (aws/aws-ofi-nccl) maps NCCL's transport onto libfabric's reliable,
    # OS-bypass messages, so no TCP connection's ceiling applies; "tcp" (sockets) elsewhere.
    transport: str = "tcp"
    # TCP sockets NCCL's socket transport opens to each ring neighbour by default
    # (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD). Every preset here is an AWS instance.
    nccl_sockets: int = AWS_NCCL_SOCKETS
    # NICs the host's ``nic_gbps`` is spread over (rail-aligned: NCCL gives each GPU's channels
    # the NIC nearest it); ``nic_gbps`` is all of them together.
    nics: int = 1
    # What the instance's public pages leave open, as ranges with their source
    # (simscale.spec.unknowns): predict --interval samples them.
    ranges: tuple[FactRange, ...] = ()


_AWS_P2 = "AWS EC2 P2 instance page (instance table)"
_AWS_P3 = "AWS EC2 P3 instance page (instance table)"
# AWS's own P2 briefing slides give the network bandwidth of each size "in a placement group":
# p2.xlarge 1.25 Gbps, p2.8xlarge 10 Gbps, p2.16xlarge 20 Gbps. The 16xlarge preset keeps the
# 25 Gbit/s of the instance table it cites (a 2018 copy of AWS's P2 page still said 20; the 2016
# MXNet p2 rows set 20 themselves).
_AWS_P2_2017 = (
    "AWS GPU/FPGA briefing, March 2017, P2 table "
    "(speakerdeck.com/porcaro33/gpu-fpga-briefing-plus-march-plus-2017)"
)
_AWS_C5N = "AWS EC2 C5n instance page (instance table)"
_EFA = "; Elastic Fabric Adapter: NCCL over libfabric (aws/aws-ofi-nccl), transport efa"

# Prices: on-demand USD per hour, Linux, US East (N. Virginia), as read on PRICES_READ_ON from
# the public page named beside each. Cloud prices change; a scenario's ``usd_per_hour``
# overrides the preset. Where no page listing the price could be found, the price is None
# (unknown) rather than a remembered number.
PRICES_READ_ON = "2026-11-22"
_PRICE_P2 = (
    "gist.github.com/slavivanov/9af05ba30f3f3d6e8c22253b052fec59 (2017-03-16, N. Virginia "
    "on-demand table)"
)
_PRICE_P3_16 = (
    "third-party: a README quoting 'AWS 8xV100 (~$24.48 on-demand)'; not checked against "
    "AWS's own page"
)
_PRICE_C5_18 = (
    "AWS EC2 Auto Scaling user guide, 'Spot price per unit hour example' (US East; AWS calls "
    "the table example pricing)"
)
_PRICE_P5 = "wring.co/blog/aws-ec2-pricing-guide (2026-03-08)"
_NO_PRICE = "no public price found here; set usd_per_hour in the scenario"

# ---- What an AWS instance's page does not tell (ranges for predict --interval) ----
# One TCP flow (a 5-tuple) on EC2: "limited to 5 Gbps when instances are not in the same
# cluster placement group", "up to 10 Gbps" inside one (AWS EC2 User Guide, "Amazon EC2
# instance network bandwidth", single-flow traffic). A ring neighbour's or a PS worker-server
# connection is one flow.
_AWS_FLOW = (
    "AWS EC2 User Guide, instance network bandwidth: one flow 5 Gbit/s, 10 in a placement group"
)
_AWS_CONNECTION = FactRange("connection_gbps", _AWS_FLOW, 5.0, 10.0)
# NCCL's socket transport opens 1 socket per peer before 2.4.8 and 2 threads x 8 sockets on
# ENA since (NVIDIA/nccl src/transport/net_socket.cc, ncclNetSocketGetNsockNthread): which one
# a job ran is the NCCL version's, which a benchmark rarely states.
_AWS_NCCL = FactRange(
    "nccl_sockets",
    "NVIDIA/nccl net_socket.cc: 1 socket per peer before 2.4.8, 16 on AWS ENA since",
    1,
    AWS_NCCL_SOCKETS,
)


# AWS's TCP instances leave open what one connection gets and how many NCCL opens; their
# listed NIC rate is kept as the NIC's (a ceiling many flows reach; no public figure of how
# far below it a training job's flows stay was found, so no range is invented for it).
_AWS_TCP = (_AWS_CONNECTION, _AWS_NCCL)

# p2.xlarge's NIC: AWS's instance table says only "High"; AWS's one figure for it is 1.25 Gbit/s
# (the P2 briefing, _AWS_P2_2017), the same as the baseline a 4-vCPU ENA instance sustains
# (cloudonaut's EC2 Network Performance Cheat Sheet, April 2018, iperf3 -P 10 for an hour:
# m5.xlarge 1.24 Gbit/s baseline, 10.04 Gbit/s burst held at least 3 minutes). AWS's User Guide
# (instance network bandwidth) says instances of 16 vCPUs or fewer burst beyond their baseline
# for typically 5 to 60 minutes, and caps one flow at 10 Gbit/s in a placement group; whether a
# 2016 P2 instance bursts is not stated. A benchmark of minutes (ETH's runs: 110 steps) may have
# run at either end, so the preset keeps AWS's figure and declares the range.
_AWS_XLARGE_NIC = FactRange(
    "nic_gbps",
    "AWS P2 briefing 2017: p2.xlarge 1.25 Gbit/s; a 4-vCPU ENA instance's burst: 10.04 Gbit/s "
    "(cloudonaut EC2 Network Performance Cheat Sheet, m5.xlarge, 2018), AWS User Guide: one "
    "flow at most 10 Gbit/s",
    1.25,
    10.0,
)

INSTANCES: dict[str, InstanceSpec] = {
    i.name: i
    for i in (
        InstanceSpec(
            "p2.xlarge",
            1,
            "K80",
            1.25,
            4,
            f"{_AWS_P2}; 'High' networking: 1.25 Gbit/s in a placement group ({_AWS_P2_2017})",
            0.90,
            _PRICE_P2,
            ranges=(_AWS_XLARGE_NIC, *_AWS_TCP),
        ),
        InstanceSpec("p2.8xlarge", 8, "K80", 10.0, 32, _AWS_P2, 7.20, _PRICE_P2, ranges=_AWS_TCP),
        InstanceSpec(
            "p2.16xlarge", 16, "K80", 25.0, 64, _AWS_P2, 14.40, _PRICE_P2, ranges=_AWS_TCP
        ),
        InstanceSpec(
            "p3.2xlarge",
            1,
            "V100",
            10.0,
            8,
            _AWS_P3 + "; 'up to 10 Gbit/s'",
            None,
            _NO_PRICE,
            ranges=_AWS_TCP,
        ),
        InstanceSpec("p3.8xlarge", 4, "V100", 10.0, 32, _AWS_P3, None, _NO_PRICE, ranges=_AWS_TCP),
        InstanceSpec(
            "p3.16xlarge", 8, "V100", 25.0, 64, _AWS_P3, 24.48, _PRICE_P3_16, ranges=_AWS_TCP
        ),
        InstanceSpec("p3dn.24xlarge", 8, "V100", 100.0, 96, _AWS_P3 + _EFA, None, _NO_PRICE, "efa"),
        InstanceSpec(
            "p4d.24xlarge",
            8,
            "A100",
            400.0,
            96,
            "AWS EC2 P4 instance page: 8 A100 40 GB, 4 x 100 Gbit/s EFA, 96 vCPUs" + _EFA,
            None,
            _NO_PRICE,
            "efa",
            nics=4,
        ),
        InstanceSpec(
            "p5.48xlarge",
            8,
            "H100",
            3200.0,
            192,
            "AWS EC2 P5 instance page: 8 H100 80 GB, 32 x 100 Gbit/s EFAv2, 192 vCPUs" + _EFA,
            98.32,
            _PRICE_P5,
            "efa",
            nics=32,
        ),
        # NVIDIA DGX A100 640 GB: 8 A100 80 GB, 8 single-port ConnectX-6 200 Gbit/s HDR
        # InfiniBand for the compute fabric, 2 AMD EPYC 7742 (128 cores, 256 threads) (DGX
        # A100 user guide and data sheet). Bought, not rented: no hourly price.
        InstanceSpec(
            "dgx-a100",
            8,
            "A100-80GB",
            1600.0,
            256,
            "NVIDIA DGX A100 data sheet: 8 x 200 Gbit/s HDR InfiniBand (ConnectX-6), 2 x EPYC "
            "7742; transport rdma",
            None,
            _NO_PRICE,
            "rdma",
            nics=8,
        ),
        # NVIDIA DGX H100: 8 H100 80 GB, four OSFP ports serving eight single-port ConnectX-7 at
        # up to 400 Gbit/s InfiniBand, 2 Xeon Platinum 8480C (112 cores)
        # (docs.nvidia.com/dgx-basepod, "Core Components").
        InstanceSpec(
            "dgx-h100",
            8,
            "H100",
            3200.0,
            224,
            "NVIDIA DGX BasePOD reference architecture, Core Components: 8 x 400 Gbit/s "
            "ConnectX-7, 2 x Xeon 8480C (112 cores); transport rdma",
            None,
            _NO_PRICE,
            "rdma",
            nics=8,
        ),
        # Azure Standard_ND96isr_H100_v5: 8 H100 80 GB, 96 vCPUs, 8 x 400 Gbit/s NDR
        # InfiniBand with GPUDirect RDMA (Azure ND H100 v5-series size page). The 8 x H100
        # InfiniBand host a cloud rents.
        InstanceSpec(
            "nd96isr-h100-v5",
            8,
            "H100",
            3200.0,
            96,
            "Azure ND H100 v5-series size page: 8 x 400 Gbit/s NDR InfiniBand, 96 vCPUs; "
            "transport rdma",
            None,
            _NO_PRICE,
            "rdma",
            nics=8,
        ),
        InstanceSpec(
            "c5.18xlarge", 0, None, 25.0, 72, "AWS EC2 C5 instance page", 3.06, _PRICE_C5_18
        ),
        InstanceSpec(
            "c5n.4xlarge", 0, None, 25.0, 16, _AWS_C5N + "; 'up to 25 Gbit/s'", None, _NO_PRICE
        ),
        InstanceSpec("c5n.9xlarge", 0, None, 50.0, 36, _AWS_C5N, None, _NO_PRICE),
        InstanceSpec("c5n.18xlarge", 0, None, 100.0, 72, _AWS_C5N, None, _NO_PRICE),
    )
}

# One-way NIC latency when a scenario gives none. Assumption, not a measurement: EC2 hosts in a
# cluster placement group see round trips of the order of 50-100 us; 25 us per NIC gives a
# 100 us round trip between two hosts. Calibration fits a latency factor on top.
DEFAULT_LATENCY_US = 25.0
