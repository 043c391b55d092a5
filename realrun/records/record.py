"""The run record: one JSON file per real run, the contract between realrun and calibration.

It holds the full scenario, the environment it ran in, every worker's timing of every
iteration, and a summary over the measured iterations (after warm-up). ``load_record`` checks
the schema version and the shape of every field, so calibration fails on a bad file with a
message naming the field instead of fitting nonsense.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

from realrun import safejson
from realrun.safejson import JsonLimitError

SCHEMA_VERSION = 1
# How a parameter-server record's workers ordered each key's pull before realrun honoured
# ``kvstore.pull_request``: pipelined behind the push, whatever the scenario said (every record
# whose environment has no ``pull_request``, runs/emulated-v2's among them).
PULL_REQUEST_BEFORE = "with_push"
# How a record's workers sent before realrun honoured ``kvstore.scheduling``: by priority, with
# its 256 KiB window per server (realrun.ps.postoffice.DEFAULT_WINDOW_BYTES), whatever the
# scenario said (every record whose environment has no ``scheduling``: runs/emulated-v2's, and
# benchmarks/results/mxnet_emulated*.csv's realrun rows before it).
SCHEDULING_BEFORE = ("priority", 0.25)


class RecordError(ValueError):
    """A run record that does not follow the schema; the message names the field."""


@dataclass(frozen=True)
class IterationTiming:
    """One worker's iteration: wall-clock start, time computing, time blocked on pulls."""

    worker: int
    iteration: int
    start_unix_s: float  # time.time() at the start, to line workers up
    compute_s: float  # forward + backward + pushing (everything but waiting)
    wait_s: float  # blocked on pulled weights before a layer's forward (exposed communication)
    total_s: float
    loss: float | None  # None when compute was emulated (nothing was trained)


@dataclass(frozen=True)
class Summary:
    """Throughput over the measured iterations (iteration index >= warm-up)."""

    measured_iterations: int
    samples_per_s: float  # all workers together
    samples_per_s_per_worker: tuple[float, ...]
    mean_iteration_s: float
    median_iteration_s: float
    mean_wait_s: float
    # Emulated clusters run links and compute this many times slower; every time above is
    # already divided by it (emulated-cluster time), the iterations keep the wall clock.
    time_dilation: float = 1.0


@dataclass(frozen=True)
class RunRecord:
    """Everything one run measured; ``complete`` is False for a failed or interrupted run."""

    schema_version: int
    scenario: dict[str, Any]
    environment: dict[str, Any]
    iterations: tuple[IterationTiming, ...]
    summary: Summary | None
    complete: bool
    error: str | None = None
    started_unix_s: float = 0.0
    wall_s: float = 0.0
    # False when this machine, not the emulated cluster, limited the run (CPU saturated, a
    # delay wire behind): the timings are then not the scenario's and must not be fitted.
    valid: bool = True
    invalid_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(
    iterations: Sequence[IterationTiming],
    warmup: int,
    samples_per_iteration: Sequence[int],
    time_dilation: float = 1.0,
) -> Summary | None:
    """Per-worker throughput = its samples per iteration / its mean measured iteration time.

    ``samples_per_iteration[w]`` is worker w's batch (batch per GPU x its GPUs). None when no
    worker has a measured iteration yet.
    """
    measured = [t for t in iterations if t.iteration >= warmup]
    if not measured:
        return None
    d = time_dilation
    per_worker = []
    counts = []
    for w, samples in enumerate(samples_per_iteration):
        mine = [t.total_s / d for t in measured if t.worker == w]
        counts.append(len(mine))
        per_worker.append(samples / statistics.fmean(mine) if mine else 0.0)
    totals = [t.total_s / d for t in measured]
    return Summary(
        measured_iterations=min(counts),
        samples_per_s=sum(per_worker),
        samples_per_s_per_worker=tuple(per_worker),
        mean_iteration_s=statistics.fmean(totals),
        median_iteration_s=statistics.median(totals),
        mean_wait_s=statistics.fmean(t.wait_s / d for t in measured),
        time_dilation=d,
    )


