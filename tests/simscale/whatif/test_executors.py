"""Local sweep processes: Ctrl-C is the main process's alone, which ends its workers at once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simscale.whatif import executors
from tests.support.load import CpuWindow
from tests.support.paths import ROOT

TRIES = 20
EXIT_WITHIN_S = 2.0  # after the first Ctrl-C (issue 36)
FIRST_ROW_WITHIN_S = 120.0  # a loaded 2-core machine: spawning two workers can take seconds


def _first_row(checkpoint: Path, proc: subprocess.Popen, within_s: float) -> bool:
    """Wait until the sweep has kept a row (a line after the checkpoint's header)."""
    end = time.monotonic() + within_s
    while time.monotonic() < end and proc.poll() is None:
        if checkpoint.exists() and len(checkpoint.read_text().splitlines()) >= 2:
            return True
        time.sleep(0.05)
    return False


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies, dead and waiting for whoever
    reaps orphans, do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended while we looked
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _interrupt_once(tmp_path: Path, n: int) -> tuple[int, float, str, int, CpuWindow]:
    """One sweep, Ctrl-C'd as a terminal does it (SIGINT to its whole process group, the
    workers included) once it has kept a row: exit code, seconds from the signal to the exit,
    stderr, rows kept, and the machine's load from the signal to the exit."""
    out = tmp_path / f"sweep-{n}.csv"
    checkpoint = out.with_name(f"{out.name}.partial.jsonl")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "simscale.cli",
            "sweep",
            str(ROOT / "scenarios" / "64gpu.yaml"),
            "--vary",
            "cluster.hosts[0].count=1..200",
            "--jobs",
            "2",
            "--no-progress",
            "-o",
            str(out),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell job has
    )
    try:
        assert _first_row(checkpoint, proc, FIRST_ROW_WITHIN_S), "no row kept in time"
        window = CpuWindow()
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rc = -1
        took = time.monotonic() - sent
        window.__exit__(None, None, None)
        assert proc.stderr is not None
        err = proc.stderr.read()
        # No orphan: nothing is left in the sweep's process group once it has exited.
        end = time.monotonic() + 1.0
        while _group_alive(proc.pid) and time.monotonic() < end:
            time.sleep(0.02)
        assert not _group_alive(proc.pid), f"try {n}: a worker outlived the sweep"
        rows = len(checkpoint.read_text().splitlines()) - 1
        return rc, took, err, rows, window
    finally:
        if _group_alive(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_ctrl_c_ends_a_local_sweep_at_once_every_time(tmp_path: Path) -> None:
    """Twenty times in a row: exit 130 within 2 s of the first Ctrl-C, no worker left, no
    traceback, the finished rows kept (and said to be). Every try is judged on all of that; a
    try slower than 2 s while this machine's cores were saturated is not counted (the time
    is not the code's) and another is made, up to twice the tries."""
    judged, slow_when_saturated = 0, []
    for n in range(2 * TRIES):
        rc, took, err, rows, window = _interrupt_once(tmp_path, n)
        assert rc == 130, f"try {n}: exit {rc}: {err}"
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, f"try {n}: {err}"
        assert rows >= 1 and "finished rows kept" in err, f"try {n}: {err}"
        if took >= EXIT_WITHIN_S and window.saturated:
            slow_when_saturated.append(f"{took:.2f} s at {window.busy:.0%} busy")
            continue
        assert took < EXIT_WITHIN_S, (
            f"try {n}: took {took:.2f} s after Ctrl-C, {window.busy:.0%} busy"
        )
        judged += 1
        if judged == TRIES:
            return
    pytest.skip(f"{judged}/{TRIES} tries judged; saturated and slow: {slow_when_saturated}")


def test_workers_are_born_with_sigint_blocked_and_then_ignore_it() -> None:
    """The mechanism, in-process: a worker spawned by a submit inherits SIGINT blocked (so a
    Ctrl-C during its start-up cannot reach it) and its initializer ignores it for good."""
    results = list(executors.run_tasks("local", _sigint_state, [0, 1], jobs=2))
    assert results == [("ignored", True)] * 2
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


def _sigint_state(_: int) -> tuple[str, bool]:
    handler = signal.getsignal(signal.SIGINT)
    name = "ignored" if handler == signal.SIG_IGN else repr(handler)
    return name, signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
