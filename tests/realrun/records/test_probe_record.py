"""The probe record: what it keeps per measurement, and one-line errors for a bad file."""

from __future__ import annotations

import json
import math

import pytest

from realrun.records.probe_record import (
    Measurement,
    ProbeRecord,
    ProbeRecordError,
    Spread,
    load_probe,
    write_probe,
)


def _record() -> ProbeRecord:
    return ProbeRecord(
        launcher="local",
        hosts=({"name": "a", "address": "127.0.0.1", "rate_mbit": None, "latency_us": None},),
        measurements={
            "rtt_s": Measurement("s", (1e-3, 2e-3, 4e-3), {"from": "a"}),
            "gpu_copy_h2d_Bps": Measurement("bytes/s", skipped="no CUDA device on host a"),
        },
    )


def test_spread_gives_centre_and_relative_spread() -> None:
    s = Spread.of([1.0, 2.0, 4.0])
    assert (s.n, s.median, s.min, s.max) == (3, 2.0, 1.0, 4.0)
    assert s.log_std == pytest.approx(math.log(2))  # logs 0, ln2, 2 ln2: sd ln2


def test_a_record_round_trips_with_samples_spread_and_skipped_reasons(tmp_path) -> None:
    path = write_probe(_record(), tmp_path / "p.json")
    data = json.loads(path.read_text())
    assert data["kind"] == "realrun-probe" and data["schema_version"] == 1
    assert data["measurements"]["rtt_s"]["spread"]["median"] == 2e-3
    assert "spread" not in data["measurements"]["gpu_copy_h2d_Bps"]
    back = load_probe(path)
    assert back.measured("rtt_s").samples == (1e-3, 2e-3, 4e-3)
    assert back.measured("gpu_copy_h2d_Bps") is None
    assert back.measurements["gpu_copy_h2d_Bps"].skipped.startswith("no CUDA")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(kind="run"), "not a probe record"),
        (lambda d: d.update(schema_version=9), "schema_version: got 9, expected 1"),
        (lambda d: d["measurements"]["rtt_s"].update(samples=[1, "x"]), "samples[1]: got 'x'"),
        (lambda d: d["measurements"]["rtt_s"].pop("unit"), "missing field 'unit'"),
        (
            lambda d: d["measurements"]["rtt_s"].update(samples=[]),
            "no samples and no 'skipped' reason",
        ),
    ],
)
def test_a_bad_record_is_one_line_naming_file_and_field(tmp_path, edit, message) -> None:
    path = write_probe(_record(), tmp_path / "p.json")
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ProbeRecordError) as e:
        load_probe(path)
    assert str(path) in str(e.value) and message in str(e.value)
    assert "\n" not in str(e.value)


def test_a_missing_or_broken_file_is_one_line(tmp_path) -> None:
    with pytest.raises(ProbeRecordError, match="no such file"):
        load_probe(tmp_path / "absent.json")
    (tmp_path / "b.json").write_text("{")
    with pytest.raises(ProbeRecordError, match="not readable JSON"):
        load_probe(tmp_path / "b.json")
