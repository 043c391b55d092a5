"""How fast the network model runs: solver time per re-solve and simulated transfers per second.

Run: ``python benchmarks/bench_network.py`` (add ``--quick`` for fewer repeats). Prints the median
of several repeats; times are wall-clock on this machine, single thread.

1. Solver: F flows between random host pairs over H hosts (each flow crosses its sender's
   egress and receiver's ingress), heterogeneous NIC rates so that many distinct levels occur
   (the hard case), and a symmetric all-to-all (one level, the easy case). Both solvers and the
   public ``max_min_fair`` ("checked": input validation plus the solver it picks) are timed.
2. Network, all-to-all: every host sends to every other host in turn (all-to-all order), keeping W
   transfers in flight, sizes drawn log-uniformly between 4 KB and 4 MB (a PS job's mix of small
   and sharded arrays). Reports transfers completed per wall-clock second and per re-solve.
3. Network, PS-shaped: push/pull of 160 keys per worker per iteration (see run_ps_iterations).
4. Scenario (only with ``--scenario-hosts 1,8,32``): the whole simulator on scenarios/64gpu.yaml
   with the host count and servers set to each value (8 GPUs a host), reporting CPU seconds
   (time.process_time, what matters on a shared machine) beside wall seconds, SimPy events and
   re-solves.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import simpy

# Runnable from a checkout without installing: the repository root holds the simscale package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simscale.network import FairShareNetwork, Topology, gbit_per_s, make_network
from simscale.network.fairshare import max_min_fair, paths_to_array, solve_heap, solve_rounds
from simscale.spec.sharding import assign_key


def _median_s(repeats: int, fn, *args) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_solver(repeats: int) -> None:
    print("== solver: one re-solve (median of", repeats, "repeats) ==")
    print(
        f"{'flows':>6} {'hosts':>6} {'pattern':>12} {'heap us':>10} {'numpy us':>10} "
        f"{'checked us':>10}"
    )
    rng = np.random.default_rng(0)
    for flows, hosts in ((64, 8), (512, 64), (4096, 128)):
        src = rng.integers(0, hosts, flows)
        dst = (src + rng.integers(1, hosts, flows)) % hosts
        random_paths = [(2 * s, 2 * d + 1) for s, d in zip(src.tolist(), dst.tolist(), strict=True)]
        sym_hosts = max(2, int(np.ceil(np.sqrt(flows))) + 1)
        sym_paths = [
            (2 * s, 2 * d + 1) for s in range(sym_hosts) for d in range(sym_hosts) if s != d
        ][:flows]
        for pattern, paths, n_hosts, caps in (
            ("random-het", random_paths, hosts, rng.uniform(1.0, 2.0, 2 * hosts) * 1e9),
            ("all-to-all", sym_paths, sym_hosts, np.full(2 * sym_hosts, 1e9)),
        ):
            cap_list = caps.tolist()
            cap_ext = np.append(caps, np.inf)
            padded = paths_to_array(paths)
            bound = np.full(len(paths), np.inf)
            t_heap = _median_s(repeats, solve_heap, cap_list, paths, None)
            t_np = _median_s(repeats, solve_rounds, cap_ext, padded, bound)
            t_auto = _median_s(repeats, max_min_fair, cap_list, paths)
            print(
                f"{len(paths):>6} {n_hosts:>6} {pattern:>12} {t_heap * 1e6:>10.0f} "
                f"{t_np * 1e6:>10.0f} {t_auto * 1e6:>10.0f}"
            )


def run_all_to_all(kind: str, hosts: int, window: int, transfers: int, seed: int = 0):
    """Simulate ``transfers`` transfers; return (wall s, simulated s, re-solves)."""
    env = simpy.Environment()
    topo = Topology.uniform(hosts, gbit_per_s(25), 5e-6)
    net = make_network(kind, env, topo)
    rng = np.random.default_rng(seed)
    sizes = np.exp(rng.uniform(np.log(4e3), np.log(4e6), transfers)).tolist()
    per_host = transfers // hosts

    def host(h: int):
        sent = 0
        k = 0
        in_flight: list[simpy.Event] = []
        while sent < per_host:
            while len(in_flight) < window and sent < per_host:
                dst = (h + 1 + k % (hosts - 1)) % hosts
                k += 1
                in_flight.append(net.transfer(h, dst, sizes[h * per_host + sent]))
                sent += 1
            yield env.any_of(in_flight)
            in_flight = [e for e in in_flight if not e.processed]
        yield env.all_of(in_flight)

    for h in range(hosts):
        env.process(host(h))
    solves = _count_solves(net)
    t0 = time.perf_counter()
    env.run()
    return time.perf_counter() - t0, env.now, solves[0], per_host * hosts


def run_ps_iterations(kind: str, hosts: int, iterations: int, seed: int = 0):
    """A PS-shaped load: every host is a worker and a co-located server; each iteration every
    worker pushes 160 keys (last layer first, one every 0.5 ms of backward compute) to their
    servers, MXNet-style (small keys whole to ``key * 9973 % S``, big ones split over all), and
    pulls each back once its push has arrived. Returns (wall s, simulated s, re-solves,
    transfers)."""
    env = simpy.Environment()
    topo = Topology.uniform(hosts, gbit_per_s(25), 5e-6, intra_host_Bps=10e9)
    net = make_network(kind, env, topo)
    rng = np.random.default_rng(seed)
    elements = np.exp(rng.uniform(np.log(256), np.log(4e6), 160)).astype(int).tolist()
    transfers = 0

    def push_pull(worker: int, server: int, nbytes: float):
        yield net.transfer(worker, server, nbytes)
        yield net.transfer(server, worker, nbytes)

    def worker(w: int):
        nonlocal transfers
        for _ in range(iterations):
            pending = []
            for key in reversed(range(len(elements))):
                yield env.timeout(0.5e-3)
                for part in assign_key(key, elements[key], hosts):
                    pending.append(env.process(push_pull(w, part.server, 4.0 * part.elements)))
                    transfers += 2
            yield env.all_of(pending)

    for w in range(hosts):
        env.process(worker(w))
    solves = _count_solves(net)
    t0 = time.perf_counter()
    env.run()
    return time.perf_counter() - t0, env.now, solves[0], transfers


def _count_solves(net) -> list[int]:
    """Wrap the fair-share model's re-solve to count calls; [0] stays 0 for other models."""
    solves = [0]
    if isinstance(net, FairShareNetwork):
        original = net._solve

        def counting() -> None:
            solves[0] += 1
            original()

        net._solve = counting  # type: ignore[method-assign]
    return solves


