"""What a simulation predicts, as flat records that become a table, JSON or a plot."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from simscale.des.utilization import Utilization

SCHEMA_VERSION = 1

__all__ = ["SCHEMA_VERSION", "Result", "Utilization", "WorkerResult", "format_table"]


@dataclass(frozen=True)
class WorkerResult:
    """One worker host's measured-window averages."""

    rank: int
    host: str
    gpus: int
    samples_per_s: float
    iteration_time_s: float
    compute_s: float
    exposed_comm_s: float
    wait_for_workers_s: float
    co_hosts_server: bool


@dataclass(frozen=True)
class Result:
    """A prediction: throughput, efficiency, iteration breakdown, utilisation, bottleneck."""

    scenario: str
    mode: str
    network_model: str
    num_workers: int
    num_servers: int
    num_gpus: int
    global_batch: int
    throughput_samples_per_s: float
    ideal_samples_per_s: float
    scaling_efficiency: float
    iteration_time_s: float
    breakdown: dict[str, float]  # mean per worker: compute_s, exposed_comm_s, wait_for_workers_s
    per_worker: tuple[WorkerResult, ...]
    utilization: tuple[Utilization, ...]
    bottleneck: str
    iterations_measured: int
    stable: bool
    simulated_s: float
    events: int
    wall_s: float
    # Which model ran: "exact" (every worker simulated) or "symmetric" (identical workers
    # simulated once, simscale.model.symmetry), and why.
    path: str = "exact"
    path_reason: str = ""
    # True where the symmetric path ran beyond the loads it holds to the exact model within 1%
    # (forced, or because the exact model is out of reach there); path_reason says how far off.
    approximate: bool = False
    # Empty for a run that finished; else why it stopped before (e.g. --max-seconds).
    stopped_early: str = ""
    # Peak GPU memory of one rank by term, GiB (simscale.zoo.memory); the DDP and ZeRO modes
    # only, where it is checked (None elsewhere, and left out of the JSON).
    memory_per_gpu: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = _finite(asdict(self))
        if d["memory_per_gpu"] is None:
            del d["memory_per_gpu"]
        d["schema_version"] = SCHEMA_VERSION
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def top_utilization(self, n: int = 5) -> list[Utilization]:
        return sorted(self.utilization, key=lambda u: -u.busy_fraction)[:n]


def _finite(value: Any) -> Any:
    """JSON has no infinity: a baseline that is infinite (no compute at all) becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _mean_worker_iteration_s(r: Result) -> float:
    return sum(w.iteration_time_s for w in r.per_worker) / len(r.per_worker)


def format_table(r: Result) -> str:
    """The terminal report: headline figures, breakdown, busiest resources, per-worker table."""
    lines = [
        f"scenario      {r.scenario}  ({r.mode}, {r.num_workers} workers, {r.num_gpus} GPUs, "
        f"{r.num_servers} servers, network model {r.network_model})",
        f"throughput    {r.throughput_samples_per_s:,.1f} samples/s"
        f"   (ideal {r.ideal_samples_per_s:,.1f}, no communication cost)",
        f"efficiency    {r.scaling_efficiency:.1%}",
        f"iteration     {r.iteration_time_s * 1e3:,.2f} ms for the job",
        # A worker's iteration is exactly its compute + exposed communication + waiting, so
        # the breakdown is stated against the mean worker's iteration, which it adds up to;
        # the job's (sync: from the moment the last worker starts one iteration to the next)
        # differs from it slightly.
        f"  per worker  {_mean_worker_iteration_s(r) * 1e3:,.2f} ms = compute "
        f"{r.breakdown['compute_s'] * 1e3:,.2f} + exposed communication "
        f"{r.breakdown['exposed_comm_s'] * 1e3:,.2f} + waiting for other workers "
        f"{r.breakdown['wait_for_workers_s'] * 1e3:,.2f} ms (means over workers)",
        f"bottleneck    {r.bottleneck}",
    ]
    if r.memory_per_gpu is not None:
        m = r.memory_per_gpu
        terms = ", ".join(
            f"{k.removesuffix('_gib').replace('_', ' ')} {v:.1f}"
            for k, v in m.items()
            if k not in ("total_gib", "capacity_gib")
        )
        lines.append(f"memory/GPU    {m['total_gib']:.1f} of {m['capacity_gib']:.0f} GiB ({terms})")
    lines += [
        "",
        "busiest resources",
    ]
    for u in r.top_utilization(6):
        lines.append(f"  {u.busy_fraction:6.1%}  {u.description}")
    lines += ["", "  rank  host        GPUs  samples/s   iter ms  compute ms  exposed ms  wait ms"]
    shown = r.per_worker if len(r.per_worker) <= 16 else r.per_worker[:8] + r.per_worker[-4:]
    for w in shown:
        mark = "*" if w.co_hosts_server else " "
        lines.append(
            f"  {w.rank:4d}  {w.host:<10s}{mark} {w.gpus:4d}  {w.samples_per_s:9.1f}  "
            f"{w.iteration_time_s * 1e3:8.2f}  {w.compute_s * 1e3:10.2f}  "
            f"{w.exposed_comm_s * 1e3:10.2f}  {w.wait_for_workers_s * 1e3:7.2f}"
        )
    if len(shown) < len(r.per_worker):
        lines.append(f"  ... {len(r.per_worker) - len(shown)} more workers (see --json)")
    if any(w.co_hosts_server for w in r.per_worker):
        lines.append("  * co-hosts a server")
    stable = "stable" if r.stable else "NOT yet stable: raise simulation.measured_iterations"
    if r.stopped_early:
        stable = f"NOT complete: {r.stopped_early}"
    lines += [
        "",
        f"measured {r.iterations_measured} iterations ({stable}); simulated "
        f"{r.simulated_s:.3f} s with {r.events:,} events in {r.wall_s:.2f} s",
        f"model path    {r.path} ({r.path_reason})",
    ]
    return "\n".join(lines)
