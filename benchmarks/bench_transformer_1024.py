"""How fast `simscale predict` answers 1,024 H100s (128 p5.48xlarge) training GPT-2 XL under
ZeRO stage 3, against the issue's target of 10 s (issue 37).

Each repeat runs the prediction in a fresh process and prints its wall and CPU seconds (CPU
beside wall: these machines are shared), then the medians and the verdict. ``--hosts`` runs
other sizes of the same scenario, to see how the cost grows.

    python benchmarks/bench_transformer_1024.py [--repeats 3] [--hosts 16,128] [--mode zero]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 10.0
SCENARIO = """\
cluster:
  hosts:
    - {{count: {hosts}, instance: p5.48xlarge}}
model: gpt2_xl
training: {{batch_per_gpu: 4, precision: bf16, seq_len: 1024, optimizer: {{type: adam}}}}
kvstore: {{mode: {mode}, zero: {{stage: 3}}}}
"""


def run_once(path: Path) -> tuple[float, float, dict]:
    """(wall s, CPU s of the child, the prediction's JSON) of one fresh `simscale predict`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "simscale.cli", "predict", str(path), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(out.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--hosts", default="128", help="comma-separated host counts (8 GPUs each)")
    p.add_argument("--mode", default="zero", choices=("zero", "ddp"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for hosts in (int(h) for h in args.hosts.split(",")):
            path = Path(tmp) / f"gpt2xl-{hosts}x-p5-{args.mode}.yaml"
            path.write_text(SCENARIO.format(hosts=hosts, mode=args.mode))
            walls, cpus = [], []
            for i in range(args.repeats):
                wall, cpu, result = run_once(path)
                walls.append(wall)
                cpus.append(cpu)
                print(
                    f"{hosts * 8:>5} GPUs  repeat {i + 1}: wall {wall:6.1f} s  cpu {cpu:6.1f} s  "
                    f"events {result['events']:,}  path {result['path']}  "
                    f"{result['throughput_samples_per_s']:,.0f} samples/s",
                    flush=True,
                )
            wall_m, cpu_m = statistics.median(walls), statistics.median(cpus)
            verdict = "meets" if wall_m <= TARGET_S else "MISSES"
            print(
                f"{hosts * 8:>5} GPUs  median wall {wall_m:.1f} s, cpu {cpu_m:.1f} s: {verdict} "
                f"the {TARGET_S:.0f} s target"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
