"""A parameter-server job small enough to time by hand, for the protocol's unit tests.

W workers on hosts 0..W-1, S servers on hosts W..W+S-1, a fair-share network whose worker NICs
move ``B`` bytes/s each way and whose server NICs are a hundred times faster (so a server's NIC
never limits: every transfer takes its bytes / ``B``), ``LAT`` of latency per NIC (a path's
one-way latency is ``PATH_S``), and round software costs. Every worker's host copies are free
unless a copy rate is given (then a key costs bytes / rate to sum into host memory and as
much to copy back).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from simscale.comm.ps.client import PSClient, PSProtocol
from simscale.comm.ps.connections import Connections
from simscale.comm.ps.server import HEADER_BYTES, ServerGroup
from simscale.comm.ps.step_barrier import StepBarrier
from simscale.model.worker import HostCopies
from simscale.network import Nic, Topology, make_network
from simscale.spec.costs import CostModel

B = 1e9  # worker NIC, bytes/s each way
LAT = 50e-6  # per NIC
PATH_S = 2 * LAT  # one-way latency of a worker-server path
MSG_S = 10e-6  # message_overhead_us: a sender's cost per message
REQUEST_S = 5e-6  # server_request_us: the handler's cost per request
MERGE_S_PER_BYTE = 0.1e-9
UPDATE_S_PER_BYTE = 0.4e-9
COSTS = CostModel(
    bandwidth_factor=1.0,
    message_overhead_us=MSG_S * 1e6,
    server_request_us=REQUEST_S * 1e6,
    server_merge_ns_per_byte=MERGE_S_PER_BYTE * 1e9,
    server_update_ns_per_byte=UPDATE_S_PER_BYTE * 1e9,
)
N = 1e6  # bytes of the keys the tests send
WIRE_S = (N + HEADER_BYTES) / B  # one push or one reply of a 1 MB slice on a worker's NIC


@dataclass
class Rig:
    """The job, and when each (worker, key) round trip ended and what it waited for others."""

    env: simpy.Environment
    servers: ServerGroup
    clients: list[PSClient]
    done: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    # (worker, iteration, key, phase, time) as the clients mark them (simscale.comm.ps.client)
    phases: list[tuple[int, int, int, str, float]] = field(default_factory=list)

    def communicate(self, worker: int, key: int, at_s: float = 0.0, it: int = 0) -> None:
        """Worker ``worker`` hands over key ``key``'s gradient at ``at_s``."""

        def go(_e: object) -> None:
            self.clients[worker].communicate(
                it, key, lambda waited: self.done.__setitem__((worker, key), (self.env.now, waited))
            )

        self.env.timeout(at_s).callbacks.append(go)


def ps_rig(
    slices: tuple[tuple[tuple[int, float], ...], ...] = (((0, N),),),
    *,
    workers: int = 1,
    servers: int = 1,
    sync: bool = True,
    pull_with_push: bool = False,
    step_barrier: bool = False,
    compress_2bit: bool = False,
    copy_Bps: float | None = None,
    window_bytes: float = 0.0,
) -> Rig:
    """The job; ``slices``: per key, (server, bytes) of each slice (default one 1 MB key).
    ``window_bytes`` > 0: priority scheduling with that byte window per connection."""
    env = simpy.Environment()
    fast = Nic(100 * B, 100 * B, LAT)
    topology = Topology((Nic(B, B, LAT),) * workers + (fast,) * servers)
    net = make_network("fairshare", env, topology)
    worker_hosts = tuple(range(workers))
    server_hosts = tuple(range(workers, workers + servers))
    connections = Connections(
        env,
        net,
        topology,
        worker_hosts,
        server_hosts,
        priority=window_bytes > 0,
        window_bytes=window_bytes,
        ack_on_receipt=pull_with_push,
    )
    group = ServerGroup(
        env,
        connections.to_worker,
        COSTS,
        server_hosts,
        workers,
        sync=sync,
        pull_with_push=pull_with_push,
        credit=connections.credit,
    )
    barrier = StepBarrier(env, group, 0, workers, workers) if step_barrier else None
    protocol = PSProtocol(
        slices=slices,
        key_bytes=tuple(sum(n for _, n in key) for key in slices),
        message_overhead_s=MSG_S,
        compress_2bit=compress_2bit,
        pull_with_push=pull_with_push,
    )
    clients = []
    phases: list[tuple[int, int, int, str, float]] = []
    for rank in range(workers):
        copies = HostCopies(
            env,
            rank,
            1,
            on_cpu=copy_Bps is None,
            device_mode=False,
            host_link_Bps=copy_Bps or B,
            peer_link_Bps=copy_Bps or B,
            merge_s_per_byte=0.0,
        )
        clients.append(
            PSClient(
                env,
                rank,
                protocol,
                group,
                connections,
                copies,
                barrier=barrier,
                mark=lambda *phase: phases.append(phase),
            )
        )
    return Rig(env, group, clients, phases=phases)
