"""realrun's torch models: the zoo's architectures, array for array, and cheap enough to train."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch", reason="torch is in the realrun extra")

from torch import nn  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from realrun.training import torch_models  # noqa: E402
from simscale import zoo  # noqa: E402

GPT2_MODELS = sorted(torch_models.GPT2_TWINS)
# Zoo models with no torch twin yet (issue 37 asks for BERT-base and ViT-B/16 too).
NO_TWIN = {n for n in zoo.names() if n.startswith(("bert", "llama", "vit", "mpt"))}
# The image and vector models: fixed input shape, one label per sample.
ALL_MODELS = sorted(set(zoo.names()) - NO_TWIN - set(GPT2_MODELS))
SMALL_MODELS = ["mlp", "convnet_small"]
# A real forward that costs over 1.5 CPU seconds (build and forward, measured with
# tests.support.cpu_report) runs in the slow lane: VGG-16 allocates 138 M parameters; ResNet-50
# took 2.1 s, -101 4.5 s, -152 8.0 s, the Inceptions 3.7-5.5 s, ResNet-34 1.8 s. The fast lane
# still builds and runs a real model of each kind of block: resnet18, alexnet, alexnet_mxnet
# (and the Inceptions on the meta device, above).
SLOW_TO_BUILD = {
    "vgg16",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "inception_v3",
    "inception_v3_tf",
    "inception_v3_noaux",
}


def _on_meta(name: str, batch: int = 2) -> tuple[nn.Module, torch.Tensor]:
    # The meta device runs shapes through the model without allocating or computing anything.
    with torch.device("meta"):
        return torch_models.build(name), torch.randn(batch, *torch_models.input_shape(name))


def test_builds_the_same_models_as_the_zoo() -> None:
    """Every zoo model has a torch twin, and no other."""
    assert torch_models.names() == sorted(set(zoo.names()) - NO_TWIN)
    assert set(GPT2_MODELS) == {n for n in zoo.names() if n.startswith("gpt2")}
    with pytest.raises(KeyError, match="resnet50"):
        torch_models.build("resnet51")


@pytest.mark.parametrize("name", ALL_MODELS)
def test_named_parameters_equal_zoo_arrays(name: str) -> None:
    """Parameter i of the torch model is zoo array i: same name, same shape, same order."""
    model, _ = _on_meta(name)
    got = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    assert got == [(a.name, a.shape) for a in zoo.get(name).arrays]


@pytest.mark.parametrize("name", ALL_MODELS)
def test_input_shape_and_classes_agree_with_zoo(name: str) -> None:
    """The synthetic input shape is the zoo's, and the classes are the final layer's outputs."""
    assert torch_models.input_shape(name) == zoo.get(name).input_shape
    assert torch_models.num_classes(name) == zoo.get(name).arrays[-1].shape[0]


@pytest.mark.parametrize("name", ALL_MODELS)
def test_zoo_flops_agree_with_torch_flop_counter(name: str) -> None:
    """torch's own FLOP counter (convolutions and matrix products only) on the real model gives,
    for every zoo layer, no more than the zoo charges it, and at most 15 % less (the elementwise
    ops the counter skips: Inception's pooled 1x1 branches are the largest share); over the whole
    model the zoo is 0-2 % above the counter."""
    model, x = _on_meta(name)
    with FlopCounterMode(display=False) as counter:
        model(x)
    batch = x.shape[0]
    counts = counter.get_flop_counts()
    root = type(model).__name__
    modules = dict(model.named_modules())
    spec = zoo.get(name)
    for lyr in spec.layers:
        owners = {a.name.rsplit(".", 1)[0] for a in lyr.arrays}
        owners = {m for m in owners if isinstance(modules[m], nn.Conv2d | nn.Linear)}
        counted = sum(sum(counts.get(f"{root}.{m}", {}).values()) for m in owners) / batch
        if not owners:  # a max-pool-only Inception branch: nothing for the counter to see
            assert not lyr.arrays, lyr.name
            continue
        assert 0 <= lyr.fwd_flops - counted <= 0.15 * lyr.fwd_flops, lyr.name
    total = counter.get_total_flops() / batch
    assert 0 <= spec.fwd_flops / total - 1 < 0.02


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow) if n in SLOW_TO_BUILD else n
        for n in ALL_MODELS
        if n not in SMALL_MODELS
    ],
)
def test_real_forward_gives_finite_logits(name: str) -> None:
    """Built for real on the CPU, a model maps a batch of 2 to finite (2, classes) logits."""
    torch.manual_seed(0)
    model = torch_models.build(name).eval()
    x, _ = torch_models.synthetic_batch(name, 2)
    with torch.no_grad():
        out = model(x)
    assert out.shape == (2, torch_models.num_classes(name))
    assert torch.isfinite(out).all()


def test_inception_returns_aux_logits_in_training_only() -> None:
    """Training mode returns main and auxiliary logits (both trained), eval mode the main ones."""
    model, x = _on_meta("inception_v3")
    out = model.train()(x)
    assert isinstance(out, torch_models.InceptionOutputs)
    assert out.logits.shape == out.aux_logits.shape == (2, 1000)
    assert model.eval()(x).shape == (2, 1000)


def test_loss_adds_four_tenths_of_the_aux_loss() -> None:
    """Inception's training loss is CE(main) + 0.4 CE(aux); other models' is plain CE."""
    gen = torch.Generator().manual_seed(1)
    main, aux = torch.randn(4, 10, generator=gen), torch.randn(4, 10, generator=gen)
    labels = torch.tensor([0, 3, 9, 1])
    ce = nn.functional.cross_entropy
    combined = torch_models.loss(torch_models.InceptionOutputs(main, aux), labels)
    assert combined.item() == pytest.approx((ce(main, labels) + 0.4 * ce(aux, labels)).item())
    assert torch_models.loss(main, labels).item() == pytest.approx(ce(main, labels).item())


def test_synthetic_batch_is_reproducible_from_its_seed() -> None:
    """The same seed gives the same batch, another seed another; labels are valid classes."""
    x1, y1 = torch_models.synthetic_batch("convnet_small", 8, torch.Generator().manual_seed(7))
    x2, y2 = torch_models.synthetic_batch("convnet_small", 8, torch.Generator().manual_seed(7))
    x3, _ = torch_models.synthetic_batch("convnet_small", 8, torch.Generator().manual_seed(8))
    assert x1.shape == (8, 3, 32, 32) and x1.dtype == torch.float32
    assert y1.shape == (8,) and y1.dtype == torch.int64
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert not torch.equal(x1, x3)
    assert int(y1.min()) >= 0 and int(y1.max()) < 10
    with pytest.raises(ValueError, match="batch_size"):
        torch_models.synthetic_batch("mlp", 0)


@pytest.mark.parametrize("name", SMALL_MODELS)
def test_one_sgd_step_lowers_the_loss(name: str) -> None:
    """Every parameter gets a finite, nonzero gradient, and one SGD step on the batch lowers the
    loss on that same batch."""
    torch.manual_seed(0)
    model = torch_models.build(name).train()
    x, y = torch_models.synthetic_batch(name, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    before = torch_models.loss(model(x), y)
    before.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, pname
    opt.step()
    after = torch_models.loss(model(x), y)
    assert math.isfinite(before.item())
    assert after.item() < before.item()


@pytest.mark.parametrize("name", GPT2_MODELS)
def test_gpt2_named_parameters_equal_zoo_arrays(name: str) -> None:
    """GPT-2's twin lists Hugging Face GPT2LMHeadModel's arrays, the zoo's, in order."""
    with torch.device("meta"):
        model = torch_models.build(name)
    got = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    assert got == [(a.name, a.shape) for a in zoo.get(name).arrays]


def test_gpt2_tiny_flops_agree_with_torch_flop_counter() -> None:
    """The zoo's forward FLOPs of the tiny GPT-2 at seq_len 32 are the counter's matrix
    products (weights, attention's s^2 terms, the tied head) plus the biases the counter skips
    (the zoo does not discount the causal mask: neither does the counter's SDPA count)."""
    model, seq = torch_models.build("gpt2_tiny"), 32
    ids, _ = torch_models.synthetic_batch("gpt2_tiny", 2, seq_len=seq)
    with FlopCounterMode(display=False) as counter:
        model(ids)
    spec = zoo.get("gpt2_tiny", seq)
    biases = sum(a.elements for a in spec.arrays if a.name.endswith("bias")) * seq
    assert spec.fwd_flops - biases == pytest.approx(counter.get_total_flops() / 2, rel=0.01)


def test_gpt2_batch_is_next_token_and_one_step_lowers_the_loss() -> None:
    """Labels are the inputs shifted by one token; one SGD step lowers the LM loss."""
    torch.manual_seed(0)
    model = torch_models.build("gpt2_tiny")
    ids, labels = torch_models.synthetic_batch("gpt2_tiny", 2, seq_len=16)
    assert ids.shape == labels.shape == (2, 16)
    assert torch.equal(ids[:, 1:], labels[:, :-1])
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    before = torch_models.loss(model(ids), labels)
    assert before.item() == pytest.approx(math.log(50257), rel=0.02)  # uniform at the start
    before.backward()
    opt.step()
    assert torch_models.loss(model(ids), labels).item() < before.item()
    with pytest.raises(ValueError, match="seq_len 129"):
        torch_models.synthetic_batch("gpt2_tiny", 1, seq_len=129)
