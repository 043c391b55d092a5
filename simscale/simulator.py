"""Run one scenario through the discrete-event model and measure it like a benchmark would.

Builds the cluster layout, the network, the workers and the servers (or the all-reduce), runs
warm-up iterations, then measured iterations until the iteration time is stable, and reduces what
happened to a ``Result``. Deterministic for a given scenario and seed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import simpy

from simscale.comm.allreduce import AllReduce, intra_host_step_s
from simscale.comm.local import has_kvstore, updates_on_cpu
from simscale.comm.ps.server import HEADER_BYTES, ServerGroup
from simscale.comm.ps.step_barrier import StepBarrier, barrier_server
from simscale.des.serial import CorePool, SerialQueue
from simscale.model import cluster, symmetry
from simscale.model.compute import layer_times, samples_per_s_without_communication
from simscale.model.input_pipeline import InputPipeline, batch_decode_s, loader_cores
from simscale.model.stragglers import straggler_factor, synchronised_gpus
from simscale.model.symmetry import TWO_BIT_RATIO
from simscale.model.worker import HostCopies, Span, Worker
from simscale.network import NetworkConfig, make_network
from simscale.network.stream import Stream
from simscale.report.results import Result, Utilization, WorkerResult
from simscale.report.trace import KeyPhases
from simscale.spec.costs import CostModel
from simscale.spec.hardware import GPUS
from simscale.spec.scenario import DIST_MODES, Scenario
from simscale.spec.sharding import place_keys
from simscale.zoo import BYTES_PER_ELEMENT

MIN_MEASURED = 3  # iterations that must agree before the measurement counts as stable
# How often the run looks at the wall clock: ~5 ms of events on a small cluster, and still under
# a second where one event re-solves a thousand hosts' network.
CHECK_EVERY_EVENTS = 1024
PROGRESS_EVERY_S = 1.0  # wall seconds between two progress reports


class IncompleteRun(Exception):
    """The wall-clock limit struck before one measured iteration was complete."""


@dataclass(frozen=True)
class Progress:
    """Where a running simulation is, for a progress display."""

    iteration: int  # iterations every worker has started
    iterations: int  # at most this many are simulated
    warmup: int
    simulated_s: float
    events: int
    wall_s: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class _Clock:
    start_s: float
    max_seconds: float | None
    progress: Callable[[Progress], None] | None
    next_report_s: float = 0.0


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes (for benchmarks)."""

    def __init__(self) -> None:
        super().__init__()
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


PATHS = ("auto", "exact", "symmetric")


