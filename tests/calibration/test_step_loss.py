"""The per-micro-batch / per-step split of a published DDP series (calibration.step_loss): each
model recovers the costs it was made from, and tells them from the others."""

from __future__ import annotations

import math

import pytest

from calibration.published import load_transformers
from calibration.step_loss import MODELS, Row, _fit, repeat_spread, series
from simscale.model.stragglers import expected_max_of_normals

# NVIDIA's multi-node shape: 8 GPUs a host, 1 to 32 hosts, global batch fixed.
SHAPE = [(256 // n, 8 * n, n) for n in (1, 2, 4, 8, 16, 32)]
MICRO_S = 0.145


def _rows(lost) -> list[Row]:
    return [
        Row(f"{hosts}h", k, gpus, hosts, k * MICRO_S + lost(k, gpus, hosts), lost(k, gpus, hosts))
        for k, gpus, hosts in SHAPE
    ]


def test_a_per_step_cost_is_told_from_gaussian_stragglers() -> None:
    rows = _rows(lambda k, gpus, hosts: 0.003 * k + 0.340)
    fit = _fit("per step", rows, 0.005)
    assert fit.coefficients == pytest.approx((0.003, 0.340))
    assert fit.chi2 == pytest.approx(0.0, abs=1e-9)
    # A spread of each GPU's compute cannot give a cost that stays put while GPUs grow 32-fold.
    assert _fit("Gaussian stragglers", rows, 0.005).chi2 > 10


def test_gaussian_stragglers_are_recovered_from_their_own_shape() -> None:
    def lost(k, gpus, hosts):
        return 0.002 * k + 0.010 * math.sqrt(k) * expected_max_of_normals(gpus)

    fit = _fit("Gaussian stragglers", _rows(lost), 0.005)
    assert fit.coefficients == pytest.approx((0.002, 0.010))
    assert fit.chi2 == pytest.approx(0.0, abs=1e-9)


def test_a_lasting_spread_of_gpu_speeds_is_recovered_but_not_told_from_a_share() -> None:
    """The simulator's stragglers (every micro-batch waits for the slowest of N, sigma 1%)
    plus a 30 ms step: "slowest GPU" recovers both. On NVIDIA's shape (K = 256 / hosts) a
    constant share of each micro-batch fits the same rows within the figures' spread (chi2
    1.2 on 4 degrees of freedom), so the table alone cannot say which of the two it is."""

    def lost(k, gpus, hosts):
        return 0.01 * MICRO_S * k * expected_max_of_normals(gpus) + 0.030

    rows = _rows(lost)
    fit = _fit("slowest GPU", rows, 0.005)
    assert fit.coefficients == pytest.approx((0.01 * MICRO_S, 0.030))
    assert fit.chi2 == pytest.approx(0.0, abs=1e-9)
    assert _fit("per step", rows, 0.005).chi2 < 4


def test_a_cost_from_two_hosts_on_leaves_the_one_host_row_alone() -> None:
    rows = _rows(lambda k, gpus, hosts: 0.003 * k + (0.300 if hosts > 1 else 0.0))
    assert _fit("per step from 2 hosts", rows, 0.005).coefficients == pytest.approx((0.003, 0.3))
    assert _fit("per step", rows, 0.005).chi2 > 0


def test_the_bert_series_are_the_four_a100_ones_with_the_spread_of_their_repeats() -> None:
    points = [p for p in load_transformers() if p.campaign == "nvidia-dle-bert"]
    spread = repeat_spread(points)
    # Four setups are printed twice (the 8-GPU rows of the single-node and multi-node tables).
    assert 0.001 < spread < 0.02
    found = series(points, spread)
    assert [s.key.split()[0] for s in found] == ["A100-80GB"] * 4
    assert all(len(s.rows) == 7 and set(s.fits) == set(MODELS) for s in found)
