"""Peak memory of a data-parallel rank (simscale.zoo.memory), against the ZeRO paper."""

from __future__ import annotations

import pytest

from simscale.zoo import Layer, ModelSpec, ParamArray
from simscale.zoo.memory import GIB, memory_use

# ZeRO (Rajbhandari et al. 2020), Figure 1: a 7.5 B-parameter model, Adam in mixed precision
# (K = 12), 64 data-parallel ranks: 120 GB per rank unsharded, 31.4 GB with the optimizer state
# partitioned (stage 1), 16.6 GB with the gradients too (stage 2), 1.9 GB with everything.
PSI = 7_500_000_000
LAYERS = 1000  # many small units, so the gathered unit of stage 3 is negligible
ZERO_FIGURE_1_GB = {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}


def _model() -> ModelSpec:
    per = PSI // LAYERS
    layers = tuple(Layer(f"l{i}", 0.0, (ParamArray(f"w{i}", (per,)),)) for i in range(LAYERS))
    return ModelSpec("zero-figure-1", layers)


@pytest.mark.parametrize(("stage", "gb"), ZERO_FIGURE_1_GB.items())
def test_model_state_per_rank_matches_zero_figure_1(stage: int, gb: float) -> None:
    use = memory_use(
        _model(),
        precision="bf16",
        optimizer="adam",
        batch_per_gpu=1,
        ranks=64,
        mode="zero" if stage else "allreduce",
        stage=stage or 1,
        prefetch=0,
        capacity_gib=80,
    )
    model_state = use.weights + use.gradients + use.optimizer_state + use.gathered
    assert model_state / 1e9 == pytest.approx(gb, rel=0.03)


def test_ddp_holds_its_gradients_twice_in_buckets() -> None:
    common = dict(precision="fp32", optimizer="sgd", batch_per_gpu=1, ranks=8, stage=1)
    ddp = memory_use(_model(), mode="ddp", prefetch=0, capacity_gib=80, **common)  # type: ignore[arg-type]
    assert ddp.gathered == ddp.gradients == PSI // LAYERS * LAYERS * 4


def test_the_refusal_names_every_term_and_the_capacity() -> None:
    use = memory_use(
        _model(),
        precision="bf16",
        optimizer="adam",
        batch_per_gpu=1,
        ranks=1,
        mode="allreduce",
        stage=1,
        prefetch=0,
        capacity_gib=80,
    )
    assert not use.fits
    text = use.describe()
    assert text.startswith(f"needs {use.total / GIB:.1f} GiB of 80 (weights 14.0 + gradients 14.0")
    assert "optimizer state 83.8" in text and "activations 0.0" in text
