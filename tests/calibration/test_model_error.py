"""The model-error sigma: the root mean square of held-out log residuals per group; the sigma a
point is judged with never saw its own residual; calibrate keeps it from a validate output."""

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
    held_out_sigma,
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


def test_sigma_is_the_root_mean_square_of_the_group_bias_included() -> None:
    me = estimate(RESIDUALS, "m", "s")
    # sqrt((0.01 + 0.01 + 0.04 + 0) / 4) = sqrt(0.015)
    assert me.sigma_log == {"ps/emulated": pytest.approx(math.sqrt(0.015))}
    assert me.residuals == {"ps/emulated": 4}
    # a constant bias is an error an interval centred on the prediction must cover
    biased = estimate([Residual("g", str(i), 0.05) for i in range(5)], "m", "s")
    assert biased.sigma_log["g"] == pytest.approx(0.05)


def test_the_sigma_a_point_is_judged_with_never_includes_its_own_residual() -> None:
    sigma, n = held_out_sigma(RESIDUALS, "ps/emulated", "c")
    assert n == 3 and sigma == pytest.approx(math.sqrt(0.02 / 3))  # a, b, d only
    wilder = [r if r.block != "c" else Residual(r.group, "c", 5.0) for r in RESIDUALS]
    assert held_out_sigma(wilder, "ps/emulated", "c") == (sigma, 3)
    assert held_out_sigma(wilder, "ps/emulated", "a")[0] > 2  # the others' do see it
    # a whole block (a campaign of several points) is left out together
    campaign = [Residual("g", "one", 1.0), Residual("g", "one", 1.0), *RESIDUALS[:3]]
    assert held_out_sigma(campaign, "g", "one") == (None, 0)
    assert held_out_sigma(RESIDUALS, "allreduce/real", "y") == (None, 1)


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
        {"campaign": c, "published": p, "predicted": 1.0, "model_error_group": "allreduce/real"}
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
    me = from_validation(_validation(tmp_path))
    expected = math.sqrt((math.log(0.9) ** 2 + math.log(1.1) ** 2) / 3)
    assert me.sigma_log == pytest.approx({"ps/emulated": expected, "allreduce/real": expected})
    assert "v.json" in me.source and "leave-one-shape-out" in me.method


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
    assert main([*argv, "--force", "--model-error-from", str(tmp_path / "nope.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
