"""The netns launcher: every node of a scenario inside its own host's network namespace.

``simscale.model.cluster.layout`` says which hosts the scenario has (worker hosts, dedicated server
hosts) and where every worker and server runs; this launcher builds one ``EmulatedCluster``
host per layout host, each NIC shaped to ``nic_gbps * 1000 / D`` Mbit/s and ``latency_us * D``
with D the scenario's ``realrun.dilation``, runs the scheduler on host 0, and points every node
at host 0's address. It samples this machine's load while the job runs
(``realrun.emulated.machine_load``)
so that a run the machine could not carry is marked invalid, never silently kept.

Use it as a context manager: leaving it (normally, by an exception, Ctrl-C) stops every node
and deletes the namespaces; ``EmulatedCluster`` also does so at exit and on SIGTERM.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from realrun.emulated.emulated_cluster import EmulatedCluster, HostLink
from realrun.emulated.machine_load import LoadSampler
from realrun.emulated.netns import NetnsCommandError, namespace_pids, run_command
from realrun.launching.launch import child_environ
from realrun.launching.local_launcher import LocalProcess
from simscale.model.cluster import Layout, layout

MBIT_PER_GBIT = 1000.0
# TCP small queues: how many bytes one socket may have in its host's qdisc. The kernel default
# (4 MiB here) exceeds the emulated NIC's byte queue (realrun.emulated.shaping: a few 64 KiB frames
# at
# these rates), so a sender dropped its own packets at its own NIC and cut its window; a real
# host's NIC queue is deeper than its TSQ limit. 64 KiB per socket: no local drops measured on
# 2 workers -> 1 server at 100 Mbit/s (725 drops per run before).
TCP_LIMIT_OUTPUT_BYTES = 65_536
# Loss-based TCP, as the clusters MXNet ran on (cubic is not allowed inside a namespace on
# this kernel, reno and bbr are). BBR over the emulated shallow queues retransmitted ~10x more
# under incast (2815 vs 271 segments in the same run) and ran the PS job ~13% slower.
TCP_CONGESTION_CONTROL = "reno"
# The emulated hosts are the instrument: run them ahead of unrelated programs sharing this
# machine (a test suite, a benchmark), whose CPU would otherwise delay a node and stretch the
# iterations. Below the delay wires (nice -10), which stand for network hardware.
NODE_NICE = -5


def host_links(lay: Layout, dilation: float) -> list[HostLink]:
    """The emulated NIC of every layout host, under time dilation ``dilation``."""
    return [
        HostLink(h.name, h.nic_gbps * MBIT_PER_GBIT, h.latency_us).dilated(dilation)
        for h in lay.hosts
    ]


class NetnsLauncher:
    """Starts nodes in the namespaces of an emulated cluster shaped like the scenario."""

    name = "netns"

    def __init__(self, scenario: Any) -> None:
        self.layout = layout(scenario)
        self.dilation = float(scenario.realrun.dilation)
        self.cluster = EmulatedCluster(host_links(self.layout, self.dilation))
        self.sampler: LoadSampler | None = None
        self._wire_pids: list[int] = []
        self._node_pids: list[int] = []

    # ---- life cycle ----

    def __enter__(self) -> NetnsLauncher:
        self.cluster.start()
        for host in self.cluster.hosts:
            run_command(
                [
                    *("ip", "netns", "exec", host.namespace, "sysctl", "-q", "-w"),
                    f"net.ipv4.tcp_limit_output_bytes={TCP_LIMIT_OUTPUT_BYTES}",
                    f"net.ipv4.tcp_congestion_control={TCP_CONGESTION_CONTROL}",
                ]
            )
        # The wires move themselves into the switch namespace: those are all its processes.
        self._wire_pids = namespace_pids(self.cluster.switch_namespace)
        self.sampler = LoadSampler(lambda: self._wire_pids, lambda: self._node_pids).start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        self.cluster.close()

    # ---- the Launcher protocol ----

    @property
    def scheduler_host(self) -> str:
        return self.cluster.hosts[0].address

    def host_index(self, role: str, rank: int) -> int:
        """Layout host of a node: the scheduler on host 0, as MXNet's launch.py puts it first."""
        if role == "scheduler":
            return 0
        if role == "server":
            return self.layout.server_hosts[rank]
        return self.layout.worker_hosts[rank]

    def host_of(self, role: str, rank: int) -> str:
        return self.cluster.hosts[self.host_index(role, rank)].address

    def describe(self) -> dict[str, Any]:
        return {
            **self.cluster.describe(),
            "network_counters": self._counters(),
            "tcp": {
                "congestion_control": TCP_CONGESTION_CONTROL,
                "limit_output_bytes": TCP_LIMIT_OUTPUT_BYTES,
            },
            "dilation": self.dilation,
            "worker_hosts": [self.cluster.hosts[i].name for i in self.layout.worker_hosts],
            "server_hosts": [self.cluster.hosts[i].name for i in self.layout.server_hosts],
            "scheduler_host": self.cluster.hosts[0].name,
        }

    def _counters(self) -> list[dict[str, Any]] | dict[str, str]:
        """Drops and TCP counters of every host, read while the cluster still stands."""
        try:
            return [c.to_dict() for c in self.cluster.counters()]
        except (NetnsCommandError, ValueError) as exc:
            return {"error": f"could not read the network counters: {exc}"}

    def start(self, role: str, rank: int, argv: Sequence[str], env: dict[str, str]) -> LocalProcess:
        host = self.cluster.hosts[self.host_index(role, rank)]
        popen = self.cluster.popen(
            host,
            ["nice", "-n", str(NODE_NICE), *argv],
            env=child_environ(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if role == "scheduler" else subprocess.DEVNULL,
            stderr=None,
            text=True,
        )
        self._node_pids.append(popen.pid)
        return LocalProcess(role, rank, host.address, popen)
