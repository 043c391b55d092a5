"""Predictions do not move unless a change means them to: every shipped scenario's ``--json``
answer and every published point's value equal the golden files to the byte (wall time aside).

The golden files were written before the simulator was split into subpackages; a change meant to
move predictions rewrites them with ``python -m tests.support.golden_predictions --write`` and says
why."""

from __future__ import annotations

import json

import pytest

from tests.support import golden_predictions as golden
from tests.support.costly import COSTLY_PUBLISHED, skipped_points

SCENARIO_GOLDEN = json.loads((golden.GOLDEN_DIR / "scenarios.json").read_text())
CASES = [(n, a) for n, a in golden.scenario_cases() if golden.exact_is_cheap(n)]


def test_every_case_has_a_golden_answer() -> None:
    assert sorted(n for n, _ in CASES) == sorted(SCENARIO_GOLDEN)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "args"), CASES, ids=[n for n, _ in CASES])
def test_scenario_prediction_is_unchanged(name: str, args: list[str]) -> None:
    assert golden.predict_json(args) == SCENARIO_GOLDEN[name]


PUBLISHED_GOLDEN = json.loads((golden.GOLDEN_DIR / "published.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("source", golden.published_sources())
def test_published_points_are_unchanged(source: str) -> None:
    skip = skipped_points()
    want = {
        k: v
        for k, v in PUBLISHED_GOLDEN.items()
        if k.startswith(f"{source}/") and k.split("|")[0] not in skip
    }
    got = golden.published_values(source, skip)
    moved = {k: (want.get(k), v) for k, v in got.items() if want.get(k) != v}
    assert want and not moved and sorted(got) == sorted(want), moved


def test_the_points_left_to_a_full_check_are_published_points() -> None:
    points = {k.split("|")[0] for k in PUBLISHED_GOLDEN}
    assert set(COSTLY_PUBLISHED) <= points
