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
from calibration.identifiability import Identification, identify
from calibration.published import PublishedPoint
from calibration.published_fit import (
    ROBUST_LOSS,
    ROBUST_SCALE,
    Judged,
    coverage,
    drawn_values,
    judge,
    predict_point,
    published_value,
    with_held_out_model_error,
)
from simscale.spec.costs import CostModel, real_hardware_costs
from simscale.spec.model_error import model_error_group
from simscale.spec.profile import PROFILE_SCHEMA_VERSION, FitInfo, Profile

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


def covered_keys(fitted: str) -> list[str]:
    """The cost model's ``gpu/precision`` keys one fitted mechanism sets (``A100/16bit``:
    fp16 and bf16 on both A100 memories)."""
    return [
        f"{gpu}/{precision}"
        for gpu in GENERATION
        for precision in ("fp32", "tf32", *TENSOR16)
        if mechanism(gpu, precision) == fitted
    ]


def with_fractions(base: CostModel, fractions: dict[str, float]) -> CostModel:
    """``base`` with each mechanism's fraction set on every preset and precision it covers."""
    eff = dict(base.compute_efficiency)
    for name, value in fractions.items():
        for key in covered_keys(name):
            eff[key] = value
    return replace(base, compute_efficiency=eff)


@dataclass(frozen=True)
class TransformerFit:
    costs: CostModel
    fractions: dict[str, float]  # fitted mechanism -> fraction of peak
    # Mechanisms the held-out campaign uses that no training point taught (left at default).
    defaulted: tuple[str, ...]
    fitted_points: int
    evaluations: int
    # The fractions' covariance (log space) and which the points could not pin; None when the
    # fit was not asked for it (validate with --interval-draws 0).
    identification: Identification | None = None

    def as_profile(self) -> Profile:
        """The fit as a profile that intervals sample: each mechanism's log-sigma spread over
        every cost key it sets, perfectly correlated (one fraction, several presets)."""
        ident = self.identification
        if ident is None or ident.covariance is None:
            return Profile(PROFILE_SCHEMA_VERSION, self.costs)
        rows = [(n, k) for n in ident.names for k in covered_keys(n)]
        idx = {n: i for i, n in enumerate(ident.names)}
        cov = tuple(
            tuple(float(ident.covariance[idx[a], idx[b]]) for b, _ in rows) for a, _ in rows
        )
        unidentified = {
            f"compute_efficiency/{k}": why
            for n, why in ident.unidentified.items()
            for k in covered_keys(n)
        }
        fit = FitInfo(
            parameters=tuple(f"compute_efficiency/{k}" for _, k in rows),
            uncertainty={
                f"compute_efficiency/{k}": math.sqrt(max(cov[i][i], 0.0))
                for i, (_, k) in enumerate(rows)
                if f"compute_efficiency/{k}" not in unidentified
            },
            covariance=cov,
            unidentified=unidentified,
        )
        return Profile(PROFILE_SCHEMA_VERSION, self.costs, fit=fit)


class _BudgetSpent(Exception):
    """The fit has used its simulations."""


def fit_fractions(
    points: Sequence[PublishedPoint],
    *,
    max_evaluations: int = MAX_EVALUATIONS,
    uncertainty: bool = False,
) -> TransformerFit:
    """Fit each fraction the expressible ``points`` use, on their log(predicted / published);
    with ``uncertainty``, also their covariance (for intervals)."""
    train = [p for p in points if not p.unmodelled and p.gpus <= FIT_MAX_GPUS]
    if not train:
        raise CalibrationError("nothing to fit: no expressible published transformer point")
    base = real_hardware_costs()
    names = sorted({_keys_of(p) for p in train})
    published = np.array([published_value(p) for p in train])
    x0 = np.log([0.5] * len(names))
    lo, hi = np.log(EFFICIENCY_BOUNDS[0]), np.log(EFFICIENCY_BOUNDS[1])
    seen: list[tuple[float, np.ndarray, np.ndarray]] = []

    def raw(x: np.ndarray) -> np.ndarray:
        costs = with_fractions(base, dict(zip(names, np.exp(x), strict=True)))
        return np.log(np.array([predict_point(p, costs, fitting=True) for p in train]) / published)

    def residuals(x: np.ndarray) -> np.ndarray:
        if len(seen) >= max_evaluations:
            raise _BudgetSpent
        r = raw(x)
        seen.append((float(np.sum(r**2)), x.copy(), r))
        return r

    jac: np.ndarray | None = None
    fun: np.ndarray | None = None
    try:
        sol = least_squares(
            residuals, x0, bounds=(lo, hi), diff_step=1e-2, loss=ROBUST_LOSS, f_scale=ROBUST_SCALE
        )
        x, jac, fun = sol.x, sol.jac, sol.fun
    except _BudgetSpent:
        _, x, fun = min(seen, key=lambda t: t[0])
        if uncertainty:
            # The budget ran out before scipy kept a Jacobian: one forward difference per
            # fraction at the best point (a fraction's log moves every point it runs by ~1).
            jac = np.column_stack([(raw(x + step) - fun) / DIFF_STEP for step in _steps(len(x))])
    fractions = dict(zip(names, (float(v) for v in np.exp(x)), strict=True))
    ident = (
        identify(names, x, np.full(len(x), lo), np.full(len(x), hi), jac, fun)
        if uncertainty
        else None
    )
    return TransformerFit(
        with_fractions(base, fractions), fractions, (), len(train), len(seen), ident
    )


