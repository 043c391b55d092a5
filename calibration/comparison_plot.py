"""The PS-vs-all-reduce chart: measured and held-out predicted throughput against worker hosts,
one series per way of moving the gradients (1 server, S:1 servers per worker host, ring
all-reduce), one panel per model and link speed, as the classic MXNet-vs-Horovod comparison
draws it. Predictions are the cross-validation's held-out ones: no shape is in the fit that
predicts it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from calibration.plots import save_figure
from calibration.validate import Prediction
from simscale.spec.scenario import scenario_from_dict

SERIES_ORDER = ("1 server", "1:1", "2:1", "allreduce")
COLORS = {"1 server": "tab:red", "1:1": "tab:blue", "2:1": "tab:green", "allreduce": "tab:purple"}


def worker_hosts(p: Prediction) -> int:
    return scenario_from_dict(json.loads(p.shape)).num_worker_hosts


def servers_comparison(predictions: Sequence[Prediction], path: Path, title: str = "") -> Path:
    """Write the chart to ``path``: in each (model, link) panel, measured means with their
    repeats' standard deviation as points and the held-out predictions as dashed lines."""
    panels: dict[tuple[str, str], list[Prediction]] = {}
    for p in predictions:
        panels.setdefault((p.groups["model"], p.groups["link"]), []).append(p)
    keys = sorted(panels, key=lambda k: (k[0], float(k[1].removesuffix("Mbit/s") or 0)))
    cols = min(2, len(keys))
    rows = (len(keys) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.6 * cols, 4.4 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys, strict=False):
        by_series: dict[str, list[tuple[int, Prediction]]] = {}
        for p in panels[key]:
            by_series.setdefault(p.groups["servers"], []).append((worker_hosts(p), p))
        names = [s for s in SERIES_ORDER if s in by_series]
        names += sorted(set(by_series) - set(SERIES_ORDER))
        for name in names:
            ordered = sorted(by_series[name], key=lambda t: t[0])
            x = [h for h, _ in ordered]
            pts = [p for _, p in ordered]
            color = COLORS.get(name, "tab:gray")
            ax.errorbar(
                x,
                [p.measured for p in pts],
                yerr=[p.measured_std for p in pts],
                fmt="o-",
                color=color,
                capsize=3,
                label=f"{name}: measured",
            )
            ax.plot(x, [p.predicted for p in pts], "x--", color=color, label=f"{name}: predicted")
        ax.set_title(f"{key[0]}, {key[1]} NICs", fontsize=9)
        ax.set_xlabel("worker hosts")
        ax.set_ylabel("samples/s")
        ax.set_ylim(bottom=0)
        ax.set_xticks(sorted({h for series in by_series.values() for h, _ in series}))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6.5, ncol=2, frameon=False)
    for ax in list(axes.flat)[len(keys) :]:
        ax.set_visible(False)
    return save_figure(fig, path, title)
