"""Measure an emulated link as an application sees it: bulk TCP rate and small-message RTT.

Used by the tests (does the cluster deliver what it was configured for?) and by calibration
microbenchmarks (what do link bandwidth and latency really look like to a TCP user?). Both ends
are plain Python sockets started inside the two hosts' namespaces, so the figures include the
kernel TCP stack, exactly as zmq traffic will. Every run is bounded in bytes and in time.

The in-namespace ends run as ``python -m realrun.emulated.linkprobe ROLE ...`` and print one JSON
line.
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from realrun.emulated.emulated_cluster import (
    TERM_GRACE_S,
    EmulatedCluster,
    EmulatedHost,
    python_env,
    python_module_argv,
    stop_process_groups,
)

BULK_PORT = 45_001
PING_PORT = 45_002
BULK_CHUNK_BYTES = 1 << 20
PING_MESSAGE_BYTES = 32  # a small message: one segment each way, no serialisation to speak of
LISTENING_LINE = "listening"
START_TIMEOUT_S = 10.0  # a Python interpreter start, on a loaded 2-core box
SLACK_S = 15.0  # allowed on top of the work itself before a probe counts as hung


@dataclass(frozen=True)
class Throughput:
    """Bytes received by one bulk TCP stream and the seconds from its first to last byte."""

    bytes_received: int
    seconds: float
    # CLOCK_MONOTONIC at the first byte (system-wide, so streams received in different
    # namespaces share it): lets concurrent streams be judged over their common window.
    first_byte_s: float = 0.0

    @property
    def rate_mbit(self) -> float:
        return self.bytes_received * 8 / self.seconds / 1e6


@dataclass(frozen=True)
class RoundTrip:
    """Round-trip times of small request/echo exchanges on one TCP connection, in seconds."""

    samples_s: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def min_s(self) -> float:
        return min(self.samples_s)


# -- the ends that run inside the namespaces --------------------------------------------------


def _listen(port: int, timeout_s: float) -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(1)
    server.settimeout(timeout_s)
    print(LISTENING_LINE, flush=True)
    return server


def bulk_receive(port: int, timeout_s: float) -> dict[str, Any]:
    """Accept one connection, read it to EOF; bytes and first-to-last-byte seconds."""
    deadline = time.monotonic() + timeout_s
    with _listen(port, timeout_s) as server:
        conn, _ = server.accept()
    buffer = bytearray(BULK_CHUNK_BYTES)
    received, first, last = 0, None, None
    with conn:
        while (left := deadline - time.monotonic()) > 0:
            conn.settimeout(left)
            count = conn.recv_into(buffer)
            if not count:
                break
            last = time.monotonic()
            # The clock starts at the first byte: connection set-up is latency, not rate.
            first = last if first is None else first
            received += count
    if first is None or last is None or last <= first:
        raise RuntimeError(f"bulk receiver got too little to time ({received} bytes)")
    return {"bytes": received, "seconds": last - first, "first_byte_s": first}


def bulk_send(address: str, port: int, duration_s: float, max_bytes: int) -> dict[str, Any]:
    """Send as fast as TCP allows for ``duration_s`` or ``max_bytes``, whichever comes first."""
    chunk = bytes(BULK_CHUNK_BYTES)
    sent = 0
    with socket.create_connection((address, port), timeout=START_TIMEOUT_S) as conn:
        conn.settimeout(duration_s + SLACK_S)
        end = time.monotonic() + duration_s
        while sent < max_bytes and time.monotonic() < end:
            piece = chunk[: min(BULK_CHUNK_BYTES, max_bytes - sent)]
            conn.sendall(piece)
            sent += len(piece)
    return {"bytes": sent}


def echo_serve(port: int, timeout_s: float) -> dict[str, Any]:
    """Accept one connection and echo every message until EOF."""
    deadline = time.monotonic() + timeout_s
    with _listen(port, timeout_s) as server:
        conn, _ = server.accept()
    echoed = 0
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while (left := deadline - time.monotonic()) > 0:
            conn.settimeout(left)
            data = conn.recv(4096)
            if not data:
                break
            conn.sendall(data)
            echoed += len(data)
    return {"bytes": echoed}


def ping(address: str, port: int, count: int) -> dict[str, Any]:
    """``count`` request/echo exchanges of a small message; the round trip of each, seconds."""
    message = b"p" * PING_MESSAGE_BYTES
    samples = []
    with socket.create_connection((address, port), timeout=START_TIMEOUT_S) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(count):
            start = time.perf_counter()
            conn.sendall(message)
            got = 0
            while got < len(message):
                data = conn.recv(len(message) - got)
                if not data:
                    raise RuntimeError("echo server closed the connection")
                got += len(data)
            samples.append(time.perf_counter() - start)
    return {"samples_s": samples}


# -- the launcher side ------------------------------------------------------------------------


def _start_listener(
    cluster: EmulatedCluster, host: EmulatedHost, argv: list[str]
) -> subprocess.Popen[str]:
    proc: subprocess.Popen[str] = cluster.popen(
        host,
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=python_env(),
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
    if not ready or proc.stdout.readline().strip() != LISTENING_LINE:
        stop_process_groups([proc], TERM_GRACE_S)
        raise RuntimeError(f"probe listener in {host.name} did not start: {argv}")
    return proc


def _result(proc: subprocess.Popen[str], timeout_s: float, what: str) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_process_groups([proc], TERM_GRACE_S)
        raise RuntimeError(f"{what} did not finish within {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}): {err.strip()}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def _pair(
    cluster: EmulatedCluster,
    server_host: EmulatedHost,
    server_argv: list[str],
    client_host: EmulatedHost,
    client_argv: list[str],
    timeout_s: float,
) -> tuple[dict[str, Any], dict[str, Any]]:
    server = _start_listener(cluster, server_host, server_argv)
    client = None
    try:
        client = cluster.popen(
            client_host,
            client_argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=python_env(),
        )
        client_result = _result(client, timeout_s, f"probe client in {client_host.name}")
        server_result = _result(server, timeout_s, f"probe server in {server_host.name}")
    finally:
        stop_process_groups([p for p in (server, client) if p is not None], TERM_GRACE_S)
    return client_result, server_result


def measure_throughput(
    cluster: EmulatedCluster,
    src: str | int | EmulatedHost,
    dst: str | int | EmulatedHost,
    duration_s: float = 3.0,
    max_bytes: int = 4 << 30,
    port: int = BULK_PORT,
) -> Throughput:
    """Rate of one bulk TCP stream from ``src`` to ``dst`` over ``duration_s`` (bounded)."""
    source, sink = cluster.host(src), cluster.host(dst)
    timeout_s = duration_s + SLACK_S
    _, received = _pair(
        cluster,
        sink,
        python_module_argv(__name__, "bulk-rx", "--port", str(port), "--timeout", str(timeout_s)),
        source,
        python_module_argv(
            __name__,
            *("bulk-tx", "--address", sink.address, "--port", str(port)),
            *("--duration", str(duration_s), "--max-bytes", str(max_bytes)),
        ),
        timeout_s,
    )
    return Throughput(
        bytes_received=received["bytes"],
        seconds=received["seconds"],
        first_byte_s=float(received.get("first_byte_s", 0.0)),
    )


def measure_round_trip(
    cluster: EmulatedCluster,
    src: str | int | EmulatedHost,
    dst: str | int | EmulatedHost,
    count: int = 50,
    port: int = PING_PORT,
) -> RoundTrip:
    """Round trips of ``count`` small TCP request/echo exchanges from ``src`` to ``dst``."""
    client_host, server_host = cluster.host(src), cluster.host(dst)
    # Generous: even a 100 ms round trip times 'count' stays well inside.
    timeout_s = count * 0.1 + SLACK_S
    pinged, _ = _pair(
        cluster,
        server_host,
        python_module_argv(__name__, "echo", "--port", str(port), "--timeout", str(timeout_s)),
        client_host,
        python_module_argv(
            __name__,
            *("ping", "--address", server_host.address, "--port", str(port)),
            *("--count", str(count)),
        ),
        timeout_s,
    )
    return RoundTrip(samples_s=tuple(pinged["samples_s"]))


def main(argv: list[str] | None = None) -> None:
    """Entry point of the in-namespace ends; prints one JSON line with the result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    roles = parser.add_subparsers(dest="role", required=True)
    rx = roles.add_parser("bulk-rx")
    rx.add_argument("--port", type=int, required=True)
    rx.add_argument("--timeout", type=float, required=True)
    tx = roles.add_parser("bulk-tx")
    tx.add_argument("--address", required=True)
    tx.add_argument("--port", type=int, required=True)
    tx.add_argument("--duration", type=float, required=True)
    tx.add_argument("--max-bytes", type=int, required=True)
    echo = roles.add_parser("echo")
    echo.add_argument("--port", type=int, required=True)
    echo.add_argument("--timeout", type=float, required=True)
    pinger = roles.add_parser("ping")
    pinger.add_argument("--address", required=True)
    pinger.add_argument("--port", type=int, required=True)
    pinger.add_argument("--count", type=int, required=True)
    args = parser.parse_args(argv)
    if args.role == "bulk-rx":
        result = bulk_receive(args.port, args.timeout)
    elif args.role == "bulk-tx":
        result = bulk_send(args.address, args.port, args.duration, args.max_bytes)
    elif args.role == "echo":
        result = echo_serve(args.port, args.timeout)
    else:
        result = ping(args.address, args.port, args.count)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
