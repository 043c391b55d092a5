"""The Python API (simscale.predict / sweep) and the scenario JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import simscale
from simscale.cli import main
from simscale.spec.config import ConfigError
from simscale.spec.scenario import load_scenario
from tests.support.paths import ROOT

SCENARIOS = sorted(Path("scenarios").rglob("*.yaml"))


def test_predict_applies_settings_like_the_cli() -> None:
    r = simscale.predict("scenarios/cpu-2x2-sync.yaml", set={"kvstore.servers": 1})
    assert r.num_servers == 1
    d = r.to_dict()
    assert d["throughput_samples_per_s"] == r.throughput_samples_per_s
    with pytest.raises(ConfigError, match=r"kvstore\.servers: got 0"):
        simscale.predict("scenarios/cpu-2x2-sync.yaml", set={"kvstore.servers": 0})


def test_predict_takes_a_scenario_object_or_mapping() -> None:
    s = load_scenario("scenarios/cpu-2x2-sync.yaml")
    from_object = simscale.predict(s).throughput_samples_per_s
    from_mapping = simscale.predict(s.to_dict()).throughput_samples_per_s
    assert (
        from_object
        == from_mapping
        == simscale.predict("scenarios/cpu-2x2-sync.yaml").throughput_samples_per_s
    )


def test_sweep_returns_rows_and_a_dataframe() -> None:
    rows = simscale.sweep(
        "scenarios/cpu-2x2-sync.yaml", vary={"kvstore.servers": [1, 2, 3]}, executor="serial"
    )
    assert [r["kvstore.servers"] for r in rows] == [1, 2, 3]
    assert [r["status"] for r in rows] == ["ok", "ok", "invalid"]
    pytest.importorskip("pandas")
    frame = simscale.sweep(
        "scenarios/cpu-2x2-sync.yaml",
        vary={"kvstore.servers": "1..2"},
        executor="serial",
        as_frame=True,
    )
    assert list(frame["kvstore.servers"]) == [1, 2]
    assert frame["throughput_samples_per_s"].tolist() == [
        r["throughput_samples_per_s"] for r in rows[:2]
    ]


def test_schema_accepts_every_shipped_scenario_and_rejects_typos(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    out = tmp_path / "scenario.schema.json"
    assert main(["schema", "-o", str(out)]) == 0
    schema = json.loads(out.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert SCENARIOS
    for path in SCENARIOS:
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
        assert not errors, f"{path}: {errors[0].message}"
    bad = yaml.safe_load(Path("scenarios/64gpu.yaml").read_text())
    bad["cluster"]["hosts"][0]["nic_gpbs"] = 10
    assert list(validator.iter_errors(bad))
    bad = yaml.safe_load(Path("scenarios/64gpu.yaml").read_text())
    bad["cluster"]["hosts"][0]["instance"] = "p3.17xlarge"
    assert list(validator.iter_errors(bad))
    bad = yaml.safe_load(Path("scenarios/64gpu.yaml").read_text())
    bad["simulation"]["compute_jitter"] = 2.0  # the loader's bound: [0, 1]
    assert list(validator.iter_errors(bad))
    # never overwritten by default
    assert main(["schema", "-o", str(out)]) == 2


def test_predict_interval_is_printed_and_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    args = ["predict", "scenarios/cpu-2x2-sync.yaml", "--interval", "90", "--draws", "3"]
    assert main([*args, "-o", str(out)]) == 0
    assert "90% interval" in capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["interval"]["level"] == 0.9
    assert written["interval"]["low_samples_per_s"] <= written["interval"]["high_samples_per_s"]


def test_the_documented_python_examples_run_as_written() -> None:
    """The 'From Python' lines of docs/whatif.md, with its scenario: each must hold (a shipped
    example asked for 16 co-located servers on 8 hosts once)."""
    import ast
    import re

    page = (ROOT / "docs" / "whatif.md").read_text()
    block = page.split("## From Python", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    predict_line = next(line for line in block.splitlines() if "simscale.predict(" in line)
    settings = ast.literal_eval(re.search(r"set=(\{.*?\})", predict_line).group(1))
    assert simscale.predict(ROOT / "scenarios" / "64gpu.yaml", set=settings).num_servers


def test_an_unguarded_script_gets_told_why_its_sweep_failed(tmp_path: Path) -> None:
    """A sweep started at a script's top level makes every spawned process run the script
    again; the caller gets one sentence saying so, not a bare BrokenProcessPool."""
    import subprocess
    import sys

    script = tmp_path / "sweep.py"
    scenario = ROOT / "scenarios" / "cpu-2x2-sync.yaml"
    script.write_text(
        "import simscale\n"
        f"simscale.sweep({str(scenario)!r}, vary={{'kvstore.servers': [1, 2]}}, jobs=2)\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert proc.returncode != 0
    # The spawned processes' own errors may reach stderr after the caller's, on a busy machine.
    (told,) = [line for line in proc.stderr.splitlines() if line.startswith("simscale.")]
    assert told.startswith("simscale.whatif.errors.WhatIfError: a local sweep process died")
    assert 'call it under `if __name__ == "__main__":`' in told
