"""Measured runs as calibration sees them: a validated scenario and what it really achieved.

Reads realrun's JSON run records (files, or folders searched recursively). Every problem is a
one-line ``CalibrationError`` naming the file: a record of another schema version, a scenario that
no longer validates, a folder without records. Incomplete or invalid runs are set aside, counted,
and never fitted to.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from calibration.errors import CalibrationError
from realrun.records.record import RecordError, RunRecord, load_record
from simscale.report.budget import estimate
from simscale.spec.config import ConfigError
from simscale.spec.scenario import MAX_CPU_CORES, Scenario, scenario_from_dict


@dataclass(frozen=True)
class Run:
    """One measured run: its scenario (as run, undilated) and its undilated throughput."""

    path: str
    sha256: str
    scenario: Scenario
    samples_per_s: float
    per_worker_samples_per_s: tuple[float, ...]
    dilation: float

    @property
    def shape(self) -> str:
        return shape_key(self.scenario)


@dataclass(frozen=True)
class RunSet:
    """The usable runs, and what was set aside with the reason."""

    runs: tuple[Run, ...]
    skipped: tuple[tuple[str, str], ...]  # (path, why)

    def shapes(self) -> dict[str, list[Run]]:
        """Runs grouped by cluster shape (repeats of one configuration together)."""
        groups: dict[str, list[Run]] = {}
        for r in self.runs:
            groups.setdefault(r.shape, []).append(r)
        return groups


def shape_key(s: Scenario) -> str:
    """What makes two runs the same configuration: the scenario without name, seed and run
    lengths (repeats differ only in those)."""
    d = s.to_dict()
    for k in ("name", "description"):
        d.pop(k, None)
    d.pop("simulation", None)
    return json.dumps(d, sort_keys=True)


AD_HOC_FOLDER = "local"  # realrun.run.AD_HOC_RECORDS (runs/local)


def _record_files(paths: Sequence[str | Path]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.rglob("*.json"))
            # Ad-hoc records (realrun run's default runs/local/) never join a dataset by
            # accident: a folder of that name is read only when given itself.
            dataset = [f for f in found if AD_HOC_FOLDER not in f.relative_to(p).parts[:-1]]
            if not dataset:
                hint = (
                    f" (only ad-hoc records under {AD_HOC_FOLDER}/: name that folder to use them)"
                    if found
                    else ""
                )
                raise CalibrationError(f"{p}: no run records (*.json) in this folder{hint}")
            files += dataset
        elif p.is_file():
            files.append(p)
        else:
            raise CalibrationError(f"{p}: no such file or folder")
    if not files:
        raise CalibrationError("no run records given")
    return files


def _validity(record: RunRecord) -> str | None:
    """Why a record must not be fitted to, or None when it is fine."""
    if not record.complete:
        return f"incomplete run ({record.error or 'no reason recorded'})"
    if record.summary is None or record.summary.samples_per_s <= 0:
        return "no measured throughput"
    valid = getattr(record, "valid", True)
    if valid is False:
        return f"marked invalid: {getattr(record, 'invalid_reason', '') or 'no reason given'}"
    return None


def load_runs(paths: Sequence[str | Path]) -> RunSet:
    """Load every record under ``paths``; raise CalibrationError on any malformed one."""
    runs: list[Run] = []
    skipped: list[tuple[str, str]] = []
    for f in _record_files(paths):
        try:
            record = load_record(f)
        except RecordError as e:
            raise CalibrationError(str(e)) from None
        try:
            scenario = scenario_from_dict(record.scenario)
        except ConfigError as e:
            raise CalibrationError(
                f"{f}: its scenario no longer validates: {e} (re-run it, or fix the record)"
            ) from None
        work = estimate(scenario)
        if work.too_long:
            raise CalibrationError(f"{f}: its scenario cannot be simulated: {work.explain()}")
        why = _validity(record)
        if why is not None:
            skipped.append((str(f), why))
            continue
        assert record.summary is not None
        sha = hashlib.sha256(f.read_bytes()).hexdigest()
        # The summary is in the scenario's own time: realrun divides every duration by the
        # dilation it ran under (realrun/records/record.py, Summary.time_dilation).
        runs.append(
            Run(
                path=str(f),
                sha256=sha,
                scenario=as_realrun_ran(scenario, _machine_cores(record)),
                samples_per_s=record.summary.samples_per_s,
                per_worker_samples_per_s=tuple(record.summary.samples_per_s_per_worker),
                dilation=getattr(record.summary, "time_dilation", scenario.realrun.dilation),
            )
        )
    if not runs:
        reasons = "; ".join(f"{p}: {why}" for p, why in skipped[:3])
        raise CalibrationError(f"no usable runs among {len(skipped)} records ({reasons})")
    return RunSet(tuple(runs), tuple(skipped))


# How realrun moves keys, which the simulator must model to be judged against it: the
# scenario's own kvstore.scheduling and kvstore.pull_request, which realrun honours;
# load_record gives records made before it did the ones they really ran
# (realrun/records/record.py: priority with a window, with_push). With "priority", a
# send_window_mb of 0 is realrun's DEFAULT_WINDOW_BYTES (256 KiB) in flight per server
# (realrun/ps/postoffice.py; tests/calibration/test_calibration.py checks it).
REALRUN_SEND_WINDOW_MB = 0.25


def _machine_cores(record: RunRecord) -> int | None:
    """Cores of the one machine every process of the run shared, when the record says."""
    load = record.environment.get("machine_load")
    cores = load.get("cores") if isinstance(load, dict) else record.environment.get("cpu_count")
    plausible = isinstance(cores, int | float) and 1 <= cores <= MAX_CPU_CORES
    return int(cores) if plausible else None


# Iterations the simulator averages when it predicts a run. A run measures a handful; the
# simulator estimates the steady state, and with unequal TCP shares (tcp_share_sigma) each
# simulated iteration differs, so a few iterations give a jagged response a fit cannot follow:
# 4 iterations moved a co-located shape by up to 20% between sigma 0.25 and 0.3, 40 by 4%.
PREDICTED_ITERATIONS = 20


def as_realrun_ran(s: Scenario, machine_cores: int | None = None) -> Scenario:
    """The scenario as realrun really ran it, at real speed: its send scheduling, every
    process on the cores of one machine (an emulated or local cluster), and no dilation
    (dilation is how it was run, not what it describes); simulated over at least
    ``PREDICTED_ITERATIONS`` iterations."""
    kv = s.kvstore
    if kv.scheduling == "priority" and kv.send_window_mb == 0:
        kv = replace(kv, send_window_mb=REALRUN_SEND_WINDOW_MB)  # realrun's 0: its own default
    cluster = replace(s.cluster, shared_cpu_cores=machine_cores)
    sim = replace(
        s.simulation,
        measured_iterations=max(s.simulation.measured_iterations, PREDICTED_ITERATIONS),
    )
    return replace(
        s, cluster=cluster, kvstore=kv, simulation=sim, realrun=replace(s.realrun, dilation=1.0)
    )


def mean_by_shape(runs: Iterable[Run]) -> dict[str, tuple[Scenario, float, float, int]]:
    """Per shape: (scenario, mean samples/s, standard deviation, repeats)."""
    groups: dict[str, list[Run]] = {}
    for r in runs:
        groups.setdefault(r.shape, []).append(r)
    out = {}
    for key, rs in groups.items():
        xs = [r.samples_per_s for r in rs]
        mean = sum(xs) / len(xs)
        std = (sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 if len(xs) > 1 else 0.0
        out[key] = (rs[0].scenario, mean, std, len(xs))
    return out
