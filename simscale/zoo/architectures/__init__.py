"""Architecture families; importing this package registers every zoo model."""

from simscale.zoo.architectures import (
    alexnet,
    alexnet_mxnet,
    inception,
    resnet,
    small,
    transformer,
    vgg,
)

__all__ = ["alexnet", "alexnet_mxnet", "inception", "resnet", "small", "transformer", "vgg"]
