"""Fuzzed scenarios and run records: no traceback, no hang, no `check`-ok-then-`predict`-crash.

tests/fuzz_inputs.py makes seeded variants of every shipped scenario and committed run record
(the mutation classes that broke the commands in issue 13) and runs `simscale check` and
`predict` (scenarios) or `calibrate` and `validate` (records) on each, in a child process whose
address space is limited and where every command has an alarm. Both fuzzers run at once (CI has
two cores); a thousand variants each take about 50 s of one core (two thousand with
SIMSCALE_TEST_COSTLY=1).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.support.costly import costly_checks
from tests.support.load import CpuWindow, within
from tests.support.paths import ROOT, SUPPORT

# Each fuzzer's variants: the first thousand on every run (about 100 CPU s for both), two
# thousand with the costly checks (tests/support/costly.py). Seeded: the same variants each run.
VARIANTS = 2000 if costly_checks() else 1000
TIMEOUT_PER_COMMAND_S = 20
MEMORY_MB = 3000
FUZZ_LIMIT_S = 900  # both fuzzers together; about 50 s of one core each on an idle machine


@pytest.fixture(scope="module")
def summaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("fuzz")
    window = CpuWindow()
    procs = {}
    for kind in ("scenarios", "records"):
        procs[kind] = subprocess.Popen(
            [
                sys.executable,
                str(SUPPORT / "fuzz_inputs.py"),
                kind,
                "--variants",
                str(VARIANTS),
                "--seed",
                "13",
                "--timeout",
                str(TIMEOUT_PER_COMMAND_S),
                "--memory-mb",
                str(MEMORY_MB),
                "--out",
                str(out / f"{kind}.json"),
            ],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
    result = {}
    deadline = time.monotonic() + FUZZ_LIMIT_S
    try:
        for kind, proc in procs.items():
            try:
                _, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                # About 50 s of one core each: past the limit, either the
                # machine was saturated (skip, saying so) or a command hangs (fail).
                within(FUZZ_LIMIT_S + 1, FUZZ_LIMIT_S, window, f"the {kind} fuzzer")
                raise
            assert proc.returncode == 0, f"the {kind} fuzzer itself died: {err[-2000:]}"
            result[kind] = json.loads((out / f"{kind}.json").read_text())
    finally:
        for proc in procs.values():  # never leave a fuzzer running after the test
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return result


def _failures(summary: dict) -> str:
    return "\n".join(
        f"{f['command']} {f['variant']}: {f['outcome']}: {f['detail']}" for f in summary["failures"]
    )


@pytest.mark.slow
def test_fuzzed_scenarios_never_crash_or_hang(summaries: dict[str, dict]) -> None:
    """Every variant is either accepted (and then predicted with a finite, positive throughput,
    or refused as too long) or refused with one line; predict never crashes after check."""
    s = summaries["scenarios"]
    assert s["variants"] >= VARIANTS
    assert not s["failures"], _failures(s)
    counts = s["counts"]
    # The fuzzer exercises both sides of every command, or it tests nothing.
    for outcome in ("check:ok", "check:refused", "predict:ok", "predict:refused"):
        assert counts.get(outcome, 0) >= 50, counts
    assert counts["check:ok"] == counts["predict:ok"] + counts["predict:refused"]


@pytest.mark.slow
def test_fuzzed_records_never_crash_or_hang(summaries: dict[str, dict]) -> None:
    """calibrate and validate load damaged records as one-line errors, never a traceback."""
    r = summaries["records"]
    assert r["variants"] >= VARIANTS
    assert not r["failures"], _failures(r)
    for outcome in ("calibrate:ok", "calibrate:refused"):
        assert r["counts"].get(outcome, 0) >= 50, r["counts"]
