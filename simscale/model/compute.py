"""How long a GPU takes for each layer: FLOPs over achieved FLOP/s.

The zoo gives forward FLOPs per sample per layer; the hardware preset gives the peak; the cost
model gives the achieved efficiency. Backward costs BACKWARD_TO_FORWARD times the forward, plus
the forward FLOPs activation checkpointing recomputes (``Layer.recompute_flops``,
simscale.zoo.checkpointing) at the same speed.

A layer built around a 3x3 convolution runs ``winograd_3x3_speedup`` times faster than its direct
FLOP count says: cuDNN computes such convolutions with Winograd's minimal filtering (Lavin & Gray
2016), which is why VGG-16, nearly all 3x3 convolutions, trains at more than the GPU's nominal
peak while a network of 1x1 convolutions does not. cuDNN 5.1 added the same algorithm for 5x5
filters (WINOGRAD_NONFUSED, "3x3 and 5x5", its release notes); F(m x m, r x r) saves
(m r / (m + r - 1))^2 of the multiplies, so the output tile m that gives the fitted 3x3 speed-up
gives the 5x5 one (2.25 for 3x3 is F(2x2, 3x3), and then 2.78 for 5x5). The zoo folds a
convolution and its batch norm, activation and pooling into one layer, so the whole layer is sped
up; strided convolutions (a few per network) are treated like the others.

Every layer also costs ``layer_overhead_us`` per forward pass (and BACKWARD_TO_FORWARD times
that backward) whatever the batch: kernel launches and the framework's per-operator dispatch,
which is why one GPU trains ResNet-50 ten times slower per sample at batch 1 than at batch 128.

A layer's memory-bound extra kernels (``Layer.fwd_memory_bytes``, ``bwd_memory_bytes``: the
transposes around a batch norm run in another layout, simscale.zoo.batchnorm_layout) cost their
bytes over the device memory's peak bandwidth, where the GPU states one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simscale.spec.costs import BACKWARD_TO_FORWARD, CostModel
from simscale.spec.hardware import GPUS
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
    spec = GPUS[gpu]
    flops_per_s = spec.peak_flops(precision) * costs.efficiency(gpu, precision)
    flops = np.array([layer.fwd_flops for layer in model.layers], dtype=float)
    if costs.winograd_3x3_speedup != 1.0:
        flops = flops / winograd_speedups(model, costs.winograd_3x3_speedup)
    fwd = flops * batch / flops_per_s
    if costs.layer_overhead_us > 0 and gpu != "cpu":
        fwd = fwd + costs.layer_overhead_us * 1e-6
    bwd = fwd * BACKWARD_TO_FORWARD
    recompute = np.array([layer.recompute_flops for layer in model.layers], dtype=float)
    if recompute.any():
        bwd = bwd + recompute * batch / flops_per_s
    fwd_bytes = _memory_bytes(model, "fwd_memory_bytes")
    bwd_bytes = _memory_bytes(model, "bwd_memory_bytes")
    if fwd_bytes.any() or bwd_bytes.any():
        fwd = fwd + spec.memory_stream_s(fwd_bytes * batch)
        bwd = bwd + spec.memory_stream_s(bwd_bytes * batch)
    return LayerTimes(forward_s=fwd, backward_s=bwd)


def _memory_bytes(model: ModelSpec, field: str) -> np.ndarray:
    return np.array([getattr(layer, field) for layer in model.layers], dtype=float)


WINOGRAD_KERNELS = (3, 5)  # square filters cuDNN runs with Winograd (5x5 since cuDNN 5.1)


def winograd_layers(model: ModelSpec) -> np.ndarray:
    """For each layer, whether it is built around a convolution Winograd applies to (a
    (out, in, 3, 3) or (out, in, 5, 5) weight)."""
    return np.array([_winograd_kernel(layer.arrays) > 0 for layer in model.layers], dtype=bool)


def winograd_speedups(model: ModelSpec, speedup_3x3: float) -> np.ndarray:
    """For each layer, how many times faster than its FLOPs it runs: 1, or the Winograd speed-up
    of its filter size at the tile that gives 3x3 filters ``speedup_3x3``."""
    return np.array(
        [winograd_speedup(_winograd_kernel(layer.arrays), speedup_3x3) for layer in model.layers]
    )


def winograd_speedup(kernel: int, speedup_3x3: float) -> float:
    """F(m x m, r x r)'s multiply reduction (m r / (m + r - 1))^2 for an r x r filter, with m
    the output tile whose 3x3 reduction is ``speedup_3x3`` (m = 2 s / (3 - s), s its square
    root); 1 for a filter Winograd does not serve. At a 3x3 speed-up of 9 or more the tile is
    unbounded and an r x r filter saves r^2."""
    if kernel not in WINOGRAD_KERNELS or speedup_3x3 <= 1.0:
        return 1.0
    if kernel == 3:
        return speedup_3x3
    root = math.sqrt(speedup_3x3)
    if root >= 3.0:
        return float(kernel * kernel)
    tile = 2 * root / (3 - root)
    return (kernel * tile / (tile + kernel - 1)) ** 2


def _winograd_kernel(arrays: tuple[ParamArray, ...]) -> int:
    for a in arrays:
        if len(a.shape) == 4 and a.shape[2] == a.shape[3] and a.shape[2] in WINOGRAD_KERNELS:
            return a.shape[2]
    return 0


def samples_per_s_without_communication(
    model: ModelSpec, gpu: str, precision: str, batch: int, costs: CostModel
) -> float:
    """One GPU's training throughput when communication is free: the scaling baseline
    (infinite for a model with no compute, which only communication tests use)."""
    seconds = layer_times(model, gpu, precision, batch, costs).iteration_s
    return batch / seconds if seconds > 0 else math.inf
