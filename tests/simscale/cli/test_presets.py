"""`simscale presets` lists every instance and GPU preset with its specs, its declared unknowns
and their sources."""

from __future__ import annotations

import json

import pytest

from simscale.cli import main
from simscale.spec.hardware import GPUS, INSTANCES


def test_presets_json_lists_every_instance_with_its_ranges_and_sources(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["presets", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [i["name"] for i in data["instances"]] == list(INSTANCES)
    assert [g["name"] for g in data["gpus"]] == list(GPUS)
    p3 = next(i for i in data["instances"] if i["name"] == "p3.16xlarge")
    assert (p3["gpus"], p3["gpu"], p3["nic_gbps"]) == (8, "V100", 25.0)
    facts = {r["fact"]: r for r in p3["ranges"]}
    assert facts["connection_gbps"]["low"] == 5.0 and facts["connection_gbps"]["source"]


def test_presets_text_shows_the_unknowns_under_each_instance(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "p3.16xlarge" in out and "unknown: one TCP connection's achieved rate" in out
