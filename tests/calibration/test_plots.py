"""Calibration figures read right: whole GPUs on the axis, "1 server", the co-host note only
where a worker co-hosts a server, and ``plot -o`` naming every file it wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest

from calibration import plots
from calibration.runs import load_runs
from simscale.cli import main
from simscale.spec.costs import CostModel
from tests.support.paths import ROOT

RUNS = ROOT / "runs" / "emulated-v2"


@pytest.fixture(scope="module")
def dedicated() -> list[Any]:
    """The measured one-server, dedicated shapes (1 and 4 workers): no worker co-hosts one."""
    runs = load_runs([RUNS]).runs
    return [
        r
        for r in runs
        if r.scenario.kvstore.placement == "dedicated" and r.scenario.num_servers == 1
    ]


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[plt.Figure]:
    """The figures the plots would save, kept for inspection instead."""
    kept: list[plt.Figure] = []

    def keep(fig: plt.Figure, path: Path, title: str = "", dpi: int = 110) -> Path:
        kept.append(fig)
        return path

    monkeypatch.setattr(plots, "save_figure", keep)
    return kept


def test_scaling_ticks_are_whole_gpus_and_one_server_is_singular(
    dedicated: list[Any], figures: list[plt.Figure], tmp_path: Path
) -> None:
    plots.scaling(dedicated, CostModel(), tmp_path / "s.png")
    (fig,) = figures
    fig.canvas.draw()
    ax = fig.axes[0]
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    assert "\n1 server" in ax.get_title() and "1 servers" not in ax.get_title()
    plt.close(fig)


def test_the_co_host_note_is_only_where_a_worker_co_hosts_a_server(
    dedicated: list[Any], figures: list[plt.Figure], tmp_path: Path
) -> None:
    colocated = [r for r in load_runs([RUNS]).runs if r.scenario.kvstore.placement == "colocated"]
    for runs in (dedicated, colocated):
        plots.per_worker(runs, CostModel(), tmp_path / "w.png")
    for fig in figures:
        for ax in fig.axes:
            labels = [t.get_text() for t in ax.get_xticklabels()]
            assert ("co-hosts a server" in ax.get_title()) == any("*" in x for x in labels)
        plt.close(fig)


@pytest.mark.slow
def test_plot_names_every_file_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cal.png"
    assert main(["plot", str(RUNS), "-o", str(out)]) == 0
    said = capsys.readouterr().out
    written = sorted(tmp_path.glob("cal-*.png"))
    assert written
    for path in written:
        assert f"wrote {path}" in said
