"""dist_sync training through real servers equals single-process SGD on the summed gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from realrun.ps.kv_worker import KVWorker
from realrun.training import torch_models
from realrun.training.overlap import batch_seed
from realrun.training.worker_loop import Trainer
from tests.support.realrun_inprocess import InProcessJob
from tests.support.training import (
    BATCH,
    ITERATIONS,
    LR,
    MOMENTUM,
    PS_WORKERS,
    SEED,
    WD,
)
from tests.support.training import ps_plan as plan

SERVERS = 2
WORKERS = PS_WORKERS
BOUND = 100_000  # fc1.weight (401,408 elements) is split over both servers, the rest is not


def reference_weights(gpus: int) -> list[np.ndarray]:
    """torch.optim.SGD on one process: weight decay inside the momentum, momentum buffer
    started at the first gradient, which equals MXNet's rule for a constant learning rate."""
    m = torch_models
    torch.manual_seed(SEED)
    model = m.build("mlp")
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    pool = min(4, ITERATIONS)
    for it in range(ITERATIONS):
        summed = [torch.zeros_like(p) for p in model.parameters()]
        for rank in range(WORKERS):
            for replica in range(gpus):
                gen = torch.Generator().manual_seed(batch_seed(SEED, rank, replica, it % pool))
                x, y = m.synthetic_batch("mlp", BATCH, gen)
                model.zero_grad()
                m.loss(model(x), y).backward()
                for s, p in zip(summed, model.parameters(), strict=True):
                    s += p.grad
        for s, p in zip(summed, model.parameters(), strict=True):
            p.grad = s / (WORKERS * gpus)
        opt.step()
    return [p.detach().numpy().copy() for p in model.parameters()]


@pytest.mark.slow
@pytest.mark.parametrize("gpus", [1, 2])
def test_dist_sync_training_equals_single_process_sgd_on_summed_gradients(gpus):
    """With 2 "GPUs" per worker the host first sums its two replicas' gradients."""

    def train(po):
        trainer = Trainer(KVWorker(po, bigarray_bound=BOUND), plan(gpus), torch_models)
        timings = trainer.run()
        return trainer.weights(), timings

    with InProcessJob(WORKERS, SERVERS) as job:
        results = job.run_workers(train)
    expected = reference_weights(gpus)
    for weights, timings in results:
        assert [t.iteration for t in timings] == list(range(ITERATIONS))
        for got, want in zip(weights, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-6)
    # Both servers hold a half of fc1.weight and saw one update per iteration.
    fc1 = [s.slices[(0, start)] for s, start in zip(job.servers, (0, 200_704), strict=True)]
    assert [(x.start, x.stop, x.updates) for x in fc1] == [
        (0, 200_704, ITERATIONS),
        (200_704, 401_408, ITERATIONS),
    ]
    assert job.exit_code == 0
