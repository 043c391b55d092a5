"""Architecture families; importing this package registers every zoo model."""

from simscale.zoo.architectures import alexnet, inception, resnet, small, vgg

__all__ = ["alexnet", "inception", "resnet", "small", "vgg"]
