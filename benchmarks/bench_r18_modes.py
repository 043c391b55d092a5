"""Where the probe profile's ResNet-18 misses come from: measured iteration modes beside the
simulator's, on runs/emulated-v2 (issue 35 item 4). CPU only; no emulated cluster.

For each ResNet-18 shape of the campaign it prints and writes (``--out``, refusing to overwrite
without ``--force``):

- the measured iterations (every worker, every repeat, undilated seconds): min, median, max;
- the wire time of one direction of the busiest NIC (its bytes per iteration over the nominal
  rate times the probe's ``bandwidth_factor``), and each of those iterations over it: about 1
  means pushes and pulls overlap fully, about 2 that they run one after the other;
- the simulator's iteration with the probe profile and the campaign profile, and with the
  probe profile's ``bandwidth_factor`` nudged by -0.5% and +0.5%: a jump between neighbours is
  a protocol race the deterministic simulator resolves one way for every iteration;
- and with the probe's ``latency_factor`` times 4 (``SLOW_ROUND_TRIP``): a small push's round
  trip near the 2.7 ms (10th percentile) realrun took in a traced run (docs/probe.md), against
  the simulator's 1.0 ms. Not a fit: it shows which side of the race each shape takes when a
  bias's ack comes back after its weight and the next layer's keys are posted.

    python -m benchmarks.bench_r18_modes [--out DIR] [--force]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from calibration.runs import load_runs
from calibration.validate import label_of
from simscale.simulator import Simulation
from simscale.spec.profile import load_profile
from simscale.spec.scenario import Scenario
from simscale.spec.sharding import place_keys
from simscale.zoo import BYTES_PER_ELEMENT

RUNS = Path("runs/emulated-v2")
PROBE_PROFILE = Path("benchmarks/results/probe-emulated-profile.yaml")
CAMPAIGN_PROFILE = Path("profiles/emulated-v2.yaml")
NUDGE = 0.005  # relative change of bandwidth_factor that should move a smooth model by ~0.5%
SLOW_ROUND_TRIP = 4.0  # latency_factor multiple: a small push's round trip near realrun's


def busiest_direction_bytes(s: Scenario) -> float:
    """Bytes one direction of the busiest NIC carries per iteration, from the key placement
    the simulator and realrun share (simscale.spec.sharding): every worker's gradient goes out
    and its weights come back once; co-located, the host's own server's slices stay on the
    host while that server answers the other workers."""
    bpe = BYTES_PER_ELEMENT[s.training.gradient_precision]
    elements = [a.elements for a in s.model_spec().arrays]
    kv = s.kvstore
    per_server = [0.0] * s.num_servers
    for key in place_keys(elements, s.num_servers, kv.bigarray_bound, kv.key_placement):
        for sl in key:
            per_server[sl.server] += sl.elements * bpe
    per_worker = sum(per_server)
    workers = s.num_workers
    if kv.placement == "colocated":
        return max(per_worker - b + (workers - 1) * b for b in per_server)
    return max(per_worker, workers * max(per_server))


def measured_iterations(paths: list[str]) -> list[float]:
    """Every measured iteration of every worker of the records, undilated seconds."""
    out = []
    for p in paths:
        record = json.loads(Path(p).read_text())
        warm = record["scenario"]["simulation"]["warmup_iterations"]
        dilation = record["summary"].get("time_dilation", 1.0) or 1.0
        out += [it["total_s"] / dilation for it in record["iterations"] if it["iteration"] >= warm]
    return out


def simulated_iteration_s(s: Scenario, costs) -> float:
    sim = Simulation(s, costs)
    result = sim.run()
    return s.global_batch / result.throughput_samples_per_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--force", action="store_true", help="overwrite earlier results")
    a = ap.parse_args()
    target = a.out / "r18-modes.json"
    if target.exists() and not a.force:
        print(f"{target} exists; --force to overwrite", file=sys.stderr)
        return 2
    probe = load_profile(PROBE_PROFILE).costs
    campaign = load_profile(CAMPAIGN_PROFILE).costs
    groups = load_runs([RUNS]).shapes()
    rows = []
    for runs in groups.values():
        s = runs[0].scenario
        if s.model.name != "resnet18":
            continue
        its = measured_iterations([r.path for r in runs])
        nic_Bps = min(h.nic_gbps for h in s.cluster.hosts) * 1e9 / 8
        wire_s = busiest_direction_bytes(s) / (nic_Bps * probe.bandwidth_factor)
        sim = s  # as load_runs gives it: as realrun ran it (pull order, window, cores)
        nudged = {
            f"{sign:+.1%}": simulated_iteration_s(
                sim, probe.with_values(bandwidth_factor=probe.bandwidth_factor * (1 + sign))
            )
            for sign in (-NUDGE, NUDGE)
        }
        rows.append(
            {
                "shape": label_of(s),
                "measured_iteration_s": {
                    "min": min(its),
                    "median": statistics.median(its),
                    "max": max(its),
                    "n": len(its),
                },
                "one_direction_wire_s": wire_s,
                "measured_over_wire": {
                    "min": min(its) / wire_s,
                    "median": statistics.median(its) / wire_s,
                    "max": max(its) / wire_s,
                },
                "simulated_iteration_s": {
                    "probe": simulated_iteration_s(sim, probe),
                    "campaign": simulated_iteration_s(sim, campaign),
                    **{f"probe, bandwidth_factor {k}": v for k, v in nudged.items()},
                    "probe, latency_factor x4": simulated_iteration_s(
                        sim,
                        probe.with_values(latency_factor=probe.latency_factor * SLOW_ROUND_TRIP),
                    ),
                },
            }
        )
        print(f"{label_of(s)}: done", file=sys.stderr)
    a.out.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(rows, indent=1) + "\n")
    for r in rows:
        m, x, sims = r["measured_iteration_s"], r["measured_over_wire"], r["simulated_iteration_s"]
        print(
            f"{r['shape']}: measured {m['min']:.3f}/{m['median']:.3f}/{m['max']:.3f} s "
            f"(min/median/max of {m['n']}; x{x['min']:.2f}/x{x['median']:.2f}/x{x['max']:.2f} "
            f"the one-way wire time {r['one_direction_wire_s']:.3f} s); simulated "
            + ", ".join(f"{k} {v:.3f}" for k, v in sims.items())
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
