"""Fit the simulator's uncertain cost parameters to measured runs.

Top-down: the few parameters named in ``PARAMETERS`` are adjusted with
``scipy.optimize.least_squares`` so that simulated throughput matches the measured throughput of
every configuration (repeats averaged), on the log of the ratio (a relative error that treats
over- and under-prediction alike). Positive parameters are searched in log space within bounds;
the fit is deterministic (the simulator is seeded and finite differences are fixed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import least_squares

from calibration.errors import CalibrationError
from calibration.identifiability import identify
from calibration.runs import Run, mean_by_shape
from simscale.simulator import simulate
from simscale.spec.costs import CostModel
from simscale.spec.scenario import Scenario


@dataclass(frozen=True)
class Parameter:
    """A fittable cost: a CostModel field, or ``compute_efficiency/GPU/precision``."""

    name: str
    lower: float
    upper: float
    # Where a search starts when the base value is outside the bounds (a cost whose default 0
    # switches the effect off would otherwise start at the lower bound, where it barely acts).
    start: float | None = None

    @property
    def log_scale(self) -> bool:
        return self.lower > 0

    def get(self, costs: CostModel) -> float:
        if self.name.startswith("compute_efficiency/"):
            gpu, precision = self.name.split("/")[1:]
            return costs.efficiency(gpu, precision)
        return float(getattr(costs, self.name))

    def set(self, costs: CostModel, value: float) -> CostModel:
        if self.name.startswith("compute_efficiency/"):
            key = self.name.split("/", 1)[1]
            return replace(costs, compute_efficiency={**costs.compute_efficiency, key: value})
        return replace(costs, **{self.name: value})

    def to_x(self, value: float) -> float:
        if self.start is not None and not self.lower <= value <= self.upper:
            value = self.start
        value = min(max(value, self.lower), self.upper)
        return math.log(value) if self.log_scale else value

    def from_x(self, x: float) -> float:
        return math.exp(x) if self.log_scale else x


# Bounds are physical plausibility, wide on purpose: the data, not the bounds, should decide.
PARAMETERS: dict[str, Parameter] = {
    p.name: p
    for p in (
        Parameter("bandwidth_factor", 0.2, 1.0),
        Parameter("latency_factor", 0.1, 50.0),
        Parameter("message_overhead_us", 0.5, 20_000.0),
        Parameter("server_request_us", 0.5, 20_000.0),
        Parameter("server_merge_ns_per_byte", 0.005, 100.0),
        Parameter("server_update_ns_per_byte", 0.005, 100.0),
        Parameter("overlap_loss", 0.0, 1.0),
        Parameter("tcp_share_sigma", 0.02, 2.0, start=0.3),
        Parameter("compute_efficiency/cpu/fp32", 0.005, 1.0),
        # Real-cluster mechanisms (simscale.spec.costs; fitted on published measurements).
        Parameter("winograd_3x3_speedup", 1.0, 6.0),
        Parameter("connection_gbps", 0.5, 400.0, start=50.0 / 3.0),
        Parameter("allreduce_tensor_us", 0.5, 20_000.0, start=50.0),
        Parameter("layer_overhead_us", 0.5, 5_000.0, start=20.0),
        Parameter("straggler_sigma", 0.002, 0.5, start=0.03),
        Parameter("decode_us_per_sample", 100.0, 200_000.0, start=10_000.0),
    )
}
DEFAULT_FIT = (
    "bandwidth_factor",
    "message_overhead_us",
    "server_update_ns_per_byte",
    "latency_factor",
    "tcp_share_sigma",
)


def parameters(names: Sequence[str]) -> list[Parameter]:
    """The named parameters; CalibrationError listing the known ones for an unknown name."""
    unknown = [n for n in names if n not in PARAMETERS]
    if unknown:
        raise CalibrationError(
            f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(PARAMETERS)}"
        )
    return [PARAMETERS[n] for n in names]


def with_values(base: CostModel, params: Sequence[Parameter], values: Sequence[float]) -> CostModel:
    costs = base
    for p, v in zip(params, values, strict=True):
        costs = p.set(costs, v)
    return costs


def predict(scenario: Scenario, costs: CostModel) -> float:
    """Simulated samples/s of one configuration under ``costs``."""
    return simulate(scenario, costs).throughput_samples_per_s


@dataclass(frozen=True)
class FitResult:
    costs: CostModel
    values: dict[str, float]
    sigma_rel: dict[str, float]  # 1-sigma relative uncertainty (NaN when not identifiable)
    shapes: tuple[str, ...]
    measured: tuple[float, ...]
    predicted: tuple[float, ...]
    evaluations: int
    # Gauss-Newton covariance of the fitted coordinates (log of the value for log-scaled
    # parameters), rows and columns in ``values`` order; empty when not identifiable.
    covariance: tuple[tuple[float, ...], ...] = ()
    # Parameters the runs could not pin down, with the reason (calibration/identifiability.py).
    unidentified: dict[str, str] = field(default_factory=dict)

    @property
    def ape(self) -> np.ndarray:
        m, p = np.array(self.measured), np.array(self.predicted)
        return np.abs(p - m) / m

    @property
    def mape(self) -> float:
        return float(self.ape.mean())


def fit(
    runs: Sequence[Run],
    names: Sequence[str] = DEFAULT_FIT,
    base: CostModel | None = None,
    *,
    start: CostModel | None = None,
    max_evaluations: int = 60,
    progress: Callable[[int, float], None] | None = None,
) -> FitResult:
    """Fit the parameters ``names`` so the simulator reproduces ``runs`` (repeats averaged)."""
    base = base or CostModel()
    params = parameters(names)
    shapes = mean_by_shape(runs)
    if len(shapes) < 1:
        raise CalibrationError("nothing to fit: no runs")
    keys = list(shapes)
    scenarios = [shapes[k][0] for k in keys]
    measured = np.array([shapes[k][1] for k in keys])
    start_costs = start or base
    x0 = np.array([p.to_x(p.get(start_costs)) for p in params])
    lo = np.array([p.to_x(p.lower) for p in params])
    hi = np.array([p.to_x(p.upper) for p in params])
    calls = [0]

    def residuals(x: np.ndarray) -> np.ndarray:
        costs = with_values(base, params, [p.from_x(v) for p, v in zip(params, x, strict=True)])
        pred = np.array([predict(s, costs) for s in scenarios])
        calls[0] += 1
        r = np.log(pred / measured)
        if progress is not None:
            progress(calls[0], float(np.mean(np.abs(pred - measured) / measured)))
        return r

    if params:
        sol = least_squares(
            residuals,
            np.clip(x0, lo, hi),
            bounds=(lo, hi),
            diff_step=1e-2,
            x_scale=1.0,
            max_nfev=max_evaluations,
            method="trf",
        )
        x = sol.x
        linear = [p.name for p in params if not p.log_scale]
        ident = identify([p.name for p in params], x, lo, hi, sol.jac, sol.fun, linear)
        cov, sigma, unidentified = ident.covariance, ident.sigma(), ident.unidentified
    else:
        x, sigma, cov, unidentified = x0, {}, None, {}
    values = {p.name: p.from_x(v) for p, v in zip(params, x, strict=True)}
    costs = with_values(base, params, list(values.values()))
    predicted = tuple(predict(s, costs) for s in scenarios)
    return FitResult(
        costs=costs,
        values=values,
        sigma_rel=sigma,
        shapes=tuple(keys),
        measured=tuple(measured.tolist()),
        predicted=predicted,
        evaluations=calls[0],
        unidentified=unidentified,
        # Kept only when every entry is finite: a sampler cannot use a partial matrix.
        covariance=tuple(tuple(float(v) for v in row) for row in cov)
        if cov is not None and np.all(np.isfinite(cov))
        else (),
    )
