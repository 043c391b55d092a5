"""From run records to a profile: load, fit, and record what the fit rests on."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from calibration.fit import PARAMETERS, FitResult, fit
from calibration.runs import RunSet, load_runs
from simscale.profile import PROFILE_SCHEMA_VERSION, FitInfo, Profile


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
            linear_parameters=tuple(n for n in result.values if not PARAMETERS[n].log_scale),
            train_mape=result.mape,
            method="scipy.optimize.least_squares (trf) on log(predicted/measured) per "
            "configuration, repeats averaged",
        ),
        description=f"fitted on {len(result.shapes)} configurations from "
        f"{', '.join(str(p) for p in paths)}",
    )
    return profile, runset, result
