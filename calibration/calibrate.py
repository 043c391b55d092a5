"""From run records to a profile: load, fit, and record what the fit rests on."""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from calibration.fit import PARAMETERS, FitResult, fit
from calibration.published import load_published, load_transformers
from calibration.published_fit import COMM_FIT, PublishedFit, fit_published, judge
from calibration.published_transformers import (
    FIT_MAX_GPUS,
    GENERATION,
    TransformerFit,
    fit_fractions,
)
from calibration.runs import RunSet, load_runs
from simscale.spec.hardware import GPUS
from simscale.spec.profile import PROFILE_SCHEMA_VERSION, FitInfo, Profile


def calibrate(
    paths: Sequence[str | Path],
    names: Sequence[str],
    scope: str | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[Profile, RunSet, FitResult]:
    """Fit ``names`` to the runs under ``paths``; the profile applies to the runs' worker
    devices unless ``scope`` (comma-separated GPU names, or 'all') says otherwise."""
    runset = load_runs(paths)
    result = fit(list(runset.runs), names, progress=progress)
    if scope is None:
        devices = sorted({g.resolved()[1] for r in runset.runs for g in r.scenario.cluster.hosts})
    elif scope.strip().lower() == "all":
        devices = []
    else:
        devices = [d.strip() for d in scope.split(",") if d.strip()]
    modes = {r.scenario.realrun.compute for r in runset.runs}
    profile = Profile(
        schema_version=PROFILE_SCHEMA_VERSION,
        costs=result.costs,
        scope=tuple(devices),
        compute=modes.pop() if len(modes) == 1 and scope is None else "",
        fit=FitInfo(
            date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            records=tuple(sorted(r.sha256 for r in runset.runs)),
            parameters=tuple(result.values),
            # Parameters the data cannot pin down have no finite sigma and are left out.
            uncertainty={k: v for k, v in result.sigma_rel.items() if math.isfinite(v)},
            covariance=result.covariance,
            unidentified=dict(result.unidentified),
            linear_parameters=tuple(n for n in result.values if not PARAMETERS[n].log_scale),
            train_mape=result.mape,
            method="scipy.optimize.least_squares (trf) on log(predicted/measured) per "
            "configuration, repeats averaged",
        ),
        description=f"fitted on {len(result.shapes)} configurations from "
        f"{', '.join(str(p) for p in paths)}",
    )
    return profile, runset, result


def calibrate_published(
    comm_names: Sequence[str] | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> tuple[Profile, PublishedFit]:
    """Fit the real-hardware profile on every published point (calibration/published): it
    applies to real accelerators running real compute, the world the points come from."""
    points = load_published()
    fitted = fit_published(
        points, COMM_FIT if comm_names is None else comm_names, progress=progress
    )
    # In-sample error over the points the fit used (judging the costly ones too would take
    # longer than the fit; `simscale validate --published` judges every point, held out).
    used = set(fitted.fitted_points)
    judged = judge([p for p in points if p.name in used], fitted.costs)
    files = sorted({p.path for p in points})
    profile = Profile(
        schema_version=PROFILE_SCHEMA_VERSION,
        costs=fitted.costs,
        scope=tuple(g for g in GPUS if g != "cpu"),
        compute="real",
        fit=FitInfo(
            date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            records=tuple(hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in files),
            parameters=tuple(fitted.values),
            uncertainty={k: v for k, v in fitted.sigma_rel.items() if math.isfinite(v)},
            covariance=fitted.covariance,
            unidentified=dict(fitted.unidentified),
            train_mape=float(sum(j.ape for j in judged) / len(judged)),
            method="two stages of scipy.optimize.least_squares (trf) on log(predicted/published): "
            "compute on single-GPU throughput, then communication on scaling efficiency "
            "(throughput where no baseline); calibration/published_fit.py",
        ),
        description=f"real-cluster profile fitted on {len(points)} published points of the "
        f"campaigns {', '.join(sorted({p.campaign for p in points}))}; "
        f"files: {', '.join(Path(f).name for f in files)}",
    )
    return profile, fitted


def calibrate_transformers(
    progress: Callable[[str], None] | None = None,
) -> tuple[Profile, TransformerFit]:
    """Fit the fraction of tensor-core peak per GPU generation on every expressible point of the
    published transformer set (calibration/published_transformers.py) and make it a profile for
    the GPUs of the generations it fitted, real compute (``simscale predict --profile``)."""
    points = load_transformers()
    if progress is not None:
        progress("fitting the fractions of peak on every campaign")
    fitted = fit_fractions(points)
    used = [p for p in points if not p.unmodelled and p.gpus <= FIT_MAX_GPUS]
    if progress is not None:
        progress(f"judging the {len(used)} fitted points in-sample")
    judged = judge(used, fitted.costs)
    generations = {key.split("/", 1)[0] for key in fitted.fractions}
    files = sorted({p.path for p in points})
    fractions = ", ".join(f"{k} {v:.3f}" for k, v in sorted(fitted.fractions.items()))
    profile = Profile(
        schema_version=PROFILE_SCHEMA_VERSION,
        costs=fitted.costs,
        scope=tuple(g for g, gen in GENERATION.items() if gen in generations),
        compute="real",
        fit=FitInfo(
            date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            records=tuple(hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in files),
            parameters=tuple(f"compute_efficiency[{k}]" for k in sorted(fitted.fractions)),
            train_mape=float(sum(j.ape for j in judged) / len(judged)),
            method="scipy.optimize.least_squares (trf, soft-L1) on log(predicted/published), "
            "one fraction of peak per GPU generation and tensor format, the other costs at "
            f"their published starting figures, {fitted.evaluations} evaluations; "
            "calibration/published_transformers.py. Held-out error: simscale validate "
            "--published --transformers",
        ),
        description=f"transformer compute profile: fractions of peak ({fractions}) fitted on "
        f"{fitted.fitted_points} published points (<= {FIT_MAX_GPUS} GPUs) of the campaigns "
        f"{', '.join(sorted({p.campaign for p in used}))}; files: "
        f"{', '.join(Path(f).name for f in files)}",
    )
    return profile, fitted
