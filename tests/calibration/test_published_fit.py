"""Fitting and judging on published points: what each point is compared as, that a fit
recovers what made the figures, and that leave-one-source-out never lets a campaign judge
itself."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from calibration import published_fit as pf
from calibration.published import PUBLISHED_DIR, load_published
from simscale.simulator import simulate
from simscale.spec.costs import DEFAULT_COMPUTE_EFFICIENCY, CostModel, real_hardware_costs
from tests.support.paths import ROOT


def _source(campaign: str, ring_gpus: tuple[int, ...], values: dict[str, float]) -> dict:
    """A small all-reduce source: one V100 baseline and rings of 1-GPU hosts (cheap to
    simulate), ResNet-18, 25 Gbit/s: a 16.7 Gbit/s connection binds where the fit starts."""
    points = [
        {
            "name": "one",
            "model": "resnet18",
            "value": values["one"],
            "system": "single",
            "set": {"kvstore.mode": "local"},
        }
    ]
    for n in ring_gpus:
        points.append(
            {
                "name": f"r{n}",
                "model": "resnet18",
                "value": values[f"r{n}"],
                "baseline": "one",
                "set": {"cluster.hosts[0].count": n},
            }
        )
    return {
        "id": f"{campaign}-file",
        "campaign": campaign,
        "source": {"ref": "a test", "table": "none"},
        "setup": "synthetic, produced by the simulator itself",
        "framework": "test",
        "system": "allreduce",
        "metric": "throughput_samples_per_s",
        "read_from": "table",
        "base": {
            "cluster": {"hosts": [{"count": 1, "gpus_per_host": 1, "gpu": "V100", "nic_gbps": 25}]},
            "training": {"batch_per_gpu": 32},
            "kvstore": {"mode": "allreduce", "allreduce": {"algorithm": "ring"}},
            "simulation": {"warmup_iterations": 1, "measured_iterations": 3},
        },
        "points": points,
    }


TRUTH = real_hardware_costs().with_values(
    compute_efficiency={"V100/fp32": 0.3}, connection_gbps=6.0
)


def _figures(tmp_path: Path, campaign: str, ring_gpus: tuple[int, ...]) -> Path:
    """Write a source whose figures are the simulator's own under TRUTH."""
    placeholder = {"one": 1.0} | {f"r{n}": 1.0 for n in ring_gpus}
    path = tmp_path / f"{campaign}.yaml"
    path.write_text(yaml.safe_dump(_source(campaign, ring_gpus, placeholder)))
    values = {}
    for p in load_published([path]):
        r = simulate(p.scenario, TRUTH)
        values[p.name] = float(r.throughput_samples_per_s)
    path.write_text(yaml.safe_dump(_source(campaign, ring_gpus, values)))
    return path


def test_points_are_compared_as_efficiency_when_a_baseline_exists(tmp_path: Path) -> None:
    points = load_published([_figures(tmp_path, "a", (2,))])
    kinds = {p.name: pf.kind_of(p) for p in points}
    assert kinds == {"one": "throughput", "r2": "efficiency"}
    r2 = next(p for p in points if p.name == "r2")
    assert pf.published_value(r2) == pytest.approx(r2.value / (2 * r2.baseline.value))


def test_fit_recovers_the_costs_that_made_the_figures(tmp_path: Path) -> None:
    """Compute efficiency from the single-GPU point, one connection's throughput from the
    rings: both come back from figures the simulator produced with them."""
    points = load_published([_figures(tmp_path, "a", (2, 4))])
    fitted = pf.fit_published(points, ("connection_gbps",), max_evaluations=25)
    # The zoo's resnet18 is part 3x3 layers, so efficiency and Winograd trade off; their
    # product (the single-GPU throughput) is what the point pins down.
    one = next(p for p in points if p.name == "one")
    assert pf.predict_point(one, fitted.costs) == pytest.approx(one.value, rel=1e-3)
    assert fitted.values["connection_gbps"] == pytest.approx(6.0, rel=0.05)
    judged = pf.judge(points, fitted.costs)
    assert max(j.ape for j in judged) < 0.01


