"""From probe records (``realrun probe``) to a profile: measured costs, no training run.

Each profile key comes from one measurement, bottom-up (design.md's calibration order):

- ``bandwidth_factor``: one TCP connection's rate over its NIC's nominal rate (the simulator
  gives a lone flow its NIC's capacity times this factor);
- ``latency_factor``: the measured small-message round trip over the configured one;
- ``tcp_share_sigma``: the standard deviation of the log of the incast senders' shares within
  a round (a busy period, as the simulator draws its share weights);
- ``message_overhead_us``: the sender's CPU per small message (realrun's Van);
- ``server_request_us``: the server's CPU per small push, less the ack it sends (which the
  simulator charges as a message overhead);
- ``server_merge_ns_per_byte`` / ``server_update_ns_per_byte``: per byte of a push that does
  not complete the round, and the extra of one that does (the optimizer update).

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

from calibration.errors import CalibrationError
from realrun.records.probe_record import ProbeRecord, ProbeRecordError, load_probe
from simscale.spec.costs import CostModel
from simscale.spec.profile import PROFILE_SCHEMA_VERSION, FitInfo, Profile

MIN_US = 0.5  # calibration/fit.py's lower bound of a per-message cost


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
    rtt_ratios = []
    for r in records:
        m = r.measured("rtt_s")
        configured = m.context.get("configured_rtt_s") if m is not None else None
        if m is not None and configured:
            rtt_ratios += [s / configured for s in m.samples]
    if rtt_ratios:
        values["latency_factor"] = statistics.median(rtt_ratios)
        sigma["latency_factor"] = _log_sd(rtt_ratios)
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
