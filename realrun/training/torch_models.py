"""The zoo's models written in PyTorch, for real training in realrun.

Each ``build(name)`` returns a module whose ``named_parameters()`` equal the arrays of
``simscale.zoo.get(name)`` name for name, shape for shape, in the same order, so that parameter i
is KVStore key i on both sides. The torchvision architectures are re-written here from
torchvision's definitions (torchvision itself is not a dependency, and no weights are ever
downloaded); realrun trains from PyTorch's default initialisation on synthetic data, because
throughput, not accuracy, is measured.

Only realrun imports this module: the simulator must never import torch.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from realrun.training.torch_transformers import GPT2LMHead, lm_loss, token_batch
from simscale import zoo
from simscale.zoo.architectures.transformer import GPT2_SIZES, GPT2_TINY

GPT2_SIZES_BY_NAME = {name: config for name, (_card, config) in GPT2_SIZES.items()}

# Weight of the Inception v3 auxiliary loss, as in PyTorch's "Finetuning Torchvision Models"
# tutorial (loss = loss + 0.4 * aux_loss).
INCEPTION_AUX_LOSS_WEIGHT = 0.4

_Pair = int | tuple[int, int]


# --- ResNet (torchvision models/resnet.py, v1.5: stride on the 3x3 conv of a bottleneck) --------


def _conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)


def _conv1x1(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convs with a residual connection (ResNet-18/34)."""

    expansion = 1

    def __init__(self, in_channels: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = _conv3x3(in_channels, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = _downsample(in_channels, planes * self.expansion, stride)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided), 1x1 expand by 4, with a residual connection (ResNet-50+)."""

    expansion = 4

    def __init__(self, in_channels: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = _conv1x1(in_channels, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(in_channels, planes * self.expansion, stride)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


def _downsample(in_channels: int, out_channels: int, stride: int) -> nn.Sequential | None:
    if stride == 1 and in_channels == out_channels:
        return None
    return nn.Sequential(_conv1x1(in_channels, out_channels, stride), nn.BatchNorm2d(out_channels))


class ResNet(nn.Module):
    """torchvision's ResNet: 7x7 stem, four stages of residual blocks, global pool, fc."""

    def __init__(
        self,
        block: type[BasicBlock | Bottleneck],
        blocks_per_stage: tuple[int, int, int, int],
        num_classes: int = 1000,
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        in_channels = 64
        stages = []
        for planes, n_blocks, stride in zip(
            (64, 128, 256, 512), blocks_per_stage, (1, 2, 2, 2), strict=True
        ):
            blocks = []
            for b in range(n_blocks):
                blocks.append(block(in_channels, planes, stride if b == 0 else 1))
                in_channels = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_channels, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# --- VGG-16 and AlexNet (torchvision models/vgg.py, models/alexnet.py) -------------------------

_VGG16_CONFIG = (
    64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M",
)  # fmt: skip


class VGG(nn.Module):
    """torchvision's VGG without batch norm: 3x3 conv-ReLU features, 7x7 pool, classifier."""

    def __init__(self, config: tuple[int | str, ...], num_classes: int = 1000) -> None:
        super().__init__()
        modules: list[nn.Module] = []
        in_channels = 3
        for item in config:
            if isinstance(item, int):
                modules += [nn.Conv2d(in_channels, item, 3, padding=1), nn.ReLU(inplace=True)]
                in_channels = item
            else:  # "M": a 2x2 max-pool
                modules.append(nn.MaxPool2d(2, stride=2))
        self.features = nn.Sequential(*modules)
        self.avgpool = nn.AdaptiveAvgPool2d(7)
        self.classifier = nn.Sequential(
            nn.Linear(in_channels * 7 * 7, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class AlexNet(nn.Module):
    """torchvision's one-GPU AlexNet: five convs, 6x6 pool, dropout-regularised classifier."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2),
            nn.Conv2d(64, 192, 5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2),
            nn.Conv2d(192, 384, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d(6)
        self.classifier = nn.Sequential(
            nn.Dropout(0.5),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


class AlexNetMXNet(nn.Module):
    """MXNet's example AlexNet (symbols/alexnet.py): Krizhevsky 2012 with the towers merged,
    LRN after the first two pooled convolutions, no adaptive pool."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 96, 11, stride=4)
        self.conv2 = nn.Conv2d(96, 256, 5, padding=2)
        self.conv3 = nn.Conv2d(256, 384, 3, padding=1)
        self.conv4 = nn.Conv2d(384, 384, 3, padding=1)
        self.conv5 = nn.Conv2d(384, 256, 3, padding=1)
        self.fc1 = nn.Linear(256 * 5 * 5, 4096)
        self.fc2 = nn.Linear(4096, 4096)
        self.fc3 = nn.Linear(4096, num_classes)
        self.pool = nn.MaxPool2d(3, stride=2)
        self.lrn = nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0)
        self.relu = nn.ReLU(inplace=True)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x: Tensor) -> Tensor:
        x = self.lrn(self.pool(self.relu(self.conv1(x))))
        x = self.lrn(self.pool(self.relu(self.conv2(x))))
        x = self.relu(self.conv4(self.relu(self.conv3(x))))
        x = torch.flatten(self.pool(self.relu(self.conv5(x))), 1)
        x = self.dropout(self.relu(self.fc1(x)))
        return self.fc3(self.dropout(self.relu(self.fc2(x))))


# --- Inception v3 (torchvision models/inception.py, aux_logits=True) ---------------------------


class BasicConv2d(nn.Module):
    """Conv without bias, batch norm (eps 1e-3, as torchvision), ReLU."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: _Pair,
        stride: _Pair = 1,
        padding: _Pair = 0,
    ) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, bias=False)
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.bn(self.conv(x)), inplace=True)


class InceptionA(nn.Module):
    def __init__(self, in_channels: int, pool_features: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(in_channels, 64, kernel_size=1)
        self.branch5x5_1 = BasicConv2d(in_channels, 48, kernel_size=1)
        self.branch5x5_2 = BasicConv2d(48, 64, kernel_size=5, padding=2)
        self.branch3x3dbl_1 = BasicConv2d(in_channels, 64, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, kernel_size=3, padding=1)
        self.branch_pool = BasicConv2d(in_channels, pool_features, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        b1 = self.branch1x1(x)
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        bp = self.branch_pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([b1, b5, b3, bp], 1)


class InceptionB(nn.Module):
    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.branch3x3 = BasicConv2d(in_channels, 384, kernel_size=3, stride=2)
        self.branch3x3dbl_1 = BasicConv2d(in_channels, 64, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(64, 96, kernel_size=3, padding=1)
        self.branch3x3dbl_3 = BasicConv2d(96, 96, kernel_size=3, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        b3 = self.branch3x3(x)
        bd = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        return torch.cat([b3, bd, F.max_pool2d(x, 3, stride=2)], 1)


class InceptionC(nn.Module):
    def __init__(self, in_channels: int, channels_7x7: int) -> None:
        super().__init__()
        c7 = channels_7x7
        self.branch1x1 = BasicConv2d(in_channels, 192, kernel_size=1)
        self.branch7x7_1 = BasicConv2d(in_channels, c7, kernel_size=1)
        self.branch7x7_2 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7_3 = BasicConv2d(c7, 192, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_1 = BasicConv2d(in_channels, c7, kernel_size=1)
        self.branch7x7dbl_2 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_3 = BasicConv2d(c7, c7, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7dbl_4 = BasicConv2d(c7, c7, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7dbl_5 = BasicConv2d(c7, 192, kernel_size=(1, 7), padding=(0, 3))
        self.branch_pool = BasicConv2d(in_channels, 192, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        b1 = self.branch1x1(x)
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        bd = self.branch7x7dbl_1(x)
        for conv in (self.branch7x7dbl_2, self.branch7x7dbl_3, self.branch7x7dbl_4):
            bd = conv(bd)
        bd = self.branch7x7dbl_5(bd)
        bp = self.branch_pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([b1, b7, bd, bp], 1)


class InceptionD(nn.Module):
    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.branch3x3_1 = BasicConv2d(in_channels, 192, kernel_size=1)
        self.branch3x3_2 = BasicConv2d(192, 320, kernel_size=3, stride=2)
        self.branch7x7x3_1 = BasicConv2d(in_channels, 192, kernel_size=1)
        self.branch7x7x3_2 = BasicConv2d(192, 192, kernel_size=(1, 7), padding=(0, 3))
        self.branch7x7x3_3 = BasicConv2d(192, 192, kernel_size=(7, 1), padding=(3, 0))
        self.branch7x7x3_4 = BasicConv2d(192, 192, kernel_size=3, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        b3 = self.branch3x3_2(self.branch3x3_1(x))
        b7 = self.branch7x7x3_1(x)
        for conv in (self.branch7x7x3_2, self.branch7x7x3_3, self.branch7x7x3_4):
            b7 = conv(b7)
        return torch.cat([b3, b7, F.max_pool2d(x, 3, stride=2)], 1)


class InceptionE(nn.Module):
    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.branch1x1 = BasicConv2d(in_channels, 320, kernel_size=1)
        self.branch3x3_1 = BasicConv2d(in_channels, 384, kernel_size=1)
        self.branch3x3_2a = BasicConv2d(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3_2b = BasicConv2d(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch3x3dbl_1 = BasicConv2d(in_channels, 448, kernel_size=1)
        self.branch3x3dbl_2 = BasicConv2d(448, 384, kernel_size=3, padding=1)
        self.branch3x3dbl_3a = BasicConv2d(384, 384, kernel_size=(1, 3), padding=(0, 1))
        self.branch3x3dbl_3b = BasicConv2d(384, 384, kernel_size=(3, 1), padding=(1, 0))
        self.branch_pool = BasicConv2d(in_channels, 192, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        b1 = self.branch1x1(x)
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        bd = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        bd = torch.cat([self.branch3x3dbl_3a(bd), self.branch3x3dbl_3b(bd)], 1)
        bp = self.branch_pool(F.avg_pool2d(x, 3, stride=1, padding=1))
        return torch.cat([b1, b3, bd, bp], 1)


class InceptionAux(nn.Module):
    """The auxiliary classifier on Mixed_6e's 17x17 output, used in training only."""

    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        self.conv0 = BasicConv2d(in_channels, 128, kernel_size=1)
        self.conv1 = BasicConv2d(128, 768, kernel_size=5)
        self.fc = nn.Linear(768, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv1(self.conv0(F.avg_pool2d(x, 5, stride=3)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InceptionOutputs(NamedTuple):
    """What Inception v3 returns in training: main and auxiliary logits."""

    logits: Tensor
    aux_logits: Tensor


class Inception3(nn.Module):
    """torchvision's Inception v3, with the auxiliary head unless ``aux_logits`` is False (as
    TensorFlow's and MXNet's published runs define it), on 3x299x299 inputs."""

    def __init__(self, num_classes: int = 1000, aux_logits: bool = True) -> None:
        super().__init__()
        self.Conv2d_1a_3x3 = BasicConv2d(3, 32, kernel_size=3, stride=2)
        self.Conv2d_2a_3x3 = BasicConv2d(32, 32, kernel_size=3)
        self.Conv2d_2b_3x3 = BasicConv2d(32, 64, kernel_size=3, padding=1)
        self.maxpool1 = nn.MaxPool2d(3, stride=2)
        self.Conv2d_3b_1x1 = BasicConv2d(64, 80, kernel_size=1)
        self.Conv2d_4a_3x3 = BasicConv2d(80, 192, kernel_size=3)
        self.maxpool2 = nn.MaxPool2d(3, stride=2)
        self.Mixed_5b = InceptionA(192, pool_features=32)
        self.Mixed_5c = InceptionA(256, pool_features=64)
        self.Mixed_5d = InceptionA(288, pool_features=64)
        self.Mixed_6a = InceptionB(288)
        self.Mixed_6b = InceptionC(768, channels_7x7=128)
        self.Mixed_6c = InceptionC(768, channels_7x7=160)
        self.Mixed_6d = InceptionC(768, channels_7x7=160)
        self.Mixed_6e = InceptionC(768, channels_7x7=192)
        # Registered here, between 6e and 7a, as torchvision does: that fixes its key order.
        self.AuxLogits = InceptionAux(768, num_classes) if aux_logits else None
        self.Mixed_7a = InceptionD(768)
        self.Mixed_7b = InceptionE(1280)
        self.Mixed_7c = InceptionE(2048)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x: Tensor) -> Tensor | InceptionOutputs:
        x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))
        x = self.maxpool2(self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(self.maxpool1(x))))
        for block in (self.Mixed_5b, self.Mixed_5c, self.Mixed_5d, self.Mixed_6a):
            x = block(x)
        for block in (self.Mixed_6b, self.Mixed_6c, self.Mixed_6d, self.Mixed_6e):
            x = block(x)
        aux = self.AuxLogits(x) if self.training and self.AuxLogits is not None else None
        x = self.Mixed_7c(self.Mixed_7b(self.Mixed_7a(x)))
        logits = self.fc(torch.flatten(self.dropout(self.avgpool(x)), 1))
        return logits if aux is None else InceptionOutputs(logits, aux)


class BatchNormShift(nn.Module):
    """A batch norm that shifts but does not scale (TensorFlow's ``batch_norm(scale=False)``):
    one parameter, ``bias`` (TensorFlow's beta)."""

    def __init__(self, channels: int, eps: float) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(channels, eps=eps, affine=False)
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x) + self.bias.view(1, -1, 1, 1)


