"""The simulator's own error, estimated from held-out residuals (simscale/spec/model_error.py).

A residual is log(measured / predicted) of a prediction whose point took no part in making the
profile that predicted it (a leave-one-shape-out or leave-one-campaign-out fold, or a profile
made with no training run at all: a probe's), with the values the prediction took under its
drawn inputs where they were kept. Its conformity score at a level is how far the measured value
lay outside the central ``level`` band of the point and those draws, in log space (negative
inside); with no draws the band is the point and the score is |log residual|. Per group and
level, a profile keeps the sorted scores; an interval widens its own band by their split-
conformal margin (Romano, Patterson and Candes 2019: conformalized quantile regression).

The bias is in the scores: a simulator 5% optimistic everywhere scores 5% on every point.

Judging an interval with scores that include the point judged would flatter it. So beside the
block of all residuals (what a profile keeps for new scenarios), ``held_out_model_error`` gives
the block for one point from the residuals of every other block (shape or campaign): the margin
used for a point never saw its residual.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from calibration.errors import CalibrationError
from simscale.spec.model_error import CONFORMAL_LEVELS, MIN_RESIDUALS, ModelError, level_key
from simscale.whatif.uncertainty import (
    band_with_model_error,
    conformity_score,
    model_error_term,
    ranges_band,
)


@dataclass(frozen=True)
class Residual:
    """One held-out prediction's log(measured / predicted), its model-error group, the block
    it was held out with (a shape, a campaign), and its drawn values over its point (empty
    where none were kept: the band is then the point alone)."""

    group: str
    block: str
    log_error: float
    draw_ratios: tuple[float, ...] = ()

    def score(self, level: float) -> float:
        """How far the measured value lay outside the ``level`` band, in log space."""
        low, high = ranges_band([1.0, *self.draw_ratios], level)
        return conformity_score(math.exp(self.log_error), low, high)


def scores_of(residuals: Sequence[Residual]) -> dict[str, tuple[float, ...]]:
    """The sorted scores of ``residuals`` at every kept level."""
    return {
        level_key(level): tuple(sorted(round(r.score(level), 4) for r in residuals))
        for level in CONFORMAL_LEVELS
    }


def estimate(residuals: Sequence[Residual], method: str, source: str) -> ModelError:
    """The scores per group and level over all ``residuals`` (groups with fewer than
    MIN_RESIDUALS left out)."""
    by_group: dict[str, list[Residual]] = {}
    for r in residuals:
        by_group.setdefault(r.group, []).append(r)
    kept = {g: v for g, v in sorted(by_group.items()) if len(v) >= MIN_RESIDUALS}
    draws = {len(r.draw_ratios) for v in kept.values() for r in v}
    return ModelError(
        residuals={g: len(v) for g, v in kept.items()},
        method=method,
        source=source,
        scores={g: scores_of(v) for g, v in kept.items()},
        band_draws=min(draws) if draws else 0,
    )


def held_out_model_error(residuals: Sequence[Residual], block: str) -> ModelError:
    """The model error a point of ``block`` is judged with: every group's scores from the
    residuals of every OTHER block."""
    return estimate(
        [r for r in residuals if r.block != block],
        f"held out: every block but {block}",
        "the other blocks' residuals",
    )


def held_out_margin(
    residuals: Sequence[Residual], group: str, block: str, level: float
) -> tuple[float | None, int]:
    """The conformal margin for a point of ``block`` in ``group`` at ``level`` from the
    group's residuals of every other block, and how many there were (None with fewer than
    MIN_RESIDUALS, or too few for the level)."""
    me = held_out_model_error([r for r in residuals if r.group == group], block)
    return me.margin(group, level), me.residuals.get(group, 0)


def residuals_from_validation(path: str | Path) -> tuple[list[Residual], str]:
    """The held-out residuals of a ``simscale validate --json`` output (run records'
    cross-validation, or ``--published``), and the validation's method."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CalibrationError(
            f"{p}: cannot read a `simscale validate --json` output ({e})"
        ) from None
    if isinstance(data, dict) and isinstance(data.get("result"), dict):
        data = data["result"]  # a measurement file of docs/data (scripts/gen_docs.py)
    out: list[Residual] = []
    methods = []
    cv = data.get("cross_validation") if isinstance(data, dict) else None
    if cv:
        methods.append(cv.get("method", "cross-validation"))
        for q in cv.get("predictions", []):
            group = q.get("groups", {}).get("model_error")
            if group is None:
                raise CalibrationError(
                    f"{p}: cross_validation.predictions has no groups.model_error "
                    "(written by an older simscale: run `simscale validate --json` again)"
                )
            out.append(_residual(group, q["shape"], q["measured"], q["predicted"], ()))
    published = data.get("published") if isinstance(data, dict) else None
    if published:
        methods.append(data.get("published_summary", {}).get("method", "published"))
        for q in published:
            group = q.get("model_error_group")
            if group is None:
                raise CalibrationError(
                    f"{p}: published[] has no model_error_group "
                    "(written by an older simscale: run `simscale validate --published --json` "
                    "again)"
                )
            out.append(
                _residual(group, q["campaign"], q["published"], q["predicted"], q.get("draws", ()))
            )
    if not out:
        raise CalibrationError(
            f"{p}: no held-out predictions (expected the output of `simscale validate --json`)"
        )
    return out, "; ".join(methods)


