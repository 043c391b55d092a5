"""A worker's iteration (simscale.model.worker): forward waits per layer for its keys, backward
hands each layer's keys to the communicator as it goes, and the stats say what was compute,
what was blocked, and how much of that was waiting for other workers."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from simscale.model.worker import HostCopies, Worker, async_start_delay_s

MS = 1e-3


class FixedDelay:
    """A communicator whose keys come back ``delay_s`` after they are handed over, each having
    waited ``others_s`` for other workers; it notes when each key was handed over."""

    def __init__(self, env: simpy.Environment, delay_s: float, others_s: float) -> None:
        self.env, self.delay_s, self.others_s = env, delay_s, others_s
        self.handed: list[tuple[int, int, float]] = []

    def communicate(self, it: int, key: int, done) -> None:
        self.handed.append((it, key, self.env.now))
        self.env.timeout(self.delay_s).callbacks.append(lambda _e: done(self.others_s))


def two_layers(
    overlap_loss: float = 0.0, jitter: tuple[float, ...] = (1.0, 1.0)
) -> tuple[simpy.Environment, Worker, FixedDelay, list[int]]:
    """Layer 0 (key 0): forward 1 ms, backward 3 ms; layer 1 (key 1): 2 ms and 4 ms. Keys come
    back 5 ms after they are handed over, having waited 1 ms for other workers."""
    env = simpy.Environment()
    comm = FixedDelay(env, 5 * MS, 1 * MS)
    started: list[int] = []
    worker = Worker(
        env,
        0,
        [[0], [1]],
        np.array([1 * MS, 2 * MS]),
        np.array([3 * MS, 4 * MS]),
        np.array(jitter),
        comm.communicate,
        overlap_loss,
        None,
        started.append,
    )
    env.process(worker.run(len(jitter)))
    return env, worker, comm, started


def test_backward_hands_keys_over_last_layer_first_and_forward_waits_for_its_own() -> None:
    """Iteration 0: forward to 3 ms; backward of layer 1 ends at 7 ms (key 1 handed over, back
    at 12), of layer 0 at 10 ms (key 0, back at 15). Iteration 1 starts at 10 ms: layer 0's
    forward waits for key 0 until 15 ms (5 ms blocked, of which 1 ms waiting for others), runs
    to 16; layer 1's key is long back; forward ends at 18, backward at 25 ms."""
    env, worker, comm, started = two_layers()
    env.run()
    assert comm.handed == [
        (0, 1, pytest.approx(7 * MS)),
        (0, 0, pytest.approx(10 * MS)),
        (1, 1, pytest.approx(22 * MS)),
        (1, 0, pytest.approx(25 * MS)),
    ]
    st = worker.stats
    assert started == [0, 1]
    assert st.starts_s == pytest.approx([0.0, 10 * MS])
    assert st.compute_s == pytest.approx([10 * MS, 10 * MS])
    assert st.blocked_s == pytest.approx([0.0, 5 * MS])
    assert st.waited_for_others_s == pytest.approx([0.0, 1 * MS])


def test_lost_overlap_delays_a_keys_hand_over_by_a_share_of_the_backward_left() -> None:
    """overlap_loss 0.5: key 1, ready at 7 ms with 3 ms of backward left, is handed over 1.5 ms
    later (8.5 ms); key 0, ready at the end of backward, at once (10 ms)."""
    env, _worker, comm, _ = two_layers(overlap_loss=0.5, jitter=(1.0,))
    env.run()
    assert comm.handed == [(0, 1, pytest.approx(8.5 * MS)), (0, 0, pytest.approx(10 * MS))]


def test_a_slow_gpu_stretches_every_layer_of_its_iteration() -> None:
    """A jitter factor of 2 on iteration 0 doubles its compute: 20 ms, keys at 14 and 20 ms."""
    env, worker, comm, _ = two_layers(jitter=(2.0,))
    env.run()
    assert worker.stats.compute_s == pytest.approx([20 * MS])
    assert [t for _, _, t in comm.handed] == pytest.approx([14 * MS, 20 * MS])


def test_async_workers_start_spread_over_one_rough_iteration() -> None:
    """Compute 10 ms plus pushing and pulling a 10 MB model at 1 GB/s (20 ms): worker 2 of 4
    starts half of 30 ms in."""
    assert async_start_delay_s(2, 4, 10 * MS, 10e6, 1e9) == pytest.approx(15 * MS)


def test_the_copy_engine_reports_its_busy_time_only_when_it_worked() -> None:
    env = simpy.Environment()
    copies = HostCopies(env, 3, 1, on_cpu=True, device_mode=False, host_link_Bps=1e9,
                        peer_link_Bps=1e9, merge_s_per_byte=0.0)  # fmt: skip
    assert copies.utilization(0.0, 1.0) == []
    copies.queue.run(0.25)
    env.run()
    (u,) = copies.utilization(0.0, 1.0)
    assert (u.resource, u.kind, u.busy_fraction) == ("worker3.copies", "copies", 0.25)
