"""Measured timelines: the spans realrun's workers record, shipped to the launcher and written
in the simulator's Chrome-trace / Perfetto layout (``simscale.report.trace``), so a measured
iteration opens beside the predicted one.

Clocks: every worker reads its clock just after the job-wide barrier before training and
reports the reading with its hostname. Workers on worker 0's machine (local and emulated
clusters) share its clock and are left alone; a worker on another machine is shifted by the
difference of the two readings, which is right within the barrier's exit skew (about one
network latency). Asked for with ``realrun run --trace FILE`` or ``REALRUN_TRACE_DIR=DIR``
(then ``DIR/<record name>.trace.json``, beside the message traces of ``realrun.ps.msgtrace``);
the job tells its workers with ``REALRUN_TRACE=1``.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from realrun.ps.msgtrace import TRACE_DIR_VARIABLE  # one folder for every trace of a run
from simscale.report.trace import PhaseSpan, write_trace

RANK_TRACE_VARIABLE = "REALRUN_TRACE"
WAIT_THREAD = "wait for weights"  # a worker's waits happen inside its forward: own thread


def trace_path(explicit: str | Path | None, record_path: Path) -> Path | None:
    """Where the run's timeline goes: ``--trace``, else ``$REALRUN_TRACE_DIR``, else nowhere."""
    if explicit is not None:
        return Path(explicit)
    directory = os.environ.get(TRACE_DIR_VARIABLE)
    if directory:
        return Path(directory) / f"{record_path.stem}.trace.json"
    return None


def rank_tracing() -> bool:
    """Whether the job asked this rank for its spans."""
    return os.environ.get(RANK_TRACE_VARIABLE) == "1"


class SpanRecorder:
    """One worker's measured spans, on threads of process ``worker<rank>``."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.spans: list[PhaseSpan] = []
        self.barrier_exit_unix_s: float | None = None

    def add(self, thread: str, name: str, start: float, end: float, it: int, **args: Any) -> None:
        """A span on ``thread`` ("" is the compute thread), wall-clock seconds."""
        track = f"worker{self.rank} {thread}".rstrip()
        self.spans.append(PhaseSpan(track, name, start, end, it, args))

    def clock_reference(self) -> None:
        """Call just after a barrier every worker passes: the reading that aligns clocks."""
        self.barrier_exit_unix_s = time.time()

    def report(self) -> dict[str, Any]:
        """The body of this worker's ``trace`` report."""
        return {
            "hostname": socket.gethostname(),
            "barrier_exit_unix_s": self.barrier_exit_unix_s,
            "spans": [asdict(s) for s in self.spans],
        }


def merge(reports: dict[int, dict[str, Any]]) -> list[PhaseSpan]:
    """Every worker's spans on worker 0's clock (see the module docstring)."""
    if not reports:
        return []
    ref = reports.get(0) or reports[min(reports)]
    spans: list[PhaseSpan] = []
    for body in reports.values():
        shift = 0.0
        mine, theirs = body.get("barrier_exit_unix_s"), ref.get("barrier_exit_unix_s")
        if body.get("hostname") != ref.get("hostname") and mine is not None and theirs is not None:
            shift = float(mine) - float(theirs)
        for s in from_report(body.get("spans", [])):
            spans.append(dataclasses.replace(s, start_s=s.start_s - shift, end_s=s.end_s - shift))
    return spans


def from_report(items: Iterable[dict[str, Any]]) -> list[PhaseSpan]:
    return [
        PhaseSpan(
            str(d["track"]),
            str(d["name"]),
            float(d["start_s"]),
            float(d["end_s"]),
            int(d["iteration"]),
            dict(d.get("args") or {}),
        )
        for d in items
    ]


def write_measured(
    path: Path, spans: list[PhaseSpan], iteration: int, name: str
) -> tuple[Path, int]:
    """Write the spans of ``iteration`` (the last one recorded if the run stopped before it);
    returns the path and the iteration written."""
    recorded = {s.iteration for s in spans}
    if iteration not in recorded and recorded:
        iteration = max(recorded)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_trace(path, spans, iteration, f"{name} (measured)")
    return path, iteration