def test_on_real_images_efficiency_is_against_one_gpu_with_its_own_loader(tmp_path: Path) -> None:
    """One decoding thread at 20 ms per image feeds a GPU 50 images/s, far below ResNet-18's
    compute: the published single-GPU figure is the loader's, so the ring's efficiency is judged
    as its throughput over 2 x 50, as the source computed it, not over 2 x compute."""
    source = _source("a", (2,), {"one": 50.0, "r2": 100.0})
    source["base"]["training"].update(data="images", data_threads=1)
    source["base"]["cluster"]["hosts"][0]["cpu_cores"] = 8
    path = tmp_path / "images.yaml"
    path.write_text(yaml.safe_dump(source))
    one, r2 = load_published([path])
    costs = TRUTH.with_values(decode_us_per_sample=20_000.0)
    assert pf.predict_point(one, costs) == pytest.approx(50.0)
    ring = simulate(r2.scenario, costs)
    assert pf.predict_point(r2, costs) == pytest.approx(ring.throughput_samples_per_s / 100.0)
    # Both hosts wait on their loaders and the ring hides behind them: 1.0 as published,
    # where against compute alone the same run reads far below one.
    assert pf.predict_point(r2, costs) == pytest.approx(1.0, abs=0.01)
    assert ring.scaling_efficiency < 0.5


@pytest.mark.slow  # measured over 2 CPU s (tests/support/cpu_report.py)
def test_leave_one_source_out_never_fits_on_the_held_out_campaign(tmp_path: Path) -> None:
    files = [_figures(tmp_path, "a", (2,)), _figures(tmp_path, "b", (4,))]
    points = load_published(files)
    judged, fits = pf.leave_one_source_out(points, ("connection_gbps",))
    assert sorted(fits) == ["a", "b"]
    for held, fitted in fits.items():
        held_names = {p.name for p in points if p.campaign == held}
        other = {p.name for p in points if p.campaign != held}
        assert set(fitted.fitted_points) == other and not held_names & set(
            p for p in fitted.fitted_points if p not in other
        )
    assert {j.point.campaign for j in judged} == {"a", "b"} and len(judged) == len(points)
    report = pf.report_dict(judged, "loso")
    assert report["by_system"]["allreduce"]["points"] == 2
    assert "scaling-efficiency points" in pf.format_report(judged, "loso")
    # The report shows what each fold fitted, so a reader sees how firmly a value is pinned.
    per_fold = pf.fold_values(fits)
    assert set(per_fold) == {"a", "b"} and all("connection_gbps" in v for v in per_fold.values())
    table = pf.format_folds(fits)
    assert "held out" in table and f"{per_fold['a']['connection_gbps']:.4g}" in table


def test_unmodelled_points_count_in_the_headline_and_are_also_reported_apart(
    tmp_path: Path,
) -> None:
    """A point the scenario format cannot express is judged with the rest; the report adds the
    figures without it, so a reader sees where the model applies and where it has no mechanism."""
    import dataclasses

    points = load_published([_figures(tmp_path, "a", (2, 4))])
    points = [
        dataclasses.replace(p, unmodelled="a mechanism the model lacks") if p.name == "r4" else p
        for p in points
    ]
    wrong = TRUTH.with_values(connection_gbps=2.0)  # the rings come out too slow
    judged = pf.judge(points, wrong)
    r2, r4 = (next(j for j in judged if j.point.name == n) for n in ("r2", "r4"))
    report = pf.report_dict(judged, "test")
    assert report["by_system"]["allreduce"]["points"] == 2
    assert report["by_system"]["allreduce"]["worst_ape"] == max(r2.ape, r4.ape)
    only = report["expressible"]
    assert only["by_system"]["allreduce"]["points"] == 1
    assert only["by_system"]["allreduce"]["mean_ape"] == pytest.approx(r2.ape)
    assert only["efficiency_points_mean_abs"] == pytest.approx(abs(r2.predicted - r2.published))
    assert report["by_group"]["setup"]["unmodelled"][2] == 1
    assert "without the 1 unmodelled point " in pf.format_report(judged, "test")


