"""An emulated device for DDP and FSDP (realrun.allreduce.emulated_model): layers that take
their replayed times, hold the zoo's arrays and yield fixed gradients, under real DDP and FSDP
over gloo sending the bytes of the mode's traffic formula."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is in the realrun extra")

import torch.multiprocessing as mp  # noqa: E402

from realrun.allreduce.data_parallel import (  # noqa: E402
    DataParallelPlan,
    DataParallelTrainer,
)
from realrun.allreduce.emulated_model import (  # noqa: E402
    EmulatedBlock,
    EmulatedModels,
    LayerSeconds,
    measured_seconds,
)
from realrun.training.compute_profile import ComputeProfile, LayerTime  # noqa: E402
from realrun.training.emulated_compute import GRADIENT_SCALE  # noqa: E402
from simscale.zoo import ModelSpec  # noqa: E402
from simscale.zoo.fsdp_units import root_layers  # noqa: E402
from tests.support.paths import ROOT  # noqa: E402
from tests.support.training import loopback_data_parallel_group  # noqa: E402

MODEL, SEED, LR, RANKS, ITERATIONS, WARMUP = "gpt2_tiny", 3, 0.1, 2, 3, 1
SCENARIO = str(ROOT / "scenarios" / "emulated" / "gpt2-tiny-ddp.yaml")


def spec() -> ModelSpec:
    from simscale.zoo import get

    return get(MODEL)


def tiny() -> ModelSpec:
    """Embeddings, two blocks, a head: the shape of a zoo transformer, a few hundred floats."""
    from simscale.zoo import Layer, ParamArray

    def layer(name: str, *sizes: int) -> Layer:
        return Layer(
            name, 1.0, tuple(ParamArray(f"{name}.a{i}", (n,)) for i, n in enumerate(sizes))
        )

    return ModelSpec(
        "tiny",
        (layer("embeddings", 64), layer("h.0", 16, 8), layer("h.1", 16, 8), layer("head", 4)),
    )


def seconds(forward_s: float = 0.0, backward_s: float = 0.0, model: ModelSpec | None = None):
    n = len((model or spec()).layers)
    return LayerSeconds((forward_s,) * n, (backward_s,) * n, "test", 1.0)


def test_parameters_are_the_zoo_arrays_in_key_order() -> None:
    """DDP buckets and FSDP flattens ``parameters()``: they must be the zoo's arrays."""
    model = EmulatedModels(spec(), seconds(), SEED, 0).build(MODEL)
    assert [p.numel() for p in model.parameters()] == [a.elements for a in spec().arrays]


def test_blocks_are_fsdp_units_and_the_rest_is_the_root() -> None:
    model = EmulatedModels(tiny(), seconds(model=tiny()), SEED, 0).build("tiny")
    blocks = [i for i, layer in enumerate(model.layers) if isinstance(layer, EmulatedBlock)]
    assert root_layers(tiny()) == [0, 3] and blocks == [1, 2]


def test_forward_and_backward_take_their_times_once_per_layer() -> None:
    """Each layer sleeps its forward, then (in reverse) its backward: the step takes at
    least their sum, and each layer runs once each way."""
    fwd, bwd = 0.01, 0.02
    model = EmulatedModels(tiny(), seconds(fwd, bwd, tiny()), SEED, 0).build("tiny")
    n = len(model.layers)
    x, y = EmulatedModels.synthetic_batch(None, MODEL, 4)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    out = model(x)
    t1 = time.perf_counter()
    EmulatedModels.loss(out, y).backward()
    t2 = time.perf_counter()
    assert t1 - t0 >= n * fwd
    assert t2 - t1 >= n * bwd
    assert all(layer.forward_calls == 1 and layer.backward_calls == 1 for layer in model.layers)


