"""Inception v3 (Szegedy et al., CVPR 2016) as torchvision defines it, with the auxiliary head.

Source: torchvision ``models/inception.py``, ``Inception3(aux_logits=True)`` (the default): every
convolution is a ``BasicConv2d`` (conv without bias, batch norm, ReLU) named ``<block>.<branch>``,
so its arrays are ``<block>.<branch>.conv.weight``, ``.bn.weight``, ``.bn.bias``. Blocks Mixed_5b-d
are InceptionA, 6a InceptionB, 6b-e InceptionC, 7a InceptionD, 7b-c InceptionE; ``AuxLogits`` is
registered between Mixed_6e and Mixed_7a and so sits there in ``named_parameters()``. The input is
3x299x299. Training runs the auxiliary head, so its cost is counted.

``inception_v3_noaux`` is the same network without the auxiliary head, as MXNet's published runs
trained it (``example/image-classification/symbols/inception-v3.py`` defines no auxiliary
classifier; its batch norms keep a gamma). Its parameter count (23,834,568) is torchvision's
``Inception3(aux_logits=False)``. ``inception_v3_tf`` is TensorFlow's (tf_cnn_benchmarks'
``inception_model.py``, tensorflow/benchmarks fd87986 of 2017): no auxiliary head either, and
every batch norm a shift only (``tf.contrib.layers.batch_norm``'s default ``scale=False``), so a
convolution has two variables, its kernel and the norm's beta, which decides where TensorFlow's
round-robin placement puts them (simscale.spec.sharding).

One zoo Layer is one BasicConv2d (or the final ``fc``): the stem's max-pools go with the conv before
them; an average pool that opens a branch goes with that branch's conv; a max-pool-only branch
(InceptionB/D) is a Layer of its own with no arrays.
"""

from __future__ import annotations

from simscale.zoo.architectures.layers import (
    Pair,
    Shape,
    Step,
    adaptive_avg_pool2d,
    avg_pool2d,
    batchnorm2d,
    concat_channels,
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
    "torchvision models/inception.py, Inception3(aux_logits=True) (Szegedy et al. 2016); "
    "reference parameter count from torchvision's Inception_V3_Weights.IMAGENET1K_V1 meta"
)
SOURCE_NOAUX = (
    "torchvision models/inception.py, Inception3(aux_logits=False): no auxiliary head, as "
    "MXNet's symbols/inception-v3.py defines it"
)
SOURCE_TF = (
    "tf_cnn_benchmarks inception_model.py (tensorflow/benchmarks fd87986): no auxiliary head, "
    "batch norms without a scale; layers as torchvision's Inception3"
)
INPUT_SHAPE = (3, 299, 299)
NUM_CLASSES = 1000


