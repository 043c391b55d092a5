"""Measure a run as a benchmark would, and reduce it to a ``Result``.

The measured window runs from the start of the first iteration after warm-up to the start of
the last one measured. Workers keep their own per-iteration statistics (simscale.model.worker),
the network its link statistics, and every other component its own busy time
(simscale.des.utilization); this module only reads them: per-worker averages, throughput
against the same GPUs with no communication, the utilisation of every resource, and the
bottleneck named in words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import simpy

from simscale.des.utilization import Measured, Utilization
from simscale.model.cluster import Layout
from simscale.model.compute import samples_per_s_without_communication
from simscale.model.worker import Worker
from simscale.network import Network
from simscale.report.results import Result, WorkerResult
from simscale.spec.costs import CostModel
from simscale.spec.scenario import COLLECTIVE_MODES, Scenario
from simscale.zoo import ModelSpec

MIN_MEASURED = 3  # iterations that must agree before the measurement counts as stable


class IterationStarts:
    """When every worker had started each iteration: the boundaries of the measured window.
    ``started(it)`` is each worker's report; ``events[it]`` fires once all have made it.

    ``by_mean``: iterations differ by design (a stack delay drawn per message,
    simscale.comm.ps.stack_delay), so three alike by chance do not say the run has settled:
    ``is_stable`` never stops it early, all iterations are measured, and ``mean_is_stable``
    says whether their average has settled."""

    def __init__(
        self, env: simpy.Environment, iterations: int, workers: int, by_mean: bool = False
    ) -> None:
        self.env = env
        self.by_mean = by_mean
        self.workers = workers
        self.boundaries: list[float] = []  # simulated time each iteration began, so far
        self.events = [env.event() for _ in range(iterations)]
        self._started = [0] * iterations

    def started(self, it: int) -> None:
        self._started[it] += 1
        if self._started[it] == self.workers:
            self.boundaries.append(self.env.now)
            self.events[it].succeed()

    def is_stable(self, i: int, tolerance: float) -> bool:
        """Whether the last ``MIN_MEASURED`` iteration times up to iteration ``i`` agree
        within ``tolerance`` of their mean."""
        if self.by_mean:
            return False
        recent = np.diff(self.boundaries[i - MIN_MEASURED : i + 1])
        return bool((recent.max() - recent.min()) <= tolerance * recent.mean())

    def mean_is_stable(self, first: int, i: int, tolerance: float) -> bool:
        """Whether the mean iteration time from iteration ``first`` to ``i`` is within
        ``tolerance`` of the mean without the last ``MIN_MEASURED``: for iterations that differ
        by design, the average, not each iteration, is what must settle (False unless
        ``by_mean``)."""
        if not self.by_mean or i - first < 2 * MIN_MEASURED:
            return False
        b = self.boundaries
        whole = (b[i] - b[first]) / (i - first)
        shorter = (b[i - MIN_MEASURED] - b[first]) / (i - MIN_MEASURED - first)
        return bool(abs(whole - shorter) <= tolerance * whole)


@dataclass(frozen=True)
class RunFacts:
    """What the run itself says about how it went, for the Result."""

    stable: bool
    simulated_s: float
    events: int
    wall_s: float
    path: str
    path_reason: str
    approximate: bool
    stopped_early: str = ""


class Measurement:
    """The measured window of one run: what it resets at the start and reads at the end.

    ``layout`` is what was simulated, ``full_layout`` the cluster it stands for (the same on
    the exact path; on the symmetric one, each simulated worker stands for ``copies`` real
    ones). ``parts``: every component that reports its own busy time, in report order.
    ``stragglers``: the factor on compute time for waiting on the slowest GPU, and of how many
    (simscale.model.stragglers)."""

    def __init__(
        self,
        scenario: Scenario,
        costs: CostModel,
        model: ModelSpec,
        layout: Layout,
        full_layout: Layout,
        copies: int | None,
        net: Network,
        parts: Sequence[Measured],
        stragglers: tuple[float, int],
    ) -> None:
        self.scenario = scenario
        self.costs = costs
        self.model = model
        self.layout = layout
        self.full_layout = full_layout
        self.copies = copies  # None on the exact path
        self.net = net
        self.parts = parts
        self.stragglers = stragglers

    def reset(self) -> None:
        """The measured window begins now: warm-up traffic and work must not count."""
        self.net.reset_stats()
        for part in self.parts:
            part.reset_counters()

    def result(
        self,
        workers: Sequence[Worker],
        boundaries: Sequence[float],
        warm: int,
        end: int,
        run: RunFacts,
    ) -> Result:
        """The Result of iterations ``warm`` to ``end`` (boundary indices)."""
        s, full = self.scenario, self.full_layout
        t_start, t_end = boundaries[warm], boundaries[end]
        n = end - warm
        per_worker, ideal = self._per_worker(workers, warm, end)
        if s.kvstore.mode not in ("dist_async", "dist_async_device"):
            iteration_s = (t_end - t_start) / n
            throughput = s.global_batch / iteration_s
        else:
            throughput = sum(w.samples_per_s for w in per_worker)
            iteration_s = float(np.mean([w.iteration_time_s for w in per_worker]))
        util = self.utilization(t_start, t_end, per_worker)
        breakdown = {
            "compute_s": float(np.mean([w.compute_s for w in per_worker])),
            "exposed_comm_s": float(np.mean([w.exposed_comm_s for w in per_worker])),
            "wait_for_workers_s": float(np.mean([w.wait_for_workers_s for w in per_worker])),
        }
        factor, gpus = self.stragglers
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
            bottleneck=bottleneck(
                util,
                breakdown,
                s.kvstore.mode,
                stragglers=(1 - 1 / factor, gpus),
                zero_stage=s.kvstore.zero.stage,
            ),
            iterations_measured=n,
            stable=run.stable,
            simulated_s=run.simulated_s,
            events=run.events,
            wall_s=run.wall_s,
            path=run.path,
            path_reason=run.path_reason,
            approximate=run.approximate,
            stopped_early=run.stopped_early,
            memory_per_gpu=s.memory_use().terms() if s.kvstore.mode in ("ddp", "zero") else None,
        )

    def _per_worker(
        self, workers: Sequence[Worker], warm: int, end: int
    ) -> tuple[list[WorkerResult], float]:
        """Each real worker's averages over the window (a representative of identical workers
        stands for every real rank), and the job's samples/s with no communication."""
        s, lay, full = self.scenario, self.layout, self.full_layout
        n = end - warm
        server_host_set = set(full.server_hosts)
        per_worker = []
        ideal = 0.0
        for w in workers:
            host = lay.hosts[lay.worker_hosts[w.rank]]
            st = w.stats
            it_s = (st.starts_s[end] - st.starts_s[warm]) / n
            compute = float(np.mean(st.compute_s[warm:end]))
            blocked = float(np.mean(st.blocked_s[warm:end]))
            others = float(np.mean(st.waited_for_others_s[warm:end]))
            gpus = lay.gpus_of(w.rank)
            samples = gpus * s.training.batch_per_gpu
            ranks = [w.rank] if self.copies is None else range(full.num_workers)
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
            alone = samples_per_s_without_communication(
                self.model,
                str(host.gpu),
                s.training.compute_precision,
                s.training.batch_per_gpu,
                self.costs,
            )
            ideal += len(ranks) * gpus * alone
        return per_worker, ideal

    def utilization(
        self, t0: float, t1: float, per_worker: Sequence[WorkerResult]
    ) -> list[Utilization]:
        """Every NIC direction, then every component's own resources, then every GPU."""
        out = self._nics()
        for part in self.parts:
            out += part.utilization(t0, t1)
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

    def _nics(self) -> list[Utilization]:
        """The network's links, each host's named by the roles it runs (on the symmetric path,
        by the real host a simulated one stands for)."""
        lay = self.layout
        roles: dict[int, list[str]] = {}
        if self.copies is None:
            for r, h in enumerate(lay.worker_hosts):
                roles.setdefault(h, []).append(f"worker {r}")
        else:
            roles[0] = [f"each of {self.copies} workers, mean"]
        for sv, h in enumerate(lay.server_hosts):
            roles.setdefault(h, []).append(f"server {sv}")
        out = []
        for stat in self.net.link_stats():
            frac = stat.utilization
            host_part, _, direction = stat.name.partition(".")
            if host_part.startswith("host"):
                h = int(host_part[4:])
                if self.copies is not None and h not in roles:
                    continue  # a reduced ring's successor: only the far end of a flow
                who = " + ".join(roles.get(h, [])) or lay.hosts[h].name
                desc = f"host {h} ({who}) NIC {direction}"
                if self.copies is not None:  # name the real host, not the reduced index
                    name = lay.hosts[h].name
                    desc = f"host {name} ({who}) NIC {direction}"
                    stat = replace(stat, name=f"{name}.{direction}")
            else:
                desc = f"network {stat.name}"
            out.append(Utilization(stat.name, "nic", min(frac, 1.0), desc))
        return out


