"""Published measurements kept as data, so the simulator can be judged against them too.

Each YAML file in ``calibration/published/`` names its source and setup, a base scenario, and
points (a model and the published value of one metric). These are held-out checks: never fitted
to (domain.md: fit only to what you measured or read as a calibration input).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibration.errors import CalibrationError
from simscale.config import ConfigError, read_yaml
from simscale.costs import CostModel
from simscale.scenario import Scenario, scenario_from_dict
from simscale.simulator import simulate

PUBLISHED_DIR = Path(__file__).parent / "published"
METRICS = ("scaling_efficiency", "throughput_samples_per_s")


@dataclass(frozen=True)
class PublishedPoint:
    source: str
    name: str
    metric: str
    value: float
    scenario: Scenario


def load_published(paths: list[Path] | None = None) -> list[PublishedPoint]:
    """Every point of the given files (default: all shipped ones)."""
    files = paths if paths is not None else sorted(PUBLISHED_DIR.glob("*.yaml"))
    points = []
    for f in files:
        try:
            data = read_yaml(f)
        except ConfigError as e:
            raise CalibrationError(str(e)) from None
        for key in ("source", "metric", "base", "points"):
            if key not in data:
                raise CalibrationError(f"{f}: {key}: missing")
        if data["metric"] not in METRICS:
            raise CalibrationError(
                f"{f}: metric: got {data['metric']!r}, expected one of {METRICS}"
            )
        for i, p in enumerate(data["points"]):
            scenario_data: dict[str, Any] = {**data["base"], "model": p["model"], "name": p["name"]}
            try:
                scenario = scenario_from_dict(scenario_data)
            except ConfigError as e:
                raise CalibrationError(f"{f}: points[{i}]: {e}") from None
            points.append(
                PublishedPoint(
                    str(data["source"]), str(p["name"]), data["metric"], float(p["value"]), scenario
                )
            )
    return points


def compare(points: list[PublishedPoint], costs: CostModel | None = None) -> list[dict[str, Any]]:
    """The simulator's figure beside each published one."""
    rows = []
    for p in points:
        r = simulate(p.scenario, costs)
        predicted = getattr(r, p.metric)
        rows.append(
            {
                "source": p.source,
                "name": p.name,
                "metric": p.metric,
                "published": p.value,
                "predicted": predicted,
                "error": (predicted - p.value) / p.value,
            }
        )
    return rows