def test_gradients_are_fixed_and_seeded_by_rank() -> None:
    """Every step yields the same gradients; two ranks yield different ones."""

    def grads(rank: int) -> list[torch.Tensor]:
        model = EmulatedModels(tiny(), seconds(model=tiny()), SEED, rank).build("tiny")
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            EmulatedModels.loss(model(torch.zeros(1)), torch.zeros(1)).backward()
        return [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]

    a, b = grads(0), grads(1)
    rng = np.random.default_rng([SEED, 0])
    first = rng.standard_normal(64, dtype=np.float32) * GRADIENT_SCALE
    torch.testing.assert_close(a[0], torch.from_numpy(first))
    assert not torch.equal(a[0], b[0])


def test_measured_profile_regrouped_by_layer() -> None:
    """Two layers of keys (0) and (1, 2): layer 1's forward has the loss added, its backward
    ends when key 2 is ready (0.3 s); layer 0's when key 0 is (1.0 s) and it takes the rest of
    the measured backward (1.2 s)."""
    from simscale.zoo import Layer, ParamArray

    arrays = [ParamArray(f"a{i}", (4,)) for i in range(3)]
    two = ModelSpec("two", (Layer("l0", 1.0, (arrays[0],)), Layer("l1", 1.0, arrays[1:])))
    profile = ComputeProfile(
        "two",
        1,
        "cpu",
        1,
        (LayerTime((0,), 0.1, 0.2), LayerTime((1, 2), 0.0, 0.3)),
        0.05,
        (1.0, 0.2, 0.3),
        1.2,
        (4, 4, 4),
    )
    got = measured_seconds(two, profile, 2.0)
    assert got.forward_s == pytest.approx((0.6, 0.7))
    assert got.backward_s == pytest.approx((1.8, 0.6))


def test_any_zoo_model_runs_emulated_and_times_are_the_models_dilated() -> None:
    """An emulated rank needs no torch twin (its layers come from the zoo spec): a BERT job
    under FSDP gets a plan, and its layer times are simscale's compute model's times D."""
    from realrun.allreduce.emulated_model import rank_seconds
    from realrun.allreduce.worker import data_parallel_plan
    from simscale.model.compute import layer_times
    from simscale.spec.costs import CostModel
    from simscale.spec.scenario import load_scenario

    sets = [
        "model.name=bert_base",
        "kvstore.mode=zero",
        "realrun.compute=emulated",
        "realrun.compute_times=model",
        "realrun.dilation=3",
    ]
    scenario = load_scenario(SCENARIO, sets)
    assert data_parallel_plan(scenario, 1, 2).host == 1
    got = rank_seconds(scenario, 1, None)
    tr = scenario.training
    want = layer_times(scenario.model_spec(), "cpu", "fp32", tr.batch_per_gpu, CostModel())
    assert got.forward_s == pytest.approx(3 * want.forward_s)
    assert got.backward_s == pytest.approx(3 * want.backward_s)


def test_a_comm_hook_realrun_does_not_register_is_refused() -> None:
    """kvstore.ddp.comm_hook_passes costs a simulated DDP its hook's passes; realrun's DDP
    registers no hook, so it says so instead of measuring a run without them."""
    from realrun.allreduce.worker import data_parallel_plan
    from simscale.spec.scenario import load_scenario

    scenario = load_scenario(SCENARIO, ["kvstore.ddp.comm_hook_passes=2"])
    with pytest.raises(ValueError, match="registers no comm hook"):
        data_parallel_plan(scenario, 0, 2)


def test_measured_times_without_a_profile_are_a_one_line_error() -> None:
    from realrun.allreduce.emulated_model import rank_seconds
    from simscale.spec.scenario import load_scenario

    scenario = load_scenario(SCENARIO, ["realrun.compute=emulated"])  # cpu: auto is measured
    with pytest.raises(ValueError, match="no --compute-profile was given"):
        rank_seconds(scenario, 0, None)


# ---- real DDP and FSDP over gloo, one process per rank ----