def write_record(record: RunRecord, path: str | Path) -> Path:
    """Write atomically (temporary file + rename): a reader never sees half a record."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record.to_dict(), f, indent=1, allow_nan=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# A record of 64 workers x 10,000 iterations is about 100 MB; the committed ones are ~50 kB.
MAX_RECORD_BYTES = 256_000_000
# The record nests 3 levels; its scenario 5 and its environment a few more (machine load,
# link shaping). Far deeper is not a record, and must not reach Python's recursion limit.
MAX_RECORD_DEPTH = 32


def load_record(path: str | Path) -> RunRecord:
    """Read and validate a record; RecordError names the first bad field."""
    try:
        p = Path(path)
        if p.stat().st_size > MAX_RECORD_BYTES:
            raise JsonLimitError(
                f"{p.stat().st_size:,} bytes, expected at most {MAX_RECORD_BYTES:,}"
            )
        data = safejson.loads(
            p.read_bytes(), max_bytes=MAX_RECORD_BYTES, max_depth=MAX_RECORD_DEPTH
        )
    except (OSError, JsonLimitError) as e:
        raise RecordError(f"{path}: cannot read a JSON run record: {e}") from None
    try:
        return record_from_dict(data)
    except RecordError as e:
        raise RecordError(f"{path}: {e}") from None


def record_from_dict(data: Any) -> RunRecord:
    _expect(data, dict, "record")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise RecordError(f"schema_version is {version!r}, this code reads {SCHEMA_VERSION}")
    _require(data, RunRecord, "record")
    _expect(data["scenario"], dict, "scenario")
    _expect(data["environment"], dict, "environment")
    _expect(data["iterations"], list, "iterations")
    _expect(data["complete"], bool, "complete")
    if data.get("error") is not None:
        _expect(data["error"], str, "error")
    iterations = []
    for i, row in enumerate(data["iterations"]):
        where = f"iterations[{i}]"
        _expect(row, dict, where)
        _require(row, IterationTiming, where)
        for name in ("worker", "iteration"):
            _expect(row[name], int, f"{where}.{name}")
            if row[name] < 0:
                raise RecordError(f"{where}.{name} is {row[name]}, expected >= 0")
        for name in ("start_unix_s", "compute_s", "wait_s", "total_s"):
            _number(row[name], f"{where}.{name}")
        if row["loss"] is not None:
            _number(row["loss"], f"{where}.loss")
        for name in ("compute_s", "wait_s", "total_s"):
            if row[name] < 0:
                raise RecordError(f"{where}.{name} is {row[name]}, expected >= 0")
        iterations.append(IterationTiming(**row))
    summary = None
    if data.get("summary") is not None:
        s = data["summary"]
        _expect(s, dict, "summary")
        _require(s, Summary, "summary")
        _expect(s["measured_iterations"], int, "summary.measured_iterations")
        for name in (
            "samples_per_s",
            "mean_iteration_s",
            "median_iteration_s",
            "mean_wait_s",
        ):
            _number(s[name], f"summary.{name}")
        _number(s.setdefault("time_dilation", 1.0), "summary.time_dilation")
        if s["time_dilation"] < 1:
            raise RecordError(f"summary.time_dilation is {s['time_dilation']}, expected >= 1")
        _expect(s["samples_per_s_per_worker"], list, "summary.samples_per_s_per_worker")
        for j, v in enumerate(s["samples_per_s_per_worker"]):
            _number(v, f"summary.samples_per_s_per_worker[{j}]")
        summary = Summary(**{**s, "samples_per_s_per_worker": tuple(s["samples_per_s_per_worker"])})
    elif data["complete"]:
        raise RecordError("summary is missing, but the run is marked complete")
    for name in ("started_unix_s", "wall_s"):
        _number(data.get(name, 0.0), name)
    _expect(data.get("valid", True), bool, "valid")
    if data.get("invalid_reason") is not None:
        _expect(data["invalid_reason"], str, "invalid_reason")
    return RunRecord(
        SCHEMA_VERSION,
        _as_ran(data["scenario"], data["environment"]),
        data["environment"],
        tuple(iterations),
        summary,
        data["complete"],
        data.get("error"),
        float(data.get("started_unix_s", 0.0)),
        float(data.get("wall_s", 0.0)),
        data.get("valid", True),
        data.get("invalid_reason"),
    )


def _as_ran(scenario: dict[str, Any], environment: dict[str, Any]) -> dict[str, Any]:
    """The scenario with the pull ordering and send scheduling its workers really used: a
    record written before realrun honoured ``kvstore.pull_request`` says the field's default,
    ``after_ack``, yet pipelined its pulls (``PULL_REQUEST_BEFORE``); one written before it
    honoured ``kvstore.scheduling`` sent by priority with a window (``SCHEDULING_BEFORE``)."""
    kv = scenario.get("kvstore")
    ps_job = isinstance(kv, dict) and str(kv.get("mode", "dist_sync")).startswith("dist_")
    if not ps_job:
        return scenario
    assert isinstance(kv, dict)
    ran = dict(kv)
    if "pull_request" not in environment:
        ran["pull_request"] = PULL_REQUEST_BEFORE
    if "scheduling" not in environment:
        ran["scheduling"], ran["send_window_mb"] = SCHEDULING_BEFORE
    return scenario if ran == kv else {**scenario, "kvstore": ran}


def _require(data: dict, cls: type, where: str) -> None:
    names = {f.name for f in fields(cls)}
    required = {
        f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
    }
    missing = sorted(required - data.keys())
    if missing:
        raise RecordError(f"{where} lacks field(s) {', '.join(missing)}")
    unknown = sorted(data.keys() - names)
    if unknown:
        raise RecordError(f"{where} has unknown field(s) {', '.join(unknown)}")


def _expect(value: Any, kind: type, where: str) -> None:
    # bool is an int in Python; a count given as true/false is still wrong.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise RecordError(f"{where} is {type(value).__name__}, expected {kind.__name__}")


def _number(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RecordError(f"{where} is {value!r}, expected a finite number")
