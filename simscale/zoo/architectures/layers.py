"""Shape-tracking builders that turn an architecture definition into zoo Layers.

Each builder is written like the torch module it mirrors (``conv2d("conv1", 64, 7, stride=2,
padding=3)``) and returns a *step*: a function from the input activation shape of one sample to
an ``Op`` holding the parameter arrays (torch names and shapes), the forward FLOPs and the output
shape.
``layer`` runs a chain of steps and folds them into one ``Layer``, so FLOPs always follow from the
shapes that flow through the network, never from typed totals.

What a forward FLOP count includes (per sample, a multiply-add counts as 2 FLOPs):

- convolution: 2·C_out·H_out·W_out·(C_in/groups)·k_h·k_w, plus C_out·H_out·W_out for a bias;
- linear: 2·in·out, plus out for a bias;
- batch norm: 2 per element (normalise with per-channel scale and shift);
- ReLU, residual add, dropout: 1 per element; local response normalisation over n channels:
  n + 3 per element;
- max/avg pooling: k_h·k_w per output element; adaptive average pooling: 1 per input element.

The elementwise terms are well under 1 % of a ResNet's convolutions. They are memory-bound on real
hardware, so their FLOPs understate their time; per-layer calibration, not this count, covers that.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from simscale.zoo.spec import Layer, ParamArray

Shape = tuple[int, ...]
"""Activation shape of one sample: (channels, height, width) or (features,)."""

Pair = int | tuple[int, int]


@dataclass(frozen=True)
class Op:
    """One operation applied to one sample: its parameters, forward FLOPs and output shape."""

    arrays: tuple[ParamArray, ...]
    fwd_flops: float
    out_shape: Shape
    batchnorm_elements: float = 0.0  # the output's elements when the op is a batch norm


Step = Callable[[Shape], Op]
"""An operation waiting for its input shape."""


def _pair(value: Pair) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else value


def _spatial_out(size: int, kernel: int, stride: int, padding: int) -> int:
    # Floor division as torch does with ceil_mode=False, the default every zoo model uses.
    return (size + 2 * padding - kernel) // stride + 1


def _chw(shape: Shape, what: str) -> tuple[int, int, int]:
    if len(shape) != 3:
        raise ValueError(f"{what} needs a (C, H, W) input, got {shape}")
    return shape[0], shape[1], shape[2]


def conv2d(
    name: str,
    out_channels: int,
    kernel: Pair,
    stride: Pair = 1,
    padding: Pair = 0,
    bias: bool = False,
) -> Step:
    """A 2-D convolution (torch ``nn.Conv2d``) named ``name``; bias off as before a batch norm."""
    kh, kw = _pair(kernel)
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)

    def step(shape: Shape) -> Op:
        c, h, w = _chw(shape, f"conv2d {name}")
        ho, wo = _spatial_out(h, kh, sh, ph), _spatial_out(w, kw, sw, pw)
        if ho < 1 or wo < 1:
            raise ValueError(f"conv2d {name}: input {shape} too small for kernel {(kh, kw)}")
        outputs = out_channels * ho * wo
        arrays = [ParamArray(f"{name}.weight", (out_channels, c, kh, kw))]
        flops = 2 * outputs * c * kh * kw
        if bias:
            arrays.append(ParamArray(f"{name}.bias", (out_channels,)))
            flops += outputs
        return Op(tuple(arrays), flops, (out_channels, ho, wo))

    return step


def batchnorm2d(name: str, scale: bool = True) -> Step:
    """A 2-D batch norm with affine weight and bias (only the bias, a shift, without ``scale``, as
    TensorFlow's ``batch_norm(scale=False)``); running statistics are buffers, not keys."""

    def step(shape: Shape) -> Op:
        c, _, _ = _chw(shape, f"batchnorm2d {name}")
        arrays = (ParamArray(f"{name}.weight", (c,)),) if scale else ()
        arrays += (ParamArray(f"{name}.bias", (c,)),)
        elements = math.prod(shape)
        return Op(arrays, 2 * elements, shape, batchnorm_elements=float(elements))

    return step


def linear(name: str, out_features: int, bias: bool = True) -> Step:
    """A fully connected layer (torch ``nn.Linear``) over a flat input."""

    def step(shape: Shape) -> Op:
        if len(shape) != 1:
            raise ValueError(f"linear {name} needs a flat input, got {shape}; flatten first")
        (n_in,) = shape
        arrays = [ParamArray(f"{name}.weight", (out_features, n_in))]
        flops = 2 * n_in * out_features
        if bias:
            arrays.append(ParamArray(f"{name}.bias", (out_features,)))
            flops += out_features
        return Op(tuple(arrays), flops, (out_features,))

    return step


def _elementwise(flops_per_element: int) -> Step:
    def step(shape: Shape) -> Op:
        return Op((), flops_per_element * math.prod(shape), shape)

    return step


def relu() -> Step:
    """ReLU: one FLOP per element."""
    return _elementwise(1)


def add() -> Step:
    """The residual add of a ResNet block: one FLOP per element of the sum."""
    return _elementwise(1)


def dropout() -> Step:
    """Dropout in training: one multiply by the mask per element."""
    return _elementwise(1)


def local_response_norm(size: int) -> Step:
    """Local response normalisation across ``size`` neighbouring channels (AlexNet 2012): per
    element, ``size`` squares summed, then a scale, a power and a divide: size + 3 FLOPs."""
    return _elementwise(size + 3)


def flatten() -> Step:
    """Flatten (C, H, W) to (C·H·W,); a view, no FLOPs."""

    def step(shape: Shape) -> Op:
        return Op((), 0, (math.prod(shape),))

    return step


def _pool(kernel: Pair, stride: Pair | None, padding: Pair, what: str) -> Step:
    kh, kw = _pair(kernel)
    sh, sw = _pair(stride if stride is not None else kernel)
    ph, pw = _pair(padding)

    def step(shape: Shape) -> Op:
        c, h, w = _chw(shape, what)
        out = (c, _spatial_out(h, kh, sh, ph), _spatial_out(w, kw, sw, pw))
        return Op((), kh * kw * math.prod(out), out)

    return step


def max_pool2d(kernel: Pair, stride: Pair | None = None, padding: Pair = 0) -> Step:
    """Max pooling (stride defaults to the kernel, as in torch)."""
    return _pool(kernel, stride, padding, "max_pool2d")


def avg_pool2d(kernel: Pair, stride: Pair | None = None, padding: Pair = 0) -> Step:
    """Average pooling (stride defaults to the kernel, as in torch)."""
    return _pool(kernel, stride, padding, "avg_pool2d")


def adaptive_avg_pool2d(out_hw: Pair) -> Step:
    """Adaptive average pooling to a fixed output size; every input element is summed once."""
    oh, ow = _pair(out_hw)

    def step(shape: Shape) -> Op:
        c, _, _ = _chw(shape, "adaptive_avg_pool2d")
        return Op((), math.prod(shape), (c, oh, ow))

    return step


def run(shape: Shape, *steps: Step) -> tuple[tuple[Op, ...], Shape]:
    """Apply steps in order from an input shape; the ops and the final output shape."""
    ops = []
    for step in steps:
        op = step(shape)
        ops.append(op)
        shape = op.out_shape
    return tuple(ops), shape


def layer(name: str, shape: Shape, *steps: Step) -> tuple[Layer, Shape]:
    """One zoo Layer from a chain of steps: their arrays in order, their summed FLOPs, as the
    activations kept for backward every step's output at 2 bytes an element (an upper bound:
    frameworks run some activations in place), and its batch norms' output elements."""
    ops, out = run(shape, *steps)
    arrays = tuple(a for op in ops for a in op.arrays)
    saved = 2.0 * sum(math.prod(op.out_shape) for op in ops if op.fwd_flops > 0)
    flops = float(sum(op.fwd_flops for op in ops))
    normalised = float(sum(op.batchnorm_elements for op in ops))
    return Layer(name, flops, arrays, saved, batchnorm_elements=normalised), out


def concat_channels(*shapes: Shape) -> Shape:
    """The shape of branches concatenated along channels (Inception); their H, W must agree."""
    spatial = {s[1:] for s in shapes}
    if len(spatial) != 1:
        raise ValueError(f"cannot concatenate branches of different spatial size: {shapes}")
    return (sum(s[0] for s in shapes), *shapes[0][1:])