def _shift_only_norms(model: nn.Module) -> nn.Module:
    """Every BasicConv2d's batch norm made a shift only, in place (so keys keep their order)."""
    for m in model.modules():
        if isinstance(m, BasicConv2d):
            m.bn = BatchNormShift(m.bn.num_features, m.bn.eps)
    return model


# --- Small test models (defined in simscale.zoo.architectures.small) ---------------------------


class MLP(nn.Module):
    """784-512-256-10 perceptron on flattened 28x28 inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, 10)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class ConvNetSmall(nn.Module):
    """Three conv-bn-ReLU-maxpool stages (16, 32, 64 channels) on 3x32x32, then fc1-ReLU-fc2."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.conv3 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 4 * 4, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x: Tensor) -> Tensor:
        for conv, bn in ((self.conv1, self.bn1), (self.conv2, self.bn2), (self.conv3, self.bn3)):
            x = F.max_pool2d(F.relu(bn(conv(x))), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


# --- Registry ----------------------------------------------------------------------------------


class _Entry(NamedTuple):
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    num_classes: int


_IMAGENET = (3, 224, 224)
_MODELS: dict[str, _Entry] = {
    "resnet18": _Entry(lambda: ResNet(BasicBlock, (2, 2, 2, 2)), _IMAGENET, 1000),
    "resnet34": _Entry(lambda: ResNet(BasicBlock, (3, 4, 6, 3)), _IMAGENET, 1000),
    "resnet50": _Entry(lambda: ResNet(Bottleneck, (3, 4, 6, 3)), _IMAGENET, 1000),
    "resnet101": _Entry(lambda: ResNet(Bottleneck, (3, 4, 23, 3)), _IMAGENET, 1000),
    "resnet152": _Entry(lambda: ResNet(Bottleneck, (3, 8, 36, 3)), _IMAGENET, 1000),
    "vgg16": _Entry(lambda: VGG(_VGG16_CONFIG), _IMAGENET, 1000),
    "alexnet": _Entry(AlexNet, _IMAGENET, 1000),
    "alexnet_mxnet": _Entry(AlexNetMXNet, _IMAGENET, 1000),
    "inception_v3": _Entry(Inception3, (3, 299, 299), 1000),
    "inception_v3_noaux": _Entry(lambda: Inception3(aux_logits=False), (3, 299, 299), 1000),
    "inception_v3_tf": _Entry(
        lambda: _shift_only_norms(Inception3(aux_logits=False)), (3, 299, 299), 1000
    ),
    "mlp": _Entry(MLP, (784,), 10),
    "convnet_small": _Entry(ConvNetSmall, (3, 32, 32), 10),
}
# GPT-2's twins (realrun.training.torch_transformers): the input is seq_len token ids, the
# "classes" the vocabulary. BERT, Llama, MPT and ViT have no twin yet.
GPT2_TWINS = {**GPT2_SIZES_BY_NAME, "gpt2_tiny": GPT2_TINY}
for _gpt2_name, _gpt2_config in GPT2_TWINS.items():
    _MODELS[_gpt2_name] = _Entry(partial(GPT2LMHead, _gpt2_config), (), _gpt2_config.vocab)


def names() -> list[str]:
    """Every model this module can build (the same names as the zoo)."""
    return sorted(_MODELS)


def _entry(name: str) -> _Entry:
    if name not in _MODELS:
        raise KeyError(f"no torch model {name!r}; known: {', '.join(names())}")
    return _MODELS[name]


def build(name: str) -> nn.Module:
    """A freshly initialised torch model; build under ``with torch.device(...)`` to place it."""
    return _entry(name).build()


def input_shape(name: str) -> tuple[int, ...]:
    """The shape of one input sample, without the batch dimension."""
    return _entry(name).input_shape


def num_classes(name: str) -> int:
    return _entry(name).num_classes


def synthetic_batch(
    name: str,
    batch_size: int,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
    seq_len: int | None = None,
) -> tuple[Tensor, Tensor]:
    """A reproducible batch (standard-normal inputs, uniform integer labels) for ``name``;
    token ids and next-token labels of ``seq_len`` (the zoo's default when None) for GPT-2.

    Drawn on the CPU from ``generator`` (seed 0 when none is given) and then moved to ``device``,
    so the same seed gives the same batch on every device.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    entry = _entry(name)
    if name in GPT2_TWINS:
        length = seq_len if seq_len is not None else zoo.default_seq_len(name)
        assert length is not None
        ids, labels = token_batch(GPT2_TWINS[name], batch_size, length, generator)
        return ids.to(device), labels.to(device)
    inputs = torch.randn((batch_size, *entry.input_shape), generator=generator)
    labels = torch.randint(0, entry.num_classes, (batch_size,), generator=generator)
    return inputs.to(device), labels.to(device)


def loss(outputs: Tensor | InceptionOutputs, labels: Tensor) -> Tensor:
    """Cross-entropy of a training output; Inception's auxiliary head adds 0.4 of its own."""
    if isinstance(outputs, InceptionOutputs):
        return F.cross_entropy(
            outputs.logits, labels
        ) + INCEPTION_AUX_LOSS_WEIGHT * F.cross_entropy(outputs.aux_logits, labels)
    if outputs.dim() == 3:  # a language model's (batch, seq, vocab) logits
        return lm_loss(outputs, labels)
    return F.cross_entropy(outputs, labels)
