"""`simscale predict --interval` on every shipped scenario: an interval, never a traceback."""

from __future__ import annotations

import json

import pytest

from simscale.cli import main
from tests.support.paths import ROOT

SCENARIOS = sorted((ROOT / "scenarios").rglob("*.yaml"))


@pytest.mark.slow
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: str(p.relative_to(ROOT / "scenarios")))
def test_every_shipped_scenario_gets_an_interval(path, capsys: pytest.CaptureFixture[str]) -> None:
    """With the profile predict picks by default (the real-hardware one for real GPUs)."""
    code = main(["predict", str(path), "--interval", "90", "--draws", "3", "--json"])
    assert code == 0
    iv = json.loads(capsys.readouterr().out)["interval"]
    assert 0 < iv["low_samples_per_s"] <= iv["high_samples_per_s"]
    assert iv["words"]
