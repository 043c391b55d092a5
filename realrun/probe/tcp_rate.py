"""TCP as the application sees it: one connection's rate, a host's aggregate over several
connections, and incast into one host with how unevenly the senders share it.

Every pattern is the same two ends. The sink (on the receiving host) accepts its connections
and then runs rounds: it sends each connection one "go" byte and reads until every connection
has delivered ``burst_bytes``; the sources send ``burst_bytes`` per go, on persistent
connections (as a parameter server's are, idle between rounds). Per round the sink keeps, per
connection, its first and last byte times and how many bytes each connection had delivered
when the first one finished: while all are sending, those counts are the shares TCP gave them.
The simulator draws a share weight per host pair and busy period (simscale.network.flows,
``tcp_share_sigma``); a round is such a busy period, so the standard deviation of the log of the
counts within a round is that sigma, measured.
"""

from __future__ import annotations

import math
import selectors
import socket
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

from realrun.probe.hosts import READY_LINE, HostSet
from realrun.records.probe_record import Measurement

CHUNK_BYTES = 1 << 16
GO = b"g"
MSS_BYTES = 1448  # one Ethernet segment's payload: the floor of a starved flow's count
SLACK_S = 20.0  # interpreter starts and connection set-up on a loaded machine


# -- the ends (run inside the hosts by realrun.probe.agent) -------------------------------


def sink(port: int, connections: int, burst_bytes: int, rounds: int, timeout_s: float) -> dict:
    """Accept ``connections``, run ``rounds`` go/burst rounds; per-round timings and counts."""
    deadline = time.monotonic() + timeout_s
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(connections)
    server.settimeout(timeout_s)
    print(READY_LINE, flush=True)
    conns = []
    with server:
        for _ in range(connections):
            conn, _ = server.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conns.append(conn)
    sel = selectors.DefaultSelector()
    for i, c in enumerate(conns):
        c.setblocking(False)
        sel.register(c, selectors.EVENT_READ, i)
    buffer = bytearray(CHUNK_BYTES)
    out = []
    try:
        for _ in range(rounds):
            got = [0] * connections
            first: list[float | None] = [None] * connections
            last = [0.0] * connections
            snapshot: list[int] | None = None
            t0 = time.monotonic()
            for c in conns:
                c.setblocking(True)
                c.sendall(GO)
                c.setblocking(False)
            while min(got) < burst_bytes:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"round not done within {timeout_s:.0f} s: {got} bytes")
                for key, _ in sel.select(timeout=left):
                    i = key.data
                    n = key.fileobj.recv_into(buffer)  # type: ignore[union-attr]
                    if not n:
                        if got[i] < burst_bytes:
                            raise ConnectionError(f"connection {i} closed after {got[i]} bytes")
                        sel.unregister(key.fileobj)  # its source is done: the last round
                        continue
                    now = time.monotonic()
                    first[i] = now if first[i] is None else first[i]
                    last[i] = now
                    got[i] += n
                    if snapshot is None and got[i] >= burst_bytes:
                        snapshot = list(got)
            out.append(
                {
                    "first_byte_s": [(f or t0) - t0 for f in first],
                    "last_byte_s": [t - t0 for t in last],
                    "bytes_at_first_done": snapshot,
                }
            )
    finally:
        for c in conns:
            c.close()
    return {"burst_bytes": burst_bytes, "rounds": out}


def source(address: str, port: int, connections: int, burst_bytes: int, rounds: int) -> dict:
    """Open ``connections`` to the sink; on each go byte, send ``burst_bytes`` on each."""
    conns = [socket.create_connection((address, port), timeout=SLACK_S) for _ in range(connections)]
    chunk = bytes(CHUNK_BYTES)
    errors: list[BaseException] = []

    def run(conn: socket.socket) -> None:
        try:
            conn.settimeout(None)
            for _ in range(rounds):
                if conn.recv(1) != GO:
                    raise ConnectionError("sink closed before a round")
                left = burst_bytes
                while left > 0:
                    conn.sendall(chunk[: min(left, CHUNK_BYTES)])
                    left -= min(left, CHUNK_BYTES)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in conns:
        c.close()
    if errors:
        raise errors[0]
    return {"connections": connections, "rounds": rounds}


