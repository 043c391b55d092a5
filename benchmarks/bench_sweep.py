"""How long a 100-point sweep of 64-GPU shapes takes, and what one prediction costs.

The sweep: 8 x p3.16xlarge or 16 x p3.8xlarge (64 V100s either way), 1 to 10 dedicated
c5.18xlarge servers, worker NICs of 10, 25, 40, 50 or 100 Gbit/s, ResNet-50 fp16 — 100 points,
run as ``simscale sweep`` runs them (local processes, one per core). Prints the sweep's wall
time, its CPU time (this process and its workers), and the median wall and CPU time of single
predictions of a few of the points run serially in this process. The machines these run on are
shared: CPU time is the steadier figure.

    python benchmarks/bench_sweep.py [--jobs N] [--serial-samples 5]

Target: the whole sweep within 60 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simscale.whatif.grid import parse_grid  # noqa: E402
from simscale.whatif.sweep import Task, evaluate, load_base, run_sweep  # noqa: E402

SCENARIO = ROOT / "scenarios/server-ratio/64gpu-servers-2to1.yaml"
VARY = (
    "cluster.hosts[0].instance+cluster.hosts[0].count=p3.16xlarge/8,p3.8xlarge/16",
    "cluster.server_hosts.count+kvstore.servers=1..10",
    "cluster.hosts[0].nic_gbps=10,25,40,50,100",
)


def cpu_s() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=None, help="local processes (default: cores)")
    ap.add_argument("--serial-samples", type=int, default=5)
    args = ap.parse_args()
    grid = parse_grid(list(VARY))
    assert len(grid) == 100, len(grid)

    base, source = load_base(SCENARIO)
    points = grid.points()
    step = max(1, len(points) // args.serial_samples)
    walls, cpus = [], []
    for i in range(0, len(points), step)[: args.serial_samples]:
        task = Task(i, base, source, tuple(grid.overrides(points[i])), points[i])
        t0, c0 = time.perf_counter(), time.process_time()
        row = evaluate(task)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        assert row["status"] == "ok", row["message"]

    t0, c0 = time.perf_counter(), cpu_s()
    outcome = run_sweep(SCENARIO, grid, executor="local", jobs=args.jobs)
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    ok = sum(1 for r in outcome.rows if r["status"] == "ok")
    gpus = {r["num_gpus"] for r in outcome.rows if r["status"] == "ok"}
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"sweep: {len(outcome.rows)} points ({ok} predicted, GPUs {sorted(gpus)})")
    print(
        f"  wall {wall:.1f} s, CPU {cpu:.1f} s (this process and its {args.jobs or os.cpu_count()}"
        f" workers), {wall / len(outcome.rows):.2f} s wall per point"
    )
    print(
        f"single prediction (median of {len(walls)}, serial, in process): wall "
        f"{statistics.median(walls):.2f} s, CPU {statistics.median(cpus):.2f} s "
        f"(range {min(cpus):.2f}-{max(cpus):.2f} s CPU)"
    )
    print(f"target: <= 60 s wall for the sweep on 2 cores -> {'met' if wall <= 60 else 'NOT met'}")


if __name__ == "__main__":
    main()
