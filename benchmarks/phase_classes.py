"""An experiment, not a model path: would C representatives reproduce the NIC-bound exact model?

One representative (simscale.model.symmetry) keeps all W workers in phase; where a NIC is the
limit the exact model's workers drift apart and take turns at it, and the reduction comes out 4-32%
slow. Here C representatives each stand for W / C workers (C = W is the exact model, C = 1 the
shipped reduction), so that they can drift apart too. It covers the simplest layout only, dedicated
servers (no co-located host to load through a group), one dedicated server for W p3.16xlarge
workers (scenarios/server-ratio/64gpu-servers-1.yaml), and prints each C's throughput against the
exact model's, with the real-hardware profile's costs.

    python benchmarks/phase_classes.py [--workers 8,16,32] [--classes 1,2,4,8]

Measured 2026-11-25: better than one class, but neither monotone in C nor within 1% (README,
"Performance").
"""

from __future__ import annotations

import argparse
from pathlib import Path

from simscale.model import symmetry
from simscale.model.cluster import Host, Layout
from simscale.simulator import Simulation
from simscale.spec.profile import default_costs
from simscale.spec.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "scenarios" / "server-ratio" / "64gpu-servers-1.yaml"


class PhaseClasses(symmetry.Reduction):
    """Routes of C representatives (reduced hosts 0..C-1) to dedicated server hosts."""

    classes: int = 1

    def route(self, src: int, dst: int) -> tuple[tuple[int, ...], tuple[float, ...], int]:
        if src < self.classes:  # a push: W / C flows into the server, one out of the worker
            return (2 * dst + 1, 2 * src), (float(self.copies), 1.0), symmetry.PUSHES
        if dst < self.classes:
            return (2 * src, 2 * dst + 1), (float(self.copies), 1.0), symmetry.REPLIES
        raise ValueError(f"no traffic between reduced hosts {src} and {dst}")


def reduce_to(classes: int, layout: Layout) -> PhaseClasses:
    """``layout`` with its W workers as ``classes`` representatives of W / C each."""
    w = layout.num_workers
    if w % classes:
        raise ValueError(f"{classes} classes do not divide {w} workers")
    if set(layout.server_hosts) & set(layout.worker_hosts):
        raise ValueError("dedicated servers only")
    real = list(dict.fromkeys(layout.server_hosts))
    f = layout.hosts[layout.worker_hosts[0]]
    hosts = [
        Host(i, f"worker{i}*", f.gpus, f.gpu, f.nic_gbps, f.latency_us, f.cpu_cores)
        for i in range(classes)
    ]
    for i, h in enumerate(real, start=classes):
        r = layout.hosts[h]
        hosts.append(Host(i, r.name, r.gpus, r.gpu, r.nic_gbps, r.latency_us, r.cpu_cores))
    index = {h: i for i, h in enumerate(real, start=classes)}
    reduced = Layout(
        tuple(hosts), tuple(range(classes)), tuple(index[h] for h in layout.server_hosts)
    )
    n = len(hosts)
    red = PhaseClasses(reduced, layout, w // classes, (0,) * n, (False,) * n, w)
    object.__setattr__(red, "classes", classes)
    return red


def throughput(workers: int, classes: int | None) -> float:
    """Samples/s of the full cluster; ``classes`` None runs the exact model."""
    scenario = load_scenario(BASE, [f"cluster.hosts[0].count={workers}"])
    costs, _ = default_costs(scenario)
    if classes is None:
        return Simulation(scenario, costs, path="exact").run().throughput_samples_per_s
    real_reduce = symmetry.reduce
    symmetry.reduce = lambda layout: reduce_to(classes, layout)
    try:
        sim = Simulation(scenario, costs, path="symmetric")
        result = sim.run()
    finally:
        symmetry.reduce = real_reduce
    # The result counts the C simulated workers as W each; the cluster has W in all.
    b, warm = sim.boundaries, scenario.simulation.warmup_iterations
    it_s = (b[warm + result.iterations_measured] - b[warm]) / result.iterations_measured
    full = sim.full_layout
    return full.num_workers * full.gpus_of(0) * scenario.training.batch_per_gpu / it_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="8,16,32", help="worker hosts W, comma-separated")
    ap.add_argument("--classes", default="1,2,4,8", help="representatives C, comma-separated")
    args = ap.parse_args()
    classes = [int(c) for c in args.classes.split(",")]
    print("W  exact samples/s  " + "  ".join(f"C={c:<3d}" for c in classes))
    for w in (int(x) for x in args.workers.split(",")):
        exact = throughput(w, None)
        cells = []
        for c in classes:
            cells.append(
                f"{100 * (throughput(w, c) / exact - 1):+6.1f}%" if w % c == 0 else "   n/a"
            )
        print(f"{w:<3d}{exact:15,.0f}  " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
