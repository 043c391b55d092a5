"""A campaign: many runs (scenarios x override grids x repeats), one record each, resumable.

A campaign file is YAML::

    name: emulated-v2
    repeats: 3                       # each configuration this many times
    set: [realrun.compute=emulated]  # overrides for every run
    runs:
      - scenario: scenarios/emulated/mlp-colocated.yaml
        label: mlp-colo              # optional; default: the scenario's name
        set: [kvstore.servers=2]     # overrides of this entry
        grid:                        # optional: every combination becomes a configuration
          cluster.hosts[0].nic_gbps: [0.05, 0.2]

Scenario paths are relative to the current directory, else to the campaign file. Each run's
record is ``DIR/<label>[__<grid values>]__r<repeat>.json``. A complete, valid record already
there is skipped, so a stopped campaign resumes where it was; a failed run keeps its partial
record and the campaign goes on; a run this machine could not carry (``valid: false``, e.g.
another program took the CPUs) is retried after waiting for the machine to be quiet.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from realrun.emulated.machine_load import read_cpu_ticks
from realrun.records.record import RecordError, load_record
from realrun.run import LaunchOptions, run_scenario
from simscale.spec.config import ConfigError, read_yaml

INVALID_RETRIES = 1  # a run marked invalid is tried this many more times
QUIET_BUSY = 0.30  # before a run, wait until this machine's CPUs are at most this busy...
QUIET_WAIT_LIMIT_S = 5.0  # ...but no longer than this (then run anyway; the verdict judges)
QUIET_PROBE_S = 1.0


class CampaignError(ValueError):
    """A campaign file that cannot be run; the message names the file and the entry."""


@dataclass(frozen=True)
class PlannedRun:
    """One run of a campaign: its scenario, overrides and the record file it writes."""

    name: str  # record file stem
    scenario: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class Campaign:
    name: str
    runs: tuple[PlannedRun, ...]
    source: str


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.,=+-]+", "_", text).strip("_")


def _short(key: str, keys: list[str]) -> str:
    """A grid key in a file name: its last component unless two keys share it."""
    last = re.split(r"[.\]\[]+", key.strip("]"))[-1]
    clash = sum(1 for k in keys if re.split(r"[.\]\[]+", k.strip("]"))[-1] == last) > 1
    return key if clash else last


def load_campaign(path: str | Path, repeats: int | None = None) -> Campaign:
    """Read and expand a campaign file into its planned runs (CampaignError when malformed)."""
    path = Path(path)
    try:
        data = read_yaml(path)
    except ConfigError as e:
        raise CampaignError(f"cannot read the campaign: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list) or not data["runs"]:
        raise CampaignError(f"{path}: expected a mapping with a non-empty list 'runs'")
    n = repeats if repeats is not None else data.get("repeats", 1)
    if not isinstance(n, int) or n < 1:
        raise CampaignError(f"{path}: repeats: got {n!r}, expected an integer >= 1")
    common = _overrides(data.get("set", []), f"{path}: set")
    planned: list[PlannedRun] = []
    for i, entry in enumerate(data["runs"]):
        where = f"{path}: runs[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("scenario"), str):
            raise CampaignError(f"{where}: expected a mapping with 'scenario: PATH'")
        scenario = _scenario_path(entry["scenario"], path, where)
        label = entry.get("label") or _scenario_name(scenario)
        fixed = _overrides(entry.get("set", []), f"{where}.set")
        grid = entry.get("grid") or {}
        if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
            raise CampaignError(f"{where}.grid: expected a mapping of field -> non-empty list")
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            varied = [f"{k}={_yaml_value(v)}" for k, v in zip(keys, values, strict=True)]
            tag = ",".join(
                f"{_short(k, keys)}={_yaml_value(v)}" for k, v in zip(keys, values, strict=True)
            )
            stem = _slug(f"{label}__{tag}" if tag else label)
            for r in range(1, n + 1):
                planned.append(
                    PlannedRun(f"{stem}__r{r}", str(scenario), (*common, *fixed, *varied))
                )
    names = [p.name for p in planned]
    dupes = sorted({x for x in names if names.count(x) > 1})
    if dupes:
        raise CampaignError(f"{path}: two runs would write the same record: {dupes[0]}")
    return Campaign(str(data.get("name") or path.stem), tuple(planned), str(path))


def _overrides(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and "=" in v for v in value):
        raise CampaignError(f"{where}: expected a list of 'path=value' strings")
    return tuple(value)


def _yaml_value(v: Any) -> str:
    return json.dumps(v) if isinstance(v, bool | type(None)) else str(v)


def _scenario_path(text: str, campaign: Path, where: str) -> Path:
    for candidate in (Path(text), campaign.parent / text):
        if candidate.is_file():
            return candidate
    raise CampaignError(f"{where}.scenario: no file {text!r}")


def _scenario_name(path: Path) -> str:
    from simscale.spec.scenario import load_scenario

    return load_scenario(str(path)).name or path.stem


def done_already(path: Path) -> bool:
    """A record there is complete and valid: the run need not be repeated."""
    if not path.is_file():
        return False
    try:
        record = load_record(path)
    except RecordError:
        return False
    return record.complete and record.valid


def wait_for_quiet(limit_s: float = QUIET_WAIT_LIMIT_S) -> float:
    """Wait until this machine's CPUs are quiet (another program may be running); return the
    busy share last seen."""
    deadline = time.monotonic() + limit_s
    while True:
        b0, t0 = read_cpu_ticks()
        time.sleep(QUIET_PROBE_S)
        b1, t1 = read_cpu_ticks()
        busy = (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0
        if busy <= QUIET_BUSY or time.monotonic() > deadline:
            return busy


class CampaignProgress:
    """``[#####.....] 12/45 runs  3 skipped  1 failed  4m10s elapsed  ETA 8m`` on stderr."""

    WIDTH = 24

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.monotonic()
        self.done = self.skipped = self.failed = self.invalid = 0
        self.ran = 0  # runs executed here (not skipped): the ETA is their pace

    def show(self, current: str = "") -> None:
        elapsed = time.monotonic() - self.started
        left = self.total - self.done
        eta = f"{_minutes(elapsed / self.ran * left)}" if self.ran else "?"
        filled = round(self.WIDTH * self.done / self.total) if self.total else self.WIDTH
        line = (
            f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {self.done}/{self.total} runs"
            f"  {self.skipped} skipped  {self.failed} failed  {self.invalid} invalid"
            f"  {_minutes(elapsed)} elapsed  ETA {eta}"
        )
        if current:
            line += f"  now: {current}"
        self.stream.write(line + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """One line about one run (why it failed), between the progress lines."""
        self.stream.write(f"  {text}\n")
        self.stream.flush()


def _minutes(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s"


def run_campaign(
    campaign: Campaign,
    output: str | Path | None,
    options: LaunchOptions,
    timeout_s: float = 600.0,
    stream: TextIO | None = None,
) -> int:
    """Run every planned run not yet done; 0 when all records are complete and valid."""
    out = Path(output) if output else Path("runs") / campaign.name
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "campaign-log.jsonl"
    progress = CampaignProgress(len(campaign.runs), stream)
    for planned in campaign.runs:
        target = out / f"{planned.name}.json"
        if done_already(target):
            progress.done += 1
            progress.skipped += 1
            continue
        progress.show(planned.name)
        outcome = _run_with_retries(planned, target, options, timeout_s)
        with log_path.open("a") as log:
            log.write(json.dumps(outcome) + "\n")
        progress.done += 1
        progress.ran += 1
        if outcome["status"] == "failed":
            progress.failed += 1
            progress.note(f"{planned.name} failed: {outcome.get('error') or 'no reason given'}")
        elif outcome["status"] == "invalid":
            progress.invalid += 1
            progress.note(f"{planned.name} invalid: {outcome.get('invalid_reason') or '?'}")
        if outcome["status"] == "interrupted":
            raise KeyboardInterrupt
    progress.show()
    return 0 if progress.failed == 0 and progress.invalid == 0 else 1


def _run_with_retries(
    planned: PlannedRun, target: Path, options: LaunchOptions, timeout_s: float
) -> dict[str, Any]:
    from simscale.spec.scenario import ScenarioError

    outcome: dict[str, Any] = {"run": planned.name, "scenario": planned.scenario}
    for attempt in range(1 + INVALID_RETRIES):
        outcome["background_cpu_busy"] = wait_for_quiet()
        started = time.monotonic()
        try:
            record, _ = run_scenario(
                planned.scenario,
                planned.overrides,
                options,
                target,
                progress=False,
                timeout_s=timeout_s,
            )
        except (ScenarioError, ValueError, OSError) as e:
            return {**outcome, "status": "failed", "error": str(e), "attempts": attempt + 1}
        outcome.update(attempts=attempt + 1, wall_s=time.monotonic() - started)
        if not record.complete:
            status = "interrupted" if (record.error or "").startswith("interrupted") else "failed"
            return {**outcome, "status": status, "error": record.error}
        if record.valid:
            return {**outcome, "status": "ok"}
        outcome["invalid_reason"] = record.invalid_reason
    return {**outcome, "status": "invalid"}
