"""PyTorch DDP and FSDP on the emulated cluster, measured and predicted (issue 37).

For each shape (hosts x link rate x mode) it runs ``realrun run`` with the netns launcher (root)
on scenarios/emulated/gpt2-tiny-ddp.yaml, then predicts the same scenario with ``simscale``.
Nothing is fitted to any shape.

``--compute emulated`` (the default): every rank is real torch DDP/FSDP over real gloo on the
shaped links, but its device is emulated (``realrun.allreduce.emulated_model``): each layer
sleeps the time simscale's compute model gives it (``realrun.compute_times=model``, the default
CostModel's cpu/fp32 rate, batch EMULATED_BATCH) and yields fixed gradients, so the CPU only
carries the communication and the optimizer step. The prediction takes the same compute model,
so what is judged is the communication: buckets, overlap, gathers, the network. Shapes on fast
links run under a time dilation (links D times slower, compute D times longer) so that this
machine's CPU never sets the pace.

``--compute real``: every rank trains the real model on this machine's CPU; the one input
measured is the CPU's compute rate (one process, no communication, median of a few steps),
turned into the ``cpu/fp32`` efficiency. On a 2-core machine 2-4 such ranks saturate it, which
the machine-load verdict reports (the runs are then invalid).

    flock /tmp/netns.lock python benchmarks/bench_ddp_emulated.py -o /tmp/ddp-emulated.csv

Writes one CSV row per shape: measured and predicted samples/s, the error, bytes sent per rank
per step, the machine-load verdict with its CPU figures, and the wall time.
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
SHAPES = (  # real compute: hosts, Mbit/s, mode, zero stage, dilation
    (2, 200, "ddp", 3, 1.0),
    (2, 200, "zero", 3, 1.0),
    (3, 100, "ddp", 3, 1.0),
    (3, 100, "zero", 2, 1.0),
)
# Emulated compute: 2-4 hosts, 50-1000 Mbit/s, DDP and FSDP (FULL_SHARD and SHARD_GRAD_OP).
# 1000 Mbit/s runs dilated 4x (250 Mbit/s on the wire), like the parameter-server campaigns'
# fast links, so gloo's copies and sums and the SGD step stay a small share of a step.
EMULATED_SHAPES = (  # the longest (50 Mbit/s) last
    (2, 200, "ddp", 3, 1.0),
    (2, 200, "zero", 3, 1.0),
    (4, 1000, "ddp", 3, 4.0),
    (4, 1000, "zero", 3, 4.0),
    (3, 100, "ddp", 3, 1.0),
    (3, 100, "zero", 2, 1.0),
    (4, 50, "ddp", 3, 1.0),
)
EMULATED_BATCH = 16  # 0.88 s of modelled cpu/fp32 compute per step: about the communication's
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


def predict(scenario, efficiency: float | None, cores: int | None) -> float:
    """simscale's samples/s for the scenario as realrun ran it: with the measured cpu/fp32
    efficiency and the ranks sharing ``cores`` (real compute), or with the default CostModel
    the emulated device replays and no CPU sharing (emulated compute: the ranks sleep)."""
    from calibration.runs import as_realrun_ran
    from simscale.simulator import simulate
    from simscale.spec.costs import CostModel

    costs = (
        CostModel()
        if efficiency is None
        else CostModel(compute_efficiency={"cpu/fp32": efficiency})
    )
    return simulate(as_realrun_ran(scenario, cores), costs).throughput_samples_per_s


def shape_sets(hosts: int, mbps: int, mode: str, stage: int, dilation: float, emulated: bool):
    """The ``--set`` overrides of one shape."""
    sets = [
        f"cluster.hosts[0].count={hosts}",
        f"cluster.hosts[0].nic_gbps={mbps / 1000}",
        f"kvstore.mode={mode}",
        f"kvstore.zero.stage={stage}",
    ]
    if emulated:
        sets += [
            "realrun.compute=emulated",
            "realrun.compute_times=model",
            f"realrun.dilation={dilation}",
            f"training.batch_per_gpu={EMULATED_BATCH}",
        ]
    return sets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", required=True, help="CSV to write (never overwritten)")
    parser.add_argument("--launcher", default="netns", choices=("netns", "local"))
    parser.add_argument(
        "--compute",
        default="emulated",
        choices=("emulated", "real"),
        help="emulated devices (default) or real CPU training",
    )
    parser.add_argument("--only", type=int, nargs="*", help="shape indices to run (default all)")
    args = parser.parse_args(argv)
    out = Path(args.output)
    if out.exists():
        print(f"bench_ddp_emulated: {out} exists; choose another path", file=sys.stderr)
        return 2
    import os

    from realrun.run import LaunchOptions, run_scenario
    from simscale.spec.scenario import load_scenario

    emulated = args.compute == "emulated"
    efficiency: float | None = None
    if not emulated:
        efficiency, step_s = compute_efficiency(load_scenario(str(SCENARIO)))
        print(f"compute: {step_s * 1e3:.0f} ms per step on one core -> cpu/fp32 {efficiency:.3f}")
    shapes = EMULATED_SHAPES if emulated else SHAPES
    chosen = [shapes[i] for i in args.only] if args.only else list(shapes)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, out.open("x", newline="") as f:
        writer: csv.DictWriter | None = None  # rows are written as they come: a cut run keeps them
        for n, (hosts, mbps, mode, stage, dilation) in enumerate(chosen, 1):
            sets = shape_sets(hosts, mbps, mode, stage, dilation, emulated)
            print(f"[{n}/{len(chosen)}] {hosts} hosts, {mbps} Mbit/s, {mode}", flush=True)
            started = time.monotonic()
            record, path = run_scenario(
                SCENARIO, sets, LaunchOptions(launcher=args.launcher), output=f"{tmp}/r.json"
            )
            wall = time.monotonic() - started
            body = json.loads(Path(path).read_text())
            Path(path).unlink()
            scenario = load_scenario(str(SCENARIO), sets)
            measured = record.summary.samples_per_s if record.summary else float("nan")
            cores = None if emulated else os.cpu_count()
            predicted = predict(scenario, efficiency, cores)
            load = body["environment"].get("machine_load", {})
            workers = body["environment"]["workers"].values()
            sent = [
                w.get("measured_sent_bytes", 0) / max(1, w.get("measured_iterations", 1))
                for w in workers
            ]
            row = {
                "compute": args.compute,
                "hosts": hosts,
                "link_mbps": mbps,
                "mode": mode if mode == "ddp" else f"zero{stage}",
                "dilation": dilation,
                "measured_samples_per_s": round(measured, 3),
                "predicted_samples_per_s": round(predicted, 3),
                "error_pct": round(100 * (predicted - measured) / measured, 1),
                "sent_mb_per_rank_step": round(statistics.fmean(sent) / 1e6, 2),
                "complete": record.complete,
                "valid": record.valid,
                "invalid_reason": record.invalid_reason or "",
                "cluster_cpu_busy": round(load.get("cluster_cpu_busy", float("nan")), 3),
                "max_run_delay_share": round(load.get("max_run_delay_share", float("nan")), 3),
                "wall_s": round(wall, 1),
                "cpu_fp32_efficiency": round(efficiency, 4) if efficiency else "",
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
            if writer is None:
                writer = csv.DictWriter(f, fieldnames=list(row))
                writer.writeheader()
            writer.writerow(row)
            f.flush()
    groups = {"all": rows, "ddp": [r for r in rows if r["mode"] == "ddp"]}
    groups["zero/fsdp"] = [r for r in rows if r["mode"] != "ddp"]
    for name, group in groups.items():
        errors = [abs(r["error_pct"]) for r in group if r["valid"]]
        if errors:
            print(
                f"{name}: held out, valid shapes: mean |error| {statistics.fmean(errors):.1f}%, "
                f"worst {max(errors):.1f}% over {len(errors)} of {len(group)}"
            )
        else:
            print(f"{name}: no valid shape of {len(group)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
