"""Issue 35 item 4's acceptance on the emulated cluster: probe, profile, predict the 15 shapes.

End to end, as root: ``realrun probe`` on the emulated cluster of each host shape of
runs/emulated-v2 (4 hosts at 50 and 200 Mbit/s, and 1 Gbit/s at dilation 5), the server cost
once (it does not depend on the link); ``calibrate --probe`` on the records; then each of the 15
shapes predicted with that profile (point and 90% interval, simscale.whatif.uncertainty: its
ranges-only band widened by the conformal margin of the other 14 shapes' scores, never the
judged shape's) and
with the campaign-fitted profiles/emulated-v2.yaml, against the measured mean. Prints the table,
point error (mean, worst) and 90% coverage (with the model error and with parameters only,
each with its median relative width) beside the campaign profile's figures and the
campaign's cost in hours (its records' timestamps and its log's wall times), and writes
benchmarks/results/probe-emulated.{csv,json} plus the probe records and the profile (refusing
to overwrite them unless --force). With --reuse, the records in --out are used, with
``probe-emulated-psrtt-<shape>.json`` (the psrtt step alone) beside them where present.

    python -m benchmarks.bench_probe_emulated [--out DIR] [--force] [--reuse]   # as root
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from calibration.model_error import Residual, estimate, held_out_model_error
from calibration.probe_profile import calibrate_probe
from calibration.runs import load_runs, mean_by_shape
from calibration.validate import label_of
from simscale.simulator import simulate
from simscale.spec.model_error import ModelError, model_error_group
from simscale.spec.profile import load_profile, save_profile
from simscale.whatif.uncertainty import (
    band_with_model_error,
    interval,
    model_error_term,
    ranges_band,
)

RUNS = Path("runs/emulated-v2")
CAMPAIGN_PROFILE = Path("profiles/emulated-v2.yaml")
SCENARIO = "scenarios/emulated/mlp-colocated.yaml"
# The host shapes of the campaign (campaigns/emulated-v2.yaml): NIC rate, dilation.
SHAPES = (("50M", "0.05", "1"), ("200M", "0.2", "1"), ("1G-d5", "1", "5"))
LEVEL = 0.9
MODEL_ERROR_METHOD = (
    "split-conformal scores of log(measured / predicted) against the probe profile's "
    "ranges-only bands (a profile made with no training run: every shape is held out)"
)


def probe_shapes(out: Path) -> tuple[list[Path], float]:
    """One probe per host shape (4 hosts); the records and the probes' total wall seconds."""
    paths = []
    t0 = time.monotonic()
    for i, (name, gbps, dilation) in enumerate(SHAPES):
        path = out / f"probe-emulated-{name}.json"
        skip = "gpu,allreduce" + (",server" if i else "")
        argv = [
            *(sys.executable, "-m", "realrun.cli", "probe", "--launcher", "netns"),
            *("--scenario", SCENARIO, "-o", str(path), "--force", "--skip", skip),
            *("--set", "cluster.hosts[0].count=4", "--set", f"cluster.hosts[0].nic_gbps={gbps}"),
            *("--set", f"realrun.dilation={dilation}"),
        ]
        if subprocess.run(argv, check=False).returncode != 0:  # its one line is on stderr
            raise SystemExit(f"bench_probe_emulated: the {name} probe failed")
        paths.append(path)
    return paths, time.monotonic() - t0


