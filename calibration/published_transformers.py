"""Judge the simulator on the published transformer set (DDP, ZeRO/FSDP), one campaign held out.

The set (``calibration/published/transformers``) differs from the convolutional one in what it
can teach: most points are whole-job throughputs without a single-GPU baseline, on GPUs and
precisions (A100 and H100 in bf16) no convolutional point covers. What decides them first is
the achieved fraction of the tensor cores' peak, so that is the mechanism fitted here, and only
it: one fraction per GPU generation for the 16-bit tensor formats (fp16 and bf16 run on the same
tensor cores at the same peak, and A100 40 GB and 80 GB are one chip), one for TF32 and one for
FP32. Communication keeps its published starting figures (simscale.spec.costs); the DDP scaling
points (compared as scaling efficiency against their own single-GPU baseline) judge it.

Leave one campaign out: fit the fractions on every other campaign's expressible points, predict
every point of the held-out one. A fraction no training point teaches stays at the simulator's
assumed default, and the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from calibration.errors import CalibrationError
from calibration.published import PublishedPoint
from calibration.published_fit import (
    ROBUST_LOSS,
    ROBUST_SCALE,
    Judged,
    judge,
    predict_point,
    published_value,
)
from simscale.spec.costs import CostModel, real_hardware_costs

# GPU presets that are one chip: their tensor cores reach the same fraction of peak.
GENERATION = {
    "A100": "A100",
    "A100-80GB": "A100",
    "H100": "H100",
    "H100-96GB": "H100",
    "V100": "V100",
}
TENSOR16 = ("fp16", "bf16")
# Simulations of the training points one fold may spend (Jacobians included): about eight
# trust-region steps for the two or three fractions a fold has. Measured 2026-11-28 on the
# shared 2-core machine: the whole set simulates in ~25 CPU s; 30 evaluations took over 10
# minutes for one fold, 16 of the cheaper points a few.
MAX_EVALUATIONS = 16
# Points on more GPUs than this are judged but not fitted to: one simulation of a 256- or
# 512-GPU FSDP point costs 1-2 CPU s, the rest of the set together ~10 s. The fraction of peak
# they would teach is the same one their 8- to 64-GPU neighbours teach.
FIT_MAX_GPUS = 64
EFFICIENCY_BOUNDS = (0.02, 1.0)


def mechanism(gpu: str, precision: str) -> str:
    """The fitted fraction a (GPU, compute precision) uses: ``A100/16bit``, ``H100/tf32``."""
    generation = GENERATION.get(gpu, gpu)
    return f"{generation}/{'16bit' if precision in TENSOR16 else precision}"


def _keys_of(p: PublishedPoint) -> str:
    s = p.scenario
    return mechanism(s.cluster.hosts[0].resolved()[1], s.training.compute_precision)


def with_fractions(base: CostModel, fractions: dict[str, float]) -> CostModel:
    """``base`` with each mechanism's fraction set on every preset and precision it covers."""
    eff = dict(base.compute_efficiency)
    for gpu, generation in GENERATION.items():
        for precision in ("fp32", "tf32", *TENSOR16):
            key = mechanism(gpu, precision)
            if key in fractions and key.startswith(generation + "/"):
                eff[f"{gpu}/{precision}"] = fractions[key]
    return replace(base, compute_efficiency=eff)


@dataclass(frozen=True)
class TransformerFit:
    costs: CostModel
    fractions: dict[str, float]  # fitted mechanism -> fraction of peak
    # Mechanisms the held-out campaign uses that no training point taught (left at default).
    defaulted: tuple[str, ...]
    fitted_points: int
    evaluations: int


class _BudgetSpent(Exception):
    """The fit has used its simulations."""


def fit_fractions(
    points: Sequence[PublishedPoint], *, max_evaluations: int = MAX_EVALUATIONS
) -> TransformerFit:
    """Fit each fraction the expressible ``points`` use, on their log(predicted / published)."""
    train = [p for p in points if not p.unmodelled and p.gpus <= FIT_MAX_GPUS]
    if not train:
        raise CalibrationError("nothing to fit: no expressible published transformer point")
    base = real_hardware_costs()
    names = sorted({_keys_of(p) for p in train})
    published = np.array([published_value(p) for p in train])
    x0 = np.log([0.5] * len(names))
    lo, hi = np.log(EFFICIENCY_BOUNDS[0]), np.log(EFFICIENCY_BOUNDS[1])
    seen: list[tuple[float, np.ndarray]] = []

    def residuals(x: np.ndarray) -> np.ndarray:
        if len(seen) >= max_evaluations:
            raise _BudgetSpent
        costs = with_fractions(base, dict(zip(names, np.exp(x), strict=True)))
        r = np.log(np.array([predict_point(p, costs, fitting=True) for p in train]) / published)
        seen.append((float(np.sum(r**2)), x.copy()))
        return r

    try:
        x = least_squares(
            residuals, x0, bounds=(lo, hi), diff_step=1e-2, loss=ROBUST_LOSS, f_scale=ROBUST_SCALE
        ).x
    except _BudgetSpent:
        x = min(seen, key=lambda t: t[0])[1]
    fractions = dict(zip(names, (float(v) for v in np.exp(x)), strict=True))
    return TransformerFit(with_fractions(base, fractions), fractions, (), len(train), len(seen))


