"""The machine-load verdict: was this machine, rather than the emulated cluster, the
bottleneck of a run?"""

from __future__ import annotations

import os

import pytest

from realrun.emulated.machine_load import LoadSample, read_cpu_ticks, verdict


def test_cpu_ticks_are_read_from_proc_stat() -> None:
    stat = "cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 1 2 3 4\n"
    assert read_cpu_ticks(stat) == (100 + 5 + 50 + 3 + 2 + 10, 990)


def _samples(
    busy: float, wire_ticks_per_s: int, cluster_cpu: float = 0.2, delay: float = 0.0
) -> list[LoadSample]:
    """Ten one-second samples of a 2-core machine (100 ticks per core-second): all cores
    ``busy``, one wire, and one node thread using ``cluster_cpu`` of both cores and waiting
    ``delay`` of the time for a core."""
    return [
        LoadSample(
            1000.0 + t,
            int(200 * busy * t),
            200 * t,
            {7: wire_ticks_per_s * t},
            0.5,
            {8: (int(2e9 * cluster_cpu * t), int(1e9 * delay * t))},
        )
        for t in range(10)
    ]


def test_a_machine_that_held_the_cluster_back_makes_the_record_invalid(monkeypatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    tick = os.sysconf("SC_CLK_TCK")
    # The window is bracketed by the samples just outside it: 1001 .. 1007.
    figures, reason = verdict(_samples(0.60, 20), window=(1002.0, 1006.0))
    assert reason is None
    assert figures["window_s"] == pytest.approx(6.0)
    assert figures["mean_cpu_busy"] == pytest.approx(0.60)
    assert figures["cluster_cpu_busy"] == pytest.approx(0.2)
    assert figures["max_wire_core_share"] == pytest.approx(20 / tick)
    # Another program kept the cores 95% busy, but no process of the cluster waited: valid.
    assert verdict(_samples(0.95, 20), window=None)[1] is None
    _, reason = verdict(_samples(0.95, 20, cluster_cpu=0.9), window=None)
    assert reason is not None and "processes kept this machine's CPUs 90% busy" in reason
    _, reason = verdict(_samples(0.95, 20, delay=0.2), window=None)
    assert reason is not None and "thread of a node waited for a CPU 20%" in reason
    _, reason = verdict(_samples(0.5, tick), window=None)
    assert reason is not None and "delay wire used 100% of a core" in reason
