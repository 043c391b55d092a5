"""The parameter server's CPU cost per message and per byte, with 1 to N pushers, measured on
realrun's own server code: a ``Van`` (zmq, signed frames as every node's) and a ``KVServer``
configured for dist_sync with the scenario's SGD, fed by N worker vans over loopback.

Every pushed message is timed on the server's thread in CPU time (``time.thread_time``, so a
loaded machine's waits do not count): its share of the ``poll`` that received it (decode and
signature check), ``handle`` (merge, and the update when it completes the round) and sending the
replies. Pushes of a few bytes give the per-message cost; the growth with size, per byte, of
a push that does not complete the round gives the merge cost, and of one that does the merge
plus the optimizer update. The workers' sends of small messages give the sender's per-message
cost (simscale's ``message_overhead_us``).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from realrun.probe.hosts import HostSet
from realrun.ps.kv_server import KVServer
from realrun.ps.message import Kind, Message
from realrun.ps.optimizer import SGD
from realrun.ps.van import Incoming, Van
from realrun.records.probe_record import Measurement

TINY_ELEMENTS = 1
DEFAULT_SIZES_BYTES = (4, 256 << 10, 1 << 20, 4 << 20)
POLL_S = 1.0
# The first pushes of a run wait for zmq's connection and handshake, which took over a second
# on a 2-core machine at load 16: wait this long for a push before calling the server stuck.
SERVE_TIMEOUT_S = 60.0


def _serve(van: Van, kv: KVServer, expect: int, workers: list[Van]) -> list[tuple[float, bool]]:
    """Receive and handle ``expect`` pushes; (CPU seconds, completed the round) of each.

    While none has come the workers' vans are polled too (untimed): a van holds its first
    pushes until realrun.auth's handshake completes, and it completes in the worker's poll."""
    out: list[tuple[float, bool]] = []
    deadline = time.monotonic() + SERVE_TIMEOUT_S
    while len(out) < expect:
        t0 = time.thread_time()  # an empty poll's CPU is charged to no push
        batch: list[Incoming] = van.poll(POLL_S)
        if not batch:
            if time.monotonic() > deadline:
                raise TimeoutError(f"server got {len(out)} of {expect} pushes")
            for v in workers:
                v.poll(0.0)
            continue
        poll_each = (time.thread_time() - t0) / len(batch)
        for inc in batch:
            before = {k: s.version for k, s in kv.slices.items()}
            t1 = time.thread_time()
            for who, reply in kv.handle(inc):
                van.reply(who, reply)
            cost = poll_each + time.thread_time() - t1
            completed = any(s.version != before.get(k) for k, s in kv.slices.items())
            out.append((cost, completed))
    return out


def measure(pushers: int, sizes_bytes: tuple[int, ...], rounds: int, momentum: float) -> dict:
    """Agent end: per size, every push's server CPU seconds and whether it ran the update;
    and the workers' send CPU seconds per small message."""
    secret = os.urandom(32)
    server = Van(secret)
    port = server.bind("127.0.0.1")
    workers = []
    for rank in range(pushers):
        v = Van(secret)
        v.connect("s0", f"tcp://127.0.0.1:{port}", f"w{rank}")
        workers.append(v)
    kv = KVServer(pushers)
    kv.sync = True
    kv.optimizer = SGD(0.1, momentum, 1e-4, 1.0 / pushers)
    sends: list[float] = []
    sizes: dict[str, list[list[Any]]] = {}
    try:
        for key, size in enumerate(sizes_bytes):
            n = max(TINY_ELEMENTS, size // 4)
            init = Message(Kind.INIT, 0, key, 0, n, arrays=(np.zeros(n, np.float32),))
            kv.handle(Incoming(init, identity=b"w0"))
            grads = [np.full(n, 0.01 * (r + 1), np.float32) for r in range(pushers)]
            timed: list[list[Any]] = []
            for rnd in range(rounds + 1):  # the first round warms caches and sockets up
                for rank, v in enumerate(workers):
                    msg = Message(Kind.PUSH, rnd + 1, key, 0, n, arrays=(grads[rank],))
                    t0 = time.thread_time()
                    v.send("s0", msg)
                    if n == TINY_ELEMENTS and rnd:
                        sends.append(time.thread_time() - t0)
                served = _serve(server, kv, pushers, workers)
                for v in workers:  # drain the acks so no queue grows
                    while len(v.poll(0.0)) or False:
                        pass
                if rnd:
                    timed += [[c, done] for c, done in served]
            sizes[str(n * 4)] = timed
    finally:
        for v in [server, *workers]:
            v.close()
    return {"pushers": pushers, "push_cpu_s": sizes, "send_cpu_s": sends}


def costs_from(results: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per-message and per-byte samples (us, ns/byte) from the agents' results, 1..N pushers.

    per push of b bytes: cost = message + b * merge (+ b * update when it completes a round).
    The tiny size gives ``message`` (its median, per pusher count); each larger push gives one
    sample of merge or of merge+update per byte, from which the update's is the difference of
    the medians (done in calibration, where both are known)."""
    push_us, send_us, merge_ns, final_ns = [], [], [], []
    for res in results:
        by_size = {int(k): v for k, v in res["push_cpu_s"].items()}
        tiny = sorted(c for c, _ in by_size[min(by_size)])
        base = tiny[len(tiny) // 2]
        push_us += [c * 1e6 for c in tiny]
        send_us += [c * 1e6 for c in res["send_cpu_s"]]
        for size, pushes in by_size.items():
            if size == min(by_size):
                continue
            for cost, completed in pushes:
                per_byte_ns = (cost - base) / size * 1e9
                (final_ns if completed else merge_ns).append(per_byte_ns)
    return {"push_us": push_us, "send_us": send_us, "merge_ns": merge_ns, "final_ns": final_ns}


def run(
    hosts: HostSet, max_pushers: int, rounds: int, momentum: float, host: int = 0
) -> dict[str, Measurement]:
    """Measure on host ``host`` with 1..max_pushers pushers; four measurements."""
    results = []
    for p in range(1, max_pushers + 1):
        proc = hosts.start(
            host, "server-cost", "--pushers", p, "--rounds", rounds, "--momentum", momentum
        )
        results.append(hosts.result(host, proc, 120.0, f"the server-cost probe ({p} pushers)"))
    samples = costs_from(results)
    context = {
        "host": hosts.hosts[host].name,
        "pushers": list(range(1, max_pushers + 1)),
        "sizes_bytes": list(DEFAULT_SIZES_BYTES),
        "rounds": rounds,
        "clock": "thread CPU time",
    }
    units = {"push_us": "us", "send_us": "us", "merge_ns": "ns/byte", "final_ns": "ns/byte"}
    names = {
        "push_us": "server_push_message_us",
        "send_us": "sender_message_us",
        "merge_ns": "server_merge_ns_per_byte",
        "final_ns": "server_merge_update_ns_per_byte",
    }
    return {
        names[k]: Measurement(unit=units[k], samples=tuple(v), context=context)
        for k, v in samples.items()
        if v
    }
