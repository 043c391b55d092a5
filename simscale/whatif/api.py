"""The Python API a notebook calls: ``simscale.predict``, ``simscale.sweep``, ``simscale.compare``,
``simscale.advise``, ``simscale.spec.schema``.

    import simscale
    r = simscale.predict("scenarios/64gpu.yaml", set={"kvstore.servers": 16})
    r.throughput_samples_per_s, r.to_dict()
    rows = simscale.sweep("scenarios/64gpu.yaml", vary={"kvstore.servers": [1, 2, 4, 8]})
    frame = simscale.sweep(..., as_frame=True)          # with pandas installed

Errors are the CLI's: ConfigError for a bad scenario field, WhatIfError for a bad sweep.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simscale.report.results import Result
from simscale.spec.profile import Profile
from simscale.spec.scenario import Scenario
from simscale.whatif.grid import parse_grid
from simscale.whatif.rows import METRIC_COLUMNS
from simscale.whatif.sweep import costs_for, load_base, point_scenario, run_sweep

ScenarioLike = str | Path | dict[str, Any] | Scenario
Settings = Mapping[str, Any] | Sequence[str] | None


def set_texts(settings: Settings) -> list[str]:
    """``{"kvstore.servers": 16}`` or ``["kvstore.servers=16"]`` -> ``--set`` texts."""
    if settings is None:
        return []
    if isinstance(settings, Mapping):
        return [f"{k}={json.dumps(v)}" for k, v in settings.items()]
    return [str(t) for t in settings]


def _settings_pairs(settings: Settings) -> list[tuple[str, Any]]:
    from simscale.spec.config import parse_override

    pairs = []
    for text in set_texts(settings):
        path, _, _ = text.partition("=")
        pairs.append((path.strip(), parse_override(text)[1]))
    return pairs


def load_profile_like(profile: str | Path | Profile | None) -> Profile | None:
    if profile is None or isinstance(profile, Profile):
        return profile
    from simscale.spec.profile import load_profile

    return load_profile(profile)


def scenario_of(scenario: ScenarioLike, settings: Settings = None) -> Scenario:
    """A validated Scenario from a file, a mapping or a Scenario, with ``settings`` applied."""
    base, source = load_base(scenario)
    return point_scenario(base, source, _settings_pairs(settings))


def predict(
    scenario: ScenarioLike,
    set: Settings = None,
    profile: str | Path | Profile | None = None,
    force_profile: bool = False,
) -> Result:
    """Simulate one scenario (a file, a mapping or a Scenario) with ``set`` overrides."""
    from simscale.simulator import simulate

    s = scenario_of(scenario, set)
    return simulate(s, costs_for(s, load_profile_like(profile), force_profile))


def _vary_texts(vary: Mapping[str, Any] | Sequence[str]) -> list[str]:
    if isinstance(vary, Mapping):
        out = []
        for k, v in vary.items():
            values = v if isinstance(v, str) else ",".join(json.dumps(x) for x in v)
            out.append(f"{k}={values}")
        return out
    return [str(t) for t in vary]


def _grid(vary: Any, let: Any, link: Any) -> Any:
    links = [f"{k}={v}" for k, v in link.items()] if isinstance(link, Mapping) else list(link)
    return parse_grid(_vary_texts(vary), _vary_texts(let), links)


def sweep(
    scenario: ScenarioLike,
    vary: Mapping[str, Any] | Sequence[str],
    *,
    let: Mapping[str, Any] | Sequence[str] = (),
    link: Mapping[str, str] | Sequence[str] = (),
    set: Settings = None,
    profile: str | Path | Profile | None = None,
    force_profile: bool = False,
    executor: str = "local",
    jobs: int | None = None,
    checkpoint: str | Path | None = None,
    as_frame: bool = False,
) -> Any:
    """Predict every point of the grid: a list of flat row dicts in point order, or a pandas
    DataFrame with ``as_frame=True``. ``vary`` maps field paths to value lists or range
    strings (``{"cluster.hosts[0].count": "1..8x2"}``); ``link`` maps fields to expressions."""
    outcome = run_sweep(
        scenario,
        _grid(vary, let, link),
        overrides=set_texts(set),
        profile=load_profile_like(profile),
        force_profile=force_profile,
        executor=executor,
        jobs=jobs,
        checkpoint=Path(checkpoint) if checkpoint is not None else None,
    )
    if as_frame:
        from simscale.whatif.tables import to_frame

        return to_frame(outcome.rows, outcome.columns)
    return outcome.rows


def advise(
    scenario: ScenarioLike,
    vary: Mapping[str, Any] | Sequence[str],
    *,
    target_throughput: float | None = None,
    deadline_hours: float | None = None,
    budget_usd: float | None = None,
    let: Mapping[str, Any] | Sequence[str] = (),
    link: Mapping[str, str] | Sequence[str] = (),
    set: Settings = None,
    profile: str | Path | Profile | None = None,
    executor: str = "local",
    runners_up: int = 3,
) -> Any:
    """The cheapest and fastest shapes of the grid meeting the target (an ``Advice``)."""
    from simscale.whatif.advise import Target, choose

    target = Target(target_throughput, deadline_hours, budget_usd)
    target.validate()
    rows = sweep(scenario, vary, let=let, link=link, set=set, profile=profile, executor=executor)
    columns = ["point", *_grid(vary, let, link).columns, *METRIC_COLUMNS]
    return choose(rows, columns, target, runners_up)