# -- the launcher side --------------------------------------------------------------------


@dataclass(frozen=True)
class Pattern:
    """Who sends to whom: ``senders`` hosts, each with ``per_sender`` connections, into one."""

    name: str
    sink: int
    senders: tuple[int, ...]
    per_sender: int = 1

    @property
    def connections(self) -> int:
        return len(self.senders) * self.per_sender


def run_pattern(
    hosts: HostSet, pattern: Pattern, burst_bytes: int, rounds: int, port: int, budget_s: float
) -> list[dict[str, Any]]:
    """Run one pattern; the sink's rounds."""
    timeout_s = budget_s + SLACK_S
    sink_proc = hosts.start_listener(
        pattern.sink,
        "sink",
        *("--port", port, "--connections", pattern.connections),
        *("--burst", burst_bytes, "--rounds", rounds, "--timeout", timeout_s),
    )
    address = hosts.hosts[pattern.sink].address
    sources = [
        (
            s,
            hosts.start(
                s,
                "source",
                *("--address", address, "--port", port, "--connections", pattern.per_sender),
                *("--burst", burst_bytes, "--rounds", rounds),
            ),
        )
        for s in pattern.senders
    ]
    try:
        result = hosts.result(pattern.sink, sink_proc, timeout_s, f"the {pattern.name} sink")
        for s, proc in sources:
            hosts.result(s, proc, SLACK_S, f"the {pattern.name} source")
    finally:
        hosts.stop_all()
    rounds_out: list[dict[str, Any]] = result["rounds"]
    return rounds_out


def connection_rates_Bps(rounds: list[dict[str, Any]], burst_bytes: int) -> list[float]:
    """Every connection's rate in every round, first to last byte (the first chunk excluded:
    its arrival starts the clock)."""
    rates = []
    for r in rounds:
        for f, last in zip(r["first_byte_s"], r["last_byte_s"], strict=True):
            if last > f:
                rates.append((burst_bytes - CHUNK_BYTES) / (last - f))
    return rates


def aggregate_rates_Bps(rounds: list[dict[str, Any]], burst_bytes: int) -> list[float]:
    """The receiving host's rate per round: every connection's bytes, first byte to last."""
    rates = []
    for r in rounds:
        span = max(r["last_byte_s"]) - min(r["first_byte_s"])
        if span > 0:
            rates.append(len(r["last_byte_s"]) * burst_bytes / span)
    return rates


def share_log_deviations(rounds: list[dict[str, Any]]) -> list[float]:
    """Per round and connection, log(its share) minus the round's mean log share: the samples
    whose standard deviation is the share sigma (a starved flow counts as one segment)."""
    out = []
    for r in rounds:
        counts = r["bytes_at_first_done"]
        if not counts or len(counts) < 2:
            continue
        logs = [math.log(max(c, MSS_BYTES)) for c in counts]
        centre = statistics.fmean(logs)
        # Unbiased per round: scale by sqrt(n / (n - 1)), so the pooled std is the sigma.
        scale = math.sqrt(len(logs) / (len(logs) - 1))
        out += [(x - centre) * scale for x in logs]
    return out


def rate_measurement(
    rates_Bps: list[float], pattern: Pattern, hosts: HostSet, burst: int
) -> Measurement:
    return Measurement(
        unit="bytes/s",
        samples=tuple(rates_Bps),
        context={
            "sink": hosts.hosts[pattern.sink].name,
            "senders": [hosts.hosts[s].name for s in pattern.senders],
            "connections_per_sender": pattern.per_sender,
            "burst_bytes": burst,
        },
    )
