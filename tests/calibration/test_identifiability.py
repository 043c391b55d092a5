"""Identifiability: a parameter at a bound, one no residual responds to, and two whose effects
cancel are named, not given a sigma; the identified ones get s^2 (J^T J)^-1."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.identifiability import identify

NAMES = ("a", "b", "c")
LO, HI = np.full(3, -5.0), np.full(3, 5.0)
RNG = np.random.default_rng(0)
JAC = RNG.standard_normal((40, 3))
FUN = RNG.standard_normal(40) * 0.1


def _expected_cov(jac: np.ndarray, fun: np.ndarray) -> np.ndarray:
    m, n = jac.shape
    return np.linalg.inv(jac.T @ jac) * float(fun @ fun) / (m - n)


def test_a_well_posed_fit_is_identified_with_the_gauss_newton_covariance() -> None:
    ident = identify(NAMES, np.zeros(3), LO, HI, JAC, FUN)
    assert ident.unidentified == {}
    assert ident.covariance == pytest.approx(_expected_cov(JAC, FUN))


def test_a_value_at_a_search_bound_is_not_an_estimate() -> None:
    x = np.array([0.0, -5.0, 0.0])  # b at its lower bound
    ident = identify(NAMES, x, LO, HI, JAC, FUN)
    assert set(ident.unidentified) == {"b"} and "lower search bound" in ident.unidentified["b"]
    # the others: the covariance with b held fixed, b's rows and columns zero
    sub = _expected_cov(JAC[:, [0, 2]], FUN)
    assert ident.covariance is not None
    assert ident.covariance[np.ix_([0, 2], [0, 2])] == pytest.approx(sub)
    assert not ident.covariance[1].any() and not ident.covariance[:, 1].any()
    assert np.isnan(ident.sigma()["b"])


def test_a_parameter_no_point_responds_to_is_named() -> None:
    jac = JAC.copy()
    jac[:, 2] = 0.0
    ident = identify(NAMES, np.zeros(3), LO, HI, jac, FUN)
    assert set(ident.unidentified) == {"c"} and "Jacobian column" in ident.unidentified["c"]


def test_two_parameters_whose_effects_cancel_are_both_named() -> None:
    jac = JAC.copy()
    jac[:, 1] = -2.0 * jac[:, 0]  # b moves the residuals exactly as -2 a does
    ident = identify(NAMES, np.zeros(3), LO, HI, jac, FUN)
    assert set(ident.unidentified) == {"a", "b"}
    assert "cannot be told apart" in ident.unidentified["a"]
    assert ident.sigma()["c"] > 0


def test_a_sigma_wider_than_a_factor_e_is_not_identified() -> None:
    jac = JAC.copy()
    jac[:, 0] *= 1e-3  # a barely moves the residuals: its sigma is huge
    ident = identify(NAMES, np.zeros(3), LO, HI, jac, FUN)
    assert set(ident.unidentified) == {"a"} and "log space" in ident.unidentified["a"]


def test_without_a_jacobian_nothing_is_identified() -> None:
    ident = identify(NAMES, np.zeros(3), LO, HI, None, None)
    assert set(ident.unidentified) == set(NAMES) and ident.covariance is None
