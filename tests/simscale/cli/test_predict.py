"""`simscale predict --interval` on every shipped scenario: an interval, never a traceback."""

from __future__ import annotations

import json

import pytest

from simscale.cli import main
from tests.support.paths import ROOT

SCENARIOS = sorted((ROOT / "scenarios").rglob("*.yaml"))
FEW_ITERATIONS = (
    "--set",
    "simulation.warmup_iterations=1",
    "--set",
    "simulation.measured_iterations=2",
)


@pytest.mark.slow
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: str(p.relative_to(ROOT / "scenarios")))
def test_every_shipped_scenario_gets_an_interval(path, capsys: pytest.CaptureFixture[str]) -> None:
    """With the profile predict picks by default (the real-hardware one for real GPUs). Three
    iterations per simulation: the check is that every scenario gets a finite interval through
    the command, not its value (the golden test holds the values), and the shipped ones ask for
    up to twelve, which made this check 180 CPU s of CI."""
    code = main(
        ["predict", str(path), "--interval", "90", "--draws", "3", "--json", *FEW_ITERATIONS]
    )
    assert code == 0
    iv = json.loads(capsys.readouterr().out)["interval"]
    assert 0 < iv["low_samples_per_s"] <= iv["high_samples_per_s"]
    assert iv["words"]


def test_the_report_says_which_fraction_of_peak_it_computed_at(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A profile's fitted fraction is named with the profile it came from."""
    from simscale.spec.costs import real_hardware_costs
    from simscale.spec.profile import PROFILE_SCHEMA_VERSION, Profile, save_profile

    costs = real_hardware_costs()
    costs = type(costs)(**{**vars(costs), "compute_efficiency": {"H100/bf16": 0.37}})
    profile = tmp_path / "p.yaml"
    save_profile(Profile(PROFILE_SCHEMA_VERSION, costs, ("H100",), "real"), profile)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "cluster: {hosts: [{count: 1, gpus_per_host: 2, gpu: H100, nic_gbps: 100}]}\n"
        "model: gpt2\ntraining: {batch_per_gpu: 2, precision: bf16, seq_len: 128}\n"
        "kvstore: {mode: ddp}\nsimulation: {warmup_iterations: 1, measured_iterations: 2}\n"
    )
    assert main(["predict", str(scenario), "--profile", str(profile)]) == 0
    out = capsys.readouterr().out
    assert f"compute       H100/bf16 at 0.37 of its peak FLOP/s (profile {profile})" in out
