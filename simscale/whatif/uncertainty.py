"""Uncertainty intervals around a prediction, from three sources:

- **the profile's parameter uncertainty**: the fitted cost parameters are drawn from a normal
  distribution with the fit's covariance (in the fit's coordinates: log of the value for
  log-scaled parameters, so draws stay positive), each draw simulated;
- **run-to-run jitter**: every draw also gets its own seed, so the seeded random parts of the
  model (compute jitter of stragglers, unequal TCP shares) vary as between real runs; a few
  repetitions at the fitted values isolate this part;
- **the simulator's own error on known setups** (the profile's ``model_error``: per group, the
  held-out conformity scores of log(measured / predicted), simscale/spec/model_error.py): the
  central ``level`` of the simulated throughputs (the ranges-only band) is widened in log space
  by the scores' conformal margin at that level, or narrowed where the ranges alone were too
  wide for the held-out truth (conformalized quantile regression). No simulation is added.
  Profiles made before the scores were kept hold a log-normal sigma instead: every simulated
  value is then multiplied by the same fixed, evenly spaced quantiles of that factor.

Without a profile (or with
one fitted before uncertainties were kept), only jitter is covered, and the words say so; so
they do when the profile keeps no model error for the scenario's group.
Profiles fitted before covariances were kept have per-parameter sigmas only: those are drawn
independently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from statistics import NormalDist
from typing import Any

import numpy as np

from simscale.spec.costs import CostModel
from simscale.spec.model_error import ModelError
from simscale.spec.profile import Profile, default_costs, default_profile
from simscale.spec.ranges import apply_values, ranges_for
from simscale.spec.scenario import Scenario
from simscale.spec.unknowns import FACTS, FactRange
from simscale.whatif.errors import WhatIfError
from simscale.whatif.executors import run_tasks

# Evenly spaced quantiles of the model-error factor each simulated value is multiplied by: with
# 1000, the pooled 5% quantile of a single value is within 0.3% of the factor's in log terms.
MODEL_ERROR_QUANTILES = 1000
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
    # Parameters the profile's fit could not identify, held at their fitted value (name -> why).
    unidentified: dict[str, str] = field(default_factory=dict)
    # What the width comes from, largest first, and the declared ranges that were sampled.
    shares: tuple[Share, ...] = ()
    ranges: tuple[str, ...] = ()
    # The scenario's model-error group, the profile's conformal margin in log space for it at
    # this level (or, in older profiles, its log-normal sigma; None: not kept, so not in the
    # width), and how many held-out residuals it came from.
    model_error_group: str = ""
    model_error_sigma: float | None = None
    model_error_residuals: int = 0
    model_error_margin: float | None = None
    model_error_missing: str = ""
    # The central ``level`` of the simulated throughputs alone, before the model error.
    ranges_low: float = 0.0
    ranges_high: float = 0.0
    # The simulated throughputs (draws and repetitions) before the model-error factor: what a
    # benchmark needs to judge the interval with and without it from one set of simulations.
    simulated: tuple[float, ...] = ()

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
            "unidentified": dict(self.unidentified),
            "width_shares": [sh.to_dict() for sh in self.shares],
            "declared_ranges": list(self.ranges),
            "ranges_only_low_samples_per_s": self.ranges_low,
            "ranges_only_high_samples_per_s": self.ranges_high,
            "model_error": {
                "group": self.model_error_group,
                "margin_log": self.model_error_margin,
                "sigma_log": self.model_error_sigma,
                "residuals": self.model_error_residuals,
            },
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


# A fitted parameter whose 1-sigma in log space exceeds this is not identified by its fit: one
# sigma would already be a factor e (2.7) either way, a 90% interval a factor of 5. Drawn, such
# a sigma says nothing about the world (profiles/real-v1.yaml once gave allreduce_tensor_us
# 2223, whose exponential overflows); it is held at its fitted value and named instead.
MAX_IDENTIFIED_LOG_SIGMA = 1.0
# Draws are clipped to this many sigma in fit coordinates before leaving log space, so no draw
# of an identified parameter can overflow either.
MAX_DRAW_SIGMAS = 6.0
# A stored covariance with an entry above this (or not finite) is not used: the profile's
# per-parameter sigmas are, and its huge ones are flagged as unidentified.
MAX_COVARIANCE = 1e6


@dataclass(frozen=True)
class ParameterSpace:
    """The profile's parameters an interval samples, their covariance in fit coordinates, and
    the ones it holds fixed because the fit could not identify them (name -> why)."""

    names: tuple[str, ...]
    covariance: np.ndarray
    unidentified: dict[str, str]


def unidentified_parameters(profile: Profile) -> dict[str, str]:
    """The profile's fitted parameters its data could not pin down, each with the reason: those
    the fit itself flagged, and any whose sigma is not finite or spans more than a factor e."""
    fit = profile.fit
    linear = set(fit.linear_parameters)
    out = dict(fit.unidentified)
    sig = _sigmas(profile)
    for name in dict.fromkeys([*fit.parameters, *fit.uncertainty]):
        if name in out:
            continue
        s = sig.get(name, math.nan)
        if not math.isfinite(s) or s < 0:
            out[name] = f"the fit gave it no usable uncertainty ({s!r})"
        elif name not in linear and s > MAX_IDENTIFIED_LOG_SIGMA:
            out[name] = (
                f"1-sigma of log {s:.3g} (a factor {math.exp(min(s, 700)):.3g}): "
                "the data cannot pin it down"
            )
        elif name in linear:
            lo, hi = parameter_bounds(name)
            if math.isfinite(hi - lo) and 2 * s > hi - lo:
                out[name] = f"1-sigma {s:.3g} spans its whole range"
    return out


def _sigmas(profile: Profile) -> dict[str, float]:
    """1-sigma per parameter: the covariance's diagonal when the profile keeps one."""
    fit = profile.fit
    cov = _full_covariance(profile)
    if cov is not None:
        return {n: math.sqrt(max(float(cov[i, i]), 0.0)) for i, n in enumerate(fit.parameters)}
    return {n: float(v) for n, v in fit.uncertainty.items()}