def test_the_default_compute_reproduces_its_own_dlperf_reference() -> None:
    """CostModel's V100 fp32 efficiency was derived from DLPerf's single-V100 MXNet figure."""
    points = load_published([PUBLISHED_DIR / "dlperf-mxnet-rn50v1b.yaml"])
    one = next(p for p in points if p.name == "mxgcv-fp32-1gpu")
    (j,) = pf.judge([one], CostModel())
    assert j.error == pytest.approx(0.0, abs=0.01)


def test_figures_of_held_out_predictions_are_written(tmp_path: Path) -> None:
    from calibration import published_plots

    points = load_published([_figures(tmp_path, "a", (2, 4))])
    judged = pf.judge(points, TRUTH.with_values(connection_gbps=8.0))
    fams = published_plots.families(judged)
    assert list(fams) == ["a-file: one (allreduce)"]
    assert [j.point.gpus for j in fams["a-file: one (allreduce)"]] == [1, 2, 4]
    for path in (
        published_plots.scatter(judged, tmp_path / "s.png"),
        published_plots.scaling(judged, tmp_path / "c.png"),
    ):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_fitted_model_names_the_gpus_whose_compute_it_only_assumes() -> None:
    fitted = CostModel(compute_efficiency={"V100/fp32": 0.4})
    assert fitted.unfitted_efficiencies(["V100/fp32", "H100/fp16", "H100/fp16"]) == {
        "H100/fp16": DEFAULT_COMPUTE_EFFICIENCY["H100/fp16"]
    }
    assert CostModel().unfitted_efficiencies(["H100/fp16"]) == {}  # the defaults fit nothing


def test_predict_says_when_its_compute_is_assumed_not_fitted(tmp_path: Path, capsys) -> None:
    """The shipped profile has no H100 point: an H100 prediction says its compute is a guess,
    in words and in the JSON; a V100 fp32 one (fitted) says nothing."""
    import json

    from simscale.cli import main

    h100 = tmp_path / "h100.yaml"
    h100.write_text(
        yaml.safe_dump(
            {
                "model": "resnet50",
                "cluster": {"hosts": [{"count": 1, "instance": "p5.48xlarge", "gpus_per_host": 1}]},
                "training": {"batch_per_gpu": 256, "precision": "amp"},
                "kvstore": {"mode": "local"},
            }
        )
    )
    assert main(["predict", str(h100), "--json"]) == 0
    assumed = json.loads(capsys.readouterr().out)["compute_efficiency_assumed"]
    assert assumed == {"H100/fp16": DEFAULT_COMPUTE_EFFICIENCY["H100/fp16"]}
    assert main(["predict", str(h100)]) == 0
    assert "H100/fp16: no fitted compute efficiency" in capsys.readouterr().out
    v100 = ROOT / "scenarios" / "mxnet" / "1s-2w-sync.yaml"
    assert main(["predict", str(v100), "--json"]) == 0
    assert "compute_efficiency_assumed" not in json.loads(capsys.readouterr().out)


def test_held_out_points_get_intervals_and_their_coverage_is_reported(tmp_path: Path) -> None:
    """With draws, each held-out point carries the values its fold's identified parameters and
    its scenario's declared ranges give; the report counts how many published values fall
    inside the 90% and 50% intervals, per system and per group."""
    files = [_figures(tmp_path, "a", (2,)), _figures(tmp_path, "b", (4,))]
    points = load_published(files)
    judged, _ = pf.leave_one_source_out(points, ("connection_gbps",), jobs=1, draws=4)
    assert all(len(j.draws) == 4 for j in judged)
    for j in judged:
        lo90, hi90 = j.interval(0.9)
        lo50, hi50 = j.interval(0.5)
        assert lo90 <= lo50 <= hi50 <= hi90
        assert j.covered(0.9) == (lo90 <= j.published <= hi90)
    report = pf.report_dict(judged, "loso")
    ar = report["by_system"]["allreduce"]
    assert ar["points_with_intervals"] == 2 and 0 <= ar["covered_90"] <= 1
    assert "median_relative_width_90" in report["coverage_by_group"]["gpu"]["V100"]
    assert "interval coverage" in pf.format_coverage(judged)
    assert report["published"][0]["interval_90"] is not None


