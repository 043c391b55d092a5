"""PS push+pull goodput against raw pyzmq on loopback, measured in the same run.

One server process (realrun.node, DMLC_ROLE=server) and this process as the one worker: each
operation pushes an array of N bytes and pulls N bytes back (pushpull of one key), so the
goodput is 2N / time. The baseline is a raw pyzmq echo process (ROUTER that sends each
message straight back, zero-copy) moving the same 2N bytes per operation over the same kind
of DEALER/ROUTER TCP connection. The ratio says what the PS layer (header, request tracking,
server aggregation, the copy of pulled values into the worker's array) costs.

    python benchmarks/bench_pushpull.py [--sizes-mb 4 64] [--runs 5] [--ops-mb 256]
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


def raw_goodput(nbytes: int, ops: int, runs: int) -> list[float]:
    """GB/s of send-N-bytes-and-get-them-back over raw pyzmq, one value per run."""
    echo = subprocess.Popen([sys.executable, "-c", ECHO], stdout=subprocess.PIPE, text=True)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    try:
        sock.connect(f"tcp://{HOST}:{int(echo.stdout.readline())}")
        payload = np.ones(nbytes // 4, dtype=np.float32)
        out = []
        for run in range(runs + 1):  # run 0 warms the connection up
            start = time.perf_counter()
            for _ in range(ops):
                sock.send(payload, copy=False)
                sock.recv(copy=False)
            if run:
                out.append(2 * nbytes * ops / (time.perf_counter() - start) / 1e9)
        sock.send(b"stop")
        return out
    finally:
        sock.close(linger=1000)
        ctx.term()
        echo.wait(10)
        echo.stdout.close()


def ps_goodput(nbytes: int, ops: int, runs: int) -> list[float]:
    """GB/s of pushpull of one N-byte key through a real server process, one value per run."""
    launcher = LocalLauncher()
    sched_env = NodeEnv("scheduler", HOST, 0, 1, 1, HOST)
    procs = [launcher.start("scheduler", 0, node_command(sched_env, 0).argv, sched_env.to_env())]
    po = None
    try:
        port = json.loads(procs[0].stdout.readline())["port"]
        server_env = NodeEnv("server", HOST, port, 1, 1, HOST)
        procs.append(
            launcher.start("server", 0, node_command(server_env, 0).argv, server_env.to_env())
        )
        po = Postoffice(NodeEnv("worker", HOST, port, 1, 1, HOST))
        po.start()
        kv = KVWorker(po, bigarray_bound=1 << 62)
        kv.configure(True, None).wait(30)  # no optimizer: the server keeps the aggregate
        grad = np.ones(nbytes // 4, dtype=np.float32)
        kv.init(0, grad).wait(30)
        out = np.empty_like(grad)
        result = []
        for run in range(runs + 1):
            start = time.perf_counter()
            for _ in range(ops):
                kv.pushpull(0, grad, out).wait(60)
            if run:
                result.append(2 * nbytes * ops / (time.perf_counter() - start) / 1e9)
        assert np.array_equal(out, grad)
        po.finish(30)
        return result
    finally:
        if po is not None:
            po.close()
        for p in procs:
            with contextlib.suppress(Exception):
                p.signal_group(signal.SIGTERM)
            p.wait(5)
            if p.stdout is not None:
                p.stdout.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[4, 64])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per size (median kept)")
    parser.add_argument(
        "--ops-mb",
        type=float,
        default=512,
        help="bytes pushed per run, in MB (sets operations per run)",
    )
    args = parser.parse_args()
    child_environ({})  # fail early if the project is not importable for the server
    print(
        f"{'size':>8} {'raw GB/s':>9} {'PS GB/s':>8} {'PS/raw':>7}   (medians of "
        f"{args.runs} runs; goodput = push + pull bytes / time)"
    )
    for mb in args.sizes_mb:
        nbytes = int(mb * 1e6) // 4 * 4
        ops = max(2, int(args.ops_mb / mb))
        raw = statistics.median(raw_goodput(nbytes, ops, args.runs))
        ps = statistics.median(ps_goodput(nbytes, ops, args.runs))
        print(f"{mb:>6g}MB {raw:>9.2f} {ps:>8.2f} {ps / raw:>6.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