def _full_covariance(profile: Profile) -> np.ndarray | None:
    fit = profile.fit
    if fit.covariance and len(fit.covariance) == len(fit.parameters):
        cov = np.array(fit.covariance, dtype=float)
        # Entries beyond MAX_COVARIANCE are an unidentified direction, not a number to invert.
        if cov.shape == (len(fit.parameters),) * 2 and np.all(np.abs(cov) <= MAX_COVARIANCE):
            return cov
    return None


def parameter_space(profile: Profile, scenario: Scenario | None = None) -> ParameterSpace | None:
    """What an interval samples of ``profile``: its identified parameters (those acting on
    ``scenario`` when given: another GPU's efficiency does not), with their covariance
    conditioned on the unidentified ones held fixed; None when nothing is left to sample."""
    fit = profile.fit
    bad = unidentified_parameters(profile)
    cov = _full_covariance(profile)
    if cov is not None:
        names = list(fit.parameters)
    else:
        # Independent sigmas: the unidentified ones (perhaps infinite) condition nothing.
        names = [n for n in dict.fromkeys([*fit.parameters, *fit.uncertainty]) if n not in bad]
        sig = _sigmas(profile)
        cov = np.diag([sig[n] ** 2 for n in names])
    keep = [i for i, n in enumerate(names) if n not in bad and _acts_on(n, scenario)]
    fixed = [i for i, n in enumerate(names) if n in bad]
    if not keep:
        return None
    cov_kept = _conditioned(cov, keep, fixed)
    return ParameterSpace(tuple(names[i] for i in keep), cov_kept, bad)


def _acts_on(name: str, scenario: Scenario | None) -> bool:
    """Whether parameter ``name`` can move ``scenario``'s prediction (a compute efficiency
    only on its own GPU and precision)."""
    if scenario is None:
        return True
    if not name.startswith("compute_efficiency/"):
        acts = _ACTS_ON.get(name)
        return acts is None or bool(acts(scenario))
    key = name.split("/", 1)[1]
    precision = scenario.training.compute_precision
    return any(f"{g.resolved()[1]}/{precision}" == key for g in scenario.cluster.hosts)


def _conditioned(cov: np.ndarray, keep: list[int], fixed: list[int]) -> np.ndarray:
    """The covariance of the ``keep`` coordinates given the ``fixed`` ones (the Schur
    complement: what holding an unidentified parameter still leaves uncertain), made
    positive semi-definite."""
    a = cov[np.ix_(keep, keep)]
    if fixed:
        b = cov[np.ix_(keep, fixed)]
        c = cov[np.ix_(fixed, fixed)]
        a = a - b @ np.linalg.pinv(c) @ b.T
    a = (a + a.T) / 2
    w, v = np.linalg.eigh(a)
    return (v * np.clip(w, 0.0, None)) @ v.T


