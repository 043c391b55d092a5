"""Ring and hierarchical all-reduce with tensor fusion: the alternative to a parameter server.

Horovod's scheme (docs/tensor-fusion.rst, docs/timeline.rst): a coordinator starts a tensor's
all-reduce once every worker has produced it; each cycle (``cycle_ms``) the tensors that are ready
are fused into buffers of at most ``fusion_mb`` and reduced one collective at a time. A ring over
N participants moves ``2(N-1)/N`` of the buffer through every link in ``2(N-1)`` steps. The
hierarchical variant (HOROVOD_HIERARCHICAL_ALLREDUCE) reduce-scatters inside a host over NVLink,
runs the ring between hosts, and all-gathers inside the host again. Horovod runs that middle
step as one MPI_Allreduce per local rank, in host memory (the simulator's caller gives it their
connections; the copies to and from host memory are not modelled).

Horovod without HOROVOD_GPU_ALLREDUCE (``reduce_in: host``) sums in host memory instead: each
fused buffer is copied GPU->host over PCIe, reduced by Open MPI's ring over every GPU's rank
(ompi_coll_base_allreduce_intra_ring: a rank sums each received chunk on its CPU before passing
it on, so the sums add to the ring's time), and copied back. Ranks are placed host by host, so
one of a host's ranks talks to the next host, over one TCP connection (btl_tcp_links 1).
Open MPI's ring is not pipelined as NCCL's is: each step waits for its block, sums it and sends
it on with a blocking send, so every step of every rank waits for the ring's hop between hosts
and pays its latency, and a buffer above 1 MiB per rank goes round in 1 MiB segments, one more
reduce-scatter per segment (``open_mpi_allreduce_steps``). Horovod's background thread copies a
fused buffer's tensors into its fusion buffer and back out (two passes of one core over host
memory), and hands a lone tensor to MPI_Allreduce out of place, which Open MPI copies into the
output buffer first (one pass), all in series with the collective.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import simpy

from simscale.comm.communicator import Communicator, Done
from simscale.des.serial import SerialQueue
from simscale.des.utilization import Utilization, busy_fraction
from simscale.model.cluster import Layout
from simscale.network import Network, Topology
from simscale.spec.costs import CostModel
from simscale.spec.hardware import GPUS, GPUSpec
from simscale.spec.scenario import Scenario

# The latency of one ring hop inside a host, per NCCL's own cost model (NVIDIA/nccl
# src/graph/tuning.cc, hwLat, ring algorithm, Simple protocol: 3.4 us over NVLink, 5.7 us over
# PCIe). NCCL pipelines a collective in chunks, so a flat ring over N GPUs on W hosts pays each
# hop's latency once along the chunks' path: 2(W-1) network hops and 2(N-W) hops inside hosts,
# not 2(N-1) network round trips (the same model, ``nInterSteps`` against ``nsteps``).
NVLINK_STEP_S = 3.4e-6
PCIE_STEP_S = 5.7e-6
# The same table's hop between hosts (NET, ring, Simple): 14 us. DDP's and ZeRO's NCCL over
# InfiniBand or EFA pays it per network hop instead of the NIC latency and the socket send cost
# a Horovod ring over TCP pays (ddp and zero over tcp keep those).
NCCL_NET_STEP_S = 14e-6


# Open MPI's fixed decision for MPI_Allreduce (ompi/mca/coll/tuned/coll_tuned_decision_fixed.c,
# ompi_coll_tuned_allreduce_intra_dec_fixed, v2.1.1 and v3.0.0 alike): below 10,000 bytes
# recursive doubling; a commutative sum up to ``ranks`` MiB the ring; above it the segmented
# ring with 1 MiB segments.
OPEN_MPI_INTERMEDIATE_MESSAGE_BYTES = 10_000
OPEN_MPI_RING_SEGMENT_BYTES = 1 << 20


def open_mpi_allreduce_steps(nbytes: float, ranks: int) -> tuple[str, int]:
    """The algorithm Open MPI's tuned component picks for an MPI_Allreduce of ``nbytes`` over
    ``ranks`` ranks, and its steps, each a blocking exchange with a neighbour that every rank
    waits for (ompi/mca/coll/base/coll_base_allreduce.c at v2.1.1):

    - recursive doubling: log2 of the largest power of two not above ``ranks`` exchanges of the
      whole buffer, and two more when ``ranks`` is not a power of two (the extra ranks fold in
      first and get the result last);
    - ring: 2(ranks - 1) steps of one block (the reduce-scatter, then the all-gather);
    - segmented ring: the reduce-scatter once per phase of ``ranks`` segments, phases =
      count / (ranks x segcount), one more when the rest exceeds half a phase, then one
      all-gather of whole blocks: phases x (ranks - 1) + ranks - 1 steps.
    """
    if ranks <= 1:
        return "none", 0
    if nbytes < OPEN_MPI_INTERMEDIATE_MESSAGE_BYTES:
        power = 1 << (ranks.bit_length() - 1)
        return "recursive_doubling", power.bit_length() - 1 + (2 if power < ranks else 0)
    phase = ranks * OPEN_MPI_RING_SEGMENT_BYTES
    if nbytes <= phase:
        return "ring", 2 * (ranks - 1)
    phases = int(nbytes // phase) + (1 if nbytes % phase > phase / 2 else 0)
    return "segmented_ring", phases * (ranks - 1) + ranks - 1


def intra_host_step_s(gpu: GPUSpec) -> float:
    """A ring hop's latency between two GPUs of one host: NVLink's where the GPUs' peer link is
    faster than PCIe, else PCIe's."""
    return NVLINK_STEP_S if gpu.peer_link_gbytes_per_s > gpu.host_link_gbytes_per_s else PCIE_STEP_S


