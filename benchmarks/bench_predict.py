"""How fast `simscale predict` answers, from 8 to 8,192 GPUs, and how its cost grows.

For each size, in two layouts of scenarios/64gpu.yaml's p3.16xlarge hosts, ResNet-50 and the
fair-share network:

- ``per-host``: the shipped layout, a co-located server on every host;
- ``dedicated``: as many dedicated c5n.18xlarge server hosts as worker hosts;

it runs the prediction in a fresh process (so that peak memory is the prediction's) ``--repeats``
times and prints the median wall and CPU seconds, the events processed, the peak resident memory,
which model path ran (simscale.model.symmetry; ``symmetric~``: beyond its validated loads,
because the exact model is out of reach there, an approximate answer) and the throughput; then the
growth exponent of CPU time in hosts, fitted by least squares on log-log over the completed runs
from 64 to 1,024 hosts, and the real command's time, imports included, on scenarios/64gpu.yaml
and on ``--cli-hosts`` (512 and 1,024 hosts with a server each, the last again with ``--path
symmetric``), against the 60 s the README promises for 8,192 GPUs. A run
that reaches ``--max-seconds`` stops cleanly (``simscale predict --max-seconds``) and is shown as
such, not fitted. CPU time is printed beside wall time because these machines are shared. The
last line says which grouped fair-share solver the large sizes used: numba's compiled one where
the ``fast`` extra is installed, the numpy reference otherwise or with SIMSCALE_SOLVER=reference
(run both side by side to compare them).

    python benchmarks/bench_predict.py [--repeats 3] [--gpus 8,64,...] [--max-seconds 120]
                                       [--cli-hosts 512,1024]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from simscale.network.fairshare_compiled import MIN_LINKS, compiled

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "scenarios" / "64gpu.yaml"
GPUS_PER_HOST = 8  # p3.16xlarge

# Runs one prediction and prints what it cost, as JSON on the last line of stdout.
CHILD = """
import json, resource, sys, time
from simscale.spec.scenario import load_scenario
from simscale.simulator import IncompleteRun, Simulation
overrides, max_s = json.loads(sys.argv[1]), float(sys.argv[2])
w0, c0 = time.perf_counter(), time.process_time()
sim = Simulation(load_scenario(sys.argv[3], overrides))
out = {"path": sim.path, "reason": sim.path_reason, "approximate": sim.approximate}
try:
    r = sim.run(max_seconds=max_s)
    out.update(events=r.events, throughput=r.throughput_samples_per_s, stopped=r.stopped_early)
except IncompleteRun as e:
    out.update(events=sim.env.events_processed, throughput=None, stopped=str(e))
