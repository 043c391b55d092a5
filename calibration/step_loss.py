"""Where a published DDP series loses its scaling: per micro-batch, or once per optimizer step.

A strong-scaling series keeps its global batch and lowers the accumulation steps K as GPUs
are added (NVIDIA's BERT multi-node table). For each of its points, with micro-batch m, N GPUs
at X samples/s and the series' single-GPU rate X1, one GPU spends per optimizer step

    lost = m K / (X / N) - m K / X1

beyond what its single-GPU rate gives. Two kinds of cost are told apart by how ``lost`` moves
with K: a cost per micro-batch (a fixed share of compute, the same at every size) gives a K;
a cost paid once per optimizer step gives a constant b, whatever the number of GPUs. The
series is fitted four ways, each by least squares weighted by the published figures' own
spread (the repeat measurements of one setup in the same source):

- ``a K + b``: per micro-batch and per step, at every size;
- ``a K + b [more than one host]``: the per-step cost starting once the job leaves its host;
- ``a K + c sqrt(K) E[max of N normals]``: a Gaussian spread of each GPU's compute, drawn
  afresh for every micro-batch, the step waiting for the slowest GPU's sum of K;
- ``c K E[max of N normals] + b``: a spread of GPU speeds that lasts (clocks, power limits:
  the same GPU is the slowest on every micro-batch), so every micro-batch waits for the
  slowest of N, plus a per-step cost. This is the shape of simscale.model.stragglers: the
  worker applies its factor 1 + sigma E[max of N] to every micro-batch, so ``c`` is sigma times
  one micro-batch (for the modes it counts as synchronous, which do not include ddp and zero).

Nothing here is simulated: it reads the published rows only. docs/transformer-judgement.md
uses it on the BERT series; ``python -m calibration.step_loss`` prints the table.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from calibration.published import PublishedPoint, load_transformers
from simscale.model.stragglers import expected_max_of_normals

MODELS = ("per step", "per step from 2 hosts", "Gaussian stragglers", "slowest GPU")


@dataclass(frozen=True)
class Row:
    """One point of a series: its accumulation steps, GPUs, hosts and time lost per step."""

    name: str
    micro_batches: int
    gpus: int
    hosts: int
    step_s: float  # measured time of one optimizer step on one GPU
    lost_s: float  # beyond micro_batches x batch / single-GPU rate


@dataclass(frozen=True)
class Fit:
    model: str
    # seconds: a (per micro-batch) then b or c; "slowest GPU": c (sigma x micro-batch), then b
    coefficients: tuple[float, ...]
    errors: tuple[float, ...]  # their standard errors
    chi2: float
    dof: int


@dataclass(frozen=True)
class Series:
    key: str  # "A100-80GB seq 512 tf32 batch 16"
    micro_s: float  # one micro-batch at the single-GPU rate
    rows: tuple[Row, ...]
    fits: dict[str, Fit]


def repeat_spread(points: Sequence[PublishedPoint]) -> float:
    """Relative spread of one published figure: from the pairs of points with the same setup
    (one GPU, precision, sequence, batch, accumulation and GPU count, printed twice in one
    source), the RMS of their relative differences over sqrt(2)."""
    by_setup: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for p in points:
        by_setup[(_series_key(p), p.scenario.training.micro_batches, p.gpus)].append(p.value)
    diffs = [
        (a - b) / ((a + b) / 2) for vals in by_setup.values() for a, b in itertools.pairwise(vals)
    ]
    if not diffs:
        raise ValueError("no setup is published twice: nothing tells the figures' spread")
    return math.sqrt(sum(d * d for d in diffs) / len(diffs) / 2)


def _series_key(p: PublishedPoint) -> str:
    t = p.scenario.training
    return f"{p.gpu} seq {t.seq_len} {t.compute_precision} batch {t.batch_per_gpu}"


def _row(p: PublishedPoint) -> Row:
    assert p.baseline is not None
    t = p.scenario.training
    per_step = t.batch_per_gpu * t.micro_batches  # samples one GPU runs per optimizer step
    step_s = per_step / (p.value / p.gpus)
    hosts = sum(h.count for h in p.scenario.cluster.hosts)
    return Row(p.name, t.micro_batches, p.gpus, hosts, step_s, step_s - per_step / p.baseline.value)


def _fit(model: str, rows: Sequence[Row], spread: float) -> Fit:
    k = np.array([r.micro_batches for r in rows], dtype=float)
    slowest = np.array([expected_max_of_normals(r.gpus) for r in rows])
    first = k * slowest if model == "slowest GPU" else k
    if model in ("per step", "slowest GPU"):
        second = np.ones_like(k)
    elif model == "per step from 2 hosts":
        second = np.array([float(r.hosts > 1) for r in rows])
    else:
        second = np.sqrt(k) * slowest
    x = np.column_stack([first, second])
    y = np.array([r.lost_s for r in rows])
    w = 1.0 / (spread * np.array([r.step_s for r in rows]))
    xw = x * w[:, None]
    coef, *_ = np.linalg.lstsq(xw, y * w, rcond=None)
    cov = np.linalg.pinv(xw.T @ xw)
    chi2 = float(np.sum(((x @ coef - y) * w) ** 2))
    return Fit(
        model,
        tuple(float(c) for c in coef),
        tuple(float(math.sqrt(max(v, 0.0))) for v in np.diag(cov)),
        chi2,
        len(rows) - 2,
    )


def series(points: Sequence[PublishedPoint], spread: float) -> list[Series]:
    """The DDP series of ``points`` with a single-GPU baseline and at least three accumulation
    steps, each fitted every way of ``MODELS``."""
    groups: dict[str, list[PublishedPoint]] = defaultdict(list)
    for p in points:
        if p.system == "ddp" and p.baseline is not None and p.gpus > 1:
            groups[_series_key(p)].append(p)
    out = []
    for key, ps in sorted(groups.items()):
        rows = tuple(sorted((_row(p) for p in ps), key=lambda r: (r.gpus, r.name)))
        if len({r.micro_batches for r in rows}) < 3:
            continue
        base = ps[0].baseline
        assert base is not None
        micro_s = ps[0].scenario.training.batch_per_gpu / base.value
        out.append(Series(key, micro_s, rows, {m: _fit(m, rows, spread) for m in MODELS}))
    return out


def format_table(all_series: Sequence[Series], spread: float) -> str:
    lines = [
        f"published figures' spread (repeat measurements): {spread:.2%}",
        "",
        "| series | points | per micro-batch | per step | slowest GPU: sigma, per step | "
        "chi2/dof: per step, from 2 hosts, Gaussian stragglers, slowest GPU |",
        "|---|---|---|---|---|---|",
    ]
    for s in all_series:
        f = s.fits["per step"]
        (a, b), (ea, eb) = f.coefficients, f.errors
        g = s.fits["slowest GPU"]
        (c, d), (ec, ed) = g.coefficients, g.errors
        chi = ", ".join(f"{s.fits[m].chi2:.1f}/{s.fits[m].dof}" for m in MODELS)
        lines.append(
            f"| {s.key} | {len(s.rows)} | {a * 1e3:.1f} ± {ea * 1e3:.1f} ms "
            f"({a / s.micro_s:.1%}) | {b * 1e3:.0f} ± {eb * 1e3:.0f} ms "
            f"| {c / s.micro_s:.2%} ± {ec / s.micro_s:.2%}, {d * 1e3:.0f} ± {ed * 1e3:.0f} ms "
            f"| {chi} |"
        )
    return "\n".join(lines)


def main() -> None:
    points = [p for p in load_transformers() if p.campaign == "nvidia-dle-bert"]
    spread = repeat_spread(points)
    print(format_table(series(points, spread), spread))


if __name__ == "__main__":
    main()
