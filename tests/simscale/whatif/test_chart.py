"""The scaling chart: drawn from sweep rows with series, ideal line, bottleneck labels and an
overlay of measured points; one-line errors for bad overlay files."""

from __future__ import annotations

from pathlib import Path

import pytest

from simscale.whatif import WhatIfError
from simscale.whatif.chart import load_overlay, scaling_chart, short_bottleneck


def _row(gpus: int, series: int, thr: float, bottleneck: str) -> dict:
    return {
        "status": "ok",
        "num_gpus": gpus,
        "s": series,
        "throughput_samples_per_s": thr,
        "ideal_samples_per_s": 1000.0 * gpus,
        "scaling_efficiency": thr / (1000.0 * gpus),
        "bottleneck": bottleneck,
        "busiest_resource": "host 8 (server 0) NIC ingress",
        "busiest_busy_fraction": 0.97,
    }


def test_short_bottleneck_names_the_limit() -> None:
    assert short_bottleneck({"bottleneck": "GPU compute (99% busy): compute-bound"}) == (
        "compute-bound"
    )
    waiting = "GPU compute (100% busy, 12% of it waiting for the slowest of 64 GPUs): compute-bound"
    assert short_bottleneck({"bottleneck": waiting}) == "compute-bound; 12% stragglers"
    assert (
        short_bottleneck({"bottleneck": "host 8 (server 0) NIC ingress 97% busy"})
        == "server NIC in 97% busy"
    )
    text = (
        "exposed communication (124.9 ms per iteration) with no resource saturated: the "
        "push-update-pull chain takes turns; busiest over the iteration: server 0 handler "
        "thread (host 8) 59%, x 5%"
    )
    assert short_bottleneck({"bottleneck": text}) == "comm 125 ms; server CPU 59%"


def test_chart_is_drawn_with_series_and_overlay(tmp_path: Path) -> None:
    rows = [
        _row(g, s, 1000.0 * g * eff, "host 8 (server 0) NIC ingress 97% busy")
        for g in (8, 16)
        for s, eff in ((0, 0.5), (1, 0.9))
    ]
    rows.append({"status": "invalid", "message": "x"})
    overlay = tmp_path / "measured.csv"
    overlay.write_text("gpus,samples_per_s,label\n8,7000,run A\n16,13000,run B\n")
    out = scaling_chart(
        rows,
        tmp_path / "c.png",
        series="s",
        labels={"0": "one server"},
        overlay=load_overlay(overlay),
        title="t",
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 10_000


def test_bad_overlay_and_empty_rows_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("gpus,throughput\n8,1\n")
    with pytest.raises(WhatIfError, match="missing column"):
        load_overlay(bad)
    bad.write_text("gpus,samples_per_s\n8,fast\n")
    with pytest.raises(WhatIfError, match="line 2: expected numbers"):
        load_overlay(bad)
    with pytest.raises(WhatIfError, match="cannot read"):
        load_overlay(tmp_path / "missing.csv")
    with pytest.raises(WhatIfError, match="nothing to draw"):
        scaling_chart([{"status": "invalid"}], tmp_path / "x.png")


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures scaling_chart draws, kept open for inspection."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kept: list = []
    close = plt.close
    monkeypatch.setattr(plt, "close", kept.append)
    yield kept
    for fig in kept:
        close(fig)


def test_two_varied_fields_and_one_series_are_refused_with_the_field_named(
    tmp_path: Path,
) -> None:
    """Varying the GPU count and nic_gbps, charting one series per s: two rows per bar, which
    overprinted labels and zigzagged the efficiency lines."""
    rows = [
        {**_row(g, s, thr, "x"), "cluster.hosts[0].nic_gbps": nic}
        for g in (8, 16)
        for s in (1, 2)
        for nic, thr in ((10, 900.0 * g), (25, 950.0 * g))
    ]
    with pytest.raises(WhatIfError) as e:
        scaling_chart(rows, tmp_path / "c.png", series="s")
    message = str(e.value)
    assert "2 points would share one bar (series s = 1 at 8 GPUs)" in message
    assert "differ in cluster.hosts[0].nic_gbps" in message
    assert "--series cluster.hosts[0].nic_gbps" in message
    assert not (tmp_path / "c.png").exists()


def test_the_axis_follows_the_bars_and_efficiency_lines_run_left_to_right(
    tmp_path: Path, drawn: list
) -> None:
    """An ideal far above the bars (here 10x: 10% efficiency) no longer sets the axis: it is
    labelled at the top edge; each series' efficiency line has one point per GPU count."""
    rows = [_row(g, s, 100.0 * g, "x") for g in (8, 16, 32) for s in (1, 2)]
    scaling_chart(rows, tmp_path / "c.png", series="s")
    (fig,) = drawn
    ax, ax2 = fig.axes
    assert ax.get_ylim()[1] == pytest.approx(2.1 * 100.0 * 32)
    assert any(t.get_text().startswith("ideal 32,000") for t in ax.texts)
    for line in ax2.get_lines():
        xs = list(line.get_xdata())
        assert xs == sorted(set(xs)) and len(xs) == 3