def bottleneck(
    util: Sequence[Utilization],
    breakdown: dict[str, float],
    mode: str = "",
    stragglers: tuple[float, int] = (0.0, 1),
    zero_stage: int = 3,
) -> str:
    """The bottleneck in words: the saturated resource, or what holds the iteration back when
    none is saturated, as ``mode`` (the kvstore's; ``zero_stage`` under "zero") moves
    gradients (``exposed_chain``). ``stragglers``: the share of compute time spent waiting
    for the slowest GPU, and of how many (simscale.model.stragglers)."""
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
            f"busiest communication resources over the iteration: {busiest}"
        )
    chain = exposed_chain(mode, zero_stage, bool(comm) and comm[0].kind == "transport")
    return (
        f"exposed communication ({exposed_ms:.1f} ms per iteration) with no resource "
        f"saturated: {chain}; busiest over the iteration: {busiest}"
    )


def exposed_chain(mode: str, zero_stage: int = 3, transport_bound: bool = False) -> str:
    """Why communication is exposed with no resource saturated, as ``mode`` moves gradients:
    a parameter server's resources take turns along its push-update-pull chain; a Horovod
    ring adds up per-step latencies and per-tensor costs; DDP's and ZeRO/FSDP's collectives
    run one at a time (simscale.comm.sharded), so what backward (or, at stage 3, each unit's
    compute) does not hide waits. ``transport_bound``: the busiest resource is a collective
    transport held to its ceiling."""
    if mode not in COLLECTIVE_MODES:
        return "the push-update-pull chain takes turns"
    if transport_bound and mode == "allreduce":
        return "the ring between hosts is held to its transport's ceiling"
    if transport_bound:
        return "the collectives between hosts are held to their transport's ceiling"
    if mode == "allreduce":
        return "the ring's step latencies and per-tensor costs add up"
    if mode == "ddp":
        return (
            "the gradient buckets' all-reduces run one at a time and backward does not hide "
            "the last of them"
        )
    if zero_stage < 3:
        return (
            "the gradients' reduce-scatters and the parameters' all-gather after backward run "
            "one at a time"
        )
    return (
        "forward and backward wait for units' parameter all-gathers, the collectives "
        "running one at a time"
    )