def test_a_campaigns_model_error_comes_from_the_other_campaigns_residuals_only() -> None:
    """Hand-derived: four all-reduce points of four campaigns, predicted 10% high, 10% low,
    exact and 20% high, with draws equal to the point (a band of the point alone), so each
    score is |log residual|. Campaign i's 50% margin is the ceil(0.5 * 4) = 2nd smallest of
    the other three's scores, and its 50% interval is the point times exp(-/+ margin); three
    scores cannot bound a 90% margin (ceil(0.9 * 4) = 4 > 3), so none is added there."""
    import math
    from dataclasses import replace

    from simscale.spec.model_error import model_error_group

    # one group: four campaigns have one-host all-reduce points
    ring = [
        p for p in load_published() if model_error_group(p.scenario) == "allreduce/real/one-host"
    ]
    by_campaign = {p.campaign: p for p in ring}
    points = list(by_campaign.values())[:4]
    assert len(points) == 4
    ratios = (1.1, 0.9, 1.0, 1.2)
    judged = [
        pf.Judged(p, "throughput", 100.0, 100.0 * r, draws=(100.0 * r,))
        for p, r in zip(points, ratios, strict=True)
    ]
    out = pf.with_held_out_model_error(judged)
    scores = [abs(math.log(r)) for r in ratios]
    for i, j in enumerate(out):
        others = sorted(x for k, x in enumerate(scores) if k != i)
        assert j.model_error_term(0.5).margin == pytest.approx(others[1], abs=1e-4)
        assert j.model_error_term(0.9).margin is None
    # the judged campaign's own residual does not move its margin
    wild = replace(judged[0], predicted=1000.0, draws=(1000.0,))
    margin = out[0].model_error_term(0.5).margin
    assert pf.with_held_out_model_error([wild, *judged[1:]])[0].model_error_term(0.5).margin == (
        margin
    )
    lo, hi = out[0].interval(0.5)
    assert (lo, hi) == (
        pytest.approx(110 * math.exp(-margin)),
        pytest.approx(110 * math.exp(margin)),
    )


def test_a_one_host_points_margin_is_never_fed_by_multi_host_residuals() -> None:
    """Hand-derived: parameter-server points of four campaigns inside one host, predicted 2%
    high, and of four campaigns across hosts, predicted 50% high, each band the point alone
    (score |log residual|). A one-host point's 50% margin is the ceil(0.5 * 4) = 2nd smallest
    of the other three campaigns' one-host scores, log(1.02), however wrong the multi-host
    points are (in one pool of six or seven it would be the 4th smallest: log(1.5)); a
    multi-host point's is log(1.5)."""
    import math

    from simscale.spec.model_error import model_error_group

    by_group: dict[str, dict[str, object]] = {}
    for p in load_published():
        by_group.setdefault(model_error_group(p.scenario), {}).setdefault(p.campaign, p)
    inside, across = by_group["ps/real/one-host"], by_group["ps/real/network"]
    assert len(inside) >= 4 and len(across) >= 4
    judged = [
        pf.Judged(p, "throughput", 100.0, 100.0 * r, draws=(100.0 * r,))
        for points, r in ((inside, 1.02), (across, 1.5))
        for p in list(points.values())[:4]
    ]
    for j in pf.with_held_out_model_error(judged):
        one_host = model_error_group(j.point.scenario) == "ps/real/one-host"
        want = math.log(1.02) if one_host else math.log(1.5)
        assert j.model_error_term(0.5).margin == pytest.approx(want, abs=1e-4)


