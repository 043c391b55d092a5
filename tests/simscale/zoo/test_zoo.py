"""The model zoo: architectures reduced to parameter arrays and per-layer forward FLOPs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from simscale import zoo
from simscale.zoo.architectures.layers import (
    adaptive_avg_pool2d,
    batchnorm2d,
    concat_channels,
    conv2d,
    flatten,
    layer,
    linear,
    max_pool2d,
    relu,
)

# Parameter counts published by torchvision (``num_params`` in each model's IMAGENET1K_V1 weights
# meta, torchvision/models/{resnet,vgg,alexnet,inception}.py).
TORCHVISION_PARAMS = {
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "vgg16": 138_357_544,
    "alexnet": 61_100_840,
    "inception_v3": 27_161_264,
    # Inception3(aux_logits=False): torchvision publishes no weights for it; its count is the
    # aux_logits=True one less the auxiliary head's 3,326,696 (conv0 98,304 + bn 256, conv1
    # 2,457,600 + bn 1,536, fc 768,000 + 1,000).
    "inception_v3_noaux": 23_834_568,
    # TensorFlow's: the same less every batch norm's gamma (17,216 scales over 94 norms).
    "inception_v3_tf": 23_817_352,
}

# Forward multiply-adds per sample in units of 1e9, torchvision's ``_ops`` weights meta ("GFLOPS"
# in its model table): convolutions and linear layers only, at 224x224 (299x299 for Inception),
# Inception in eval mode (no auxiliary head).
TORCHVISION_GMACS = {
    "resnet18": 1.814,
    "resnet34": 3.664,
    "resnet50": 4.089,
    "resnet101": 7.801,
    "resnet152": 11.514,
    "vgg16": 15.47,
    "alexnet": 0.714,
    "inception_v3": 5.713,
    "inception_v3_noaux": 5.713,
    "inception_v3_tf": 5.713,
}

ALL_MODELS = [*TORCHVISION_PARAMS, "alexnet_mxnet", "mlp", "convnet_small"]


def test_every_model_is_registered() -> None:
    """The zoo offers the eight torchvision models, Inception v3 as MXNet (no auxiliary head)
    and TensorFlow (nor the batch norms' gamma) define it, MXNet's AlexNet and the two small
    test models, the transformers and llm-foundry's MPT (tests/simscale/zoo/test_transformer.py),
    and no others."""
    transformers = [
        *(f"gpt2{size}" for size in ("", "_medium", "_large", "_xl")),
        "gpt2_tiny",  # realrun's CPU-sized GPT-2, not a published size
        "bert_base",
        "bert_large",
        *("llama2_7b", "llama2_13b", "llama2_70b", "llama3_1_8b", "llama3_2_1b"),
        "vit_b_16",
        "vit_l_16",
        *(f"mpt_{size}" for size in ("125m", "350m", "760m", "1b", "3b", "7b", "13b")),
    ]
    assert zoo.names() == sorted([*ALL_MODELS, *transformers])


def test_unknown_model_error_lists_known_names() -> None:
    """Asking for a missing model names the ones there are, so a typo in a scenario is obvious."""
    with pytest.raises(KeyError, match="resnet50"):
        zoo.get("resnet51")


@pytest.mark.parametrize("name", sorted(TORCHVISION_PARAMS))
def test_parameter_count_equals_torchvision(name: str) -> None:
    """Counts derived from block configurations equal torchvision's published counts exactly."""
    assert zoo.get(name).params == TORCHVISION_PARAMS[name]


@pytest.mark.parametrize(
    ("name", "n_arrays"),
    [("resnet18", 62), ("resnet50", 161), ("resnet152", 467), ("vgg16", 32), ("alexnet", 16)],
)
def test_array_counts(name: str, n_arrays: int) -> None:
    """One key per weight, bias, BN weight and BN bias: ResNet-50 has 161, VGG-16 32 (13 convs
    and 3 linear layers, each with a bias)."""
    assert len(zoo.get(name).arrays) == n_arrays


def test_mxnet_alexnet_by_hand() -> None:
    """MXNet's example AlexNet on 3x224x224: conv1 11x11/4 unpadded gives 96x54x54, pooled to
    26x26; conv2 5x5 gives 256x26x26, pooled to 12x12; conv3-5 keep 12x12, pooled to 256x5x5 =
    6,400 inputs to fc1. Weights and biases: 34,944 + 614,656 + 885,120 + 1,327,488 + 884,992 +
    26,218,496 + 16,781,312 + 4,097,000 = 50,844,008. conv2 alone is 2*256*26*26*96*5*5 =
    830,668,800 FLOPs (plus its bias, ReLU, pool and LRN), the largest layer."""
    spec = zoo.get("alexnet_mxnet")
    assert spec.params == 50_844_008
    assert [a.shape for a in spec.arrays[::2]] == [
        (96, 3, 11, 11),
        (256, 96, 5, 5),
        (384, 256, 3, 3),
        (384, 384, 3, 3),
        (256, 384, 3, 3),
        (4096, 6400),
        (4096, 4096),
        (1000, 4096),
    ]
    conv2 = spec.layers[1]
    bias_relu = 2 * 256 * 26 * 26
    pool = 9 * 256 * 12 * 12
    lrn = 8 * 256 * 12 * 12
    assert conv2.fwd_flops == 830_668_800 + bias_relu + pool + lrn
    assert max(spec.layers, key=lambda lyr: lyr.fwd_flops) is conv2


def test_small_models_have_a_splittable_array() -> None:
    """mlp and convnet_small keep most parameters in one array above 100 k elements, small enough
    to run on a CPU yet large enough to be split across servers with a lowered bigarray bound."""
    mlp, convnet = zoo.get("mlp"), zoo.get("convnet_small")
    assert mlp.params == 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10 == 535_818
    assert max(a.elements for a in mlp.arrays) == 784 * 512
    assert 100_000 <= convnet.params <= 1_000_000
    assert max(a.elements for a in convnet.arrays) == 64 * 4 * 4 * 256


@pytest.mark.parametrize("name", ALL_MODELS)
def test_array_names_are_unique(name: str) -> None:
    """Every array name (a KVStore key's identity) occurs once."""
    names = [a.name for a in zoo.get(name).arrays]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("name", ALL_MODELS)
def test_a_layer_is_one_conv_or_linear_with_its_norm(name: str) -> None:
    """A layer with arrays starts with exactly one conv/linear weight (2-D or 4-D); the rest are
    its bias or its batch norm's 1-D weight and bias. Every layer costs some forward FLOPs."""
    for lyr in zoo.get(name).layers:
        assert lyr.fwd_flops > 0, lyr.name
        if not lyr.arrays:
            continue
        ranks = [len(a.shape) for a in lyr.arrays]
        assert ranks[0] in (2, 4), lyr.name
        assert all(r == 1 for r in ranks[1:]), lyr.name
        assert lyr.arrays[0].name.endswith(".weight")


def test_resnet50_bottleneck_keeps_torchvision_order() -> None:
    """A block that changes shape lists conv1, bn1, conv2, bn2, conv3, bn3, then downsample.0 and
    downsample.1, as torchvision's Bottleneck registers them."""
    spec = zoo.get("resnet50")
    block = [a.name for a in spec.arrays if a.name.startswith("layer2.0.")]
    assert block == [
        "layer2.0.conv1.weight",
        "layer2.0.bn1.weight",
        "layer2.0.bn1.bias",
        "layer2.0.conv2.weight",
        "layer2.0.bn2.weight",
        "layer2.0.bn2.bias",
        "layer2.0.conv3.weight",
        "layer2.0.bn3.weight",
        "layer2.0.bn3.bias",
        "layer2.0.downsample.0.weight",
        "layer2.0.downsample.1.weight",
        "layer2.0.downsample.1.bias",
    ]
    shapes = {a.name: a.shape for a in spec.arrays}
    # v1.5: the stride sits on the 3x3 conv; the 1x1 projection goes from 256 to 512 channels.
    assert shapes["layer2.0.conv2.weight"] == (128, 128, 3, 3)
    assert shapes["layer2.0.downsample.0.weight"] == (512, 256, 1, 1)
    assert spec.arrays[0].name == "conv1.weight"
    assert [a.name for a in spec.arrays[-2:]] == ["fc.weight", "fc.bias"]
    assert shapes["fc.weight"] == (1000, 2048)


def test_batchnorm_running_statistics_are_not_keys() -> None:
    """Running mean and variance are buffers, updated locally, never pushed."""
    for name in ALL_MODELS:
        assert not any("running" in a.name for a in zoo.get(name).arrays)


def test_inception_aux_head_sits_between_mixed_6e_and_mixed_7a() -> None:
    """torchvision registers AuxLogits after Mixed_6e, so its keys come before Mixed_7a's."""
    names = [a.name for a in zoo.get("inception_v3").arrays]
    aux = [i for i, n in enumerate(names) if n.startswith("AuxLogits.")]
    last_6e = max(i for i, n in enumerate(names) if n.startswith("Mixed_6e."))
    first_7a = min(i for i, n in enumerate(names) if n.startswith("Mixed_7a."))
    assert aux == list(range(last_6e + 1, first_7a))
    assert names[aux[-2]] == "AuxLogits.fc.weight"
    assert zoo.get("inception_v3").input_shape == (3, 299, 299)


def test_inception_without_aux_head_is_the_same_network_less_the_head() -> None:
    """TensorFlow's and MXNet's Inception v3: every array but AuxLogits', in the same order."""
    with_aux = [a for a in zoo.get("inception_v3").arrays if not a.name.startswith("AuxLogits.")]
    assert zoo.get("inception_v3_noaux").arrays == tuple(with_aux)


def test_tensorflows_inception_has_a_kernel_and_a_beta_per_convolution() -> None:
    """tf_cnn_benchmarks' batch norms do not scale: each convolution's variables are its kernel
    and the norm's beta, two per convolution, then the classifier's weight and bias."""
    arrays = zoo.get("inception_v3_tf").arrays
    convs = [a for a in arrays if a.name.endswith(".conv.weight")]
    assert len(convs) == 94 and len(arrays) == 2 * 94 + 2
    assert [a.name.rsplit(".", 2)[-2:] for a in arrays[:2]] == [["conv", "weight"], ["bn", "bias"]]
    assert not any(a.name.endswith(".bn.weight") for a in arrays)


@pytest.mark.parametrize("name", sorted(TORCHVISION_GMACS))
def test_forward_flops_match_torchvision_within_one_percent(name: str) -> None:
    """Forward FLOPs per sample are 2x torchvision's multiply-add count plus the elementwise ops
    (and Inception's training-only auxiliary head) it leaves out: at least the reference, and
    less than 1 % above it."""
    gmacs = zoo.get(name).fwd_flops / 2e9
    assert 0 <= gmacs / TORCHVISION_GMACS[name] - 1 < 0.01


def test_resnet50_forward_is_about_8_2_gflops() -> None:
    """The figure usually quoted for ResNet-50: about 4.1 G multiply-adds, 8.2 GFLOPs."""
    assert zoo.get("resnet50").fwd_flops == pytest.approx(8.2e9, rel=0.01)


def test_resnet_stem_flops_by_hand() -> None:
    """The 7x7/2 stem on 3x224x224 gives 64x112x112 (2*64*112*112*3*7*7 = 236,027,904 FLOPs),
    batch norm 2 and ReLU 1 per element (3 * 802,816), then a 3x3/2 max-pool to 64x56x56
    (9 per output: 9 * 200,704)."""
    stem = zoo.get("resnet50").layers[0]
    assert stem.name == "conv1"
    assert [a.name for a in stem.arrays] == ["conv1.weight", "bn1.weight", "bn1.bias"]
    assert stem.fwd_flops == 236_027_904 + 3 * 802_816 + 9 * 200_704


def test_builders_track_shapes_through_a_chain() -> None:
    """Steps apply in order; a layer's arrays and FLOPs are those of its steps, by hand:
    conv 2*8*4*4*3*3*3 = 6912 + bn 2*128 + relu 128; pool to 8x2x2 costs 4*32; then 32->5 linear
    2*32*5 + 5."""
    lyr, shape = layer(
        "block",
        (3, 4, 4),
        conv2d("c", 8, 3, padding=1),
        batchnorm2d("b"),
        relu(),
        max_pool2d(2),
        adaptive_avg_pool2d(2),
        flatten(),
        linear("fc", 5),
    )
    assert shape == (5,)
    assert [(a.name, a.shape) for a in lyr.arrays] == [
        ("c.weight", (8, 3, 3, 3)),
        ("b.weight", (8,)),
        ("b.bias", (8,)),
        ("fc.weight", (5, 32)),
        ("fc.bias", (5,)),
    ]
    assert lyr.fwd_flops == 6912 + 256 + 128 + 128 + 32 + 0 + 325


def test_conv_output_size_follows_torch_floor_rule() -> None:
    """Inception's stem: 299 -> 149 (3x3/2) -> 147 (3x3) -> 73 (max-pool 3/2); asymmetric 1x7
    kernels with (0, 3) padding keep the size."""
    _, shape = layer("s", (3, 299, 299), conv2d("a", 32, 3, stride=2), conv2d("b", 32, 3))
    assert shape == (32, 147, 147)
    _, shape = layer("p", shape, max_pool2d(3, stride=2), conv2d("c", 7, (1, 7), padding=(0, 3)))
    assert shape == (7, 73, 73)


def test_builders_reject_impossible_shapes() -> None:
    """A linear layer on an unflattened input, a kernel larger than its input and branches of
    different sizes are errors, not silent nonsense."""
    with pytest.raises(ValueError, match="flat"):
        layer("x", (3, 4, 4), linear("fc", 2))
    with pytest.raises(ValueError, match="too small"):
        layer("x", (3, 2, 2), conv2d("c", 4, 5))
    with pytest.raises(ValueError, match="spatial"):
        concat_channels((4, 8, 8), (4, 7, 7))
    assert concat_channels((4, 8, 8), (6, 8, 8)) == (10, 8, 8)


def test_zoo_never_imports_torch() -> None:
    """The simulator side stays free of torch: building every model loads no torch module."""
    code = (
        "import sys\nfrom simscale import zoo\n"
        "[zoo.get(n) for n in zoo.names()]\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1])
