"""Outputs never overwrite by default, and ad-hoc run records stay out of datasets."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from calibration.errors import CalibrationError
from calibration.runs import _record_files
from realrun.launching.launch import child_environ
from realrun.run import AD_HOC_RECORDS, default_record_path, record_name
from simscale.cli import main
from simscale.spec.scenario import load_scenario
from tests.support.paths import ROOT

CPU = ROOT / "scenarios" / "cpu-2x2-sync.yaml"


def test_predict_refuses_to_overwrite_without_force(tmp_path, capsys) -> None:
    out = tmp_path / "result.json"
    out.write_text("precious")
    assert main(["predict", str(CPU), "-o", str(out)]) == 2
    assert out.read_text() == "precious"
    assert "refusing to overwrite" in capsys.readouterr().err
    assert main(["predict", str(CPU), "-o", str(out), "--force"]) == 0
    assert out.read_text().startswith("{")


def test_plot_refuses_before_plotting_when_a_figure_exists(tmp_path, capsys) -> None:
    """Following the README must not replace committed figures: `plot` checks all three
    paths first."""
    (tmp_path / "cal-scaling.png").write_bytes(b"committed")
    rc = main(["plot", str(ROOT / "runs" / "emulated-v2"), "-o", str(tmp_path / "cal.png")])
    assert rc == 2
    assert "cal-scaling.png exists" in capsys.readouterr().err
    assert not (tmp_path / "cal-scatter.png").exists()


def test_a_trace_goes_into_a_folder_that_does_not_exist_yet(tmp_path) -> None:
    """The README's `--trace /tmp/simscale/iter.json` on a fresh machine: the folder is made."""
    trace = tmp_path / "fresh" / "iter.json"
    assert main(["predict", str(CPU), "--trace", str(trace)]) == 0
    assert trace.read_text().startswith("{")


@pytest.mark.parametrize(
    "args",
    [
        ["predict", str(CPU), "-o", "{blocked}/result.json"],
        ["predict", str(CPU), "--trace", "{blocked}/iter.json"],
        ["sweep", str(CPU), "--vary", "kvstore.servers=1,2", "-o", "{blocked}/rows.csv"],
        ["schema", "-o", "{blocked}/schema.json"],
        ["calibrate", str(ROOT / "runs" / "emulated-v2"), "-o", "{blocked}/lab.yaml"],
    ],
    ids=["predict -o", "predict --trace", "sweep -o", "schema -o", "calibrate -o"],
)
def test_an_unwritable_output_is_one_line_before_any_work(args, tmp_path, capsys) -> None:
    """A path under a file (a typo'd folder) is refused up front, naming the option: no
    traceback after minutes of simulating or fitting, and nothing written."""
    blocked = tmp_path / "notes.txt"
    blocked.write_text("a file, not a folder")
    option = "--trace" if "--trace" in args else "-o"
    assert main([a.replace("{blocked}", str(blocked)) for a in args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"simscale: error: {option}: cannot write {blocked}/")
    assert err.endswith("is a file, not a folder") and "\n" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_folder_is_not_an_output_file(tmp_path, capsys) -> None:
    assert main(["predict", str(CPU), "-o", str(tmp_path), "--force"]) == 2
    assert "is a folder, expected the path of a file" in capsys.readouterr().err


def test_combine_traces_refuses_to_overwrite_without_force(tmp_path, capsys) -> None:
    trace = tmp_path / "iter.json"
    assert main(["predict", str(CPU), "--trace", str(trace)]) == 0
    out = tmp_path / "both.json"
    out.write_text("precious")
    assert main(["combine-traces", str(trace), "-o", str(out)]) == 2
    assert out.read_text() == "precious" and "refusing to overwrite" in capsys.readouterr().err
    assert main(["combine-traces", str(trace), "-o", str(out), "--force"]) == 0
    assert out.read_text().startswith("{")


def test_record_names_follow_the_effective_scenario() -> None:
    as_written = load_scenario(CPU)
    assert record_name(as_written) == "cpu-2x2-sync"
    overrides = ["kvstore.mode=dist_async"]
    name = record_name(load_scenario(CPU, overrides), overrides)
    assert name == "mlp-2w2s-async-colocated"
    assert "-sync" not in name


def test_default_records_are_new_files_under_runs_local(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = load_scenario(CPU)
    first = default_record_path(s)
    assert first.parent == AD_HOC_RECORDS and first.name.startswith("cpu-2x2-sync-")
    first.parent.mkdir(parents=True)
    first.write_text("{}")
    assert default_record_path(s) != first
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "runs/local/x.json"], cwd=ROOT, check=False
    )
    assert ignored.returncode == 0, "runs/local/ must be ignored by git"


def test_realrun_run_refuses_an_existing_output_before_starting(tmp_path) -> None:
    out = tmp_path / "run.json"
    out.write_text("earlier run")
    proc = subprocess.run(
        [sys.executable, "-m", "realrun.cli", "run", str(CPU), "-o", str(out)],
        cwd=ROOT,
        env=child_environ({}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "refusing to overwrite" in proc.stderr
    assert out.read_text() == "earlier run"


def test_dataset_folders_skip_ad_hoc_records(tmp_path) -> None:
    data = tmp_path / "runs"
    src = sorted((ROOT / "runs" / "emulated-v2").glob("*.json"))[0]
    (data / "local").mkdir(parents=True)
    shutil.copy(src, data / "a.json")
    shutil.copy(src, data / "local" / "adhoc.json")
    assert _record_files([data]) == [data / "a.json"]
    # Given by name, the ad-hoc folder is read.
    assert _record_files([data / "local"]) == [data / "local" / "adhoc.json"]
    (data / "a.json").unlink()
    with pytest.raises(CalibrationError, match="only ad-hoc records under local/"):
        _record_files([data])


def test_a_figure_path_is_checked_before_any_work(tmp_path, capsys) -> None:
    """A .txt figure, or figures that exist, are refused before validation's folds run (they
    take minutes with --published), not after them, and not as matplotlib's traceback."""
    runs = str(ROOT / "runs" / "emulated-v2")
    assert main(["plot", runs, "-o", str(tmp_path / "cal.txt")]) == 2
    assert "cal.txt: expected a .png, .svg or .pdf file" in capsys.readouterr().err
    (tmp_path / "pub-scatter.png").write_bytes(b"committed")
    assert main(["validate", "--published", "--plot", str(tmp_path / "pub.png")]) == 2
    assert "pub-scatter.png exists; refusing to overwrite" in capsys.readouterr().err
    assert (tmp_path / "pub-scatter.png").read_bytes() == b"committed"
