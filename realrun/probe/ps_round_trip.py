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
realrun.node``, as every job starts them: own processes, the job's secret), on host 1 a worker
(Postoffice and KVWorker) sending as the workers that recorded runs/emulated-v2 did and as the
simulator models them (realrun.records.record: priority scheduling, realrun's 256 KiB window,
the pull request behind the push). Each sample replays, key for key, the part of a ResNet-18
iteration whose race the ack decides (realrun/training/emulated_compute.py, ``EmulatedTrainer``;
``REPLAY`` below, which the tests check against ``emulated_device``): the "compute" thread
sleeps to the end of the fc layer's backward and hands its keys to the copy engine last one
first (the 4 KB bias, then the 2 MB weight), sleeps the next layer's backward (1.57 ms) and
hands that layer's keys on (two 2 KiB batch-norm arrays, then a 9.4 MB convolution); the copy
engine thread waits each key's host copy (as time) and posts it as a pushpull (the push and the
pull request behind it), serially; the compute thread then waits for every key's pull, as the
next forward does. So while the bias's push and ack travel, the worker's threads do what they
do in training at that moment: the copy engine posts, the I/O thread queues the weight behind
the window and sends the next layer's small pushes, the server merges and answers those behind
the bias. The worker's "GPU" is a timeline of sleeps in training too (every shape of
runs/emulated-v2 runs emulated compute): no compute burns a core there, so none does here.

A key above the window (``LARGE_BYTES``) leaves only when nothing else is in flight to its
server, so the fc weight waits for the bias's ack (docs/probe.md, the race). The probe pushes
each such key cut to ``LARGE_WIRE_S`` of its link's nominal rate (at most the fc weight's 2 MB;
whole where the rate is not known), with the worker's window set to exactly that size: a cut
key is then held as the whole one was (any byte in flight holds it), the small keys pass as
they did, and 200 samples take seconds, not the minutes whole keys would. The replay's times
are dilated as the trainer's are (``realrun.dilation`` on the emulated cluster); the idle time
between samples is not.

Recorded per sample: the bias's post lateness after its deadline, its round trip from the post
until the I/O thread has its ack (the handle done: where the window is credited), and when the
next layer's first key was posted after the bias (the race's other side, which the simulator
has as the layer's backward time), all wall seconds. Between samples everything is answered and
the connection idles, as before a training run's fc bias (a forward pass and the fc's backward).
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


@dataclasses.dataclass(frozen=True)
class ReplayKey:
    """One key of the replayed backward: its id (its priority is -key, as the trainer's), its
    bytes, and the copy engine's host-copy time before its post (HostCopies.reduce_s)."""

    key: int
    nbytes: int
    reduce_s: float


# The trainer's timeline around ResNet-18's fc bias (V100, batch 32, one GPU a host, as
# realrun.training.emulated_compute.emulated_device gives it; tests/realrun/probe checks these
# against it): per layer, the backward's seconds before its keys are handed on, then its keys
# in hand-off order (last one first).
REPLAY: tuple[tuple[float, tuple[ReplayKey, ...]], ...] = (
    (7.11e-6, (ReplayKey(61, 4000, 2.54e-7), ReplayKey(60, 2_048_000, 1.3003e-4))),
    (
        1.5663e-3,
        (
            ReplayKey(59, 2048, 1.3e-7),
            ReplayKey(58, 2048, 1.3e-7),
            ReplayKey(57, 9_437_184, 5.9924e-4),
        ),
    ),
)
MEASURED_KEY = 61  # the fc bias, the small key whose ack decides the race
KEY_BYTES = 4000  # its bytes
HANDOFF_GAP_S = 0.002  # the compute thread's sleep before the first hand-off (the forward's end)
# A key above realrun's window waits for every byte in flight (realrun.ps.postoffice, without
# the double buffer it has had since runs/emulated-v2 was recorded, which the simulator does not
# model). The probe pushes such keys cut to this much of the link's nominal rate, at most the
# fc weight's bytes (module docstring).
LARGE_BYTES = 256 << 10
LARGE_WIRE_S = 0.015
FC_WEIGHT_BYTES = 2_048_000
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


