"""Calibration: it recovers known parameters, validates honestly, and rejects bad input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from calibration.errors import CalibrationError
from calibration.fit import fit
from calibration.published import PUBLISHED_DIR
from calibration.runs import as_realrun_ran, load_runs
from calibration.validate import cross_validate
from realrun.records.record import (
    SCHEMA_VERSION,
    IterationTiming,
    RunRecord,
    summarize,
    write_record,
)
from simscale.cli import main
from simscale.simulator import simulate
from simscale.spec.costs import CostModel
from simscale.spec.profile import load_profile
from simscale.spec.scenario import Scenario, load_scenario, scenario_from_dict
from tests.support.paths import ROOT

# The "true" world the synthetic records come from: far from the defaults on purpose.
TRUTH = CostModel(bandwidth_factor=0.8, message_overhead_us=300.0, server_update_ns_per_byte=3.0)
FITTED = ("bandwidth_factor", "message_overhead_us", "server_update_ns_per_byte")


def shape(workers: int, servers: int, keys: int, elements: int, mbit: float, **kv: Any) -> Scenario:
    """CPU workers with a little compute, dedicated servers, ``keys`` equal arrays."""
    return scenario_from_dict(
        {
            "cluster": {
                "hosts": [
                    {
                        "count": workers,
                        "gpus_per_host": 1,
                        "gpu": "cpu",
                        "nic_gbps": mbit / 1000,
                        "latency_us": 100,
                    }
                ],
                "server_hosts": {"count": servers, "nic_gbps": mbit / 1000, "latency_us": 100},
            },
            "model": {
                "arrays": [
                    {"name": f"w{i}", "elements": elements, "fwd_gflops": 0.001}
                    for i in range(keys)
                ]
            },
            "training": {"batch_per_gpu": 8},
            "kvstore": {"mode": "dist_sync", "servers": servers, "placement": "dedicated", **kv},
            "simulation": {"warmup_iterations": 1, "measured_iterations": 4},
        }
    )


# Each parameter dominates somewhere: bandwidth (big keys, slow links), per-message overhead
# (many tiny keys, fast links), server update (huge keys, fast links, one server).
SHAPES = [
    shape(2, 2, 8, 250_000, 100),
    shape(4, 2, 8, 250_000, 100),
    shape(2, 1, 40, 100, 10_000),
    shape(3, 2, 40, 100, 10_000),
    shape(4, 1, 4, 4_000_000, 100_000),
    shape(2, 1, 4, 4_000_000, 100_000),
]


def write_synthetic(folder: Path, scenarios: list[Scenario], costs: CostModel) -> list[Path]:
    """Run records whose timings are what the simulator predicts under ``costs`` for the
    scenario as realrun runs it (its protocol), which is how the loader reads records."""
    paths = []
    for i, s in enumerate(scenarios):
        r = simulate(as_realrun_ran(s), costs)
        timings = [
            IterationTiming(
                w.rank,
                it,
                1e9 + it * w.iteration_time_s,
                w.compute_s,
                w.iteration_time_s - w.compute_s,
                w.iteration_time_s,
                1.0,
            )
            for w in r.per_worker
            for it in range(5)
        ]
        samples = [w.gpus * s.training.batch_per_gpu for w in r.per_worker]
        record = RunRecord(
            schema_version=SCHEMA_VERSION,
            scenario=s.to_dict(),
            # As realrun writes it: the ordering and scheduling it honoured (load_record
            # reads a record without them as made before realrun did: pipelined, priority).
            environment={
                "synthetic": True,
                "pull_request": s.kvstore.pull_request,
                "scheduling": s.kvstore.scheduling,
            },
            iterations=tuple(timings),
            summary=summarize(timings, 1, samples),
            complete=True,
        )
        paths.append(write_record(record, folder / f"run{i}.json"))
    return paths


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("runs")
    write_synthetic(folder, SHAPES, TRUTH)
    return folder


@pytest.mark.slow
def test_fit_recovers_known_parameters_within_5_percent(synthetic: Path) -> None:
    """Records simulated with chosen parameters: fitting from the defaults gets them back."""
    result = fit(list(load_runs([synthetic]).runs), FITTED)
    for name in FITTED:
        assert result.values[name] == pytest.approx(getattr(TRUTH, name), rel=0.05), name
    assert result.mape < 0.01


UNEVEN_TRUTH = CostModel(bandwidth_factor=0.8, message_overhead_us=300.0, tcp_share_sigma=0.35)
UNEVEN_FITTED = ("bandwidth_factor", "message_overhead_us", "tcp_share_sigma")


def colocated(hosts: int, keys: int, elements: int, mbit: float) -> Scenario:
    """``hosts`` CPU workers, each host also running one server (MXNet's co-located layout)."""
    d = shape(hosts, hosts, keys, elements, mbit).to_dict()
    del d["cluster"]["server_hosts"]
    d["kvstore"]["placement"] = "colocated"
    return scenario_from_dict(d)


# Where shares matter: co-located sync jobs, every NIC carrying several flows at once.
UNEVEN_SHAPES = [colocated(4, 8, 250_000, 100), colocated(3, 8, 250_000, 100)]


@pytest.mark.slow
def test_fitting_the_spread_of_tcp_shares_leaves_the_other_costs_within_5_percent(
    tmp_path: Path,
) -> None:
    """Records simulated with unequal TCP shares (sigma 0.35) on a bandwidth-bound shape, an
    overhead-bound one and two co-located ones where every NIC carries several flows: fitting
    the spread beside the bandwidth and per-message costs finds those two within 5%.

    The spread itself is not identified by training records: it acts through random draws, so
    throughput moves by a few percent between neighbouring values and a finite-difference
    search settles near its start (0.30; from records made at 0.6 it lands at 0.33 and pulls
    the bandwidth 10% off). A profile measures it with the probe's incast step instead
    (calibration/probe_profile.py); this test holds only what the fit does achieve."""
    # Pulls right behind each push (pipelined), the order in which the shares move throughput
    # most (in MXNet's after_ack order the same records give the same story, less clearly).
    shapes = [SHAPES[0], SHAPES[2], *UNEVEN_SHAPES]
    pipelined = [replace(s, kvstore=replace(s.kvstore, pull_request="with_push")) for s in shapes]
    write_synthetic(tmp_path, pipelined, UNEVEN_TRUTH)
    result = fit(list(load_runs([tmp_path]).runs), UNEVEN_FITTED)
    for name in ("bandwidth_factor", "message_overhead_us"):
        assert result.values[name] == pytest.approx(getattr(UNEVEN_TRUTH, name), rel=0.05), name
    assert 0.02 <= result.values["tcp_share_sigma"] <= 2.0
    assert result.mape < 0.02


@pytest.mark.slow
def test_held_out_shapes_are_predicted_from_the_others(synthetic: Path) -> None:
    """Leave-one-shape-out on exact data: every held-out shape within 5%; each shape is
    judged by a fit that never saw it."""
    runs = list(load_runs([synthetic]).runs)
    report = cross_validate(runs, FITTED)
    assert len(report.predictions) == len(SHAPES)
    assert report.worst < 0.05
    assert {p.shape for p in report.predictions} == {r.shape for r in runs}


@pytest.mark.slow
def test_calibrate_writes_a_profile_that_predict_applies_only_in_scope(
    synthetic: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`simscale calibrate` writes a profile with its provenance; `predict --profile` changes
    the answer for a CPU-worker scenario and leaves a V100 preset alone unless forced."""
    profile_path = tmp_path / "lab.yaml"
    assert (
        main(["calibrate", str(synthetic), "-o", str(profile_path), "--fit", ",".join(FITTED)]) == 0
    )
    profile = load_profile(profile_path)
    assert profile.scope == ("cpu",)
    assert profile.compute == "real"  # the synthetic records' realrun.compute
    assert len(profile.fit.records) == len(SHAPES)
    assert profile.costs.message_overhead_us == pytest.approx(300, rel=0.05)
    # The covariance of the fitted (log) coordinates is kept for interval sampling; its
    # diagonal is the 1-sigma the profile reports.
    cov = profile.fit.covariance
    assert len(cov) == len(FITTED) and all(len(row) == len(FITTED) for row in cov)
    for i, name in enumerate(profile.fit.parameters):
        assert cov[i][i] ** 0.5 == pytest.approx(profile.fit.uncertainty[name])
    assert profile.fit.linear_parameters == ()

    def predicted(path: Path, *extra: str) -> float:
        capsys.readouterr()
        assert main(["predict", str(path), "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["throughput_samples_per_s"]

    cpu = tmp_path / "cpu.yaml"
    cpu.write_text(json.dumps(SHAPES[3].to_dict()))
    assert predicted(cpu, "--profile", str(profile_path)) != pytest.approx(predicted(cpu))
    v100 = ROOT / "scenarios/mxnet/1s-2w-sync.yaml"
    assert predicted(v100, "--profile", str(profile_path)) == predicted(v100)
    assert predicted(v100, "--profile", str(profile_path), "--force-profile") != predicted(v100)
    emulated = tmp_path / "cpu-emulated.yaml"
    emulated.write_text(json.dumps(SHAPES[3].to_dict() | {"realrun": {"compute": "emulated"}}))
    assert predicted(emulated, "--profile", str(profile_path)) == predicted(emulated)


def test_the_committed_profile_is_for_emulated_gpus_and_leaves_real_presets_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """profiles/emulated-v2.yaml was fitted on emulated V100 and CPU workers: it changes the
    emulated-cluster scenarios and not the real 64-GPU V100 preset (unless forced)."""
    profile = ROOT / "profiles" / "emulated-v2.yaml"
    assert load_profile(profile).compute == "emulated"

    def predicted(path: Path, *extra: str) -> float:
        capsys.readouterr()
        assert main(["predict", str(path), "--json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["throughput_samples_per_s"]

    emulated = ROOT / "scenarios" / "emulated" / "mlp-colocated.yaml"
    assert predicted(emulated, "--profile", str(profile)) != pytest.approx(predicted(emulated))
    real = ROOT / "scenarios" / "mxnet" / "2s-2w-sync.yaml"
    assert predicted(real, "--profile", str(profile)) == predicted(real)


@pytest.mark.slow
def test_plot_writes_the_scatter_and_scaling_figures(synthetic: Path, tmp_path: Path) -> None:
    out = tmp_path / "fig.png"
    assert main(["plot", str(synthetic), "-o", str(out)]) == 0
    for name in ("fig-scatter.png", "fig-scaling.png"):
        data = (tmp_path / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


@pytest.mark.slow  # a whole validate: 8 CPU seconds (tests.support.cpu_report)
def test_validate_draws_the_held_out_comparison_and_never_overwrites_it(
    synthetic: Path, tmp_path: Path
) -> None:
    """validate RUNS --plot: measured and held-out predicted throughput per way of moving
    gradients; an existing file is refused before any fitting, --force replaces it."""
    out = tmp_path / "cmp.png"
    assert main(["validate", str(synthetic), "--fit", "none", "--plot", str(out)]) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    out.write_bytes(b"keep")
    assert main(["validate", str(synthetic), "--fit", "none", "--plot", str(out)]) == 2
    assert out.read_bytes() == b"keep"
    assert main(["validate", str(synthetic), "--fit", "none", "--plot", str(out), "--force"]) == 0


def test_a_folder_without_records_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="no run records"):
        load_runs([tmp_path])


def test_a_record_of_another_schema_version_is_rejected(tmp_path: Path) -> None:
    write_synthetic(tmp_path, SHAPES[:1], TRUTH)
    f = tmp_path / "run0.json"
    data = json.loads(f.read_text())
    data["schema_version"] = 99
    f.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=r"run0\.json.*schema_version"):
        load_runs([tmp_path])


def test_a_scenario_that_no_longer_validates_names_file_and_field(tmp_path: Path) -> None:
    write_synthetic(tmp_path, SHAPES[:1], TRUTH)
    f = tmp_path / "run0.json"
    data = json.loads(f.read_text())
    data["scenario"]["kvstore"]["mode"] = "dist_synchronous"
    f.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=r"run0\.json.*kvstore\.mode"):
        load_runs([tmp_path])


def test_incomplete_runs_are_set_aside_not_fitted(tmp_path: Path) -> None:
    write_synthetic(tmp_path, SHAPES[:2], TRUTH)
    f = tmp_path / "run1.json"
    data = json.loads(f.read_text())
    data["complete"], data["summary"], data["error"] = False, None, "worker 1 died"
    f.write_text(json.dumps(data))
    runset = load_runs([tmp_path])
    assert len(runset.runs) == 1
    assert "worker 1 died" in runset.skipped[0][1]


def test_cli_reports_bad_calibration_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["calibrate", str(tmp_path), "-o", str(tmp_path / "p.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no run records" in err[0]
    assert main(["validate", str(tmp_path / "missing")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert main(["calibrate", str(tmp_path), "-o", "p.yaml", "--fit", "bandwidth"]) == 2


@pytest.mark.slow  # every published point predicted: 12 CPU seconds (cpu_report)
def test_published_validation_without_a_fit_judges_every_point(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`validate --published --fit none` judges every point with the mechanisms' starting
    figures (here on the two Horovod efficiency files, cheap to simulate)."""
    from calibration import published

    files = [PUBLISHED_DIR / "horovod-128gpu.yaml", PUBLISHED_DIR / "horovod-512gpu.yaml"]
    real_load = published.load_published
    monkeypatch.setattr(published, "load_published", lambda paths=None: real_load(files))
    assert main(["validate", "--published", "--fit", "none", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["name"]: r for r in out["published"]}
    assert {"hvd512-inception_v3", "hvd512-resnet101", "hvd512-vgg16"} <= set(rows)
    assert all(r["compared"] == "efficiency" for r in rows.values())
    assert out["published_summary"]["by_system"]["allreduce"]["points"] == 6


def test_profile_file_errors_name_the_field(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("schema_version: 1\ncosts:\n  bandwidth_factor: 2.5\n")
    with pytest.raises(Exception, match=r"bad\.yaml: costs\.bandwidth_factor: got 2\.5"):
        load_profile(p)
    assert load_scenario(ROOT / "scenarios/64gpu.yaml").num_gpus == 64


def test_calibration_models_realrun_protocol_as_realrun_implements_it() -> None:
    """Runs are simulated with the scheduling and pull ordering their scenario states (realrun
    honours both), and "priority" with no window given is realrun's default window."""
    from calibration.runs import REALRUN_SEND_WINDOW_MB
    from realrun.ps.postoffice import DEFAULT_WINDOW_BYTES

    assert REALRUN_SEND_WINDOW_MB * 2**20 == DEFAULT_WINDOW_BYTES
    for ordering in ("after_ack", "with_push"):
        for scheduling, window_mb in (("fifo", 0.0), ("priority", REALRUN_SEND_WINDOW_MB)):
            kv = replace(SHAPES[0].kvstore, pull_request=ordering, scheduling=scheduling)
            s = as_realrun_ran(replace(SHAPES[0], kvstore=kv))
            assert (s.kvstore.scheduling, s.kvstore.pull_request) == (scheduling, ordering)
            assert s.kvstore.send_window_mb == window_mb
