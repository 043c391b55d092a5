"""Failing well: a dead or missing node stops the job within seconds with a one-line reason
naming role, rank and host, and leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import numpy as np
import pytest

from realrun.launching.job import Job
from realrun.launching.launch import node_command
from realrun.launching.local_launcher import LocalLauncher
from realrun.ps.kv_server import KVServer
from realrun.ps.kv_worker import KVWorker
from realrun.ps.postoffice import Postoffice
from realrun.ps.roles import NodeEnv
from realrun.ps.scheduler import Scheduler
from realrun.ps.tracker import JobAborted
from tests.support.paths import ROOT
from tests.support.realrun_inprocess import InProcessJob

SCENARIO = str(ROOT / "scenarios" / "cpu-2x2-sync.yaml")
DEATH_TO_END_LIMIT_S = 10.0


def _gone(pid: int) -> bool:
    """True when neither the process nor anything in its process group is left."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _kill_mid_run(role: str, rank: int) -> tuple[Job, float, float]:
    """Run the CPU scenario long enough, SIGKILL one node after a few iterations."""
    job = Job(
        SCENARIO,
        LocalLauncher(),
        ["simulation.measured_iterations=2000"],
        progress=False,
        timeout_s=60,
    )
    killed_at: list[float] = []

    def killer() -> None:
        deadline = time.monotonic() + 50
        while len(job.state.iterations) < 6 and time.monotonic() < deadline:
            time.sleep(0.02)
        victim = next(p for p in job.processes if p.role == role and p.rank == rank)
        os.kill(victim.pid, signal.SIGKILL)
        killed_at.append(time.monotonic())

    t = threading.Thread(target=killer)
    t.start()
    record = job.run()
    ended = time.monotonic()
    t.join(5)
    assert not record.complete
    return job, killed_at[0], ended


@pytest.mark.slow
@pytest.mark.parametrize(("role", "rank"), [("worker", 1), ("server", 0)])
def test_killing_a_node_mid_run_ends_the_job_quickly_with_its_name_and_nothing_left(role, rank):
    job, killed, ended = _kill_mid_run(role, rank)
    record_error = job.state.error
    assert ended - killed < DEATH_TO_END_LIMIT_S
    assert (
        record_error == f"{role} rank {rank} on 127.0.0.1 (pid "
        f"{next(p.pid for p in job.processes if p.role == role and p.rank == rank)}) "
        "was killed by SIGKILL"
    )
    assert "\n" not in record_error
    assert len(job.state.iterations) >= 6  # what was measured before the death is kept
    assert all(_gone(p.pid) for p in job.processes)


@pytest.mark.slow
def test_a_worker_that_stops_heartbeating_aborts_everyone_naming_it():
    """The scheduler's own detection (no launcher watching): worker 1 goes silent, worker 0
    is blocked on a sync pull that can never be answered, and gets the scheduler's reason."""
    n = 10

    def work(po):
        kv = KVWorker(po)
        kv.configure(True, None).wait(10)
        kv.init(0, np.zeros(n, dtype=np.float32)).wait(10)
        po.barrier().wait(10)
        if po.assignment.rank == 1:
            po.close()  # silent from now on, like a hung or vanished host
            return None
        started = time.monotonic()
        with pytest.raises(JobAborted) as e:
            kv.pushpull(0, np.ones(n, np.float32), np.empty(n, np.float32)).wait(30)
        return str(e.value), time.monotonic() - started

    with InProcessJob(2, 1, heartbeat_timeout_s=1.0) as job:
        message, waited = job.run_workers(work, finish=False)[0]
    assert message.startswith("worker rank 1 on 127.0.0.1 (host ")
    assert "stopped responding: no heartbeat for 1." in message
    assert waited < 5.0
    assert job.exit_code == 1


def test_a_node_that_never_arrives_stops_the_job_naming_what_is_missing():
    env = NodeEnv("scheduler", "127.0.0.1", 0, 2, 3, "127.0.0.1", start_timeout_s=0.5)
    events: list[dict] = []
    started = time.monotonic()
    assert Scheduler(env, events.append).run() == 1
    assert time.monotonic() - started < 3.0
    assert events[-1]["message"].startswith(
        "job did not start: only 0 of 3 workers (missing rank 0, 1, 2) and 0 of 2 servers "
        "(missing rank 0, 1) registered with the scheduler at tcp://127.0.0.1:"
    )


@pytest.mark.slow
def test_when_the_scheduler_dies_every_node_gives_up_within_the_heartbeat_timeout():
    launcher = LocalLauncher()
    secret = "5e" * 32  # the scheduler is a node process: it needs the job's secret
    env = NodeEnv(
        "scheduler", "127.0.0.1", 0, 1, 1, "127.0.0.1", heartbeat_timeout_s=1.0, secret=secret
    )
    scheduler = launcher.start("scheduler", 0, node_command(env, 0).argv, env.to_env())
    server_po = worker_po = None
    try:
        port = json.loads(scheduler.stdout.readline())["port"]
        server_po = Postoffice(
            NodeEnv(
                "server",
                "127.0.0.1",
                port,
                1,
                1,
                "127.0.0.1",
                heartbeat_timeout_s=1.0,
                secret=secret,
            ),
            handler=KVServer(1).handle,
        )
        worker_po = Postoffice(
            NodeEnv(
                "worker",
                "127.0.0.1",
                port,
                1,
                1,
                "127.0.0.1",
                heartbeat_timeout_s=1.0,
                secret=secret,
            )
        )
        starting = threading.Thread(target=server_po.start)
        starting.start()
        worker_po.start()
        starting.join(10)
        os.kill(scheduler.pid, signal.SIGKILL)
        killed = time.monotonic()
        with pytest.raises(JobAborted, match=r"lost the scheduler at tcp://127\.0\.0\.1:"):
            worker_po.barrier().wait(10)  # a barrier nobody can complete any more
        server_po.wait_closed(10)
        assert time.monotonic() - killed < 3.0
        assert server_po.error.startswith("server lost the scheduler")
    finally:
        for po in (worker_po, server_po):
            if po is not None:
                po.close()
        scheduler.signal_group(signal.SIGKILL)
        scheduler.wait(5)
        scheduler.stdout.close()
    assert _gone(scheduler.pid)
