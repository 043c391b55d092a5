"""The slope that asks whether the other transformer campaigns could teach a spread of GPU
speeds (calibration.straggler_slope): it recovers a spread planted in their errors, ignores the
campaign held out, and says how well the points pin it."""

from __future__ import annotations

import numpy as np
import pytest

from calibration.published import load_transformers
from calibration.straggler_slope import slope
from simscale.model.stragglers import expected_max_of_normals

POINTS = {p.name: p for p in load_transformers()}


def _rows(sigma: float, noise: float = 0.0, seed: int = 0) -> list[dict]:
    """Every published point predicted too fast by 1 + sigma E[max of N], times one offset per
    campaign, times a log-normal scatter of ``noise``."""
    rng = np.random.default_rng(seed)
    offsets = {
        c: 1.0 + 0.05 * i for i, c in enumerate(sorted({p.campaign for p in POINTS.values()}))
    }
    return [
        {
            "name": p.name,
            "campaign": p.campaign,
            "unmodelled": p.unmodelled,
            "published": 100.0,
            "predicted": 100.0
            * offsets[p.campaign]
            * (1 + sigma * expected_max_of_normals(p.gpus))
            * float(np.exp(noise * rng.standard_normal())),
        }
        for p in POINTS.values()
    ]


def test_a_planted_spread_is_recovered_from_the_other_campaigns() -> None:
    # log(1 + sigma E) is sigma E to first order: 1% planted reads 0.99-1.0%.
    s = slope(_rows(0.01), POINTS)
    assert s.sigma == pytest.approx(0.01, rel=0.02)
    assert s.error < 1e-4
    assert 8 in s.gpu_counts and max(s.gpu_counts) <= 64
    assert not any(g.startswith("nvidia-dle-bert") for g in s.groups)


def test_the_held_out_campaign_never_enters() -> None:
    rows = _rows(0.01)
    for r in rows:
        if r["campaign"] == "nvidia-dle-bert":
            r["predicted"] *= 1.5  # whatever it holds, the slope does not see it
    assert slope(rows, POINTS).sigma == pytest.approx(slope(_rows(0.01), POINTS).sigma)


def test_its_error_grows_with_the_scatter_of_the_points() -> None:
    quiet, noisy = slope(_rows(0.01, 0.01), POINTS), slope(_rows(0.01, 0.10), POINTS)
    assert noisy.error > 5 * quiet.error
