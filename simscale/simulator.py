"""Run one scenario through the discrete-event model and measure it like a benchmark would.

Chooses the model path (every worker, or one representative of identical workers), builds the
cluster layout, the network, the servers or the all-reduce, and one worker per rank with its
copy engine, input pipeline and communicator (simscale.comm.communicator), then runs warm-up
iterations and measured ones until the iteration time is stable; simscale.report.measurement
reduces what happened to a ``Result``. Deterministic for a given scenario and seed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from simscale.comm.allreduce import AllReduce
from simscale.comm.collectives import build_collectives
from simscale.comm.communicator import Communicator
from simscale.comm.local import local_kvstore
from simscale.comm.ps.client import PSClient, PSProtocol, last_array_first
from simscale.comm.ps.connections import Connections, ps_connection_Bps
from simscale.comm.ps.server import ServerGroup
from simscale.comm.ps.stack_delay import stack_delay
from simscale.comm.ps.step_barrier import StepBarrier, barrier_server
from simscale.comm.sharded import Zero3Member
from simscale.des.clock import CountingEnvironment, IncompleteRun, Progress, WallClock
from simscale.des.serial import CorePool
from simscale.des.utilization import Measured
from simscale.model import cluster, ring_symmetry, symmetry
from simscale.model.compute import layer_times
from simscale.model.input_pipeline import InputPipeline, worker_loader
from simscale.model.optimizer_step import optimizer_step_s
from simscale.model.stragglers import gpu_jitter, straggler_factor, synchronised_gpus
from simscale.model.worker import HostCopies, Span, Worker, async_start_delay_s
from simscale.network import NetworkConfig, make_network
from simscale.report.measurement import MIN_MEASURED, IterationStarts, Measurement, RunFacts
from simscale.report.results import Result
from simscale.report.trace import KeyPhases
from simscale.spec.costs import CostModel
from simscale.spec.hardware import GPUS
from simscale.spec.scenario import COLLECTIVE_MODES, DIST_MODES, Scenario
from simscale.zoo import BYTES_PER_ELEMENT

__all__ = ["MIN_MEASURED", "PATHS", "IncompleteRun", "Progress", "Simulation", "simulate"]

PATHS = symmetry.PATHS


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
        self._created_s = time.perf_counter()  # --max-seconds counts the build too
        self.scenario = scenario
        self.costs = costs or CostModel()
        self.spans: list[Span] | None = [] if trace else None
        self.key_phases: KeyPhases | None = KeyPhases(scenario.num_workers) if trace else None
        self.env = CountingEnvironment()
        self.full_layout = cluster.layout(scenario)
        self._choose_path(path, trace)
        self.model = scenario.model_spec()
        self._build()

    def _choose_path(self, path: str, trace: bool) -> None:
        """Set the reduction (None: exact), the layout simulated, and why."""
        full = self.full_layout
        choice = symmetry.choose_path(self.scenario, full, self.costs, path, trace=trace)
        self.layout = full
        self.reduction: symmetry.Reduction | ring_symmetry.RingReduction | None = None
        if choice.reduced and ring_symmetry.is_collective(self.scenario):
            self.reduction = ring_symmetry.reduce(full)
            self.layout = self.reduction.layout
        elif choice.reduced:
            self.reduction = symmetry.reduce(full)
            self.layout = self.reduction.layout
        self.path = choice.name
        self.path_reason = choice.reason
        #: True where the symmetric path ran outside the loads it was validated at.
        self.approximate = choice.approximate

    @property
    def copies_per_worker(self) -> int:
        """Real workers each simulated worker stands for (1 on the exact path)."""
        return 1 if self.reduction is None else self.reduction.copies

    @property
    def boundaries(self) -> list[float]:
        """Simulated time at which every worker had started each iteration, so far."""
        return self.starts.boundaries

    # ---- construction ----

    def _build(self) -> None:
        s, costs, env, lay = self.scenario, self.costs, self.env, self.layout
        shared = s.cluster.shared_cpu_cores
        self.cores = CorePool(shared) if shared is not None else None
        self.topology = lay.topology(s.cluster.core_oversubscription)
        config = NetworkConfig(
            bandwidth_factor=costs.bandwidth_factor,
            latency_factor=costs.latency_factor,
            stream_max_Bps=ps_connection_Bps(s, costs),
            share_sigma=costs.tcp_share_sigma,
            seed=s.simulation.seed,
        )
        self.net = make_network(
            s.simulation.network_model, env, self.topology, config, routes=self.reduction
        )
        bpe = BYTES_PER_ELEMENT[s.training.gradient_precision]
        self.key_bytes = [a.elements * bpe for a in self.model.arrays]
        self.servers: ServerGroup | None = None
        self.allreduce: AllReduce | None = None
        if s.kvstore.mode in DIST_MODES:
            self._build_servers()
        self.sharded: list[Communicator] = []
        if s.kvstore.mode in COLLECTIVE_MODES:
            # On the symmetric path the representative's ring has the real cluster's W hosts
            # and sends to its successor (simscale.model.ring_symmetry).
            reduced = isinstance(self.reduction, ring_symmetry.RingReduction)
            built = build_collectives(
                *(env, self.net, self.topology, lay, s, costs, self.model, self.key_bytes, bpe),
                on_buffer=self.key_phases.buffer if self.key_phases else None,
                ring_size=self.full_layout.num_workers,
                successor=ring_symmetry.SUCCESSOR if reduced else None,
            )
            self.allreduce, self.sharded = built.allreduce, built.members
        self._build_workers()
        parts: list[Measured] = [self.servers] if self.servers is not None else []
        parts += [*self.copies, *self.loaders, *self.clients]
        if self.allreduce is not None:
            parts.append(self.allreduce)
        copies = None if self.reduction is None else self.reduction.copies
        stragglers = (self.straggler_factor, self.straggler_gpus)
        self.measurement = Measurement(
            s, costs, self.model, lay, self.full_layout, copies, self.net, parts, stragglers
        )

    def _build_servers(self) -> None:
        """The servers, every worker's connections to them, and what each worker sends."""
        s, costs, env, lay = self.scenario, self.costs, self.env, self.layout
        kv = s.kvstore
        self.connections = Connections(
            env,
            self.net,
            self.topology,
            lay.worker_hosts,
            lay.server_hosts,
            latency_factor=costs.latency_factor,
            priority=kv.scheduling == "priority",
            window_bytes=kv.send_window_mb * 2**20,
            ack_on_receipt=kv.pull_request == "with_push",
            stack_delay=stack_delay(s, costs),
        )
        self.servers = ServerGroup(
            env,
            self.connections.to_worker,
            costs,
            lay.server_hosts,
            lay.num_workers,
            # With a step barrier each push is applied as it comes
            # (simscale.comm.ps.step_barrier).
            sync=kv.mode in ("dist_sync", "dist_sync_device") and kv.sync == "key",
            pull_with_push=kv.pull_request == "with_push",
            cores=self.cores,
            on_updated=self.key_phases.updated if self.key_phases else None,
            copies=self.copies_per_worker,
            grpc=kv.rpc == "grpc",
            report_hosts=self.full_layout.server_hosts,
            credit=self.connections.credit,
        )
        self.protocol = PSProtocol.for_scenario(s, self.model, lay.num_servers, costs)
        self.step_barrier: StepBarrier | None = None
        if kv.sync == "step":
            server = barrier_server(lay.num_servers)
            self.step_barrier = StepBarrier(
                env, self.servers, server, lay.num_workers, self.full_layout.num_workers
            )

    def _build_workers(self) -> None:
        """One worker per rank: its copy engine, communicator and input pipeline, started."""
        s, costs, env, lay = self.scenario, self.costs, self.env, self.layout
        mode = s.kvstore.mode
        n_iter = s.simulation.warmup_iterations + s.simulation.measured_iterations + 1
        layer_keys: list[list[int]] = [[] for _ in self.model.layers]
        for key, layer in enumerate(self.model.array_layer):
            layer_keys[layer].append(key)
        if s.kvstore.pull_request == "with_push":
            layer_keys = last_array_first(layer_keys)
        rng = np.random.default_rng(s.simulation.seed)
        self.workers: list[Worker] = []
        self.copies: list[HostCopies] = []
        self.clients: list[PSClient] = []
        self.loaders: list[InputPipeline] = []
        drawn = self.servers is not None and bool(costs.message_stack_quantiles_us)
        self.starts = IterationStarts(env, n_iter, lay.num_workers, by_mean=drawn)
        full = self.full_layout
        self.job_gpus = sum(full.gpus_of(r) for r in range(full.num_workers))
        self.straggler_factor, self.straggler_gpus = 1.0, 1
        for rank, host_index in enumerate(lay.worker_hosts):
            host = lay.hosts[host_index]
            gpu = GPUS[str(host.gpu)]
            times = layer_times(
                self.model, gpu.name, s.training.compute_precision, s.training.batch_per_gpu, costs
            )
            gpus = lay.gpus_of(rank)
            self.straggler_gpus = synchronised_gpus(mode, self.job_gpus, gpus)
            self.straggler_factor = straggler_factor(costs.straggler_sigma, self.straggler_gpus)
            jitter = gpu_jitter(rng, s.simulation.compute_jitter, gpus, n_iter)
            copies = HostCopies.for_worker(env, rank, gpus, gpu, s, costs, self.cores)
            self.copies.append(copies)
            communicator = self._communicator(rank, copies)
            sharded = communicator if isinstance(communicator, Zero3Member) else None
            loader = worker_loader(env, s, costs, lay, rank, n_iter)
            if loader is not None:
                self.loaders.append(loader)
            worker = Worker(
                env,
                rank,
                layer_keys,
                times.forward_s,
                times.backward_s,
                jitter * self.straggler_factor,
                communicator.communicate,
                costs.overlap_loss,
                self.spans,
                self.starts.started,
                loader.next_batch if loader is not None else None,
                s.training.micro_batches,
                sharded,
                optimizer_step_s(s, gpu),
            )
            self.workers.append(worker)
            delay_s = 0.0
            if mode in ("dist_async", "dist_async_device"):
                delay_s = async_start_delay_s(
                    rank, lay.num_workers, times.iteration_s, sum(self.key_bytes), host.nic_Bps
                )
            env.process(worker.run(n_iter, delay_s))

    def _communicator(self, rank: int, copies: HostCopies) -> Communicator:
        """How worker ``rank``'s gradients become new weights: the one place that chooses."""
        if self.sharded:
            return self.sharded[rank]
        if self.allreduce is not None:
            return self.allreduce.member(rank)
        if self.servers is None:  # local / device: one host (simscale.comm.local)
            return local_kvstore(
                self.scenario.kvstore.mode,
                self.job_gpus,
                [a.elements for a in self.model.arrays],
                copies,
                self.key_bytes,
                self.costs.server_update_ns_per_byte,
            )
        client = PSClient(
            self.env,
            rank,
            self.protocol,
            self.servers,
            self.connections,
            copies,
            cores=self.cores,
            barrier=self.step_barrier,
            mark=self.key_phases.mark if self.key_phases else None,
        )
        self.clients.append(client)
        return client

    # ---- running ----

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
        report = None if progress is None else (lambda wall_s: progress(self._progress(wall_s)))
        clock = WallClock(self._created_s, max_seconds, report)
        sim = self.scenario.simulation
        warm = sim.warmup_iterations
        last = len(self.starts.events) - 1
        if not self._run_until(clock, warm):
            raise IncompleteRun(self._stopped_message(clock, warm))
        self.measurement.reset()
        end, stable, stopped = last, False, ""
        for i in range(warm + 1, last + 1):
            if not self._run_until(clock, i):
                if i - 1 == warm:
                    raise IncompleteRun(self._stopped_message(clock, warm))
                end, stopped = i - 1, self._stopped_message(clock, warm)
                break
            if i - warm >= MIN_MEASURED and self.starts.is_stable(i, sim.stable_tolerance):
                end, stable = i, True
                break
        facts = RunFacts(
            stable=stable or self.starts.mean_is_stable(warm, end, sim.stable_tolerance),
            simulated_s=self.env.now,
            events=self.env.events_processed,
            wall_s=time.perf_counter() - clock.start_s,
            path=self.path,
            path_reason=self.path_reason,
            approximate=self.approximate,
            stopped_early=stopped,
        )
        return self.measurement.result(self.workers, self.boundaries, warm, end, facts)

    def _run_until(self, clock: WallClock, it: int) -> bool:
        """Process events until every worker has started iteration ``it``; False when the wall
        clock limit struck first."""
        return clock.run_until(self.env, self.starts.events[it], f"iteration {it} began")

    def _progress(self, wall_s: float) -> Progress:
        return Progress(
            iteration=len(self.boundaries),
            iterations=len(self.starts.events),
            warmup=self.scenario.simulation.warmup_iterations,
            simulated_s=self.env.now,
            events=self.env.events_processed,
            wall_s=wall_s,
        )

    def _stopped_message(self, clock: WallClock, warm: int) -> str:
        done = max(0, len(self.boundaries) - 1 - warm)
        return (
            f"stopped at --max-seconds {clock.max_seconds:g}: {done} measured iteration(s) "
            f"complete, simulated {self.env.now:.3f} s with {self.env.events_processed:,} events"
        )


def simulate(scenario: Scenario, costs: CostModel | None = None, path: str = "auto") -> Result:
    """Predict ``scenario``'s throughput, efficiency and bottleneck (``path``: see Simulation)."""
    return Simulation(scenario, costs, path=path).run()
