"""Which fitted parameters the data pins down, and their covariance.

A least-squares fit returns a value for every parameter it was given, identified or not. A value
at a search bound is not an estimate (the data pushed it as far as it was let go: the mechanism
it stands for is absent, or stands in for another); a parameter no residual responds to, or one
whose Gauss-Newton sigma spans more than a factor e, is not one either. Those are reported by
name with the reason, held at their value, and left out of the covariance, which is computed on
the identified parameters alone: s^2 (J^T J)^-1 over their Jacobian columns (the Fisher
information of a Gaussian likelihood), s^2 the residual variance. The rank is checked through
the singular values of the column-scaled Jacobian, so a direction two parameters share
(their effects cancel) is caught even when neither column is zero.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

# Within this distance of a bound in fit coordinates (log of the value: 0.1%) a value is at it.
AT_BOUND = 1e-3
# A singular value of the column-normalised Jacobian below this share of the largest is a
# direction the residuals do not feel (numerical rank).
RANK_TOLERANCE = 1e-6
# As simscale.whatif.uncertainty.MAX_IDENTIFIED_LOG_SIGMA: one sigma above a factor e.
MAX_LOG_SIGMA = 1.0


@dataclass(frozen=True)
class Identification:
    """The fit's parameters split into identified (with a covariance) and not (with why)."""

    names: tuple[str, ...]
    # Covariance over ``names`` in fit coordinates; the rows and columns of unidentified
    # parameters are zero (they are held fixed). None where nothing could be computed.
    covariance: np.ndarray | None
    unidentified: dict[str, str]

    def sigma(self) -> dict[str, float]:
        """1-sigma per identified parameter (NaN for the others)."""
        out = {}
        for i, n in enumerate(self.names):
            ok = self.covariance is not None and n not in self.unidentified
            out[n] = math.sqrt(max(float(self.covariance[i, i]), 0.0)) if ok else math.nan  # type: ignore[index]
        return out


def identify(
    names: Sequence[str],
    x: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    jac: np.ndarray | None,
    fun: np.ndarray | None,
    linear: Collection[str] = (),
) -> Identification:
    """Split ``names`` (fitted at ``x`` within [lower, upper], fit coordinates: the log of the
    value except for the ``linear`` ones) into identified and not, from the Jacobian ``jac``
    and residuals ``fun`` at the solution."""
    names = tuple(names)
    bad: dict[str, str] = {}
    for n, v, lo, hi in zip(names, x, lower, upper, strict=True):
        if v - lo <= AT_BOUND:
            bad[n] = "at its lower search bound: the data push it below any value it may take"
        elif hi - v <= AT_BOUND:
            bad[n] = "at its upper search bound: the data push it above any value it may take"
    if jac is None or fun is None:
        for n in names:
            bad.setdefault(n, "the fit ran out of evaluations before a Jacobian was kept")
        return Identification(names, None, bad)
    jac = np.asarray(jac, dtype=float)
    norms = np.linalg.norm(jac, axis=0)
    top = float(norms.max()) if norms.size else 0.0
    for n, norm in zip(names, norms, strict=True):
        if n not in bad and (top == 0 or norm <= RANK_TOLERANCE * top):
            bad[n] = "no fitted point responds to it (a zero Jacobian column)"
    free = [i for i, n in enumerate(names) if n not in bad]
    cov = np.zeros((len(names), len(names)))
    if free:
        sub = _covariance(jac[:, free], np.asarray(fun, dtype=float), names, free, bad)
        if sub is not None:
            free = [i for i in free if names[i] not in bad]
            cov[np.ix_(free, free)] = sub
    for i, n in enumerate(names):
        if n not in bad and n not in linear and math.sqrt(max(cov[i, i], 0.0)) > MAX_LOG_SIGMA:
            bad[n] = f"1-sigma of {math.sqrt(cov[i, i]):.3g} in log space: the data cannot pin it"
    for i, n in enumerate(names):
        if n in bad:
            cov[i, :] = 0.0
            cov[:, i] = 0.0
    return Identification(names, cov, bad)


def _covariance(
    jac: np.ndarray,
    fun: np.ndarray,
    names: tuple[str, ...],
    free: list[int],
    bad: dict[str, str],
) -> np.ndarray | None:
    """s^2 (J^T J)^-1 over the free columns, after dropping (and naming in ``bad``) the
    parameters of directions the residuals do not feel; None when no residual is left over."""
    m, n = jac.shape
    if m <= n:
        for i in free:
            bad.setdefault(names[i], f"{m} residuals cannot pin {n} parameters")
        return None
    scale = np.linalg.norm(jac, axis=0)
    js = jac / scale
    _, s, vt = np.linalg.svd(js, full_matrices=False)
    weak = s < RANK_TOLERANCE * s[0]
    if weak.any():
        # Every parameter with a large share in a direction the data do not feel.
        for k in np.flatnonzero(weak):
            for j in np.flatnonzero(np.abs(vt[k]) > 0.3):
                partners = [names[free[i]] for i in np.flatnonzero(np.abs(vt[k]) > 0.3)]
                bad.setdefault(
                    names[free[j]],
                    "its effect cannot be told apart from " + ", ".join(partners),
                )
        keep = [i for i, idx in enumerate(free) if names[idx] not in bad]
        if not keep:
            return None
        return _covariance(jac[:, keep], fun, names, [free[i] for i in keep], bad)
    s2 = float(fun @ fun) / (m - n)
    inv = (vt.T / s**2) @ vt  # (Js^T Js)^-1
    return inv / np.outer(scale, scale) * s2
