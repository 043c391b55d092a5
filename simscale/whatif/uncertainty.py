"""Uncertainty intervals around a prediction, from two sources:

- **the profile's parameter uncertainty**: the fitted cost parameters are drawn from a normal
  distribution with the fit's covariance (in the fit's coordinates: log of the value for
  log-scaled parameters, so draws stay positive), each draw simulated;
- **run-to-run jitter**: every draw also gets its own seed, so the seeded random parts of the
  model (compute jitter of stragglers, unequal TCP shares) vary as between real runs; a few
  repetitions at the fitted values isolate this part.

The interval is the central ``level`` of the simulated throughputs. Without a profile (or with
one fitted before uncertainties were kept), only jitter is covered, and the words say so.
Profiles fitted before covariances were kept have per-parameter sigmas only: those are drawn
independently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from simscale.spec.costs import CostModel
from simscale.spec.profile import Profile, default_costs, default_profile
from simscale.spec.scenario import Scenario
from simscale.whatif.errors import WhatIfError
from simscale.whatif.executors import run_tasks

WIDE_RELATIVE = 0.20  # an interval wider than 20% of the prediction is called wide
NARROW_RELATIVE = 0.05


@dataclass(frozen=True)
class Interval:
    level: float  # e.g. 0.9
    nominal: float  # samples/s at the fitted values and the scenario's seed
    low: float
    high: float
    median: float
    draws: int
    jitter_low: float
    jitter_high: float
    parameters: tuple[str, ...]  # the parameters whose uncertainty was sampled
    words: str

    @property
    def relative_width(self) -> float:
        return (self.high - self.low) / self.nominal if self.nominal > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "nominal_samples_per_s": self.nominal,
            "low_samples_per_s": self.low,
            "high_samples_per_s": self.high,
            "median_samples_per_s": self.median,
            "relative_width": self.relative_width,
            "draws": self.draws,
            "jitter_low_samples_per_s": self.jitter_low,
            "jitter_high_samples_per_s": self.jitter_high,
            "parameters": list(self.parameters),
            "words": self.words,
        }


# ---- the parameters of a CostModel by name (as calibration names them) ----


def get_parameter(costs: CostModel, name: str) -> float:
    if name.startswith("compute_efficiency/"):
        gpu, precision = name.split("/")[1:]
        return costs.efficiency(gpu, precision)
    return float(getattr(costs, name))


def set_parameter(costs: CostModel, name: str, value: float) -> CostModel:
    lo, hi = parameter_bounds(name)
    value = min(max(value, lo), hi)
    if name.startswith("compute_efficiency/"):
        key = name.split("/", 1)[1]
        return replace(costs, compute_efficiency={**costs.compute_efficiency, key: value})
    return replace(costs, **{name: value})


def parameter_bounds(name: str) -> tuple[float, float]:
    """The values the CostModel accepts for ``name`` (draws are clipped into them)."""
    if name.startswith("compute_efficiency/"):
        return 1e-6, 1.0
    from simscale.spec.schema import field_bounds

    for f in fields(CostModel):
        if f.name == name:
            b = field_bounds(f)
            lo = b.get("minimum", b.get("exclusiveMinimum", -math.inf))
            if "exclusiveMinimum" in b:
                lo = lo + 1e-12
            return lo, b.get("maximum", math.inf)
    raise WhatIfError(f"profile parameter {name!r} is not a cost-model field")


def _parameter_space(profile: Profile) -> tuple[list[str], np.ndarray] | None:
    """(names, covariance in fit coordinates) of the profile's uncertain parameters."""
    fit = profile.fit
    names = list(fit.parameters)
    if fit.covariance and len(fit.covariance) == len(names):
        cov = np.array(fit.covariance, dtype=float)
        if np.all(np.isfinite(cov)):
            return names, cov
    known = [n for n in names if n in fit.uncertainty and math.isfinite(fit.uncertainty[n])]
    for n in fit.uncertainty:
        if n not in known and math.isfinite(fit.uncertainty[n]):
            known.append(n)
    if not known:
        return None
    return known, np.diag([fit.uncertainty[n] ** 2 for n in known])


def draw_costs(profile: Profile, base: CostModel, n: int, seed: int) -> list[CostModel]:
    """``n`` cost models with the profile's parameters drawn around ``base``'s values."""
    space = _parameter_space(profile)
    if space is None:
        return [base] * n
    names, cov = space
    linear = set(profile.fit.linear_parameters)
    center = []
    for name in names:
        v = get_parameter(base, name)
        center.append(v if name in linear else math.log(max(v, 1e-300)))
    rng = np.random.default_rng(seed)
    xs = rng.multivariate_normal(np.array(center), cov, size=n, method="svd")
    out = []
    for x in xs:
        costs = base
        for name, xv in zip(names, x, strict=True):
            costs = set_parameter(costs, name, float(xv if name in linear else math.exp(xv)))
        out.append(costs)
    return out


