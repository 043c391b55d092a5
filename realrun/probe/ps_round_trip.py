"""A small push's round trip through realrun's own parameter-server stack, and how late its
worker hands a key on, between two hosts: what the raw ping-pong (realrun.probe.round_trip)
does not see.

A training run's small push does not travel as the probe's 32-byte ping does. The worker's
copy engine posts it to the Postoffice's queue, the worker's I/O thread hands it to zmq, whose
own I/O thread writes the socket; on the server zmq's I/O thread reads it, the server's I/O
thread polls it, checks its tag, merges and updates (one worker: the push completes the round)
and answers with the ack, which comes back the same way to the worker's I/O thread, where it
credits the byte window. Each hand-off wakes a thread. On ResNet-18 1w/1s at 200 Mbit/s a
traced run took 1.7-3.2 ms for the fc bias's push and ack where the configured round trip is
0.4 ms (docs/probe.md), and which of the two modes an iteration runs depends on whether that
ack is back before the next layer's keys are posted (1.5-2.9 ms after the bias).

So this step runs the real thing: on host 0 a scheduler and a server (``python -m
realrun.node``, as every job starts them: own processes, the job's secret, priority scheduling
and realrun's window), on host 1 a worker (Postoffice and KVWorker, ``pull_request: with_push``
as the trainer uses). Each sample replays the trainer's hand-off (realrun/training/
emulated_compute.py): a "compute" thread sleeps until a deadline and queues the key; a copy
engine thread takes it and posts the push. Recorded per sample: the post's lateness after the
deadline, and the push's round trip from the post until its ack is back (the handle done, on
the worker's I/O thread), both wall seconds. Samples are spaced so that none queues behind
another.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import secrets
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np

from realrun.probe.hosts import READY_LINE, HostSet
from realrun.probe.round_trip import between
from realrun.records.probe_record import Measurement

KEY_BYTES = 4000  # ResNet-18's fc bias, the key whose ack decides the race
HANDOFF_GAP_S = 0.002  # the compute thread's sleep before it queues the key
# Between samples, idle: a training run's fc bias is pushed after a forward pass and the
# fc's backward with nothing on its connection (ResNet-18 on a V100 at batch 32: about 40 ms),
# and a connection, a delay wire or a core that has idled may answer slower than a busy one.
SPACING_S = 0.040
SLACK_S = 60.0  # the nodes' start (registration, handshake) on a loaded machine
NODE_MODULE = "realrun.node"


def _node_env(role: str, address: str, port: int, secret: str) -> Any:
    from realrun.ps.roles import NodeEnv

    return NodeEnv(role, address, port, 1, 1, address, secret=secret)


def serve(address: str, port: int, secret: str, timeout_s: float) -> dict:
    """Agent end on host 0: a scheduler and a server as a job's, in their own processes; ends
    when the worker has finished the job (or at ``timeout_s``)."""
    from realrun.emulated.emulated_cluster import python_env
    from realrun.ps.roles import PARENT_PID_VARIABLE

    procs = []
    try:
        for role in ("scheduler", "server"):
            env = python_env({**os.environ, **_node_env(role, address, port, secret).to_env()})
            env[PARENT_PID_VARIABLE] = str(os.getpid())
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", NODE_MODULE],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        print(READY_LINE, flush=True)
        deadline = time.monotonic() + timeout_s
        codes = []
        for p in procs:
            codes.append(p.wait(max(0.1, deadline - time.monotonic())))
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(5)
    if any(codes):
        raise RuntimeError(f"scheduler/server exited {codes}")
    return {"exit": codes}


def push_acks(
    address: str, port: int, secret: str, count: int, spacing_s: float = SPACING_S
) -> dict:
    """Agent end on host 1: the worker. ``count`` samples of (lateness of the post after the
    hand-off deadline, the push's round trip from post to ack), wall seconds."""
    from realrun.ps.kv_worker import KVWorker
    from realrun.ps.optimizer import SGD
    from realrun.ps.postoffice import Postoffice

    env = dataclasses.replace(_node_env("worker", address, port, secret), node_host="")
    po = Postoffice(env)
    late: list[float] = []
    trip: list[float] = []
    try:
        po.start()
        kv = KVWorker(po, pull_request="with_push")
        kv.configure(True, SGD(0.1, 0.9, 1e-4, 1.0)).wait(SLACK_S)
        grad = np.full(KEY_BYTES // 4, 0.01, np.float32)
        kv.init(0, np.zeros_like(grad)).wait(SLACK_S)
        kv.push(0, grad).wait(SLACK_S)  # the first push warms the connection up
        handed: queue.SimpleQueue[float | None] = queue.SimpleQueue()
        results: queue.SimpleQueue[tuple[float, float]] = queue.SimpleQueue()

        def copy_engine() -> None:
            while (deadline := handed.get()) is not None:
                posted = time.perf_counter()
                kv.push(0, grad, priority=-61).wait(SLACK_S)
                results.put((posted - deadline, time.perf_counter() - posted))

        engine = threading.Thread(target=copy_engine, name="copy-engine", daemon=True)
        engine.start()
        for _ in range(count):
            deadline = time.perf_counter() + HANDOFF_GAP_S
            while (left := deadline - time.perf_counter()) > 0:
                time.sleep(left)
            handed.put(deadline)
            lateness, round_trip = results.get(timeout=SLACK_S)
            late.append(lateness)
            trip.append(round_trip)
            time.sleep(spacing_s)
        handed.put(None)
        engine.join(SLACK_S)
        po.finish(SLACK_S)
    finally:
        po.close()
    return {"push_ack_s": trip, "handoff_late_s": late}


def run(hosts: HostSet, server: int, worker: int, count: int, port: int) -> Measurement:
    """``count`` small pushes from host ``worker`` to a server on host ``server``."""
    # This probe job's own secret, as every job has one. It is on the ends' command lines for
    # the seconds they run; it guards nothing but this throwaway job.
    secret = secrets.token_hex(32)
    timeout_s = count * (SPACING_S + 0.05) + SLACK_S
    address = hosts.hosts[server].address
    job = ("--address", address, "--port", port, "--secret", secret)
    served = hosts.start_listener(server, "ps-serve", *job, "--timeout", timeout_s)
    pusher = hosts.start(worker, "ps-push", *job, "--count", count)
    try:
        pushed = hosts.result(worker, pusher, timeout_s, "the parameter-server round trip")
        hosts.result(server, served, SLACK_S, "the probe's scheduler and server")
    finally:
        hosts.stop_all()
    return Measurement(
        unit="s",
        samples=tuple(pushed["push_ack_s"]),
        context={
            **between(hosts, worker, server),
            "key_bytes": KEY_BYTES,
            "handoff_gap_s": HANDOFF_GAP_S,
            "idle_between_s": SPACING_S,
            # Per sample, in order: how late the copy engine posted the push after the
            # compute thread's deadline (wall seconds).
            "handoff_late_s": pushed["handoff_late_s"],
        },
    )
