"""realrun against real MXNet 1.9.1 on the emulated cluster: the same shapes, namespaces,
shaping and emulated compute, alternating, so that the system realrun imitates is measured
beside it.

For each configuration of ``campaigns/emulated-v2.yaml`` (or ``--campaign``) picked with
``--shapes`` (labels; all by default), and ``--repeats`` times in alternation:

- **realrun**: ``realrun run SCENARIO --launcher netns --set ...`` as the campaign runs it; its
  record's ``summary.samples_per_s``.
- **MXNet**: the same scenario's cluster built by the same ``NetnsLauncher`` (one network
  namespace per host, HTB-shaped NICs, delay wires, time dilation), MXNet's own scheduler,
  servers (``import mxnet`` with ``DMLC_ROLE``) and workers started in their hosts with the
  ``DMLC_*`` variables, ``MXNET_KVSTORE_BIGARRAY_BOUND`` set to the scenario's bound. Each
  worker replays the very timeline realrun's emulated worker replays
  (``realrun.training.emulated_compute.emulated_device``: per-layer forward and backward
  seconds, already dilated): forward layer by layer, each waiting for its keys' pulled
  weights; backward from the last layer, each layer's keys pushed and pulled at priority
  ``-key`` as soon as the layer's backward ends; an SGD optimizer (the scenario's) on the
  servers via ``kv.set_optimizer``.

  One difference, reported in the CSV (``host_copy_s``): realrun's emulated worker also replays
  the host's GPU<->CPU copies (``reduce_s``/``broadcast_s``) on copy-engine threads; the MXNet
  replay has no place to put them without threads of its own calling the KVStore (which MXNet's
  Python API does not support), so it leaves them out. That favours MXNet by at most that much
  per iteration.

Throughput of both is the sum over workers of ``batch * gpus / mean measured iteration`` in
emulated seconds (the machine's divided by the dilation), as realrun's record summary computes
it. Both runs are judged by realrun's own test (``realrun.emulated.machine_load.verdict``: did a
node wait for a CPU?) over their measured window; an invalid run is kept in the CSV, marked, since
both systems alternate under the same load. Needs root (network namespaces).

Beside throughput, each row says why a run was as fast as it was: the network's retransmitted
segments and qdisc drops over the run, the median spread of the workers' iteration ends (a
synchronous job waits for its last worker), and from the load sampler the cluster's share of the
cores and the most a delay wire waited for a CPU. ``--baseline-env NAME=VALUE`` runs realrun-base
with extra environment variables (this checkout's realrun unless ``--baseline-root`` names
another): one setting's effect, side by side.

``--loopback`` runs both on 127.0.0.1 instead (local launcher, no namespaces, no shaping, no
root, no load verdict): with the network out of the way, what is left is each system's own
software cost per iteration, which ``cpu_s`` (CPU seconds of all the run's processes) shows.

    python benchmarks/bench_mxnet_emulated.py --mxnet-python PATH [--shapes r18-colo-1G-w2-d5]
        [--repeats 3] [--csv benchmarks/results/mxnet_emulated.csv] [--loopback]
    python benchmarks/bench_mxnet_emulated.py --from-csv benchmarks/results/mxnet_faithful*.csv
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from realrun.campaign import PlannedRun, load_campaign  # noqa: E402
from realrun.launching.local_launcher import LocalLauncher  # noqa: E402
from realrun.launching.netns_launcher import NetnsLauncher  # noqa: E402
from realrun.training.emulated_compute import emulated_device  # noqa: E402
from simscale.model.cluster import layout  # noqa: E402
from simscale.spec.scenario import load_scenario  # noqa: E402

CAMPAIGN = ROOT / "campaigns" / "emulated-v2.yaml"
RUN_LIMIT_S = 600.0
INVALID_EXIT = 3  # realrun run: the job completed, but this machine could not carry it

# The MXNet worker: replays the plan (JSON, argv[1]) and writes its iteration times (argv[2]).
MXNET_WORKER = r"""
import json, sys, time
import numpy as np
import mxnet as mx
plan = json.load(open(sys.argv[1]))
kv = mx.kv.create(plan["mode"])
rng = np.random.default_rng([plan["seed"], kv.rank])
grads = [mx.nd.array(rng.standard_normal(n).astype(np.float32) * 1e-3) for n in plan["elements"]]
bufs = [mx.nd.zeros(n) for n in plan["elements"]]
o = plan["optimizer"]
kv.set_optimizer(mx.optimizer.SGD(learning_rate=o["learning_rate"], momentum=o["momentum"],
                                  wd=o["weight_decay"], rescale_grad=o["rescale_grad"]))
