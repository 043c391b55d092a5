"""Batch norms run in another layout than the graph's: the transposes a framework adds around them.

TensorFlow 2 runs a Volta-or-newer graph whose convolutions are mostly fp16 in NHWC (grappler's
generic layout optimizer). Its fused batch norm (``fused_batch_norm_op.cc``) has cuDNN's NHWC
path in training only for fp16 with ``TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT=1`` (what the
tensorflow/models trainers' ``batchnorm_spatial_persistent: True`` sets); otherwise it
transposes each batch norm's tensors to NCHW and back: x in and y out in forward, dy and x in
and dx out in backward. ``training.batchnorm_layout: transposed`` says a run paid them.

Each transpose reads and writes the whole tensor once, at the activations' bytes per element
(2 in fp16, 4 in fp32), so a layer moves TRANSPOSES_FORWARD x 2 x bytes x its batch-norm
elements per sample in forward and TRANSPOSES_BACKWARD x that in backward, at the device
memory's peak bandwidth (simscale.model.compute): a lower bound, like the optimizer step's.
Not counted: cuDNN's slower non-persistent batch-norm kernels, and the batch-norm + add + ReLU
fusion grappler's remapper makes only on the persistent path.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from simscale.zoo import ModelSpec
from simscale.zoo.memory import FP32_ACTIVATIONS

BatchnormLayout = Literal["native", "transposed"]
TRANSPOSES_FORWARD = 2  # x to NCHW, y back to NHWC
TRANSPOSES_BACKWARD = 3  # dy and x to NCHW, dx back to NHWC


def activation_bytes_per_element(compute_precision: str) -> int:
    """Bytes of one activation element: 4 when the network computes in fp32 or tf32, else 2."""
    return 4 if compute_precision in FP32_ACTIVATIONS else 2


def transposed_batchnorms(model: ModelSpec, layout: str, compute_precision: str) -> ModelSpec:
    """``model`` with each layer's transpose bytes set for ``layout`` (module doc)."""
    if layout == "native":
        return model
    if layout != "transposed":
        raise ValueError(f"batch-norm layout {layout!r}: expected native or transposed")
    moved = 2 * activation_bytes_per_element(compute_precision)  # read and written
    layers = tuple(
        replace(
            layer,
            fwd_memory_bytes=layer.fwd_memory_bytes
            + TRANSPOSES_FORWARD * moved * layer.batchnorm_elements,
            bwd_memory_bytes=layer.bwd_memory_bytes
            + TRANSPOSES_BACKWARD * moved * layer.batchnorm_elements,
        )
        if layer.batchnorm_elements > 0
        else layer
        for layer in model.layers
    )
    return replace(model, layers=layers)
