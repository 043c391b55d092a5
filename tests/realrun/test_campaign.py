"""Campaigns: grids and repeats expand into named runs, a failed run says why, and a resumed
campaign skips only complete, valid records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from realrun.campaign import CampaignError, done_already, load_campaign
from tests.support.paths import SCENARIOS

MLP_DEDICATED = SCENARIOS / "emulated" / "mlp-dedicated.yaml"
MLP_COLOCATED = SCENARIOS / "emulated" / "mlp-colocated.yaml"


def test_a_campaign_expands_grids_and_repeats_into_named_runs(tmp_path: Path) -> None:
    spec = tmp_path / "c.yaml"
    spec.write_text(
        f"name: c\nrepeats: 2\nset: ['simulation.measured_iterations=3']\nruns:\n"
        f"  - scenario: {MLP_COLOCATED}\n    label: mlp\n"
        f"    grid: {{'cluster.hosts[0].count': [2, 4], kvstore.mode: [dist_sync, dist_async]}}\n"
        f"  - scenario: {MLP_DEDICATED}\n    set: ['cluster.hosts[0].count=1']\n"
    )
    campaign = load_campaign(spec)
    assert [r.name for r in campaign.runs[:2]] == [
        "mlp__count=2,mode=dist_sync__r1",
        "mlp__count=2,mode=dist_sync__r2",
    ]
    assert len(campaign.runs) == 2 * 2 * 2 + 2
    assert campaign.runs[-1].name == "mlp-dedicated__r2"
    assert campaign.runs[3].overrides == (
        "simulation.measured_iterations=3",
        "cluster.hosts[0].count=2",
        "kvstore.mode=dist_async",
    )
    assert len(load_campaign(spec, repeats=1).runs) == 5
    spec.write_text(f"runs:\n  - scenario: {MLP_COLOCATED}\n  - scenario: {MLP_COLOCATED}\n")
    with pytest.raises(CampaignError, match="same record"):
        load_campaign(spec)
    spec.write_text("runs:\n  - scenario: nowhere.yaml\n")
    with pytest.raises(CampaignError, match=r"runs\[0\].scenario: no file"):
        load_campaign(spec)


def test_a_failed_campaign_run_says_why_on_the_terminal(tmp_path: Path, monkeypatch) -> None:
    """Not only '1 failed' and a reason buried in campaign-log.jsonl."""
    import io

    from realrun import campaign as campaign_module
    from realrun.campaign import run_campaign
    from realrun.run import LaunchOptions

    monkeypatch.setattr(campaign_module, "wait_for_quiet", lambda: 0.0)

    spec = tmp_path / "c.yaml"
    spec.write_text(f"runs:\n  - {{scenario: {MLP_COLOCATED}, set: [kvstore.servers=0]}}\n")
    terminal = io.StringIO()
    rc = run_campaign(load_campaign(spec), tmp_path / "out", LaunchOptions("local"), 60, terminal)
    assert rc == 1
    assert "  mlp-colocated__r1 failed: " in terminal.getvalue()
    assert "kvstore.servers: got 0" in terminal.getvalue()


def test_only_complete_valid_records_are_skipped_on_resume(tmp_path: Path) -> None:
    base = {
        "schema_version": 1,
        "scenario": {},
        "environment": {},
        "iterations": [],
        "summary": None,
        "complete": False,
        "error": "worker 1 died",
    }
    path = tmp_path / "r.json"
    assert not done_already(path)
    path.write_text(json.dumps(base))
    assert not done_already(path)  # failed: run again
    summary = {
        "measured_iterations": 1,
        "samples_per_s": 1.0,
        "samples_per_s_per_worker": [1.0],
        "mean_iteration_s": 1.0,
        "median_iteration_s": 1.0,
        "mean_wait_s": 0.0,
    }
    done = {**base, "complete": True, "error": None, "summary": summary}
    path.write_text(json.dumps({**done, "valid": False, "invalid_reason": "CPU 99% busy"}))
    assert not done_already(path)  # this machine was the bottleneck: run again
    path.write_text(json.dumps(done))  # a record from before validity existed counts as valid
    assert done_already(path)