for k, b in enumerate(bufs):
    kv.init(k, b)
for k, b in enumerate(bufs):
    kv.pull(k, out=b)
mx.nd.waitall()
kv._barrier()

def sleep_until(t):
    left = t - time.perf_counter()
    if left > 0:
        time.sleep(left)

layers = plan["layer_keys"]
fwd, bwd = plan["forward_s"], plan["backward_s"]
iterations = []
for it in range(plan["iterations"]):
    start = clock = time.perf_counter()
    start_unix = time.time()
    wait = 0.0
    for layer, keys in enumerate(layers):
        if keys:
            t = time.perf_counter()
            for k in keys:
                bufs[k].wait_to_read()
            wait += time.perf_counter() - t
            clock = max(clock, time.perf_counter())
        clock += fwd[layer]
        sleep_until(clock)
    for layer in reversed(range(len(layers))):
        clock += bwd[layer]
        sleep_until(clock)
        for k in reversed(layers[layer]):
            kv.push(k, grads[k], priority=-k)
            kv.pull(k, out=bufs[k], priority=-k)
    iterations.append({"total_s": time.perf_counter() - start, "wait_s": wait,
                       "start_unix": start_unix})
mx.nd.waitall()
json.dump({"rank": kv.rank, "iterations": iterations, "mxnet": mx.__version__},
          open(sys.argv[2], "w"))
"""


@dataclass(frozen=True)
class Measurement:
    """One run of one system on one configuration."""

    shape: str
    system: str
    repeat: int
    samples_per_s: float
    mean_iteration_s: float
    host_copy_s: float  # per iteration, replayed by realrun's worker only (module docstring)
    wall_s: float
    load_average_1min: float
    valid: bool  # realrun.emulated.machine_load's verdict on the measured window, for both
    invalid_reason: str
    # CPU seconds of every process of the run (user + system, start-up included); NaN in
    # CSV files written before it was measured.
    cpu_s: float = float("nan")
    # Summed over the hosts, from the cluster's counters at the end of the run (the whole run,
    # start-up included): TCP segments retransmitted, and packets the shaping qdiscs dropped
    # (egress and the switch's ingress). NaN on loopback and in CSV files written before.
    retrans_segs: float = float("nan")
    qdisc_drops: float = float("nan")
    # How far apart the workers finish an iteration: per measured iteration, the last worker's
    # end minus the first's (machine seconds, undilated), the median over the iterations. A
    # synchronous job waits for its last worker, so a spread is time the others stand idle.
    end_spread_s: float = float("nan")
    # From realrun.emulated.machine_load over the measured window (NaN on loopback): the
    # share of all cores the cluster's processes used, and the most any delay wire's thread
    # waited for a CPU (a late wire delays the packets it carries).
    cluster_cpu_busy: float = float("nan")
    max_wire_run_delay_share: float = float("nan")


def end_spread_s(ends: dict[int, list[float]], warmup: int) -> float:
    """Median over the measured iterations of (latest - earliest) end time across workers;
    ``ends`` maps each worker to its iterations' end times (unix seconds)."""
    n = min(len(v) for v in ends.values())
    spreads = [
        max(v[i] for v in ends.values()) - min(v[i] for v in ends.values())
        for i in range(warmup, n)
    ]
    return statistics.median(spreads) if spreads else float("nan")


def network_totals(counters: object) -> tuple[float, float]:
    """(retransmitted segments, qdisc drops) summed over ``NetnsLauncher.describe()``'s
    ``network_counters``; NaN when they could not be read."""
    if not isinstance(counters, list):
        return float("nan"), float("nan")
    retrans = sum(c["tcp"]["RetransSegs"] for c in counters)
    drops = sum(c[d]["dropped_packets"] for c in counters for d in ("egress", "ingress"))
    return float(retrans), float(drops)


