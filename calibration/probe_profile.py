"""From probe records (``realrun probe``) to a profile: measured costs, no training run.

Each profile key comes from one measurement, bottom-up (design.md's calibration order):

- ``bandwidth_factor``: one TCP connection's rate over its NIC's nominal rate (the simulator
  gives a lone flow its NIC's capacity times this factor);
- ``latency_factor``: a low quantile (``RTT_QUANTILE``) of the small-message round trips, each
  less the time its ends waited for a core (realrun.probe.round_trip), over the configured
  round trip; per record, then the median over records. Its uncertainty is the spread between
  records (host shapes), or within one record that between the quantile and the quartile;
- ``connection_gbps``: one connection's rate, only where it is a limit of its own: every round
  of several connections between the same two hosts beat every round of one (5 rounds each:
  1 chance in 252 if they were alike); otherwise the NIC is the limit and the key stays 0;
- ``socket_host_gbps``: the all-reduce's bus bandwidth for large messages (the slope of time
  against size, least squares over the sizes probed), only where it stays below every usable
  NIC rate the record's one-connection rounds reached: the collective's transport is then the
  ceiling, as the simulator's ring applies it (simscale.comm.allreduce.ring_host_cap);
- ``tcp_share_sigma``: the standard deviation of the log of the incast senders' shares within
  a round (a busy period, as the simulator draws its share weights);
- ``message_overhead_us``: the sender's CPU per small message (realrun's Van);
- ``server_request_us``: the server's CPU per small push, less the ack it sends (which the
  simulator charges as a message overhead);
- ``server_merge_ns_per_byte`` / ``server_update_ns_per_byte``: per byte of a push that does
  not complete the round, and the extra of one that does (the optimizer update);
- ``message_stack_quantiles_us``: realrun's own small push and its ack between two hosts (the
  ``psrtt`` step), each round trip less what the simulator's costs above give the same push
  (``simulated_push_ack_s``: the configured round trip times ``latency_factor``, the push's
  bytes at the NIC's usable rate, two message overheads, the server's request, merge and
  update), never below 0; pooled over the records, halved (one delay for the push's handling,
  one for the ack's), as ``STACK_QUANTILES`` evenly spaced quantiles the simulator draws each
  message's delay from (simscale.comm.ps.stack_delay). Real time, as measured.

Each parameter's uncertainty (1-sigma of log(value), the format profiles/*.yaml use) is its
samples' log spread, pooled over the records given: a training run meets that spread, not
only the error of the median. The share sigma's is the sampling error of a standard deviation
estimated from n samples, 1/sqrt(2(n-1)).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from calibration.errors import CalibrationError
from realrun.records.probe_record import Measurement, ProbeRecord, ProbeRecordError, load_probe
from simscale.comm.ps.server import HEADER_BYTES
from simscale.spec.costs import CostModel
from simscale.spec.profile import PROFILE_SCHEMA_VERSION, FitInfo, Profile

MIN_US = 0.5  # calibration/fit.py's lower bound of a per-message cost
# Load only lengthens a round trip (a wait no counter saw: the delay wires', softirq work), so
# the network's own is near the bottom of the distribution; the 10th percentile rather than
# the minimum, which one lucky sample or clock step sets.
RTT_QUANTILE = 0.10
# Quantiles of the stack delay a profile keeps, at probabilities (i + 0.5) / 20: 5% steps, as
# fine as 200 round trips (the psrtt step's) resolve a tail.
STACK_QUANTILES = 20


def _samples(records: Sequence[ProbeRecord], name: str) -> list[float]:
    out: list[float] = []
    for r in records:
        m = r.measured(name)
        if m is not None:
            out += list(m.samples)
    return out


def _log_sd(values: list[float]) -> float:
    logs = [math.log(v) for v in values if v > 0]
    return statistics.stdev(logs) if len(logs) > 1 else math.nan


def _nominal_Bps(record: ProbeRecord, name: str) -> float | None:
    """The nominal rate of the receiving host of measurement ``name`` (None when unknown)."""
    m = record.measured(name)
    if m is None:
        return None
    sink = m.context.get("sink")
    for h in record.hosts:
        if h.get("name") == sink and h.get("rate_mbit"):
            return float(h["rate_mbit"]) * 1e6 / 8
    return None


def unloaded_round_trips_s(m: Measurement) -> list[float]:
    """Each round trip less the time its two ends waited for a core (the wall time alone
    where a record has no waits), never below a tenth of the wall time (a counter's jitter)."""
    ping_w = m.context.get("ping_wait_s") or []
    echo_w = m.context.get("echo_wait_s") or []
    if len(ping_w) != len(m.samples) or len(echo_w) != len(m.samples):
        return list(m.samples)
    return [max(w / 10, w - p - e) for w, p, e in zip(m.samples, ping_w, echo_w, strict=True)]


def latency_ratio(record: ProbeRecord) -> tuple[float, float] | None:
    """(low-quantile round trip over the configured one, log spread from that quantile to the
    quartile) of a record, None where it has no round trip or no configured delay."""
    m = record.measured("rtt_s")
    configured = m.context.get("configured_rtt_s") if m is not None else None
    if m is None or not configured or len(m.samples) < 2:
        return None
    cuts = statistics.quantiles(unloaded_round_trips_s(m), n=100, method="inclusive")
    low, quartile = cuts[round(RTT_QUANTILE * 100) - 1], cuts[24]
    return low / configured, math.log(quartile / low)


def connection_limit(record: ProbeRecord) -> list[float] | None:
    """One connection's rates (bytes/s) where several between the same hosts beat it in every
    round (the connection, not the NIC, is the limit), else None."""
    one = record.measured("tcp_connection_Bps")
    many = record.measured("tcp_host_aggregate_Bps")
    if one is None or many is None or len(one.samples) < 2 or len(many.samples) < 2:
        return None
    return list(one.samples) if min(many.samples) > max(one.samples) else None


def allreduce_bus_Bps(record: ProbeRecord) -> float | None:
    """The all-reduce's bus bandwidth for large messages: size over time's least-squares
    slope, the per-call fixed cost (intercept) apart; None with fewer than two sizes."""
    points = []
    for name, m in record.measurements.items():
        if name.startswith("allreduce_busbw_") and record.measured(name) is not None:
            size = float(m.context["size_bytes"])
            points.append((size, statistics.median(size / b for b in m.samples)))
    if len(points) < 2:
        return None
    slope = statistics.linear_regression([s for s, _ in points], [t for _, t in points]).slope
    return 1 / slope if slope > 0 else None


def simulated_push_ack_s(record: ProbeRecord, costs: CostModel) -> float | None:
    """What the simulator's own costs give the record's psrtt push and its ack, seconds (None
    where the record has no psrtt step or does not say its link): the configured round trip
    times ``latency_factor``, the push (its key and a header) at the usable rate of the slower
    NIC, the worker's and the server's message overheads, and the server's request, merge and
    update of the key (one pusher completes every round), as simscale.comm.ps.server has them."""
    m = record.measured("ps_push_ack_s")
    if m is None:
        return None
    ctx = m.context
    rates = [
        h.get("rate_mbit")
        for h in record.hosts
        if h.get("name") in (ctx.get("from"), ctx.get("to"))
    ]
    if not ctx.get("configured_rtt_s") or len(rates) != 2 or not all(rates):
        return None
    nbytes = float(ctx["key_bytes"])
    wire_Bps = min(float(r) for r in rates) * 1e6 / 8 * costs.bandwidth_factor
    cpu_s = (
        2 * costs.message_overhead_us * 1e-6
        + costs.server_request_us * 1e-6
        + nbytes * (costs.server_merge_ns_per_byte + costs.server_update_ns_per_byte) * 1e-9
    )
    return (
        float(ctx["configured_rtt_s"]) * costs.latency_factor
        + (nbytes + HEADER_BYTES) / wire_Bps
        + cpu_s
    )


def stack_quantiles_us(records: Sequence[ProbeRecord], costs: CostModel) -> tuple[float, ...]:
    """Per message each way, microseconds: the records' psrtt round trips less what ``costs``
    give them, never below 0, pooled and halved, at ``STACK_QUANTILES`` evenly spaced
    probabilities (empty where no record has a psrtt step it can use)."""
    excess: list[float] = []
    for r in records:
        modelled = simulated_push_ack_s(r, costs)
        if modelled is not None:
            excess += [max(0.0, x - modelled) for x in r.measured("ps_push_ack_s").samples]
    if len(excess) < 2:
        return ()
    k = STACK_QUANTILES
    cuts = np.quantile(np.asarray(excess) / 2, [(i + 0.5) / k for i in range(k)])
    return tuple(round(float(c) * 1e6, 1) for c in cuts)


def probe_values(records: Sequence[ProbeRecord]) -> tuple[dict[str, float], dict[str, float]]:
    """Profile values and their 1-sigma of log(value), from the records' measurements."""
    values: dict[str, float] = {}
    sigma: dict[str, float] = {}
    ratios = []
    for r in records:
        nominal = _nominal_Bps(r, "tcp_connection_Bps")
        m = r.measured("tcp_connection_Bps")
        if nominal and m is not None:
            ratios += [s / nominal for s in m.samples]
    if ratios:
        values["bandwidth_factor"] = min(1.0, statistics.median(ratios))
        sigma["bandwidth_factor"] = _log_sd(ratios)
    rtt = [latency_ratio(r) for r in records]
    rtt_ratios = [x for x in rtt if x is not None]
    if rtt_ratios:
        values["latency_factor"] = statistics.median(r for r, _ in rtt_ratios)
        between = _log_sd([r for r, _ in rtt_ratios])
        within = statistics.median(w for _, w in rtt_ratios)
        sigma["latency_factor"] = max(within, between) if math.isfinite(between) else within
    limited = [x for r in records for x in (connection_limit(r) or [])]
    if limited:
        values["connection_gbps"] = statistics.median(limited) * 8 / 1e9
        sigma["connection_gbps"] = _log_sd(limited)
    ceilings = []
    for r in records:
        bus, one = allreduce_bus_Bps(r), r.measured("tcp_connection_Bps")
        if bus is not None and one is not None and bus < min(one.samples):
            ceilings.append(bus)
    if ceilings:
        values["socket_host_gbps"] = statistics.median(ceilings) * 8 / 1e9
        if len(ceilings) > 1:
            sigma["socket_host_gbps"] = _log_sd(ceilings)
    shares = _samples(records, "incast_share_log_deviation")
    if len(shares) > 1:
        values["tcp_share_sigma"] = math.sqrt(statistics.fmean(x * x for x in shares))
        sigma["tcp_share_sigma"] = 1 / math.sqrt(2 * (len(shares) - 1))
    send = _samples(records, "sender_message_us")
    push = _samples(records, "server_push_message_us")
    merge = _samples(records, "server_merge_ns_per_byte")
    final = _samples(records, "server_merge_update_ns_per_byte")
    if send:
        values["message_overhead_us"] = max(MIN_US, statistics.median(send))
        sigma["message_overhead_us"] = _log_sd(send)
    if push and send:
        values["server_request_us"] = max(MIN_US, statistics.median(push) - statistics.median(send))
        sigma["server_request_us"] = _log_sd(push)
    if merge:
        values["server_merge_ns_per_byte"] = max(0.005, statistics.median(merge))
        sigma["server_merge_ns_per_byte"] = _log_sd([m for m in merge if m > 0])
    if merge and final:
        values["server_update_ns_per_byte"] = max(
            0.005, statistics.median(final) - statistics.median(merge)
        )
        sigma["server_update_ns_per_byte"] = _log_sd([f for f in final if f > 0])
    return values, {k: v for k, v in sigma.items() if math.isfinite(v)}


def calibrate_probe(paths: Sequence[str | Path], scope: str | None = None) -> Profile:
    """A profile from one or more probe records (several host shapes pool their ratios)."""
    try:
        records = [load_probe(p) for p in paths]
    except ProbeRecordError as e:
        raise CalibrationError(str(e)) from None
    values, sigma = probe_values(records)
    if not values:
        raise CalibrationError(
            f"{', '.join(map(str, paths))}: no measurement a profile key comes from"
        )
    costs = CostModel().with_values(**values)
    stack = stack_quantiles_us(records, costs)
    if stack:
        costs = costs.with_values(message_stack_quantiles_us=stack)
    devices = (
        ()
        if scope is None or scope.strip().lower() == "all"
        else tuple(d.strip() for d in scope.split(",") if d.strip())
    )
    return Profile(
        schema_version=PROFILE_SCHEMA_VERSION,
        costs=costs,
        scope=devices,
        fit=FitInfo(
            date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            records=tuple(hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths),
            parameters=tuple(values),
            uncertainty=sigma,
            method="measured by realrun probe (calibration/probe_profile.py), no training run",
        ),
        description=f"from probe records {', '.join(Path(p).name for p in paths)} "
        f"({', '.join(sorted({r.launcher for r in records}))})",
    )
