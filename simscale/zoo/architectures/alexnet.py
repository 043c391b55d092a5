"""AlexNet as torchvision defines it (the one-GPU variant of Krizhevsky, "One weird trick", 2014).

Source: torchvision ``models/alexnet.py``: ``features`` = five convolutions (bias) each followed by
a ReLU, with a 3x3 stride-2 max-pool after the 1st, 2nd and 5th; a 6x6 adaptive average pool; then
``classifier`` = Dropout, Linear(9216, 4096), ReLU, Dropout, Linear(4096, 4096), ReLU,
Linear(4096, 1000). Array names carry those Sequential indices, derived here from the definition.

One zoo Layer is a convolution or linear layer with the ReLU and pool after it; the adaptive
pool, flatten and the dropout before a linear layer go with that linear layer.
"""

from __future__ import annotations

from typing import NamedTuple

from simscale.zoo.architectures.layers import (
    Step,
    adaptive_avg_pool2d,
    conv2d,
    dropout,
    flatten,
    layer,
    linear,
    max_pool2d,
    relu,
)
from simscale.zoo.registry import register
from simscale.zoo.spec import Layer, ModelSpec

SOURCE = (
    "torchvision models/alexnet.py (Krizhevsky 2014, one-GPU AlexNet); reference parameter count "
    "from torchvision's AlexNet_Weights.IMAGENET1K_V1 meta"
)
INPUT_SHAPE = (3, 224, 224)
NUM_CLASSES = 1000
CLASSIFIER_HIDDEN = 4096


class _Conv(NamedTuple):
    channels: int
    kernel: int
    stride: int
    padding: int
    pool_after: bool


FEATURES = (
    _Conv(64, 11, 4, 2, pool_after=True),
    _Conv(192, 5, 1, 2, pool_after=True),
    _Conv(384, 3, 1, 1, pool_after=False),
    _Conv(256, 3, 1, 1, pool_after=False),
    _Conv(256, 3, 1, 1, pool_after=True),
)


@register("alexnet")
def alexnet() -> ModelSpec:
    layers: list[Layer] = []
    x = INPUT_SHAPE
    index = 0  # position in torchvision's ``features`` Sequential
    for conv in FEATURES:
        name = f"features.{index}"
        steps: list[Step] = [
            conv2d(name, conv.channels, conv.kernel, conv.stride, conv.padding, bias=True),
            relu(),
        ]
        index += 2
        if conv.pool_after:
            steps.append(max_pool2d(3, stride=2))
            index += 1
        lyr, x = layer(name, x, *steps)
        layers.append(lyr)

    # classifier: [Dropout, Linear, ReLU] twice, then the output Linear at index 6.
    lyr, x = layer(
        "classifier.1",
        x,
        adaptive_avg_pool2d(6),
        flatten(),
        dropout(),
        linear("classifier.1", CLASSIFIER_HIDDEN),
        relu(),
    )
    layers.append(lyr)
    lyr, x = layer("classifier.4", x, dropout(), linear("classifier.4", CLASSIFIER_HIDDEN), relu())
    layers.append(lyr)
    lyr, x = layer("classifier.6", x, linear("classifier.6", NUM_CLASSES))
    layers.append(lyr)
    return ModelSpec("alexnet", tuple(layers), SOURCE, INPUT_SHAPE)
