"""Uncertainty intervals: they widen as the profile's parameter uncertainty grows, use the
fit's covariance when the profile has one, and say in words what they cover."""

from __future__ import annotations

import pytest

from simscale.spec.costs import CostModel
from simscale.spec.profile import PROFILE_SCHEMA_VERSION, FitInfo, Profile
from simscale.spec.scenario import scenario_from_dict
from simscale.whatif import WhatIfError
from simscale.whatif.uncertainty import draw_costs, interval

# Network-bound on purpose (1 Gbit/s NICs, one server): bandwidth and per-message costs matter.
NET = scenario_from_dict(
    {
        "name": "net",
        "cluster": {"hosts": [{"count": 4, "gpus_per_host": 1, "gpu": "cpu", "nic_gbps": 1}]},
        "model": {"name": "mlp"},
        "training": {"batch_per_gpu": 32},
        "kvstore": {"mode": "dist_sync", "servers": 1},
        "simulation": {"warmup_iterations": 1, "measured_iterations": 3, "seed": 0},
    }
)
PARAMS = ("bandwidth_factor", "message_overhead_us")


def _profile(sigma: float, covariance: bool = False) -> Profile:
    fit = FitInfo(
        parameters=PARAMS,
        uncertainty=dict.fromkeys(PARAMS, sigma),
        covariance=((sigma**2, 0.0), (0.0, sigma**2)) if covariance else (),
    )
    costs = CostModel(bandwidth_factor=0.8, message_overhead_us=50.0)
    return Profile(PROFILE_SCHEMA_VERSION, costs, fit=fit)


def test_intervals_widen_as_parameter_uncertainty_grows() -> None:
    widths = []
    for sigma in (0.01, 0.1, 0.4):
        iv = interval(NET, _profile(sigma), level=0.9, draws=12, repeats=2, executor="serial")
        assert iv.low <= iv.median <= iv.high
        assert iv.parameters == PARAMS
        widths.append(iv.relative_width)
    assert 0 < widths[0] < widths[1] < widths[2]
    assert widths[2] > 4 * widths[0]
    wide = interval(NET, _profile(0.4), level=0.9, draws=12, repeats=2, executor="serial")
    assert wide.relative_width >= 0.2 and "WIDE" in wide.words


def test_the_covariance_is_used_when_present() -> None:
    """A covariance equal to the diagonal of the sigmas draws the same parameters; a
    correlated one draws others."""
    diag = draw_costs(_profile(0.2), _profile(0.2).costs, 8, seed=1)
    full = draw_costs(_profile(0.2, covariance=True), _profile(0.2).costs, 8, seed=1)
    assert [c.bandwidth_factor for c in diag] == pytest.approx([c.bandwidth_factor for c in full])
    corr = Profile(
        PROFILE_SCHEMA_VERSION,
        _profile(0.2).costs,
        fit=FitInfo(parameters=PARAMS, covariance=((0.04, 0.039), (0.039, 0.04))),
    )
    draws = draw_costs(corr, corr.costs, 200, seed=1)
    import numpy as np

    x = np.log([c.bandwidth_factor for c in draws if c.bandwidth_factor < 1.0])
    y = np.log([c.message_overhead_us for c in draws if c.bandwidth_factor < 1.0])
    assert np.corrcoef(x, y)[0, 1] > 0.9
    # draws stay inside what the cost model accepts
    assert all(0.01 <= c.bandwidth_factor <= 1.0 for c in draws)


def test_without_a_profile_the_words_say_only_jitter_is_covered() -> None:
    iv = interval(NET, None, level=0.9, draws=4, repeats=2, executor="serial")
    assert iv.parameters == ()
    assert "parameter uncertainty NOT included" in iv.words


def test_bad_levels_are_one_line() -> None:
    with pytest.raises(WhatIfError, match=r"expected a level in \(0, 100\)"):
        interval(NET, None, level=1.5, executor="serial")