def planned_shapes(labels: list[str] | None, campaign: Path = CAMPAIGN) -> list[PlannedRun]:
    runs = list(load_campaign(campaign, repeats=1).runs)
    chosen = [r for r in runs if labels is None or r.name.removesuffix("__r1") in labels]
    if labels is not None and len(chosen) != len(labels):
        known = ", ".join(r.name.removesuffix("__r1") for r in runs)
        raise SystemExit(f"--shapes: unknown label among {labels}; known: {known}")
    return chosen


def children_cpu_s() -> float:
    """User + system seconds of every child process reaped so far (and theirs)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_realrun(
    run: PlannedRun,
    out_dir: Path,
    repeat: int,
    loopback: bool = False,
    root: Path = ROOT,
    system: str = "realrun",
    extra_env: dict[str, str] | None = None,
) -> Measurement:
    """One realrun job; ``root`` another checkout's realrun (``--baseline-root``), ``extra_env``
    variables of its own (``--baseline-env``)."""
    label = run.name.removesuffix("__r1")
    out = out_dir / f"{label}-{system}-{repeat}.json"
    launcher = "local" if loopback else "netns"
    argv = [sys.executable, "-m", "realrun", "run", run.scenario, "--launcher", launcher]
    for o in run.overrides:
        argv += ["--set", o]
    t0, load, cpu0 = time.monotonic(), os.getloadavg()[0], children_cpu_s()
    done = subprocess.run(
        [*argv, "-o", str(out), "--no-progress"],
        cwd=root,  # ``python -m`` imports realrun from here, and the launcher's nodes do too
        env={**os.environ, **(extra_env or {}), "PYTHONPATH": str(root)},
        timeout=RUN_LIMIT_S,
        stdout=subprocess.DEVNULL,
    )
    if done.returncode not in (0, INVALID_EXIT) or not out.exists():
        raise RuntimeError(f"{label}: realrun run exited {done.returncode}")
    record = json.loads(out.read_text())
    scenario = load_scenario(run.scenario, list(run.overrides))
    device = emulated_device(scenario, 0)
    summary = record["summary"]
    ends: dict[int, list[float]] = {}
    for it in sorted(record["iterations"], key=lambda i: (i["worker"], i["iteration"])):
        ends.setdefault(it["worker"], []).append(it["start_unix_s"] + it["total_s"])
    return Measurement(
        label,
        system,
        repeat,
        summary["samples_per_s"],
        summary["mean_iteration_s"],
        (sum(device.reduce_s) + sum(device.broadcast_s)) / device.dilation,
        time.monotonic() - t0,
        load,
        bool(record.get("valid")),
        record.get("invalid_reason") or "",
        children_cpu_s() - cpu0,
        *network_totals(record["environment"]["launcher_details"].get("network_counters")),
        end_spread_s(ends, scenario.simulation.warmup_iterations),
        *load_figures(record["environment"].get("machine_load")),
    )


def run_mxnet(
    run: PlannedRun, python: str, out_dir: Path, repeat: int, loopback: bool = False
) -> Measurement:
    label = run.name.removesuffix("__r1")
    scenario = load_scenario(run.scenario, list(run.overrides))
    lay = layout(scenario)
    workers, servers = len(lay.worker_hosts), len(lay.server_hosts)
    sim = scenario.simulation
    iterations = sim.warmup_iterations + sim.measured_iterations
    opt = scenario.training.optimizer
    total_gpus = sum(lay.gpus_of(r) for r in range(workers))
    t0, load, cpu0 = time.monotonic(), os.getloadavg()[0], children_cpu_s()
    work = Path(tempfile.mkdtemp(prefix=f"mx-{label}-", dir=out_dir))
    plans = []
    for rank in range(workers):
        d = emulated_device(scenario, rank)
        plan = {
            "mode": scenario.kvstore.mode,
            "seed": sim.seed,
            "elements": list(d.key_elements),
            "layer_keys": [list(k) for k in d.layer_keys],
            "forward_s": list(d.forward_s),
            "backward_s": list(d.backward_s),
            "iterations": iterations,
            "optimizer": {
                "learning_rate": opt.learning_rate,
                "momentum": opt.momentum,
                "weight_decay": opt.weight_decay,
                "rescale_grad": 1.0 / total_gpus,
            },
        }
        path = work / f"plan-{rank}.json"
        path.write_text(json.dumps(plan))
        plans.append((path, d))
    cluster = contextlib.nullcontext(LocalLauncher()) if loopback else NetnsLauncher(scenario)
    with cluster as launcher:
        base = {
            "DMLC_PS_ROOT_URI": launcher.scheduler_host,
            "DMLC_PS_ROOT_PORT": "9091",
            "DMLC_NUM_SERVER": str(servers),
            "DMLC_NUM_WORKER": str(workers),
            "MXNET_KVSTORE_BIGARRAY_BOUND": str(scenario.kvstore.bigarray_bound),
            "OMP_NUM_THREADS": "1",
        }
        procs = [
            launcher.start(
                "scheduler",
                0,
                [python, "-c", "import mxnet"],
                {**base, "DMLC_ROLE": "scheduler", "DMLC_NODE_HOST": launcher.scheduler_host},
            )
        ]
        for i in range(servers):
            host = launcher.host_of("server", i)
            env = {**base, "DMLC_ROLE": "server", "DMLC_NODE_HOST": host}
            procs.append(launcher.start("server", i, [python, "-c", "import mxnet"], env))
        workers_p = []
        for rank, (plan, _) in enumerate(plans):
            host = launcher.host_of("worker", rank)
            env = {**base, "DMLC_ROLE": "worker", "DMLC_NODE_HOST": host}
            argv = [python, "-c", MXNET_WORKER, str(plan), str(work / f"out-{rank}.json")]
            p = launcher.start("worker", rank, argv, env)
            workers_p.append(p)
            procs.append(p)
        try:
            for p in workers_p:
                if p.wait(RUN_LIMIT_S) is None:
                    raise TimeoutError(f"{label}: an MXNet worker did not finish")
                if p.poll() != 0:
                    raise RuntimeError(f"{label}: an MXNet worker exited {p.poll()}")
            results = [json.loads((work / f"out-{r}.json").read_text()) for r in range(workers)]
            figures, problem = (
                ({}, None)
                if loopback
                else _machine_verdict(launcher, results, sim.warmup_iterations)
            )
            net = (
                (float("nan"), float("nan"))
                if loopback
                else network_totals(launcher.describe().get("network_counters"))
            )
        finally:
            for p in procs:
                if p.poll() is None:
                    p.signal_group(15)
                    p.wait(5)
    per_worker, means = [], []
    for rank, result in enumerate(results):
        d = scenario.realrun.dilation  # emulated seconds, as realrun.records.record.summarize
        measured = [i["total_s"] / d for i in result["iterations"][sim.warmup_iterations :]]
        mean = statistics.fmean(measured)
        means.append(mean)
        per_worker.append(scenario.training.batch_per_gpu * lay.gpus_of(rank) / mean)
    device = plans[0][1]
    return Measurement(
        label,
        "mxnet",
        repeat,
        sum(per_worker),
        statistics.fmean(means),
        (sum(device.reduce_s) + sum(device.broadcast_s)) / device.dilation,
        time.monotonic() - t0,
        load,
        problem is None,
        problem or "",
        children_cpu_s() - cpu0,
        *net,
        end_spread_s(
            {r["rank"]: [i["start_unix"] + i["total_s"] for i in r["iterations"]] for r in results},
            sim.warmup_iterations,
        ),
        *load_figures(figures),
    )


def load_figures(figures: dict | None) -> tuple[float, float]:
    """(cluster_cpu_busy, max_wire_run_delay_share) of a machine_load verdict's figures."""
    figures = figures or {}
    return (
        float(figures.get("cluster_cpu_busy", float("nan"))),
        float(figures.get("max_wire_run_delay_share", float("nan"))),
    )