@dataclass
class _Ready:
    it: int
    key: int
    nbytes: float
    count: int
    done: list[tuple[float, Callable[[float], None]]]
    # Of an all-reduce's traffic, the share this collective moves: 1 for an all-reduce, 1/2
    # for a reduce-scatter or an all-gather (ZeRO, FSDP: simscale.comm.sharded).
    fraction: float = 1.0
    # Of an all-reduce's ring steps between hosts, the share this collective takes (``fraction``
    # unless HSDP's: 0 for a collective inside each host, 1 for its shard's all-reduce).
    across: float = 1.0
    # Of each host's bytes, the share one rank of a two-rank pair sends alone before the rest
    # and the other alone after it (gloo's pairwise rendezvous: simscale.comm.sharded,
    # GLOO_PAIR_GATHER_STAGGER); 0 for every other collective.
    stagger: float = 0.0


class AllReduce:
    """The coordinator and the collectives for all workers of one job."""

    def __init__(
        self,
        env: simpy.Environment,
        net: Network,
        worker_hosts: tuple[int, ...],
        gpus: int,
        peer_link_Bps: float,
        key_bytes: list[float],
        algorithm: str,
        fusion_bytes: float,
        cycle_s: float,
        message_overhead_s: float,
        step_latency_s: float,
        on_buffer: Callable[[list[tuple[int, int]], float, float, float], None] | None = None,
        ceiling_gbps: float = 0.0,
        ceiling_why: str = "",
        tensor_overhead_s: float = 0.0,
        intra_step_s: float = NVLINK_STEP_S,
        ring_size: int | None = None,
        successor: int | None = None,
        host_copy_Bps: float = 0.0,
        host_reduce_Bps: float = 0.0,
    ) -> None:
        self.env = env
        self.net = net
        self.hosts = worker_hosts  # the simulated workers' hosts: a collective waits for each
        # The hosts of the ring (the real cluster's; more than ``worker_hosts`` where one
        # representative stands for them all), and each step's sends: host i to host i + 1,
        # or the representative's to ``successor`` standing for all of them
        # (simscale.model.ring_symmetry).
        self.ring_size = len(worker_hosts) if ring_size is None else ring_size
        w = len(worker_hosts)
        self.ring_sends = (
            [(worker_hosts[i], worker_hosts[(i + 1) % w]) for i in range(w)]
            if successor is None
            else [(worker_hosts[0], successor)]
        )
        self.gpus = gpus
        self.peer_link_Bps = peer_link_Bps
        self.key_bytes = key_bytes
        self.algorithm = algorithm
        self.fusion_bytes = fusion_bytes
        self.cycle_s = cycle_s
        self.msg_s = message_overhead_s
        self.step_latency_s = step_latency_s  # one ring hop's latency between hosts
        self.intra_step_s = intra_step_s  # one ring hop's latency inside a host (NCCL's model)
        # Trace hook: ((iteration, key) pairs, bytes, start, end) of each fused collective.
        self.on_buffer = on_buffer
        # Real-cluster costs (simscale.spec.costs): the most a host's transport moves to the ring's
        # next host (its connections, NCCL's socket transport, EFA's share; 0: only the NIC
        # share limits it; ring_host_cap) and what sets it, and the coordinator's per-tensor cost.
        self.ceiling_gbps, self.ceiling_why = ceiling_gbps, ceiling_why
        self.connection_Bps = ceiling_gbps * 1e9 / 8
        # Each host's transport at that ceiling, one collective after another (all hosts alike).
        self.transport = SerialQueue(env, "ring.transport")
        self.tensor_overhead_s = tensor_overhead_s
        # reduce_in "host": each GPU's PCIe rate to host memory and one rank's CPU sum rate
        # (0, 0: the sums happen on the GPUs).
        self.host_copy_Bps, self.host_reduce_Bps = host_copy_Bps, host_reduce_Bps
        self.pending: dict[tuple[int, int], _Ready] = {}
        self.queue: list[_Ready] = []
        self.wakeup: simpy.Event = env.event()
        env.process(self._cycle())

    @classmethod
    def for_scenario(
        cls,
        env: simpy.Environment,
        net: Network,
        topology: Topology,
        layout: Layout,
        scenario: Scenario,
        costs: CostModel,
        key_bytes: list[float],
        on_buffer: Callable[[list[tuple[int, int]], float, float, float], None] | None = None,
        ring_size: int | None = None,
        successor: int | None = None,
    ) -> AllReduce:
        """The all-reduce of ``scenario``'s workers on ``layout``: its hosts all alike, the
        first one's GPUs and transport ceiling (``ring_host_cap``) stand for every one.
        ``ring_size`` and ``successor``: a representative worker's ring (``__init__``)."""
        first = layout.hosts[layout.worker_hosts[0]]
        gpu = GPUS[str(first.gpu)]
        ar = scenario.kvstore.allreduce
        # PyTorch DDP and ZeRO/FSDP hand NCCL one collective at a time (their buckets and
        # units, simscale.comm.sharded): no Horovod cycle, fusion or per-tensor negotiation.
        # NCCL's flat ring is its transport between hosts; inside a host its NVLink hops are
        # the hierarchical data path's (the bytes through each NIC are the same to 1/N).
        torch = scenario.kvstore.mode in ("ddp", "zero")
        host = ar.reduce_in == "host" and not torch
        gbps, why = ring_host_cap(scenario, costs, first.gpus, flat=True if torch else None)
        ends = layout.worker_hosts[0], layout.worker_hosts[-1] if successor is None else successor
        hop_s = topology.path_latency_s(*ends) * costs.latency_factor
        message_s = costs.message_overhead_us * 1e-6
        if torch and all(g.resolved_transport() != "tcp" for g in scenario.cluster.hosts):
            hop_s, message_s = NCCL_NET_STEP_S * costs.latency_factor, 0.0
        return cls(
            env,
            net,
            layout.worker_hosts,
            first.gpus,
            gpu.peer_link_gbytes_per_s * 1e9,
            key_bytes,
            "hierarchical" if torch else ar.algorithm,
            0.0 if torch else ar.fusion_mb * 1e6,
            0.0 if torch else ar.cycle_ms * 1e-3,
            message_s,
            hop_s,
            on_buffer=on_buffer,
            ceiling_gbps=gbps,
            ceiling_why=why,
            tensor_overhead_s=0.0 if torch else costs.allreduce_tensor_us * 1e-6,
            intra_step_s=intra_host_step_s(gpu),
            ring_size=ring_size,
            successor=successor,
            host_copy_Bps=gpu.host_link_gbytes_per_s * 1e9 if host else 0.0,
            host_reduce_Bps=costs.host_reduce_gbytes_per_s * 1e9 if host else 0.0,
        )

    def member(self, worker: int) -> Communicator:
        """Worker ``worker``'s hook into the collectives."""
        return _Member(self, worker)

    def reset_counters(self) -> None:
        self.transport.reset()

    def utilization(self, t0: float, t1: float) -> list[Utilization]:
        """The hosts' transport at its ceiling, where one limits the ring."""
        if self.transport.busy_s <= 0:
            return []
        what = (
            f"each host's ring between hosts at its {self.ceiling_gbps:.1f} Gbit/s "
            f"({self.ceiling_why})"
        )
        return [busy_fraction(self.transport, t0, t1, "transport", what)]

    def communicate(self, worker: int, it: int, key: int, done: Callable[[float], None]) -> None:
        """Worker ``worker`` has key ``key``'s gradient for iteration ``it``."""
        self.submit((it, key), it, key, self.key_bytes[key], 1.0, done)

    def submit(
        self,
        tag: object,
        it: int,
        key: int,
        nbytes: float,
        fraction: float,
        done: Callable[[float], None],
        across: float | None = None,
        stagger: float = 0.0,
    ) -> None:
        """One worker is ready for the collective ``tag`` over ``nbytes`` (``fraction`` of an
        all-reduce's traffic inside a host, ``across`` of its ring steps between hosts, by
        default ``fraction`` too; ``stagger``: ``_Ready.stagger``); it runs, in turn, once
        every worker is."""
        entry = self.pending.get(tag)
        now = self.env.now
        if entry is None:
            share = fraction if across is None else across
            entry = self.pending[tag] = _Ready(it, key, nbytes, 0, [], fraction, share, stagger)
        entry.count += 1
        entry.done.append((now, done))
        if entry.count == len(self.hosts):
            del self.pending[tag]
            self.queue.append(entry)
            if not self.wakeup.triggered:
                self.wakeup.succeed()

    def _cycle(self) -> simpy.events.ProcessGenerator:
        while True:
            if not self.queue:
                self.wakeup = self.env.event()
                yield self.wakeup
            if self.cycle_s > 0:
                yield self.env.timeout(self.cycle_s)
            while self.queue:
                batch, total = [], 0.0
                while self.queue and (
                    not batch
                    or (
                        total + self.queue[0].nbytes <= self.fusion_bytes
                        and self.queue[0].fraction == batch[0].fraction
                        and self.queue[0].across == batch[0].across
                        and self.queue[0].stagger == batch[0].stagger
                    )
                ):
                    entry = self.queue.pop(0)
                    batch.append(entry)
                    total += entry.nbytes
                if self.tensor_overhead_s > 0:
                    yield self.env.timeout(len(batch) * self.tensor_overhead_s)
                started = self.env.now
                first = batch[0]
                yield from self._allreduce(
                    total, first.fraction, first.across, first.stagger, tensors=len(batch)
                )
                if self.on_buffer is not None:
                    keys = [(e.it, e.key) for e in batch]
                    self.on_buffer(keys, total, started, self.env.now)
                for entry in batch:
                    last = max(t for t, _ in entry.done)
                    for t, done in entry.done:
                        done(last - t)  # this worker waited for the last one to be ready

    def _allreduce(
        self,
        nbytes: float,
        fraction: float = 1.0,
        across: float | None = None,
        stagger: float = 0.0,
        tensors: int = 1,
    ) -> simpy.events.ProcessGenerator:
        """An all-reduce of ``nbytes`` (``tensors`` fused), or with ``fraction`` 1/2 its
        reduce-scatter or all-gather half (the same hops, half the ring's steps). ``across``
        apart from ``fraction`` is HSDP's (simscale.comm.sharded): 0 keeps the collective
        inside each host (its ring of GPUs over NVLink, each hop's latency paid), 1
        all-reduces between hosts what the host's reduce-scatter left (the same bytes through
        the NIC as an all-reduce)."""
        w, g = self.ring_size, self.gpus
        across = fraction if across is None else across
        if self.host_copy_Bps > 0:
            yield from self._host_allreduce(nbytes, tensors)
            return
        if across == 0:
            if g > 1:
                hops = round(2 * (g - 1) * fraction)
                intra = 2 * (g - 1) / g * nbytes / self.peer_link_Bps
                yield self.env.timeout(intra * fraction + hops * self.intra_step_s)
            return
        if self.algorithm == "hierarchical" or w == 1 or across != fraction:
            intra = 2 * (g - 1) / g * nbytes / self.peer_link_Bps if g > 1 else 0.0
            yield self.env.timeout(intra * fraction / 2)  # reduce-scatter inside the host
            if w > 1:
                steps = max(1, round(2 * (w - 1) * across))
                yield from self._ring(w, nbytes / w, 0.0, steps=steps, stagger=stagger)
            yield self.env.timeout(intra * fraction / 2)  # all-gather inside the host
        else:
            n = w * g
            chunk = nbytes / n
            yield from self._ring(
                w,
                chunk,
                chunk / self.peer_link_Bps if g > 1 else 0.0,
                steps=2 * (n - 1),
                network_steps=2 * (w - 1),
                stagger=stagger,
            )

    def _host_allreduce(self, nbytes: float, tensors: int = 1) -> simpy.events.ProcessGenerator:
        """MPI_Allreduce of ``nbytes`` (``tensors`` fused) in host memory (module doc): the copy
        to the host; Horovod's passes over host memory (into and out of its fusion buffer, or
        Open MPI's copy of a lone tensor into the output); Open MPI's algorithm over all n ranks
        (``open_mpi_allreduce_steps``), every step waiting for the hop between hosts, with the
        ring's bytes (2(n-1) blocks of nbytes/n through each host's link to the next) and the
        CPU's sums of the n-1 blocks each rank receives in the reduce-scatter; the copy back."""
        copy_s = nbytes / self.host_copy_Bps
        yield self.env.timeout(copy_s)
        if self.host_reduce_Bps > 0:
            passes = 2 if tensors > 1 else 1
            yield self.env.timeout(passes * nbytes / self.host_reduce_Bps)
        n = self.ring_size * self.gpus
        algorithm, steps = open_mpi_allreduce_steps(nbytes, n)
        # Lockstep: with more than one host every step waits for the hop between hosts; on one
        # host every hop stays inside it (shared memory), at the in-host hop's latency.
        across = self.ring_size > 1
        if algorithm == "recursive_doubling":
            # Each exchange sends and sums the whole (small) buffer.
            yield from self._ring(
                self.ring_size, nbytes, 0.0, steps=steps, network_steps=steps if across else 0
            )
            if self.host_reduce_Bps > 0:
                yield self.env.timeout(steps * nbytes / self.host_reduce_Bps)
        elif n > 1:
            chunk = nbytes / n
            ring_steps = 2 * (n - 1)
            yield from self._ring(
                self.ring_size, chunk, 0.0, steps=ring_steps, network_steps=ring_steps * across
            )
            if steps > ring_steps:  # the segmented ring's further lockstep steps
                hop_s = self.step_latency_s + self.msg_s if across else self.intra_step_s
                yield self.env.timeout((steps - ring_steps) * hop_s)
            if self.host_reduce_Bps > 0:
                yield self.env.timeout((n - 1) * chunk / self.host_reduce_Bps)
        yield self.env.timeout(copy_s)

    def _ring(
        self,
        w: int,
        chunk_bytes: float,
        intra_step_s: float,
        steps: int | None = None,
        network_steps: int | None = None,
        stagger: float = 0.0,
    ) -> simpy.events.ProcessGenerator:
        """``steps`` ring steps, each host sending ``chunk_bytes`` to the next per step, of which
        ``network_steps`` hops cross the network (the rest stay inside a host).

        A bandwidth-bound ring keeps every link busy from the first step to the last, so the
        steps are sent as one stream per host (``steps * chunk`` bytes, all hosts at once,
        sharing the network with any other traffic) and each hop's fixed cost is added: the
        alpha-beta model T = sum of alphas + steps * chunk / beta (Thakur et al. 2005), a network
        hop's alpha being its latency and send cost, a hop inside a host NCCL's (module doc).
        This keeps a 512-GPU ring at W transfers per collective instead of 2(N-1) * W.
        """
        steps = 2 * (w - 1) if steps is None else steps
        network_steps = steps if network_steps is None else network_steps
        per_host = steps * chunk_bytes
        # A two-host ring's one pair (``stagger``: _Ready): one host's first share alone, ...
        ahead = stagger * per_host if w == 2 and len(self.ring_sends) == 2 else 0.0
        if ahead > 0:
            yield self.env.all_of(self._sends([self.ring_sends[0]], ahead, 0.0, w))
        yield self.env.all_of(
            self._sends(self.ring_sends, per_host - ahead, steps * intra_step_s, w)
        )
        if ahead > 0:  # ... then both, then the other host's last share alone
            yield self.env.all_of(self._sends([self.ring_sends[1]], ahead, 0.0, w))
        # Each network hop but the last also waits one latency for its chunk, and pays a send
        # cost; each hop inside a host its (much smaller) latency.
        alpha_s = self.step_latency_s + self.msg_s
        fixed_s = (network_steps - 1) * alpha_s + self.msg_s if network_steps > 0 else 0.0
        fixed_s += (steps - network_steps) * self.intra_step_s
        if steps > 1 and fixed_s > 0:
            yield self.env.timeout(fixed_s)

    def _sends(
        self, pairs: list[tuple[int, int]], nbytes: float, intra_s: float, w: int
    ) -> list[simpy.Event]:
        """Each pair's host sending ``nbytes`` to the next at once, over the network and its
        transport, beside ``intra_s`` of hops inside the host."""
        sends = [self.net.transfer(a, b, nbytes) for a, b in pairs]
        if intra_s > 0:
            sends.append(self.env.timeout(intra_s))
        if self.connection_Bps > 0 and w > 1:
            # Each host's steps leave through its transport, which cannot go faster than this.
            sends.append(self.transport.run(nbytes / self.connection_Bps))
        return sends


