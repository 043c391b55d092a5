"""PS push+pull goodput: realrun (authenticated and not), raw pyzmq, and MXNet ps-lite, side
by side on loopback in one run.

One server process and one worker: each operation pushes an array of N bytes and pulls N bytes
back (a pushpull of one key), so goodput is 2N / time. The peers, measured in alternating
rounds so that machine load hits them alike:

- raw: a pyzmq echo process (ROUTER that sends each message straight back, zero-copy) moving
  the same 2N bytes over the same kind of DEALER/ROUTER TCP connection: the floor under any PS;
- realrun: a real scheduler and server process (realrun.node), this process the worker, with
  authentication as every job runs it (realrun/auth.py: handshake, tag over the meta data),
  with ``REALRUN_MESSAGE_MAC=full`` (every byte tagged), and with authentication off (possible
  only for nodes built in code, as here);
- MXNet (with ``--mxnet-python PATH``, an interpreter that has mxnet 1.9.1, e.g. its own venv
  with numpy<1.24): KVStore ``dist_sync`` through ps-lite, a scheduler, 1 server and 1 worker
  started with the ``DMLC_*`` variables on 127.0.0.1; the worker times ``push`` then ``pull``
  of one key, waiting for the pulled value each operation.

Worker CPU per operation is the worker process's (for MXNet, its process with its engine
threads). ``--json`` writes every run's figures.

    python benchmarks/bench_pushpull.py [--sizes-mb 4 64] [--runs 7] [--ops-mb 512]
        [--mxnet-python /work/mxnet-venv/bin/python] [--json PATH] [--csv PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

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

    def seconds(self, ops: int) -> tuple[float, float]:
        """Wall and worker CPU seconds of ``ops`` round trips."""
        c0, start = time.process_time(), time.perf_counter()
        for _ in range(ops):
            self.sock.send(self.payload, copy=False)
            self.sock.recv(copy=False)
        return time.perf_counter() - start, time.process_time() - c0

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
    """A real scheduler and server process, with this process as the one worker.

    ``mode``: "header" (as every job runs), "full" (REALRUN_MESSAGE_MAC=full) or "off"."""

    def __init__(self, nbytes: int, mode: str = "header") -> None:
        launcher = LocalLauncher()
        secret = secrets.token_hex(32)
        flag = {"BENCH_AUTH": "0" if mode == "off" else "1"}
        mac = "full" if mode == "full" else "header"
        sched = NodeEnv("scheduler", HOST, 0, 1, 1, HOST, secret=secret, message_mac=mac)
        argv = [sys.executable, "-c", NODE]
        self.procs = [launcher.start("scheduler", 0, argv, {**sched.to_env(), **flag})]
        self.po = None
        try:
            port = json.loads(self.procs[0].stdout.readline())["port"]
            server = dataclasses.replace(sched, role="server", root_port=port, slot=0)
            self.procs.append(launcher.start("server", 0, argv, {**server.to_env(), **flag}))
            worker = dataclasses.replace(server, role="worker")
            self.po = Postoffice(
                dataclasses.replace(worker, secret="") if mode == "off" else worker
            )
            self.po.start()
            # Pipelined, as benchmarks/results/pushpull.* were measured (one key in flight:
            # after_ack adds one loopback round trip per operation).
            self.kv = KVWorker(self.po, bigarray_bound=1 << 62, pull_request="with_push")
            self.kv.configure(True, None).wait(30)  # no optimizer: the server keeps the sum
            self.grad = np.ones(nbytes // 4, dtype=np.float32)
            self.kv.init(0, self.grad).wait(30)
            self.out = np.empty_like(self.grad)
        except BaseException:
            self.close()
            raise

    def seconds(self, ops: int) -> tuple[float, float]:
        """Wall and worker CPU seconds of ``ops`` pushpulls."""
        c0, start = time.process_time(), time.perf_counter()
        for _ in range(ops):
            self.kv.pushpull(0, self.grad, self.out).wait(60)
        elapsed = time.perf_counter() - start, time.process_time() - c0
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


# The MXNet worker: reads "OPS" lines on stdin, answers "wall_s cpu_s" after OPS push+pull
# rounds of one key. ``import mxnet`` with DMLC_ROLE=scheduler|server runs that role and exits.
MXNET_WORKER = """
import sys, time
import mxnet as mx
kv = mx.kv.create("dist_sync")
n = int(sys.argv[1])
grad = mx.nd.ones(n)
out = mx.nd.zeros(n)
kv.init(0, grad)
print("ready", mx.__version__, flush=True)
for line in sys.stdin:
    ops = int(line)
    if ops == 0:
        break
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(ops):
        kv.push(0, grad)
        kv.pull(0, out=out)
        out.wait_to_read()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert (out.asnumpy() == 1).all()
    print(wall, cpu, flush=True)
