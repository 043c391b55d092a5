"""One iteration as a Chrome-trace / Perfetto timeline (open in ui.perfetto.dev), predicted by
the simulator or measured by realrun, in one layout so the two open side by side.

Layout: one process per worker (``worker3``); inside it a ``compute`` thread (forward,
backward, waits for weights), an ``allreduce buffers`` thread (fused collectives) and one thread
per key (``key 12``) whose spans are the phases of that key's round trip, one after the other:

- parameter server: ``reduce`` (sum over the host's GPUs), ``push`` (until this worker's push
  of the last slice reached its server), ``update`` (the server's merge and optimizer update,
  which in sync mode includes waiting for the other workers' pushes), ``pull`` (until the last
  slice's new weights are back), ``broadcast`` (copied back to the GPUs);
- all-reduce: ``negotiate`` (until every worker has the gradient and the cycle fuses it),
  ``allreduce`` (its fused buffer's collective), and, measured, ``update``.

A key's phases are consecutive by construction and a key is not sent again before its forward
consumed it, so no two spans of one thread overlap (tests check it); the old layout put every
key of a worker on one thread, where in-flight keys overlapped and Perfetto drew them wrongly.
Spans carry the wall or simulated time in seconds; each trace starts at the iteration's first
span.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

PS_PHASES = ("reduce", "push", "update", "pull", "broadcast")
ALLREDUCE_PHASES = ("negotiate", "allreduce", "update")
COMPUTE_THREAD = "compute"
BUFFER_THREAD = "allreduce buffers"


class SpanLike(Protocol):
    """What a timeline needs of a span (``simscale.model.worker.Span``, realrun's measured
    spans)."""

    track: str  # "<process> [<thread>]", e.g. "worker0" (its compute) or "worker0 key 5"
    name: str
    start_s: float
    end_s: float
    iteration: int


@dataclass(frozen=True)
class PhaseSpan:
    """A span built here (key phases, fused buffers), with optional arguments for the UI."""

    track: str
    name: str
    start_s: float
    end_s: float
    iteration: int
    args: dict[str, Any] = field(default_factory=dict)


def key_track(worker: int, key: int) -> str:
    return f"worker{worker} key {key}"


class KeyPhases:
    """The simulator's hook for per-key timelines: when each phase of each (worker, iteration,
    key) began, the latest over the key's slices, and the fused all-reduce buffers.

    Marks come from the protocol (``mark``), the servers (``updated``) and the all-reduce
    coordinator (``buffer``); the end of a key's round trip is the worker's own ``key N`` span.
    """

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.starts: dict[tuple[int, int, int], dict[str, float]] = {}
        self.buffers: list[PhaseSpan] = []

    def mark(self, worker: int, it: int, key: int, phase: str, t: float) -> None:
        marks = self.starts.setdefault((worker, it, key), {})
        marks[phase] = max(marks.get(phase, t), t)

    def updated(self, it: int, key: int, worker: int | None, t: float) -> None:
        """A server finished a slice's update: for ``worker`` (async), or for all (sync)."""
        for w in range(self.workers) if worker is None else (worker,):
            self.mark(w, it, key, "pull", t)

    def buffer(self, keys: Sequence[tuple[int, int]], nbytes: float, start: float, end: float):
        """A fused all-reduce of ``keys`` ((iteration, key) pairs) ran from start to end."""
        it = min(i for i, _ in keys)
        for w in range(self.workers):
            self.buffers.append(
                PhaseSpan(
                    f"worker{w} {BUFFER_THREAD}",
                    f"allreduce {len(keys)} keys",
                    start,
                    end,
                    it,
                    {"keys": [k for _, k in keys], "bytes": nbytes},
                )
            )
            for i, k in keys:
                self.mark(w, i, k, "allreduce", start)

    def spans(self, spans: Iterable[SpanLike]) -> list[SpanLike]:
        """``spans`` with each worker's overlapping ``key N`` communication spans replaced by
        that key's consecutive phases on its own track."""
        out: list[SpanLike] = []
        for s in spans:
            worker, _, rest = s.track.partition(" ")
            if rest != "comm" or not s.name.startswith("key "):
                out.append(s)
                continue
            rank, key = int(worker.removeprefix("worker")), int(s.name.split()[1])
            marks = {"start": s.start_s, **self.starts.get((rank, s.iteration, key), {})}
            out += consecutive(key_track(rank, key), s.iteration, marks, s.end_s)
        return out + list(self.buffers)


