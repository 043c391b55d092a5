"""A processor-sharing queue (simscale.des.sharing): jobs in progress share its rate equally."""

from __future__ import annotations

import pytest
import simpy

from simscale.des.sharing import SharedQueue


def _finish_times(arrivals: list[tuple[float, float]]) -> list[float]:
    """Finish time of each (arrival s, work s) job on one shared queue."""
    env = simpy.Environment()
    q = SharedQueue(env, "q")
    done: list[float] = [0.0] * len(arrivals)

    def submit(i: int, at: float, work: float):
        yield env.timeout(at)
        yield q.run(work)
        done[i] = env.now

    for i, (at, work) in enumerate(arrivals):
        env.process(submit(i, at, work))
    env.run()
    return done


def test_a_lone_job_runs_at_the_full_rate() -> None:
    assert _finish_times([(0.0, 2.0)]) == [pytest.approx(2.0)]


def test_jobs_started_together_share_the_rate() -> None:
    """1 s and 3 s of work from t=0: both at half rate until the first is done at 2 s (1 s of
    work each), then the second alone finishes its last 2 s at 4 s."""
    assert _finish_times([(0.0, 1.0), (0.0, 3.0)]) == [pytest.approx(2.0), pytest.approx(4.0)]


def test_a_small_job_is_not_held_up_by_a_large_one_in_progress() -> None:
    """4 s of work from t=0, then 0.5 s from t=1: the small one shares the rate from 1 s and is
    done at 2 s, where FIFO would finish it at 4.5 s; the large one did 1 + 0.5 s of work by
    then and finishes its 2.5 s left alone at 4.5 s."""
    small_done, large_done = 2.0, 4.5
    got = _finish_times([(0.0, 4.0), (1.0, 0.5)])
    assert got == [pytest.approx(large_done), pytest.approx(small_done)]


def test_n_equal_jobs_all_finish_after_n_times_the_work() -> None:
    assert _finish_times([(0.0, 0.25)] * 4) == [pytest.approx(1.0)] * 4


def test_busy_time_counts_periods_with_work_in_progress() -> None:
    """Busy 0-2 s and 3-4 s; the window 1-3.5 s sees 1 + 0.5 s of it."""
    env = simpy.Environment()
    q = SharedQueue(env, "q")

    def jobs():
        yield q.run(2.0)
        yield env.timeout(1.0)
        yield q.run(1.0)

    env.process(jobs())
    env.run()
    assert q.busy_within(1.0, 3.5) == pytest.approx(1.5)
    assert q.busy_within(0.0, 4.0) == pytest.approx(3.0)