def _machine_verdict(
    launcher: NetnsLauncher, results: list[dict], warmup: int
) -> tuple[dict, str | None]:
    """realrun's own test of a run (did this machine starve a node?) over MXNet's window:
    its figures and the reason the run is invalid, or None."""
    from realrun.emulated.machine_load import verdict

    measured = [i for r in results for i in r["iterations"][warmup:]]
    window = (
        min(i["start_unix"] for i in measured),
        max(i["start_unix"] + i["total_s"] for i in measured),
    )
    assert launcher.sampler is not None
    launcher.sampler.sample()
    return verdict(list(launcher.sampler.samples), window)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mxnet-python", help="an interpreter with mxnet 1.9.1")
    parser.add_argument(
        "--from-csv", nargs="+", help="run nothing: print the summary of these CSV files"
    )
    parser.add_argument(
        "--campaign",
        type=Path,
        default=CAMPAIGN,
        help="a realrun campaign file whose configurations to run (default: emulated-v2's)",
    )
    parser.add_argument("--shapes", nargs="+", help="campaign labels (default: every one)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--csv", help="write every measurement to this CSV file")
    parser.add_argument(
        "--baseline-root",
        type=Path,
        help="also run realrun from this checkout (system realrun-base), in the same rotation: "
        "a change's before and after side by side",
    )
    parser.add_argument(
        "--baseline-env",
        nargs="+",
        default=[],
        metavar="NAME=VALUE",
        help="environment variables for realrun-base only (with --baseline-root, or this "
        "checkout's realrun when it is not given): a setting's effect side by side",
    )
    parser.add_argument(
        "--loopback",
        action="store_true",
        help="every node on 127.0.0.1, unshaped and without root (what each system's "
        "software costs per iteration; the load verdict is not applied)",
    )
    args = parser.parse_args()
    if args.from_csv:
        for line in summary(read_csv(args.from_csv)):
            print(line)
        return 0
    if not args.mxnet_python:
        parser.error("--mxnet-python is required to run the benchmark")
    if os.geteuid() != 0 and not args.loopback:
        print("bench_mxnet_emulated: needs root (network namespaces)", file=sys.stderr)
        return 2
    if not Path(args.mxnet_python).exists():
        print(f"--mxnet-python {args.mxnet_python}: no such file", file=sys.stderr)
        return 2
    malformed = [v for v in args.baseline_env if "=" not in v or v.startswith("=")]
    if malformed:
        parser.error(f"--baseline-env: {malformed[0]!r} is not NAME=VALUE")
    baseline_env = dict(v.split("=", 1) for v in args.baseline_env)
    if baseline_env and not args.baseline_root:
        args.baseline_root = ROOT
    rows: list[Measurement] = []
    out_dir = Path(tempfile.mkdtemp(prefix="bench-mxnet-emulated-"))
    sink = CsvSink(args.csv)
    for run in planned_shapes(args.shapes, args.campaign):
        for repeat in range(1, args.repeats + 1):
            systems = ["mxnet", "realrun"] + (["realrun-base"] if args.baseline_root else [])
            shift = (repeat - 1) % len(systems)  # each system goes first in turn
            for system in systems[shift:] + systems[:shift]:
                t0, load = time.monotonic(), os.getloadavg()[0]
                try:
                    m = (
                        run_mxnet(run, args.mxnet_python, out_dir, repeat, args.loopback)
                        if system == "mxnet"
                        else run_realrun(run, out_dir, repeat, args.loopback)
                        if system == "realrun"
                        else run_realrun(
                            run,
                            out_dir,
                            repeat,
                            args.loopback,
                            args.baseline_root,
                            system,
                            baseline_env,
                        )
                    )
                except (RuntimeError, TimeoutError, subprocess.TimeoutExpired) as e:
                    # A failed run is a result too: kept, marked, and the campaign goes on.
                    label = run.name.removesuffix("__r1")
                    nan = float("nan")
                    wall = time.monotonic() - t0
                    m = Measurement(
                        label, system, repeat, nan, nan, nan, wall, load, False, f"failed: {e}"
                    )
                rows.append(m)
                sink.write(m)
                print(
                    f"{m.shape:<28} {m.system:<12} r{repeat} {m.samples_per_s:8.1f} samples/s "
                    f"(iteration {m.mean_iteration_s:.3f} s, {m.cpu_s:.1f} CPU s, "
                    f"load {m.load_average_1min:.1f}, {m.retrans_segs:.0f} retransmitted, "
                    f"{m.qdisc_drops:.0f} dropped, end spread {m.end_spread_s * 1e3:.0f} ms, "
                    f"cluster {m.cluster_cpu_busy:.0%} of the cores, wires waited "
                    f"{m.max_wire_run_delay_share:.0%}"
                    f"{', INVALID: ' + m.invalid_reason if not m.valid else ''})",
                    flush=True,
                )
    print()
    for line in summary(rows):
        print(line)
    return 0