def consecutive(
    track: str, iteration: int, starts: dict[str, float], end_s: float
) -> list[PhaseSpan]:
    """Spans from each phase's start to the next one's (the last to ``end_s``), in the order
    the phases happen; a phase without a mark is folded into the one before, empty ones are
    left out, and times are made non-decreasing so the spans never overlap."""
    order = ["start", *PS_PHASES, *(p for p in ALLREDUCE_PHASES if p not in PS_PHASES)]
    marks = sorted(((order.index(p), p, t) for p, t in starts.items()), key=lambda m: m[0])
    spans: list[PhaseSpan] = []
    cursor = marks[0][2]
    names = [p if p != "start" else _first_phase(starts) for _, p, _ in marks]
    bounds = [t for _, _, t in marks[1:]] + [end_s]
    for name, bound in zip(names, bounds, strict=True):
        stop = max(cursor, min(bound, end_s))
        if stop > cursor:
            spans.append(PhaseSpan(track, name, cursor, stop, iteration))
        cursor = stop
    return spans


def _first_phase(starts: dict[str, float]) -> str:
    """The name of the time between the key's start and its first marked phase."""
    if "negotiate" in starts or "allreduce" in starts:
        return "negotiate"
    return "reduce"


def chrome_trace(spans: Iterable[SpanLike], iteration: int, name: str = "") -> dict[str, Any]:
    """Trace-event JSON of the spans of ``iteration``: a process per worker, a thread per
    track (see the module docstring)."""
    chosen = [s for s in spans if s.iteration == iteration]
    threads = sorted({_split(s.track) for s in chosen}, key=_thread_order)
    processes = sorted({p for p, _ in threads}, key=_number)
    pid = {p: i for i, p in enumerate(processes)}
    tid = {t: i for i, t in enumerate(threads)}
    t0 = min((s.start_s for s in chosen), default=0.0)
    label = name or "simscale"
    events: list[dict[str, Any]] = []
    for p, i in pid.items():
        events.append({"ph": "M", "pid": i, "name": "process_name", "args": {"name": p}})
        events.append({"ph": "M", "pid": i, "name": "process_labels", "args": {"labels": label}})
        events.append(
            {"ph": "M", "pid": i, "name": "process_sort_index", "args": {"sort_index": i}}
        )
    for (p, t), i in tid.items():
        events.append(
            {"ph": "M", "pid": pid[p], "tid": i, "name": "thread_name", "args": {"name": t}}
        )
        events.append(
            {
                "ph": "M",
                "pid": pid[p],
                "tid": i,
                "name": "thread_sort_index",
                "args": {"sort_index": i},
            }
        )
    for s in sorted(chosen, key=lambda s: (tid[_split(s.track)], s.start_s)):
        process, thread = _split(s.track)
        # Whole nanoseconds, start and end each rounded once: Perfetto's importer rounds ts and
        # dur to ns separately (llround(us * 1000)), which turned back-to-back spans into 1 ns
        # overlaps; rounding is monotonic, so spans disjoint in seconds stay disjoint in ns, and
        # ns / 1000 reads back as the same ns.
        start_ns = round((s.start_s - t0) * 1e9)
        end_ns = max(start_ns, round((s.end_s - t0) * 1e9))
        event = {
            "ph": "X",
            "pid": pid[process],
            "tid": tid[(process, thread)],
            "name": s.name,
            "cat": s.name.split(" ")[0],
            "ts": start_ns / 1000,
            "dur": (end_ns - start_ns) / 1000,
        }
        args = getattr(s, "args", None)
        if args:
            event["args"] = args
        events.append(event)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"source": label}}


