"""The overlapped iteration both trainers share: every ready gradient reaches the subclass's hook,
last layer first; a module's forward waits for its own keys; the last step waits for them all;
the time spent waiting is the iteration's exposed communication, the rest its compute."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import pytest
import torch

from realrun.training import torch_models
from realrun.training.overlap import OverlapTrainer, synthetic_batches

ITERATIONS, BATCH, SEED = 3, 4, 1
CPU2 = [torch.device("cpu")] * 2  # two replicas on the CPU
KEYS = 6  # the MLP 784-512-256-10: three layers, each a weight and a bias
WAIT_S = 0.01  # what the fake communication blocks on each awaited key that was sent


class Recorder(OverlapTrainer):
    """A trainer whose communication only logs: a ready gradient is 'sent', and waiting for a
    sent key sleeps WAIT_S."""

    def __init__(self) -> None:
        super().__init__(0, torch_models, "mlp", SEED, CPU2)
        self.ready: list[list[tuple[int, int]]] = [[] for _ in range(ITERATIONS)]
        self.awaited: list[list[int]] = [[] for _ in range(ITERATIONS)]
        self.sent: set[int] = set()
        self.slept_s = [0.0] * ITERATIONS

    def _grad_hook(self, key: int, replica: int) -> Callable[[torch.Tensor], None]:
        def ready(param: torch.Tensor) -> None:
            param.grad = None
            self.ready[self._iteration].append((key, replica))
            self.sent.add(key)

        return ready

    def _await(self, keys: Iterable[int]) -> None:
        for k in keys:
            self.awaited[self._iteration].append(k)
            if k in self.sent:
                self.sent.discard(k)
                t = time.perf_counter()
                time.sleep(WAIT_S)
                waited = time.perf_counter() - t
                self._wait_s += waited
                self.slept_s[self._iteration] += waited

    def train(self):
        self._hook()
        batches = synthetic_batches(self.models, "mlp", BATCH, SEED, 0, 0, self.devices, 3)
        return self._iterate(batches, ITERATIONS, lambda t: None)


@pytest.fixture(scope="module")
def trained() -> tuple[Recorder, list]:
    trainer = Recorder()
    return trainer, trainer.train()


def test_every_replicas_gradient_of_every_key_reaches_the_hook_last_layer_first(trained):
    trainer, _ = trained
    for ready in trainer.ready:
        assert sorted(ready) == [(k, r) for k in range(KEYS) for r in range(2)]
        first_replica = [k for k, r in ready if r == 0]
        # backward runs from the output: fc3's keys (4, 5) before fc2's (2, 3), fc1's (0, 1)
        assert first_replica.index(5) < first_replica.index(2) < first_replica.index(0)


def test_a_forward_waits_for_its_own_keys_and_the_last_step_for_every_key(trained):
    trainer, _ = trained
    keys = list(range(KEYS))
    # Only replica 0's modules carry the pre-hooks: each forward of it asks for each module's
    # own keys, in layer order; the last iteration then asks for every key once more.
    for awaited in trainer.awaited[:-1]:
        assert awaited == keys
    assert trainer.awaited[-1] == keys + keys
    assert trainer.sent == set()  # nothing is left in flight after the run


def test_the_time_spent_waiting_is_exposed_communication_and_the_rest_compute(trained):
    trainer, timings = trained
    assert [t.iteration for t in timings] == list(range(ITERATIONS))
    for t, slept in zip(timings, trainer.slept_s, strict=True):
        assert t.wait_s == pytest.approx(slept)
        assert t.compute_s == pytest.approx(t.total_s - t.wait_s)
        assert t.compute_s > 0 and t.loss is not None
    # iteration 0 waits for nothing sent before it; iteration 1 for the keys iteration 0
    # sent; the last iteration also for its own at the end
    assert timings[0].wait_s == 0.0
    assert timings[1].wait_s >= KEYS * WAIT_S
    assert timings[-1].wait_s >= 2 * KEYS * WAIT_S


def test_the_record_names_the_device_then_how_gradients_combine(trained):
    trainer, _ = trained
    described = trainer._describe({"gradient_aggregation": "logged"})
    assert list(described) == [
        "device",
        "device_name",
        "replicas",
        "gradient_aggregation",
        "torch_threads",
        "keys",
    ]
    assert described["device"] == "cpu" and described["replicas"] == 2
    assert described["keys"] == KEYS
