"""Emulated compute: a measured per-layer profile, replayed by workers against real servers."""

from __future__ import annotations

import statistics
import time

import pytest

from realrun.ps.kv_worker import KVWorker
from realrun.ps.optimizer import SGD
from realrun.training import torch_models
from realrun.training.compute_profile import ComputeProfile, LayerTime, measure
from realrun.training.replay import ReplayTrainer
from realrun.training.worker_loop import TrainPlan
from tests.support.realrun_inprocess import InProcessJob


def test_the_mlp_profile_has_its_three_layers_and_gradients_from_the_last_layer_first():
    p = measure(torch_models, "mlp", batch=16, iterations=3, warmup=1)
    assert [x.keys for x in p.layers] == [(0, 1), (2, 3), (4, 5)]
    assert p.key_elements == (784 * 512, 512, 512 * 256, 256, 256 * 10, 10)
    assert all(x.forward_s > 0 and x.gap_before_s >= 0 for x in p.layers)
    # Backward produces fc3's gradients before fc2's before fc1's, all within backward.
    weights = [p.grad_ready_s[k] for k in (4, 2, 0)]
    assert weights == sorted(weights)
    assert 0 < max(p.grad_ready_s) <= p.backward_s
    assert ComputeProfile.from_dict(p.to_dict()) == p


# Three layers of 20, 10 and 5 ms forward; backward 60 ms with gradients ready at 10, 30, 55 ms.
PROFILE = ComputeProfile(
    model="mlp",
    batch=8,
    device="cpu",
    threads=1,
    layers=(
        LayerTime((0, 1), 0.0, 0.020),
        LayerTime((2, 3), 0.0, 0.010),
        LayerTime((4, 5), 0.0, 0.005),
    ),
    forward_tail_s=0.0,
    grad_ready_s=(0.055, 0.055, 0.030, 0.030, 0.010, 0.010),
    backward_s=0.060,
    key_elements=(784 * 512, 512, 512 * 256, 256, 256 * 10, 10),
)


@pytest.mark.slow
@pytest.mark.parametrize("dilation", [1.0, 2.0])
def test_replayed_iterations_last_as_long_as_the_profile_times_the_dilation(dilation):
    iterations = 5
    plan = TrainPlan("mlp", 8, 1, iterations, 0, True, SGD(0.1))

    def replay(po):
        started = time.perf_counter()
        timings = ReplayTrainer(KVWorker(po), plan, PROFILE, dilation).run()
        return timings, time.perf_counter() - started

    with InProcessJob(2, 2) as job:
        results = job.run_workers(replay)
    expected = PROFILE.iteration_s * dilation  # 95 ms of compute per iteration, dilated
    for timings, _ in results:
        assert [t.loss for t in timings] == [None] * iterations
        compute = [t.compute_s for t in timings]
        assert min(compute) >= expected * 0.99  # the waits are never shorter than measured
        assert statistics.median(compute) < expected + 0.03  # nor much longer
    # Every key really went through the servers once per iteration.
    updates = sorted(s.updates for srv in job.servers for s in srv.slices.values())
    assert updates == [iterations] * 6
