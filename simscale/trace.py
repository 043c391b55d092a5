"""One measured iteration as a Chrome-trace / Perfetto timeline (open in ui.perfetto.dev)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simscale.worker import Span


def chrome_trace(spans: list[Span], iteration: int, name: str = "") -> dict[str, Any]:
    """Trace-event JSON of the spans of ``iteration``: one thread per worker and its comms."""
    chosen = [s for s in spans if s.iteration == iteration]
    tracks = sorted({s.track for s in chosen}, key=_track_order)
    tid = {t: i for i, t in enumerate(tracks)}
    t0 = min((s.start_s for s in chosen), default=0.0)
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 0, "name": "process_name", "args": {"name": name or "simscale"}}
    ]
    events += [
        {"ph": "M", "pid": 0, "tid": i, "name": "thread_name", "args": {"name": t}}
        for t, i in tid.items()
    ]
    for s in chosen:
        events.append(
            {
                "ph": "X",
                "pid": 0,
                "tid": tid[s.track],
                "name": s.name,
                "cat": s.name.split(" ")[0],
                "ts": (s.start_s - t0) * 1e6,
                "dur": max(0.0, (s.end_s - s.start_s) * 1e6),
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_trace(path: str | Path, spans: list[Span], iteration: int, name: str = "") -> None:
    Path(path).write_text(json.dumps(chrome_trace(spans, iteration, name)), encoding="utf-8")


def _track_order(track: str) -> tuple[int, str]:
    digits = "".join(ch for ch in track.split(" ")[0] if ch.isdigit())
    return (int(digits) if digits else -1, track)
