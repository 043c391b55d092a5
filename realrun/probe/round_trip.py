"""The round trip of a small message between two hosts over TCP, with the time either end
waited for a core taken out, through any host set.

A round trip on a loaded machine is the network's delay plus the time the ping and the echo,
woken by their packet, sat runnable with no core to run on: on the emulated cluster of a
2-core machine under load the raw median came out 4 times the configured delay at 200 Mbit/s
and 1.5 times at 50 Mbit/s. Both ends read their thread's run-queue delay (the second field of
``/proc/thread-self/schedstat``, the counter ``realrun.emulated.machine_load`` reads for the
cluster's threads) around every exchange; the echo sends its share back in the reply. Each
sample keeps the wall time and both waits; ``calibrate --probe`` uses the wall time less the
waits, and a low quantile of those, since what load adds that no counter sees (the delay
wires' own waits, softirq work) only ever lengthens a round trip.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any

from realrun.emulated.machine_load import read_cpu_ticks
from realrun.probe.hosts import READY_LINE, HostSet
from realrun.records.probe_record import Measurement

SLACK_S = 20.0
MESSAGE_BYTES = 32
_WAIT = struct.Struct("!Q")  # the echo's run-queue wait, ns, at the head of its reply
SCHEDSTAT = Path("/proc/thread-self/schedstat")


def run_delay_ns() -> int:
    """This thread's total time runnable but not running, ns (0 where the kernel has no
    schedstats: then no wait is taken out)."""
    try:
        return int(SCHEDSTAT.read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _read_exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        got = conn.recv(n - len(data))
        if not got:
            raise ConnectionError("the peer closed the connection")
        data += got
    return data


def echo(port: int, timeout_s: float) -> dict:
    """Agent end: accept one connection; answer every message with its own length, headed by
    the run-queue wait this thread had since its previous answer."""
    deadline = time.monotonic() + timeout_s
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(1)
    server.settimeout(timeout_s)
    print(READY_LINE, flush=True)
    with server:
        conn, _ = server.accept()
    answered = 0
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        before = run_delay_ns()
        while (left := deadline - time.monotonic()) > 0:
            conn.settimeout(left)
            try:
                _read_exactly(conn, MESSAGE_BYTES)
            except ConnectionError:
                break  # the ping is done
            now = run_delay_ns()
            conn.sendall(_WAIT.pack(now - before).ljust(MESSAGE_BYTES, b"e"))
            before = now
            answered += 1
    return {"answered": answered}


def ping(address: str, port: int, count: int) -> dict:
    """Agent end: ``count`` exchanges; each one's wall seconds and both ends' core waits."""
    message = b"p" * MESSAGE_BYTES
    wall, own, peer = [], [], []
    with socket.create_connection((address, port), timeout=SLACK_S) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            d0 = run_delay_ns()
            t0 = time.perf_counter()
            conn.sendall(message)
            reply = _read_exactly(conn, MESSAGE_BYTES)
            t1 = time.perf_counter()
            own.append((run_delay_ns() - d0) * 1e-9)
            wall.append(t1 - t0)
            peer.append(_WAIT.unpack_from(reply)[0] * 1e-9)
    return {"wall_s": wall, "ping_wait_s": own, "echo_wait_s": peer}


def between(hosts: HostSet, src: int, dst: int) -> dict[str, Any]:
    """A round trip's ends, and its configured delay where the launcher knows the NICs'
    (one-way per NIC, so a round trip crosses each NIC's twice)."""
    a, b = hosts.hosts[src], hosts.hosts[dst]
    configured = (
        2 * (a.latency_us + b.latency_us) * 1e-6
        if a.latency_us is not None and b.latency_us is not None
        else None
    )
    return {"from": a.name, "to": b.name, "configured_rtt_s": configured}


def run(hosts: HostSet, src: int, dst: int, count: int, port: int) -> Measurement:
    """``count`` request/echo round trips from host ``src`` to host ``dst``, seconds each."""
    timeout_s = count * 0.2 + SLACK_S
    busy0, total0 = read_cpu_ticks()
    echo_end = hosts.start_listener(dst, "echo", "--port", port, "--timeout", timeout_s)
    ping_end = hosts.start(
        src, "ping", "--address", hosts.hosts[dst].address, "--port", port, "--count", count
    )
    try:
        pinged = hosts.result(src, ping_end, timeout_s, "the round-trip ping")
        hosts.result(dst, echo_end, SLACK_S, "the round-trip echo")
    finally:
        hosts.stop_all()
    busy1, total1 = read_cpu_ticks()
    return Measurement(
        unit="s",
        samples=tuple(pinged["wall_s"]),
        context={
            **between(hosts, src, dst),
            "message_bytes": MESSAGE_BYTES,
            # Per sample, in order: the time each end waited for a core during it.
            "ping_wait_s": pinged["ping_wait_s"],
            "echo_wait_s": pinged["echo_wait_s"],
            "machine_cpu_busy": (busy1 - busy0) / (total1 - total0) if total1 > total0 else None,
        },
    )
