"""The simulator's own error on setups whose facts are known, as a profile keeps it.

Even with every fact typed in and every parameter measured, the simulator misses a shape by a
few percent (runs/emulated-v2, fitted on those very runs: 3.9% mean). An interval that carries
only parameter uncertainty is then too narrow to cover the truth. This error is kept per group
of setups (``model_error_group``: the system that moves the gradients, and emulated or real
hardware) as the EMPIRICAL distribution of held-out conformity scores (split-conformal
prediction, calibration/model_error.py): never from the points it is judged on.

A score is how far, in log space, the measured value lay outside the ranges-only band of its
held-out prediction (the central ``level`` of the point and its drawn inputs; the point alone
where no draws were kept): negative inside, positive outside. ``predict --interval`` widens its
own ranges-only band by the score quantile ``margin`` (or narrows it, when the margin is
negative): conformalized quantile regression (Romano, Patterson and Candes, NeurIPS 2019), in
log space. The residuals were measured at the nominal prediction of setups whose facts were
themselves uncertain, so they already hold the error of unknown facts: scaling the band by
that error again (a factor multiplied into every draw) would count it twice; the conformal
margin counts it once, and only beyond what the ranges explain.

Profiles made before the scores were kept hold a log-normal ``sigma_log`` per group instead;
they load and work as before (every draw times that factor's quantiles).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from simscale.spec.scenario import DIST_MODES, Scenario, is_real_hardware

# Fewer held-out residuals than this in a group say too little about its spread: the group
# gets no model error, and the interval's words say that model error is not included.
MIN_RESIDUALS = 3
# The interval levels whose scores a profile keeps (a score depends on the level of the band
# it is measured against). --interval at another level carries no model error, and says so.
CONFORMAL_LEVELS = (0.5, 0.8, 0.9, 0.95)


def level_key(level: float) -> str:
    """How a level is named in a profile: 0.9 -> "90"."""
    return f"{level * 100:g}"


def conformal_margin(scores: Sequence[float], level: float) -> float | None:
    """The split-conformal margin of ``scores`` at ``level``: their ceil(level (n+1))-th
    smallest, which a new exchangeable score stays at or below with probability >= level;
    None when n is too small for the level (the margin would be unbounded).

    Written out rather than numpy.quantile: method="higher" at level (n+1)/n lands one order
    statistic above this one for some n, and "inverted_cdf" can land one above by rounding."""
    n = len(scores)
    k = math.ceil(level * (n + 1) - 1e-9)
    if n == 0 or k > n:
        return None
    return sorted(scores)[max(k, 1) - 1]


@dataclass(frozen=True)
class ModelError:
    """Per group, the sorted held-out conformity scores of log(measured / predicted) per
    interval level (``scores``), how many held-out residuals each group has, how many drawn
    inputs each scored band had beside the point (0: the point alone), and the command and
    data they came from. ``sigma_log``: a log-normal 1-sigma per group, in profiles made
    before the scores were kept. Empty in profiles made before either."""

    sigma_log: dict[str, float] = field(default_factory=dict)
    residuals: dict[str, int] = field(default_factory=dict)
    method: str = ""  # how the residuals were held out and scored
    source: str = ""  # the command and the data they came from
    scores: dict[str, dict[str, tuple[float, ...]]] = field(default_factory=dict)
    band_draws: int = 0

    def sigma_for(self, scenario: Scenario) -> tuple[str, float | None]:
        """The scenario's group and its log-normal sigma (None where the profile has none)."""
        group = model_error_group(scenario)
        return group, self.sigma_log.get(group)

    def margin(self, group: str, level: float) -> float | None:
        """The conformal margin in log space for ``group`` at ``level`` (None where the
        profile keeps no scores for them, or too few for the level)."""
        kept = self.scores.get(group, {}).get(level_key(level))
        return conformal_margin(kept, level) if kept else None


def system_of(scenario: Scenario) -> str:
    """How the gradients move: a parameter server (even with one worker: its pushes still
    cross the network), all-reduce, or DDP/ZeRO; or not at all, on one GPU without a server
    (its error is the compute model's alone)."""
    mode = scenario.kvstore.mode
    if mode in DIST_MODES:
        return "ps"
    if scenario.num_gpus == 1:
        return "single"
    if mode in ("ddp", "zero"):
        return "ddp-zero"
    return "allreduce"  # also one host's local/device aggregation


def model_error_group(scenario: Scenario) -> str:
    """The group a scenario's model error is read from, e.g. ``ps/emulated``: the emulated
    cluster (CPU workers or emulated compute) and real accelerators err differently."""
    return f"{system_of(scenario)}/{'real' if is_real_hardware(scenario) else 'emulated'}"
