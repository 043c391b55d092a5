"""How long does ``predict --interval`` take? Wall and CPU time of the interval of a scenario.

The target (issue 35) is at most 10 s for ``scenarios/64gpu.yaml``. Runs the interval
``--repeats`` times on the local executor (one process per core, as predict does) and serially,
and prints the median wall time beside the CPU time of the whole process tree, so a loaded
machine (wall far above CPU / cores) is visible in the numbers. Run from the repository root:

    python -m benchmarks.bench_interval [--scenario scenarios/64gpu.yaml] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

from simscale.spec.scenario import load_scenario
from simscale.whatif.uncertainty import interval


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="scenarios/64gpu.yaml")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    scenario = load_scenario(a.scenario)
    print(f"{a.scenario}: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    for executor in ("local", "serial"):
        walls, cpus = [], []
        for _ in range(a.repeats):
            t, c = time.perf_counter(), _cpu_s()
            iv = interval(scenario, level=0.9, executor=executor)
            walls.append(time.perf_counter() - t)
            cpus.append(_cpu_s() - c)
        print(
            f"  {executor:<6} median wall {statistics.median(walls):6.1f} s, CPU "
            f"{statistics.median(cpus):6.1f} s, {iv.draws} draws + "
            f"{2 * (len(iv.shares) - 1)} one-at-a-time runs"
        )


if __name__ == "__main__":
    main()
