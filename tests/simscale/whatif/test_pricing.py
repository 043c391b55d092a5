"""Cost arithmetic: instance presets' prices, scenario overrides, samples per dollar, and time
and cost to train."""

from __future__ import annotations

import pytest

from simscale.spec import hardware
from simscale.spec.scenario import scenario_from_dict
from simscale.whatif.pricing import cluster_price, cost_fields


def _scenario(**extra: object) -> dict:
    data: dict = {
        "cluster": {"hosts": [{"count": 8, "instance": "p3.16xlarge"}]},
        "model": "resnet50",
        "training": {"batch_per_gpu": 128},
        "kvstore": {"mode": "dist_sync", "servers": 8},
    }
    data.update(extra)
    return data


def test_every_price_names_its_source() -> None:
    for spec in hardware.INSTANCES.values():
        assert spec.price_source, spec.name
        if spec.usd_per_hour is not None:
            assert spec.usd_per_hour > 0


def test_cluster_price_from_presets_workers_and_dedicated_servers() -> None:
    p3 = hardware.INSTANCES["p3.16xlarge"].usd_per_hour
    c5 = hardware.INSTANCES["c5.18xlarge"].usd_per_hour
    assert p3 is not None and c5 is not None
    s = scenario_from_dict(_scenario())
    assert cluster_price(s).usd_per_hour == pytest.approx(8 * p3)
    dedicated = _scenario(
        kvstore={"mode": "dist_sync", "servers": 16, "placement": "dedicated"},
    )
    dedicated["cluster"]["server_hosts"] = {"count": 16, "instance": "c5.18xlarge"}
    d = scenario_from_dict(dedicated)
    assert cluster_price(d).usd_per_hour == pytest.approx(8 * p3 + 16 * c5)
    assert "c5.18xlarge (servers)" in cluster_price(d).describe()


def test_scenario_price_overrides_the_preset_and_unknown_stays_unknown() -> None:
    data = _scenario()
    data["cluster"]["hosts"][0]["usd_per_hour"] = 10.0
    assert cluster_price(scenario_from_dict(data)).usd_per_hour == pytest.approx(80.0)
    custom = _scenario(
        cluster={"hosts": [{"count": 2, "gpus_per_host": 4, "gpu": "V100", "nic_gbps": 25}]},
        kvstore={"mode": "dist_sync", "servers": 2},
    )
    s = scenario_from_dict(custom)
    assert cluster_price(s).usd_per_hour is None
    fields = cost_fields(s, 1000.0)
    assert fields["usd_per_hour"] is None and fields["samples_per_usd"] is None


def test_samples_per_dollar_and_time_and_cost_to_train() -> None:
    data = _scenario(
        training={"batch_per_gpu": 128, "dataset_samples": 1_281_167, "epochs": 90},
    )
    data["cluster"]["hosts"][0]["usd_per_hour"] = 25.0
    s = scenario_from_dict(data)
    f = cost_fields(s, 20_000.0)
    # 8 hosts x $25 = $200/h; 20,000 samples/s x 3600 s / $200 = 360,000 samples per dollar.
    assert f["usd_per_hour"] == pytest.approx(200.0)
    assert f["samples_per_usd"] == pytest.approx(360_000.0)
    # 1,281,167 x 90 samples / 20,000 per s = 5,765.25 s = 1.6015 h; x $200/h = $320.29.
    assert f["train_hours"] == pytest.approx(1_281_167 * 90 / 20_000 / 3600)
    assert f["train_usd"] == pytest.approx(f["train_hours"] * 200.0)
    assert f["train_usd"] == pytest.approx(320.29, abs=0.01)


def test_training_fields_are_validated() -> None:
    from simscale.spec.config import ConfigError

    with pytest.raises(ConfigError, match=r"training\.epochs: got -1"):
        scenario_from_dict(_scenario(training={"batch_per_gpu": 1, "epochs": -1}))


def test_predict_reports_cost(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from simscale.cli import main

    settings = ["--set", "training.dataset_samples=1000000", "--set", "training.epochs=2"]
    assert main(["predict", "scenarios/cpu-2x2-sync.yaml", "--json", *settings]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["cost"]["usd_per_hour"] is None and "no usd_per_hour" in d["cost"]["price_sources"]
    assert d["cost"]["train_hours"] == pytest.approx(2e6 / d["throughput_samples_per_s"] / 3600)
    priced = [*settings, "--set", "cluster.hosts[0].usd_per_hour=1.5"]
    assert main(["predict", "scenarios/cpu-2x2-sync.yaml", *priced]) == 0
    out = capsys.readouterr().out
    assert "$3.00/hour" in out and "to train:" in out
