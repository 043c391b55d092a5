"""PS push+pull goodput against raw pyzmq on loopback, measured in the same run.

One server process (realrun.node, DMLC_ROLE=server) and this process as the one worker: each
operation pushes an array of N bytes and pulls N bytes back (pushpull of one key), so the
goodput is 2N / time. The baseline is a raw pyzmq echo process (ROUTER that sends each
message straight back, zero-copy) moving the same 2N bytes per operation over the same kind
of DEALER/ROUTER TCP connection; raw and PS runs alternate, so machine load hits both alike.
The ratio says what the PS layer (header, request tracking, server aggregation, the copy of
pulled values into the worker's array) costs. The PS runs twice, with every message signed
and verified with the job's secret (realrun/auth.py, as every real job runs) and with
authentication off (possible only for nodes built in code, as here), so the difference is what
authentication costs.

    python benchmarks/bench_pushpull.py [--sizes-mb 4 64] [--runs 7] [--ops-mb 512]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import secrets
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import zmq

from realrun.launching.launch import child_environ
from realrun.launching.local_launcher import LocalLauncher
from realrun.ps.kv_worker import KVWorker
from realrun.ps.postoffice import Postoffice
from realrun.ps.roles import NodeEnv

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


# realrun.node's scheduler and server, except that BENCH_AUTH=0 turns authentication off
# (node processes otherwise refuse to run without the job's secret).
NODE = """
import dataclasses, os, sys
from realrun import node
from realrun.ps.roles import node_env
env = node_env()
if os.environ["BENCH_AUTH"] == "0":
    env = dataclasses.replace(env, secret="")
sys.exit(node.run_scheduler(env) if env.role == "scheduler" else node.run_server(env))
"""


class PSPair:
    """A real scheduler and server process, with this process as the one worker."""

    def __init__(self, nbytes: int, authenticated: bool = True) -> None:
        launcher = LocalLauncher()
        secret = secrets.token_hex(32)
        flag = {"BENCH_AUTH": "1" if authenticated else "0"}
        sched = NodeEnv("scheduler", HOST, 0, 1, 1, HOST, secret=secret)
        argv = [sys.executable, "-c", NODE]
        self.procs = [launcher.start("scheduler", 0, argv, {**sched.to_env(), **flag})]
        self.po = None
        try:
            port = json.loads(self.procs[0].stdout.readline())["port"]
            server = dataclasses.replace(sched, role="server", root_port=port, slot=0)
            self.procs.append(launcher.start("server", 0, argv, {**server.to_env(), **flag}))
            worker = dataclasses.replace(server, role="worker")
            self.po = Postoffice(
                worker if authenticated else dataclasses.replace(worker, secret="")
            )
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


def measure(nbytes: int, ops: int, runs: int) -> tuple[list[list[float]], list[list[float]]]:
    """GB/s of raw, PS and PS without authentication per run, and this process's (the
    worker's) CPU milliseconds per operation; the three alternate so that machine load hits
    them alike."""
    peers = [RawEcho(nbytes)]
    results: list[list[float]] = [[], [], []]
    cpu_ms: list[list[float]] = [[], [], []]
    try:
        peers.append(PSPair(nbytes, authenticated=True))
        peers.append(PSPair(nbytes, authenticated=False))
        for peer in peers:
            peer.seconds(ops)  # warm every connection up
        for _ in range(runs):
            for peer, out, cpu in zip(peers, results, cpu_ms, strict=True):
                c0 = time.process_time()
                out.append(2 * nbytes * ops / peer.seconds(ops) / 1e9)
                cpu.append((time.process_time() - c0) / ops * 1e3)
    finally:
        for peer in peers:
            peer.close()
    return results, cpu_ms


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
        f"{'size':>8} {'raw GB/s':>9} {'PS GB/s':>8} {'PS/raw':>7} {'no-auth':>8} "
        f"{'auth cost':>9} {'worker CPU ms/op auth / no-auth':>32}   {'raw min-max':>12} "
        f"{'PS min-max':>12} {'no-auth min-max':>15}"
        f"   (medians of {args.runs} alternating runs; goodput = (push + pull bytes) / time)"
    )
    for mb in args.sizes_mb:
        nbytes = int(mb * 1e6) // 4 * 4
        ops = max(2, int(args.ops_mb / mb))
        runs, cpu_ms = measure(nbytes, ops, args.runs)
        raw, ps, plain = (statistics.median(r) for r in runs)
        _, cpu_auth, cpu_plain = (statistics.median(c) for c in cpu_ms)
        spread = " ".join(f"{min(r):>5.2f}-{max(r):<6.2f}" for r in runs)
        print(
            f"{mb:>6g}MB {raw:>9.2f} {ps:>8.2f} {ps / raw:>6.0%} {plain:>8.2f} "
            f"{1 - ps / plain:>8.0%} {cpu_auth:>15.2f} / {cpu_plain:<14.2f}   {spread}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
