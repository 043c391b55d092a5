"""The simulator's own error, estimated from held-out residuals (simscale/spec/model_error.py).

A residual is log(measured / predicted) of a prediction whose point took no part in making the
profile that predicted it (a leave-one-shape-out or leave-one-campaign-out fold, or a profile
made with no training run at all: a probe's). Per group, sigma is the root mean square of the
residuals, the bias included: an interval is centred on the prediction, so a simulator that is
5% optimistic everywhere needs that 5% in its width as much as a scatter of 5%.

Judging an interval with a sigma estimated on the point judged would flatter it. So beside the
sigma of all residuals (what a profile keeps for new scenarios), ``held_out_sigma`` gives the
sigma for one point from the residuals of every other block (shape or campaign): the sigma used
for a point never saw its residual.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from calibration.errors import CalibrationError
from simscale.spec.model_error import MIN_RESIDUALS, ModelError


@dataclass(frozen=True)
class Residual:
    """One held-out prediction's log(measured / predicted), its model-error group, and the
    block it was held out with (a shape, a campaign)."""

    group: str
    block: str
    log_error: float


def rms(values: Sequence[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values))


def held_out_sigma(
    residuals: Sequence[Residual], group: str, block: str
) -> tuple[float | None, int]:
    """The sigma for a point of ``block`` in ``group`` from the group's residuals of every other
    block, and how many there were (None with fewer than MIN_RESIDUALS)."""
    others = [r.log_error for r in residuals if r.group == group and r.block != block]
    return (rms(others) if len(others) >= MIN_RESIDUALS else None), len(others)


def estimate(residuals: Sequence[Residual], method: str, source: str) -> ModelError:
    """Sigma per group over all ``residuals`` (groups with fewer than MIN_RESIDUALS left out)."""
    by_group: dict[str, list[float]] = {}
    for r in residuals:
        by_group.setdefault(r.group, []).append(r.log_error)
    kept = {g: v for g, v in sorted(by_group.items()) if len(v) >= MIN_RESIDUALS}
    return ModelError(
        sigma_log={g: rms(v) for g, v in kept.items()},
        residuals={g: len(v) for g, v in kept.items()},
        method=method,
        source=source,
    )


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
            out.append(Residual(group, q["shape"], math.log(q["measured"] / q["predicted"])))
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
            out.append(Residual(group, q["campaign"], math.log(q["published"] / q["predicted"])))
    if not out:
        raise CalibrationError(
            f"{p}: no held-out predictions (expected the output of `simscale validate --json`)"
        )
    return out, "; ".join(methods)


def from_validation(path: str | Path) -> ModelError:
    """A profile's model-error block from a ``simscale validate --json`` output file."""
    residuals, method = residuals_from_validation(path)
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    return estimate(
        residuals,
        f"root mean square of held-out log(measured / predicted) per group ({method})",
        f"`simscale validate --json` output {Path(path).name} (sha256 {digest}...)",
    )
