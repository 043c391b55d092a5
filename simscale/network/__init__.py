"""The network behind one small contract: ``transfer(src, dst, nbytes)`` returns an event.

The parameter-server model and the workload call only ``make_network`` and the ``Network``
protocol, so a model can be swapped by name ("fairshare": max-min fair flows, the accurate
default; "fifo": FIFO NIC queues, the cheap baseline) without them knowing which one runs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol

import simpy

from simscale.network.classes import Routes
from simscale.network.config import NetworkConfig
from simscale.network.fairshare import max_min_fair
from simscale.network.fifo import FifoNetwork
from simscale.network.flows import FairShareNetwork
from simscale.network.stats import LinkStat
from simscale.network.topology import Nic, Topology, gbit_per_s

__all__ = [
    "NETWORK_KINDS",
    "FairShareNetwork",
    "FifoNetwork",
    "LinkStat",
    "Network",
    "NetworkConfig",
    "Nic",
    "Routes",
    "Topology",
    "gbit_per_s",
    "make_network",
    "max_min_fair",
]


class Network(Protocol):
    """What the simulator may ask of any network model."""

    def transfer(
        self,
        src: int,
        dst: int,
        nbytes: float,
        on_sent: Callable[[], None] | None = None,
        connection: Hashable | None = None,
    ) -> simpy.Event:
        """Start sending ``nbytes`` from host ``src`` to host ``dst``; fires on the last byte.
        ``on_sent()`` is called when the last byte has left the sender. Messages with the same
        ``connection`` id (one TCP connection, simscale.network.stream) leave in order, each
        starting when the one before it has left, exactly as if the sender waited for
        ``on_sent`` before handing over the next; a model may use that to carry them as one
        flow."""
        ...

    def link_stats(self) -> list[LinkStat]:
        """Per NIC direction (``host3.egress``, ``host3.ingress``) and ``core``: traffic so far."""
        ...

    def reset_stats(self) -> None:
        """Start the measured window now (warm-up traffic must not count)."""
        ...


NETWORK_KINDS = {"fairshare": FairShareNetwork, "fifo": FifoNetwork}


def make_network(
    kind: str,
    env: simpy.Environment,
    topology: Topology,
    config: NetworkConfig | None = None,
    routes: Routes | None = None,
) -> Network:
    """Build the network model named ``kind`` on ``topology`` (``config``: its calibrated
    factors, simscale.network.config; default: none). ``routes`` gives each host pair's flows
    their links and per-link multiplicities (a symmetry-reduced cluster,
    simscale.model.symmetry); only the fair-share model takes it."""
    try:
        cls = NETWORK_KINDS[kind]
    except KeyError:
        choices = ", ".join(sorted(NETWORK_KINDS))
        raise ValueError(f"unknown network kind {kind!r}; choose one of: {choices}") from None
    if routes is not None:
        if cls is not FairShareNetwork:
            raise ValueError(f"network kind {kind!r} cannot carry weighted routes")
        return FairShareNetwork(env, topology, config, routes)
    return cls(env, topology, config)
