"""Timing checks that stay honest on a loaded machine.

A test that bounds how long something takes (a child ending, a frame crossing a delay wire)
fails on a machine whose cores are taken by other programs for a reason that is not the code's.
``CpuWindow`` measures this machine's all-core busy share over the timed stretch, from the same
counters as the emulated cluster's load verdict (``realrun.emulated.machine_load``); ``within``
passes a bound that was met, fails one missed on a machine with cores to spare, and skips, with
the figures in the reason, one missed while the machine was saturated.
"""

from __future__ import annotations

from types import TracebackType

import pytest

from realrun.emulated.machine_load import MAX_CPU_BUSY, read_cpu_ticks


class CpuWindow:
    """This machine's all-core busy share between entering and leaving the ``with`` block."""

    def __init__(self) -> None:
        self._start = read_cpu_ticks()
        self._end: tuple[int, int] | None = None

    def __enter__(self) -> CpuWindow:
        self._start = read_cpu_ticks()
        self._end = None
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._end = read_cpu_ticks()

    @property
    def busy(self) -> float:
        """Share of all cores' time spent busy (up to now while the block runs)."""
        b1, t1 = self._end or read_cpu_ticks()
        b0, t0 = self._start
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0

    @property
    def saturated(self) -> bool:
        return self.busy > MAX_CPU_BUSY


def within(took_s: float, limit_s: float, window: CpuWindow, what: str) -> None:
    """Pass if ``took_s < limit_s``; otherwise skip when ``window`` saw the machine saturated,
    else fail. ``what`` names the timed thing in the message."""
    if took_s < limit_s:
        return
    message = (
        f"{what} took {took_s:.3f} s (bound {limit_s:.3f} s) while this machine's cores were "
        f"{window.busy:.0%} busy"
    )
    if window.saturated:
        pytest.skip(
            f"{message}: saturated (over {MAX_CPU_BUSY:.0%}), so the time is not the code's"
        )
    pytest.fail(message)
