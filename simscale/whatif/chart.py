"""Scaling charts in the style of the classic MXNet and Horovod write-ups: throughput against
GPUs as grouped bars, one group per series, the ideal linear line, scaling efficiency on a
second axis, and the bottleneck of every point written above its bar. Measured or published
points, when given, are drawn over the bars.

The chart reads sweep rows only; matplotlib is imported here and nowhere in the model.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simscale.whatif.errors import WhatIfError


@dataclass(frozen=True)
class OverlayPoint:
    gpus: float
    samples_per_s: float
    label: str


def load_overlay(path: Path) -> list[OverlayPoint]:
    """Points from a CSV with columns gpus, samples_per_s and optionally label."""
    try:
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            missing = {"gpus", "samples_per_s"} - set(reader.fieldnames or [])
            if missing:
                raise WhatIfError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
            out = []
            for i, r in enumerate(reader, start=2):
                try:
                    out.append(
                        OverlayPoint(
                            float(r["gpus"]),
                            float(r["samples_per_s"]),
                            r.get("label") or "measured",
                        )
                    )
                except ValueError:
                    raise WhatIfError(f"{path}: line {i}: expected numbers") from None
    except OSError as e:
        raise WhatIfError(f"{path}: cannot read: {e.strerror}") from None
    return out


def _short_resource(desc: str) -> str:
    who = "server" if "server" in desc else "worker"
    if "NIC ingress" in desc:
        return f"{who} NIC in"
    if "NIC egress" in desc:
        return f"{who} NIC out"
    if "handler thread" in desc or ".cpu" in desc:
        return "server CPU"
    if "copies" in desc:
        return "PCIe copies"
    if "GPU" in desc:
        return "GPU"
    return desc.split("(")[0].strip() or "?"


def short_bottleneck(row: dict[str, Any]) -> str:
    """A few words for a bar: what limits the point (from the result's bottleneck sentence)."""
    text = str(row.get("bottleneck") or "")
    if text.startswith("GPU compute"):
        waiting = re.search(r"(\d+%) of it waiting for the slowest", text)
        return f"compute-bound; {waiting.group(1)} stragglers" if waiting else "compute-bound"
    m = re.match(r"(exposed communication|waiting for other workers) \(([\d.]+) ms", text)
    if m:
        what = "comm" if m.group(1).startswith("exposed") else "stragglers"
        busiest = re.search(
            r"busiest(?: communication resources| over the iteration)?: (.*?) (\d+%)", text
        )
        tail = f"; {_short_resource(busiest.group(1))} {busiest.group(2)}" if busiest else ""
        return f"{what} {float(m.group(2)):.0f} ms{tail}"
    m = re.match(r"(.*) (\d+%) busy$", text)
    if m:
        return f"{_short_resource(m.group(1))} {m.group(2)} busy"
    return text[:30]


BARS_HEADROOM = 2.1  # the throughput axis ends at this times the tallest bar


def _refuse_shared_bars(ok: Sequence[dict[str, Any]], series: str | None) -> None:
    """WhatIfError where two rows would draw the same bar (same series, same GPUs): a field
    varied besides the GPU count and the series would overprint bars and labels and send each
    efficiency line up and down at one x. Names the field, and how to draw it."""
    from simscale.whatif.rows import METRIC_COLUMNS

    cells: dict[tuple[Any, int], list[dict[str, Any]]] = {}
    for r in ok:
        cells.setdefault((r.get(series) if series else None, int(r["num_gpus"])), []).append(r)
    for (key, gpus), rows in cells.items():
        if len(rows) < 2:
            continue
        fixed = {"point", *METRIC_COLUMNS}
        differ = sorted(
            c for c in rows[0] if c not in fixed and len({repr(r.get(c)) for r in rows}) > 1
        )
        what = ", ".join(differ) or "fields that do not show in the rows"
        where = f"series {series} = {key} at" if series else "at"
        hint = (
            f"draw one series per value with --series {differ[0]}, or " if len(differ) == 1 else ""
        )
        raise WhatIfError(
            f"--plot: {len(rows)} points would share one bar ({where} {gpus} GPUs): they differ "
            f"in {what}; {hint}hold the others fixed (--set) to chart them"
        )


@dataclass(frozen=True)
class _Grid:
    """Where the bars go: one group per GPU count, one bar per series in each group."""

    gpus: list[int]
    keys: list[Any]  # the series' values, in order of first appearance

    def x(self, gpus: int) -> float:
        return float(self.gpus.index(gpus))

    def bar_x(self, gpus: int, series_index: int) -> float:
        width = 0.8 / len(self.keys)
        return self.x(gpus) - 0.4 + width * (series_index + 0.5)


def scaling_chart(
    rows: Sequence[dict[str, Any]],
    path: Path,
    *,
    series: str | None = None,
    labels: dict[str, str] | None = None,
    overlay: Sequence[OverlayPoint] = (),
    title: str = "",
) -> Path:
    """Draw the chart of the ``ok`` rows to ``path`` (png, svg or pdf)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        raise WhatIfError("--plot: no point was predicted, nothing to draw")
    labels = labels or {}
    _refuse_shared_bars(ok, series)

    def key_of(r: dict[str, Any]) -> Any:
        return r.get(series) if series else None

    keys: list[Any] = []
    for r in ok:
        if key_of(r) not in keys:
            keys.append(key_of(r))
    grid = _Grid(sorted({int(r["num_gpus"]) for r in ok}), keys)
    fig, ax = plt.subplots(figsize=(max(7.0, 1.6 * len(grid.gpus) + 3), 5.2))
    ax2 = ax.twinx()
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    top = 0.0
    for si, key in enumerate(keys):
        pts = sorted((r for r in ok if key_of(r) == key), key=lambda r: r["num_gpus"])
        name = labels.get(str(key), f"{series} = {key}" if series else "predicted")
        top = max(top, _draw_series(ax, ax2, grid, si, pts, name, colors[si % len(colors)]))
    # The axis follows the bars (the efficiency lines take the band above them).
    ceiling = top * BARS_HEADROOM
    _draw_ideal(ax, grid, ok, ceiling)
    _draw_overlay(ax, grid, overlay)
    _finish(fig, ax, ax2, grid, ceiling, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def _draw_series(
    ax: Any,
    ax2: Any,
    grid: _Grid,
    si: int,
    pts: list[dict[str, Any]],
    name: str,
    color: str,
) -> float:
    """One series: its bars, its efficiency line on the second axis, each bar's bottleneck
    written above it. Returns the tallest bar."""
    xs = [grid.bar_x(int(r["num_gpus"]), si) for r in pts]
    ys = [r["throughput_samples_per_s"] for r in pts]
    ax.bar(xs, ys, 0.8 / len(grid.keys) * 0.92, color=color, label=name, zorder=2)
    ax2.plot(
        xs,
        [100 * r["scaling_efficiency"] for r in pts],
        color=color,
        marker="o",
        markeredgecolor="black",
        linewidth=1.2,
        zorder=3,
    )
    for x, y, r in zip(xs, ys, pts, strict=True):
        ax.text(
            x,
            y,
            " " + short_bottleneck(r),
            rotation=90,
            ha="center",
            va="bottom",
            fontsize=6.5,
            color="0.25",
        )
    return max(ys)


def _draw_ideal(ax: Any, grid: _Grid, ok: list[dict[str, Any]], ceiling: float) -> None:
    """Ideal: the same GPUs with free communication, a dashed bar top over each group. An ideal
    far above the bars (a point at 30% efficiency) is drawn at the top edge with its value,
    rather than squeezing every bar into the bottom tenth of the chart."""
    ideal: dict[int, float] = {}
    for r in ok:
        g = int(r["num_gpus"])
        ideal[g] = max(ideal.get(g, 0.0), float(r["ideal_samples_per_s"]))
    ax.hlines(
        [ideal[g] for g in grid.gpus],
        [grid.x(g) - 0.42 for g in grid.gpus],
        [grid.x(g) + 0.42 for g in grid.gpus],
        colors="black",
        linestyles="--",
        linewidth=1.4,
        label="ideal (linear, no communication)",
        zorder=4,
    )
    for g in grid.gpus:
        if ideal[g] > ceiling:
            ax.annotate(
                f"ideal {ideal[g]:,.0f} \u2191",
                (grid.x(g), ceiling),
                xytext=(0, -2),
                textcoords="offset points",
                ha="center",
                va="top",
                fontsize=6.5,
            )


def _draw_overlay(ax: Any, grid: _Grid, overlay: Sequence[OverlayPoint]) -> None:
    """Measured or published points, a labelled diamond over their group."""
    for p in overlay:
        if int(p.gpus) in grid.gpus:
            x = grid.x(int(p.gpus))
            ax.scatter([x], [p.samples_per_s], marker="D", color="black", zorder=5, s=28)
            ax.annotate(
                p.label,
                (x, p.samples_per_s),
                fontsize=7,
                xytext=(4, 4),
                textcoords="offset points",
            )
    if overlay:
        ax.scatter([], [], marker="D", color="black", label="measured / published")


def _finish(fig: Any, ax: Any, ax2: Any, grid: _Grid, ceiling: float, title: str) -> None:
    """Axes, limits, legend, title and the note on what the text above a bar means."""
    ax.set_xticks(range(len(grid.gpus)), [str(g) for g in grid.gpus])
    ax.set_xlabel("GPUs")
    ax.set_ylabel("throughput (samples/s): bars")
    # Bars in the lower half, efficiency lines in the upper band, so neither hides the other.
    ax.set_ylim(0, ceiling)
    ax2.set_ylabel("scaling efficiency (%): lines")
    ax2.set_ylim(-110, 108)
    ax2.set_yticks([0, 20, 40, 60, 80, 100])
    ax.grid(axis="y", alpha=0.3, zorder=0)
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.11),
        ncol=min(4, len(grid.keys) + 2),
        fontsize=8,
    )
    ax.set_title(title, fontsize=10)
    fig.text(
        0.01,
        0.01,
        "text above each bar: the bottleneck (busiest resource, busy fraction)",
        fontsize=7,
        color="0.35",
    )
    fig.tight_layout(rect=(0, 0.02, 1, 1))