def leave_one_campaign_out(
    points: Sequence[PublishedPoint], *, progress: Callable[[str], None] | None = None
) -> tuple[list[Judged], dict[str, TransformerFit]]:
    """For each campaign: fit the fractions on the others, judge its points."""
    campaigns = sorted({p.campaign for p in points})
    if len(campaigns) < 2:
        raise CalibrationError(f"leave-one-campaign-out needs 2 campaigns, got {len(campaigns)}")
    judged: list[Judged] = []
    fits: dict[str, TransformerFit] = {}
    for held in campaigns:
        if progress is not None:
            progress(held)
        fitted = fit_fractions([p for p in points if p.campaign != held])
        mine = [p for p in points if p.campaign == held]
        defaulted = tuple(sorted({_keys_of(p) for p in mine} - set(fitted.fractions)))
        fits[held] = replace(fitted, defaulted=defaulted)
        judged += judge(mine, fitted.costs)
    return judged, fits


def summary(judged: Sequence[Judged]) -> dict[str, dict[str, float]]:
    """Mean and worst absolute error per system (ddp, zero) and per campaign, all points and
    expressible ones (``unmodelled`` left out)."""
    out: dict[str, dict[str, float]] = {}
    modelled = [j for j in judged if not j.point.unmodelled]
    for label, chosen in (("all", list(judged)), ("expressible", modelled)):
        groups: dict[str, list[float]] = {}
        for j in chosen:
            groups.setdefault(f"system={j.point.system}", []).append(j.ape)
            groups.setdefault(f"campaign={j.point.campaign}", []).append(j.ape)
            groups.setdefault(f"compared as={j.kind}", []).append(j.ape)
            groups.setdefault(f"gpu={j.point.gpu}", []).append(j.ape)
        for g, a in sorted(groups.items()):
            out[f"{label}: {g}"] = {
                "mean_ape": float(np.mean(a)),
                "worst_ape": float(np.max(a)),
                "points": float(len(a)),
            }
    return out


def format_report(judged: Sequence[Judged], fits: dict[str, TransformerFit]) -> str:
    """Worst points first, then mean / worst per group, then each fold's fractions."""
    lines = [
        f"published transformer set, leave one campaign out: {len(judged)} points",
        "",
        f"  {'point':<30} {'campaign':<20} {'system':<6} {'compared':<10} "
        f"{'published':>10} {'predicted':>10} {'error':>7}",
    ]
    for j in sorted(judged, key=lambda j: -j.ape):
        fmt = ".3f" if j.kind == "efficiency" else ".1f"
        mark = " (unmodelled)" if j.point.unmodelled else ""
        lines.append(
            f"  {j.point.name:<30} {j.point.campaign:<20} {j.point.system:<6} {j.kind:<10} "
            f"{j.published:>10{fmt}} {j.predicted:>10{fmt}} {j.error:>+7.1%}{mark}"
        )
    lines += ["", f"  {'group':<52} {'mean':>7} {'worst':>7} {'points':>6}"]
    for g, s in summary(judged).items():
        lines.append(f"  {g:<52} {s['mean_ape']:>7.1%} {s['worst_ape']:>7.1%} {s['points']:>6.0f}")
    lines += ["", "  fitted fractions of peak with each campaign held out:"]
    for held, f in sorted(fits.items()):
        vals = ", ".join(f"{k} {v:.3f}" for k, v in sorted(f.fractions.items()))
        extra = f"; at the default: {', '.join(f.defaulted)}" if f.defaulted else ""
        lines.append(f"  {held:<20} {vals}{extra}")
    return "\n".join(lines)


def report_dict(judged: Sequence[Judged], fits: dict[str, TransformerFit]) -> dict[str, object]:
    """The judgement as plain data (``simscale validate --published-transformers --json``)."""
    return {
        "method": "leave-one-campaign-out, fraction of peak per GPU generation fitted",
        "summary": summary(judged),
        "fractions_per_fold": {h: f.fractions for h, f in sorted(fits.items())},
        "defaulted_per_fold": {h: list(f.defaulted) for h, f in sorted(fits.items())},
        "published": [
            {
                "source": j.point.source,
                "campaign": j.point.campaign,
                "name": j.point.name,
                "system": j.point.system,
                "compared": j.kind,
                "published": j.published,
                "predicted": j.predicted,
                "error": j.error if math.isfinite(j.error) else None,
                "unmodelled": j.point.unmodelled,
            }
            for j in judged
        ],
    }
