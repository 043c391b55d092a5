"""predict's time budget estimates the model path the simulation will actually take."""

from __future__ import annotations

import pytest

from simscale.cli import main
from simscale.cli.args import EXIT_INCOMPLETE
from simscale.report import budget
from simscale.spec.scenario import load_scenario
from tests.support.paths import ROOT

BASE = ROOT / "scenarios" / "64gpu.yaml"


def hosts(count: int) -> list[str]:
    """scenarios/64gpu.yaml on ``count`` p3.16xlarge hosts with a server on each."""
    return [f"cluster.hosts[0].count={count}", f"kvstore.servers={count}"]


@pytest.mark.parametrize("count", [512, 1024])
def test_the_symmetric_path_of_thousands_of_gpus_is_within_the_budget(count: int) -> None:
    """What the symmetric path answers in seconds (README: 8,192 GPUs) is not estimated as if
    every worker were simulated."""
    work = budget.estimate(load_scenario(BASE, hosts(count)))
    assert work.path == "symmetric"
    assert work.workers == 1
    assert not work.too_long, work.explain()


def test_the_exact_path_of_the_same_shape_is_refused() -> None:
    """Forced onto the exact path, the same 1,024 hosts would take hours."""
    work = budget.estimate(load_scenario(BASE, hosts(1024)), path="exact")
    assert work.path == "exact" and work.workers == 1024
    assert work.too_long


def test_the_symmetric_estimate_bounds_its_events_from_above() -> None:
    """On the symmetric path the estimate's events still bound the simulator's."""
    from simscale.simulator import Simulation

    s = load_scenario(BASE, hosts(16))
    work = budget.estimate(s, path="symmetric")
    sim = Simulation(s, path="symmetric")
    sim.run()
    assert sim.env.events_processed <= work.events


def test_an_impossible_path_is_the_same_error_as_the_simulations() -> None:
    s = load_scenario(BASE, ["kvstore.mode=dist_async"])
    with pytest.raises(ValueError, match="the symmetric path does not apply: mode dist_async"):
        budget.estimate(s, path="symmetric")


@pytest.mark.parametrize("path", ["auto", "symmetric"])
def test_predict_takes_8192_gpus_past_the_budget(
    path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command line no longer refuses the size: given a tiny --max-seconds it starts
    simulating and stops with nothing measured (exit 3), not the budget's refusal (exit 2)."""
    args = ["predict", str(BASE), "--path", path, "--max-seconds", "0.001"]
    for text in hosts(1024):
        args += ["--set", text]
    rc = main(args)
    err = capsys.readouterr().err
    assert "hours" not in err
    assert rc == EXIT_INCOMPLETE, err
