"""PyTorch DDP and FSDP on the emulated cluster, measured and predicted (issue 37).

For each shape (hosts x link rate x mode) it runs ``realrun run`` with the netns launcher (root)
on scenarios/emulated/gpt2-tiny-ddp.yaml, then predicts the same scenario with ``simscale``.
Nothing is fitted to any shape: the one input measured here is the CPU's compute rate, timed on
one process training the same model and batch with no communication (median of a few steps),
turned into the ``cpu/fp32`` compute efficiency; every network figure is the scenario's link.

    python benchmarks/bench_ddp_emulated.py -o /tmp/ddp-emulated.csv     # as root, minutes

Writes one CSV row per shape: measured and predicted samples/s, the error, bytes sent per rank
per step, the machine-load verdict and the wall time.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios/emulated/gpt2-tiny-ddp.yaml"
SHAPES = (  # hosts, Mbit/s, mode, zero stage
    (2, 200, "ddp", 3),
    (2, 200, "zero", 3),
    (3, 100, "ddp", 3),
    (3, 100, "zero", 2),
)
COMPUTE_STEPS = 5


def compute_efficiency(scenario) -> tuple[float, float]:
    """The cpu/fp32 efficiency one process reaches on this model and batch, and its step
    time (median of COMPUTE_STEPS after one warm-up): forward, backward and the SGD step."""
    import torch

    from realrun.training import torch_models
    from simscale.spec.hardware import GPUS

    torch.set_num_threads(scenario.realrun.threads_per_worker)
    tr = scenario.training
    model = torch_models.build(scenario.model.name)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch_models.synthetic_batch(scenario.model.name, tr.batch_per_gpu, seq_len=tr.seq_len)
    times = []
    for _ in range(COMPUTE_STEPS + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        torch_models.loss(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times[1:])
    flops = 3.0 * scenario.model_spec().fwd_flops * tr.batch_per_gpu
    peak = GPUS["cpu"].peak_fp32_tflops * 1e12
    return min(1.0, flops / step_s / peak), step_s


def predict(scenario, efficiency: float, cores: int | None) -> float:
    from calibration.runs import as_realrun_ran
    from simscale.simulator import simulate
    from simscale.spec.costs import CostModel

    costs = CostModel(compute_efficiency={"cpu/fp32": efficiency})
    return simulate(as_realrun_ran(scenario, cores), costs).throughput_samples_per_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", required=True, help="CSV to write (never overwritten)")
    parser.add_argument("--launcher", default="netns", choices=("netns", "local"))
    args = parser.parse_args(argv)
    out = Path(args.output)
    if out.exists():
        print(f"bench_ddp_emulated: {out} exists; choose another path", file=sys.stderr)
        return 2
    import os

    from realrun.run import LaunchOptions, run_scenario
    from simscale.spec.scenario import load_scenario

    efficiency, step_s = compute_efficiency(load_scenario(str(SCENARIO)))
    print(f"compute: {step_s * 1e3:.0f} ms per step on one core -> cpu/fp32 {efficiency:.3f}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for hosts, mbps, mode, stage in SHAPES:
            sets = [
                f"cluster.hosts[0].count={hosts}",
                f"cluster.hosts[0].nic_gbps={mbps / 1000}",
                f"kvstore.mode={mode}",
                f"kvstore.zero.stage={stage}",
            ]
            started = time.monotonic()
            record, path = run_scenario(
                SCENARIO, sets, LaunchOptions(launcher=args.launcher), output=f"{tmp}/r.json"
            )
            wall = time.monotonic() - started
            body = json.loads(Path(path).read_text())
            Path(path).unlink()
            scenario = load_scenario(str(SCENARIO), sets)
            measured = record.summary.samples_per_s if record.summary else float("nan")
            cores = os.cpu_count()
            predicted = predict(scenario, efficiency, cores)
            workers = body["environment"]["workers"].values()
            sent = [
                w.get("measured_sent_bytes", 0) / max(1, w.get("measured_iterations", 1))
                for w in workers
            ]
            row = {
                "hosts": hosts,
                "link_mbps": mbps,
                "mode": mode if mode == "ddp" else f"zero{stage}",
                "measured_samples_per_s": round(measured, 3),
                "predicted_samples_per_s": round(predicted, 3),
                "error_pct": round(100 * (predicted - measured) / measured, 1),
                "sent_mb_per_rank_step": round(statistics.fmean(sent) / 1e6, 2),
                "complete": record.complete,
                "valid": record.valid,
                "invalid_reason": record.invalid_reason or "",
                "wall_s": round(wall, 1),
                "cpu_fp32_efficiency": round(efficiency, 4),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    with out.open("x", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    errors = [abs(r["error_pct"]) for r in rows if r["valid"]]
    if errors:
        print(
            f"held out, valid shapes: mean |error| {statistics.fmean(errors):.1f}%, "
            f"worst {max(errors):.1f}% over {len(errors)} of {len(rows)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
