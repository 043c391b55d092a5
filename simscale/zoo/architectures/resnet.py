"""ResNet-18/34/50/101/152 as torchvision defines them (He et al., CVPR 2016; torchvision v1.5).

Source: torchvision ``models/resnet.py``: BasicBlock for 18/34, Bottleneck with the stride on the
3x3 conv ("ResNet v1.5") for 50/101/152; convolutions without bias, each followed by a batch norm;
a 1x1 conv + batch norm ``downsample`` branch where a block changes shape.

One zoo Layer is a convolution with its batch norm and what runs after them before the next
convolution: the stem's ReLU and max-pool go with ``conv1``; a block's residual add and ReLU go
with its last layer (``downsample`` when the block has one, which torchvision registers, and so
orders in ``named_parameters()``, after the block's last batch norm); the global average pool
goes with ``fc``.
"""

from __future__ import annotations

from simscale.zoo.architectures.layers import (
    Shape,
    Step,
    adaptive_avg_pool2d,
    add,
    batchnorm2d,
    conv2d,
    flatten,
    layer,
    linear,
    max_pool2d,
    relu,
)
from simscale.zoo.registry import register
from simscale.zoo.spec import Layer, ModelSpec

SOURCE = (
    "torchvision models/resnet.py (He et al. 2016, v1.5 strides); reference parameter counts "
    "from torchvision's ResNet*_Weights.IMAGENET1K_V1 meta"
)
INPUT_SHAPE = (3, 224, 224)
NUM_CLASSES = 1000
STAGE_PLANES = (64, 128, 256, 512)
STAGE_STRIDES = (1, 2, 2, 2)


def _conv_bn(prefix: str, conv: str, bn: str, out: int, kernel: int, stride: int) -> list[Step]:
    return [
        conv2d(f"{prefix}.{conv}", out, kernel, stride=stride, padding=kernel // 2),
        batchnorm2d(f"{prefix}.{bn}"),
    ]


def _block(
    prefix: str, shape: Shape, planes: int, stride: int, bottleneck: bool
) -> tuple[list[Layer], Shape]:
    """One residual block's layers, in torchvision's parameter order."""
    in_channels = shape[0]
    expansion = 4 if bottleneck else 1
    out_channels = planes * expansion
    if bottleneck:
        # (conv name, bn name, channels, kernel, stride): 1x1 reduce, 3x3 (strided), 1x1 expand.
        convs = [
            ("conv1", "bn1", planes, 1, 1),
            ("conv2", "bn2", planes, 3, stride),
            ("conv3", "bn3", out_channels, 1, 1),
        ]
    else:
        convs = [("conv1", "bn1", planes, 3, stride), ("conv2", "bn2", planes, 3, 1)]
    has_downsample = stride != 1 or in_channels != out_channels

    layers = []
    x = shape
    for i, (conv, bn, channels, kernel, conv_stride) in enumerate(convs):
        steps = _conv_bn(prefix, conv, bn, channels, kernel, conv_stride)
        is_last = i == len(convs) - 1
        if not is_last:
            steps.append(relu())
        elif not has_downsample:
            steps += [add(), relu()]
        lyr, x = layer(f"{prefix}.{conv}", x, *steps)
        layers.append(lyr)
    if has_downsample:
        ds = [
            *_conv_bn(prefix, "downsample.0", "downsample.1", out_channels, 1, stride),
            add(),
            relu(),
        ]
        lyr, identity = layer(f"{prefix}.downsample", shape, *ds)
        if identity != x:
            raise AssertionError(f"{prefix}: residual {identity} does not match main path {x}")
        layers.append(lyr)
    return layers, x


def resnet(name: str, blocks_per_stage: tuple[int, ...], bottleneck: bool) -> ModelSpec:
    """A torchvision ResNet from its stage depths: (3, 4, 6, 3) with bottlenecks is ResNet-50."""
    layers: list[Layer] = []
    stem, x = layer(
        "conv1",
        INPUT_SHAPE,
        conv2d("conv1", 64, 7, stride=2, padding=3),
        batchnorm2d("bn1"),
        relu(),
        max_pool2d(3, stride=2, padding=1),
    )
    layers.append(stem)
    for stage, (n_blocks, planes, stride) in enumerate(
        zip(blocks_per_stage, STAGE_PLANES, STAGE_STRIDES, strict=True), start=1
    ):
        for b in range(n_blocks):
            block_layers, x = _block(
                f"layer{stage}.{b}", x, planes, stride if b == 0 else 1, bottleneck
            )
            layers += block_layers
    head, _ = layer("fc", x, adaptive_avg_pool2d(1), flatten(), linear("fc", NUM_CLASSES))
    layers.append(head)
    return ModelSpec(name, tuple(layers), SOURCE, INPUT_SHAPE)


@register("resnet18")
def resnet18() -> ModelSpec:
    return resnet("resnet18", (2, 2, 2, 2), bottleneck=False)


@register("resnet34")
def resnet34() -> ModelSpec:
    return resnet("resnet34", (3, 4, 6, 3), bottleneck=False)


@register("resnet50")
def resnet50() -> ModelSpec:
    return resnet("resnet50", (3, 4, 6, 3), bottleneck=True)


@register("resnet101")
def resnet101() -> ModelSpec:
    return resnet("resnet101", (3, 4, 23, 3), bottleneck=True)


@register("resnet152")
def resnet152() -> ModelSpec:
    return resnet("resnet152", (3, 8, 36, 3), bottleneck=True)