def bench_ps(repeats: int, iterations: int) -> None:
    print(f"\n== network: PS push/pull, 160 keys, {iterations} iterations, co-located ==")
    print(
        f"{'model':>10} {'hosts':>6} {'transfers':>9} {'wall s':>8} {'transfers/s':>12} "
        f"{'solves':>7} {'us/solve':>9} {'sim s':>8}"
    )
    for kind in ("fairshare", "fifo"):
        # 16 hosts already means ~2 x 10^4 transfers an iteration: big keys split 16 ways.
        for hosts in (8, 16):
            runs = [run_ps_iterations(kind, hosts, iterations, seed) for seed in range(repeats)]
            wall = statistics.median(r[0] for r in runs)
            sim, solves, done = runs[0][1], runs[0][2], runs[0][3]
            per_solve = wall / solves * 1e6 if solves else float("nan")
            print(
                f"{kind:>10} {hosts:>6} {done:>9} {wall:>8.3f} {done / wall:>12.0f} "
                f"{solves:>7} {per_solve:>9.1f} {sim:>8.4f}"
            )


def bench_network(repeats: int, transfers: int) -> None:
    window = 4
    print(f"\n== network: all-to-all, {window} in flight per host, 4 KB-4 MB ==")
    print(
        f"{'model':>10} {'hosts':>6} {'transfers':>9} {'wall s':>8} {'transfers/s':>12} "
        f"{'solves':>7} {'us/solve':>9} {'sim s':>8}"
    )
    for kind in ("fairshare", "fifo"):
        for hosts in (8, 64, 128):
            runs = [run_all_to_all(kind, hosts, window, transfers, seed) for seed in range(repeats)]
            wall = statistics.median(r[0] for r in runs)
            sim, solves, done = runs[0][1], runs[0][2], runs[0][3]
            per_solve = wall / solves * 1e6 if solves else float("nan")
            print(
                f"{kind:>10} {hosts:>6} {done:>9} {wall:>8.3f} {done / wall:>12.0f} "
                f"{solves:>7} {per_solve:>9.1f} {sim:>8.4f}"
            )


def bench_scenario(host_counts: list[int]) -> None:
    from simscale.simulator import simulate
    from simscale.spec.scenario import load_scenario

    print("\n== simulator: scenarios/64gpu.yaml, hosts = servers = N, one run each ==")
    print(f"{'hosts':>6} {'GPUs':>6} {'CPU s':>8} {'wall s':>8} {'events':>10} {'solves':>8}")
    path = Path(__file__).resolve().parent.parent / "scenarios" / "64gpu.yaml"
    solves = [0]
    original = FairShareNetwork._solve

    def counting(self: FairShareNetwork) -> None:
        solves[0] += 1
        original(self)

    FairShareNetwork._solve = counting  # type: ignore[method-assign]
    try:
        for hosts in host_counts:
            scenario = load_scenario(
                str(path), [f"cluster.hosts[0].count={hosts}", f"kvstore.servers={hosts}"]
            )
            solves[0] = 0
            cpu0, wall0 = time.process_time(), time.perf_counter()
            result = simulate(scenario)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            print(
                f"{hosts:>6} {8 * hosts:>6} {cpu:>8.2f} {wall:>8.2f} {result.events:>10} "
                f"{solves[0]:>8}"
            )
    finally:
        FairShareNetwork._solve = original  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and transfers")
    parser.add_argument(
        "--scenario-hosts",
        help="comma-separated host counts: run only the scenario section (e.g. 1,8,32)",
    )
    args = parser.parse_args()
    if args.scenario_hosts:
        bench_scenario([int(h) for h in args.scenario_hosts.split(",")])
        return
    repeats = 3 if args.quick else 7
    transfers = 5_000 if args.quick else 20_000
    bench_solver(repeats)
    bench_network(max(1, repeats // 2), transfers)
    bench_ps(max(1, repeats // 2), 2 if args.quick else 5)


if __name__ == "__main__":
    main()
