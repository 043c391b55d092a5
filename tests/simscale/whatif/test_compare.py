"""compare: the differences between scenarios are the values the simulation uses."""

from __future__ import annotations

from simscale.spec.scenario import load_scenario
from simscale.whatif.compare import config_differences
from tests.support.paths import ROOT

BASE = ROOT / "scenarios" / "64gpu.yaml"  # p3.16xlarge hosts: the NIC comes from the preset


def test_a_preset_value_is_shown_resolved_not_as_none() -> None:
    a = load_scenario(BASE)
    b = load_scenario(BASE, ["cluster.hosts[0].nic_gbps=100"])
    assert config_differences(a, b) == ["cluster.hosts[0].nic_gbps: 25.0 -> 100.0"]


def test_setting_a_preset_value_to_itself_is_no_difference() -> None:
    a = load_scenario(BASE)
    b = load_scenario(BASE, ["cluster.hosts[0].nic_gbps=25", "cluster.hosts[0].gpu=V100"])
    assert config_differences(a, b) == []


def test_another_instance_shows_what_its_preset_changes() -> None:
    a = load_scenario(BASE)
    b = load_scenario(BASE, ["cluster.hosts[0].instance=p3dn.24xlarge"])
    diffs = config_differences(a, b)
    assert "cluster.hosts[0].instance: p3.16xlarge -> p3dn.24xlarge" in diffs
    assert "cluster.hosts[0].nic_gbps: 25.0 -> 100.0" in diffs
    assert not any("None" in d for d in diffs), diffs
