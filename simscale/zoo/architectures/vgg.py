"""VGG-16 (configuration "D" of Simonyan & Zisserman, ICLR 2015) as torchvision defines it.

Source: torchvision ``models/vgg.py``: ``features`` is an ``nn.Sequential`` of 3x3 convolutions
(bias, padding 1) each followed by a ReLU, with a 2x2 max-pool at every "M"; then a 7x7 adaptive
average pool and ``classifier`` = Linear-ReLU-Dropout, Linear-ReLU-Dropout, Linear. Array names
carry the Sequential indices (``features.0.weight``, ``classifier.6.bias``), which this module
derives from the configuration the way ``nn.Sequential`` numbers its children.

One zoo Layer is a convolution or linear layer with the ReLU, pool and dropout that follow it; the
adaptive pool and flatten before the classifier go with ``classifier.0``.
"""

from __future__ import annotations

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
    "torchvision models/vgg.py, cfg 'D' (Simonyan & Zisserman 2015); reference parameter count "
    "from torchvision's VGG16_Weights.IMAGENET1K_V1 meta"
)
INPUT_SHAPE = (3, 224, 224)
NUM_CLASSES = 1000
POOL = "M"
# Output channels of each 3x3 conv, POOL where a 2x2 max-pool sits (torchvision cfgs["D"]).
VGG16_CONFIG: tuple[int | str, ...] = (
    64, 64, POOL, 128, 128, POOL, 256, 256, 256, POOL, 512, 512, 512, POOL, 512, 512, 512, POOL,
)  # fmt: skip
CLASSIFIER_HIDDEN = 4096


def vgg(name: str, config: tuple[int | str, ...]) -> ModelSpec:
    """A torchvision VGG (without batch norm) from its configuration list."""
    # (channels, followed by a max-pool) for each convolution of the configuration.
    convs: list[tuple[int, bool]] = []
    for item in config:
        if isinstance(item, int):
            convs.append((item, False))
        elif convs:
            convs[-1] = (convs[-1][0], True)
        else:
            raise ValueError(f"{name}: a configuration cannot start with a pool")

    layers: list[Layer] = []
    x = INPUT_SHAPE
    index = 0  # position in torchvision's ``features`` Sequential: conv, ReLU[, pool]
    for channels, pool_after in convs:
        steps: list[Step] = [conv2d(f"features.{index}", channels, 3, padding=1, bias=True), relu()]
        if pool_after:
            steps.append(max_pool2d(2, stride=2))
        lyr, x = layer(f"features.{index}", x, *steps)
        layers.append(lyr)
        index += len(steps)

    head = [adaptive_avg_pool2d(7), flatten()]
    widths = (CLASSIFIER_HIDDEN, CLASSIFIER_HIDDEN, NUM_CLASSES)
    for j, width in enumerate(widths):
        # Each hidden Linear is followed by ReLU and Dropout, so the Linears sit at 0, 3, 6.
        is_last = j == len(widths) - 1
        steps = [*head, linear(f"classifier.{3 * j}", width)]
        if not is_last:
            steps += [relu(), dropout()]
        lyr, x = layer(f"classifier.{3 * j}", x, *steps)
        layers.append(lyr)
        head = []
    return ModelSpec(name, tuple(layers), SOURCE, INPUT_SHAPE)


@register("vgg16")
def vgg16() -> ModelSpec:
    return vgg("vgg16", VGG16_CONFIG)
