"""The symmetric path forced against the exact model on the shapes beyond its bounds that
simscale/model/symmetry.py's comments quote (MAX_MERGE_BURST, APPROXIMATION_ERROR).

Each shape: its merge burst and NIC load (simscale.model.symmetry), the exact model's and the
forced reduction's throughput with the CPU seconds each took, and the reduction's error. Shapes:

- ``rn18-N`` / ``rn50-N``: ResNet-18 / ResNet-50 on N p3.16xlarge hosts with a server each, 4
  measured iterations (tests/simscale/model/test_symmetry.py's ``_per_host_servers``);
- ``ratio-W``: one dedicated server for W p3.16xlarge workers
  (scenarios/server-ratio/{32,64}gpu-servers-1.yaml with cluster.hosts[0].count = W);
- ``64gpu-G``: scenarios/64gpu.yaml with every NIC at G Gbit/s.

    python benchmarks/symmetry_beyond.py rn18-16 rn18-24 rn18-32 rn50-32 64gpu-5 64gpu-2 ratio-4
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simscale.model import cluster, symmetry  # noqa: E402
from simscale.simulator import Simulation  # noqa: E402
from simscale.spec.profile import default_costs  # noqa: E402
from simscale.spec.scenario import scenario_from_dict  # noqa: E402

MODELS = {"rn18": "resnet18", "rn50": "resnet50"}


def shape_data(shape: str) -> dict[str, Any]:
    """The scenario (plain data) a shape name stands for."""
    kind, n = shape.rsplit("-", 1)
    if kind in MODELS:
        hosts = int(n)
        return {
            "name": shape,
            "cluster": {"hosts": [{"count": hosts, "instance": "p3.16xlarge"}]},
            "model": MODELS[kind],
            "training": {"batch_per_gpu": 128, "precision": "fp32"},
            "kvstore": {"mode": "dist_sync", "servers": hosts},
            "simulation": {"warmup_iterations": 1, "measured_iterations": 4},
        }
    if kind == "ratio":
        workers = int(n)
        gpus = 32 if workers == 4 else 64
        path = ROOT / "scenarios" / "server-ratio" / f"{gpus}gpu-servers-1.yaml"
        data = yaml.safe_load(path.read_text())
        data["cluster"]["hosts"][0]["count"] = workers
        return data
    if kind == "64gpu":
        data = yaml.safe_load((ROOT / "scenarios" / "64gpu.yaml").read_text())
        for group in data["cluster"]["hosts"]:
            group["nic_gbps"] = float(n)
        return data
    raise SystemExit(f"unknown shape {shape!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shapes", nargs="+")
    args = ap.parse_args()
    for shape in args.shapes:
        scenario = scenario_from_dict(shape_data(shape))
        costs, _ = default_costs(scenario)
        layout = cluster.layout(scenario)
        tput, cpu = {}, {}
        for path in ("exact", "symmetric"):
            t0 = time.process_time()
            tput[path] = Simulation(scenario, costs, path=path).run().throughput_samples_per_s
            cpu[path] = time.process_time() - t0
        burst = 100 * symmetry.merge_burst(scenario, layout, costs)
        load = symmetry.nic_load(scenario, layout, costs)
        error = 100 * (tput["symmetric"] / tput["exact"] - 1)
        print(
            f"{shape:10s} burst {burst:5.1f}%  NIC load {load:4.2f}  exact {tput['exact']:>10,.0f} "
            f"({cpu['exact']:.0f} CPU s)  symmetric {tput['symmetric']:>10,.0f}  {error:+.2f}%",
            flush=True,
        )


if __name__ == "__main__":
    main()
