"""The simulator against real MXNet on the emulated cluster: held-out figures nobody here wrote.

``bench_mxnet_emulated.py`` measures Apache MXNet 1.9.1 (ps-lite) on the emulated-v2 shapes and
writes a CSV. This reads those CSVs, predicts every shape with a profile (default
``profiles/emulated-v2.yaml``, fitted on realrun's campaign, never on MXNet) and prints the
simulator's error against MXNet's median of valid runs, with the mean and the worst.

Each shape is simulated as its scenario says, which is how MXNet ran it: ``kvstore.scheduling:
fifo`` (ps-lite sends in order, no window) and ``pull_request: after_ack`` (a key is pulled once
its push is acknowledged), at the emulated rates (``realrun.dilation`` describes how the
machine ran it, not the cluster). It is not realrun's campaign view
(``calibration.runs.as_realrun_ran``): no send window, no processes sharing one machine's cores.

    python benchmarks/predict_mxnet_emulated.py benchmarks/results/mxnet_window_quiet.csv \\
        benchmarks/results/mxnet_window_quiet_2to1.csv [--profile P] [--csv OUT]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from realrun.campaign import load_campaign  # noqa: E402
from simscale.simulator import simulate  # noqa: E402
from simscale.spec.profile import load_profile  # noqa: E402
from simscale.spec.scenario import load_scenario  # noqa: E402

CAMPAIGNS = (
    ROOT / "campaigns" / "emulated-v2.yaml",
    ROOT / "benchmarks" / "mxnet_emulated_extra.yaml",
)
# Iterations simulated per shape: the steady state, as calibration predicts realrun's records.
ITERATIONS = 20


def mxnet_medians(paths: list[Path]) -> dict[str, tuple[float, int]]:
    """Per shape label: the median samples/s of MXNet's valid runs, and how many there were."""
    runs: dict[str, list[float]] = {}
    for path in paths:
        with path.open() as f:
            for row in csv.DictReader(f):
                if row["system"] == "mxnet" and row["valid"] == "True":
                    runs.setdefault(row["shape"], []).append(float(row["samples_per_s"]))
    return {label: (statistics.median(v), len(v)) for label, v in runs.items()}


def shapes() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every shape label of the campaigns the harness runs: its scenario file and overrides."""
    out = {}
    for path in CAMPAIGNS:
        for run in load_campaign(path, repeats=1).runs:
            out[run.name.rsplit("__r", 1)[0]] = (run.scenario, run.overrides)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv_files", nargs="+", type=Path, help="bench_mxnet_emulated.py CSV files")
    ap.add_argument("--profile", type=Path, default=ROOT / "profiles" / "emulated-v2.yaml")
    ap.add_argument("--csv", type=Path, help="write shape, MXNet, predicted, error here")
    args = ap.parse_args()
    for path in args.csv_files:
        if not path.is_file():
            print(f"predict_mxnet_emulated: {path}: no such file", file=sys.stderr)
            return 2
    measured = mxnet_medians(args.csv_files)
    costs = load_profile(args.profile).costs
    known = shapes()
    rows = []
    for label, (mxnet, n) in sorted(measured.items()):
        if label not in known:
            print(f"# {label}: not a shape of {', '.join(p.name for p in CAMPAIGNS)}; skipped")
            continue
        scenario, overrides = known[label]
        s = load_scenario(
            ROOT / scenario,
            [*overrides, f"simulation.measured_iterations={ITERATIONS}", "realrun.dilation=1"],
        )
        predicted = simulate(s, costs).throughput_samples_per_s
        rows.append((label, mxnet, n, predicted, predicted / mxnet - 1.0))
    if not rows:
        print("predict_mxnet_emulated: no valid MXNet run of a known shape", file=sys.stderr)
        return 1
    print(f"# profile {args.profile.name}; MXNet: median of its valid runs")
    print(f"{'shape':30s} {'MXNet':>10s} {'runs':>4s} {'simulator':>10s} {'error':>7s}")
    for label, mxnet, n, predicted, err in rows:
        print(f"{label:30s} {mxnet:10.1f} {n:4d} {predicted:10.1f} {err:+7.1%}")
    errors = [abs(r[4]) for r in rows]
    worst = max(rows, key=lambda r: abs(r[4]))
    print(
        f"|error| over {len(rows)} shapes: mean {statistics.mean(errors):.1%}, "
        f"worst {max(errors):.1%} ({worst[0]})"
    )
    if args.csv:
        with args.csv.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["shape", "mxnet_samples_per_s", "mxnet_valid_runs", "predicted", "error"])
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
