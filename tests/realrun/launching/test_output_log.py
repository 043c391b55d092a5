"""The job's log: whoever stops reading the launcher's stderr, the job goes on and its log (the
nodes' lines included) is in a file beside the record."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from realrun.launching.launch import child_environ
from realrun.launching.output_log import log_path
from realrun.records.record import load_record
from tests.support.paths import ROOT

# Writes to stderr before and after its reader has gone, from this process and from a child
# that inherits fd 2, then says on a file that it got to the end.
WRITER = textwrap.dedent(
    """
    import subprocess, sys, time
    from pathlib import Path
    from realrun.launching.output_log import StderrLog

    log, done = Path(sys.argv[1]), Path(sys.argv[2])
    with StderrLog(log) as out:
        print("first line", file=sys.stderr, flush=True)
        time.sleep(1.0)  # the test closes its end of the pipe meanwhile
        for i in range(200):
            print(f"after the reader left {i}", file=sys.stderr, flush=True)
        out.console.write("a progress line for the console only\\n")
        subprocess.run([sys.executable, "-c", "import sys; print('from a child', file=sys.stderr)"])
    done.write_text("reached the end")
    """
)


def test_writes_go_on_after_the_reader_leaves_and_land_in_the_log(tmp_path: Path) -> None:
    log, done = tmp_path / "job.log", tmp_path / "done"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(log), str(done)],
        cwd=ROOT,
        env=child_environ({}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    assert proc.stderr.readline() == b"first line\n"  # the console saw it while read
    proc.stderr.close()  # the reader goes away
    assert proc.wait(timeout=60) == 0
    assert done.read_text() == "reached the end"
    text = log.read_text()
    assert text.startswith("first line\n")
    assert "after the reader left 199\n" in text
    assert "from a child\n" in text
    assert "progress line" not in text  # the console's, not the log's


def test_the_log_sits_beside_the_record() -> None:
    assert log_path(Path("runs/local/cpu-2x2-sync-20261127T0000.json")) == Path(
        "runs/local/cpu-2x2-sync-20261127T0000.log"
    )


@pytest.mark.slow
def test_a_job_whose_output_reader_leaves_completes_and_keeps_its_log(tmp_path: Path) -> None:
    """The launcher's stdout and stderr are closed by their reader a second into the run (as
    when a CI step or `| tee` is stopped); the job still completes, writes its record, and its
    log holds what the launcher and its nodes wrote."""
    out = tmp_path / "run.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "realrun.cli",
            "run",
            str(ROOT / "scenarios" / "cpu-2x2-sync.yaml"),
            "--launcher",
            "local",
            "-o",
            str(out),
        ],
        cwd=ROOT,
        env=child_environ({"PS_VERBOSE": "1"}),  # nodes log at INFO
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.0)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()
    assert proc.wait(timeout=180) == 0
    record = load_record(out)
    assert record.complete, record.error
    log = Path(record.environment["log"])
    assert log == log_path(out)
    text = log.read_text()
    assert "server rank 0 listening" in text and "server rank 1 listening" in text
    assert "worker-iterations" not in text  # progress is for the console
