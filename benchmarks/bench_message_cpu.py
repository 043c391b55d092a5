"""realrun's CPU per small message: one worker (this process) and one server process on
loopback, authenticated as every job runs, pushpulls of a small array (issue 36).

Small arrays make the per-message costs (poll rounds, zmq calls, framing, tags, decoding) the
whole cost. Reported per pushpull (a push and a pull: 2 messages each way), medians of
``--rounds``: wall time, this worker process's CPU, the server process's CPU, and the worker's
poll rounds; then the worker's CPU per thread (its I/O thread, the caller, zmq's I/O thread).

``--root DIR`` measures another checkout's realrun (its ``realrun`` package and its
``benchmarks/bench_pushpull.py``), so a change's before and after can alternate:

    python benchmarks/bench_message_cpu.py [--nbytes 4096] [--ops 3000] [--rounds 5] [--root DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path


def process_cpu_s(pid: int | str, task: str | None = None) -> float:
    path = f"/proc/{pid}/task/{task}/stat" if task else f"/proc/{pid}/stat"
    with open(path) as f:
        raw = f.read()
    fields = raw.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def threads_cpu_s() -> dict[str, float]:
    out = {}
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/comm") as f:
            out[f"{task} {f.read().strip()}"] = process_cpu_s("self", task)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nbytes", type=int, default=4096, help="array bytes per push and pull")
    parser.add_argument("--ops", type=int, default=3000, help="pushpulls per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    root = args.root.resolve()
    sys.path[:0] = [str(root), str(root / "benchmarks")]
    os.chdir(root)  # the scheduler and server (``python -c``) import realrun from here
    import bench_pushpull

    from realrun.ps import van

    polls = [0]
    poll = van.Van.poll

    def counted(self, timeout_s):
        polls[0] += 1
        return poll(self, timeout_s)

    van.Van.poll = counted
    pair = bench_pushpull.PSPair(args.nbytes, "header")
    try:
        pair.seconds(300)  # warm up: handshakes, first allocations
        server = pair.procs[1].pid
        rows = []
        for _ in range(args.rounds):
            s0, p0 = process_cpu_s(server), polls[0]
            wall, cpu = pair.seconds(args.ops)
            rows.append(
                (
                    wall / args.ops * 1e6,
                    cpu / args.ops * 1e6,
                    (process_cpu_s(server) - s0) / args.ops * 1e6,
                    (polls[0] - p0) / args.ops,
                )
            )
        t0 = threads_cpu_s()
        pair.seconds(args.ops)
        t1 = threads_cpu_s()
    finally:
        pair.close()
    med = [statistics.median(r[i] for r in rows) for i in range(4)]
    print(f"realrun from {root}, {args.nbytes} B pushpulls, authenticated (header tags)")
    print(
        f"per pushpull, medians of {args.rounds} x {args.ops}: wall {med[0]:.1f} us, worker CPU "
        f"{med[1]:.1f} us, server CPU {med[2]:.1f} us, worker poll rounds {med[3]:.2f}"
    )
    for name, end in t1.items():
        used = (end - t0.get(name, 0.0)) / args.ops * 1e6
        if used:
            print(f"  worker thread {name:<24} {used:7.1f} us CPU per pushpull")
    return 0


if __name__ == "__main__":
    sys.exit(main())
