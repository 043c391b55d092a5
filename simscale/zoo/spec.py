"""What the simulator and realrun need to know about a model: its parameter arrays in order and
the forward cost of each layer.

Array order is forward (layer) order; an array's index in ``ModelSpec.arrays`` is its KVStore key,
as MXNet's Module numbers parameters, and matches torch's ``named_parameters()`` order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

BYTES_PER_ELEMENT = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


@dataclass(frozen=True)
class ParamArray:
    """One parameter array (one KVStore key): a name in torchvision's style and its shape."""

    name: str
    shape: tuple[int, ...]

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Layer:
    """A unit of compute with its forward FLOPs per sample (a multiply-add counts as 2 FLOPs) and
    the parameter arrays it owns; backward is modelled from it (see simscale.model.compute)."""

    name: str
    fwd_flops: float
    arrays: tuple[ParamArray, ...] = ()
    # Bytes of activations one sample leaves stored for backward, at 16-bit activations (twice
    # that in fp32): the memory model's activation term (simscale.zoo.memory).
    activation_bytes: float = 0.0
    # The part of activation_bytes that is attention's s x s scores (softmax, dropout mask):
    # flash attention recomputes them in backward instead of storing them.
    attention_score_bytes: float = 0.0
    # A transformer block's facts activation checkpointing needs (simscale.zoo.checkpointing):
    # the FLOPs per sample of attention's sequence term (what selective recomputation redoes)
    # and the bytes of the block's input (what full recomputation keeps, 2·s·d at 16-bit).
    attention_flops: float = 0.0
    input_bytes: float = 0.0
    # FLOPs per sample recomputed in backward (activation checkpointing; 0 without it).
    recompute_flops: float = 0.0
    # Elements per sample of the layer's batch-norm outputs (0 without batch norm): what a
    # framework running its batch norms in another layout transposes (zoo.batchnorm_layout).
    batchnorm_elements: float = 0.0
    # Bytes per sample that memory-bound kernels around the layer read plus write beyond its
    # FLOPs, in forward and in backward (layout transposes; 0 without them). They cost their bytes
    # over the device memory's bandwidth (simscale.model.compute).
    fwd_memory_bytes: float = 0.0
    bwd_memory_bytes: float = 0.0


@dataclass(frozen=True)
class ModelSpec:
    """A model as a sequence of layers; derived from an architecture definition, never typed."""

    name: str
    layers: tuple[Layer, ...]
    source: str = ""
    input_shape: tuple[int, ...] = ()
    # Tokens per sample for a sequence model (its FLOPs were counted at this length); 0 for a
    # model whose sample is an image.
    seq_len: int = 0

    @cached_property
    def arrays(self) -> tuple[ParamArray, ...]:
        return tuple(a for layer in self.layers for a in layer.arrays)

    @cached_property
    def array_layer(self) -> tuple[int, ...]:
        """For each array (key), the index of the layer that owns it."""
        return tuple(i for i, layer in enumerate(self.layers) for _ in layer.arrays)

    @property
    def params(self) -> int:
        return sum(a.elements for a in self.arrays)

    @property
    def fwd_flops(self) -> float:
        return sum(layer.fwd_flops for layer in self.layers)

    @property
    def activation_bytes(self) -> float:
        """Activation bytes one sample stores for backward, at 16-bit activations."""
        return sum(layer.activation_bytes for layer in self.layers)

    @property
    def attention_score_bytes(self) -> float:
        """The part of ``activation_bytes`` that flash attention does not store."""
        return sum(layer.attention_score_bytes for layer in self.layers)

    def nbytes(self, precision: str = "fp32") -> int:
        return self.params * BYTES_PER_ELEMENT[precision]
