"""How busy a resource was over the measured window, as each component reports it.

Every component that owns a queue (a server's handler thread, a host's copy engine, an input
pipeline, a ring's transport) counts its own busy time and says in words what it is; the
measurement (simscale.report.measurement) only asks each for ``utilization(t0, t1)`` after
``reset_counters()`` at the start of the window, and never reaches into their queues.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Utilization:
    """Busy fraction of one resource over the measured window."""

    resource: str  # e.g. "host0.egress", "server3.cpu", "worker1.copies", "worker1.gpu"
    kind: str  # nic | server | copies | input | transport | gpu
    busy_fraction: float
    description: str  # the resource in words, for the bottleneck sentence


class BusyCounter(Protocol):
    """A queue that counts its busy time (simscale.des.serial, simscale.des.sharing)."""

    name: str

    def busy_within(self, start_s: float, end_s: float) -> float: ...


def busy_fraction(
    queue: BusyCounter,
    t0: float,
    t1: float,
    kind: str,
    description: str,
    resource: str | None = None,
) -> Utilization:
    """``queue``'s busy share of ``[t0, t1]``, reported as ``resource`` (default: its name)."""
    share = queue.busy_within(t0, t1) / (t1 - t0)
    return Utilization(queue.name if resource is None else resource, kind, share, description)


class Measured(Protocol):
    """A component that counts its own busy time."""

    def reset_counters(self) -> None:
        """Start counting afresh: the measured window begins now."""
        ...

    def utilization(self, t0: float, t1: float) -> list[Utilization]:
        """Busy fraction of each of its resources over ``[t0, t1]`` (counters reset at t0);
        empty where it has nothing worth reporting."""
        ...
