"""Processes end with their command: signals give 130/143, and no child outlives its parent.

Issue 13: an interrupted `simscale validate` left a fold fitting for 57 minutes; a killed
launcher left its nodes running for ~6 s and the scheduler printed a BrokenPipeError traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from realrun.launching.launch import child_environ
from simscale.lifetime import PARENT_POLL_S
from tests.support.load import CpuWindow, within
from tests.support.paths import ROOT

DATASET = ROOT / "runs" / "emulated-v2"
# The watcher polls every PARENT_POLL_S; this bound leaves room for a loaded machine to
# schedule the exiting processes (the figure measured here is printed on failure).
GONE_WITHIN_S = 5.0


def _children(pid: int) -> set[int]:
    """Direct children of ``pid`` (from /proc; nodes run in their own sessions)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":  # a zombie has exited; only its parent's wait is missing
            alive.add(pid)
    return alive


def _wait_gone(pids: set[int], limit_s: float, window: CpuWindow) -> float:
    """Seconds until every one of ``pids`` has ended; over ``limit_s`` fails, or skips when
    ``window`` (opened before the signal) saw this machine saturated."""
    t0 = time.monotonic()
    while _alive(pids) and time.monotonic() - t0 < 30:
        time.sleep(0.05)
    took = time.monotonic() - t0
    assert not _alive(pids), f"still running after 30 s: {_alive(pids)}"
    within(took, limit_s, window, "the children ending")
    return took


def _wait_for(predicate, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)


def _validate(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "simscale.cli", "validate", str(DATASET), "--jobs", "2", *args],
        cwd=ROOT,
        env=child_environ({}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_validate_stops_its_folds_on_a_signal(sig: int, code: int) -> None:
    """SIGTERM or SIGINT to `simscale validate` ends its fold processes and exits 143/130."""
    proc = _validate()
    try:
        _wait_for(lambda: len(_children(proc.pid)) >= 2)
        time.sleep(1.0)  # the folds are fitting now
        children = _children(proc.pid)
        window = CpuWindow()
        proc.send_signal(sig)
        proc.wait(30)
        _, err = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert "Traceback" not in err, err
    _wait_gone(children, GONE_WITHIN_S, window)


@pytest.mark.slow
def test_validate_published_stops_its_workers_on_sigterm() -> None:
    """SIGTERM to `simscale validate --published` ends its fold processes at once (it used to
    wait for every running fit, minutes each) and exits 143 without a traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "simscale.cli", "validate", "--published", "--jobs", "2"],
        cwd=ROOT,
        env=child_environ({}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # two workers and multiprocessing's resource tracker
        _wait_for(lambda: len(_children(proc.pid)) >= 3)
        time.sleep(1.0)  # the folds are fitting now
        children = _children(proc.pid)
        window = CpuWindow()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        _, err = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "Traceback" not in err, err
    _wait_gone(children, GONE_WITHIN_S, window)


@pytest.mark.slow
def test_validate_folds_end_when_validate_is_killed() -> None:
    """SIGKILL leaves no handler to run: the folds notice they are orphaned and end."""
    proc = _validate()
    try:
        _wait_for(lambda: len(_children(proc.pid)) >= 2)
        time.sleep(1.0)
        children = _children(proc.pid)
        window = CpuWindow()
        proc.kill()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    _wait_gone(children, GONE_WITHIN_S, window)


@pytest.mark.slow
def test_a_killed_launchers_nodes_end_within_seconds_without_a_traceback(tmp_path) -> None:
    """SIGKILL to `realrun run`: every node notices within a poll and exits; the scheduler
    does not print a BrokenPipeError traceback."""
    scenario = ROOT / "scenarios" / "cpu-2x2-sync.yaml"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "realrun.cli",
            "run",
            str(scenario),
            "--launcher",
            "local",
            "-o",
            str(tmp_path / "run.json"),
            "--set",
            "simulation.measured_iterations=5000",
        ],
        cwd=ROOT,
        env=child_environ({}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        # Kill only once the job trains: a node still importing torch on a loaded machine
        # has not started watching its parent yet (the CI run that killed it after a fixed
        # 2 s got no message from any node).
        _wait_for(lambda: any("worker-iterations" in line for line in lines), 180.0)
        nodes = _children(proc.pid)
        window = CpuWindow()
        proc.kill()
        proc.wait(10)
        took = _wait_gone(nodes, GONE_WITHIN_S, window)
        reader.join(30)  # EOF once every node (all share the pipe) has ended
        err = "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    # The nodes' own "parent ... is gone; exiting" cannot reach this pipe: their stderr is a pipe
    # the launcher's relay reads (realrun/launching/output_log.py), and it died with the launcher.
    assert "worker-iterations" in err  # what the launcher printed before it was killed
    print(f"nodes ended {took:.2f} s after the launcher was killed (poll {PARENT_POLL_S} s)")


def test_exit_with_parent_ends_an_orphan() -> None:
    """The watcher alone: a grandchild whose parent exits ends itself."""
    code = (
        "import os, sys, time; from simscale.lifetime import exit_with_parent\n"
        "if os.fork() == 0:\n"
        "    exit_with_parent('grandchild'); print(os.getpid(), flush=True); time.sleep(60)\n"
        "    os._exit(0)\n"
        "time.sleep(1.0)\n"
    )
    window = CpuWindow()
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    grandchild = int(out.stdout.split()[0])
    _wait_gone({grandchild}, GONE_WITHIN_S, window)
    assert "grandchild: parent process" in out.stderr or not _alive({grandchild})
