"""The round trip of a small message between two hosts over TCP (``realrun.emulated.linkprobe``'s
echo and ping ends, which the emulated cluster's own tests use), through any host set."""

from __future__ import annotations

from realrun.probe.hosts import HostSet
from realrun.records.probe_record import Measurement

SLACK_S = 20.0


def run(hosts: HostSet, src: int, dst: int, count: int, port: int) -> Measurement:
    """``count`` request/echo round trips from host ``src`` to host ``dst``, seconds each."""
    timeout_s = count * 0.2 + SLACK_S
    echo = hosts.start_listener(dst, "echo", "--port", port, "--timeout", timeout_s)
    ping = hosts.start(
        src, "ping", "--address", hosts.hosts[dst].address, "--port", port, "--count", count
    )
    try:
        pinged = hosts.result(src, ping, timeout_s, "the round-trip ping")
        hosts.result(dst, echo, SLACK_S, "the round-trip echo")
    finally:
        hosts.stop_all()
    a, b = hosts.hosts[src], hosts.hosts[dst]
    configured = (
        2 * (a.latency_us + b.latency_us) * 1e-6
        if a.latency_us is not None and b.latency_us is not None
        else None
    )
    return Measurement(
        unit="s",
        samples=tuple(pinged["samples_s"]),
        context={"from": a.name, "to": b.name, "configured_rtt_s": configured},
    )
