"""benchmarks/bench_mxnet_emulated.py's figures beside throughput: network totals, the
workers' end spread, and CSV files written before those columns."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _harness():
    spec = importlib.util.spec_from_file_location(
        "bench_mxnet_emulated", ROOT / "benchmarks" / "bench_mxnet_emulated.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


bench = _harness()


def test_end_spread_is_the_median_over_measured_iterations():
    ends = {
        0: [10.0, 11.0, 12.00, 13.0],
        1: [10.5, 11.2, 12.05, 13.3],
        2: [10.1, 11.1, 12.30, 13.1],
    }
    # warmup 1: spreads 0.2, 0.3, 0.3 -> median 0.3; the warm-up's 0.5 is left out
    assert math.isclose(bench.end_spread_s(ends, 1), 0.3)
    assert math.isclose(bench.end_spread_s(ends, 3), 0.3)
    assert math.isnan(bench.end_spread_s(ends, 4))


def test_end_spread_uses_the_iterations_every_worker_has():
    assert math.isclose(bench.end_spread_s({0: [1.0, 2.0, 3.0], 1: [1.0, 2.5]}, 0), 0.25)


def _host(retrans, egress_drops, ingress_drops):
    return {
        "tcp": {"RetransSegs": retrans},
        "egress": {"dropped_packets": egress_drops},
        "ingress": {"dropped_packets": ingress_drops},
    }


def test_network_totals_sum_over_hosts_and_directions():
    assert bench.network_totals([_host(3, 1, 2), _host(4, 0, 5)]) == (7.0, 8.0)
    unreadable = bench.network_totals({"error": "could not read the network counters"})
    assert all(math.isnan(x) for x in unreadable)


def test_load_figures_of_a_verdict_and_of_none():
    assert bench.load_figures({"cluster_cpu_busy": 0.5, "max_wire_run_delay_share": 0.25}) == (
        0.5,
        0.25,
    )
    assert all(math.isnan(x) for x in bench.load_figures(None))


def test_csv_round_trip_and_older_files(tmp_path):
    m = bench.Measurement(
        "s", "realrun", 1, 100.0, 0.1, 0.0, 5.0, 1.0, True, "", 3.0, 7.0, 8.0, 0.02, 0.4, 0.1
    )
    path = tmp_path / "new.csv"
    sink = bench.CsvSink(str(path))
    sink.write(m)
    assert bench.read_csv([str(path)]) == [m]
    old = tmp_path / "old.csv"
    old.write_text(
        "shape,system,repeat,samples_per_s,mean_iteration_s,host_copy_s,wall_s,"
        "load_average_1min,valid,invalid_reason\n"
        "s,mxnet,1,90.0,0.2,0.0,4.0,2.0,True,\n"
    )
    (row,) = bench.read_csv([str(old)])
    assert row.samples_per_s == 90.0
    assert math.isnan(row.cpu_s) and math.isnan(row.retrans_segs)
    assert math.isnan(row.end_spread_s) and math.isnan(row.cluster_cpu_busy)