class _Member:
    """One worker's side of the all-reduce: it only tells the coordinator a key is ready."""

    __slots__ = ("allreduce", "worker")

    def __init__(self, allreduce: AllReduce, worker: int) -> None:
        self.allreduce = allreduce
        self.worker = worker

    def communicate(self, iteration: int, key: int, done: Done) -> None:
        self.allreduce.communicate(self.worker, iteration, key, done)


def ring_connections(scenario: Scenario, gpus_per_host: int, flat: bool | None = None) -> int:
    """TCP connections a host's share of the ring between hosts leaves over. A flat ring is
    NCCL's: the scenario's ``sockets``, else NCCL's default for the slowest host group (16 on
    AWS's ENA since NCCL 2.4.8, else 1; simscale.spec.hardware). Horovod's hierarchical
    all-reduce crosses hosts with MPI_Allreduce instead, one per local rank in parallel
    (horovod/common/ops/nccl_operations.cc, NCCLHierarchicalAllreduce: NCCL reduce-scatter,
    MPI_Allreduce on the CROSS communicator, NCCL all-gather), and Open MPI's TCP transport
    keeps one connection per peer (btl_tcp_links 1): one per GPU of the host. ``flat``
    True: NCCL's ring whatever the scenario's algorithm (DDP, ZeRO)."""
    if flat is None:
        flat = scenario.kvstore.allreduce.algorithm == "ring"
    if not flat:
        return gpus_per_host
    sockets = scenario.kvstore.allreduce.sockets
    if sockets is not None:
        return sockets
    return min(g.resolved_nccl_sockets() for g in scenario.cluster.hosts)


