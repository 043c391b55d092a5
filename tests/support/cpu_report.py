"""A pytest plugin that writes each test's CPU seconds beside its wall seconds, so that which
tests belong in the fast lane is decided by work done, not by how loaded the machine was.

    python -m pytest -p tests.support.cpu_report --cpu-report /tmp/cpu.tsv -n 2 ...

Each worker appends ``nodeid<TAB>cpu_s<TAB>wall_s<TAB>markers<TAB>outcome`` lines for setup,
call and teardown together; CPU counts this process and the children it waited for
(subprocesses that a test starts and reaps), not processes left to run on their own.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-report", metavar="PATH", help="append per-test CPU and wall seconds")


def _cpu_s() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


_OUTCOMES: dict[str, str] = {}  # nodeid -> the first phase that did not pass


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.outcome != "passed":
        _OUTCOMES.setdefault(report.nodeid, f"{report.outcome} ({report.when})")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    path = item.config.getoption("--cpu-report")
    cpu0, wall0 = _cpu_s(), time.perf_counter()
    yield
    if path:
        marks = ",".join(sorted({m.name for m in item.iter_markers()}))
        outcome = _OUTCOMES.pop(item.nodeid, "passed")
        cpu_s, wall_s = _cpu_s() - cpu0, time.perf_counter() - wall0
        line = f"{item.nodeid}\t{cpu_s:.3f}\t{wall_s:.3f}\t{marks}\t{outcome}\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
