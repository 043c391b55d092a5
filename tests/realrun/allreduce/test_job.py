"""``realrun run`` of an all-reduce scenario as real processes: a valid record, the PS job's
failure rules (a dead or stalled rank ends the job within seconds, named, nothing left), and a
torchrun launch of the same worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from realrun.allreduce.job import AllreduceJob
from realrun.allreduce.worker import plan_from_scenario
from realrun.cli import main as realrun_main
from realrun.launching.local_launcher import LocalLauncher
from realrun.records.record import load_record
from realrun.run import LaunchOptions, run_scenario
from simscale.report.trace import overlapping
from simscale.spec.scenario import load_scenario
from tests.support.paths import ROOT
from tests.support.system import (
    SSH_SKIP,
    alive,
    assert_nothing_left,
    gone,
    local_sshd,
    needs_netns,
    root_links,
)

SCENARIO = str(ROOT / "scenarios" / "cpu-2x2-allreduce.yaml")
DEATH_TO_END_LIMIT_S = 10.0


@pytest.mark.slow
def test_local_run_writes_a_complete_valid_record_and_its_timeline(tmp_path):
    record, out = run_scenario(
        SCENARIO, output=tmp_path / "run.json", progress=False, trace=tmp_path / "t.json"
    )
    assert record.complete, record.error
    trace = json.loads((tmp_path / "t.json").read_text())
    assert overlapping(trace) == []
    processes = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert processes == {"worker0", "worker1"}
    loaded = load_record(out)
    assert loaded.complete and loaded.valid
    assert loaded.environment["num_workers"] == 2 and loaded.environment["num_servers"] == 0
    assert [(t.worker, t.iteration) for t in loaded.iterations] == [
        (w, i) for i in range(12) for w in range(2)
    ]
    worker = loaded.environment["workers"]["0"]
    assert worker["allreduce"]["backend"] == "gloo"
    assert worker["replicas"] == 2
    # 2 hosts x 2 devices x 32 samples per iteration.
    assert loaded.summary is not None
    per_iteration = [t.total_s for t in loaded.iterations if t.iteration >= 2]
    assert loaded.summary.samples_per_s > 0 and min(per_iteration) > 0


def _job(overrides: list[str]) -> AllreduceJob:
    return AllreduceJob(
        SCENARIO,
        LocalLauncher(),
        ["simulation.measured_iterations=3000", *overrides],
        progress=False,
        timeout_s=60,
    )


def _run_and_hit(job: AllreduceJob, rank: int, sig: int) -> tuple[float, float]:
    """Run until a few iterations are in, send ``sig`` to rank ``rank``; (sent, ended)."""
    sent: list[float] = []

    def hit() -> None:
        deadline = time.monotonic() + 50
        while len(job.state.iterations) < 6 and time.monotonic() < deadline:
            time.sleep(0.02)
        victim = next(p for p in job.processes if p.role == "worker" and p.rank == rank)
        os.kill(victim.pid, sig)
        sent.append(time.monotonic())

    t = threading.Thread(target=hit)
    t.start()
    record = job.run()
    ended = time.monotonic()
    t.join(5)
    assert not record.complete
    assert len(record.iterations) >= 6  # what was measured before is kept
    return sent[0], ended


@pytest.mark.slow
def test_killing_a_rank_ends_the_job_quickly_naming_it_and_nothing_is_left():
    job = _job(["kvstore.allreduce.algorithm=ring"])  # 4 ranks, 2 per host
    sent, ended = _run_and_hit(job, 2, signal.SIGKILL)
    victim = next(p for p in job.processes if p.rank == 2 and p.role == "worker")
    assert ended - sent < DEATH_TO_END_LIMIT_S
    assert job.state.error == f"worker rank 2 on 127.0.0.1 (pid {victim.pid}) was killed by SIGKILL"
    assert all(gone(p.pid) for p in job.processes)


@pytest.mark.slow
def test_a_stalled_rank_is_named_by_the_heartbeat_watch():
    job = _job([])
    sent, ended = _run_and_hit(job, 1, signal.SIGSTOP)
    victim = next(p for p in job.processes if p.rank == 1 and p.role == "worker")
    assert ended - sent < DEATH_TO_END_LIMIT_S
    assert job.state.error is not None
    assert job.state.error.startswith(
        f"worker rank 1 on 127.0.0.1 (pid {victim.pid}) stopped responding: no heartbeat for"
    )
    assert all(gone(p.pid) for p in job.processes)


@pytest.mark.slow
def test_torchrun_starts_the_same_worker_and_each_rank_reports_on_stdout():
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip(f"no torchrun beside {sys.executable}")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [
            str(torchrun),
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "realrun.allreduce.worker",
            "--scenario",
            SCENARIO,
            "--set",
            "simulation.measured_iterations=2",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    iterations = sorted((r["rank"], r["iteration"]) for r in reports if r["type"] == "iteration")
    assert iterations == [(r, i) for r in range(2) for i in range(4)]
    assert sorted(r["rank"] for r in reports if r["type"] == "finished") == [0, 1]


def test_a_launch_with_the_wrong_number_of_ranks_is_a_one_line_error():
    scenario = load_scenario(SCENARIO, ["kvstore.allreduce.algorithm=ring"])
    expected = r"^WORLD_SIZE=2, but the scenario's ring all-reduce runs 4 ranks"
    with pytest.raises(ValueError, match=expected):
        plan_from_scenario(scenario, 0, 2)


def test_emulated_compute_is_refused_before_anything_starts(capsys):
    """Horovod-style all-reduce trains for real only (DDP and FSDP emulate the device)."""
    assert realrun_main(["run", SCENARIO, "--set", "realrun.compute=emulated"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("realrun: realrun.compute is 'emulated', but the Horovod-style")
    assert err.count("\n") == 1


@pytest.mark.netns
@pytest.mark.slow
@needs_netns
def test_the_emulated_cluster_runs_it_over_shaped_links_and_leaves_nothing(tmp_path):
    """Each rank in its host's namespace, gloo over the emulated NICs; a complete record (its
    validity depends on this machine's load, which the record judges itself)."""
    links_before = root_links()
    record, out = run_scenario(
        SCENARIO, (), LaunchOptions("netns"), tmp_path / "r.json", progress=False, timeout_s=120
    )
    assert record.complete, record.error
    hosts = [n["host"] for n in load_record(out).environment["nodes"]]
    assert len(set(hosts)) == 2 and "127.0.0.1" not in hosts  # one emulated host per rank
    assert_nothing_left(record, links_before)


