"""``simscale predict --max-seconds`` and the progress display: a long prediction says where it
is and stops cleanly with what it has. The wall clock is replaced by a fake one that advances a
fixed step per reading, so the tests depend on events, never on the machine's speed."""

from __future__ import annotations

import pytest

from simscale import simulator
from simscale.cli import main
from simscale.simulator import IncompleteRun, Progress, Simulation
from simscale.spec.scenario import load_scenario
from tests.support.paths import ROOT

SCENARIO = ROOT / "scenarios" / "64gpu.yaml"
STEP_S = 0.5  # fake seconds per clock reading


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += STEP_S
        return self.now


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    clock = FakeClock()
    monkeypatch.setattr(simulator.time, "perf_counter", clock.perf_counter)
    return clock


def _exact() -> Simulation:
    return Simulation(load_scenario(SCENARIO), path="exact")


def test_limit_before_any_measured_iteration_raises(fake_clock: FakeClock) -> None:
    """Struck during warm-up: nothing to report, and the message says how far it got."""
    with pytest.raises(IncompleteRun, match=r"--max-seconds 1: 0 measured iteration"):
        _exact().run(max_seconds=1.0)


@pytest.mark.slow  # ten whole runs: 22 CPU seconds even bisected (cpu_report)
def test_limit_keeps_the_measured_iterations(fake_clock: FakeClock) -> None:
    """The first limit that lets a measured iteration finish gives a partial Result that says
    it stopped, covering fewer iterations than the full run."""
    full = _exact().run()

    def run_for(checks: int):
        try:
            return _exact().run(max_seconds=checks * STEP_S)
        except IncompleteRun:
            return None

    # Bisection for the first limit that finishes (more clock checks never finish less): eight
    # runs instead of one per limit tried, which cost a minute of CPU.
    stopped, finished = 0, 200
    partial = run_for(finished)
    assert partial is not None, f"{finished} clock checks did not finish a measured iteration"
    while finished - stopped > 1:
        middle = (stopped + finished) // 2
        result = run_for(middle)
        if result is None:
            stopped = middle
        else:
            finished, partial = middle, result
    assert partial.stopped_early.startswith("stopped at --max-seconds")
    assert 1 <= partial.iterations_measured < full.iterations_measured
    assert not partial.stable and full.stopped_early == ""
    assert partial.throughput_samples_per_s > 0


def test_progress_reports_iterations_and_event_rate(fake_clock: FakeClock) -> None:
    seen: list[Progress] = []
    result = _exact().run(progress=seen.append)
    assert seen, "a run of many clock readings reports progress"
    assert all(p.events_per_s > 0 and p.iterations == seen[0].iterations for p in seen)
    assert [p.events for p in seen] == sorted(p.events for p in seen)
    assert seen[-1].events <= result.events


def test_cli_max_seconds(capsys: pytest.CaptureFixture[str], fake_clock: FakeClock) -> None:
    """Nothing measured: exit 3 with one line; a bad value: exit 2 naming it."""
    assert main(["predict", str(SCENARIO), "--path", "exact", "--max-seconds", "1"]) == 3
    err = capsys.readouterr().err
    assert "stopped at --max-seconds 1" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as e:
        main(["predict", str(SCENARIO), "--max-seconds", "-1"])
    assert e.value.code == 2
    assert "expected a number of seconds > 0" in capsys.readouterr().err


def test_cli_prints_progress_after_two_seconds(
    capsys: pytest.CaptureFixture[str], fake_clock: FakeClock
) -> None:
    assert main(["predict", str(SCENARIO), "--path", "exact"]) == 0
    captured = capsys.readouterr()
    assert "simulating: iteration" in captured.err and "events/s" in captured.err
    assert "model path    exact (asked for)" in captured.out
