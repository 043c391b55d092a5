"""All-reduce training (realrun.allreduce) equals single-process SGD on the averaged gradients.

The ranks run as threads of this process, each with its own gloo process group over real TCP
on 127.0.0.1, so the test needs neither subprocesses nor a GPU and takes a few seconds.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from realrun.allreduce.fusion import agreed_order, fuse
from realrun.allreduce.layout import RankSlot, process_layout
from realrun.allreduce.trainer import sgd_step
from realrun.ps.optimizer import SGD
from realrun.training import torch_models
from realrun.training.overlap import batch_seed
from tests.support.training import (
    BATCH,
    ITERATIONS,
    LR,
    MOMENTUM,
    SEED,
    WD,
    train_in_threads,
)
from tests.support.training import allreduce_scenario as scenario


def reference_weights(hosts: int, gpus: int) -> list[np.ndarray]:
    """torch.optim.SGD on one process over every GPU's batch, gradients averaged (weight
    decay inside the momentum: MXNet's rule for a constant learning rate)."""
    m = torch_models
    torch.manual_seed(SEED)
    model = m.build("mlp")
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    for it in range(ITERATIONS):
        summed = [torch.zeros_like(p) for p in model.parameters()]
        for host in range(hosts):
            for replica in range(gpus):
                gen = torch.Generator().manual_seed(batch_seed(SEED, host, replica, it % 4))
                x, y = m.synthetic_batch("mlp", BATCH, gen)
                model.zero_grad()
                m.loss(model(x), y).backward()
                for s, p in zip(summed, model.parameters(), strict=True):
                    s += p.grad
        for s, p in zip(summed, model.parameters(), strict=True):
            p.grad = s / (hosts * gpus)
        opt.step()
    return [p.detach().numpy().copy() for p in model.parameters()]


# mlp: fc1.weight 1.6 MB, fc1.bias 2 KB, fc2.weight 20 KB, fc2.bias 40 B. A 0.1 MB threshold
# puts fc1.weight alone in its buffer and fuses the rest; 64 MB fuses what is ready together.
@pytest.mark.parametrize(
    ("hosts", "gpus", "algorithm", "fusion_mb", "cycle_ms"),
    [
        (2, 1, "hierarchical", 64, 5),
        (2, 2, "hierarchical", 0.1, 0),
        (2, 2, "ring", 0.1, 1),
        (3, 1, "ring", 64, 0),
    ],
)
def test_allreduce_training_equals_single_process_sgd_on_averaged_gradients(
    hosts, gpus, algorithm, fusion_mb, cycle_ms
):
    """2-4 ranks; hierarchical ranks sum two replicas before the collective, ring ranks are
    one GPU each; every rank ends with the reference weights."""
    results = train_in_threads(hosts, gpus, algorithm, fusion_mb * 1e6, cycle_ms * 1e-3)
    expected = reference_weights(hosts, gpus)
    assert len(results) == (hosts * gpus if algorithm == "ring" else hosts)
    for trainer, timings in results:
        assert [t.iteration for t in timings] == list(range(ITERATIONS))
        assert trainer.collectives >= ITERATIONS
        for got, want in zip(trainer.weights(), expected, strict=True):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=2e-6)


def test_fusion_packs_in_order_and_a_big_tensor_alone():
    assert fuse([3, 2, 1, 0], [10, 100, 10, 10], 25) == [[3, 2], [1], [0]]
    assert fuse([3, 2, 1, 0], [10, 10, 100, 10], 1e9) == [[3, 2, 1, 0]]
    assert fuse([], [], 25) == []


def test_agreed_order_is_backward_order_of_keys_ready_everywhere():
    assert agreed_order([1, 0, 1, 1]) == [3, 2, 0]


def test_layout_one_process_per_host_or_per_gpu():
    assert process_layout(scenario(2, 2, "hierarchical")) == (
        RankSlot(0, 0, 0, 2),
        RankSlot(1, 1, 0, 2),
    )
    assert [(s.rank, s.host, s.first_replica) for s in process_layout(scenario(2, 2, "ring"))] == [
        (0, 0, 0),
        (1, 0, 1),
        (2, 1, 0),
        (3, 1, 1),
    ]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_torch_update_is_the_servers_sgd_rule(momentum):
    rng = np.random.default_rng(0)
    opt = SGD(0.1, momentum, 1e-2, rescale_grad=0.25)
    w, g = rng.standard_normal(50, dtype=np.float32), rng.standard_normal(50, dtype=np.float32)
    state_np = None
    weight = torch.from_numpy(w.copy())
    state_t = None
    for _ in range(3):
        w, state_np = opt.update(w, g, state_np)
        state_t = sgd_step(opt, weight, torch.from_numpy(g), state_t)
    np.testing.assert_allclose(weight.numpy(), w, rtol=1e-6, atol=1e-7)