def ring_host_cap(
    scenario: Scenario, costs: CostModel, gpus_per_host: int, flat: bool | None = None
) -> tuple[float, str]:
    """The most one host's share of the ring between hosts moves besides its NIC share,
    Gbit/s (0: nothing else limits it), and what sets it, by the slowest transport among
    the worker hosts: over tcp, its connections (``ring_connections`` of
    ``costs.connection_gbps`` each) and, for NCCL's flat ring, its socket transport's
    ``costs.socket_host_gbps``; over efa, NCCL's ring reaches ``costs.efa_ring_share`` of
    the slowest NIC; over rdma (InfiniBand, RoCE) nothing but the NIC. Horovod's
    hierarchical variant crosses hosts with MPI, which NCCL's figures do not describe: only
    its connections' ceiling; with ``reduce_in: host``, MPI's one connection to the next host.
    ``flat`` True: NCCL's ring whatever the algorithm (DDP, ZeRO)."""
    hosts = scenario.cluster.hosts
    transports = {g.resolved_transport() for g in hosts}
    if scenario.kvstore.allreduce.reduce_in == "host" and flat is not True:
        # MPI in host memory: one rank of each host sends to the next host, over one
        # connection (Open MPI's btl_tcp_links default); over rdma or efa, the NIC only.
        if "tcp" in transports and costs.connection_gbps > 0:
            return costs.connection_gbps, "1 MPI TCP connection"
        return 0.0, ""
    if flat is None:
        flat = scenario.kvstore.allreduce.algorithm == "ring"
    if "tcp" in transports:
        n = ring_connections(scenario, gpus_per_host, flat)
        via = "NCCL" if flat else "MPI"
        caps = [(n * costs.connection_gbps, f"{n} {via} TCP connection(s)")]
        if flat:
            caps.append((costs.socket_host_gbps, "NCCL's socket transport"))
        return min(((c, why) for c, why in caps if c > 0), default=(0.0, ""))
    if "efa" in transports and flat and costs.efa_ring_share < 1:
        nic = min(g.resolved()[2] for g in hosts)
        return (
            costs.efa_ring_share * nic,
            f"NCCL over EFA, {costs.efa_ring_share:.0%} of the NIC",
        )
    return 0.0, ""
