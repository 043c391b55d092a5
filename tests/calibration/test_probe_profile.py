"""calibrate --probe: a synthetic probe record with known numbers gives the known profile."""

from __future__ import annotations

import math

import pytest

from calibration.errors import CalibrationError
from calibration.probe_profile import calibrate_probe, probe_values
from realrun.records.probe_record import Measurement, ProbeRecord, write_probe

HOSTS = (
    {"name": "h0", "address": "10.77.0.1", "rate_mbit": 80.0, "latency_us": 100.0},
    {"name": "h1", "address": "10.77.0.2", "rate_mbit": 80.0, "latency_us": 100.0},
)


WAITS_S = tuple((i % 7) * 1e-3 * (i % 2) for i in range(100))
RTT_CONTEXT = {
    "configured_rtt_s": 4e-4,
    "ping_wait_s": [w / 2 for w in WAITS_S],
    "echo_wait_s": [w / 2 for w in WAITS_S],
}


def _synthetic() -> ProbeRecord:
    # 80 Mbit/s = 10 MB/s; one connection gets 9 MB/s at the median: bandwidth_factor 0.9.
    # Configured round trip 2 * (100 + 100) us = 0.4 ms; every round trip is 0.6 ms once the
    # time its ends waited for a core (up to 5 ms, as on a loaded machine) is taken out: 1.5.
    # Share deviations +-0.3: sigma 0.3. Sender 20 us, server push 50 us: request 30 us.
    # Merge 0.2 ns/B, merge + update 0.6 ns/B: update 0.4 ns/B.
    m = Measurement
    return ProbeRecord(
        launcher="netns",
        hosts=HOSTS,
        measurements={
            "tcp_connection_Bps": m("bytes/s", (8.5e6, 9e6, 9.5e6), {"sink": "h0"}),
            "rtt_s": m("s", tuple(6e-4 + w for w in WAITS_S), RTT_CONTEXT),
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


def _with(record: ProbeRecord, **measurements: Measurement) -> ProbeRecord:
    return ProbeRecord(record.launcher, record.hosts, {**record.measurements, **measurements})


def test_the_round_trip_is_read_at_a_low_quantile_where_load_left_no_counter() -> None:
    # 30 of 100 round trips stretched by a wait that no counter saw: the 10th percentile
    # still sees the network's 0.6 ms, where the median of everything would not.
    walls = tuple(6e-4 + (3e-3 if i % 10 < 3 else 0.0) for i in range(100))
    record = _with(_synthetic(), rtt_s=Measurement("s", walls, {"configured_rtt_s": 4e-4}))
    values, sigma = probe_values([record])
    assert values["latency_factor"] == pytest.approx(1.5)
    assert sigma["latency_factor"] == pytest.approx(0.0)


def test_one_connection_is_a_limit_only_where_several_beat_it_every_round() -> None:
    nic_bound = _with(
        _synthetic(),
        tcp_host_aggregate_Bps=Measurement("bytes/s", (9.0e6, 9.2e6), {"sink": "h0"}),
    )
    assert "connection_gbps" not in probe_values([nic_bound])[0]
    own_limit = _with(
        _synthetic(),
        tcp_host_aggregate_Bps=Measurement("bytes/s", (9.6e6, 9.8e6), {"sink": "h0"}),
    )
    values, _ = probe_values([own_limit])
    assert values["connection_gbps"] == pytest.approx(9e6 * 8 / 1e9)


def _allreduce(bus_Bps: float, fixed_s: float) -> dict[str, Measurement]:
    out = {}
    for size in (1 << 16, 1 << 20, 4 << 20):
        t = fixed_s + size / bus_Bps
        out[f"allreduce_busbw_{size}B"] = Measurement(
            "bytes/s", (size / t,) * 3, {"size_bytes": size}
        )
    return out


def test_the_all_reduce_ceiling_is_its_slope_and_only_below_one_connection() -> None:
    # A 2 ms fixed cost per call does not count against the rate: the slope gives 5 MB/s.
    slow = _with(_synthetic(), **_allreduce(5e6, 2e-3))
    values, _ = probe_values([slow])
    assert values["socket_host_gbps"] == pytest.approx(5e6 * 8 / 1e9)
    fast = _with(_synthetic(), **_allreduce(9.6e6, 2e-3))
    assert "socket_host_gbps" not in probe_values([fast])[0]


def test_psrtt_round_trips_give_the_stack_delay_beyond_the_simulators_own(tmp_path) -> None:
    """The synthetic record's costs give a 4000-byte push and its ack, from h1 to h0, 1.124 ms:
    the configured 0.4 ms times latency_factor 1.5, 4064 bytes at 0.9 of 10 MB/s (0.4516 ms),
    two message overheads of 20 us and the server's 30 us request, 4000 B x 0.6 ns merge and
    update (2.4 us). 20 round trips 0.1 ms below that count as no delay; 80 lie 20, 40, ...,
    1600 us above it: per message each way, half, 10 to 800 us."""
    import numpy as np

    from calibration.probe_profile import STACK_QUANTILES, simulated_push_ack_s
    from realrun.records.probe_record import load_probe

    modelled = 4e-4 * 1.5 + 4064 / 9e6 + 70e-6 + 4000 * 0.6e-9
    samples = [modelled - 1e-4] * 20 + [modelled + 2 * (k + 1) * 10e-6 for k in range(80)]
    ctx = {"from": "h1", "to": "h0", "configured_rtt_s": 4e-4, "key_bytes": 4000}
    record = _synthetic()
    record = ProbeRecord(
        launcher=record.launcher,
        hosts=record.hosts,
        measurements={**record.measurements, "ps_push_ack_s": Measurement("s", samples, ctx)},
    )
    path = write_probe(record, tmp_path / "p.json")
    profile = calibrate_probe([path])
    assert simulated_push_ack_s(load_probe(path), profile.costs) == pytest.approx(modelled)
    per_message_us = [0.0] * 20 + [(k + 1) * 10.0 for k in range(80)]
    expected = np.quantile(per_message_us, [(i + 0.5) / STACK_QUANTILES for i in range(20)])
    q = profile.costs.message_stack_quantiles_us
    assert q[:4] == (0.0, 0.0, 0.0, 0.0)
    assert q == pytest.approx(tuple(expected), abs=0.06)
    # Without a psrtt step the profile has no stack delay.
    assert (
        calibrate_probe(
            [write_probe(_synthetic(), tmp_path / "q.json")]
        ).costs.message_stack_quantiles_us
        == ()
    )