def campaign_cost_hours() -> dict[str, float]:
    """What the campaign cost: its log's wall times summed (every attempt, retries included),
    its records' measured runs summed, and first start to last end from their timestamps."""
    lines = (RUNS / "campaign-log.jsonl").read_text().splitlines()
    logged = sum(json.loads(ln)["wall_s"] for ln in lines if ln.strip())
    spans = []
    for path in sorted(RUNS.glob("*.json")):
        record = json.loads(path.read_text())
        if "started_unix_s" in record and "wall_s" in record:
            spans.append((record["started_unix_s"], record["started_unix_s"] + record["wall_s"]))
    return {
        "log_wall_h": logged / 3600,
        "records_wall_h": sum(b - a for a, b in spans) / 3600,
        "first_start_to_last_end_h": (max(b for _, b in spans) - min(a for a, _ in spans)) / 3600,
        "records": len(spans),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--force", action="store_true", help="overwrite earlier results")
    ap.add_argument("--draws", type=int, default=16, help="parameter draws per interval")
    ap.add_argument("--reuse", action="store_true", help="reuse the probe records in --out")
    a = ap.parse_args()
    table = a.out / "probe-emulated.csv"
    if table.exists() and not a.force:
        print(f"{table} exists; --force to overwrite", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    if a.reuse:
        paths = [a.out / f"probe-emulated-{n}.json" for n, _, _ in SHAPES]
        # Records of the psrtt step alone, taken after the others (docs/probe.md), join them.
        paths += [
            p for n, _, _ in SHAPES if (p := a.out / f"probe-emulated-psrtt-{n}.json").exists()
        ]
        probe_s = sum(json.loads(p.read_text())["environment"]["wall_s"] for p in paths)
    else:
        paths, probe_s = probe_shapes(a.out)
    profile = calibrate_probe(paths)
    campaign = load_profile(CAMPAIGN_PROFILE)
    shapes = sorted(mean_by_shape(load_runs([RUNS]).runs).items())
    # The probe profile's intervals without model error first: it was made without any of
    # these shapes, so each residual is held out; shape i's margin is then that of the other
    # shapes' scores, applied to its own ranges-only band (what `interval` does with a profile
    # holding those scores, with the same simulations: none is repeated).
    bare = replace(profile, model_error=ModelError())
    ivs, residuals = [], []
    for i, (key, (scenario, measured, _, _)) in enumerate(shapes, 1):
        print(f"\rintervals {i}/{len(shapes)}", end="", file=sys.stderr, flush=True)
        iv = interval(scenario, bare, level=LEVEL, draws=a.draws, force_profile=True, jobs=1)
        ivs.append(iv)
        ratios = tuple(v / iv.nominal for v in iv.simulated)
        residuals.append(
            Residual(model_error_group(scenario), key, math.log(measured / iv.nominal), ratios)
        )
    print(file=sys.stderr)
    source = f"python -m benchmarks.bench_probe_emulated: the probe profile on {RUNS}"
    profile = replace(profile, model_error=estimate(residuals, MODEL_ERROR_METHOD, source))
    save_profile(profile, a.out / "probe-emulated-profile.yaml")
    rows = []
    for (key, (scenario, measured, _, _)), iv in zip(shapes, ivs, strict=True):
        group = model_error_group(scenario)
        term = model_error_term(group, held_out_model_error(residuals, key), LEVEL)
        low, high = band_with_model_error(iv.simulated, LEVEL, term)
        p_low, p_high = ranges_band(iv.simulated, LEVEL)
        fitted = simulate(scenario, campaign.costs).throughput_samples_per_s
        rows.append(
            {
                "shape": label_of(scenario),
                "measured": measured,
                "probe_predicted": iv.nominal,
                "probe_error": abs(iv.nominal / measured - 1),
                "model_error_margin_held_out": term.margin,
                "probe_low90": low,
                "probe_high90": high,
                "covered": low <= measured <= high,
                "relative_width": (high - low) / iv.nominal,
                "parameters_only_low90": p_low,
                "parameters_only_high90": p_high,
                "parameters_only_covered": p_low <= measured <= p_high,
                "parameters_only_relative_width": (p_high - p_low) / iv.nominal,
                "campaign_predicted": fitted,
                "campaign_error": abs(fitted / measured - 1),
            }
        )
    print(file=sys.stderr)
    with table.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    n = len(rows)
    summary = {
        "probe": {
            "mean_error": sum(r["probe_error"] for r in rows) / n,
            "worst_error": max(r["probe_error"] for r in rows),
            "covered_90": sum(r["covered"] for r in rows),
            "median_relative_width_90": float(np.median([r["relative_width"] for r in rows])),
            "parameters_only_covered_90": sum(r["parameters_only_covered"] for r in rows),
            "parameters_only_median_relative_width_90": float(
                np.median([r["parameters_only_relative_width"] for r in rows])
            ),
            "model_error": {
                "method": f"leave-one-shape-out: {MODEL_ERROR_METHOD}",
                "margin_90_all_shapes": {
                    g: profile.model_error.margin(g, LEVEL) for g in profile.model_error.scores
                },
            },
            "draws": a.draws,
            "shapes": n,
            "probe_wall_s": probe_s,
            "parameters": {k: getattr(profile.costs, k) for k in profile.fit.parameters},
            "uncertainty": profile.fit.uncertainty,
        },
        "campaign_profile": {
            "mean_error_in_sample": sum(r["campaign_error"] for r in rows) / n,
            "worst_error_in_sample": max(r["campaign_error"] for r in rows),
            "cost": campaign_cost_hours(),
        },
        "machine": {"cores": os.cpu_count(), "loadavg_at_end": os.getloadavg()},
    }
    (a.out / "probe-emulated.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(
        f"{'shape':<50} {'measured':>9} {'probe':>9} {'err':>6} {'90% interval':>19} "
        f"{'campaign':>9} {'err':>6}"
    )
    for r in rows:
        print(
            f"{r['shape']:<50} {r['measured']:9.1f} {r['probe_predicted']:9.1f} "
            f"{r['probe_error']:6.1%} {r['probe_low90']:9.1f}-{r['probe_high90']:<9.1f} "
            f"{r['campaign_predicted']:9.1f} {r['campaign_error']:6.1%}"
            + ("" if r["covered"] else "  (outside)")
        )
    p, c = summary["probe"], summary["campaign_profile"]
    cost = c["cost"]
    print(
        f"probe profile ({probe_s / 60:.1f} min of probing, no training run): mean "
        f"{p['mean_error']:.1%}, worst {p['worst_error']:.1%}; 90% interval with the held-out "
        f"model error covers {p['covered_90']}/{n} (median width "
        f"{p['median_relative_width_90']:.1%}), parameters only "
        f"{p['parameters_only_covered_90']}/{n} "
        f"({p['parameters_only_median_relative_width_90']:.1%})"
    )
    print(
        f"campaign profile ({cost['records']} training runs: {cost['records_wall_h']:.2f} h "
        f"measured, {cost['log_wall_h']:.2f} h by its log, "
        f"{cost['first_start_to_last_end_h']:.1f} h first start to last end; fitted on these "
        f"shapes, in sample): mean {c['mean_error_in_sample']:.1%}, worst "
        f"{c['worst_error_in_sample']:.1%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
