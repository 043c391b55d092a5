"""Held-out predictions against published measurements, as figures (matplotlib, to files).

- scatter: every published point against the prediction of a fit that never saw its source,
  with y = x and a ±10% band; efficiency points on one panel, throughput points on another;
- scaling: one panel per family (points of one source sharing a single-GPU baseline, or one
  model's stated efficiencies across cluster sizes): published and held-out throughput against
  GPUs, ideal linear scaling, and the scaling efficiency on a second axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from calibration.plots import identity_axes, save_figure
from calibration.published_fit import Judged

SYSTEM_COLORS = {"ps": "tab:red", "allreduce": "tab:blue", "single": "tab:gray"}


def scatter(judged: Sequence[Judged], path: Path, title: str = "") -> Path:
    """Predicted against published, one panel per compared quantity."""
    kinds = [k for k in ("efficiency", "throughput") if any(j.kind == k for j in judged)]
    fig, axes = plt.subplots(1, len(kinds), figsize=(6.4 * len(kinds), 6), squeeze=False)
    for ax, kind in zip(axes.flat, kinds, strict=True):
        js = [j for j in judged if j.kind == kind]
        for system, color in SYSTEM_COLORS.items():
            sel = [j for j in js if j.point.system == system]
            if sel:
                ax.scatter(
                    [j.published for j in sel],
                    [j.predicted for j in sel],
                    color=color,
                    s=26,
                    alpha=0.85,
                    label=f"{system} ({len(sel)})",
                )
        vals = [v for j in js for v in (j.published, j.predicted)]
        lo, hi = min(vals) * 0.8, max(vals) * 1.25
        identity_axes(ax, lo, hi)
        unit = "scaling efficiency" if kind == "efficiency" else "samples/s"
        ax.set_xlabel(f"published {unit}")
        ax.set_ylabel(f"held-out prediction ({unit})")
        ape = np.array([j.ape for j in js])
        ax.set_title(
            f"{kind}: {len(js)} points, mean error {ape.mean():.1%}, worst {ape.max():.1%}",
            fontsize=10,
        )
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left", fontsize=8)
    return save_figure(fig, path, title, dpi=120)


def families(judged: Sequence[Judged]) -> dict[str, list[Judged]]:
    """Points that form one scaling curve: one source's points sharing a single-GPU baseline
    (with the baseline itself), or one campaign's stated efficiencies of one model."""
    out: dict[str, list[Judged]] = {}
    by_name = {(j.point.source, j.point.name): j for j in judged}
    for j in judged:
        p = j.point
        if p.baseline is not None:
            key = f"{p.source}: {p.baseline.name} ({p.system})"
            out.setdefault(key, [])
            base = by_name.get((p.source, p.baseline.name))
            if base is not None and base not in out[key]:
                out[key].append(base)
            out[key].append(j)
        elif p.metric == "scaling_efficiency":
            out.setdefault(f"{p.campaign}: {p.scenario.model.spec().name} (stated efficiency)", [])
            out[f"{p.campaign}: {p.scenario.model.spec().name} (stated efficiency)"].append(j)
    return {k: sorted(v, key=lambda j: j.point.gpus) for k, v in out.items() if len(v) >= 2}


def scaling(judged: Sequence[Judged], path: Path, title: str = "") -> Path:
    """Per family: throughput (published, held-out, ideal) and efficiency against GPUs."""
    fams = families(judged)
    cols = min(4, max(1, len(fams)))
    rows = max(1, (len(fams) + cols - 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.9 * rows), squeeze=False)
    for ax in axes.flat[len(fams) :]:
        ax.set_visible(False)
    for ax, (name, js) in zip(axes.flat, sorted(fams.items()), strict=False):
        gpus = np.array([j.point.gpus for j in js], dtype=float)
        eff_ax = ax.twinx()
        base = next((j for j in js if j.point.gpus == 1), None)
        multi = [j for j in js if j.point.gpus > 1]
        if base is not None:
            per_gpu = base.published
            pub = [base.published] + [per_gpu * j.point.gpus * j.published for j in multi]
            pred = [base.predicted] + [per_gpu * j.point.gpus * j.predicted for j in multi]
            ax.plot(gpus, pub, "o-", color="k", label="published")
            ax.plot(gpus, pred, "s--", color="tab:blue", label="held-out prediction")
            ax.plot(gpus, per_gpu * gpus, ":", color="gray", label="ideal linear")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_ylabel("samples/s")
        else:
            ax.set_yticks([])
            ax.set_xscale("log", base=2)
        mg = np.array([j.point.gpus for j in multi], dtype=float)
        eff_ax.plot(
            mg,
            [j.published for j in multi],
            "o",
            mfc="none",
            color="tab:red",
            label="published efficiency",
        )
        eff_ax.plot(
            mg, [j.predicted for j in multi], "x", color="tab:red", label="predicted efficiency"
        )
        eff_ax.set_ylim(0, 1.15)
        eff_ax.set_ylabel("scaling efficiency", color="tab:red")
        ax.set_xlabel("GPUs")
        ax.set_title(name, fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        if ax is axes.flat[0]:
            h1, l1 = ax.get_legend_handles_labels()
            h2, l2 = eff_ax.get_legend_handles_labels()
            ax.legend(h1 + h2, l1 + l2, fontsize=6, loc="lower right")
    return save_figure(fig, path, title)