class _Net:
    """Collects Layers in definition order while branches read shapes they are given."""

    def __init__(self, bn_scale: bool = True) -> None:
        self.layers: list[Layer] = []
        self.bn_scale = bn_scale

    def conv(
        self,
        name: str,
        x: Shape,
        out_channels: int,
        kernel: Pair,
        stride: Pair = 1,
        padding: Pair = 0,
        before: tuple[Step, ...] = (),
        after: tuple[Step, ...] = (),
    ) -> Shape:
        """A BasicConv2d named ``name`` (conv, bn with eps 1e-3, ReLU) with pools around it."""
        lyr, out = layer(
            name,
            x,
            *before,
            conv2d(f"{name}.conv", out_channels, kernel, stride, padding),
            batchnorm2d(f"{name}.bn", scale=self.bn_scale),
            relu(),
            *after,
        )
        self.layers.append(lyr)
        return out

    def pool_only(self, name: str, x: Shape, *steps: Step) -> Shape:
        lyr, out = layer(name, x, *steps)
        self.layers.append(lyr)
        return out

    def inception_a(self, p: str, x: Shape, pool_features: int) -> Shape:
        b1 = self.conv(f"{p}.branch1x1", x, 64, 1)
        b5 = self.conv(f"{p}.branch5x5_1", x, 48, 1)
        b5 = self.conv(f"{p}.branch5x5_2", b5, 64, 5, padding=2)
        b3 = self.conv(f"{p}.branch3x3dbl_1", x, 64, 1)
        b3 = self.conv(f"{p}.branch3x3dbl_2", b3, 96, 3, padding=1)
        b3 = self.conv(f"{p}.branch3x3dbl_3", b3, 96, 3, padding=1)
        bp = self.conv(f"{p}.branch_pool", x, pool_features, 1, before=(avg_pool2d(3, 1, 1),))
        return concat_channels(b1, b5, b3, bp)

    def inception_b(self, p: str, x: Shape) -> Shape:
        b3 = self.conv(f"{p}.branch3x3", x, 384, 3, stride=2)
        bd = self.conv(f"{p}.branch3x3dbl_1", x, 64, 1)
        bd = self.conv(f"{p}.branch3x3dbl_2", bd, 96, 3, padding=1)
        bd = self.conv(f"{p}.branch3x3dbl_3", bd, 96, 3, stride=2)
        bp = self.pool_only(f"{p}.branch_pool", x, max_pool2d(3, stride=2))
        return concat_channels(b3, bd, bp)

    def inception_c(self, p: str, x: Shape, c7: int) -> Shape:
        b1 = self.conv(f"{p}.branch1x1", x, 192, 1)
        b7 = self.conv(f"{p}.branch7x7_1", x, c7, 1)
        b7 = self.conv(f"{p}.branch7x7_2", b7, c7, (1, 7), padding=(0, 3))
        b7 = self.conv(f"{p}.branch7x7_3", b7, 192, (7, 1), padding=(3, 0))
        bd = self.conv(f"{p}.branch7x7dbl_1", x, c7, 1)
        bd = self.conv(f"{p}.branch7x7dbl_2", bd, c7, (7, 1), padding=(3, 0))
        bd = self.conv(f"{p}.branch7x7dbl_3", bd, c7, (1, 7), padding=(0, 3))
        bd = self.conv(f"{p}.branch7x7dbl_4", bd, c7, (7, 1), padding=(3, 0))
        bd = self.conv(f"{p}.branch7x7dbl_5", bd, 192, (1, 7), padding=(0, 3))
        bp = self.conv(f"{p}.branch_pool", x, 192, 1, before=(avg_pool2d(3, 1, 1),))
        return concat_channels(b1, b7, bd, bp)

    def inception_d(self, p: str, x: Shape) -> Shape:
        b3 = self.conv(f"{p}.branch3x3_1", x, 192, 1)
        b3 = self.conv(f"{p}.branch3x3_2", b3, 320, 3, stride=2)
        b7 = self.conv(f"{p}.branch7x7x3_1", x, 192, 1)
        b7 = self.conv(f"{p}.branch7x7x3_2", b7, 192, (1, 7), padding=(0, 3))
        b7 = self.conv(f"{p}.branch7x7x3_3", b7, 192, (7, 1), padding=(3, 0))
        b7 = self.conv(f"{p}.branch7x7x3_4", b7, 192, 3, stride=2)
        bp = self.pool_only(f"{p}.branch_pool", x, max_pool2d(3, stride=2))
        return concat_channels(b3, b7, bp)

    def inception_e(self, p: str, x: Shape) -> Shape:
        b1 = self.conv(f"{p}.branch1x1", x, 320, 1)
        b3 = self.conv(f"{p}.branch3x3_1", x, 384, 1)
        # The 1x3 and 3x1 convs both read branch3x3_1's output and are concatenated.
        b3a = self.conv(f"{p}.branch3x3_2a", b3, 384, (1, 3), padding=(0, 1))
        b3b = self.conv(f"{p}.branch3x3_2b", b3, 384, (3, 1), padding=(1, 0))
        bd = self.conv(f"{p}.branch3x3dbl_1", x, 448, 1)
        bd = self.conv(f"{p}.branch3x3dbl_2", bd, 384, 3, padding=1)
        bda = self.conv(f"{p}.branch3x3dbl_3a", bd, 384, (1, 3), padding=(0, 1))
        bdb = self.conv(f"{p}.branch3x3dbl_3b", bd, 384, (3, 1), padding=(1, 0))
        bp = self.conv(f"{p}.branch_pool", x, 192, 1, before=(avg_pool2d(3, 1, 1),))
        return concat_channels(b1, b3a, b3b, bda, bdb, bp)

    def aux_logits(self, x: Shape) -> None:
        a = self.conv("AuxLogits.conv0", x, 128, 1, before=(avg_pool2d(5, stride=3),))
        a = self.conv("AuxLogits.conv1", a, 768, 5)
        lyr, _ = layer(
            "AuxLogits.fc",
            a,
            adaptive_avg_pool2d(1),
            flatten(),
            linear("AuxLogits.fc", NUM_CLASSES),
        )
        self.layers.append(lyr)


def _inception_v3(name: str, source: str, aux: bool, bn_scale: bool = True) -> ModelSpec:
    """The network in torchvision's registration order, with or without the auxiliary head and
    the batch norms' scale."""
    net = _Net(bn_scale)
    x = net.conv("Conv2d_1a_3x3", INPUT_SHAPE, 32, 3, stride=2)
    x = net.conv("Conv2d_2a_3x3", x, 32, 3)
    x = net.conv("Conv2d_2b_3x3", x, 64, 3, padding=1, after=(max_pool2d(3, stride=2),))
    x = net.conv("Conv2d_3b_1x1", x, 80, 1)
    x = net.conv("Conv2d_4a_3x3", x, 192, 3, after=(max_pool2d(3, stride=2),))
    x = net.inception_a("Mixed_5b", x, pool_features=32)
    x = net.inception_a("Mixed_5c", x, pool_features=64)
    x = net.inception_a("Mixed_5d", x, pool_features=64)
    x = net.inception_b("Mixed_6a", x)
    for block, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        x = net.inception_c(block, x, c7)
    if aux:
        net.aux_logits(x)
    x = net.inception_d("Mixed_7a", x)
    x = net.inception_e("Mixed_7b", x)
    x = net.inception_e("Mixed_7c", x)
    fc, _ = layer("fc", x, adaptive_avg_pool2d(1), dropout(), flatten(), linear("fc", NUM_CLASSES))
    net.layers.append(fc)
    return ModelSpec(name, tuple(net.layers), source, INPUT_SHAPE)


@register("inception_v3")
def inception_v3() -> ModelSpec:
    return _inception_v3("inception_v3", SOURCE, aux=True)


@register("inception_v3_noaux")
def inception_v3_noaux() -> ModelSpec:
    """Without the auxiliary head, as MXNet's published runs define it."""
    return _inception_v3("inception_v3_noaux", SOURCE_NOAUX, aux=False)


@register("inception_v3_tf")
def inception_v3_tf() -> ModelSpec:
    """TensorFlow's: no auxiliary head, and batch norms with a beta but no gamma."""
    return _inception_v3("inception_v3_tf", SOURCE_TF, aux=False, bn_scale=False)
