"""PS push+pull goodput against raw pyzmq on loopback, measured in the same run.

One server process (realrun.node, DMLC_ROLE=server) and this process as the one worker: each
operation pushes an array of N bytes and pulls N bytes back (pushpull of one key), so the
goodput is 2N / time. The baseline is a raw pyzmq echo process (ROUTER that sends each
message straight back, zero-copy) moving the same 2N bytes per operation over the same kind
of DEALER/ROUTER TCP connection; raw and PS runs alternate, so machine load hits both alike.
The ratio says what the PS layer (header, request tracking, server aggregation, the copy of
pulled values into the worker's array) costs.

    python benchmarks/bench_pushpull.py [--sizes-mb 4 64] [--runs 7] [--ops-mb 512]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import zmq

from realrun.kv_worker import KVWorker
from realrun.launch import child_environ, node_command
from realrun.local_launcher import LocalLauncher
from realrun.postoffice import Postoffice
from realrun.roles import NodeEnv

HOST = "127.0.0.1"

ECHO = """
import sys, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.ROUTER)
port = s.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
while True:
    frames = s.recv_multipart(copy=False)
    if len(frames) == 2 and frames[1].bytes == b"stop":
        break
    s.send_multipart(frames, copy=False)
s.close(linger=0)
ctx.term()
"""


class RawEcho:
    """The baseline: a pyzmq ROUTER process that sends every message straight back."""

    def __init__(self, nbytes: int) -> None:
        self.echo = subprocess.Popen(
            [sys.executable, "-c", ECHO], stdout=subprocess.PIPE, text=True
        )
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.connect(f"tcp://{HOST}:{int(self.echo.stdout.readline())}")
        self.payload = np.ones(nbytes // 4, dtype=np.float32)

    def seconds(self, ops: int) -> float:
        start = time.perf_counter()
        for _ in range(ops):
            self.sock.send(self.payload, copy=False)
            self.sock.recv(copy=False)
        return time.perf_counter() - start

    def close(self) -> None:
        self.sock.send(b"stop")
        self.sock.close(linger=1000)
        self.ctx.term()
        self.echo.wait(10)
        self.echo.stdout.close()


class PSPair:
    """A real scheduler and server process, with this process as the one worker."""

    def __init__(self, nbytes: int) -> None:
        launcher = LocalLauncher()
        sched = NodeEnv("scheduler", HOST, 0, 1, 1, HOST)
        self.procs = [launcher.start("scheduler", 0, node_command(sched, 0).argv, sched.to_env())]
        self.po = None
        try:
            port = json.loads(self.procs[0].stdout.readline())["port"]
            server = NodeEnv("server", HOST, port, 1, 1, HOST)
            self.procs.append(
                launcher.start("server", 0, node_command(server, 0).argv, server.to_env())
            )
            self.po = Postoffice(NodeEnv("worker", HOST, port, 1, 1, HOST))
            self.po.start()
            self.kv = KVWorker(self.po, bigarray_bound=1 << 62)
            self.kv.configure(True, None).wait(30)  # no optimizer: the server keeps the sum
            self.grad = np.ones(nbytes // 4, dtype=np.float32)
            self.kv.init(0, self.grad).wait(30)
            self.out = np.empty_like(self.grad)
        except BaseException:
            self.close()
            raise

    def seconds(self, ops: int) -> float:
        start = time.perf_counter()
        for _ in range(ops):
            self.kv.pushpull(0, self.grad, self.out).wait(60)
        elapsed = time.perf_counter() - start
        assert np.array_equal(self.out, self.grad)
        return elapsed

    def close(self) -> None:
        if self.po is not None:
            with contextlib.suppress(Exception):
                self.po.finish(30)
            self.po.close()
        for p in self.procs:
            p.signal_group(signal.SIGTERM)
            p.wait(5)
            if p.stdout is not None:
                p.stdout.close()


def measure(nbytes: int, ops: int, runs: int) -> tuple[list[float], list[float]]:
    """GB/s of raw and PS per run; the two alternate so that machine load hits both alike."""
    raw_peer, ps_peer = RawEcho(nbytes), PSPair(nbytes)
    raw, ps = [], []
    try:
        raw_peer.seconds(ops)  # warm both connections up
        ps_peer.seconds(ops)
        for _ in range(runs):
            raw.append(2 * nbytes * ops / raw_peer.seconds(ops) / 1e9)
            ps.append(2 * nbytes * ops / ps_peer.seconds(ops) / 1e9)
    finally:
        raw_peer.close()
        ps_peer.close()
    return raw, ps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[4, 64])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per size (median kept)")
    parser.add_argument(
        "--ops-mb",
        type=float,
        default=512,
        help="bytes pushed per run, in MB (sets operations per run)",
    )
    args = parser.parse_args()
    child_environ({})  # fail early if the project is not importable for the server
    print(
        f"{'size':>8} {'raw GB/s':>9} {'PS GB/s':>8} {'PS/raw':>7}   {'raw min-max':>12} "
        f"{'PS min-max':>12}   (medians of {args.runs} alternating runs; goodput = "
        "(push + pull bytes) / time)"
    )
    for mb in args.sizes_mb:
        nbytes = int(mb * 1e6) // 4 * 4
        ops = max(2, int(args.ops_mb / mb))
        raw_runs, ps_runs = measure(nbytes, ops, args.runs)
        raw, ps = statistics.median(raw_runs), statistics.median(ps_runs)
        spread = (
            f"{min(raw_runs):>5.2f}-{max(raw_runs):<6.2f} {min(ps_runs):>5.2f}-{max(ps_runs):<6.2f}"
        )
        print(f"{mb:>6g}MB {raw:>9.2f} {ps:>8.2f} {ps / raw:>6.0%}   {spread}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
