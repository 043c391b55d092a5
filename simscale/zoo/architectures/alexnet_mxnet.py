"""AlexNet as MXNet's image-classification example defines it (Krizhevsky et al. 2012, the two
GPU towers merged: 96, 256, 384, 384 and 256 filters, no groups), the network MXNet's published
AlexNet figures ran (its performance FAQ, its p2.16xlarge scaling tutorial).

Source: apache/mxnet ``example/image-classification/symbols/alexnet.py`` (commit 1083d0fb):
conv1 11x11/4 (no padding), ReLU, 3x3/2 max-pool, LRN; conv2 5x5 pad 2, ReLU, max-pool, LRN;
conv3-5 3x3 pad 1 with ReLU, max-pool after conv5; fc1 and fc2 4096 with ReLU and dropout;
fc3 to the classes. On 224x224 the features end at 256x5x5 (6,400 inputs to fc1), where
torchvision's variant ends at 256x6x6 after fewer filters: 2.03 against 1.43 forward GFLOPs.
Array names are the script's variable names.
"""

from __future__ import annotations

from typing import NamedTuple

from simscale.zoo.architectures.layers import (
    Step,
    conv2d,
    dropout,
    flatten,
    layer,
    linear,
    local_response_norm,
    max_pool2d,
    relu,
)
from simscale.zoo.registry import register
from simscale.zoo.spec import Layer, ModelSpec

SOURCE = (
    "apache/mxnet example/image-classification/symbols/alexnet.py (Krizhevsky 2012, towers merged)"
)
INPUT_SHAPE = (3, 224, 224)
NUM_CLASSES = 1000
HIDDEN = 4096
LRN_SIZE = 5


class _Conv(NamedTuple):
    channels: int
    kernel: int
    stride: int
    padding: int
    pool_after: bool
    lrn_after: bool


FEATURES = (
    _Conv(96, 11, 4, 0, pool_after=True, lrn_after=True),
    _Conv(256, 5, 1, 2, pool_after=True, lrn_after=True),
    _Conv(384, 3, 1, 1, pool_after=False, lrn_after=False),
    _Conv(384, 3, 1, 1, pool_after=False, lrn_after=False),
    _Conv(256, 3, 1, 1, pool_after=True, lrn_after=False),
)


@register("alexnet_mxnet")
def alexnet_mxnet() -> ModelSpec:
    layers: list[Layer] = []
    x = INPUT_SHAPE
    for i, conv in enumerate(FEATURES, start=1):
        name = f"conv{i}"
        steps: list[Step] = [
            conv2d(name, conv.channels, conv.kernel, conv.stride, conv.padding, bias=True),
            relu(),
        ]
        if conv.pool_after:
            steps.append(max_pool2d(3, stride=2))
        if conv.lrn_after:
            steps.append(local_response_norm(LRN_SIZE))
        lyr, x = layer(name, x, *steps)
        layers.append(lyr)
    lyr, x = layer("fc1", x, flatten(), linear("fc1", HIDDEN), relu(), dropout())
    layers.append(lyr)
    lyr, x = layer("fc2", x, linear("fc2", HIDDEN), relu(), dropout())
    layers.append(lyr)
    lyr, x = layer("fc3", x, linear("fc3", NUM_CLASSES))
    layers.append(lyr)
    return ModelSpec("alexnet_mxnet", tuple(layers), SOURCE, INPUT_SHAPE)