class Simulation:
    """One scenario, built and ready to run; ``run()`` returns the Result.

    ``path``: "exact" simulates every worker; "symmetric" one representative of identical
    workers (simscale.model.symmetry; refused with the reason where it does not apply); "auto" (the
    default) the symmetric path where it applies, else the exact one, unless the exact model is
    out of reach (``symmetry.exact_out_of_reach``): then the symmetric one, marked approximate."""

    def __init__(
        self,
        scenario: Scenario,
        costs: CostModel | None = None,
        *,
        trace: bool = False,
        path: str = "auto",
    ) -> None:
        if path not in PATHS:
            raise ValueError(f"path: got {path!r}, expected one of {', '.join(PATHS)}")
        self._created_s = time.perf_counter()  # --max-seconds counts the build too
        self.scenario = scenario
        self.costs = costs or CostModel()
        self.spans: list[Span] | None = [] if trace else None
        self.key_phases: KeyPhases | None = KeyPhases(scenario.num_workers) if trace else None
        self.env = CountingEnvironment()
        self.full_layout = cluster.layout(scenario)
        self.layout = self.full_layout
        self.reduction: symmetry.Reduction | None = None
        structural = symmetry.reason_for_exact(
            scenario, self.full_layout, self.costs, trace=trace, check_load=False
        )
        if path == "symmetric" and structural is not None:
            raise ValueError(f"the symmetric path does not apply: {structural}")
        beyond = (
            None
            if structural
            else symmetry.reason_for_exact(scenario, self.full_layout, self.costs, trace=trace)
        )  # the reduction can be built, but this shape is outside where it was validated
        # Outside the validated range the exact model is the reference, unless it is out of
        # reach: then an approximate answer in seconds, said to be one, beats none in hours.
        out_of_reach = (
            symmetry.exact_out_of_reach(scenario, self.full_layout)
            if beyond and path == "auto"
            else None
        )
        #: True where the symmetric path ran outside the loads it was validated at.
        self.approximate = False
        if path == "exact":
            reason: str | None = "asked for"
        elif path == "symmetric" or (beyond and out_of_reach):
            reason = None
            self.approximate = beyond is not None
        else:
            reason = structural or beyond
        if reason is None:
            self.reduction = symmetry.reduce(self.full_layout)
            self.layout = self.reduction.layout
        self.path = "exact" if self.reduction is None else "symmetric"
        self.path_reason = reason or (
            f"{self.full_layout.num_workers} identical workers simulated as one"
        )
        if self.approximate:
            why = f"; the exact model is out of reach ({out_of_reach})" if out_of_reach else ""
            self.path_reason += f", APPROXIMATE: {beyond}{why}; {symmetry.APPROXIMATION_ERROR}"
        self.model = scenario.model.spec()
        self._build()

    @property
    def copies_per_worker(self) -> int:
        """Real workers each simulated worker stands for (1 on the exact path)."""
        return 1 if self.reduction is None else self.reduction.copies

    # ---- construction ----

    def _build(self) -> None:
        s, costs, env, lay = self.scenario, self.costs, self.env, self.layout
        shared = s.cluster.shared_cpu_cores
        self.cores = CorePool(shared) if shared is not None else None
        self.topology = lay.topology(s.cluster.core_oversubscription)
        config = NetworkConfig(
            bandwidth_factor=costs.bandwidth_factor,
            latency_factor=costs.latency_factor,
            stream_max_Bps=self._ps_connection_Bps(),
            share_sigma=costs.tcp_share_sigma,
            seed=s.simulation.seed,
        )
        self.net = make_network(
            s.simulation.network_model, env, self.topology, config, routes=self.reduction
        )
        mode = s.kvstore.mode
        bpe = BYTES_PER_ELEMENT[s.training.gradient_precision]
        self.key_bytes = [a.elements * bpe for a in self.model.arrays]
        layer_keys: list[list[int]] = [[] for _ in self.model.layers]
        for key, layer in enumerate(self.model.array_layer):
            layer_keys[layer].append(key)
        n_iter = s.simulation.warmup_iterations + s.simulation.measured_iterations + 1
        rng = np.random.default_rng(s.simulation.seed)
        device_mode = mode.endswith("device")

        self.servers: ServerGroup | None = None
        self.allreduce: AllReduce | None = None
        self.ring_cap: tuple[float, str] = (0.0, "")  # Gbit/s and why (_ring_host_cap)
        self.step_barrier: StepBarrier | None = None
        if mode in DIST_MODES:
            self.servers = ServerGroup(
                env,
                self._server_stream,
                costs,
                lay.server_hosts,
                lay.num_workers,
                # With a step barrier each push is applied as it comes
                # (simscale.comm.ps.step_barrier).
                sync=mode in ("dist_sync", "dist_sync_device") and s.kvstore.sync == "key",
                pull_with_push=s.kvstore.pull_request == "with_push",
                cores=self.cores,
                on_updated=self.key_phases.updated if self.key_phases else None,
                copies=self.copies_per_worker,
                grpc=s.kvstore.rpc == "grpc",
            )
            placed = place_keys(
                [a.elements for a in self.model.arrays],
                lay.num_servers,
                s.kvstore.bigarray_bound,
                s.kvstore.key_placement,
            )
            self.slices = [[(sl.server, sl.elements * bpe) for sl in key] for key in placed]
            if s.kvstore.sync == "step":
                self.step_barrier = StepBarrier(
                    env,
                    self.servers,
                    barrier_server(lay.num_servers),
                    lay.num_workers,
                    self.full_layout.num_workers,
                    sum(len(key) for key in self.slices),
                    self._worker_stream,
                    lambda worker: self.vans[worker],
                    costs.message_overhead_us * 1e-6,
                )
        elif mode == "allreduce":
            first = lay.hosts[lay.worker_hosts[0]]
            ar = s.kvstore.allreduce
            self.ring_cap = self._ring_host_cap(first.gpus)
            self.allreduce = AllReduce(
                env,
                self.net,
                lay.worker_hosts,
                first.gpus,
                GPUS[str(first.gpu)].peer_link_gbytes_per_s * 1e9,
                self.key_bytes,
                ar.algorithm,
                ar.fusion_mb * 1e6,
                ar.cycle_ms * 1e-3,
                costs.message_overhead_us * 1e-6,
                self._latency_s(lay.worker_hosts[0], lay.worker_hosts[-1]),
                on_buffer=self.key_phases.buffer if self.key_phases else None,
                connection_Bps=self.ring_cap[0] * 1e9 / 8,
                tensor_overhead_s=costs.allreduce_tensor_us * 1e-6,
                intra_step_s=intra_host_step_s(GPUS[str(first.gpu)]),
            )

        self.workers: list[Worker] = []
        self.copies: list[HostCopies] = []
        self.vans: list[SerialQueue] = []
        self._connections: dict[tuple[str, int, int], Stream] = {}
        self.boundaries: list[float] = []
        self.boundary_events = [env.event() for _ in range(n_iter)]
        self._started = [0] * n_iter
        full = self.full_layout
        job_gpus = self.job_gpus = sum(full.gpus_of(r) for r in range(full.num_workers))
        self.loaders: list[InputPipeline] = []
        self.straggler_factor, self.straggler_gpus = 1.0, 1
        for rank, host_index in enumerate(lay.worker_hosts):
            host = lay.hosts[host_index]
            gpu = GPUS[str(host.gpu)]
            times = layer_times(
                self.model, gpu.name, s.training.compute_precision, s.training.batch_per_gpu, costs
            )
            gpus = lay.gpus_of(rank)
            waits_for = synchronised_gpus(mode, job_gpus, gpus)
            self.straggler_factor = straggler_factor(costs.straggler_sigma, waits_for)
            self.straggler_gpus = waits_for
            jitter = self._jitter(rng, gpus, n_iter) * self.straggler_factor
            copies = HostCopies(
                env,
                rank,
                gpus,
                on_cpu=gpu.name == "cpu",
                device_mode=device_mode,
                host_link_Bps=gpu.host_link_gbytes_per_s * 1e9,
                peer_link_Bps=gpu.peer_link_gbytes_per_s * 1e9,
                merge_s_per_byte=costs.server_merge_ns_per_byte * 1e-9,
                cores=self.cores,
                big_bytes=s.kvstore.bigarray_bound * bpe,
                reduction_threads=costs.worker_reduction_threads,
                to_host=mode != "device",
            )
            worker = Worker(
                env,
                rank,
                layer_keys,
                times.forward_s,
                times.backward_s,
                jitter,
                self._communicator(rank, host_index, copies),
                costs.overlap_loss,
                self.spans,
                self._on_start,
                self._loader(rank, host, gpus, n_iter),
            )
            self.workers.append(worker)
            self.copies.append(copies)
            env.process(worker.run(n_iter, self._start_delay_s(rank, times.iteration_s, host)))

    def _loader(
        self, rank: int, host: cluster.Host, gpus: int, n_iter: int
    ) -> Callable[[], simpy.Event] | None:
        """Worker ``rank``'s input pipeline when it trains on images: its share of the host's
        CPU cores decoding its GPUs' batches (None for synthetic data). An all-reduce worker
        stands for one process per GPU (Horovod's ranks), each with its own loader threads."""
        s, decode_us = self.scenario, self.costs.decode_us_per_sample
        if s.training.data != "images" or decode_us == 0:
            return None
        processes = gpus if s.kvstore.mode == "allreduce" else 1
        sharing = self.layout.worker_hosts.count(host.index) * processes
        cores = loader_cores(host.cpu_cores, sharing, processes, s.training.data_threads)
        batch_s = batch_decode_s(gpus * s.training.batch_per_gpu, decode_us, cores)
        loader = InputPipeline(self.env, f"worker{rank}.input", batch_s, n_iter)
        self.loaders.append(loader)
        return loader.next_batch

    def _start_delay_s(self, rank: int, compute_s: float, host: cluster.Host) -> float:
        """Async workers start out of phase, spread over one rough iteration (compute plus
        pushing and pulling the model at line rate). Real async workers drift apart at once
        (any noise does it, and nothing pulls them back into step); a symmetric, deterministic
        simulation would otherwise keep them in lock-step, all pushing, then all pulling,
        leaving each NIC direction idle half the time. Sync workers all start together."""
        if self.scenario.kvstore.mode not in ("dist_async", "dist_async_device"):
            return 0.0
        rough_s = compute_s + 2 * sum(self.key_bytes) / host.nic_Bps
        return rough_s * rank / len(self.layout.worker_hosts)

    def _ps_connection_Bps(self) -> float | None:
        """The ceiling of one parameter-server connection, bytes/s (None: none). Each worker and
        server pair talks over one TCP connection (ps-lite's ZMQ van, TensorFlow's gRPC
        channel), which cannot go faster than ``costs.connection_gbps``: BytePS's best practice
        runs two server instances per machine on 25 Gbit/s, three on 40/50, because "a single
        TCP connection usually cannot run up to 25Gbps". An all-reduce ring applies the same
        ceiling per ring connection itself (simscale.comm.allreduce), and none over RDMA."""
        gbps = self.costs.connection_gbps
        if self.scenario.kvstore.mode not in DIST_MODES or gbps <= 0:
            return None
        return gbps * 1e9 / 8

    def _ring_connections(self, gpus_per_host: int) -> int:
        """TCP connections a host's share of the ring between hosts leaves over. A flat ring is
        NCCL's: the scenario's ``sockets``, else NCCL's default for the slowest host group (16 on
        AWS's ENA since NCCL 2.4.8, else 1; simscale.spec.hardware). Horovod's hierarchical
        all-reduce crosses hosts with MPI_Allreduce instead, one per local rank in parallel
        (horovod/common/ops/nccl_operations.cc, NCCLHierarchicalAllreduce: NCCL reduce-scatter,
        MPI_Allreduce on the CROSS communicator, NCCL all-gather), and Open MPI's TCP transport
        keeps one connection per peer (btl_tcp_links 1): one per GPU of the host."""
        if self.scenario.kvstore.allreduce.algorithm == "hierarchical":
            return gpus_per_host
        sockets = self.scenario.kvstore.allreduce.sockets
        if sockets is not None:
            return sockets
        return min(g.resolved_nccl_sockets() for g in self.scenario.cluster.hosts)

    def _ring_host_cap(self, gpus_per_host: int) -> tuple[float, str]:
        """The most one host's share of the ring between hosts moves besides its NIC share,
        Gbit/s (0: nothing else limits it), and what sets it, by the slowest transport among
        the worker hosts: over tcp, its connections (``_ring_connections`` of
        ``costs.connection_gbps`` each) and, for NCCL's flat ring, its socket transport's
        ``costs.socket_host_gbps``; over efa, NCCL's ring reaches ``costs.efa_ring_share`` of
        the slowest NIC; over rdma (InfiniBand, RoCE) nothing but the NIC. Horovod's
        hierarchical variant crosses hosts with MPI, which NCCL's figures do not describe: only
        its connections' ceiling."""
        hosts, costs = self.scenario.cluster.hosts, self.costs
        transports = {g.resolved_transport() for g in hosts}
        flat = self.scenario.kvstore.allreduce.algorithm == "ring"
        if "tcp" in transports:
            n = self._ring_connections(gpus_per_host)
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

    def _jitter(self, rng: np.random.Generator, gpus: int, n_iter: int) -> np.ndarray:
        sigma = self.scenario.simulation.compute_jitter
        if sigma == 0:
            return np.ones(n_iter)
        # The host waits for its slowest GPU: the max of per-GPU log-normal factors.
        return rng.lognormal(0.0, sigma, size=(n_iter, gpus)).max(axis=1)

    def _communicator(
        self, rank: int, host: int, copies: HostCopies
    ) -> Callable[[int, int, Callable[[float], None]], None]:
        """The transport hook of one worker: how a key's gradient becomes new weights."""
        env, costs = self.env, self.costs
        mode = self.scenario.kvstore.mode
        key_bytes = self.key_bytes
        if self.allreduce is not None:
            ar = self.allreduce

            def allreduce(it: int, key: int, done: Callable[[float], None]) -> None:
                ar.communicate(rank, it, key, done)

            return allreduce

        if self.servers is None:  # local / device: one host (simscale.comm.local)
            if not has_kvstore(mode, self.job_gpus):

                def on_the_gpu(it: int, key: int, done: Callable[[float], None]) -> None:
                    done(0.0)  # no kvstore: the GPU updates its own weights, nothing is copied

                return on_the_gpu
            on_cpu = updates_on_cpu(mode, (a.elements for a in self.model.arrays))
            update_s_per_byte = costs.server_update_ns_per_byte * 1e-9 if on_cpu else 0.0

            def local(it: int, key: int, done: Callable[[float], None]) -> None:
                nbytes = key_bytes[key]
                cost = (
                    copies.reduce_s(nbytes)
                    + nbytes * update_s_per_byte
                    + copies.broadcast_s(nbytes)
                )
                copies.queue.run(cost).callbacks.append(lambda _e: done(0.0))

            return local

        servers = self.servers
        van = SerialQueue(env, f"worker{rank}.van", self.cores)  # the worker's send thread
        self.vans.append(van)
        msg_s = costs.message_overhead_us * 1e-6
        compress = self.scenario.kvstore.gradient_compression.type == "2bit"
        pull_with_push = self.scenario.kvstore.pull_request == "with_push"
        slices = self.slices
        to_server = self._worker_stream
        barrier = self.step_barrier

        marks = self.key_phases

        def ps(it: int, key: int, done: Callable[[float], None]) -> None:
            parts = slices[key]
            state = {"left": len(parts), "others": 0.0}

            def slice_back(waited: float) -> None:
                if marks is not None:
                    marks.mark(rank, it, key, "broadcast", env.now)
                state["others"] = max(state["others"], waited)
                state["left"] -= 1
                if state["left"] == 0:
                    copies.queue.run(copies.broadcast_s(key_bytes[key])).callbacks.append(
                        lambda _e: done(state["others"])
                    )

            def push(server: int, nbytes: float) -> None:
                stream = to_server(rank, server)
                wire = (nbytes * TWO_BIT_RATIO if compress else nbytes) + HEADER_BYTES

                def send_pull_request(_e: object) -> None:
                    stream.send(
                        0, lambda: servers.pull(it, key, server, nbytes, rank, slice_back), key
                    )

                def pull_after(waited: float) -> None:
                    state["others"] = max(state["others"], waited)
                    van.run(msg_s).callbacks.append(send_pull_request)

                def acked(waited: float) -> None:
                    # MXNet's pull of a key depends on its push: the request follows the ack.
                    # Behind a step barrier it waits for every worker's every push instead.
                    if barrier is not None:
                        barrier.acked(it, rank, key, pull_after)
                    elif pull_with_push:
                        state["others"] = max(state["others"], waited)
                    else:
                        pull_after(waited)

                sent = van.run(msg_s)

                def arrived() -> None:
                    if marks is not None:
                        marks.mark(rank, it, key, "update", env.now)
                    servers.push(it, key, server, nbytes, rank, acked)

                sent.callbacks.append(lambda _e: stream.send(wire, arrived, key))
                if servers.pipelined:  # the pushes it stands for arrive from here on
                    sent.callbacks.append(lambda _e: servers.push_sent(server, nbytes))
                if pull_with_push:
                    # realrun's pushpull posts the pull request together with its push
                    # (realrun/ps/kv_worker.py pushpull): it enters the connection right behind
                    # the push, ahead of any later key's push; its send costs the van a turn.
                    sent.callbacks.append(lambda _e: van.occupy(msg_s))
                    sent.callbacks.append(send_pull_request)

            def push_all(_e: object) -> None:
                if marks is not None:
                    marks.mark(rank, it, key, "push", env.now)
                for server, nbytes in parts:
                    push(server, nbytes)

            copies.queue.run(copies.reduce_s(key_bytes[key])).callbacks.append(push_all)

        return ps

    def _latency_s(self, src_host: int, dst_host: int) -> float:
        """One-way latency between two hosts under the calibrated latency factor."""
        return self.topology.path_latency_s(src_host, dst_host) * self.costs.latency_factor

    def _stream(self, src_host: int, dst_host: int, scheduled: bool = True) -> Stream:
        """A connection; ``scheduled`` False: in order, with no priority queue or byte window
        whatever ``kvstore.scheduling`` says."""
        latency = self._latency_s(src_host, dst_host)
        return Stream(
            self.env,
            self.net,
            src_host,
            dst_host,
            latency,
            priority=scheduled and self.scenario.kvstore.scheduling == "priority",
            window_bytes=self.scenario.kvstore.send_window_mb * 2**20,
        )

    def _worker_stream(self, worker: int, server: int) -> Stream:
        """The connection from worker ``worker`` to server ``server`` (one per pair, ps-lite)."""
        return self._connection("w2s", worker, server)

    def _server_stream(self, server: int, worker: int) -> Stream:
        """The connection from server ``server`` back to worker ``worker``."""
        return self._connection("s2w", worker, server)

    def _connection(self, direction: str, worker: int, server: int) -> Stream:
        key = (direction, worker, server)
        if key not in self._connections:
            w, sv = self.layout.worker_hosts[worker], self.layout.server_hosts[server]
            # realrun's shape: pull requests posted with their pushes, servers that ack on receipt
            # and answer in handling order.
            realrun_ps = self.scenario.kvstore.pull_request == "with_push"
            if direction == "w2s":
                stream = self._stream(w, sv)
                if realrun_ps:
                    # The server acknowledges each push on receipt, on its one connection back
                    # to this worker, behind any pull reply already in it (realrun/kv_server).
                    stream.ack = lambda credit: self._server_stream(server, worker).send(0, credit)
            else:
                # realrun's server answers on its ROUTER socket in handling order: no priority
                # queue and no byte window on replies (realrun/ps/postoffice.py _serve ->
                # van.reply), unlike a worker's requests.
                stream = self._stream(sv, w, scheduled=not realrun_ps)
            self._connections[key] = stream
        return self._connections[key]

    def _on_start(self, it: int) -> None:
        self._started[it] += 1
        if self._started[it] == len(self.workers):
            self.boundaries.append(self.env.now)
            self.boundary_events[it].succeed()

    # ---- running and measuring ----

    def run(
        self,
        max_seconds: float | None = None,
        progress: Callable[[Progress], None] | None = None,
    ) -> Result:
        """Warm up, then measure until the iteration time is stable or the iterations run out.

        ``max_seconds`` (wall clock) stops the run cleanly at the first check past it: the
        Result covers the measured iterations completed so far and says it stopped early
        (``IncompleteRun`` if not even one was); the clock starts when the Simulation is built.
        ``progress`` is called about every
        ``PROGRESS_EVERY_S`` of wall time with where the run is."""
        self._clock = _Clock(self._created_s, max_seconds, progress)
        sim = self.scenario.simulation
        warm = sim.warmup_iterations
        last = len(self.boundary_events) - 1
        if not self._run_until(warm):
            raise IncompleteRun(self._stopped_message(warm))
        self._reset_counters()
        end = last
        stable = False
        stopped = ""
        for i in range(warm + 1, last + 1):
            if not self._run_until(i):
                if i - 1 == warm:
                    raise IncompleteRun(self._stopped_message(warm))
                end, stopped = i - 1, self._stopped_message(warm)
                break
            if i - warm >= MIN_MEASURED and self._is_stable(warm, i):
                end, stable = i, True
                break
        return self._result(warm, end, stable, time.perf_counter() - self._clock.start_s, stopped)

    def _run_until(self, it: int) -> bool:
        """Process events until every worker has started iteration ``it``; False when the wall
        clock limit struck first. Checks the clock every ``CHECK_EVERY_EVENTS`` events (the same
        events, in the same order, as ``env.run(until=...)``)."""
        env, target, clock = self.env, self.boundary_events[it], self._clock
        step = env.step
        while not target.processed:
            try:
                for _ in range(CHECK_EVERY_EVENTS):
                    step()
                    if target.processed:
                        return True
            except simpy.core.EmptySchedule:
                raise RuntimeError(
                    f"simulation deadlocked: no events left before iteration {it} began"
                ) from None
            now = time.perf_counter()
            if clock.max_seconds is not None and now - clock.start_s > clock.max_seconds:
                return False
            if clock.progress is not None and now >= clock.next_report_s:
                clock.next_report_s = now + PROGRESS_EVERY_S
                clock.progress(
                    Progress(
                        iteration=len(self.boundaries),
                        iterations=len(self.boundary_events),
                        warmup=self.scenario.simulation.warmup_iterations,
                        simulated_s=env.now,
                        events=env.events_processed,
                        wall_s=now - clock.start_s,
                    )
                )
        return True

    def _stopped_message(self, warm: int) -> str:
        clock = self._clock
        done = max(0, len(self.boundaries) - 1 - warm)
        return (
            f"stopped at --max-seconds {clock.max_seconds:g}: {done} measured iteration(s) "
            f"complete, simulated {self.env.now:.3f} s with {self.env.events_processed:,} events"
        )

    def _reset_counters(self) -> None:
        self.net.reset_stats()
        queues = [c.queue for c in self.copies] + self.vans + [x.queue for x in self.loaders]
        if self.allreduce is not None:
            queues.append(self.allreduce.transport)
        if self.servers is not None:
            queues += self.servers.threads + self.servers.rpc_in + self.servers.rpc_out
        for q in queues:
            q.reset()

    def _is_stable(self, warm: int, i: int) -> bool:
        b = self.boundaries
        recent = np.diff(b[i - MIN_MEASURED : i + 1])
        return bool(
            (recent.max() - recent.min())
            <= self.scenario.simulation.stable_tolerance * recent.mean()
        )

    def _result(
        self, warm: int, end: int, stable: bool, wall_s: float, stopped: str = ""
    ) -> Result:
        s, lay, full = self.scenario, self.layout, self.full_layout
        t_start, t_end = self.boundaries[warm], self.boundaries[end]
        window = t_end - t_start
        n = end - warm
        per_worker = []
        server_host_set = set(full.server_hosts)
        ideal = 0.0
        for w in self.workers:
            host = lay.hosts[lay.worker_hosts[w.rank]]
            st = w.stats
            it_s = (st.starts_s[end] - st.starts_s[warm]) / n
            compute = float(np.mean(st.compute_s[warm:end]))
            blocked = float(np.mean(st.blocked_s[warm:end]))
            others = float(np.mean(st.waited_for_others_s[warm:end]))
            gpus = lay.gpus_of(w.rank)
            samples = gpus * s.training.batch_per_gpu
            # The representative of identical workers stands for every real rank.
            ranks = [w.rank] if self.reduction is None else range(full.num_workers)
            for rank in ranks:
                real_host = full.worker_hosts[rank]
                per_worker.append(
                    WorkerResult(
                        rank=rank,
                        host=full.hosts[real_host].name,
                        gpus=gpus,
                        samples_per_s=samples / it_s,
                        iteration_time_s=it_s,
                        compute_s=compute,
                        exposed_comm_s=blocked - others,
                        wait_for_workers_s=others,
                        co_hosts_server=real_host in server_host_set,
                    )
                )
            ideal += (
                len(ranks)
                * gpus
                * samples_per_s_without_communication(
                    self.model,
                    str(host.gpu),
                    s.training.compute_precision,
                    s.training.batch_per_gpu,
                    self.costs,
                )
            )
        sync = s.kvstore.mode not in ("dist_async", "dist_async_device")
        if sync:
            iteration_s = window / n
            throughput = s.global_batch / iteration_s
        else:
            throughput = sum(w.samples_per_s for w in per_worker)
            iteration_s = float(np.mean([w.iteration_time_s for w in per_worker]))
        util = self._utilization(t_start, t_end, per_worker)
        breakdown = {
            "compute_s": float(np.mean([w.compute_s for w in per_worker])),
            "exposed_comm_s": float(np.mean([w.exposed_comm_s for w in per_worker])),
            "wait_for_workers_s": float(np.mean([w.wait_for_workers_s for w in per_worker])),
        }
        return Result(
            scenario=s.name,
            mode=s.kvstore.mode,
            network_model=s.simulation.network_model,
            num_workers=full.num_workers,
            num_servers=full.num_servers,
            num_gpus=s.num_gpus,
            global_batch=s.global_batch,
            throughput_samples_per_s=throughput,
            ideal_samples_per_s=ideal,
            scaling_efficiency=throughput / ideal,
            iteration_time_s=iteration_s,
            breakdown=breakdown,
            per_worker=tuple(per_worker),
            utilization=tuple(util),
            bottleneck=_bottleneck(
                util,
                breakdown,
                s.kvstore.mode == "allreduce",
                stragglers=(1 - 1 / self.straggler_factor, self.straggler_gpus),
            ),
            iterations_measured=n,
            stable=stable,
            simulated_s=self.env.now,
            events=self.env.events_processed,
            wall_s=wall_s,
            path=self.path,
            path_reason=self.path_reason,
            approximate=self.approximate,
            stopped_early=stopped,
        )

    def _utilization(
        self, t0: float, t1: float, per_worker: list[WorkerResult]
    ) -> list[Utilization]:
        lay, window = self.layout, t1 - t0
        roles: dict[int, list[str]] = {}
        if self.reduction is None:
            for r, h in enumerate(lay.worker_hosts):
                roles.setdefault(h, []).append(f"worker {r}")
        else:
            roles[0] = [f"each of {self.reduction.copies} workers, mean"]
        for sv, h in enumerate(lay.server_hosts):
            roles.setdefault(h, []).append(f"server {sv}")
        out = []
        for stat in self.net.link_stats():
            frac = stat.utilization
            host_part, _, direction = stat.name.partition(".")
            if host_part.startswith("host"):
                h = int(host_part[4:])
                who = " + ".join(roles.get(h, [])) or lay.hosts[h].name
                desc = f"host {h} ({who}) NIC {direction}"
                if self.reduction is not None:  # name the real host, not the reduced index
                    name = lay.hosts[h].name
                    desc = f"host {name} ({who}) NIC {direction}"
                    stat = replace(stat, name=f"{name}.{direction}")
            else:
                desc = f"network {stat.name}"
            out.append(Utilization(stat.name, "nic", min(frac, 1.0), desc))
        if self.servers is not None:
            for sv, q in enumerate(self.servers.threads):
                out.append(
                    Utilization(
                        f"server{sv}.cpu",
                        "server",
                        q.busy_within(t0, t1) / window,
                        f"server {sv} handler thread (host {self.full_layout.server_hosts[sv]})",
                    )
                )
            rpc = zip(self.servers.rpc_in, self.servers.rpc_out, strict=True)
            for sv, (qi, qo) in enumerate(rpc):
                for q, way in ((qi, "in"), (qo, "out")):
                    out.append(
                        Utilization(
                            f"server{sv}.grpc-{way}",
                            "server",
                            q.busy_within(t0, t1) / window,
                            f"server {sv} gRPC copies {way} "
                            f"(host {self.full_layout.server_hosts[sv]})",
                        )
                    )
        for rank, c in enumerate(self.copies):
            if c.queue.busy_s > 0:
                out.append(
                    Utilization(
                        f"worker{rank}.copies",
                        "copies",
                        c.queue.busy_within(t0, t1) / window,
                        f"worker {rank} GPU<->CPU copies and local aggregation",
                    )
                )
        for rank, x in enumerate(self.loaders):
            out.append(
                Utilization(
                    f"worker{rank}.input",
                    "input",
                    x.queue.busy_within(t0, t1) / window,
                    f"worker {rank} input pipeline (host CPU cores decoding images)",
                )
            )
        if self.allreduce is not None and self.allreduce.transport.busy_s > 0:
            gbps, why = self.ring_cap
            out.append(
                Utilization(
                    "ring.transport",
                    "transport",
                    self.allreduce.transport.busy_within(t0, t1) / window,
                    f"each host's ring between hosts at its {gbps:.1f} Gbit/s ({why})",
                )
            )
        for w in per_worker:
            out.append(
                Utilization(
                    f"worker{w.rank}.gpu",
                    "gpu",
                    w.compute_s / w.iteration_time_s,
                    f"worker {w.rank} GPU compute",
                )
            )
        return out