DIFF_STEP = 1e-2  # log-space step of the fallback Jacobian, as least_squares' diff_step


def _steps(n: int) -> list[np.ndarray]:
    return [DIFF_STEP * np.eye(n)[i] for i in range(n)]


def leave_one_campaign_out(
    points: Sequence[PublishedPoint],
    *,
    progress: Callable[[str], None] | None = None,
    draws: int = 0,
) -> tuple[list[Judged], dict[str, TransformerFit]]:
    """For each campaign: fit the fractions on the others, judge its points; with ``draws``,
    each held-out point also under that many draws of its fold's fractions (their covariance)
    and of its scenario's declared ranges, for its intervals."""
    campaigns = sorted({p.campaign for p in points})
    if len(campaigns) < 2:
        raise CalibrationError(f"leave-one-campaign-out needs 2 campaigns, got {len(campaigns)}")
    judged: list[Judged] = []
    fits: dict[str, TransformerFit] = {}
    for held in campaigns:
        if progress is not None:
            progress(held)
        fitted = fit_fractions([p for p in points if p.campaign != held], uncertainty=draws > 0)
        mine = [p for p in points if p.campaign == held]
        defaulted = tuple(sorted({_keys_of(p) for p in mine} - set(fitted.fractions)))
        fits[held] = replace(fitted, defaulted=defaulted)
        judged += _judged_with_draws(mine, fits[held], draws)
    # As for the image-model points: each point's band corrected by the conformal margin of
    # the OTHER campaigns' held-out scores (ddp-zero/real), never its own.
    return (with_held_out_model_error(judged) if draws > 0 else judged), fits


def _judged_with_draws(
    points: Sequence[PublishedPoint], fit: TransformerFit, draws: int
) -> list[Judged]:
    judged = judge(points, fit.costs)
    if draws <= 0:
        return judged
    profile = fit.as_profile()
    return [
        replace(j, draws=tuple(drawn_values(j.point, profile, fit.costs, draws))) for j in judged
    ]


def summary(judged: Sequence[Judged]) -> dict[str, dict[str, float]]:
    """Mean and worst absolute error per system (ddp, zero) and per campaign, all points and
    expressible ones (``unmodelled`` left out), with the held-out interval coverage where the
    points have draws."""
    out: dict[str, dict[str, float]] = {}
    modelled = [j for j in judged if not j.point.unmodelled]
    for label, chosen in (("all", list(judged)), ("expressible", modelled)):
        members: dict[str, list[Judged]] = {}
        for j in chosen:
            for g in (
                f"system={j.point.system}",
                f"campaign={j.point.campaign}",
                f"compared as={j.kind}",
                f"gpu={j.point.gpu}",
            ):
                members.setdefault(g, []).append(j)
        for g, js in sorted(members.items()):
            a = [j.ape for j in js]
            out[f"{label}: {g}"] = {
                "mean_ape": float(np.mean(a)),
                "worst_ape": float(np.max(a)),
                "points": float(len(a)),
            } | coverage(js)
    return out


_COVERAGE_HEAD = f"  {'90% in':>7} {'width':>6} {'50% in':>7} {'width':>6}"


def _coverage_cells(s: dict[str, float]) -> str:
    """A group's held-out interval coverage and median relative width (blank without draws)."""
    if "covered_90" not in s:
        return ""
    return (
        f"  {s['covered_90']:>7.0%} {s['median_relative_width_90']:>6.1%}"
        f" {s['covered_50']:>7.0%} {s['median_relative_width_50']:>6.1%}"
    )


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
    lines += ["", f"  {'group':<52} {'mean':>7} {'worst':>7} {'points':>6}{_COVERAGE_HEAD}"]
    for g, s in summary(judged).items():
        lines.append(
            f"  {g:<52} {s['mean_ape']:>7.1%} {s['worst_ape']:>7.1%} {s['points']:>6.0f}"
            + _coverage_cells(s)
        )
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
                "model_error_group": model_error_group(j.point.scenario),
                "interval_90": j.interval(0.9),
                "interval_50": j.interval(0.5),
                "draws": list(j.draws),
            }
            for j in judged
        ],
    }
