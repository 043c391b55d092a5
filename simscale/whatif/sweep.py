"""A sweep: one prediction per point of a grid, as flat rows.

Each point is the base scenario's YAML with the point's fields set, validated like any scenario
file; a point that fails validation becomes a row with ``status: invalid`` and the validation
message, and the sweep goes on. Rows come back in point order whatever the executor.

Resuming: with a checkpoint file every finished row is appended to it as it arrives (one JSON
line each, after a header naming the sweep). Run the same sweep again and the rows already
there are kept and only the rest are simulated; a checkpoint of a different sweep is refused
rather than mixed in.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simscale.spec.config import ConfigError, apply_overrides, read_yaml
from simscale.spec.costs import CostModel
from simscale.spec.profile import Profile
from simscale.spec.scenario import Scenario, scenario_from_dict
from simscale.whatif.errors import WhatIfError
from simscale.whatif.executors import run_tasks
from simscale.whatif.grid import Grid
from simscale.whatif.rows import METRIC_COLUMNS, failed_row, result_row

CHECKPOINT_VERSION = 1


@dataclass(frozen=True)
class Task:
    """Everything one point needs, picklable, so any executor can run it."""

    index: int
    base: dict[str, Any]
    source: str
    overrides: tuple[tuple[str, Any], ...]
    point: dict[str, Any]
    profile: Profile | None = None
    force_profile: bool = False


def point_scenario(
    base: dict[str, Any], source: str, overrides: Sequence[tuple[str, Any]]
) -> Scenario:
    """The base YAML with ``overrides`` set, validated (ConfigError naming the field)."""
    from simscale.spec.scenario import _with_name

    data = copy.deepcopy(base)
    texts = [f"{path}={json.dumps(value)}" for path, value in overrides]
    try:
        data = apply_overrides(data, texts)
    except ConfigError as e:
        raise e.in_file(source) from None
    s = scenario_from_dict(data, source)
    return s if s.name else _with_name(s, Path(source).stem)


def costs_for(s: Scenario, profile: Profile | None, force: bool) -> CostModel:
    """The named profile's costs where it applies (or forced), else what ``simscale predict``
    uses with no profile: the real-hardware profile for real accelerators, plain defaults
    otherwise."""
    from simscale.spec.profile import default_costs

    return profile.costs_for(s, force=force) if profile is not None else default_costs(s)[0]


def evaluate(task: Task) -> dict[str, Any]:
    """One row: the point's columns, then the prediction's (or the reason there is none)."""
    from simscale.simulator import simulate

    head = {"point": task.index, **task.point}
    try:
        s = point_scenario(task.base, task.source, task.overrides)
    except ConfigError as e:
        # The file name is the same on every row; the field and the problem are the news.
        return {**head, **failed_row("invalid", ConfigError(e.path, e.problem).message)}
    try:
        costs = costs_for(s, task.profile, task.force_profile)
        result = simulate(s, costs)
    except ConfigError as e:
        return {**head, **failed_row("invalid", e.message)}
    except (ValueError, ArithmeticError, RuntimeError) as e:
        return {**head, **failed_row("error", f"{type(e).__name__}: {e}")}
    return {**head, **result_row(s, result, costs)}


@dataclass
class SweepOutcome:
    rows: list[dict[str, Any]]
    columns: list[str]
    evaluated: int = 0
    resumed: int = 0
    checkpoint: Path | None = None
    failed: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.failed = sum(1 for r in self.rows if r["status"] != "ok")


def load_base(scenario: str | Path | dict[str, Any] | Scenario) -> tuple[dict[str, Any], str]:
    """The base scenario as plain YAML data, and a name for messages: from a file, a mapping
    or a Scenario."""
    if isinstance(scenario, Scenario):
        return scenario.to_dict(), scenario.name or "scenario"
    if isinstance(scenario, dict):
        return copy.deepcopy(scenario), str(scenario.get("name") or "scenario")
    data = read_yaml(scenario)
    if not isinstance(data, dict):
        raise ConfigError(
            "", "expected a YAML mapping with sections cluster, model, training", str(scenario)
        )
    return data, str(scenario)


def run_sweep(
    scenario: str | Path | dict[str, Any] | Scenario,
    grid: Grid,
    *,
    overrides: Sequence[str] = (),
    profile: Profile | None = None,
    force_profile: bool = False,
    executor: str = "local",
    jobs: int | None = None,
    checkpoint: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    eta: Callable[[float | None], None] | None = None,
) -> SweepOutcome:
    """Predict every point of ``grid`` on ``scenario`` (with ``--set`` style ``overrides``
    applied first); rows in point order. ``progress(done, total)`` and ``eta(seconds_left)``
    (None until a point has finished; see ``Eta``) are called as rows arrive."""
    base, source = load_base(scenario)
    try:
        base = apply_overrides(base, list(overrides))
    except ConfigError as e:
        raise e.in_file(source) from None
    points = grid.points()
    _check_indices(base, grid, points, source)
    tasks = [
        Task(i, base, source, tuple(grid.overrides(p)), p, profile, force_profile)
        for i, p in enumerate(points)
    ]
    columns = ["point", *grid.columns, *METRIC_COLUMNS]
    key = _fingerprint(base, tasks, profile, force_profile)
    done: dict[int, dict[str, Any]] = {}
    if checkpoint is not None:
        done = _read_checkpoint(checkpoint, key, len(tasks))
    resumed = len(done)
    todo = [t for t in tasks if t.index not in done]
    if progress is not None:
        progress(resumed, len(tasks))
    clock = Eta(point_weights(todo)) if eta is not None else None
    sink = _open_checkpoint(checkpoint, key, fresh=not done) if checkpoint is not None else None
    try:
        for row in run_tasks(executor, evaluate, todo, jobs):
            done[row["point"]] = row
            if sink is not None:
                sink.write(json.dumps(row, allow_nan=False) + "\n")
                sink.flush()
            if progress is not None:
                progress(len(done), len(tasks))
            if clock is not None and eta is not None:
                clock.finished(row["point"])
                eta(clock.seconds_left())
    finally:
        if sink is not None:
            sink.close()
    rows = [done[i] for i in range(len(tasks))]
    return SweepOutcome(rows, columns, len(todo), resumed, checkpoint)


# Above this many points their costs are not estimated one by one (it would delay the start):
# every point then weighs the same and the ETA is the plain rate's.
MAX_WEIGHED_POINTS = 2_000
# What every point costs besides its simulation (validating, building, a row), in the budget's
# seconds: an invalid point costs only this, and a first point that was invalid or tiny does
# not make the cost of the rest look infinite.
POINT_OVERHEAD_S = 0.05


def point_weights(tasks: Sequence[Task]) -> dict[int, float]:
    """Each point's estimated simulation seconds (simscale.report.budget, on the path it will
    take): not a prediction of its run time, but in proportion to it across a grid, where
    points run from a few hosts to thousands."""
    from simscale.report.budget import estimate

    if len(tasks) > MAX_WEIGHED_POINTS:
        return {t.index: 1.0 for t in tasks}
    weights = {}
    for t in tasks:
        try:
            s = point_scenario(t.base, t.source, t.overrides)
            work = estimate(s, costs_for(s, t.profile, t.force_profile))
            weights[t.index] = POINT_OVERHEAD_S + work.seconds
        except (ConfigError, ValueError, ArithmeticError):
            weights[t.index] = POINT_OVERHEAD_S
    return weights


class Eta:
    """Seconds left in a sweep: the finished points' wall time per unit of estimated cost,
    times the estimated cost of the points left. A sweep's points usually grow along the grid
    (more hosts, more keys), so the plain rate of the first, small points promised minutes for
    what took a quarter of an hour; weighing each point by its estimated cost, and updating
    the ratio as points finish, reflects the slow points from the first row on."""

    def __init__(self, weights: dict[int, float], clock: Callable[[], float] | None = None):
        import time

        self._clock = clock or time.monotonic
        self._started = self._clock()
        self._left = dict(weights)
        self._done_weight = 0.0

    def finished(self, index: int) -> None:
        self._done_weight += self._left.pop(index, 0.0)

    def seconds_left(self) -> float | None:
        """None until some estimated cost has finished; 0 when nothing is left."""
        if not self._left:
            return 0.0
        if self._done_weight <= 0:
            return None
        per_weight = (self._clock() - self._started) / self._done_weight
        return per_weight * sum(self._left.values())


def _check_indices(
    base: dict[str, Any], grid: Grid, points: list[dict[str, Any]], src: str
) -> None:
    """A list index beyond the base scenario's list (hosts[3] of one group) is a mistake in
    the sweep, not an invalid point: say so once."""
    if not points:
        return
    texts = [f"{p}={json.dumps(v)}" for p, v in grid.overrides(points[0])]
    try:
        apply_overrides(copy.deepcopy(base), texts)
    except ConfigError as e:
        if e.path == "--set":
            raise WhatIfError(f"{src}: {e.problem.replace('--set ', '')}") from None


def _fingerprint(
    base: dict[str, Any], tasks: list[Task], profile: Profile | None, force: bool
) -> str:
    spec = {
        "base": base,
        "points": [[t.index, list(t.overrides), t.point] for t in tasks],
        "profile": profile.to_yaml() if profile is not None else None,
        "force_profile": force,
    }
    text = json.dumps(spec, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _read_checkpoint(path: Path, key: str, n: int) -> dict[int, dict[str, Any]]:
    if not path.exists():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines:
        return {}
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError:
        header = {}
    if header.get("sweep") != key:
        raise WhatIfError(
            f"{path}: a checkpoint of a different sweep (other scenario, points or profile); "
            "delete it or pass --fresh to start over"
        )
    rows: dict[int, dict[str, Any]] = {}
    for line in lines[1:]:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by the interruption: that point runs again
        if isinstance(row, dict) and isinstance(row.get("point"), int) and row["point"] < n:
            rows[row["point"]] = row
    return rows


def _open_checkpoint(path: Path, key: str, fresh: bool) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    if fresh:
        f = path.open("w", encoding="utf-8")
        f.write(json.dumps({"sweep": key, "version": CHECKPOINT_VERSION}) + "\n")
        f.flush()
        return f
    return path.open("a", encoding="utf-8")


def checkpoint_path(output: Path) -> Path:
    """Where the rows of a sweep writing ``output`` accumulate until it completes."""
    return output.with_name(f"{output.name}.partial.jsonl")