"""
MXNET_SERVER = "import mxnet"


class MXNetPS:
    """MXNet 1.9.1 KVStore dist_sync over ps-lite: scheduler, 1 server, 1 worker on loopback."""

    def __init__(self, python: str, nbytes: int) -> None:
        port = _free_port()
        base = {
            **os.environ,
            "DMLC_PS_ROOT_URI": HOST,
            "DMLC_PS_ROOT_PORT": str(port),
            "DMLC_NUM_SERVER": "1",
            "DMLC_NUM_WORKER": "1",
            "DMLC_NODE_HOST": HOST,
            "DMLC_INTERFACE": "lo",
            "PYTHONPATH": "",  # the MXNet venv's own numpy, not this project's
        }
        self.procs = [
            subprocess.Popen(
                [python, "-c", MXNET_SERVER],
                env={**base, "DMLC_ROLE": role},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            for role in ("scheduler", "server")
        ]
        self.worker = subprocess.Popen(
            [python, "-c", MXNET_WORKER, str(nbytes // 4)],
            env={**base, "DMLC_ROLE": "worker"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.procs.append(self.worker)
        line = self.worker.stdout.readline()
        if not line.startswith("ready"):
            self.close()
            raise RuntimeError(f"the MXNet worker did not start ({python}): {line!r}")
        self.version = line.split()[1]

    def seconds(self, ops: int) -> tuple[float, float]:
        self.worker.stdin.write(f"{ops}\n")
        self.worker.stdin.flush()
        wall, cpu = self.worker.stdout.readline().split()
        return float(wall), float(cpu)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.worker.stdin.write("0\n")
            self.worker.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.worker.wait(20)
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)
        if self.worker.stdout is not None:
            self.worker.stdout.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Row:
    """One peer at one size: medians of the runs, and every run."""

    peer: str
    size_mb: float
    gbps: float
    cpu_ms_per_op: float
    min_gbps: float
    max_gbps: float
    runs_gbps: tuple[float, ...]


def measure(nbytes: int, ops: int, runs: int, mxnet_python: str | None) -> list[Row]:
    """Every peer's goodput over ``runs`` alternating rounds of ``ops`` operations."""
    makers = {
        "raw pyzmq": lambda: RawEcho(nbytes),
        "realrun auth": lambda: PSPair(nbytes, "header"),
        "realrun auth full-MAC": lambda: PSPair(nbytes, "full"),
        "realrun no-auth": lambda: PSPair(nbytes, "off"),
    }
    if mxnet_python:
        makers["MXNet ps-lite"] = lambda: MXNetPS(mxnet_python, nbytes)
    peers: dict[str, Any] = {}
    gbps: dict[str, list[float]] = {name: [] for name in makers}
    cpu: dict[str, list[float]] = {name: [] for name in makers}
    try:
        for name, make in makers.items():
            peers[name] = make()
            peers[name].seconds(ops)  # warm the connection up
        for i in range(runs):
            order = list(peers.items())
            order = order[i % len(order) :] + order[: i % len(order)]  # rotate who goes first
            for name, peer in order:
                wall, cpu_s = peer.seconds(ops)
                gbps[name].append(2 * nbytes * ops / wall / 1e9)
                cpu[name].append(cpu_s / ops * 1e3)
            print(f"  {nbytes / 1e6:g} MB: round {i + 1}/{runs} done", file=sys.stderr)
    finally:
        for peer in peers.values():
            peer.close()
    return [
        Row(
            name,
            nbytes / 1e6,
            statistics.median(gbps[name]),
            statistics.median(cpu[name]),
            min(gbps[name]),
            max(gbps[name]),
            tuple(round(g, 4) for g in gbps[name]),
        )
        for name in makers
    ]


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
    parser.add_argument("--mxnet-python", help="a Python interpreter that can import mxnet")
    parser.add_argument("--json", help="write the rows to this JSON file")
    parser.add_argument("--csv", help="write the rows to this CSV file")
    args = parser.parse_args()
    if args.mxnet_python and not Path(args.mxnet_python).exists():
        print(f"--mxnet-python {args.mxnet_python}: no such file", file=sys.stderr)
        return 2
    child_environ({})  # fail early if the project is not importable for the server
    rows: list[Row] = []
    load_before = os.getloadavg()[0]
    for mb in args.sizes_mb:
        nbytes = int(mb * 1e6) // 4 * 4
        ops = max(2, int(args.ops_mb / mb))
        rows += measure(nbytes, ops, args.runs, args.mxnet_python)
    mxnet = {r.size_mb: r.gbps for r in rows if r.peer == "MXNet ps-lite"}
    print(
        f"{'peer':<24} {'size':>6} {'GB/s':>6} {'x MXNet':>8} {'worker CPU ms/op':>17} "
        f"{'min-max GB/s':>13}   (medians of {args.runs} alternating runs; "
        "goodput = (push + pull bytes) / time)"
    )
    for r in rows:
        ratio = f"{r.gbps / mxnet[r.size_mb]:.2f}" if r.size_mb in mxnet else "-"
        print(
            f"{r.peer:<24} {r.size_mb:>4g}MB {r.gbps:>6.2f} {ratio:>8} "
            f"{r.cpu_ms_per_op:>17.2f} {r.min_gbps:>6.2f}-{r.max_gbps:<6.2f}"
        )
    if args.json:
        meta = {
            "runs": args.runs,
            "ops_mb": args.ops_mb,
            "mxnet_python": args.mxnet_python,
            "cpus": os.cpu_count(),
            "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        }
        Path(args.json).write_text(
            json.dumps({**meta, "rows": [asdict(r) for r in rows]}, indent=1) + "\n"
        )
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(
                [
                    "peer",
                    "size_mb",
                    "gbps_median",
                    "cpu_ms_per_op",
                    "min_gbps",
                    "max_gbps",
                    "x_mxnet",
                ]
            )
            for r in rows:
                x = round(r.gbps / mxnet[r.size_mb], 3) if r.size_mb in mxnet else ""
                w.writerow(
                    [
                        r.peer,
                        r.size_mb,
                        round(r.gbps, 4),
                        round(r.cpu_ms_per_op, 3),
                        round(r.min_gbps, 4),
                        round(r.max_gbps, 4),
                        x,
                    ]
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