out.update(wall_s=time.perf_counter() - w0, cpu_s=time.process_time() - c0,
           peak_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(json.dumps(out))
"""


def solver() -> str:
    """Which grouped fair-share solver large predictions get here (SIMSCALE_SOLVER, numba)."""
    if compiled() is None:
        return "the numpy reference (numba missing, or SIMSCALE_SOLVER=reference)"
    import numba

    return f"compiled (numba {numba.__version__}; SIMSCALE_SOLVER=reference for the reference)"


def overrides(gpus: int, layout: str) -> list[str]:
    hosts = max(1, gpus // GPUS_PER_HOST)
    out = [f"cluster.hosts[0].count={hosts}", f"kvstore.servers={hosts}"]
    if layout == "dedicated":
        out += [
            f"cluster.server_hosts={{count: {hosts}, instance: c5n.18xlarge}}",
            "kvstore.placement=dedicated",
        ]
    return out


def measure(gpus: int, layout: str, repeats: int, max_seconds: float) -> dict[str, object]:
    runs = []
    for _ in range(repeats):
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                CHILD,
                json.dumps(overrides(gpus, layout)),
                str(max_seconds),
                str(BASE),
            ],
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        if runs[-1]["stopped"]:
            break  # one capped run says enough; repeating it costs the cap again
    return {
        "gpus": gpus,
        "hosts": max(1, gpus // GPUS_PER_HOST),
        "layout": layout,
        "runs": len(runs),
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "events": runs[-1]["events"],
        "peak_mib": max(r["peak_mib"] for r in runs),
        "path": runs[-1]["path"] + ("~" if runs[-1]["approximate"] else ""),
        "reason": runs[-1]["reason"],
        "throughput": runs[-1]["throughput"],
        "stopped": runs[-1]["stopped"],
    }


def growth_exponent(rows: list[dict[str, object]], lo: int, hi: int) -> tuple[float, int]:
    """Least-squares slope of log CPU s against log hosts over completed runs in [lo, hi]."""
    pts = [
        (math.log(float(r["hosts"])), math.log(float(r["cpu_s"])))  # type: ignore[arg-type]
        for r in rows
        if lo <= int(r["hosts"]) <= hi and not r["stopped"]  # type: ignore[call-overload]
    ]
    if len(pts) < 2:
        return math.nan, len(pts)
    x, y = np.array(pts).T
    return float(np.polyfit(x, y, 1)[0]), len(pts)


# What the README promises `simscale predict` answers in through the command line (issue 36).
CLI_LIMIT_S = 60.0
# Runs `simscale predict` and prints its own CPU seconds on the last line of stderr.
CLI_CHILD = (
    "import resource, sys; from simscale.cli import main; rc = main(sys.argv[1:]); "
    "u = resource.getrusage(resource.RUSAGE_SELF); "
    "print(u.ru_utime + u.ru_stime, file=sys.stderr); sys.exit(rc)"
)


def cli_shapes(hosts: str) -> list[list[str]]:
    """The command lines timed: the shipped file, then each host count with a server per host,
    and the largest again with ``--path symmetric``."""
    shapes: list[list[str]] = [[]]
    counts = [int(x) for x in hosts.split(",") if x]
    for n in counts:
        shapes.append(["--set", f"cluster.hosts[0].count={n}", "--set", f"kvstore.servers={n}"])
    if counts:
        shapes.append([*shapes[-1], "--path", "symmetric"])
    return shapes


def cli_run(extra: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and exit code of one `simscale predict` in a fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CLI_CHILD, "predict", str(BASE), "--json", *extra],
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    wall = time.perf_counter() - t0
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "nan"
    try:
        cpu = float(last)
    except ValueError:  # the command failed before printing its CPU time
        cpu = math.nan
    return wall, cpu, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gpus", default="8,64,256,512,1024,2048,4096,8192")
    ap.add_argument("--layouts", default="per-host,dedicated")
    ap.add_argument("--max-seconds", type=float, default=120.0, help="cap per prediction")
    ap.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    ap.add_argument(
        "--cli-hosts",
        default="512,1024",
        help="host counts (8 GPUs each) also timed through the command line ('' for none)",
    )
    args = ap.parse_args()

    print(
        f"{'GPUs':>5} {'hosts':>5} {'layout':>9} {'path':>9} {'wall s':>8} {'CPU s':>8} "
        f"{'events':>10} {'peak MiB':>8} {'samples/s':>10}  note"
    )
    rows = []
    for layout in args.layouts.split(","):
        for gpus in (int(x) for x in args.gpus.split(",")):
            row = measure(gpus, layout, args.repeats, args.max_seconds)
            rows.append(row)
            tp = row["throughput"]
            note = str(row["stopped"]) if row["stopped"] else ""
            if row["path"] == "exact":
                note = f"exact: {row['reason']}; {note}".rstrip("; ")
            elif row["path"].endswith("~"):
                why = str(row["reason"]).split("APPROXIMATE: ")[1].split(";")[0]
                note = f"approximate: {why}; {note}".rstrip("; ")
            print(
                f"{gpus:>5} {row['hosts']:>5} {layout:>9} {row['path']:>9} "
                f"{row['wall_s']:>8.2f} {row['cpu_s']:>8.2f} {row['events']:>10,} "
                f"{row['peak_mib']:>8.0f} {'-' if tp is None else f'{tp:,.0f}':>10}  {note}",
                flush=True,
            )
        k, n = growth_exponent([r for r in rows if r["layout"] == layout], 64, 1024)
        print(f"  {layout}: CPU time ~ hosts^{k:.2f} from 64 to 1,024 hosts ({n} completed sizes)")

    # The real command, imports included, on the shipped file and on the README's sizes.
    limit = f"limit {CLI_LIMIT_S:.0f} s"
    print(f"\n`simscale predict`, imports included, {args.repeats} runs each ({limit}):")
    for extra in cli_shapes(args.cli_hosts):
        runs = [cli_run(extra) for _ in range(args.repeats)]
        rcs = sorted({rc for *_, rc in runs})
        wall = statistics.median(w for w, _, _ in runs)
        cpu = statistics.median(c for _, c, _ in runs)
        verdict = "within" if wall <= CLI_LIMIT_S else "OVER"
        print(
            f"  {' '.join(extra) or 'scenarios/64gpu.yaml as shipped':<72} exit {rcs}: wall "
            f"median {wall:.2f} s ({verdict} the limit), CPU median {cpu:.2f} s",
            flush=True,
        )
    print(f"load average while measuring: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"grouped fair-share solver from {MIN_LINKS // 2} hosts: {solver()}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