def plan(mode: str, rank: int, stage: int, store_port: int) -> DataParallelPlan:
    return DataParallelPlan(
        mode=mode,
        model=MODEL,
        batch_per_gpu=2,
        seq_len=None,
        micro_batches=1,
        host=rank,
        replica=0,
        iterations=ITERATIONS,
        warmup=WARMUP,
        seed=SEED,
        learning_rate=LR,
        momentum=0.0,
        weight_decay=0.0,
        bucket_mb=1.0,
        first_bucket_mb=0.5,
        stage=stage,
        store_port=store_port,
    )


def _rank(rank: int, port: int, mode: str, stage: int, out: str) -> None:
    group = loopback_data_parallel_group(rank, RANKS, port, timeout_s=60)
    torch.set_num_threads(1)
    models = EmulatedModels(spec(), seconds(0.001, 0.002), SEED, rank)
    trainer = DataParallelTrainer(group, rank, plan(mode, rank, stage, port), models)
    trainer.run()
    torch.save(
        {"weights": trainer.weights(), "sent": trainer.sent_bytes_measured}, f"{out}/r{rank}.pt"
    )
    group.barrier().wait()


def run_ranks(tmp_path, mode: str, stage: int = 3) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(port, mode, stage, str(tmp_path)), nprocs=RANKS, join=True)
    return [torch.load(tmp_path / f"r{r}.pt", weights_only=False) for r in range(RANKS)]


def expected_weights() -> list[torch.Tensor]:
    """Plain SGD on the mean of the ranks' fixed gradients, ITERATIONS times."""
    torch.manual_seed(SEED)
    start = EmulatedModels(spec(), seconds(), SEED, 0).build(MODEL)
    per_rank = [
        EmulatedModels(spec(), seconds(), SEED, r).build(MODEL).fixed_gradients()
        for r in range(RANKS)
    ]
    mean = [sum(g) / RANKS for g in zip(*per_rank, strict=True)]
    start = [p.detach() for p in start.parameters()]
    return [w - ITERATIONS * LR * g for w, g in zip(start, mean, strict=True)]


def gradient_bytes(blocks_only: bool = False) -> int:
    root = set(root_layers(spec()))
    return sum(
        a.elements * 4
        for a, layer in zip(spec().arrays, spec().array_layer, strict=True)
        if not blocks_only or layer not in root
    )


@pytest.mark.slow
def test_ddp_over_emulated_layers_keeps_replicas_equal(tmp_path) -> None:
    """Two DDP ranks end with the same weights, those of SGD on the mean of their gradients,
    and each sends a ring all-reduce's 2(n-1)/n of the gradients' bytes per step."""
    ranks = run_ranks(tmp_path, "ddp")
    want = expected_weights()
    for r in ranks:
        for got, w in zip(r["weights"], want, strict=True):
            torch.testing.assert_close(got, w)
    for r in ranks:
        per_step = r["sent"] / (ITERATIONS - WARMUP)
        assert per_step == pytest.approx(2 * (RANKS - 1) / RANKS * gradient_bytes(), rel=0.02)


@pytest.mark.slow
def test_fsdp_full_shard_over_emulated_layers(tmp_path) -> None:
    """FULL_SHARD accepts the emulated layers: the ranks end with SGD's weights on the mean
    gradient, and send gloo's 3(n-1)/n of the gradients' bytes plus the blocks' second gather
    per step (tests/realrun/allreduce/test_data_parallel.py's formula)."""
    ranks = run_ranks(tmp_path, "zero", 3)
    want = expected_weights()
    for r in ranks:
        for got, w in zip(r["weights"], want, strict=True):
            torch.testing.assert_close(got, w)
    n = RANKS
    formula = 3 * (n - 1) / n * gradient_bytes() + (n - 1) / n * gradient_bytes(blocks_only=True)
    for r in ranks:
        assert r["sent"] / (ITERATIONS - WARMUP) == pytest.approx(formula, rel=0.005)
