"""Was this machine, rather than the emulated cluster, the bottleneck of a run?

An emulated cluster shares this machine's cores between every emulated host, the servers and
the delay wires. When they are saturated, iterations get slower for a reason the scenario does
not contain, and the record would be silently wrong. ``LoadSampler`` reads, in a background
thread of the launcher, ``/proc/stat`` (all cores) and, for every process of the cluster (nodes
and delay wires), the CPU time and run-queue delay of each of its threads from
``/proc/PID/task/*/schedstat``: the time a thread was ready to run but had no core.
``verdict`` turns the samples of the measured iterations into figures and a ruling. A run is
invalid when

- the cluster's own processes used more than 85% of all cores (the machine was the limit), or
- a thread of a node waited for a core more than 10% of the measured time (whoever took the
  cores: this run, or another program on the machine), or
- a delay wire used more than 85% of its one core (it could not keep up with its link), or
- memory ran out.

All-core busy share is recorded too, but another program's load alone does not invalidate a
run: only the delay it caused to the cluster's processes does.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SAMPLE_INTERVAL_S = 0.25
# Share of all cores the cluster's own processes may use: past it, run queues form and an
# emulated host's process waits for a core, not for its network.
MAX_CPU_BUSY = 0.85
# Share of the measured time one thread of the cluster may have waited, runnable, for a core: a
# node's thread on the critical path that waited this long stretched the iteration as much.
MAX_RUN_DELAY_SHARE = 0.10
# A delay wire is one Python thread: above this share of one core it cannot keep up with its
# frames and adds delay the scenario does not have.
MAX_WIRE_CORE_SHARE = 0.85
# Below this fraction of memory available the kernel reclaims and swaps: timings are off.
MIN_MEMORY_AVAILABLE = 0.05
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class LoadSample:
    """Cumulative counters at one moment."""

    unix_s: float
    busy_ticks: int  # all cores: user+nice+system+irq+softirq+steal
    total_ticks: int  # all cores, idle and iowait included
    wire_ticks: dict[int, int]  # delay-wire pid -> its utime+stime
    mem_available_fraction: float
    # thread id -> (CPU ns, run-queue delay ns), of the nodes and of the delay wires
    sched_ns: dict[int, tuple[int, int]] = field(default_factory=dict)
    wire_sched_ns: dict[int, tuple[int, int]] = field(default_factory=dict)


def read_cpu_ticks(stat: str | None = None) -> tuple[int, int]:
    """(busy, total) jiffies over all cores from the first line of /proc/stat."""
    line = (stat if stat is not None else Path("/proc/stat").read_text()).splitlines()[0]
    fields = [int(v) for v in line.split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def process_ticks(pid: int) -> int | None:
    """utime+stime of ``pid`` in jiffies, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may contain spaces
    return int(fields[11]) + int(fields[12])


def thread_schedstats(pid: int) -> dict[int, tuple[int, int]]:
    """Per thread of ``pid``: (CPU ns, run-queue delay ns); empty once it is gone."""
    found = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            fields = (task / "schedstat").read_text().split()
        except OSError:
            continue  # a thread that just ended
        found[int(task.name)] = (int(fields[0]), int(fields[1]))
    return found


def mem_available_fraction() -> float:
    info = dict(
        line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line
    )
    total = int(info["MemTotal"].split()[0])
    return int(info["MemAvailable"].split()[0]) / total if total else 1.0