def summary(rows: list[Measurement]) -> list[str]:
    """Per shape, each system's median over its valid runs (the load verdict's invalid and
    failed runs are counted, not used), realrun/MXNet; then the mean and worst |ratio - 1|."""
    lines = [
        f"{'shape':<28} {'realrun':>9} {'MXNet':>9} {'ratio':>6}  valid runs (realrun, MXNet)"
        "   (medians of valid repeats, samples/s)"
    ]
    gaps: list[tuple[float, float, str]] = []
    for shape in dict.fromkeys(m.shape for m in rows):
        med: dict[str, float | None] = {}
        counts = []
        for system in ("realrun", "mxnet"):
            mine = [m for m in rows if m.shape == shape and m.system == system]
            ok = [m.samples_per_s for m in mine if m.valid]
            med[system] = statistics.median(ok) if ok else None
            counts.append(f"{len(ok)}/{len(mine)}")
        rr, mx = med["realrun"], med["mxnet"]
        if rr is None or mx is None:
            lines.append(f"{shape:<28} {'-':>9} {'-':>9} {'-':>6}  {', '.join(counts)}")
            continue
        gaps.append((abs(rr / mx - 1), rr / mx, shape))
        lines.append(f"{shape:<28} {rr:>9.1f} {mx:>9.1f} {rr / mx:>6.2f}  {', '.join(counts)}")
    for shape in dict.fromkeys(m.shape for m in rows if m.system == "realrun-base"):
        med = {}
        for system in ("realrun", "realrun-base"):
            ok = [
                m.samples_per_s for m in rows if m.shape == shape and m.system == system and m.valid
            ]
            cpu = [m.cpu_s for m in rows if m.shape == shape and m.system == system and m.valid]
            med[system] = (statistics.median(ok), statistics.median(cpu)) if ok else None
        if med["realrun"] and med["realrun-base"]:
            (new, new_cpu), (old, old_cpu) = med["realrun"], med["realrun-base"]
            lines.append(
                f"{shape:<28} realrun {new:.1f} against --baseline-root's {old:.1f} samples/s: "
                f"{new / old:.2f}x (CPU s {new_cpu:.1f} against {old_cpu:.1f})"
            )
    if gaps:
        mean = statistics.fmean(g for g, _, _ in gaps)
        worst = max(gaps)
        lines.append(
            f"|realrun/MXNet - 1| over {len(gaps)} shape(s) with valid runs of both: mean "
            f"{mean:.1%}, worst {worst[0]:.1%} ({worst[2]}, ratio {worst[1]:.2f})"
        )
    return lines


