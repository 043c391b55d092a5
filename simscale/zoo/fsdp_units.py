"""Which layers of a model FSDP wraps as units of their own, and which stay in its root unit.

A property of the model's structure, shared by the simulator's sharded modes
(simscale.comm.sharded) and realrun's emulated FSDP ranks (realrun.allreduce.emulated_model).
"""

from __future__ import annotations

import re

from simscale.zoo.spec import ModelSpec

# A block is a zoo layer named with its index: ``transformer.h.3``, ``encoder_layer_3``.
_BLOCK = re.compile(r"[._]\d+$")


def root_layers(model: ModelSpec) -> list[int]:
    """The layers FSDP's root unit holds when each transformer block is wrapped (realrun's
    ``ModuleWrapPolicy({Block})``, llm-foundry's and torchtitan's per-block wrapping):
    everything that is not a block, such as the embeddings, the final norm and the head. A
    model with no blocks (the convolutional zoo) is wrapped layer by layer: no root."""
    blocks = [bool(_BLOCK.search(layer.name)) for layer in model.layers]
    if not any(blocks):
        return []
    return [i for i, block in enumerate(blocks) if not block]
