"""Measured timelines: the spans realrun's ranks record, shipped to the launcher and written
in the simulator's Chrome-trace / Perfetto layout (``simscale.trace``), so a measured iteration
opens beside the predicted one.

Each rank puts its spans on rank 0's clock before sending them (the all-reduce trainer reads
every clock just after a barrier), so the merged file needs no further alignment. Asked for
with ``realrun run --trace FILE`` or ``REALRUN_TRACE_DIR=DIR`` (then ``DIR/<record name>.trace.
json``); the job tells its ranks with ``REALRUN_TRACE=1``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from simscale.trace import PhaseSpan, write_trace

TRACE_DIR_VARIABLE = "REALRUN_TRACE_DIR"
RANK_TRACE_VARIABLE = "REALRUN_TRACE"


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


def to_report(spans: Iterable[PhaseSpan]) -> list[dict[str, Any]]:
    return [asdict(s) for s in spans]


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