def read_csv(paths: list[str]) -> list[Measurement]:
    """Measurements back from this script's CSV files."""
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            table = list(csv.DictReader(f))
        for r in table:
            rows.append(
                Measurement(
                    r["shape"],
                    r["system"],
                    int(r["repeat"]),
                    float(r["samples_per_s"]),
                    float(r["mean_iteration_s"]),
                    float(r["host_copy_s"]),
                    float(r["wall_s"]),
                    float(r["load_average_1min"]),
                    r["valid"] == "True",
                    r["invalid_reason"],
                    float(r.get("cpu_s") or "nan"),
                    float(r.get("retrans_segs") or "nan"),
                    float(r.get("qdisc_drops") or "nan"),
                    float(r.get("end_spread_s") or "nan"),
                    float(r.get("cluster_cpu_busy") or "nan"),
                    float(r.get("max_wire_run_delay_share") or "nan"),
                )
            )
    return rows


class CsvSink:
    """Every measurement, written as it is made: a run cut short keeps what it measured."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        if path:
            with open(path, "w", newline="") as f:
                csv.DictWriter(f, fieldnames=FIELDS).writeheader()

    def write(self, m: Measurement) -> None:
        if self.path:
            with open(self.path, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=FIELDS).writerow(asdict(m))


FIELDS = [f.name for f in fields(Measurement)]


if __name__ == "__main__":
    sys.exit(main())
