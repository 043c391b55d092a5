"""Where everything runs: hosts with their GPUs and NICs, workers and servers placed on them.

The scenario says "8 x p3.16xlarge, 8 co-located servers"; this module turns that into concrete
hosts (index, GPUs, NIC bytes/s, latency) and a host for every worker and server process, the
form both the simulator and realrun's launchers use.
"""

from __future__ import annotations

from dataclasses import dataclass

from simscale.network.topology import Nic, Topology, gbit_per_s
from simscale.spec.scenario import Scenario


@dataclass(frozen=True)
class Host:
    """One machine of the cluster."""

    index: int
    name: str
    gpus: int
    gpu: str | None
    nic_gbps: float
    latency_us: float
    cpu_cores: int

    @property
    def nic_Bps(self) -> float:
        return gbit_per_s(self.nic_gbps)


@dataclass(frozen=True)
class Layout:
    """Hosts, and the host of each worker rank and each server rank."""

    hosts: tuple[Host, ...]
    worker_hosts: tuple[int, ...]
    server_hosts: tuple[int, ...]
    # GPUs of each worker rank; empty: every worker drives all of its host's GPUs.
    worker_gpus: tuple[int, ...] = ()

    def gpus_of(self, rank: int) -> int:
        """GPUs that worker ``rank`` drives."""
        if self.worker_gpus:
            return self.worker_gpus[rank]
        return self.hosts[self.worker_hosts[rank]].gpus

    @property
    def shares_hosts(self) -> bool:
        """Whether some host runs several workers (they share its NIC and CPU)."""
        return len(set(self.worker_hosts)) != len(self.worker_hosts)

    @property
    def num_workers(self) -> int:
        return len(self.worker_hosts)

    @property
    def num_servers(self) -> int:
        return len(self.server_hosts)

    def topology(self, oversubscription: float = 1.0) -> Topology:
        """The nominal network of this layout (the network model applies calibrated factors)."""
        nics = tuple(Nic(h.nic_Bps, h.nic_Bps, h.latency_us * 1e-6) for h in self.hosts)
        return Topology(nics, oversubscription if oversubscription > 1.0 else None)


def layout(scenario: Scenario) -> Layout:
    """Place ``workers_per_host`` workers on every worker host (one, as MXNet runs it, unless
    the scenario says otherwise), and the servers as MXNet's launcher does: co-located server s
    on worker host s; dedicated servers cycled over the server hosts."""
    hosts: list[Host] = []
    worker_host_list: list[int] = []
    worker_gpus: list[int] = []
    for g in scenario.cluster.hosts:
        gpus, gpu, nic, lat, cores = g.resolved()
        for _ in range(g.count):
            i = len(hosts)
            hosts.append(Host(i, f"worker{i}", gpus, gpu, nic, lat, cores))
            worker_host_list += [i] * g.workers_per_host
            worker_gpus += [gpus // g.workers_per_host] * g.workers_per_host
    worker_hosts = tuple(worker_host_list)
    n_worker_hosts = len(hosts)
    n_servers = scenario.num_servers
    if scenario.kvstore.placement == "dedicated" and scenario.cluster.server_hosts is not None:
        sg = scenario.cluster.server_hosts
        nic, lat, cores = sg.resolved()
        first = len(hosts)
        for j in range(sg.count):
            hosts.append(Host(first + j, f"server{j}", 0, None, nic, lat, cores))
        server_hosts = tuple(first + s % sg.count for s in range(n_servers))
    else:
        server_hosts = tuple(s % n_worker_hosts for s in range(n_servers))
    shared = len(worker_hosts) != n_worker_hosts
    return Layout(tuple(hosts), worker_hosts, server_hosts, tuple(worker_gpus) if shared else ())