def _bottleneck(
    util: list[Utilization],
    breakdown: dict[str, float],
    allreduce: bool = False,
    stragglers: tuple[float, int] = (0.0, 1),
) -> str:
    """The bottleneck in words: the saturated resource, or what holds the iteration back when
    none is saturated (resources taking turns along the push-update-pull chain; for a ring,
    its per-step latencies and per-tensor costs). ``stragglers``: the share of compute time
    spent waiting for the slowest GPU, and of how many (simscale.model.stragglers)."""
    if not util:
        return "nothing measured"
    ranked = sorted(util, key=lambda u: -u.busy_fraction)
    top = ranked[0]
    if top.kind == "gpu" and top.busy_fraction >= 0.9:
        share, gpus = stragglers
        slowest = (
            f", {share:.0%} of it waiting for the slowest of {gpus} GPUs" if share >= 0.005 else ""
        )
        return (
            f"GPU compute ({top.busy_fraction:.0%} busy{slowest}): compute-bound, "
            "communication hidden"
        )
    if top.kind != "gpu" and top.busy_fraction >= 0.9:
        return f"{top.description} {top.busy_fraction:.0%} busy"
    comm = [u for u in ranked if u.kind != "gpu"][:2]
    busiest = ", ".join(f"{u.description} {u.busy_fraction:.0%}" for u in comm)
    exposed_ms = breakdown["exposed_comm_s"] * 1e3
    waiting_ms = breakdown["wait_for_workers_s"] * 1e3
    if waiting_ms > exposed_ms:
        return (
            f"waiting for other workers ({waiting_ms:.1f} ms per iteration): stragglers; "
            f"busiest communication resources: {busiest}"
        )
    if allreduce and comm and comm[0].kind == "transport":
        chain = "the ring between hosts is held to its transport's ceiling"
    elif allreduce:
        chain = "the ring's step latencies and per-tensor costs add up"
    else:
        chain = "the push-update-pull chain takes turns"
    return (
        f"exposed communication ({exposed_ms:.1f} ms per iteration) with no resource "
        f"saturated: {chain}; busiest: {busiest}"
    )


def simulate(scenario: Scenario, costs: CostModel | None = None, path: str = "auto") -> Result:
    """Predict ``scenario``'s throughput, efficiency and bottleneck (``path``: see Simulation)."""
    return Simulation(scenario, costs, path=path).run()
