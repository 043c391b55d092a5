"""Uncertainty intervals: they widen as the profile's parameter uncertainty grows, use the
fit's covariance when the profile has one, and say in words what they cover."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simscale.spec.config import ConfigError
from simscale.spec.costs import CostModel
from simscale.spec.profile import PROFILE_SCHEMA_VERSION, FitInfo, Profile
from simscale.spec.scenario import scenario_from_dict
from simscale.whatif import WhatIfError
from simscale.whatif.uncertainty import (
    draw_costs,
    interval,
    parameter_space,
    unidentified_parameters,
)
from tests.support.costly import interval_too_costly

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


def test_an_unidentified_parameter_is_held_fixed_and_named_not_exponentiated() -> None:
    """A sigma of 2223 in log space (what profiles/real-v1.yaml once held for
    allreduce_tensor_us) is no uncertainty at all: the interval must not draw it (its
    exponential overflows), must name it, and must still sample the identified ones."""
    fit = FitInfo(parameters=PARAMS, uncertainty={PARAMS[0]: 0.1, PARAMS[1]: 2223.0})
    profile = Profile(PROFILE_SCHEMA_VERSION, _profile(0.1).costs, fit=fit)
    draws = draw_costs(profile, profile.costs, 20, seed=3)
    assert {c.message_overhead_us for c in draws} == {50.0}
    assert len({c.bandwidth_factor for c in draws}) > 1
    iv = interval(NET, profile, level=0.9, draws=6, repeats=1, executor="serial")
    assert iv.parameters == (PARAMS[0],)
    assert set(iv.unidentified) == {PARAMS[1]}
    assert "message_overhead_us" in iv.words and "Not identified" in iv.words


def test_unidentified_parameters_come_from_the_fit_or_from_their_sigma() -> None:
    nan_sigma = FitInfo(parameters=PARAMS, uncertainty={PARAMS[0]: float("nan"), PARAMS[1]: 0.1})
    flagged = FitInfo(
        parameters=PARAMS,
        uncertainty=dict.fromkeys(PARAMS, 0.1),
        unidentified={PARAMS[1]: "at its lower search bound"},
    )
    for fit, bad in ((nan_sigma, PARAMS[0]), (flagged, PARAMS[1])):
        profile = Profile(PROFILE_SCHEMA_VERSION, _profile(0.1).costs, fit=fit)
        assert set(unidentified_parameters(profile)) == {bad}


def test_holding_a_correlated_parameter_fixed_conditions_the_others() -> None:
    """With the second parameter fixed, the first keeps only what the data leaves of it given
    the second: var(x | y) = var(x) - cov(x, y)^2 / var(y)."""
    cov = ((0.04, 0.039), (0.039, 0.04))
    fit = FitInfo(parameters=PARAMS, covariance=cov, unidentified={PARAMS[1]: "test"})
    space = parameter_space(Profile(PROFILE_SCHEMA_VERSION, _profile(0.1).costs, fit=fit))
    assert space is not None and space.names == (PARAMS[0],)
    assert space.covariance[0, 0] == pytest.approx(0.04 - 0.039**2 / 0.04)


def test_a_gpu_the_scenario_does_not_use_is_not_sampled() -> None:
    names = ("compute_efficiency/V100/fp32", "compute_efficiency/cpu/fp32")
    fit = FitInfo(parameters=names, uncertainty=dict.fromkeys(names, 0.1))
    space = parameter_space(Profile(PROFILE_SCHEMA_VERSION, CostModel(), fit=fit), NET)
    assert space is not None and space.names == ("compute_efficiency/cpu/fp32",)


# ---- --interval never ends in a traceback ----

_SIGMAS = st.one_of(
    st.floats(0.0, 3.0), st.sampled_from([2223.0, 1e308, float("inf"), float("nan"), -1.0])
)
_HOSTS = st.one_of(
    st.fixed_dictionaries(
        {"count": st.integers(1, 4), "instance": st.sampled_from(["p3.16xlarge", "p2.xlarge"])}
    ),
    st.fixed_dictionaries(
        {
            "count": st.integers(1, 4),
            "gpus_per_host": st.integers(1, 4),
            "gpu": st.sampled_from(["V100", "K80", "cpu", "A100"]),
            "nic_gbps": st.floats(0.1, 100.0),
        }
    ),
)


@st.composite
def _scenarios(draw: st.DrawFn) -> dict:
    mode = draw(st.sampled_from(["dist_sync", "dist_async", "allreduce", "dist_sync_device"]))
    return {
        "name": "fuzz",
        "cluster": {"hosts": [draw(_HOSTS)]},
        "model": {"name": draw(st.sampled_from(["mlp", "convnet_small", "resnet18"]))},
        "training": {
            "batch_per_gpu": draw(st.integers(1, 64)),
            "precision": draw(st.sampled_from(["fp32", "fp16"])),
        },
        "kvstore": {"mode": mode},
        "simulation": {"warmup_iterations": 0, "measured_iterations": 2, "seed": 0},
    }


@pytest.mark.slow  # measured over 2 CPU s (tests/support/cpu_report.py)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_scenarios(), sigmas=st.lists(_SIGMAS, min_size=3, max_size=3))
def test_interval_never_raises_on_generated_scenarios_and_profiles(
    data: dict, sigmas: list[float]
) -> None:
    """Any valid scenario, under a profile whose sigmas are absurd (huge, infinite, NaN,
    negative), gets a finite interval around its prediction or a one-line WhatIfError."""
    try:
        scenario = scenario_from_dict(data)
    except ConfigError:
        return
    names = (*PARAMS, "compute_efficiency/V100/fp32")
    fit = FitInfo(parameters=names, uncertainty=dict(zip(names, sigmas, strict=True)))
    profile = Profile(PROFILE_SCHEMA_VERSION, CostModel(), fit=fit)
    iv = interval(
        scenario, profile, level=0.9, draws=3, repeats=1, force_profile=True, executor="serial"
    )
    assert 0 < iv.low <= iv.median <= iv.high < math.inf
    assert iv.words


def test_the_words_name_the_fact_that_dominates_the_width_and_the_field_to_set() -> None:
    """On a network-bound scenario, a NIC declared anywhere from 0.2 to 2 Gbit/s dominates."""
    data = NET.to_dict() | {
        "unknowns": [{"fact": "nic_gbps", "low": 0.2, "high": 2, "source": "a test range"}]
    }
    iv = interval(scenario_from_dict(data), None, draws=6, repeats=1, executor="serial")
    top = iv.shares[0]
    assert top.input == "nic_gbps" and top.share > 0.7
    assert "the NIC's achieved rate" in iv.words and "cluster.hosts[0].nic_gbps" in iv.words
    assert iv.to_dict()["width_shares"][0]["input"] == "nic_gbps"
    assert iv.relative_width > 0.5


def _published_sources() -> list[str]:
    from calibration.published import PUBLISHED_DIR

    return sorted(f.stem for f in PUBLISHED_DIR.glob("*.yaml"))


@pytest.mark.slow
@pytest.mark.parametrize("source", _published_sources())
def test_every_published_points_scenario_gets_an_interval(source: str) -> None:
    """The scenario of every published point (those validate simulates) gets a finite 90%
    interval under the profile predict would use, with what the source leaves unstated
    sampled from its instance preset's ranges (the costliest parameter-server points with
    SIMSCALE_TEST_COSTLY=1: tests/support/costly.py). Three iterations per simulation: the
    check is that every point gets a finite interval, not its value (the golden test and
    validate hold those)."""
    from calibration.published import PUBLISHED_DIR, load_published
    from calibration.published_fit import too_costly_to_judge

    points = load_published([PUBLISHED_DIR / f"{source}.yaml"])
    for p in points:
        if too_costly_to_judge(p) or interval_too_costly(p):
            continue
        few = replace(p.scenario.simulation, warmup_iterations=1, measured_iterations=2)
        scenario = replace(p.scenario, simulation=few)
        iv = interval(scenario, level=0.9, draws=2, repeats=1, executor="serial")
        assert 0 < iv.low <= iv.high < math.inf, p.name


def _with_model_error(sigma: float) -> Profile:
    """No parameter uncertainty at all: only the model-error factor can widen the interval."""
    from simscale.spec.model_error import ModelError

    me = ModelError({"ps/emulated": sigma}, {"ps/emulated": 9}, "leave-one-out", "test")
    return Profile(PROFILE_SCHEMA_VERSION, CostModel(), model_error=me)


def test_an_older_profiles_log_normal_factor_widens_the_interval_by_its_sigma() -> None:
    """Hand-derived: with nothing else varying (no fitted sigmas, one repeat at the nominal
    seed), the 90% interval is the nominal times exp(-/+ 1.645 sigma): for sigma 0.1,
    0.8484 and 1.1787 of the nominal."""
    iv = interval(NET, _with_model_error(0.1), level=0.9, draws=2, repeats=1, executor="serial")
    assert iv.jitter_low == iv.jitter_high == iv.nominal  # the draws vary nothing else
    assert iv.low / iv.nominal == pytest.approx(math.exp(-1.6449 * 0.1), rel=2e-3)
    assert iv.high / iv.nominal == pytest.approx(math.exp(1.6449 * 0.1), rel=2e-3)
    assert iv.model_error_sigma == 0.1 and iv.model_error_group == "ps/emulated"
    assert "the simulator's own error on known setups (ps/emulated" in iv.words
    assert "100% of the width" in iv.words
    assert iv.to_dict()["model_error"] == {
        "group": "ps/emulated",
        "margin_log": None,
        "sigma_log": 0.1,
        "residuals": 9,
    }


def _with_scores(scores: tuple[float, ...]) -> Profile:
    """No parameter uncertainty: only the conformal margin can move the band."""
    from simscale.spec.model_error import ModelError

    kept = dict.fromkeys(("50", "90"), scores)
    me = ModelError(residuals={"ps/emulated": len(scores)}, scores={"ps/emulated": kept})
    return Profile(PROFILE_SCHEMA_VERSION, CostModel(), model_error=me)


def test_the_conformal_margin_widens_the_ranges_only_band_by_its_order_statistic() -> None:
    """Hand-derived: nothing else varies, so the ranges-only band is the nominal alone; 19
    held-out scores 0.01 .. 0.19 give a 90% margin of the ceil(0.9 * 20) = 18th, 0.18, so the
    band is the nominal times exp(-/+ 0.18)."""
    scores = tuple(0.01 * i for i in range(1, 20))
    iv = interval(NET, _with_scores(scores), level=0.9, draws=2, repeats=1, executor="serial")
    assert iv.ranges_low == iv.ranges_high == iv.nominal
    assert iv.low / iv.nominal == pytest.approx(math.exp(-0.18))
    assert iv.high / iv.nominal == pytest.approx(math.exp(0.18))
    assert iv.model_error_margin == pytest.approx(0.18) and iv.model_error_sigma is None
    assert "the band widened by 19.7% each side" in iv.words and "100% of the width" in iv.words
    # at 50%: the 10th, 0.10; at 80% the profile keeps no scores, and the words say so
    iv50 = interval(NET, _with_scores(scores), level=0.5, draws=2, repeats=1, executor="serial")
    assert iv50.high / iv50.nominal == pytest.approx(math.exp(0.10))
    iv80 = interval(NET, _with_scores(scores), level=0.8, draws=2, repeats=1, executor="serial")
    assert iv80.low == iv80.high == iv80.nominal
    assert "NOT included" in iv80.words and "scores kept at 50%, 90% only" in iv80.words


def test_a_negative_margin_narrows_the_band_but_never_past_its_middle() -> None:
    from simscale.whatif.uncertainty import conformal_band, conformity_score

    assert conformal_band(80.0, 125.0, -0.1) == (
        pytest.approx(80 * math.exp(0.1)),
        pytest.approx(125 * math.exp(-0.1)),
    )
    assert conformal_band(80.0, 125.0, -1.0) == (pytest.approx(100.0), pytest.approx(100.0))
    # a score is the log distance outside the band, negative inside (to the nearer end)
    assert conformity_score(150.0, 80.0, 125.0) == pytest.approx(math.log(1.2))
    assert conformity_score(100.0, 80.0, 125.0) == pytest.approx(math.log(0.8))


def test_without_a_model_error_the_words_say_it_is_not_included() -> None:
    iv = interval(NET, _profile(0.01), level=0.9, draws=4, repeats=1, executor="serial")
    assert iv.model_error_sigma is None
    assert "own error on known setups NOT included" in iv.words