def draw_costs(
    profile: Profile, base: CostModel, n: int, seed: int, scenario: Scenario | None = None
) -> list[CostModel]:
    """``n`` cost models with the profile's identified parameters drawn around ``base``'s
    values (the unidentified ones keep ``base``'s)."""
    space = parameter_space(profile, scenario)
    if space is None:
        return [base] * n
    rng = np.random.default_rng(seed)
    z = np.clip(rng.standard_normal((n, len(space.names))), -MAX_DRAW_SIGMAS, MAX_DRAW_SIGMAS)
    return [costs_at(profile, base, space, row) for row in z]


def costs_at(profile: Profile, base: CostModel, space: ParameterSpace, z: np.ndarray) -> CostModel:
    """``base`` moved to standard-normal coordinates ``z`` of the parameter space."""
    linear = set(profile.fit.linear_parameters)
    w, v = np.linalg.eigh(space.covariance)
    offsets = (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T @ np.asarray(z, dtype=float)
    costs = base
    for name, dx in zip(space.names, offsets, strict=True):
        x = get_parameter(base, name)
        value = x + dx if name in linear else x * math.exp(float(np.clip(dx, -700, 700)))
        costs = set_parameter(costs, name, float(value))
    return costs


def _throughput(job: tuple[Scenario, CostModel]) -> float:
    from simscale.simulator import simulate

    s, costs = job
    return simulate(s, costs).throughput_samples_per_s


def _with_seed(s: Scenario, seed: int) -> Scenario:
    return replace(s, simulation=replace(s.simulation, seed=seed))


def _nominal_repeats_and_draws(
    scenario: Scenario, profile: Profile | None, base: CostModel, draws: int, repeats: int
) -> list[tuple[Scenario, CostModel]]:
    """The simulations of an interval before the one-at-a-time ones: the nominal, ``repeats``
    more seeds of it (the simulator's own jitter), and ``draws`` drawn inputs, each its seed."""
    seed0 = scenario.simulation.seed
    jobs: list[tuple[Scenario, CostModel]] = [(scenario, base)]
    jobs += [(_with_seed(scenario, seed0 + 1 + r), base) for r in range(repeats)]
    drawn_inputs = draw_inputs(scenario, profile, base, draws, seed0)
    jobs += [
        (_with_seed(s_i, seed0 + 1 + repeats + i), c_i) for i, (s_i, c_i) in enumerate(drawn_inputs)
    ]
    return jobs


@dataclass(frozen=True)
class Share:
    """One input's share of the interval's width, and how a user narrows it."""

    input: str  # a fitted parameter, a declared fact ("nic_gbps@0"), or "jitter"
    words: str
    share: float  # of the summed squared one-at-a-time spans
    narrow_by: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "words": self.words,
            "share": self.share,
            "narrow_by": self.narrow_by,
        }


# Mechanisms of the real-hardware profile that act only on some scenarios: drawing them
# elsewhere costs simulations that cannot move the answer.
_ACTS_ON = {
    "decode_us_per_sample": lambda s: s.training.data == "images",
    "allreduce_tensor_us": lambda s: s.kvstore.mode == "allreduce",
    "straggler_sigma": lambda s: s.num_gpus > 1,
    "connection_gbps": lambda s: s.num_worker_hosts > 1 or s.cluster.server_hosts is not None,
    "grpc_ns_per_byte": lambda s: s.kvstore.rpc == "grpc",
}