class LoadSampler:
    """Samples machine load every ``interval_s`` in a daemon thread until ``stop()``."""

    def __init__(
        self,
        wire_pids: Callable[[], Sequence[int]],
        node_pids: Callable[[], Sequence[int]] = tuple,
        interval_s: float = SAMPLE_INTERVAL_S,
    ) -> None:
        self.wire_pids = wire_pids
        self.node_pids = node_pids
        self.interval_s = interval_s
        self.samples: list[LoadSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-sampler", daemon=True)

    def start(self) -> LoadSampler:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        self.sample()

    def sample(self) -> None:
        busy, total = read_cpu_ticks()
        wires = {}
        for pid in self.wire_pids():
            ticks = process_ticks(pid)
            if ticks is not None:
                wires[pid] = ticks
        sched: dict[int, tuple[int, int]] = {}
        wire_sched: dict[int, tuple[int, int]] = {}
        for pid in self.node_pids():
            sched.update(thread_schedstats(pid))
        for pid in self.wire_pids():
            wire_sched.update(thread_schedstats(pid))
        self.samples.append(
            LoadSample(time.time(), busy, total, wires, mem_available_fraction(), sched, wire_sched)
        )

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except OSError:  # a wire vanished between listing and reading: next sample
                continue


def _thread_deltas(
    chosen: Sequence[LoadSample], span_s: float, stats: Callable[[LoadSample], dict]
) -> tuple[float, dict[int, float]]:
    """CPU seconds of the threads over the samples, and each thread's run-delay share."""
    cpu_s = 0.0
    delay_share: dict[int, float] = {}
    for tid, (cpu_end, delay_end) in stats(chosen[-1]).items():
        # A thread that started inside the window counts from its first sample.
        start = next((stats(s)[tid] for s in chosen if tid in stats(s)), None)
        if start is None or span_s <= 0:
            continue
        cpu_s += (cpu_end - start[0]) * 1e-9
        delay_share[tid] = (delay_end - start[1]) * 1e-9 / span_s
    return cpu_s, delay_share


def verdict(
    samples: Sequence[LoadSample], window: tuple[float, float] | None
) -> tuple[dict[str, Any], str | None]:
    """Load figures over ``window`` (unix seconds; the whole run when None) and the reason the
    run is invalid, or None when this machine kept up."""
    chosen = list(samples)
    if window is not None:
        inside = [s for s in samples if window[0] <= s.unix_s <= window[1]]
        before = [s for s in samples if s.unix_s < window[0]]
        after = [s for s in samples if s.unix_s > window[1]]
        # Bracket the window with the samples just outside it, so short windows still
        # have two points.
        chosen = before[-1:] + inside + after[:1]
    if len(chosen) < 2:
        return {"samples": len(chosen)}, "too few load samples to judge this machine's load"
    first, last = chosen[0], chosen[-1]
    span_s = last.unix_s - first.unix_s
    total = last.total_ticks - first.total_ticks
    busy = (last.busy_ticks - first.busy_ticks) / total if total > 0 else 0.0
    peak = 0.0
    for a, b in itertools.pairwise(chosen):
        t = b.total_ticks - a.total_ticks
        if t > 0:
            peak = max(peak, (b.busy_ticks - a.busy_ticks) / t)
    wire_share = {}
    for pid, end in last.wire_ticks.items():
        start = first.wire_ticks.get(pid)
        if start is not None and span_s > 0:
            wire_share[pid] = (end - start) / CLOCK_TICKS_PER_S / span_s
    mem_min = min(s.mem_available_fraction for s in chosen)
    node_cpu_s, delay_share = _thread_deltas(chosen, span_s, lambda s: s.sched_ns)
    wire_cpu_s, wire_delay = _thread_deltas(chosen, span_s, lambda s: s.wire_sched_ns)
    cluster_cpu_s = node_cpu_s + wire_cpu_s
    cores = os.cpu_count() or 1
    cluster_busy = cluster_cpu_s / (span_s * cores) if span_s > 0 else 0.0
    worst_delay = max(delay_share.values(), default=0.0)
    figures: dict[str, Any] = {
        "cores": os.cpu_count(),
        "window_s": span_s,
        "samples": len(chosen),
        "mean_cpu_busy": busy,  # everything on the machine, this run or not
        "peak_cpu_busy": peak,
        "cluster_cpu_busy": cluster_busy,  # this cluster's nodes and wires only
        "max_run_delay_share": worst_delay,
        "node_threads_tracked": len(delay_share),
        # A wire's wait only delays frames a little (latency), it is judged by its core share.
        "max_wire_run_delay_share": max(wire_delay.values(), default=0.0),
        "max_wire_core_share": max(wire_share.values(), default=0.0),
        "wire_core_share": sorted(wire_share.values(), reverse=True),
        "min_mem_available_fraction": mem_min,
        "limits": {
            "cluster_cpu_busy": MAX_CPU_BUSY,
            "run_delay_share": MAX_RUN_DELAY_SHARE,
            "wire_core_share": MAX_WIRE_CORE_SHARE,
            "mem_available_fraction": MIN_MEMORY_AVAILABLE,
        },
    }
    reasons = []
    if cluster_busy > MAX_CPU_BUSY:
        reasons.append(
            f"the emulated cluster's processes kept this machine's CPUs {cluster_busy:.0%} busy "
            f"over the measured iterations (limit {MAX_CPU_BUSY:.0%}): the machine, not the "
            "emulated cluster, was the bottleneck; raise realrun.dilation"
        )
    if worst_delay > MAX_RUN_DELAY_SHARE:
        reasons.append(
            f"a thread of a node waited for a CPU {worst_delay:.0%} of the "
            f"measured time (limit {MAX_RUN_DELAY_SHARE:.0%}; all cores {busy:.0%} busy): "
            "this machine was the bottleneck"
        )
    if figures["max_wire_core_share"] > MAX_WIRE_CORE_SHARE:
        reasons.append(
            f"a delay wire used {figures['max_wire_core_share']:.0%} of a core "
            f"(limit {MAX_WIRE_CORE_SHARE:.0%}): it could not keep up with its link; "
            "raise realrun.dilation"
        )
    if mem_min < MIN_MEMORY_AVAILABLE:
        reasons.append(f"memory available fell to {mem_min:.1%} of this machine's")
    return figures, ("; ".join(reasons) or None)
