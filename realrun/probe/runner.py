"""One probe from start to record: the measurements in order, progress, machine load, cleanup.

The order runs the cheap, most informative measurements first (round trip, one connection,
a host's aggregate, incast), then the servers, the all-reduce and the GPU. A failed host stops
the probe with ProbeHostError (one line naming it); every end is stopped and, on the emulated
cluster, the namespaces deleted by the host set's context manager, whatever happened.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from realrun.emulated.machine_load import read_cpu_ticks
from realrun.probe import (
    allreduce_bw,
    gpu_rates,
    ps_round_trip,
    round_trip,
    server_cost,
    tcp_rate,
)
from realrun.probe.hosts import HostSet
from realrun.probe.steps import STEPS
from realrun.records.probe_record import Measurement, ProbeRecord

BASE_PORT = 45_100  # one port per step: no wait for a previous step's TIME_WAIT sockets
UNSHAPED_BURST_BYTES = 32 << 20  # one connection's rounds where the NIC's rate is unknown


@dataclass(frozen=True)
class ProbeOptions:
    """How long each measurement runs; defaults keep a 4-host emulated probe near a minute."""

    round_s: float = 0.5  # one connection's round at the nominal rate
    rounds: int = 5  # rounds of the one-connection and aggregate patterns
    connections: int = 4  # parallel connections of the aggregate pattern
    # Incast: every sender's burst per round. 1 MiB is a parameter-server key slice's order of
    # size (MXNet splits arrays above 1e6 elements, 4 MB, over the servers); each round is one
    # busy period of the senders' connections, as the simulator draws its share weights.
    incast_burst_bytes: int = 1 << 20
    incast_rounds: int = 20
    rtt_count: int = 200  # a low quantile of 200 is robust to a loaded machine's outliers
    ps_rtt_count: int = 200  # realrun's own small push and ack (realrun.probe.ps_round_trip)
    server_pushers: int = 4
    server_rounds: int = 5
    momentum: float = 0.9
    allreduce_sizes: tuple[int, ...] = allreduce_bw.DEFAULT_SIZES_BYTES
    allreduce_reps: int = 3
    gpu_model: str = "resnet18"
    gpu_batch: int = 32
    skip: frozenset[str] = field(default_factory=frozenset)


def _burst_bytes(hosts: HostSet, options: ProbeOptions) -> int:
    rate = hosts.hosts[0].rate_mbit
    if rate is None:
        return UNSHAPED_BURST_BYTES
    return max(1 << 16, int(rate * 1e6 / 8 * options.round_s))


def probe(
    hosts: HostSet, options: ProbeOptions, progress: Callable[[str], None] = lambda _: None
) -> ProbeRecord:
    """Run every step not in ``options.skip`` on ``hosts`` (entered); the probe record."""
    n = len(hosts.hosts)
    steps = [s for s in STEPS if s not in options.skip]
    measurements: dict[str, Measurement] = {}
    timings: dict[str, float] = {}
    busy0, total0 = read_cpu_ticks()
    started = time.monotonic()
    burst = _burst_bytes(hosts, options)
    for i, step in enumerate(steps, 1):
        progress(f"[{i}/{len(steps)}] {step} ...")
        t0 = time.monotonic()
        port = hosts.free_port() or BASE_PORT + STEPS.index(step)
        if step == "rtt":
            measurements["rtt_s"] = round_trip.run(hosts, 1, 0, options.rtt_count, port)
        elif step in ("tcp", "aggregate"):
            per = 1 if step == "tcp" else options.connections
            pattern = tcp_rate.Pattern(step, 0, (1,), per)
            budget = options.rounds * options.round_s * per * 4
            rounds = tcp_rate.run_pattern(hosts, pattern, burst, options.rounds, port, budget)
            if step == "tcp":
                rates = tcp_rate.connection_rates_Bps(rounds, burst)
                name = "tcp_connection_Bps"
            else:
                rates = tcp_rate.aggregate_rates_Bps(rounds, burst)
                name = "tcp_host_aggregate_Bps"
            measurements[name] = tcp_rate.rate_measurement(rates, pattern, hosts, burst)
        elif step == "incast":
            pattern = tcp_rate.Pattern("incast", 0, tuple(range(1, n)))
            b = options.incast_burst_bytes
            budget = (
                options.incast_rounds
                * (n - 1)
                * b
                * 8
                / ((hosts.hosts[0].rate_mbit or 1e3) * 1e6)
                * 4
            )
            rounds = tcp_rate.run_pattern(hosts, pattern, b, options.incast_rounds, port, budget)
            measurements["incast_aggregate_Bps"] = tcp_rate.rate_measurement(
                tcp_rate.aggregate_rates_Bps(rounds, b), pattern, hosts, b
            )
            measurements["incast_share_log_deviation"] = Measurement(
                unit="log(bytes)",
                samples=tuple(tcp_rate.share_log_deviations(rounds)),
                context={
                    "what": "per round and sender, log of its bytes when the first sender "
                    "finished, minus the round's mean (unbiased per round)",
                    "senders": n - 1,
                    "burst_bytes": b,
                    "rounds": options.incast_rounds,
                },
            )
        elif step == "server":
            measurements.update(
                server_cost.run(
                    hosts, options.server_pushers, options.server_rounds, options.momentum
                )
            )
        elif step == "psrtt":
            measurements["ps_push_ack_s"] = ps_round_trip.run(
                hosts, 0, 1, options.ps_rtt_count, port
            )
        elif step == "allreduce":
            measurements.update(
                allreduce_bw.run(hosts, options.allreduce_sizes, options.allreduce_reps, port)
            )
        else:
            measurements.update(gpu_rates.run(hosts, options.gpu_model, options.gpu_batch, 3))
        timings[step] = time.monotonic() - t0
        progress(f"[{i}/{len(steps)}] {step} done in {timings[step]:.1f} s")
    busy1, total1 = read_cpu_ticks()
    return ProbeRecord(
        launcher=hosts.launcher,
        hosts=tuple(h.to_dict() for h in hosts.hosts),
        measurements=measurements,
        environment=_environment(
            hosts, timings, time.monotonic() - started, busy1 - busy0, total1 - total0
        ),
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )


def _environment(
    hosts: HostSet, timings: dict[str, float], wall_s: float, busy: int, total: int
) -> dict[str, Any]:
    import zmq

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "pyzmq": zmq.__version__,
        "platform": platform.platform(),
        "cores": os.cpu_count(),
        "wall_s": wall_s,
        "step_wall_s": timings,
        # Everything on this machine over the probe, this probe or not (realrun.emulated.
        # machine_load): CPU costs are thread CPU time, rates are not, so read them with it.
        "machine_cpu_busy": busy / total if total > 0 else None,
        "loadavg": os.getloadavg(),
        "launcher_details": hosts.describe(),
    }
    load = hosts.load()
    if load is not None:
        env["machine_load"] = load
    return env
