"""The generated documentation is what scripts/gen_docs.py writes from the code and the data.

As the golden test does for predictions: a change to the schema, the presets, the imports or a
measurement file without ``python -m scripts.gen_docs`` fails here, naming the stale files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import gen_docs
from simscale.spec import hardware


def test_committed_generated_pages_are_up_to_date() -> None:
    assert gen_docs.stale() == [], "stale: run python -m scripts.gen_docs"


def test_every_scenario_field_of_the_schema_is_in_the_reference() -> None:
    from simscale.spec.schema import schema

    page = gen_docs.scenario_reference()
    sch = schema()
    for body in [sch, *sch["$defs"].values()]:
        for field in body["properties"]:
            assert f"| `{field}` |" in page


def test_a_field_note_is_the_comment_written_above_it() -> None:
    comments = gen_docs.field_comments(gen_docs.ROOT / "simscale" / "spec" / "scenario.py")
    assert comments[("HostGroup", "usd_per_hour")] == (
        "Price of one host per hour; overrides the instance preset's on-demand price."
    )


def test_every_preset_is_listed_with_its_source() -> None:
    page = gen_docs.presets_reference()
    for spec in [*hardware.GPUS.values(), *hardware.INSTANCES.values()]:
        assert f"| `{spec.name}` |" in page
        assert gen_docs._cell(spec.source) in page


def test_an_unknown_price_is_shown_unknown_not_zero() -> None:
    row = next(r for r in gen_docs.presets_reference().splitlines() if "`p3.2xlarge`" in r)
    assert "| unknown |" in row


def test_a_region_is_rewritten_and_text_around_it_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(gen_docs.REGIONS, "speed", lambda: "see [perf](docs/performance.md)")
    text = "before\n<!-- gen:speed -->\nold\n<!-- /gen:speed -->\nafter\n"
    assert gen_docs.fill_regions(text, in_docs=False) == (
        "before\n<!-- gen:speed -->\nsee [perf](docs/performance.md)\n<!-- /gen:speed -->\nafter\n"
    )
    assert "](performance.md)" in gen_docs.fill_regions(text, in_docs=True)


def test_a_missing_measurement_names_the_command_that_makes_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(gen_docs, "DATA", tmp_path)
    assert "--measure bench-predict" in gen_docs.speed_table()
    assert "benchmarks/bench_predict.py" in gen_docs.speed_table()


def test_accuracy_rows_come_from_the_measurement_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(gen_docs, "DATA", tmp_path)
    record = {
        "command": "simscale validate runs/emulated-v2 --fit none --json",
        "measured_on": "2026-01-02",
        "commit": "abc1234",
        "machine": {"cpus": 2, "load_average_before": 1.0},
        "wall_s": 8.0,
        "cpu_s": 5.0,
        "result": {
            "cross_validation": {
                "method": "leave-one-shape-out",
                "mape": 0.117,
                "worst_ape": 0.543,
                "by_group": {"mode": {"async": [0.04, 0.07, 2], "sync": [0.13, 0.54, 13]}},
            }
        },
    }
    (tmp_path / "validate-emulated-defaults.json").write_text(json.dumps(record))
    table = gen_docs.accuracy_summary()
    assert "| emulated cluster, defaults (nothing fitted) | 15 shapes | 11.7% | 54.3% |" in table
    assert "on 2026-01-02 at abc1234" in table


def test_the_package_graph_shows_calibration_reading_realrun_records() -> None:
    assert ("calibration", "realrun.records") in gen_docs.package_imports()
