"""The report's words about what limits an iteration do not contradict each other."""

from __future__ import annotations

from simscale.simulator import simulate
from simscale.spec.profile import default_costs
from simscale.spec.scenario import load_scenario
from tests.support.paths import ROOT


def test_an_unsaturated_chain_is_not_called_communication_bound() -> None:
    """One server for 8 hosts (scenarios/server-ratio): the model path's a-priori estimate
    (the busiest NIC's traffic at full rate, against compute) and the measured bottleneck (no
    resource busy all the iteration) are worded as what they are, so the report does not say
    "communication-bound" beside "no resource saturated"."""
    s = load_scenario(ROOT / "scenarios" / "server-ratio" / "64gpu-servers-1.yaml")
    r = simulate(s, default_costs(s)[0])
    assert "no resource saturated" in r.bottleneck
    assert "busiest over the iteration: " in r.bottleneck
    assert "-bound" not in r.path_reason
    assert "at full rate, the busiest NIC's traffic" in r.path_reason
    assert "an iteration's compute time" in r.path_reason
