"""Small models for real-backend tests on a CPU: cheap to train, with keys of mixed sizes.

Not from a publication: they are defined here (and, identically, in
``realrun/training/torch_models.py``) so that a whole parameter-server run with a few workers takes
seconds on one machine. Each has at least one array above 100 k elements so that a lowered
``bigarray_bound`` splits it across servers.
"""

from __future__ import annotations

from simscale.zoo.architectures.layers import (
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

NUM_CLASSES = 10

MLP_INPUT_SHAPE = (784,)  # a flattened 28x28 image, MNIST-sized
MLP_HIDDEN = (512, 256)

CONVNET_INPUT_SHAPE = (3, 32, 32)  # CIFAR-sized
CONVNET_CHANNELS = (16, 32, 64)
CONVNET_HIDDEN = 256


@register("mlp")
def mlp() -> ModelSpec:
    """784-512-256-10 multilayer perceptron: fc1, fc2 with ReLU, fc3 the logits."""
    layers: list[Layer] = []
    x = MLP_INPUT_SHAPE
    widths = (*MLP_HIDDEN, NUM_CLASSES)
    for i, width in enumerate(widths, start=1):
        steps = [linear(f"fc{i}", width)]
        if i < len(widths):
            steps.append(relu())
        lyr, x = layer(f"fc{i}", x, *steps)
        layers.append(lyr)
    return ModelSpec("mlp", tuple(layers), "defined in simscale (test model)", MLP_INPUT_SHAPE)


@register("convnet_small")
def convnet_small() -> ModelSpec:
    """Three conv-bn-ReLU-maxpool stages (16, 32, 64 channels) on 3x32x32, then fc1-ReLU-fc2."""
    layers: list[Layer] = []
    x = CONVNET_INPUT_SHAPE
    for i, channels in enumerate(CONVNET_CHANNELS, start=1):
        lyr, x = layer(
            f"conv{i}",
            x,
            conv2d(f"conv{i}", channels, 3, padding=1),
            batchnorm2d(f"bn{i}"),
            relu(),
            max_pool2d(2),
        )
        layers.append(lyr)
    lyr, x = layer("fc1", x, flatten(), linear("fc1", CONVNET_HIDDEN), relu())
    layers.append(lyr)
    lyr, x = layer("fc2", x, linear("fc2", NUM_CLASSES))
    layers.append(lyr)
    return ModelSpec(
        "convnet_small", tuple(layers), "defined in simscale (test model)", CONVNET_INPUT_SHAPE
    )