def _throughput(job: tuple[Scenario, CostModel]) -> float:
    from simscale.simulator import simulate

    s, costs = job
    return simulate(s, costs).throughput_samples_per_s


def _with_seed(s: Scenario, seed: int) -> Scenario:
    return replace(s, simulation=replace(s.simulation, seed=seed))


def interval(
    scenario: Scenario,
    profile: Profile | None = None,
    *,
    level: float = 0.9,
    draws: int = 24,
    repeats: int = 4,
    force_profile: bool = False,
    executor: str = "local",
    jobs: int | None = None,
) -> Interval:
    """The central ``level`` interval of the predicted throughput (see the module docstring)."""
    if not 0 < level < 1:
        raise WhatIfError(f"--interval: got {level * 100:g}, expected a level in (0, 100)")
    if draws < 2 or repeats < 1:
        raise WhatIfError("--interval: expected at least 2 draws and 1 repetition")
    if profile is None:  # as predict: the real-hardware profile where it applies
        profile = default_profile(scenario)
    applies = profile is not None and (force_profile or profile.applies_to(scenario))
    base = profile.costs if applies and profile is not None else default_costs(scenario)[0]
    seed0 = scenario.simulation.seed
    sampled = applies and profile is not None and _parameter_space(profile) is not None
    param_costs = draw_costs(profile, base, draws, seed0) if sampled and profile else [base] * draws
    jobs_list = [(scenario, base)]
    jobs_list += [(_with_seed(scenario, seed0 + 1 + r), base) for r in range(repeats)]
    jobs_list += [
        (_with_seed(scenario, seed0 + 1 + repeats + i), c) for i, c in enumerate(param_costs)
    ]
    # Results come back in any order: tag each with its place.
    tagged = list(run_tasks(executor, _tagged, list(enumerate(jobs_list)), jobs))
    values = [v for _, v in sorted(tagged)]
    nominal = values[0]
    jitter = np.array([nominal, *values[1 : 1 + repeats]])
    combined = np.array(values[1 + repeats :] + list(jitter))
    q = (1 - level) / 2 * 100
    low, high = (float(v) for v in np.percentile(combined, [q, 100 - q]))
    j_low, j_high = (float(v) for v in np.percentile(jitter, [q, 100 - q]))
    params = _parameter_space(profile)[0] if sampled and profile else []
    iv = Interval(
        level=level,
        nominal=nominal,
        low=low,
        high=high,
        median=float(np.median(combined)),
        draws=len(combined),
        jitter_low=j_low,
        jitter_high=j_high,
        parameters=tuple(params),
        words="",
    )
    return replace(iv, words=describe(iv, profile, applies))


def _tagged(job: tuple[int, tuple[Scenario, CostModel]]) -> tuple[int, float]:
    return job[0], _throughput(job[1])


def describe(iv: Interval, profile: Profile | None, applies: bool) -> str:
    """The interval in words: how wide, and where the width comes from."""
    pct = f"{iv.level:.0%}"
    span = (
        f"{pct} interval {iv.low:,.0f} to {iv.high:,.0f} samples/s "
        f"({iv.low / iv.nominal - 1:+.0%} / {iv.high / iv.nominal - 1:+.0%} of {iv.nominal:,.0f})"
    )
    rel = iv.relative_width
    if rel >= WIDE_RELATIVE:
        size = "WIDE: do not rely on this prediction alone; the throughput could plausibly be"
        size += f" anywhere from {iv.low:,.0f} to {iv.high:,.0f} samples/s"
    elif rel >= NARROW_RELATIVE:
        size = "moderate"
    else:
        size = "narrow"
    jitter_width = (iv.jitter_high - iv.jitter_low) / iv.nominal if iv.nominal > 0 else 0.0
    if not iv.parameters:
        why = (
            "no applicable profile with fitted uncertainties"
            if profile is None or not applies
            else "the profile keeps no parameter uncertainties"
        )
        source = f"parameter uncertainty NOT included ({why}); the width is seeded jitter only"
    elif rel > 0 and jitter_width >= 0.5 * rel:
        source = "mostly run-to-run jitter (stragglers, unequal TCP shares)"
    else:
        assert profile is not None
        unc = profile.fit.uncertainty
        top = max(iv.parameters, key=lambda n: unc.get(n, 0.0))
        source = f"mostly the fitted parameters' uncertainty (largest: {top})"
    return f"{span}: {size}; {source}."
