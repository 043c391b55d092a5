"""How fast `simscale predict` answers, from 8 to 1024 GPUs.

Prints, per cluster size, the median wall time of the simulation over several runs, the events
processed and events/s, and the wall time of the real command line (`simscale predict
scenarios/64gpu.yaml`, imports included) — the figure the product promises to keep under 3 s.

    python benchmarks/bench_predict.py [--repeats 5] [--sizes 8,64,256,1024]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simscale.scenario import load_scenario  # noqa: E402
from simscale.simulator import simulate  # noqa: E402


def scaled(gpus: int) -> list[str]:
    """Overrides turning 64gpu.yaml (8 x p3.16xlarge, a server per host) into ``gpus`` GPUs."""
    hosts = max(1, gpus // 8)
    return [f"cluster.hosts[0].count={hosts}", f"kvstore.servers={hosts}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sizes", default="8,64,256,1024")
    args = ap.parse_args()
    base = ROOT / "scenarios" / "64gpu.yaml"

    print(
        f"{'GPUs':>6} {'median s':>9} {'min s':>7} {'events':>10} {'events/s':>10} "
        f"{'samples/s':>10} {'efficiency':>10}"
    )
    for gpus in (int(x) for x in args.sizes.split(",")):
        scenario = load_scenario(base, scaled(gpus))
        repeats = args.repeats if gpus <= 256 else max(1, args.repeats // 3)
        walls, result = [], None
        for _ in range(repeats):
            t0 = time.perf_counter()
            result = simulate(scenario)
            walls.append(time.perf_counter() - t0)
        assert result is not None
        med = statistics.median(walls)
        print(
            f"{gpus:>6} {med:>9.3f} {min(walls):>7.3f} {result.events:>10,} "
            f"{result.events / med:>10,.0f} {result.throughput_samples_per_s:>10,.0f} "
            f"{result.scaling_efficiency:>10.1%}",
            flush=True,
        )

    cli = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "simscale.cli", "predict", str(base)],
            check=True,
            stdout=subprocess.DEVNULL,
            cwd=ROOT,
        )
        cli.append(time.perf_counter() - t0)
    print(
        f"\n`simscale predict scenarios/64gpu.yaml` wall time, imports included: median "
        f"{statistics.median(cli):.2f} s, min {min(cli):.2f} s, max {max(cli):.2f} s "
        f"over {len(cli)} runs (target < 3 s)"
    )


if __name__ == "__main__":
    main()
