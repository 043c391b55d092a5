"""The physical network a job runs on: one full-duplex NIC per host and an optional shared core.

Links are numbered so that every network model agrees on them: host h's egress is link ``2h``,
its ingress ``2h + 1``, and the core (when there is one) is link ``2H``.

Modelling choices, stated once here:

- **Core.** An oversubscribed fabric (ratio ``r >= 1``) is modelled as ONE shared link of capacity
  ``sum(host egress) / r`` crossed by every inter-host flow. This is the flow-level view of a
  two-tier fabric whose uplinks carry ``1/r`` of what the hosts can inject: with ``r = 1`` it can
  never be the bottleneck (it carries at most what the egress links allow), with ``r = 2`` an
  all-to-all shuffle gets half the NIC rate. It ignores which rack a host sits in; a per-rack
  uplink model would need rack membership the scenario does not carry yet.
- **Latency.** The one-way latency of a path is ``latency(src) + latency(dst)``: each NIC's
  ``latency_s`` stands for its half of the wire, switch and stack delay, so a symmetric cluster
  measured with ping (RTT = 2 x one-way) gives ``latency_s = RTT / 4`` per NIC.
- **Same host.** A transfer whose source and destination are the same host never touches a NIC
  (it is a memory copy); it takes ``nbytes / intra_host_Bps`` when that is given, else no time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

BITS_PER_BYTE = 8


def gbit_per_s(gbit: float) -> float:
    """Bytes per second of a link rated in Gbit/s (decimal giga, as NICs are rated)."""
    return gbit * 1e9 / BITS_PER_BYTE


@dataclass(frozen=True)
class Nic:
    """One host's full-duplex NIC: the two directions are independent links."""

    egress_Bps: float
    ingress_Bps: float
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("egress_Bps", "ingress_Bps"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be positive and finite, got {value}")
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise ValueError(f"latency_s must be non-negative and finite, got {self.latency_s}")


@dataclass(frozen=True)
class Topology:
    """Hosts 0..H-1 with their NICs, an optional oversubscribed core and the same-host copy rate."""

    nics: tuple[Nic, ...]
    oversubscription: float | None = None
    intra_host_Bps: float | None = None

    def __post_init__(self) -> None:
        if not self.nics:
            raise ValueError("a topology needs at least one host")
        r = self.oversubscription
        if r is not None and not (r >= 1 and math.isfinite(r)):
            raise ValueError(f"oversubscription must be a finite ratio >= 1, got {r}")
        b = self.intra_host_Bps
        if b is not None and not (b > 0 and math.isfinite(b)):
            raise ValueError(f"intra_host_Bps must be positive and finite, got {b}")

    @classmethod
    def uniform(
        cls,
        num_hosts: int,
        nic_Bps: float,
        latency_s: float = 0.0,
        *,
        oversubscription: float | None = None,
        intra_host_Bps: float | None = None,
    ) -> Topology:
        """``num_hosts`` identical hosts whose NICs carry ``nic_Bps`` in each direction."""
        if num_hosts < 1:
            raise ValueError(f"num_hosts must be at least 1, got {num_hosts}")
        nic = Nic(egress_Bps=nic_Bps, ingress_Bps=nic_Bps, latency_s=latency_s)
        return cls((nic,) * num_hosts, oversubscription, intra_host_Bps)

    @property
    def num_hosts(self) -> int:
        return len(self.nics)

    @property
    def has_core(self) -> bool:
        return self.oversubscription is not None

    @property
    def num_links(self) -> int:
        return 2 * self.num_hosts + (1 if self.has_core else 0)

    @property
    def core_link(self) -> int | None:
        """Index of the core link, or None when the fabric is non-blocking."""
        return 2 * self.num_hosts if self.has_core else None

    @staticmethod
    def egress_link(host: int) -> int:
        return 2 * host

    @staticmethod
    def ingress_link(host: int) -> int:
        return 2 * host + 1

    def link_names(self) -> list[str]:
        """Names in link-index order, e.g. ``host3.egress``; the shared core is ``core``."""
        names = [f"host{h}.{d}" for h in range(self.num_hosts) for d in ("egress", "ingress")]
        if self.has_core:
            names.append("core")
        return names

    def link_capacities_Bps(self) -> list[float]:
        """Nominal capacity of every link in link-index order."""
        caps = [c for nic in self.nics for c in (nic.egress_Bps, nic.ingress_Bps)]
        if self.oversubscription is not None:
            caps.append(sum(nic.egress_Bps for nic in self.nics) / self.oversubscription)
        return caps

    def path(self, src: int, dst: int) -> tuple[int, ...]:
        """Links an inter-host transfer crosses, in order; empty for a same-host copy."""
        self.check_host(src)
        self.check_host(dst)
        if src == dst:
            return ()
        core = self.core_link
        if core is None:
            return (self.egress_link(src), self.ingress_link(dst))
        return (self.egress_link(src), core, self.ingress_link(dst))

    def path_latency_s(self, src: int, dst: int) -> float:
        """One-way latency between two hosts: each NIC contributes its own half (see module doc)."""
        if src == dst:
            return 0.0
        return self.nics[src].latency_s + self.nics[dst].latency_s

    def copy_time_s(self, nbytes: float) -> float:
        """Time of a same-host transfer: a memory copy at ``intra_host_Bps``, else instant."""
        return 0.0 if self.intra_host_Bps is None else nbytes / self.intra_host_Bps

    def check_host(self, host: int) -> None:
        """Raise a ValueError naming the valid range when ``host`` is not one of ours."""
        if not 0 <= host < self.num_hosts:
            raise ValueError(f"host {host} out of range 0..{self.num_hosts - 1}")
