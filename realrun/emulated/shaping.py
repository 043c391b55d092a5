"""How an emulated host's NIC is shaped with tc: rate by HTB, queue bounded in bytes.

Rate lives in the kernel (an HTB class on the egress of each end of the host's link); the
one-way latency is added by the host's delay wire (``realrun.emulated.delay_wire``), because the
kernels
this project runs on are built without ``sch_netem`` (and without ``fq``/``etf``, the qdiscs
that honour an skb departure time), so no qdisc can hold a packet for a fixed time.

Sizing rules (each constant says why):

- ``burst``: HTB refills tokens from a timer; a class must be able to send what it earned in
  one tick, so burst >= rate/HZ (the tc-htb man page's rule). It must also cover one whole TSO
  frame (64 KiB: the taps advertise TSO, so TCP hands them 64 KiB super-frames), else a
  single frame overdraws the bucket and the class stalls in sawtooth.
- ``queue_limit_bytes``: a drop-tail bfifo of at least one bandwidth-delay product, so that a
  single loss-based TCP stream keeps the link busy while it recovers from a drop (the classic
  one-BDP buffer rule), and never below a few TSO frames, so a burst of super-frames at a low
  rate is queued rather than dropped whole.
- ``quantum``: with one class it only has to be >= the MTU; set explicitly so tc does not derive
  it from rate/r2q and warn that it is too big at Gbit/s rates.
"""

from __future__ import annotations

import gzip
import math
import re
from dataclasses import dataclass
from pathlib import Path

BITS_PER_BYTE = 8
TSO_FRAME_BYTES = 65_536  # largest GSO frame a tap with TUN_F_TSO4 hands to/takes from userspace
HTB_QUANTUM_BYTES = 60_000  # >= MTU (1500); below HTB's 200000 cap, so tc stays quiet
MIN_QUEUE_TSO_FRAMES = 4  # the queue must hold a short burst of whole TSO frames
# When the kernel's HZ cannot be read, assume the coarsest common tick: a bigger burst only
# makes the short-term shape a little burstier, a too-small one caps the rate.
FALLBACK_KERNEL_HZ = 100


@dataclass(frozen=True)
class LinkShape:
    """The tc parameters for one direction of one emulated NIC."""

    rate_bit_s: float
    burst_bytes: int
    quantum_bytes: int
    queue_limit_bytes: int

    @property
    def rate_bytes_s(self) -> float:
        return self.rate_bit_s / BITS_PER_BYTE


def dilate(rate_mbit: float, latency_us: float, factor: float) -> tuple[float, float]:
    """Time dilation by ``factor``: rate/factor and latency*factor, so a slow machine can emulate
    a fast network whose every duration is then ``factor`` times longer (rate_mbit, latency_us)."""
    if factor <= 0:
        raise ValueError(f"dilation factor must be > 0, got {factor}")
    return rate_mbit / factor, latency_us * factor


def kernel_hz(config_path: Path = Path("/proc/config.gz")) -> int:
    """The running kernel's CONFIG_HZ, read from /proc/config.gz, else FALLBACK_KERNEL_HZ."""
    try:
        with gzip.open(config_path, "rt") as config:
            match = re.search(r"^CONFIG_HZ=(\d+)$", config.read(), re.MULTILINE)
    except OSError:
        return FALLBACK_KERNEL_HZ
    return int(match.group(1)) if match else FALLBACK_KERNEL_HZ


def link_shape(rate_mbit: float, path_rtt_s: float, hz: int) -> LinkShape:
    """Size HTB burst and bfifo limit for ``rate_mbit`` on paths of round trip ``path_rtt_s``."""
    if rate_mbit <= 0:
        raise ValueError(f"rate_mbit must be > 0, got {rate_mbit}")
    if path_rtt_s < 0:
        raise ValueError(f"path_rtt_s must be >= 0, got {path_rtt_s}")
    rate_bit_s = rate_mbit * 1e6
    rate_bytes_s = rate_bit_s / BITS_PER_BYTE
    burst = max(math.ceil(rate_bytes_s / hz), 2 * TSO_FRAME_BYTES)
    bdp = math.ceil(rate_bytes_s * path_rtt_s)
    queue_limit = max(bdp, MIN_QUEUE_TSO_FRAMES * TSO_FRAME_BYTES)
    return LinkShape(
        rate_bit_s=rate_bit_s,
        burst_bytes=burst,
        quantum_bytes=HTB_QUANTUM_BYTES,
        queue_limit_bytes=queue_limit,
    )


def tc_commands(namespace: str, device: str, shape: LinkShape) -> list[list[str]]:
    """The tc invocations that shape the egress of ``device`` in ``namespace``.

    A root HTB whose default class 1:1 carries every packet at ``rate == ceil``, with a byte
    bfifo leaf so the queue is bounded in bytes, not in (variable-size) packets.
    """
    rate = f"{round(shape.rate_bit_s)}bit"
    burst = f"{shape.burst_bytes}b"
    tc = ["tc", "-n", namespace]
    return [
        [*tc, "qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default", "1"],
        [
            *tc,
            *("class", "add", "dev", device, "parent", "1:", "classid", "1:1", "htb"),
            *("rate", rate, "ceil", rate, "burst", burst, "cburst", burst),
            *("quantum", str(shape.quantum_bytes)),
        ],
        [
            *tc,
            *("qdisc", "add", "dev", device, "parent", "1:1", "handle", "10:"),
            *("bfifo", "limit", str(shape.queue_limit_bytes)),
        ],
    ]
