"""The run record: summary arithmetic, atomic write, and a loader that names a bad field."""

from __future__ import annotations

import json

import pytest

from realrun.records.record import (
    SCHEMA_VERSION,
    IterationTiming,
    RecordError,
    RunRecord,
    load_record,
    summarize,
    write_record,
)


def timing(worker: int, iteration: int, total: float, wait: float = 0.0) -> IterationTiming:
    return IterationTiming(worker, iteration, 1000.0 + iteration, total - wait, wait, total, 2.3)


ROWS = [
    timing(0, 0, 9.0),
    timing(1, 0, 9.0),  # warm-up, ignored
    timing(0, 1, 0.1, 0.02),
    timing(1, 1, 0.2, 0.05),
    timing(0, 2, 0.3, 0.04),
    timing(1, 2, 0.2, 0.01),
]


def test_summary_counts_only_measured_iterations():
    s = summarize(ROWS, warmup=1, samples_per_iteration=[32, 64])
    # worker 0: 32 / mean(0.1, 0.3) = 160/s; worker 1: 64 / mean(0.2, 0.2) = 320/s
    assert s.samples_per_s_per_worker == pytest.approx((160.0, 320.0))
    assert s.samples_per_s == pytest.approx(480.0)
    assert s.mean_iteration_s == pytest.approx(0.2)
    assert s.median_iteration_s == pytest.approx(0.2)
    assert s.mean_wait_s == pytest.approx(0.03)
    assert s.measured_iterations == 2
    assert summarize(ROWS[:2], warmup=1, samples_per_iteration=[32, 64]) is None


def record(**changes) -> RunRecord:
    base = dict(
        schema_version=SCHEMA_VERSION,
        scenario={"name": "x"},
        environment={"launcher": "local"},
        iterations=tuple(ROWS),
        summary=summarize(ROWS, 1, [32, 64]),
        complete=True,
    )
    return RunRecord(**{**base, **changes})


def test_a_written_record_loads_back_equal_and_leaves_no_temporary_file(tmp_path):
    path = write_record(record(), tmp_path / "runs" / "a.json")
    assert load_record(path) == record()
    assert [p.name for p in path.parent.iterdir()] == ["a.json"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(schema_version=0), "schema_version is 0, this code reads 1"),
        (lambda d: d.pop("environment"), "record lacks field(s) environment"),
        (lambda d: d.update(extra=1), "record has unknown field(s) extra"),
        (lambda d: d["iterations"][1].update(total_s=-1.0), "iterations[1].total_s is -1.0"),
        (lambda d: d["iterations"][0].update(worker="0"), "iterations[0].worker is str"),
        (lambda d: d["iterations"][0].update(loss="low"), "iterations[0].loss is 'low'"),
        (lambda d: d.update(summary=None), "summary is missing, but the run is marked complete"),
        (lambda d: d["summary"].update(samples_per_s="fast"), "summary.samples_per_s is 'fast'"),
        (lambda d: d.update(complete="yes"), "complete is str, expected bool"),
    ],
)
def test_a_bad_record_is_refused_naming_the_field(tmp_path, edit, message):
    data = record().to_dict()
    data["iterations"] = [dict(r) for r in data["iterations"]]
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(
        RecordError,
        match=message.replace("[", r"\[")
        .replace("]", r"\]")
        .replace("(", r"\(")
        .replace(")", r"\)"),
    ):
        load_record(path)


def test_an_incomplete_record_may_lack_a_summary(tmp_path):
    r = record(iterations=tuple(ROWS[:2]), summary=None, complete=False, error="boom")
    assert load_record(write_record(r, tmp_path / "r.json")).error == "boom"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b.replace(b'"wall_s": ', b'"wall_s": Infinity, "x": ', 1), "Infinity is not"),
        (lambda b: b.replace(b'"wall_s": ', b'"wall_s": NaN, "x": ', 1), "NaN is not"),
        (lambda b: b.replace(b'"wall_s": ', b'"wall_s": 1e999, "x": ', 1), "overflows a double"),
        (lambda b: b.replace(b'"worker": ', b'"worker": ' + b"9" * 5000, 1), "5001 digits"),
        (lambda b: b[:20] + b"\xff" + b[20:], "not UTF-8 at byte 20"),
        (
            lambda b: b.replace(b'"error": null', b'"error": ' + b"[" * 100_000 + b"]" * 100_000),
            "nested deeper than 32",
        ),
        (
            lambda b: b.replace(b'"error": null', b'"error": ' + b"[" * 40 + b"]" * 40),
            "nested deeper than 32",
        ),
    ],
)
def test_a_damaged_record_is_one_line_not_a_traceback(tmp_path, damage, message):
    """Bytes no JSON writer of ours produces (issue 13: each was a traceback in calibrate)."""
    path = write_record(record(), tmp_path / "r.json")
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(RecordError, match="cannot read a JSON run record") as e:
        load_record(path)
    assert message in str(e.value) and str(path) in str(e.value)


def ps_scenario(pull_request: str = "after_ack", mode: str = "dist_sync") -> dict:
    return {"name": "x", "kvstore": {"mode": mode, "pull_request": pull_request}}


def test_a_record_from_before_realrun_honoured_pull_request_says_it_pipelined_its_pulls(
    tmp_path,
):
    """Until realrun followed kvstore.pull_request, every PS job pipelined each pull behind its
    push while its record kept the field's default, after_ack; such a record has no
    environment.pull_request, and loads as the run really was."""
    path = write_record(record(scenario=ps_scenario()), tmp_path / "old.json")
    assert load_record(path).scenario["kvstore"]["pull_request"] == "with_push"


@pytest.mark.parametrize("ran", ["after_ack", "with_push"])
def test_a_record_that_names_its_pull_ordering_loads_as_written(tmp_path, ran):
    env = {"launcher": "local", "pull_request": ran, "scheduling": "fifo"}
    rec = record(scenario=ps_scenario(ran), environment=env)
    assert load_record(write_record(rec, tmp_path / "new.json")) == rec


def test_a_record_from_before_realrun_honoured_scheduling_says_it_sent_by_priority(tmp_path):
    """Until realrun followed kvstore.scheduling, every worker sent by priority with a 256 KiB
    window per server, while its record kept the field's default, fifo (runs/emulated-v2)."""
    env = {"launcher": "local", "pull_request": "after_ack"}
    path = write_record(record(scenario=ps_scenario(), environment=env), tmp_path / "old.json")
    kv = load_record(path).scenario["kvstore"]
    assert (kv["scheduling"], kv["send_window_mb"]) == ("priority", 0.25)


def test_a_record_that_names_its_scheduling_keeps_the_scenario_s(tmp_path):
    kv = {"mode": "dist_sync", "scheduling": "priority", "send_window_mb": 4.0}
    env = {"launcher": "local", "pull_request": "after_ack", "scheduling": "priority"}
    rec = record(scenario={"name": "x", "kvstore": kv}, environment=env)
    assert load_record(write_record(rec, tmp_path / "new.json")) == rec


def test_an_allreduce_record_is_left_alone(tmp_path):
    rec = record(scenario=ps_scenario(mode="allreduce"))
    assert load_record(write_record(rec, tmp_path / "ar.json")) == rec
