"""calibrate --probe: a synthetic probe record with known numbers gives the known profile."""

from __future__ import annotations

import math

import pytest

from calibration.errors import CalibrationError
from calibration.probe_profile import calibrate_probe
from realrun.records.probe_record import Measurement, ProbeRecord, write_probe

HOSTS = (
    {"name": "h0", "address": "10.77.0.1", "rate_mbit": 80.0, "latency_us": 100.0},
    {"name": "h1", "address": "10.77.0.2", "rate_mbit": 80.0, "latency_us": 100.0},
)


def _synthetic() -> ProbeRecord:
    # 80 Mbit/s = 10 MB/s; one connection gets 9 MB/s at the median: bandwidth_factor 0.9.
    # Configured round trip 2 * (100 + 100) us = 0.4 ms; measured median 0.6 ms: factor 1.5.
    # Share deviations +-0.3: sigma 0.3. Sender 20 us, server push 50 us: request 30 us.
    # Merge 0.2 ns/B, merge + update 0.6 ns/B: update 0.4 ns/B.
    m = Measurement
    return ProbeRecord(
        launcher="netns",
        hosts=HOSTS,
        measurements={
            "tcp_connection_Bps": m("bytes/s", (8.5e6, 9e6, 9.5e6), {"sink": "h0"}),
            "rtt_s": m("s", (5e-4, 6e-4, 7e-4), {"configured_rtt_s": 4e-4}),
            "incast_share_log_deviation": m("log(bytes)", (0.3, -0.3) * 50),
            "sender_message_us": m("us", (19.0, 20.0, 21.0)),
            "server_push_message_us": m("us", (45.0, 50.0, 55.0)),
            "server_merge_ns_per_byte": m("ns/byte", (0.1, 0.2, 0.3)),
            "server_merge_update_ns_per_byte": m("ns/byte", (0.5, 0.6, 0.7)),
            "gpu_copy_h2d_Bps": m("bytes/s", skipped="no CUDA"),
        },
    )


def test_known_measurements_give_the_known_profile(tmp_path) -> None:
    profile = calibrate_probe([write_probe(_synthetic(), tmp_path / "p.json")])
    c = profile.costs
    assert c.bandwidth_factor == pytest.approx(0.9)
    assert c.latency_factor == pytest.approx(1.5)
    assert c.tcp_share_sigma == pytest.approx(0.3)
    assert c.message_overhead_us == pytest.approx(20.0)
    assert c.server_request_us == pytest.approx(30.0)
    assert c.server_merge_ns_per_byte == pytest.approx(0.2)
    assert c.server_update_ns_per_byte == pytest.approx(0.4)
    # Unmeasured keys keep their defaults; the fit says what was measured and how well.
    assert c.overlap_loss == 0.0
    assert "bandwidth_factor" in profile.fit.parameters
    ratios = [8.5 / 10, 9 / 10, 9.5 / 10]
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / 3
    expected = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    assert profile.fit.uncertainty["bandwidth_factor"] == pytest.approx(expected)
    assert profile.fit.uncertainty["tcp_share_sigma"] == pytest.approx(1 / math.sqrt(2 * 99))
    assert "no training run" in profile.fit.method


def test_several_records_pool_their_samples(tmp_path) -> None:
    a = write_probe(_synthetic(), tmp_path / "a.json")
    b = write_probe(_synthetic(), tmp_path / "b.json")
    profile = calibrate_probe([a, b])
    assert profile.costs.bandwidth_factor == pytest.approx(0.9)
    assert len(profile.fit.records) == 2


def test_a_record_without_any_mapped_measurement_is_refused(tmp_path) -> None:
    empty = ProbeRecord("local", HOSTS, {"x": Measurement("s", (1.0,))})
    with pytest.raises(CalibrationError, match="no measurement a profile key comes from"):
        calibrate_probe([write_probe(empty, tmp_path / "e.json")])


def test_a_bad_probe_file_is_a_calibration_error(tmp_path) -> None:
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(CalibrationError, match="not a probe record"):
        calibrate_probe([tmp_path / "bad.json"])
