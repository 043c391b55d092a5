"""Predicted-vs-measured plots a person trusts at a glance (matplotlib, written to files).

- scatter: every configuration, measured against predicted, with y = x and a ±10% band;
- scaling: throughput against GPUs for each family of shapes that differ only in size, measured
  points with error bars over repeats, the simulator's line, ideal linear scaling, and the
  scaling efficiency on a second axis — in the style of the classic MXNet and Horovod charts;
- workers: per-worker throughput where workers differ (e.g. one that co-hosts a server).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from calibration.runs import Run, mean_by_shape
from calibration.validate import groups_of, label_of
from simscale.simulator import simulate
from simscale.spec.costs import CostModel
from simscale.spec.scenario import Scenario


def identity_axes(ax: plt.Axes, lo: float, hi: float) -> None:
    """Log-log axes from lo to hi with y = x and its ±10% band: where a prediction should lie."""
    xs = np.geomspace(lo, hi, 50)
    ax.plot(xs, xs, "k-", lw=1, label="y = x")
    ax.fill_between(xs, xs * 0.9, xs * 1.1, color="k", alpha=0.08, label="±10%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)


def save_figure(fig: plt.Figure, path: Path, title: str = "", dpi: int = 110) -> Path:
    """Title, lay out, write (creating the folder) and close: the end of every figure here."""
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def with_workers(s: Scenario, n: int) -> Scenario:
    """The same configuration with ``n`` worker hosts (a server per worker stays one each)."""
    hosts = (replace(s.cluster.hosts[0], count=n), *s.cluster.hosts[1:])
    kv = s.kvstore
    if kv.placement == "colocated" and kv.servers is not None and kv.servers == s.num_workers:
        kv = replace(kv, servers=n)
    elif kv.placement == "colocated" and kv.servers is not None:
        kv = replace(kv, servers=min(kv.servers, n))
    return replace(s, cluster=replace(s.cluster, hosts=hosts), kvstore=kv)


def family_key(s: Scenario) -> str:
    """Shapes that differ only in the number of worker hosts belong to one family."""
    d = s.to_dict()
    d["cluster"]["hosts"][0]["count"] = 0
    kv = d["kvstore"]
    if s.kvstore.placement == "colocated" and kv.get("servers") in (None, s.num_workers):
        kv["servers"] = "per-worker"  # unset means one per worker host, as launch.py does
    for k in ("name", "description", "simulation"):
        d.pop(k, None)
    return json.dumps(d, sort_keys=True)


def figure_paths(out: Path) -> tuple[Path, Path, Path]:
    """The scatter, scaling and per-worker figure files ``plot_all`` writes for ``out``."""
    stem, suffix = out.with_suffix(""), out.suffix or ".png"
    return tuple(Path(f"{stem}-{kind}{suffix}") for kind in ("scatter", "scaling", "workers"))


def plot_all(runs: Sequence[Run], costs: CostModel, out: Path, title: str = "") -> list[Path]:
    """Write the scatter, scaling and per-worker figures next to ``out``; return their paths."""
    out.parent.mkdir(parents=True, exist_ok=True)
    scatter_path, scaling_path, workers_path = figure_paths(out)
    written = [
        scatter(runs, costs, scatter_path, title),
        scaling(runs, costs, scaling_path, title),
    ]
    workers = per_worker(runs, costs, workers_path, title)
    if workers is not None:
        written.append(workers)
    return written


def scatter(runs: Sequence[Run], costs: CostModel, path: Path, title: str = "") -> Path:
    shapes = mean_by_shape(runs)
    fig, ax = plt.subplots(figsize=(7, 6.2))
    colors = {
        "sync/colocated": "tab:blue",
        "sync/dedicated": "tab:green",
        "async/colocated": "tab:orange",
        "async/dedicated": "tab:red",
        "allreduce/none": "tab:purple",
    }
    errors = []
    for scenario, mean, std, _n in shapes.values():
        pred = simulate(scenario, costs).throughput_samples_per_s
        g = groups_of(scenario)
        key = f"{g['mode']}/{g['placement']}"
        ax.errorbar(
            mean,
            pred,
            xerr=std,
            fmt="o",
            color=colors.get(key, "tab:gray"),
            ms=5,
            alpha=0.85,
            label=key,
        )
        errors.append(abs(pred - mean) / mean)
    lo = min(min(m for _, m, _, _ in shapes.values()), 1e-9) * 0.7
    hi = max(m for _, m, _, _ in shapes.values()) * 1.4
    lo = max(lo, hi / 1e4)
    identity_axes(ax, lo, hi)
    ax.set_xlabel("measured throughput (samples/s, mean over repeats)")
    ax.set_ylabel("predicted throughput (samples/s)")
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles, strict=True))
    ax.legend(uniq.values(), uniq.keys(), loc="upper left", fontsize=9)
    ax.set_title(
        (title + "\n" if title else "")
        + f"{len(shapes)} configurations: mean error {np.mean(errors):.1%}, "
        f"worst {np.max(errors):.1%}",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    return save_figure(fig, path, dpi=130)


def scaling(runs: Sequence[Run], costs: CostModel, path: Path, title: str = "") -> Path:
    shapes = mean_by_shape(runs)
    families: dict[str, list[tuple[Scenario, float, float]]] = {}
    for scenario, mean, std, _n in shapes.values():
        families.setdefault(family_key(scenario), []).append((scenario, mean, std))
    ordered = [sorted(f, key=lambda t: t[0].num_gpus) for f in families.values()]
    # Families measured at several sizes make curves; with none, show single points.
    fams = [f for f in ordered if len(f) >= 2] or ordered[:6]
    fams.sort(key=lambda f: label_of(f[0][0]))
    cols = min(3, len(fams))
    rows = (len(fams) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.4 * cols, 4.8 * rows), squeeze=False)
    for ax, fam in zip(axes.flat, fams, strict=False):
        base = fam[0][0]
        gpus = [s.num_gpus for s, _, _ in fam]
        meas = np.array([m for _, m, _ in fam])
        err = [e for _, _, e in fam]
        ns = range(fam[0][0].num_workers, fam[-1][0].num_workers + 1)
        line = [(with_workers(base, n), 0.0) for n in ns]
        pred_g = [s.num_gpus for s, _ in line]
        pred = [simulate(s, costs).throughput_samples_per_s for s, _ in line]
        per_gpu = meas[0] / gpus[0]
        ideal = [per_gpu * g for g in pred_g]
        ax.errorbar(
            gpus, meas, yerr=err, fmt="o", color="tab:blue", capsize=3, label="measured (mean ± sd)"
        )
        ax.plot(pred_g, pred, "-", color="tab:orange", label="simulator")
        ax.plot(pred_g, ideal, "--", color="gray", lw=1, label="linear from smallest")
        ax.set_xlabel("GPUs (workers x GPUs per worker)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no 1.5 GPUs
        ax.set_ylabel("samples/s")
        ax.set_ylim(bottom=0)
        ax2 = ax.twinx()
        ax2.plot(
            gpus,
            meas / (per_gpu * np.array(gpus)),
            "s:",
            color="tab:green",
            ms=4,
            label="measured efficiency",
        )
        ax2.set_ylim(0, 1.15)
        ax2.set_ylabel("scaling efficiency", color="tab:green")
        g = groups_of(base)
        per_worker_servers = "per-worker" in family_key(base)
        n = base.num_servers
        servers = "1 server/worker" if per_worker_servers else f"{n} server{'s' * (n != 1)}"
        ax.set_title(
            f"{g['model']} {g['mode']} {g['placement']} {g['link']}\n{servers}", fontsize=9
        )
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(
            h1 + h2,
            l1 + l2,
            fontsize=7,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.2),
            ncol=2,
            frameon=False,
        )
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(fams) :]:
        ax.set_visible(False)
    return save_figure(fig, path, title)


def per_worker(runs: Sequence[Run], costs: CostModel, path: Path, title: str = "") -> Path | None:
    """Bars of measured vs predicted per-worker samples/s for shapes whose workers differ."""
    picked: list[tuple[Scenario, np.ndarray]] = []
    by_shape: dict[str, list[Run]] = {}
    for r in runs:
        by_shape.setdefault(r.shape, []).append(r)
    for rs in by_shape.values():
        rates = np.mean([r.per_worker_samples_per_s for r in rs], axis=0)
        if len(rates) > 1 and rates.max() > 1.05 * rates.min():
            picked.append((rs[0].scenario, rates))
    if not picked:
        return None
    picked = sorted(picked, key=lambda t: -(t[1].max() / t[1].min()))[:6]
    fig, axes = plt.subplots(1, len(picked), figsize=(4.2 * len(picked), 4.3), squeeze=False)
    for ax, (scenario, rates) in zip(axes.flat, picked, strict=True):
        sim = simulate(scenario, costs)
        pred = [w.samples_per_s for w in sim.per_worker]
        x = np.arange(len(rates))
        ax.bar(x - 0.2, rates, 0.4, label="measured")
        ax.bar(x + 0.2, pred, 0.4, label="predicted")
        ax.set_xticks(x, [f"w{w.rank}{'*' if w.co_hosts_server else ''}" for w in sim.per_worker])
        ax.set_ylabel("samples/s")
        cohost = any(w.co_hosts_server for w in sim.per_worker)
        ax.set_title(label_of(scenario) + ("\n(* co-hosts a server)" if cohost else ""), fontsize=8)
        ax.legend(
            fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False
        )
    return save_figure(fig, path, title)
