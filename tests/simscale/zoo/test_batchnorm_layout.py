"""Batch norms run in another layout (simscale.zoo.batchnorm_layout): TensorFlow's fused batch
norm transposes x and y in forward and dy, x and dx in backward, each read and written once."""

from __future__ import annotations

import pytest

from simscale import zoo
from simscale.model.compute import layer_times
from simscale.spec.config import ConfigError
from simscale.spec.costs import CostModel
from simscale.spec.hardware import GPUS
from simscale.spec.scenario import scenario_from_dict
from simscale.zoo.batchnorm_layout import transposed_batchnorms


def _resnet50_batchnorm_elements() -> int:
    """torchvision's ResNet-50 (v1.5: stride on the 3x3), its batch norms' outputs per sample."""
    total = 64 * 112 * 112  # the stem's bn1
    size_in = 56
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        size_out = size_in // stride
        out = 4 * width
        total += width * size_in**2 + width * size_out**2 + out * size_out**2  # first block
        total += out * size_out**2  # its downsample's batch norm
        total += (blocks - 1) * (2 * width + out) * size_out**2
        size_in = size_out
    return total


def test_resnet50_batch_norm_outputs_are_counted_from_the_shapes() -> None:
    model = zoo.get("resnet50")
    assert sum(layer.batchnorm_elements for layer in model.layers) == (
        _resnet50_batchnorm_elements()
    )
    assert sum(1 for layer in model.layers if layer.batchnorm_elements) == 53


def test_a_transformer_has_no_batch_norm_to_transpose() -> None:
    model = zoo.get("bert_base")
    assert transposed_batchnorms(model, "transposed", "fp16").layers == model.layers


def test_transposed_moves_two_tensors_forward_and_three_backward_read_and_written() -> None:
    model = zoo.get("resnet50")
    fp16 = transposed_batchnorms(model, "transposed", "fp16")
    fp32 = transposed_batchnorms(model, "transposed", "fp32")
    for plain, half, single in zip(model.layers, fp16.layers, fp32.layers, strict=True):
        assert half.fwd_memory_bytes == 2 * 2 * 2 * plain.batchnorm_elements
        assert half.bwd_memory_bytes == 3 * 2 * 2 * plain.batchnorm_elements
        assert single.fwd_memory_bytes == 2 * half.fwd_memory_bytes
    assert transposed_batchnorms(model, "native", "fp16") is model


def test_the_transposes_cost_their_bytes_over_the_memory_bandwidth() -> None:
    model, costs, batch = zoo.get("resnet50"), CostModel(), 256
    moved = transposed_batchnorms(model, "transposed", "fp16")
    plain = layer_times(model, "V100", "fp16", batch, costs)
    slow = layer_times(moved, "V100", "fp16", batch, costs)
    bytes_per_s = GPUS["V100"].memory_gbytes_per_s * 1e9
    elements = _resnet50_batchnorm_elements()
    extra_s = slow.iteration_s - plain.iteration_s
    assert extra_s == pytest.approx(5 * 2 * 2 * elements * batch / bytes_per_s, rel=1e-9)
    # A device with no stated bandwidth (a CPU rank) pays nothing, as for the optimizer step.
    assert layer_times(moved, "cpu", "fp32", 4, costs).iteration_s == (
        layer_times(model, "cpu", "fp32", 4, costs).iteration_s
    )


def _scenario(layout: str, model: str = "resnet50") -> dict[str, object]:
    return {
        "cluster": {"hosts": [{"count": 2, "gpus_per_host": 8, "gpu": "V100", "nic_gbps": 100}]},
        "model": model,
        "training": {"batch_per_gpu": 256, "precision": "amp", "batchnorm_layout": layout},
        "kvstore": {"mode": "allreduce"},
    }


def test_a_scenario_says_its_batch_norm_layout_and_native_changes_nothing() -> None:
    native = scenario_from_dict(_scenario("native"))
    assert native.model_spec() is zoo.get("resnet50")
    transposed = scenario_from_dict(_scenario("transposed")).model_spec()
    assert transposed.layers[0].fwd_memory_bytes == 2 * 2 * 2 * 64 * 112 * 112  # amp: fp16
    with pytest.raises(ConfigError, match=r"training\.batchnorm_layout.*native"):
        scenario_from_dict(_scenario("nchw"))


def test_a_model_without_batch_norms_refuses_a_transposed_layout() -> None:
    with pytest.raises(ConfigError, match=r"training\.batchnorm_layout.*vgg16.*batch norms"):
        scenario_from_dict(_scenario("transposed", "vgg16"))
