"""Declared ranges for unknown facts: validated with one-line errors, taken from presets unless
the scenario states the fact, and replaced by the scenario's own."""

from __future__ import annotations

import pytest

from simscale.spec.config import ConfigError
from simscale.spec.costs import CostModel
from simscale.spec.hardware import INSTANCES
from simscale.spec.ranges import apply_values, ranges_for
from simscale.spec.scenario import scenario_from_dict


def _scenario(hosts: dict, unknowns: list | None = None, mode: str = "dist_sync") -> dict:
    data = {
        "cluster": {"hosts": [hosts]},
        "model": "resnet50",
        "training": {"batch_per_gpu": 32},
        "kvstore": {"mode": mode},
    }
    if unknowns is not None:
        data["unknowns"] = unknowns
    return data


def test_every_aws_gpu_preset_declares_its_connection_range_with_a_source() -> None:
    for name in ("p2.xlarge", "p3.2xlarge", "p3.16xlarge"):
        facts = {r.fact: r for r in INSTANCES[name].ranges}
        assert facts["connection_gbps"].low == 5.0 and facts["connection_gbps"].high == 10.0
        assert "AWS EC2 User Guide" in facts["connection_gbps"].source


def test_p2_xlarge_declares_its_nic_from_awss_figure_to_a_4_vcpu_burst() -> None:
    """'High' is not a rate: AWS's 1.25 Gbit/s for the p2.xlarge (the preset's own NIC) is the
    floor, a 4-vCPU ENA instance's burst of 10 Gbit/s the ceiling."""
    (nic,) = [r for r in INSTANCES["p2.xlarge"].ranges if r.fact == "nic_gbps"]
    assert (nic.low, nic.high) == (INSTANCES["p2.xlarge"].nic_gbps, 10.0)
    assert "1.25" in nic.source and "10.04" in nic.source
    several = scenario_from_dict(_scenario({"count": 8, "instance": "p2.xlarge"}))
    assert [r.fact for r in ranges_for(several)] == ["nic_gbps", "connection_gbps"]
    stated = scenario_from_dict(_scenario({"count": 8, "instance": "p2.xlarge", "nic_gbps": 2}))
    assert "nic_gbps" not in [r.fact for r in ranges_for(stated)]
    s2, _ = apply_values(several, CostModel(), [nic], [nic.value_at(0.5)])
    assert s2.cluster.hosts[0].resolved()[2] == (1.25 + 10.0) / 2


def test_preset_ranges_apply_and_a_scenario_range_replaces_them() -> None:
    s = scenario_from_dict(_scenario({"count": 4, "instance": "p3.16xlarge"}))
    assert [r.fact for r in ranges_for(s)] == ["connection_gbps"]
    own = {"fact": "connection_gbps", "low": 2, "high": 3, "source": "our iperf3, 2026-11"}
    s = scenario_from_dict(_scenario({"count": 4, "instance": "p3.16xlarge"}, [own]))
    (r,) = ranges_for(s)
    assert (r.low, r.high, r.source) == (2, 3, "our iperf3, 2026-11")


def test_nccl_sockets_act_only_on_nccls_flat_ring() -> None:
    hosts = {"count": 4, "instance": "p3.16xlarge"}
    ring = _scenario(hosts, mode="allreduce") | {
        "kvstore": {"mode": "allreduce", "allreduce": {"algorithm": "ring"}}
    }
    assert "nccl_sockets" in [r.fact for r in ranges_for(scenario_from_dict(ring))]
    ps = scenario_from_dict(_scenario(hosts))
    assert "nccl_sockets" not in [r.fact for r in ranges_for(ps)]


def test_a_stated_nic_takes_no_range_and_values_apply_to_the_scenario() -> None:
    nic = {"fact": "nic_gbps", "low": 5, "high": 25, "source": "vendor: up to 25 Gbit/s"}
    s = scenario_from_dict(_scenario({"count": 2, "instance": "p3.16xlarge"}, [nic]))
    (r,) = [r for r in ranges_for(s) if r.fact == "nic_gbps"]
    s2, _ = apply_values(s, CostModel(), [r], [r.value_at(0.0)])
    assert s2.cluster.hosts[0].resolved()[2] == 5.0
    assert "cluster.hosts[0].nic_gbps" in r.narrow_by()


@pytest.mark.parametrize(
    ("unknown", "message"),
    [
        (
            {"fact": "nic_speed", "low": 1, "high": 2, "source": "x"},
            r"unknowns\[0\]\.fact.*nic_gbps",
        ),
        ({"fact": "nic_gbps", "low": 3, "high": 2, "source": "x"}, "0 < low <= high"),
        ({"fact": "nic_gbps", "low": 3, "high": 4, "source": " "}, "public figure"),
        ({"fact": "nic_gbps", "high": 4, "source": "x"}, r"low.*missing"),
        ({"fact": "transport", "choices": ["ib"], "source": "x"}, "tcp, rdma, efa"),
        ({"fact": "nccl_sockets", "low": 0.2, "high": 4, "source": "x"}, "at least 1"),
        ({"fact": "nic_gbps", "low": 1, "high": 4, "source": "x", "group": 3}, "group"),
    ],
)
def test_bad_ranges_are_one_line_errors(unknown: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        scenario_from_dict(_scenario({"count": 2, "instance": "p3.16xlarge"}, [unknown]))
    assert "\n" not in str(e.value)
