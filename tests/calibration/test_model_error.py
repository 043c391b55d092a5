"""The model error's conformity scores: per group and level, how far each held-out measured
value lay outside its band; the margin a point is judged with never saw its own residual; old
validate outputs (no draws) score |log residual|; calibrate keeps the scores from a validate
output."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from calibration.errors import CalibrationError
from calibration.model_error import (
    Residual,
    estimate,
    from_validation,
    held_out_margin,
    held_out_model_error,
    rescore,
    residuals_from_validation,
)
from simscale.cli import main
from simscale.spec.profile import load_profile

RESIDUALS = [
    Residual("ps/emulated", "a", 0.1),
    Residual("ps/emulated", "b", -0.1),
    Residual("ps/emulated", "c", 0.2),
    Residual("ps/emulated", "d", 0.0),
    Residual("allreduce/real", "x", 0.3),  # one residual: too few to say anything
]


def test_without_draws_a_score_is_the_absolute_log_residual_at_every_level() -> None:
    me = estimate(RESIDUALS, "m", "s")
    assert me.residuals == {"ps/emulated": 4}
    assert me.scores["ps/emulated"]["90"] == pytest.approx((0.0, 0.1, 0.1, 0.2))
    assert me.scores["ps/emulated"]["50"] == me.scores["ps/emulated"]["90"]
    assert me.band_draws == 0
    # a constant bias scores on every point: an interval centred on the prediction covers it
    biased = estimate([Residual("g", str(i), 0.05) for i in range(9)], "m", "s")
    assert biased.margin("g", 0.9) == pytest.approx(0.05)


def test_a_score_is_the_log_distance_outside_the_band_of_the_point_and_its_draws() -> None:
    # point 100, draws 80 and 125 (ratios 0.8, 1.25); the 50% band of (80, 100, 125) by linear
    # interpolation is [90, 112.5]
    inside = Residual("g", "a", math.log(1.0), (0.8, 1.25))
    assert inside.score(0.5) == pytest.approx(max(math.log(0.9), -math.log(1.125)))
    above = Residual("g", "b", math.log(1.5), (0.8, 1.25))
    assert above.score(0.5) == pytest.approx(math.log(1.5 / 1.125))
    # the 90% band [82, 122.5]: 1.5 is log(1.5 / 1.225) outside it
    assert above.score(0.9) == pytest.approx(math.log(1.5 / 1.225))


def test_the_margin_is_the_conformal_order_statistic_of_the_other_blocks_scores() -> None:
    # 19 blocks scoring 0.01 .. 0.19: at 90%, ceil(0.9 * 20) = 18th smallest = 0.18; at 50%,
    # ceil(0.5 * 20) = 10th = 0.10
    many = [Residual("g", f"b{i}", 0.01 * i) for i in range(1, 20)]
    me = estimate(many, "m", "s")
    assert me.margin("g", 0.9) == pytest.approx(0.18)
    assert me.margin("g", 0.5) == pytest.approx(0.10)
    # 8 scores cannot bound a 90% margin (ceil(0.9 * 9) = 9 > 8): unbounded, so None
    assert estimate(many[:8], "m", "s").margin("g", 0.9) is None


def test_the_margin_a_point_is_judged_with_never_includes_its_own_residual() -> None:
    many = [Residual("g", f"b{i}", 0.01 * i) for i in range(1, 21)]
    # b20 held out: the other 19 give 0.18, as above; its own score of 0.20 is not among them
    assert held_out_margin(many, "g", "b20", 0.9) == (pytest.approx(0.18), 19)
    wilder = [*many[:-1], Residual("g", "b20", 5.0)]
    assert held_out_margin(wilder, "g", "b20", 0.9) == held_out_margin(many, "g", "b20", 0.9)
    assert held_out_margin(wilder, "g", "b1", 0.9)[0] == pytest.approx(0.19)  # others see it
    # a whole block (a campaign of several points) is left out together
    campaign = [Residual("g", "one", 1.0), Residual("g", "one", 1.0), *RESIDUALS[:3]]
    assert "g" not in held_out_model_error(campaign, "one").scores
    assert held_out_margin(RESIDUALS, "allreduce/real", "y", 0.5) == (None, 0)


def _validation(tmp_path: Path) -> Path:
    path = tmp_path / "v.json"
    preds = [
        {
            "shape": f"s{i}",
            "measured": m,
            "predicted": 100.0,
            "groups": {"model_error": "ps/emulated"},
        }
        for i, m in enumerate((90.0, 110.0, 100.0))
    ]
    published = [
        {
            "campaign": c,
            "published": p,
            "predicted": 1.0,
            "model_error_group": "allreduce/real",
            "draws": [0.8, 1.2],
        }
        for c, p in (("A", 0.9), ("B", 1.1), ("C", 1.0))
    ]
    path.write_text(
        json.dumps(
            {
                "cross_validation": {"method": "leave-one-shape-out", "predictions": preds},
                "published": published,
                "published_summary": {"method": "leave-one-source-out"},
            }
        )
    )
    return path


def test_residuals_are_read_from_a_validate_output(tmp_path: Path) -> None:
    residuals, method = residuals_from_validation(_validation(tmp_path))
    assert method == "leave-one-shape-out; leave-one-source-out"
    assert [r.block for r in residuals] == ["s0", "s1", "s2", "A", "B", "C"]
    assert residuals[0].log_error == pytest.approx(math.log(0.9))
    assert residuals[3].draw_ratios == (pytest.approx(0.8), pytest.approx(1.2))
    me = from_validation(_validation(tmp_path))
    # records' cross-validation keeps no draws: |log residual|; scores are kept to 1e-4
    assert me.scores["ps/emulated"]["90"] == pytest.approx(
        sorted([-math.log(0.9), math.log(1.1), 0.0]), abs=1e-4
    )
    # published points with draws 0.8 and 1.2 around 1.0: the 90% band is [0.82, 1.18], and
    # 0.9, 1.1 and 1.0 all lie inside it, log(0.9 / 0.82), log(1.18 / 1.1) and log(1.18) from
    # the nearer end (negative scores)
    assert me.scores["allreduce/real"]["90"] == pytest.approx(
        sorted([math.log(0.82 / 0.9), math.log(1.1 / 1.18), -math.log(1.18)]), abs=1e-4
    )
    assert "v.json" in me.source and "leave-one-shape-out" in me.method


def test_a_saved_report_is_rescored_without_simulating(tmp_path: Path) -> None:
    """Hand-derived: four campaigns' points predicted 100, published 110, 90, 100, 120, their
    draws equal to the point, so each score is |log(published / 100)|: 0.0953, 0.1054, 0,
    0.1823. A campaign's 50% margin is the 2nd smallest of the other three: 0.1054, 0.0953,
    0.1054, 0.0953, which cover 110 and 100 but not 90 nor 120. Three scores bound no 90%
    margin: that band is the point alone, covering only the exact one."""
    rows = [
        {
            "campaign": c,
            "system": "allreduce",
            "model_error_group": "allreduce/real",
            "published": p,
            "predicted": 100.0,
            "draws": [100.0],
        }
        for c, p in zip("ABCD", (110.0, 90.0, 100.0, 120.0), strict=True)
    ]
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"result": {"published": rows}}))
    got = rescore(path)["allreduce"]
    assert got["points"] == 4
    assert got["covered_50"] == 0.5 and got["covered_90"] == 0.25
    a, b = math.log(1.1), -math.log(0.9)
    median = (2 * math.sinh(a) + 2 * math.sinh(b)) / 2
    assert got["median_relative_width_50"] == pytest.approx(median, abs=1e-3)  # scores kept to 1e-4
    assert got["median_relative_width_90"] == 0.0
    path.write_text(json.dumps({"published": [{**rows[0], "draws": []}]}))
    with pytest.raises(CalibrationError, match="no published points with draws"):
        rescore(path)


def test_a_file_that_is_not_a_validate_output_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(CalibrationError, match="no held-out predictions"):
        residuals_from_validation(bad)
    with pytest.raises(CalibrationError, match="cannot read"):
        residuals_from_validation(tmp_path / "missing.json")


def test_calibrate_keeps_the_model_error_in_the_profile(tmp_path: Path, capsys) -> None:
    probe = Path("benchmarks/results/probe-emulated-50M.json")
    out = tmp_path / "p.yaml"
    argv = ["calibrate", "--probe", str(probe), "-o", str(out)]
    assert main([*argv, "--model-error-from", str(_validation(tmp_path))]) == 0
    assert "ps/emulated" in capsys.readouterr().out
    assert load_profile(out).model_error == from_validation(_validation(tmp_path))
    # --onto: an existing profile, its costs untouched, only the block replaced
    onto = tmp_path / "onto.yaml"
    source = Path("profiles/emulated-v2.yaml")
    v = str(_validation(tmp_path))
    assert main(["calibrate", "--onto", str(source), "--model-error-from", v, "-o", str(onto)]) == 0
    assert load_profile(onto).costs == load_profile(source).costs
    assert load_profile(onto).model_error.scores["ps/emulated"]
    assert main([*argv, "--force", "--model-error-from", str(tmp_path / "nope.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
