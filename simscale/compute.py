"""How long a GPU takes for each layer: FLOPs over achieved FLOP/s.

The zoo gives forward FLOPs per sample per layer; the hardware preset gives the peak; the cost
model gives the achieved efficiency. Backward costs BACKWARD_TO_FORWARD times the forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simscale.costs import BACKWARD_TO_FORWARD, CostModel
from simscale.hardware import GPUS
from simscale.zoo import ModelSpec


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
    fwd = np.array([layer.fwd_flops for layer in model.layers], dtype=float) * batch / flops_per_s
    return LayerTimes(forward_s=fwd, backward_s=fwd * BACKWARD_TO_FORWARD)


def samples_per_s_without_communication(
    model: ModelSpec, gpu: str, precision: str, batch: int, costs: CostModel
) -> float:
    """One GPU's training throughput when communication is free: the scaling baseline
    (infinite for a model with no compute, which only communication tests use)."""
    seconds = layer_times(model, gpu, precision, batch, costs).iteration_s
    return batch / seconds if seconds > 0 else math.inf