def interval(
    scenario: Scenario,
    profile: Profile | None = None,
    *,
    level: float = 0.9,
    draws: int = 16,
    repeats: int = 2,
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
    facts = ranges_for(scenario)
    space = _space_for(scenario, profile if applies else None, facts)
    jobs_list = _nominal_repeats_and_draws(
        scenario, profile if applies else None, base, draws, repeats
    )
    # One at a time, with the nominal seed (common random numbers): each input at the two ends
    # of its central ``level`` range, all others at their nominal values.
    ends = _one_at_a_time(scenario, base, profile, space, facts, level)
    jobs_list += [job for _, _, pair in ends for job in pair]
    tagged = list(run_tasks(executor, _tagged, list(enumerate(jobs_list)), jobs))
    values = [v for _, v in sorted(tagged)]
    nominal = values[0]
    jitter = np.array(values[: 1 + repeats])
    drawn = values[1 + repeats : 1 + repeats + draws]
    from simscale.spec.model_error import model_error_group

    term = model_error_term(
        model_error_group(scenario),
        profile.model_error if applies and profile is not None else None,
        level,
    )
    simulated = np.array(drawn + list(jitter))
    r_low, r_high = ranges_band(simulated, level)
    low, high = band_with_model_error(simulated, level, term)
    q = (1 - level) / 2 * 100
    j_low, j_high = (float(v) for v in np.percentile(jitter, [q, 100 - q]))
    spans = values[1 + repeats + draws :]
    shares = _shares(ends, spans, float(np.ptp(jitter)))
    me_span = term.span(nominal, level)
    if me_span > 0:
        shares = _with_model_error_share(
            shares, spans, float(np.ptp(jitter)), me_span, term.describe()
        )
    iv = Interval(
        level=level,
        nominal=nominal,
        low=low,
        high=high,
        median=float(np.median(simulated)),
        draws=len(simulated),
        jitter_low=j_low,
        jitter_high=j_high,
        parameters=space.names if space else (),
        words="",
        unidentified=dict(space.unidentified) if space else {},
        shares=tuple(shares),
        ranges=tuple(r.describe() for r in facts),
        model_error_group=term.group,
        model_error_sigma=term.sigma,
        model_error_margin=term.margin,
        model_error_missing=term.missing,
        model_error_residuals=term.residuals,
        ranges_low=r_low,
        ranges_high=r_high,
        simulated=tuple(float(v) for v in simulated),
    )
    return replace(iv, words=describe(iv, profile, applies))


@dataclass(frozen=True)
class ModelErrorTerm:
    """What the profile's model error adds to a scenario's interval at one level: a conformal
    margin in log space, or (older profiles) a log-normal sigma, or nothing (both None)."""

    group: str
    margin: float | None = None
    sigma: float | None = None
    residuals: int = 0
    # Why there is none, when the profile has some for other groups or levels.
    missing: str = ""

    @property
    def included(self) -> bool:
        return self.margin is not None or self.sigma is not None

    def span(self, nominal: float, level: float) -> float:
        """Its own width at ``level`` around ``nominal`` (0 where it narrows or is absent)."""
        if self.margin is not None:
            return nominal * 2 * math.sinh(self.margin) if self.margin > 0 else 0.0
        if self.sigma:
            zq = _normal_quantile((1 + level) / 2)
            return nominal * 2 * math.sinh(zq * self.sigma)
        return 0.0

    def describe(self) -> str:
        if self.margin is not None:
            how = "widened" if self.margin >= 0 else "narrowed"
            return (
                f"the simulator's own error on known setups ({self.group}: the band "
                f"{how} by {math.expm1(abs(self.margin)):.1%} each side, "
                f"the conformal margin of {self.residuals} held-out residuals)"
            )
        return (
            f"the simulator's own error on known setups ({self.group}: 1-sigma "
            f"{self.sigma or 0:.1%} from {self.residuals} held-out residuals)"
        )


def model_error_term(group: str, model_error: ModelError | None, level: float) -> ModelErrorTerm:
    """A profile's ``model_error`` for ``group`` at ``level``: its conformal margin where it
    keeps scores, else its log-normal sigma (profiles made before), else none."""
    from simscale.spec.model_error import level_key

    if model_error is None:
        return ModelErrorTerm(group)
    me = model_error
    group = me.kept_group(group)
    n = me.residuals.get(group, 0)
    if group in me.scores:
        margin = me.margin(group, level)
        if margin is not None:
            return ModelErrorTerm(group, margin=margin, residuals=n)
        kept = ", ".join(f"{k}%" for k in sorted(me.scores[group], key=float))
        why = (
            f"scores kept at {kept} only"
            if level_key(level) not in me.scores[group]
            else f"{n} held-out residuals are too few for a {level:.0%} margin"
        )
        return ModelErrorTerm(group, residuals=n, missing=why)
    sigma = me.sigma_log.get(group)
    return ModelErrorTerm(group, sigma=sigma, residuals=n if sigma else 0)


def model_error_of(scenario: Scenario, profile: Profile | None) -> tuple[str, float | None]:
    """The scenario's model-error group and the profile's log-normal sigma for it (None
    without one): the older profiles' term."""
    from simscale.spec.model_error import model_error_group

    if profile is None:
        return model_error_group(scenario), None
    return profile.model_error.sigma_for(scenario)


def ranges_band(values: np.ndarray | list[float], level: float) -> tuple[float, float]:
    """The central ``level`` of ``values`` (the point and its drawn inputs): the band the
    model error's conformity scores are measured against."""
    q = (1 - level) / 2 * 100
    lo, hi = np.percentile(np.asarray(values, dtype=float), [q, 100 - q])
    return float(lo), float(hi)


def conformal_band(low: float, high: float, margin: float) -> tuple[float, float]:
    """``[low, high]`` widened by ``margin`` in log space each side (narrowed where it is
    negative; a band narrowed past its middle is its geometric middle)."""
    lo, hi = low * math.exp(-margin), high * math.exp(margin)
    if lo > hi:
        mid = math.sqrt(low * high)
        return mid, mid
    return lo, hi


def conformity_score(measured: float, low: float, high: float) -> float:
    """How far ``measured`` lies outside ``[low, high]`` in log space (negative inside: the
    log distance to the nearer end)."""
    return max(math.log(low / measured), math.log(measured / high))


def band_with_model_error(
    values: np.ndarray | list[float], level: float, term: ModelErrorTerm
) -> tuple[float, float]:
    """The ``level`` interval of simulated ``values`` with the model-error ``term``."""
    if term.margin is not None:
        return conformal_band(*ranges_band(values, level), term.margin)
    if term.sigma:
        return ranges_band(with_model_error(np.asarray(values, dtype=float), term.sigma), level)
    return ranges_band(values, level)


def with_model_error(values: np.ndarray, sigma_log: float) -> np.ndarray:
    """Every value times each of MODEL_ERROR_QUANTILES evenly spaced quantiles of a log-normal
    factor of 1-sigma ``sigma_log`` (the values themselves when it is 0)."""
    values = np.asarray(values, dtype=float)
    if sigma_log <= 0:
        return values
    n = MODEL_ERROR_QUANTILES
    z = np.array([NormalDist().inv_cdf((k + 0.5) / n) for k in range(n)])
    return (values[:, None] * np.exp(sigma_log * z)[None, :]).ravel()


def _with_model_error_share(
    shares: list[Share], spans: list[float], jitter_span: float, span: float, words: str
) -> list[Share]:
    """The shares recomputed with the model error's own ``span`` beside the one-at-a-time
    spans (added as independent variances would)."""
    others = (
        sum(abs(spans[2 * i + 1] - spans[2 * i]) ** 2 for i in range(len(spans) // 2))
        + jitter_span**2
    )
    total = others + span**2
    scale = others / total if total > 0 else 0.0
    out = [replace(sh, share=sh.share * scale) for sh in shares]
    out.append(
        Share(
            "model_error",
            words,
            span**2 / total if total > 0 else 0.0,
            "fit a profile on training runs of this cluster and keep its own held-out "
            "residuals (`simscale calibrate --model-error-from`)",
        )
    )
    return sorted(out, key=lambda sh: -sh.share)


def _space_for(
    scenario: Scenario, profile: Profile | None, facts: list[FactRange]
) -> ParameterSpace | None:
    """The profile's parameters to draw for ``scenario``: a declared range for a fitted fact
    (one connection's rate) replaces the fit's sigma for it."""
    space = parameter_space(profile, scenario) if profile is not None else None
    return _without(space, {r.fact for r in facts}) if space is not None else None


def draw_inputs(
    scenario: Scenario, profile: Profile | None, base: CostModel, n: int, seed: int
) -> list[tuple[Scenario, CostModel]]:
    """``n`` (scenario, costs) pairs: the profile's identified parameters drawn from their
    covariance around ``base``, the scenario's declared facts uniformly over their ranges
    (Latin hypercube: every stratum of each range is visited even with a few draws)."""
    facts = ranges_for(scenario)
    space = _space_for(scenario, profile, facts)
    rng = np.random.default_rng(seed)
    n_params = len(space.names) if space else 0
    z = np.clip(rng.standard_normal((n, n_params)), -MAX_DRAW_SIGMAS, MAX_DRAW_SIGMAS)
    u = (np.argsort(rng.random((len(facts), n)), axis=1).T + rng.random((n, len(facts)))) / n
    out = []
    for i in range(n):
        costs = costs_at(profile, base, space, z[i]) if space and profile else base
        values = [r.value_at(x) for r, x in zip(facts, u[i], strict=True)]
        out.append(apply_values(scenario, costs, facts, values))
    return out


def _without(space: ParameterSpace, names: set[str]) -> ParameterSpace | None:
    keep = [i for i, n in enumerate(space.names) if n not in names]
    if not keep:
        return None
    cov = space.covariance[np.ix_(keep, keep)]
    return replace(space, names=tuple(space.names[i] for i in keep), covariance=cov)


def _one_at_a_time(
    scenario: Scenario,
    base: CostModel,
    profile: Profile | None,
    space: ParameterSpace | None,
    facts: list[FactRange],
    level: float,
) -> list[tuple[str, str, list[tuple[Scenario, CostModel]]]]:
    """(input, words, [the two simulations at the ends of its range]) for every input."""
    out = []
    zq = float(_normal_quantile((1 + level) / 2))
    if space is not None and profile is not None:
        for k, name in enumerate(space.names):
            sd = math.sqrt(max(float(space.covariance[k, k]), 0.0))
            # its marginal range: the others held at their fitted values
            pair = [(scenario, _moved(profile, base, name, sign * zq * sd)) for sign in (-1, 1)]
            out.append((name, f"the fitted {name}", pair))
    for r in facts:
        lo, hi = ((1 - level) / 2, (1 + level) / 2)
        pair = [apply_values(scenario, base, [r], [r.value_at(x)]) for x in (lo, hi)]
        out.append((r.key(), r.spec.words, pair))
    return out


def _moved(profile: Profile, base: CostModel, name: str, dx: float) -> CostModel:
    """``base`` with parameter ``name`` moved by ``dx`` in its fit coordinate."""
    x = get_parameter(base, name)
    if name in set(profile.fit.linear_parameters):
        return set_parameter(base, name, x + dx)
    return set_parameter(base, name, x * math.exp(max(min(dx, 700.0), -700.0)))


def _normal_quantile(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


def _shares(
    ends: list[tuple[str, str, list[tuple[Scenario, CostModel]]]],
    values: list[float],
    jitter_span: float,
) -> list[Share]:
    """Each input's share of the width: its one-at-a-time span squared over the sum of all
    (spans add as independent variances would), jitter included; largest first."""
    spans = [abs(values[2 * i + 1] - values[2 * i]) for i in range(len(ends))]
    total = sum(w * w for w in spans) + jitter_span**2
    if total <= 0:
        return []
    out = [
        Share(name, words, w * w / total, _narrow_by(name))
        for (name, words, _), w in zip(ends, spans, strict=True)
    ]
    out.append(
        Share(
            "jitter",
            "run-to-run jitter (stragglers, unequal TCP shares)",
            jitter_span**2 / total,
            "nothing: it is the spread between real runs",
        )
    )
    return sorted(out, key=lambda sh: -sh.share)


def _narrow_by(name: str) -> str:
    fact, _, group = name.partition("@")
    if fact in FACTS:
        return FACTS[fact].narrow_by.format(group=group or 0)
    return "refit the profile on runs of this cluster (`simscale calibrate`)"


def _tagged(job: tuple[int, tuple[Scenario, CostModel]]) -> tuple[int, float]:
    return job[0], _throughput(job[1])


def describe(iv: Interval, profile: Profile | None, applies: bool) -> str:
    """The interval in words: how wide, what dominates the width, and how to narrow it."""
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
    parts = [f"{span}: {size}"]
    if not iv.parameters:
        why = (
            "no applicable profile with fitted uncertainties"
            if profile is None or not applies
            else "the profile keeps no identified parameter uncertainties"
        )
        parts.append(f"fitted-parameter uncertainty NOT included ({why})")
    if iv.model_error_sigma is None and iv.model_error_margin is None:
        parts.append(
            "the simulator's own error on known setups NOT included (the profile keeps no "
            f"held-out residuals for {iv.model_error_group}"
            + (f" at this level: {iv.model_error_missing})" if iv.model_error_missing else ")")
        )
    elif iv.model_error_margin is not None and iv.model_error_margin < 0:
        parts.append(
            f"the held-out residuals of {iv.model_error_group} narrowed the ranges-only band "
            f"by {-math.expm1(iv.model_error_margin):.1%} each side (the ranges alone were "
            "wider than the simulator's held-out error)"
        )
    top = [sh for sh in iv.shares if sh.share >= 0.1][:2] or list(iv.shares[:1])
    for sh in top:
        parts.append(f"{sh.words}: {sh.share:.0%} of the width; {sh.narrow_by} to narrow this")
    text = "; ".join(parts) + "."
    if iv.unidentified:
        text += (
            " Not identified by the profile's fit, so held at the fitted value and not in the "
            "width: " + ", ".join(sorted(iv.unidentified)) + "."
        )
    return text