def _residual(
    group: str, block: str, measured: float, predicted: float, draws: Sequence[float]
) -> Residual:
    ratios = tuple(float(v) / predicted for v in draws)
    return Residual(group, block, math.log(measured / predicted), ratios)


def from_validation(path: str | Path) -> ModelError:
    """A profile's model-error block from a ``simscale validate --json`` output file."""
    residuals, method = residuals_from_validation(path)
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    draws = any(r.draw_ratios for r in residuals)
    return estimate(
        residuals,
        "split-conformal scores of held-out log(measured / predicted) per group and level, "
        + ("against the band of the point and its drawn inputs" if draws else "|log residual|")
        + f" ({method})",
        f"`simscale validate --json` output {path} (sha256 {digest}...)",
    )


def rescore(path: str | Path, levels: Sequence[float] = (0.9, 0.5)) -> dict[str, dict[str, float]]:
    """Held-out interval coverage and median relative width per system, re-derived from a
    ``simscale validate --published --json`` output with no simulation: each point's band is
    its point and kept draws, widened by the conformal margin of the OTHER campaigns' scores
    (as validate does). What iterating the method on a saved report needs."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    rows = (data.get("result", data) or {}).get("published") or []
    rows = [q for q in rows if q.get("draws")]
    if not rows:
        raise CalibrationError(
            f"{path}: no published points with draws (written by an older simscale, or with "
            "--interval-draws 0: run `simscale validate --published --json` again)"
        )
    residuals = [
        _residual(q["model_error_group"], q["campaign"], q["published"], q["predicted"], q["draws"])
        for q in rows
    ]
    held = {c: held_out_model_error(residuals, c) for c in {q["campaign"] for q in rows}}
    covered: dict[str, dict[str, list[bool]]] = {}
    widths: dict[str, dict[str, list[float]]] = {}
    for q, r in zip(rows, residuals, strict=True):
        values = [q["predicted"], *q["draws"]]
        for level in levels:
            term = model_error_term(r.group, held[q["campaign"]], level)
            low, high = band_with_model_error(values, level, term)
            key = level_key(level)
            covered.setdefault(q["system"], {}).setdefault(key, []).append(
                low <= q["published"] <= high
            )
            widths.setdefault(q["system"], {}).setdefault(key, []).append(
                (high - low) / q["predicted"]
            )
    out: dict[str, dict[str, float]] = {}
    for system in sorted(covered):
        summary: dict[str, float] = {"points": len(next(iter(covered[system].values())))}
        for key, inside in covered[system].items():
            summary[f"covered_{key}"] = statistics.mean(inside)
            summary[f"median_relative_width_{key}"] = statistics.median(widths[system][key])
        out[system] = summary
    return out
