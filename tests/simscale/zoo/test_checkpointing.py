"""Activation checkpointing (simscale.zoo.checkpointing): Korthikanti et al. 2022's memory per
block and the forward FLOPs each mode recomputes in backward."""

from __future__ import annotations

import pytest

from simscale import zoo
from simscale.model.compute import layer_times
from simscale.spec.config import ConfigError
from simscale.spec.costs import CostModel
from simscale.spec.scenario import scenario_from_dict
from simscale.zoo.checkpointing import checkpointed, stored_activation_bytes

# GPT-2 124M at 1,024 tokens: h = 768, a = 12, 12 blocks.
S, H, A, BLOCKS = 1024, 768, 12, 12


def _gpt2() -> zoo.ModelSpec:
    return zoo.get("gpt2", S)


def _not_blocks(model: zoo.ModelSpec) -> float:
    return sum(layer.activation_bytes for layer in model.layers if layer.input_bytes == 0)


def test_no_checkpointing_stores_korthikanti_equation_2_per_block() -> None:
    model = _gpt2()
    per_block = 34 * S * H + 5 * A * S * S
    assert stored_activation_bytes(model, "none", False) == _not_blocks(model) + BLOCKS * per_block


def test_selective_drops_the_attention_scores_and_flash_already_did() -> None:
    model = _gpt2()
    expected = _not_blocks(model) + BLOCKS * 34 * S * H
    assert stored_activation_bytes(model, "selective", False) == expected
    assert stored_activation_bytes(model, "selective", True) == expected
    assert stored_activation_bytes(model, "none", True) == expected


def test_full_keeps_each_block_input_and_one_block_being_recomputed() -> None:
    model = _gpt2()
    one_block = 34 * S * H + 5 * A * S * S
    expected = _not_blocks(model) + BLOCKS * 2 * S * H + one_block
    assert stored_activation_bytes(model, "full", False) == expected


def test_selective_recomputes_attention_and_full_recomputes_each_block_forward() -> None:
    model = _gpt2()
    selective, full = checkpointed(model, "selective"), checkpointed(model, "full")
    blocks = [i for i, layer in enumerate(model.layers) if layer.input_bytes > 0]
    assert len(blocks) == BLOCKS
    for i in blocks:
        assert selective.layers[i].recompute_flops == 4.0 * S * S * H
        assert full.layers[i].recompute_flops == model.layers[i].fwd_flops
    for i in set(range(len(model.layers))) - set(blocks):  # embeddings and head: never
        assert selective.layers[i].recompute_flops == full.layers[i].recompute_flops == 0
    assert checkpointed(model, "none") is model


def test_full_checkpointing_adds_one_block_forward_to_its_backward_time() -> None:
    model, costs = _gpt2(), CostModel()
    plain = layer_times(model, "A100", "bf16", 4, costs)
    full = layer_times(checkpointed(model, "full"), "A100", "bf16", 4, costs)
    assert (full.forward_s == plain.forward_s).all()
    flops_per_s = 312e12 * costs.efficiency("A100", "bf16")
    for i, layer in enumerate(model.layers):
        extra = layer.fwd_flops * 4 / flops_per_s if layer.input_bytes > 0 else 0.0
        assert full.backward_s[i] == pytest.approx(plain.backward_s[i] + extra, rel=1e-12)


def _scenario(model: str, checkpointing: str, **training: object) -> dict[str, object]:
    return {
        "cluster": {"hosts": [{"count": 1, "gpus_per_host": 8, "gpu": "H100", "nic_gbps": 400}]},
        "model": model,
        "training": {
            "batch_per_gpu": 2,
            "precision": "bf16",
            "optimizer": {"type": "adam"},
            "activation_checkpointing": checkpointing,
            **training,
        },
        "kvstore": {"mode": "zero", "zero": {"stage": 3}},
    }


def test_full_checkpointing_lets_llama_8b_at_8192_tokens_fit_an_80_gb_h100() -> None:
    extra = {"seq_len": 8192, "attention": "flash"}
    with pytest.raises(ConfigError, match="does not fit"):
        scenario_from_dict(_scenario("llama3_1_8b", "none", **extra))
    s = scenario_from_dict(_scenario("llama3_1_8b", "full", **extra))
    assert s.memory_use().fits
    assert s.model_spec().layers[1].recompute_flops > 0


def test_a_model_without_transformer_blocks_refuses_checkpointing() -> None:
    with pytest.raises(ConfigError, match=r"training\.activation_checkpointing.*resnet50"):
        scenario_from_dict(_scenario("resnet50", "selective"))
