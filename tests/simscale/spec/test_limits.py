"""The bounds on what simscale reads: scenario ranges, profiles, and predict's time budget."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from simscale.cli import main
from simscale.report import budget
from simscale.spec.config import ConfigError, safe_yaml
from simscale.spec.profile import load_profile
from simscale.spec.scenario import load_scenario
from tests.support.paths import ROOT

SHIPPED = sorted(ROOT.glob("scenarios/**/*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_scenario_is_within_the_budget(path: Path) -> None:
    """The refusal threshold is generous: no shipped scenario comes near it."""
    work = budget.estimate(load_scenario(path))
    assert work.seconds < budget.REFUSE_ABOVE_S / 100, work.explain()


def test_estimate_bounds_the_measured_events_from_above() -> None:
    """The estimate's events are at least the simulator's (it is an upper bound by design)."""
    from simscale.simulator import Simulation

    s = load_scenario(ROOT / "scenarios" / "mxnet" / "2s-2w-sync.yaml")
    sim = Simulation(s)
    sim.run()
    assert sim.env.events_processed <= budget.estimate(s).events


def test_predict_refuses_an_hours_long_scenario_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    """A valid scenario that would simulate for hours on the path asked for (here the exact
    one: the symmetric path answers the same shape in a second) is refused before anything is
    built, in one line that says why and what to reduce."""
    t = time.process_time()
    scenario = str(ROOT / "scenarios" / "64gpu.yaml")
    rc = main(["predict", scenario, "--path", "exact", "--set", "cluster.hosts[0].count=5000"])
    assert time.process_time() - t < 5
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "64gpu.yaml" in err and "hours" in err and "5,000 workers" in err
    assert "reduce simulation.measured_iterations" in err


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: 1\nb: 2\na: 3\n", "line 3, column 1: duplicate key 'a'"),
        ("x: " + "[" * 50 + "]" * 50, "nested deeper than 32"),
        ("x: " + "9" * 40, "40 digits"),
        (
            "a: &a [1,1,1,1,1,1,1,1,1,1]\n"
            + "".join(
                f"{c}: &{c} [" + ",".join([f"*{p}"] * 10) + "]\n"
                for p, c in zip("abcde", "bcdef", strict=True)
            ),
            "expands to more than 200,000 values",
        ),
    ],
)
def test_yaml_bounds(text: str, words: str) -> None:
    with pytest.raises(ConfigError, match="not valid YAML") as e:
        safe_yaml(text)
    assert words in str(e.value)


@pytest.mark.parametrize(
    ("costs", "words"),
    [
        ("latency_factor: .inf", "costs.latency_factor: got inf, expected a finite number"),
        ("latency_factor: 1.0e+300", "costs.latency_factor: got 1e+300, expected a number in"),
        ("message_overhead_us: -1", "costs.message_overhead_us: got -1.0"),
        ("tcp_share_sigma: 1.0e+9", "costs.tcp_share_sigma"),
        ("server_request_us: 5\n  server_request_us: 6", "duplicate key 'server_request_us'"),
    ],
)
def test_profile_numbers_are_bounded(tmp_path: Path, costs: str, words: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"schema_version: 1\ncosts:\n  {costs}\n")
    with pytest.raises(ConfigError) as e:
        load_profile(path)
    assert str(e.value).startswith(str(path)) and words in str(e.value)