def write_trace(
    path: str | Path, spans: Iterable[SpanLike], iteration: int, name: str = ""
) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(chrome_trace(spans, iteration, name)), encoding="utf-8")


def combine(traces: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Several traces in one, each one's processes renamed ``"<label>: worker0"`` and placed
    after the previous one's: a predicted and a measured iteration, both starting at 0, one
    above the other in one Perfetto view. ValueError names a label whose trace is not one."""
    events: list[dict[str, Any]] = []
    offset = 0
    for label, trace in traces:
        found = trace.get("traceEvents") if isinstance(trace, dict) else None
        if not isinstance(found, list):
            raise ValueError(f"{label}: not a Chrome trace (no traceEvents list)")
        source = str(trace.get("otherData", {}).get("source", "")) or label
        pids = sorted({int(e.get("pid", 0)) for e in found if isinstance(e, dict)})
        new_pid = {p: offset + i for i, p in enumerate(pids)}
        for e in found:
            e = dict(e, pid=new_pid[int(e.get("pid", 0))])
            if e.get("ph") == "M" and e.get("name") == "process_name":
                e["args"] = {"name": f"{source}: {e['args']['name']}"}
            elif e.get("ph") == "M" and e.get("name") == "process_sort_index":
                e["args"] = {"sort_index": e["pid"]}
            events.append(e)
        offset += len(pids)
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def simulation_spans(sim: Any) -> list[SpanLike]:
    """A traced ``Simulation``'s spans, keys split into phases on their own tracks."""
    assert sim.spans is not None, "run the Simulation with trace=True"
    phases = getattr(sim, "key_phases", None)
    return phases.spans(sim.spans) if phases is not None else list(sim.spans)


def overlapping(trace: dict[str, Any], tolerance_us: float = 1e-3) -> list[tuple[dict, dict]]:
    """Pairs of complete events on one thread where the second starts before the first ends."""
    by_thread: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    found = []
    for events in by_thread.values():
        events.sort(key=lambda e: e["ts"])
        for a, b in itertools.pairwise(events):
            if b["ts"] < a["ts"] + a["dur"] - tolerance_us:
                found.append((a, b))
    return found


def perfetto_ns(us: float) -> int:
    """A trace time in µs as Perfetto's JSON importer stores it: ``llround(us * 1000)`` ns."""
    return math.floor(us * 1000 + 0.5) if us >= 0 else -math.floor(-us * 1000 + 0.5)


def overlapping_in_perfetto(trace: dict[str, Any]) -> list[tuple[dict, dict]]:
    """``overlapping`` with no tolerance, on ts and dur each rounded to whole ns as Perfetto
    rounds them."""
    by_thread: dict[tuple[int, int], list[tuple[int, int, dict[str, Any]]]] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X":
            start, dur = perfetto_ns(e["ts"]), perfetto_ns(e["dur"])
            by_thread.setdefault((e["pid"], e["tid"]), []).append((start, start + dur, e))
    found = []
    for events in by_thread.values():
        events.sort(key=lambda x: x[0])
        for (_, end_a, a), (start_b, _, b) in itertools.pairwise(events):
            if start_b < end_a:
                found.append((a, b))
    return found


def _split(track: str) -> tuple[str, str]:
    """``"worker0 key 5"`` -> ("worker0", "key 5"); ``"worker0"`` -> ("worker0", "compute")."""
    process, _, thread = track.partition(" ")
    return process, thread or COMPUTE_THREAD


def _number(text: str) -> tuple[int, str]:
    digits = "".join(ch for ch in text if ch.isdigit())
    return (int(digits) if digits else -1, text)


def _thread_order(thread: tuple[str, str]) -> tuple[tuple[int, str], int, tuple[int, str]]:
    process, name = thread
    rank = {COMPUTE_THREAD: 0, BUFFER_THREAD: 1}.get(name, 2)
    return _number(process), rank, _number(name)
