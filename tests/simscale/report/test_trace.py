"""Timelines: predicted (simscale predict --trace) and measured (realrun) iterations in one
Chrome-trace layout, a thread per key whose phases never overlap."""

from __future__ import annotations

import json

import pytest

from realrun.ps.kv_worker import KVWorker
from realrun.records.timeline import merge
from realrun.training import torch_models
from realrun.training.worker_loop import Trainer
from simscale.cli import main as simscale_main
from simscale.report.trace import (
    ALLREDUCE_PHASES,
    PS_PHASES,
    PhaseSpan,
    chrome_trace,
    consecutive,
    overlapping,
    overlapping_in_perfetto,
    simulation_spans,
)
from simscale.simulator import Simulation
from simscale.spec.scenario import scenario_from_dict
from tests.support.paths import ROOT
from tests.support.realrun_inprocess import InProcessJob
from tests.support.training import ps_plan, train_in_threads


def scenario(kvstore: dict, gpus: int = 2, hosts: int = 3):
    return scenario_from_dict(
        {
            "name": "trace-test",
            "cluster": {
                "hosts": [{"count": hosts, "gpus_per_host": gpus, "gpu": "V100", "nic_gbps": 10}]
            },
            "model": {"name": "mlp"},
            "training": {"batch_per_gpu": 32},
            "kvstore": kvstore,
            "simulation": {"warmup_iterations": 1, "measured_iterations": 3},
        }
    )


# mlp's first weight (401,408 elements) is split over both servers below a 100,000 bound, so one
# key's slices travel in parallel: the case where per-key spans could overlap.
SPLIT = {"servers": 2, "bigarray_bound": 100_000}
CASES = {
    "sync": {"mode": "dist_sync", **SPLIT},
    "async": {"mode": "dist_async", **SPLIT},
    "sync-with-push": {"mode": "dist_sync", "pull_request": "with_push", **SPLIT},
    "device": {"mode": "dist_sync_device", **SPLIT},
    "hierarchical": {"mode": "allreduce", "allreduce": {"fusion_mb": 0.5}},
    "ring": {"mode": "allreduce", "allreduce": {"algorithm": "ring", "cycle_ms": 0}},
}


def threads_and_names(trace: dict) -> dict[tuple[int, int], list[str]]:
    """Span names per (process, thread), in time order, keyed by the thread's name."""
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    spans: dict = {}
    for e in sorted((e for e in trace["traceEvents"] if e["ph"] == "X"), key=lambda e: e["ts"]):
        spans.setdefault((e["pid"], names[(e["pid"], e["tid"])]), []).append(e["name"])
    return spans


@pytest.mark.parametrize("case", list(CASES))
def test_predicted_keys_have_their_own_threads_and_no_spans_overlap(case):
    sim = Simulation(scenario(CASES[case]), trace=True)
    sim.run()
    trace = chrome_trace(simulation_spans(sim), 1, "x")
    assert overlapping(trace) == []
    spans = threads_and_names(trace)
    workers = {pid for pid, _ in spans}
    assert len(workers) == 3
    phases = PS_PHASES if CASES[case]["mode"].startswith("dist") else ALLREDUCE_PHASES
    for worker in workers:
        for key in range(len(sim.key_bytes)):
            names = spans[(worker, f"key {key}")]
            assert names, f"worker {worker} key {key} has no span"
            assert set(names) <= set(phases)
            # Phases appear in protocol order.
            assert names == sorted(names, key=phases.index)
    if CASES[case]["mode"] == "dist_sync":
        assert {"push", "update", "pull"} <= set(spans[(0, "key 0")])
    if CASES[case]["mode"] == "allreduce":
        assert spans[(0, "allreduce buffers")]


@pytest.mark.parametrize(
    "name", [pytest.param("64gpu", marks=pytest.mark.slow), "cpu-2x2-sync", "64gpu-allreduce"]
)
def test_spans_stay_disjoint_when_perfetto_rounds_them_to_whole_ns(name, tmp_path):
    """Perfetto's JSON importer rounds ts and dur to ns separately (llround(us * 1000)); the
    spans of these shipped scenarios once overlapped by 1 ns there, hundreds on one track."""
    out = tmp_path / "trace.json"
    rc = simscale_main(["predict", str(ROOT / "scenarios" / f"{name}.yaml"), "--trace", str(out)])
    assert rc == 0
    trace = json.loads(out.read_text())
    assert sum(e["ph"] == "X" for e in trace["traceEvents"]) >= 50
    assert overlapping_in_perfetto(trace) == []


def test_the_perfetto_check_finds_a_one_ns_overlap():
    trace = {
        "traceEvents": [
            {"ph": "X", "pid": 0, "tid": 0, "name": "a", "ts": 0.0004, "dur": 1.0004},
            {"ph": "X", "pid": 0, "tid": 0, "name": "b", "ts": 1.0008, "dur": 1.0},
        ]
    }
    # In µs a ends at 1.0008, where b starts; in ns a is [0, 1000] and b starts at 1001: apart.
    assert overlapping_in_perfetto(trace) == []
    trace["traceEvents"][0].update(ts=0.0006, dur=1.0006)  # [1, 1002] ns; b starts at 1001
    assert len(overlapping_in_perfetto(trace)) == 1


def test_one_thread_per_worker_for_all_keys_overlapped_which_is_why_keys_are_split():
    """The old layout (every key of a worker on its ``comm`` thread) draws overlapping spans
    for this scenario; the check above would catch a return to it."""
    sim = Simulation(scenario(CASES["sync"]), trace=True)
    sim.run()
    assert sim.spans is not None
    assert overlapping(chrome_trace(sim.spans, 1)) != []


