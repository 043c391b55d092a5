"""The dataset of published real-hardware measurements: every shipped file loads, the dataset
covers what the issue asks, and a bad file is one error line naming the file and the field."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from calibration.errors import CalibrationError
from calibration.published import PUBLISHED_DIR, load_published

FILES = sorted(PUBLISHED_DIR.glob("*.yaml"))

GOOD = {
    "id": "demo",
    "campaign": "demo-campaign",
    "source": {"ref": "owner/repo README.md", "commit": "c89430b", "table": "table 1"},
    "setup": "two hosts of one V100, 25 Gbit/s",
    "framework": "mxnet",
    "system": "allreduce",
    "metric": "throughput_samples_per_s",
    "read_from": "table",
    "base": {
        "cluster": {"hosts": [{"count": 1, "gpus_per_host": 1, "gpu": "V100", "nic_gbps": 25}]},
        "training": {"batch_per_gpu": 32},
        "kvstore": {"mode": "allreduce"},
    },
    "points": [
        {
            "name": "one",
            "model": "resnet50",
            "value": 300.0,
            "system": "single",
            "set": {"kvstore.mode": "local"},
        },
        {
            "name": "two",
            "model": "resnet50",
            "value": 540.0,
            "baseline": "one",
            "set": {"cluster.hosts[0].count": 2},
        },
    ],
}


def _write(tmp_path: Path, data: dict, name: str = "bad.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def _without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


def _with_point(i: int, **changes: object) -> dict:
    points = [dict(p) for p in GOOD["points"]]
    points[i] = {**points[i], **changes}
    return {**GOOD, "points": points}


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_every_shipped_file_loads(path: Path) -> None:
    points = load_published([path])
    assert points
    for p in points:
        assert p.path == str(path) and p.source and p.campaign and p.framework
        assert math.isfinite(p.value) and p.value > 0
        assert p.gpus == p.scenario.num_gpus and p.link_gbps > 0 and p.gpu
        if p.system == "single":
            assert p.gpus == 1
        if p.baseline is not None:
            assert p.baseline.gpus == 1 and p.baseline.source == p.source
            assert p.efficiency == pytest.approx(p.value / (p.gpus * p.baseline.value))


def test_derived_fields_follow_the_scenario(tmp_path: Path) -> None:
    """GPUs, link and sync come from the point's scenario after its ``set`` overrides."""
    one, two = load_published([_write(tmp_path, GOOD, "good.yaml")])
    assert (one.gpus, two.gpus) == (1, 2)
    assert (two.gpu, two.link_gbps, two.sync, two.system) == ("V100", 25.0, True, "allreduce")
    assert two.baseline is one and two.efficiency == pytest.approx(540.0 / (2 * 300.0))
    assert one.efficiency is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_without(GOOD, "source"), r"source: missing"),
        (_without(GOOD, "campaign"), r"campaign: missing"),
        ({**GOOD, "colour": "red"}, r"colour: unknown field"),
        ({**GOOD, "source": {"ref": "x", "comit": "abc1234"}}, r"source\.comit: unknown field"),
        ({**GOOD, "source": {"ref": "x", "commit": "HEAD"}}, r"source\.commit: got 'HEAD'"),
        ({**GOOD, "metric": "speed"}, r"metric: got 'speed'"),
        (_with_point(1, value=float("nan")), r"points\[1\]\.value: got nan, expected a finite"),
        (_with_point(1, value=-3), r"points\[1\]\.value: got -3"),
        (_with_point(1, baseline="zero"), r"points\[1\]\.baseline: 'zero' is not an earlier"),
        (_with_point(1, modle="vgg16"), r"points\[1\]\.modle: unknown field"),
        (_with_point(1, model="resnet51"), r"points\[1\]: model\.name: unknown model"),
        (_with_point(1, set={"cluster.hosts[0].nic_gbps": -1}), r"points\[1\]: cluster\.hosts"),
        (_with_point(1, set={"kvstore.mode": "dist_sync"}, system="ps"), None),
        (_with_point(1, system="ps"), r"points\[1\]\.system: 'ps' but kvstore\.mode"),
        (_with_point(0, system=None), r"points\[0\]\.system: 'allreduce' but kvstore\.mode"),
        (_with_point(1, system="single"), r"points\[1\]\.system: 'single' but .* 2 GPUs"),
        (_with_point(1, read_from="chart"), r"read_precision: missing"),
        (_with_point(1, name="one"), r"points\[1\]\.name: 'one' used twice"),
        (_with_point(1, metric="scaling_efficiency", baseline=None, value=9.0), r"<= 1\.5"),
    ],
)
def test_bad_files_are_one_line_errors_naming_file_and_field(
    tmp_path: Path, data: dict, message: str | None
) -> None:
    path = _write(tmp_path, data)
    if message is None:
        assert len(load_published([path])) == 2
        return
    with pytest.raises(CalibrationError, match=message) as e:
        load_published([path])
    assert str(e.value).startswith(str(path)) and "\n" not in str(e.value)


def test_a_baseline_must_be_a_single_gpu_point(tmp_path: Path) -> None:
    data = _with_point(0, system=None, set={})
    data["points"].append({"name": "three", "model": "resnet50", "value": 9.0, "baseline": "two"})
    data["points"][0] = {**data["points"][0], "set": {"kvstore.mode": "local"}, "system": "single"}
    with pytest.raises(CalibrationError, match=r"points\[2\]\.baseline: 'two' has 2 GPUs"):
        load_published([_write(tmp_path, data)])


def test_ids_are_unique_across_files_and_missing_files_are_errors(tmp_path: Path) -> None:
    a, b = _write(tmp_path, GOOD, "a.yaml"), _write(tmp_path, GOOD, "b.yaml")
    with pytest.raises(CalibrationError, match=r"b\.yaml: id: 'demo' already used by .*a\.yaml"):
        load_published([a, b])
    with pytest.raises(CalibrationError, match=r"nope\.yaml: no such file"):
        load_published([tmp_path / "nope.yaml"])
    (tmp_path / "empty.yaml").write_text("")
    with pytest.raises(CalibrationError, match=r"empty\.yaml: file is empty"):
        load_published([tmp_path / "empty.yaml"])


def test_the_dataset_covers_what_the_issue_asks() -> None:
    """At least 60 points from 8 independent campaigns, PS and all-reduce, 1 to 512 GPUs, links
    from 10 to 100 Gbit/s, three GPU generations, and single-GPU baselines for scaling points."""
    points = load_published()
    assert len(points) >= 60
    assert len({p.campaign for p in points}) >= 8
    systems = {p.system for p in points}
    assert {"ps", "allreduce"} <= systems
    assert any(p.sync for p in points if p.system == "ps")
    assert min(p.gpus for p in points) == 1 and max(p.gpus for p in points) >= 512
    multi_host = [p for p in points if p.scenario.num_workers > 1]
    links = {p.link_gbps for p in multi_host}
    assert min(links) <= 10 and max(links) >= 100
    assert {"K80", "P100", "V100"} <= {p.gpu for p in points}
    with_baseline = [p for p in points if p.baseline is not None]
    assert len(with_baseline) >= 60
    assert {"ps", "allreduce"} <= {p.system for p in with_baseline}


def test_campaigns_hold_out_whole_clusters() -> None:
    """Files of one campaign share a cluster or publication: DLPerf's six frameworks are one."""
    campaigns: dict[str, set[str]] = {}
    for p in load_published():
        campaigns.setdefault(p.campaign, set()).add(p.source)
    assert len(campaigns["dlperf"]) == 6
