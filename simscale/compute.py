"""How long a GPU takes for each layer: FLOPs over achieved FLOP/s.

The zoo gives forward FLOPs per sample per layer; the hardware preset gives the peak; the cost
model gives the achieved efficiency. Backward costs BACKWARD_TO_FORWARD times the forward.

A layer built around a 3x3 convolution runs ``winograd_3x3_speedup`` times faster than its direct
FLOP count says: cuDNN computes such convolutions with Winograd's minimal filtering (Lavin & Gray
2016), which is why VGG-16, nearly all 3x3 convolutions, trains at more than the GPU's nominal
peak while a network of 1x1 convolutions does not. The zoo folds a convolution and its batch
norm, activation and pooling into one layer, so the whole layer is sped up; strided 3x3
convolutions (a few per network) are treated like the others.

Every layer also costs ``layer_overhead_us`` per forward pass (and BACKWARD_TO_FORWARD times
that backward) whatever the batch: kernel launches and the framework's per-operator dispatch,
which is why one GPU trains ResNet-50 ten times slower per sample at batch 1 than at batch 128.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simscale.costs import BACKWARD_TO_FORWARD, CostModel
from simscale.hardware import GPUS
from simscale.zoo import ModelSpec
from simscale.zoo.spec import ParamArray


@dataclass(frozen=True)
class LayerTimes:
    """Per-layer forward and backward seconds for one GPU at one batch size."""

    forward_s: np.ndarray
    backward_s: np.ndarray

    @property
    def iteration_s(self) -> float:
        return float(self.forward_s.sum() + self.backward_s.sum())


def layer_times(
    model: ModelSpec, gpu: str, precision: str, batch: int, costs: CostModel
) -> LayerTimes:
    """Seconds per layer of forward and backward for ``batch`` samples on one ``gpu``."""
    flops_per_s = GPUS[gpu].peak_flops(precision) * costs.efficiency(gpu, precision)
    flops = np.array([layer.fwd_flops for layer in model.layers], dtype=float)
    if costs.winograd_3x3_speedup != 1.0:
        flops = np.where(winograd_layers(model), flops / costs.winograd_3x3_speedup, flops)
    fwd = flops * batch / flops_per_s
    if costs.layer_overhead_us > 0 and gpu != "cpu":
        fwd = fwd + costs.layer_overhead_us * 1e-6
    return LayerTimes(forward_s=fwd, backward_s=fwd * BACKWARD_TO_FORWARD)


def winograd_layers(model: ModelSpec) -> np.ndarray:
    """For each layer, whether it is built around a 3x3 convolution (a (out, in, 3, 3) weight)."""
    return np.array([_has_3x3_conv(layer.arrays) for layer in model.layers], dtype=bool)


def _has_3x3_conv(arrays: tuple[ParamArray, ...]) -> bool:
    return any(len(a.shape) == 4 and a.shape[2:] == (3, 3) for a in arrays)


def samples_per_s_without_communication(
    model: ModelSpec, gpu: str, precision: str, batch: int, costs: CostModel
) -> float:
    """One GPU's training throughput when communication is free: the scaling baseline
    (infinite for a model with no compute, which only communication tests use)."""
    seconds = layer_times(model, gpu, precision, batch, costs).iteration_s
    return batch / seconds if seconds > 0 else math.inf