def test_consecutive_phases_never_run_backwards():
    spans = consecutive("w", 0, {"start": 1.0, "push": 3.0, "update": 2.5, "pull": 4.0}, 5.0)
    assert [(s.name, s.start_s, s.end_s) for s in spans] == [
        ("reduce", 1.0, 3.0),
        ("update", 3.0, 4.0),  # the late push mark swallows an earlier update mark
        ("pull", 4.0, 5.0),
    ]
    assert consecutive("w", 0, {"start": 1.0, "allreduce": 9.0}, 2.0)[0].end_s == 2.0


def test_overlap_check_finds_an_overlap():
    spans = [
        PhaseSpan("worker0 key 1", "push", 0.0, 2.0, 0),
        PhaseSpan("worker0 key 1", "pull", 1.0, 3.0, 0),
    ]
    assert len(overlapping(chrome_trace(spans, 0))) == 1


def test_predict_writes_a_trace_file(tmp_path, capsys):
    path = tmp_path / "t.json"
    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(
        json.dumps(
            {
                "name": "s",
                "cluster": {
                    "hosts": [{"count": 2, "gpus_per_host": 1, "gpu": "cpu", "nic_gbps": 10}]
                },
                "model": {"name": "mlp"},
                "training": {"batch_per_gpu": 8},
                "kvstore": {"mode": "allreduce"},
            }
        )
    )
    assert simscale_main(["predict", str(scenario_file), "--trace", str(path)]) == 0
    trace = json.loads(path.read_text())
    assert overlapping(trace) == []
    assert {p for p, _ in threads_and_names(trace)} == {0, 1}


@pytest.mark.parametrize(("hosts", "gpus", "algorithm"), [(2, 2, "hierarchical"), (2, 1, "ring")])
def test_measured_all_reduce_timeline_has_the_same_layout_and_no_overlap(hosts, gpus, algorithm):
    results = train_in_threads(hosts, gpus, algorithm, 0.1e6, 1e-3)
    spans = merge({t.rank: t.recorder.report() for t, _ in results})
    trace = chrome_trace(spans, 1, "measured")
    assert overlapping(trace) == []
    names = threads_and_names(trace)
    assert {p for p, _ in names} == set(range(len(results)))
    reduce = ["reduce"] if algorithm == "hierarchical" else []
    for rank in range(len(results)):
        assert names[(rank, "compute")][:2] == ["forward", "backward"]
        for key in range(results[0][0].keys):
            assert names[(rank, f"key {key}")] == [*reduce, "negotiate", "allreduce", "update"]
        assert "negotiate" in names[(rank, "allreduce buffers")]


@pytest.mark.slow
def test_measured_ps_timeline_has_the_same_layout_and_no_overlap():
    def train(po):
        trainer = Trainer(KVWorker(po, bigarray_bound=100_000), ps_plan(2), torch_models)
        trainer.run()
        return trainer.recorder.report()

    with InProcessJob(2, 2) as job:
        reports = job.run_workers(train)
    trace = chrome_trace(merge(dict(enumerate(reports))), 1, "measured")
    assert overlapping(trace) == []
    names = threads_and_names(trace)
    for rank in range(2):
        assert names[(rank, "compute")][:4] == ["forward", "backward"] * 2
        for key in range(6):
            assert names[(rank, f"key {key}")] == ["reduce", "push+update+pull", "broadcast"]


def test_clocks_of_other_machines_are_shifted_by_their_barrier_reading():
    span = {"track": "worker1", "name": "forward", "start_s": 10.5, "end_s": 11.0, "iteration": 0}
    reports = {
        0: {"hostname": "a", "barrier_exit_unix_s": 10.0, "spans": []},
        1: {"hostname": "b", "barrier_exit_unix_s": 12.0, "spans": [span]},
    }
    (shifted,) = merge(reports)
    assert (shifted.start_s, shifted.end_s) == (8.5, 9.0)
    reports[1]["hostname"] = "a"  # one machine, one clock: left as measured
    assert merge(reports)[0].start_s == 10.5


def test_combined_traces_keep_every_process_apart_and_say_which_is_which(tmp_path, capsys):
    sim = Simulation(scenario(CASES["hierarchical"]), trace=True)
    sim.run()
    predicted = chrome_trace(simulation_spans(sim), 1, "s (predicted)")
    measured = chrome_trace(
        [
            PhaseSpan("worker0", "forward", 5.0, 6.0, 1),
            PhaseSpan("worker1", "forward", 5.0, 7.0, 1),
        ],
        1,
        "s (measured)",
    )
    paths = []
    for label, trace in (("p", predicted), ("m", measured)):
        paths.append(tmp_path / f"{label}.json")
        paths[-1].write_text(json.dumps(trace))
    out = tmp_path / "both.json"
    assert simscale_main(["combine-traces", *map(str, paths), "-o", str(out)]) == 0
    both = json.loads(out.read_text())
    names = {
        e["pid"]: e["args"]["name"] for e in both["traceEvents"] if e["name"] == "process_name"
    }
    assert sorted(names.values()) == [
        "s (measured): worker0",
        "s (measured): worker1",
        "s (predicted): worker0",
        "s (predicted): worker1",
        "s (predicted): worker2",
    ]
    assert overlapping(both) == []
    paths[1].write_text("{}")
    assert simscale_main(["combine-traces", *map(str, paths), "-o", str(out), "--force"]) == 2
    assert capsys.readouterr().err.endswith("not a Chrome trace (no traceEvents list)\n")
