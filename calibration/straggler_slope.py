"""Could the other transformer campaigns teach a spread of GPU speeds to the fold without one?

NVIDIA's BERT table loses 1.4-2.0% of every micro-batch against its own single GPU, and the
shape of the simulator's stragglers (every micro-batch waits for the slowest of N GPUs, a
lasting spread sigma) fits it with sigma 0.9-1.1% (``python -m calibration.step_loss``). A
fitted sigma would have to reach the fold that holds NVIDIA out from the other campaigns
alone. They have no single-GPU baseline: their points are whole-job throughputs, so sigma could
only show in how their error moves with the GPU count N.

This reads the held-out predictions of ``simscale validate --published --transformers --json``
and, over the expressible points of every other campaign that a fold fits to (at most
``FIT_MAX_GPUS`` GPUs), regresses log(predicted / published) on one offset per campaign and
fitted fraction (the fraction a fold would refit) and on E[max of N normals]. If the published
jobs waited for a slowest GPU with spread sigma that the simulation leaves out, the prediction
is too fast by 1 + sigma E[max of N], so the slope estimates sigma (to first order, as if their
compute were all exposed); its standard error says whether those points could pin it.

``python -m calibration.straggler_slope VALIDATE.json`` prints the slope;
docs/transformer-judgement.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibration.published import PublishedPoint, load_transformers
from calibration.published_transformers import FIT_MAX_GPUS, mechanism
from simscale.model.stragglers import expected_max_of_normals

HELD_OUT = "nvidia-dle-bert"


def _offset(p: PublishedPoint) -> str:
    """The offset a point shares: its campaign and the fraction of peak a fold fits for it."""
    return f"{p.campaign} {mechanism(p.gpu, p.scenario.training.compute_precision)}"


@dataclass(frozen=True)
class Slope:
    sigma: float  # the slope of log(predicted / published) on E[max of N normals]
    error: float  # its standard error, from the residuals' scatter
    points: int
    groups: tuple[str, ...]  # "campaign fraction": one offset each
    gpu_counts: tuple[int, ...]


def slope(
    rows: Sequence[Mapping[str, object]],
    points: Mapping[str, PublishedPoint],
    *,
    held_out: str = HELD_OUT,
    max_gpus: int = FIT_MAX_GPUS,
) -> Slope:
    """The slope over ``rows`` (the ``published`` list of the validate JSON) of the expressible
    points outside ``held_out`` on at most ``max_gpus`` GPUs."""
    chosen = [
        (r, points[str(r["name"])])
        for r in rows
        if r["campaign"] != held_out
        and not r["unmodelled"]
        and points[str(r["name"])].gpus <= max_gpus
    ]
    groups = sorted({_offset(p) for _, p in chosen})
    if len(chosen) <= len(groups) + 1:
        raise ValueError(f"{len(chosen)} points cannot fit {len(groups)} offsets and a slope")
    x = np.array(
        [
            [float(_offset(p) == g) for g in groups] + [expected_max_of_normals(p.gpus)]
            for _, p in chosen
        ]
    )
    y = np.array([math.log(float(r["predicted"]) / float(r["published"])) for r, _ in chosen])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    scatter = float(resid @ resid) / (len(y) - x.shape[1])
    cov = scatter * np.linalg.pinv(x.T @ x)
    return Slope(
        float(coef[-1]),
        math.sqrt(float(cov[-1, -1])),
        len(y),
        tuple(groups),
        tuple(sorted({p.gpus for _, p in chosen})),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "validate_json",
        type=Path,
        help="simscale validate --published --transformers --json output",
    )
    ap.add_argument(
        "--held-out", default=HELD_OUT, help="the campaign to teach (default: %(default)s)"
    )
    args = ap.parse_args()
    rows = json.loads(args.validate_json.read_text())["published"]
    points = {p.name: p for p in load_transformers()}
    for max_gpus in (FIT_MAX_GPUS, max(p.gpus for p in points.values())):
        s = slope(rows, points, held_out=args.held_out, max_gpus=max_gpus)
        print(
            f"points on at most {max_gpus} GPUs outside {args.held_out}: {s.points} "
            f"(GPUs {', '.join(map(str, s.gpu_counts))}; {len(s.groups)} offsets): "
            f"sigma {s.sigma:+.2%} ± {s.error:.2%}"
        )


if __name__ == "__main__":
    main()