def replay_bytes(key: ReplayKey, cap_bytes: int | None) -> int:
    """The bytes the probe pushes for ``key``: a key above the window at the fc weight's size,
    cut to ``cap_bytes`` where given, so that every held key has the same size (the window's)."""
    if key.nbytes <= LARGE_BYTES:
        return key.nbytes
    held = FC_WEIGHT_BYTES if cap_bytes is None else min(FC_WEIGHT_BYTES, cap_bytes)
    return max(4 * 1024, held - held % 4)


def hold_large_keys(po: Any, sizes: dict[int, int]) -> None:
    """Send as the workers of runs/emulated-v2 did: by priority, and a key above the window
    only when nothing else is in flight. The window is the held keys' one size (``sizes``:
    bytes per key), so any byte in flight holds them, and no double buffer opens (a key
    exactly the window's size does not open it)."""
    po.schedule("priority", max(sizes.values()))


def push_acks(
    address: str,
    port: int,
    secret: str,
    count: int,
    cap_bytes: int | None = None,
    dilation: float = 1.0,
    spacing_s: float = SPACING_S,
) -> dict:
    """Agent end on host 1: the worker, replaying ``REPLAY`` ``count`` times (module
    docstring). Per sample, wall seconds: the measured key's post lateness after its hand-off
    deadline, its round trip from post to ack, and the next layer's first post after it."""
    from realrun.ps.kv_worker import KVWorker
    from realrun.ps.optimizer import SGD
    from realrun.ps.postoffice import Postoffice
    from realrun.ps.tracker import Handle

    env = dataclasses.replace(_node_env("worker", address, port, secret), node_host="")
    po = Postoffice(env)
    keys = [k for _, layer in REPLAY for k in layer]
    sizes = {k.key: replay_bytes(k, cap_bytes) for k in keys}
    grads = {k: np.full(n // 4, 0.01, np.float32) for k, n in sizes.items()}
    outs = {k: np.zeros_like(g) for k, g in grads.items()}
    handed: queue.SimpleQueue[tuple[ReplayKey, float] | None] = queue.SimpleQueue()
    posted: queue.SimpleQueue[tuple[int, float, float, list[Handle]]] = queue.SimpleQueue()
    failed: list[BaseException] = []
    late: list[float] = []
    trip: list[float] = []
    next_post: list[float] = []

    def copy_engine(kv: KVWorker) -> None:
        """As the trainer's: serial, each key's host copy (as time), then its pushpull."""
        clock = time.perf_counter()
        try:
            while (item := handed.get()) is not None:
                k, deadline = item
                clock = max(clock, time.perf_counter()) + k.reduce_s * dilation
                while (left := clock - time.perf_counter()) > 0:
                    time.sleep(left)
                wall, at = time.time(), time.perf_counter()
                if k.key == MEASURED_KEY:  # pushpull's two messages, with the push's own handle
                    hs = [
                        kv.push(k.key, grads[k.key], priority=-k.key),
                        kv.pull(k.key, outs[k.key], priority=-k.key),
                    ]
                else:
                    hs = [kv.pushpull(k.key, grads[k.key], outs[k.key], priority=-k.key)]
                posted.put((k.key, wall, at - deadline, hs))
        except BaseException as e:  # surfaced by the compute thread, never lost
            failed.append(e)
            posted.put((-1, 0.0, 0.0, []))

    def sample() -> tuple[float, float, float]:
        """One replay on the compute thread: hand the layers on at their deadlines, wait for
        every pull (the next forward), then (lateness, round trip, next post)."""
        clock = time.perf_counter() + HANDOFF_GAP_S
        for backward_s, layer in REPLAY:
            clock += backward_s * dilation
            while (left := clock - time.perf_counter()) > 0:
                time.sleep(left)
            for k in layer:
                handed.put((k, clock))
        got = {}
        for _ in keys:
            key, wall, lateness, hs = posted.get(timeout=SLACK_S)
            if failed:
                raise RuntimeError(f"copy engine failed: {failed[0]}")
            got[key] = (wall, lateness, hs)
        for _, _, hs in got.values():
            for h in hs:
                h.wait(SLACK_S)
        wall, lateness, hs = got[MEASURED_KEY]
        ack = hs[0].done_unix_s
        assert ack is not None  # the handle is done
        return lateness, ack - wall, got[REPLAY[1][1][0].key][0] - wall

    try:
        po.start()
        hold_large_keys(po, sizes)
        kv = KVWorker(po, pull_request="with_push")
        kv.configure(True, SGD(0.1, 0.9, 1e-4, 1.0)).wait(SLACK_S)
        for k in keys:
            kv.init(k.key, outs[k.key]).wait(SLACK_S)
        engine = threading.Thread(target=copy_engine, args=(kv,), name="copy-engine", daemon=True)
        engine.start()
        try:
            sample()  # the first replay warms the connection and the window up
            time.sleep(spacing_s)
            for _ in range(count):
                lateness, round_trip, after = sample()
                late.append(lateness)
                trip.append(round_trip)
                next_post.append(after)
                time.sleep(spacing_s)
        finally:
            handed.put(None)
            engine.join(SLACK_S)
        po.finish(SLACK_S)
    finally:
        po.close()
    return {
        "push_ack_s": trip,
        "handoff_late_s": late,
        "next_post_s": next_post,
        "key_bytes": sizes,
    }


def cap_bytes_for(hosts: HostSet, server: int, worker: int) -> int | None:
    """A large key's bytes: ``LARGE_WIRE_S`` of the slower end's nominal rate (None where a
    rate is not known: whole keys)."""
    rates = [hosts.hosts[i].rate_mbit for i in (server, worker)]
    if not all(rates):
        return None
    return int(min(rates) * 1e6 / 8 * LARGE_WIRE_S)


def run(hosts: HostSet, server: int, worker: int, count: int, port: int) -> Measurement:
    """``count`` replays of the trainer's hand-off (module docstring) from host ``worker`` to a
    server on host ``server``."""
    # This probe job's own secret, as every job has one. It is on the ends' command lines for
    # the seconds they run; it guards nothing but this throwaway job.
    secret = secrets.token_hex(32)
    cap = cap_bytes_for(hosts, server, worker)
    timeout_s = count * (SPACING_S + 0.25) + SLACK_S
    address = hosts.hosts[server].address
    job = ("--address", address, "--port", port, "--secret", secret)
    served = hosts.start_listener(server, "ps-serve", *job, "--timeout", timeout_s)
    cap_arg = ("--cap-bytes", cap if cap is not None else 0)
    pusher = hosts.start(
        worker, "ps-push", *job, "--count", count, *cap_arg, "--dilation", hosts.dilation
    )
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
            # What each sample replays (realrun's EmulatedTrainer around ResNet-18's fc bias):
            # per layer its backward seconds and its keys (id, bytes pushed, host-copy seconds).
            "replay": [
                {
                    "backward_s": backward_s,
                    "keys": [[k.key, pushed["key_bytes"][str(k.key)], k.reduce_s] for k in layer],
                }
                for backward_s, layer in REPLAY
            ],
            "large_key_wire_s": LARGE_WIRE_S if cap is not None else None,
            "dilation": hosts.dilation,  # the replay's times are these times D
            # Per sample, in order: how late the copy engine posted the measured push after the
            # compute thread's deadline, and when the next layer's first key was posted after
            # it (wall seconds).
            "handoff_late_s": pushed["handoff_late_s"],
            "next_post_s": pushed["next_post_s"],
        },
    )
