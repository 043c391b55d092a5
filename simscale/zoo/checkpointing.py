"""Activation checkpointing: what a transformer block stores for backward and what it recomputes.

Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
sections 4.1 and 5, no tensor or sequence parallelism), per block of ``s`` tokens, width ``h``,
``a`` heads, per sample at 16-bit activations:

- ``none``: the block stores 34·s·h + 5·a·s² bytes (eq. 2) and recomputes nothing.
- ``selective``: the s x s part (Q·Kᵀ, softmax, its dropout, attention over V) is not stored
  but recomputed in backward: 34·s·h bytes kept; the recompute costs the attention's sequence
  term, 4·s²·h FLOPs (the zoo's count; the paper's "attention" FLOPs), once more.
- ``full``: each block keeps only its input, 2·s·h bytes, and reruns its whole forward in
  backward (one extra forward per block); while a block is recomputed and back-propagated it
  holds its full activations once more, so the peak adds the largest block's ``none`` bytes.

Layers that are not blocks (embeddings, the head with its logits) are not checkpointed, as
torch's ``checkpoint_wrapper`` applied per block (FSDP, torchtitan, llm-foundry) leaves them.
With flash attention the scores are never stored (simscale.zoo.memory), so ``selective`` then
saves no memory; its recompute is still counted, as the policy reruns the core attention.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from simscale.zoo import ModelSpec

Checkpointing = Literal["none", "selective", "full"]
MODES: tuple[str, ...] = ("none", "selective", "full")


def is_block(layer_input_bytes: float) -> bool:
    """Only transformer blocks carry an input size (simscale.zoo.spec.Layer.input_bytes)."""
    return layer_input_bytes > 0


def checkpointed(model: ModelSpec, mode: str) -> ModelSpec:
    """``model`` with each block's backward recompute set (``recompute_flops``) for ``mode``."""
    if mode == "none":
        return model
    if mode not in MODES:
        raise ValueError(f"activation checkpointing {mode!r}: expected one of {', '.join(MODES)}")
    layers = tuple(
        replace(layer, recompute_flops=_recompute(layer.fwd_flops, layer.attention_flops, mode))
        if is_block(layer.input_bytes)
        else layer
        for layer in model.layers
    )
    return replace(model, layers=layers)


def _recompute(fwd_flops: float, attention_flops: float, mode: str) -> float:
    return fwd_flops if mode == "full" else attention_flops


def stored_activation_bytes(model: ModelSpec, mode: str, flash_attention: bool) -> float:
    """Peak activation bytes per sample at 16-bit activations under ``mode`` (module doc)."""
    stored, largest_block = 0.0, 0.0
    for layer in model.layers:
        scores = layer.attention_score_bytes if flash_attention else 0.0
        full = layer.activation_bytes - scores
        if not is_block(layer.input_bytes) or mode == "none":
            stored += full
        elif mode == "selective":
            stored += layer.activation_bytes - layer.attention_score_bytes
        else:
            stored += layer.input_bytes
            largest_block = max(largest_block, full)
    return stored + largest_block