@pytest.mark.slow
@pytest.mark.skipif(SSH_SKIP is not None, reason=SSH_SKIP or "")
def test_the_ssh_launcher_starts_the_coordinator_and_the_ranks(tmp_path):
    """Through this machine's own sshd: the coordinator on the first host, the ranks cycled
    over the hostfile, every remote process gone at the end."""
    with local_sshd(tmp_path) as options:
        record, _ = run_scenario(
            SCENARIO,
            ["simulation.warmup_iterations=1", "simulation.measured_iterations=2"],
            options,
            tmp_path / "r.json",
            progress=False,
            timeout_s=90,
        )
        assert record.complete, record.error
        assert record.environment["launcher"] == "ssh"
        assert len(record.iterations) == 2 * 3
        pids = [int(n["pid"]) for n in record.environment["nodes"]]
        assert len(pids) == 2 and not any(alive(pid) for pid in pids)


def test_hsdp_is_refused_before_anything_starts(capsys):
    """realrun's FSDP shards over every rank; a scenario asking for HSDP gets one line."""
    tiny = str(ROOT / "scenarios" / "emulated" / "gpt2-tiny-ddp.yaml")
    hsdp = ["--set", "kvstore.mode=zero", "--set", "kvstore.zero.shard_group=host"]
    assert realrun_main(["run", tiny, *hsdp]) == 2
    err = capsys.readouterr().err
    assert err.startswith("realrun: kvstore.zero.shard_group is 'host', but realrun's FSDP")
    assert err.count("\n") == 1