def test_the_shipped_real_hardware_profile_pins_down_every_parameter_it_fitted():
    """profiles/real-v1.yaml: every fitted parameter has a usable sigma (no 2223 in log space),
    lies strictly inside its search bounds, and the fit's covariance is stored for --interval."""
    from calibration.fit import PARAMETERS as SEARCH
    from simscale.spec.profile import load_profile
    from simscale.whatif.uncertainty import unidentified_parameters

    profile = load_profile(ROOT / "profiles" / "real-v1.yaml")
    fit = profile.fit
    assert unidentified_parameters(profile) == {}
    assert len(fit.covariance) == len(fit.parameters)
    for name in fit.parameters:
        p = SEARCH.get(name) or pf.parameter(name)
        value = p.get(profile.costs)
        assert p.lower < value < p.upper, f"{name} = {value} sits at a search bound"
    assert "allreduce_tensor_us" not in fit.parameters


def test_a100_tf32_rows_are_judged_as_tf32():
    """NVIDIA's DGX A100 "TF32" rows ran fp32 layers on the tensor cores: their compute is
    the TF32 peak's, not fp32's (which put A100's fitted fp32 efficiency at 0.93)."""
    points = [p for p in load_published() if "tf32" in p.name]
    assert points
    assert {p.scenario.training.precision for p in points} == {"tf32"}


def test_dlperf_paddle_rows_decode_on_the_hosts_cpus_with_the_readmes_reader_threads():
    """DLPerf's Paddle README says its FP16 scaling is poor because DALI would not install, so
    Paddle's own reader decoded on the CPUs with reader_thread 8 (12 on the 4-GPU row): every
    row trains on images with those threads, one process per GPU on the hosts' 24 cores. The
    reader's per-image cost is not the MXNet decoders' the profile fits, so the file declares
    a range for it (50-200 images/s per core) and the rows stay out of the fit."""
    from simscale.spec.ranges import ranges_for

    rows = {p.name: p for p in load_published() if p.source == "dlperf-paddle-rn50"}
    assert rows
    for p in rows.values():
        t = p.scenario.training
        assert (t.data, t.data_threads) == ("images", 12 if p.name == "paddle-amp-4gpu" else 8)
        assert p.scenario.cluster.hosts[0].cpu_cores == 24
        (r,) = [r for r in ranges_for(p.scenario) if r.fact == "decode_us_per_sample"]
        assert (r.low, r.high) == (5_000, 20_000) and "per CPU core" in r.source
        assert p.gpus == 1 or p.unmodelled
    # At a per-image cost inside the range, a host of 8 FP16 V100s is held to what its cores
    # decode (24 cores / 9.5 ms = 2,526 images/s), not to its GPUs' 8 x ~1,000.
    costs = real_hardware_costs().with_values(decode_us_per_sample=9_500.0)
    eight = rows["paddle-amp-8gpu"]
    per_host = simulate(eight.scenario, costs).throughput_samples_per_s
    assert per_host == pytest.approx(24 / 9.5e-3, rel=0.02)
    # and one GPU with its own 8 threads decodes 8 / 9.5 ms = 842 images/s, below its compute.
    assert pf.predict_point(rows["paddle-amp-1gpu"], costs) == pytest.approx(8 / 9.5e-3)


def test_efficiency_is_judged_against_the_baseline_the_source_measured():
    """DLPerf's Paddle 4-GPU FP16 row ran 12 reader threads per process, its 1-GPU baseline 8:
    the published efficiency divides by that 8-thread baseline, and so does the prediction."""
    rows = {p.name: p for p in load_published() if p.source == "dlperf-paddle-rn50"}
    four, one = rows["paddle-amp-4gpu"], rows["paddle-amp-1gpu"]
    costs = real_hardware_costs().with_values(decode_us_per_sample=9_500.0)
    baseline = pf.predict_point(one, costs)
    assert baseline == pytest.approx(8 / 9.5e-3)  # held by its 8 threads
    throughput = simulate(four.scenario, costs).throughput_samples_per_s
    assert pf.predict_point(four, costs) == pytest.approx(throughput / (4 * baseline))
