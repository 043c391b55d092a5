"""Transformers: GPT-2, BERT, Llama and ViT, as their reference implementations define them.

Sources, each model's configuration and array names:
- GPT-2: Hugging Face ``GPT2LMHeadModel`` (``transformers/models/gpt2``), configurations of the
  ``gpt2``, ``gpt2-medium``, ``gpt2-large`` and ``gpt2-xl`` model cards (n_embd, n_layer,
  vocabulary 50,257, 1,024 positions). Its ``Conv1D`` stores weights as (in, out); the LM head
  is tied to ``wte``, so it adds FLOPs and no array.
- BERT: Hugging Face ``BertModel`` (encoder and pooler) with the ``bert-base-uncased`` and
  ``bert-large-uncased`` configurations (vocabulary 30,522, 512 positions, 2 token types).
- Llama: Hugging Face ``LlamaForCausalLM`` with the published ``config.json`` of Llama 2 7B, 13B,
  70B, Llama 3.1 8B and Llama 3.2 1B (grouped-query attention where ``num_key_value_heads`` is
  below the heads; Llama 3.2 1B ties its LM head to the embedding).
- ViT: torchvision ``models/vision_transformer.py`` (``vit_b_16``, ``vit_l_16``, 224x224 images,
  1,000 classes).

One zoo Layer per unit a sharded job wraps (PyTorch FSDP's transformer auto-wrap policy): the
embeddings, each block, and the final norm with the head. Forward FLOPs per sample of ``s`` tokens
(a multiply-add counts as 2): every weight matrix 2·s·(its elements), each bias s·(its length),
attention's sequence term 4·s²·d per block (Q·Kᵀ and the weighted sum of V over every query and
key: 2·s²·d each, causal masks not discounted, as Megatron-LM's FLOP count does), the head
2·s·d·V. Norms, softmax and activations are memory-bound and left out, as the CNN layers leave
out nothing comparable; calibration's efficiency covers them.

Activations stored for backward per block per sample follow Korthikanti et al. 2022 ("Reducing
Activation Recomputation in Large Transformer Models", eq. 2, no recomputation, no tensor
parallelism): s·d·34 + 5·a·s² bytes at 16-bit activations, ``a`` the heads; the head keeps its
logits, s·V fp32 values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simscale.zoo.registry import register_sequence
from simscale.zoo.spec import Layer, ModelSpec, ParamArray

BYTES_PER_BLOCK_TOKEN = 34  # Korthikanti et al. 2022, eq. 2: s·b·h·34 bytes per layer
BYTES_PER_ATTENTION_SCORE = 5  # ... + 5·a·s²·b bytes (scores, softmax, dropout mask)
LOGIT_BYTES = 4  # fp32 logits for the cross-entropy loss
BYTES_PER_BLOCK_INPUT = 2  # Korthikanti et al. 2022, section 4.1: full recomputation keeps 2·s·b·h


def _block_activation_bytes(seq_len: int, d_model: int, heads: int) -> float:
    return (
        BYTES_PER_BLOCK_TOKEN * seq_len * d_model
        + BYTES_PER_ATTENTION_SCORE * heads * seq_len * seq_len
    )


def _matmul_layer(
    name: str,
    arrays: list[ParamArray],
    seq_len: int,
    extra_flops: float = 0.0,
    activation_bytes: float = 0.0,
    embedding_prefixes: tuple[str, ...] = (),
    heads: int = 0,
) -> Layer:
    """A Layer whose weight matrices cost 2·s·elements and biases (a norm's shift among them)
    s·elements per sample; embedding tables (names starting with ``embedding_prefixes``) are
    lookups, free."""
    flops = extra_flops
    # A block's (``heads`` > 0) share of activation_bytes that is attention's scores; the rest
    # is 34·s·d, so its 16-bit input (2·s·d) is that rest's 2/34.
    score_bytes = float(BYTES_PER_ATTENTION_SCORE * heads * seq_len * seq_len)
    input_bytes = (activation_bytes - score_bytes) * BYTES_PER_BLOCK_INPUT / BYTES_PER_BLOCK_TOKEN
    attention_flops = extra_flops if heads else 0.0
    if not heads:
        input_bytes = 0.0
    for a in arrays:
        if a.name.startswith(embedding_prefixes):
            continue
        if a.name.endswith("bias"):
            flops += seq_len * a.elements
        elif len(a.shape) == 2:
            flops += 2.0 * seq_len * a.elements
    return Layer(
        name, flops, tuple(arrays), activation_bytes, score_bytes, attention_flops, input_bytes
    )


def _check_seq_len(model: str, seq_len: int, positions: int) -> None:
    if not 1 <= seq_len <= positions:
        raise ValueError(
            f"model {model!r}: seq_len {seq_len} out of range, expected 1..{positions} "
            "(its position embeddings)"
        )


# ---- GPT-2 -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GPT2Config:
    """A GPT-2 size as its Hugging Face model card configures it."""

    d_model: int
    layers: int
    heads: int
    vocab: int = 50257
    positions: int = 1024


GPT2_SOURCE = "Hugging Face GPT2LMHeadModel, model card config ({card}); LM head tied to wte"


def gpt2(name: str, card: str, c: GPT2Config, seq_len: int) -> ModelSpec:
    """GPT2LMHeadModel's arrays in ``named_parameters()`` order, per-block Layers."""
    _check_seq_len(name, seq_len, c.positions)
    d, s = c.d_model, seq_len
    embed = [
        ParamArray("transformer.wte.weight", (c.vocab, d)),
        ParamArray("transformer.wpe.weight", (c.positions, d)),
    ]
    layers = [
        _matmul_layer("transformer.embeddings", embed, s, s * d, 2 * s * d, ("transformer.w",))
    ]
    for i in range(c.layers):
        p = f"transformer.h.{i}"
        arrays = [
            ParamArray(f"{p}.ln_1.weight", (d,)),
            ParamArray(f"{p}.ln_1.bias", (d,)),
            ParamArray(f"{p}.attn.c_attn.weight", (d, 3 * d)),
            ParamArray(f"{p}.attn.c_attn.bias", (3 * d,)),
            ParamArray(f"{p}.attn.c_proj.weight", (d, d)),
            ParamArray(f"{p}.attn.c_proj.bias", (d,)),
            ParamArray(f"{p}.ln_2.weight", (d,)),
            ParamArray(f"{p}.ln_2.bias", (d,)),
            ParamArray(f"{p}.mlp.c_fc.weight", (d, 4 * d)),
            ParamArray(f"{p}.mlp.c_fc.bias", (4 * d,)),
            ParamArray(f"{p}.mlp.c_proj.weight", (4 * d, d)),
            ParamArray(f"{p}.mlp.c_proj.bias", (d,)),
        ]
        layers.append(
            _matmul_layer(
                p,
                arrays,
                s,
                4.0 * s * s * d,
                _block_activation_bytes(s, d, c.heads),
                heads=c.heads,
            )
        )
    head = [ParamArray("transformer.ln_f.weight", (d,)), ParamArray("transformer.ln_f.bias", (d,))]
    layers.append(
        Layer("lm_head", 2.0 * s * d * c.vocab, tuple(head), float(LOGIT_BYTES * s * c.vocab))
    )
    return ModelSpec(name, tuple(layers), GPT2_SOURCE.format(card=card), seq_len=seq_len)


GPT2_SIZES = {
    "gpt2": ("gpt2", GPT2Config(768, 12, 12)),
    "gpt2_medium": ("gpt2-medium", GPT2Config(1024, 24, 16)),
    "gpt2_large": ("gpt2-large", GPT2Config(1280, 36, 20)),
    "gpt2_xl": ("gpt2-xl", GPT2Config(1600, 48, 25)),
}


def _register_gpt2(name: str, card: str, config: GPT2Config) -> None:
    @register_sequence(name, config.positions)
    def build(seq_len: int) -> ModelSpec:
        return gpt2(name, card, config, seq_len)


for _name, (_card, _config) in GPT2_SIZES.items():
    _register_gpt2(_name, _card, _config)

# Not a published size: GPT-2's architecture and vocabulary at width 128, 2 blocks, 4 heads and
# 128 positions (6.9 M parameters, 6.4 M of them the tied embedding), so realrun can train it
# for real on a CPU core and move its 27.7 MB of gradients over an emulated cluster's links.
GPT2_TINY = GPT2Config(128, 2, 4, positions=128)
_register_gpt2(
    "gpt2_tiny", "gpt2 architecture, realrun's CPU size (not a published model)", GPT2_TINY
)


# ---- MPT (MosaicML llm-foundry) ---------------------------------------------------------------

# llm-foundry's MPT as its training benchmarks ran it (scripts/train/yamls/pretrain/mpt-*.yaml at
# 5e85bd62, January 2024): the MPTConfig defaults of then (biases on, LayerNorm with bias,
# learned position embeddings of max_seq_len rows, LM head tied to the embedding) and vocabulary
# 50,368. That is GPT2LMHeadModel's array layout with another vocabulary, and position rows as
# many as the run's seq_len: the benchmarks set max_seq_len to it, so NumParams in their tables
# grows with seq_len (125m: 125,311,488 at 2,048, 124,525,056 at 1,024). (d_model, layers, heads)
MPT_SIZES = {
    "mpt_125m": (768, 12, 12),
    "mpt_350m": (1024, 24, 16),
    "mpt_760m": (1536, 24, 12),
    "mpt_1b": (2048, 24, 16),
    "mpt_3b": (2560, 32, 20),
    "mpt_7b": (4096, 32, 32),
    "mpt_13b": (5120, 40, 40),
}
MPT_VOCAB = 50368
MPT_MAX_SEQ_LEN = 65536  # the longest seq_len in llm-foundry's benchmark tables
MPT_SOURCE = (
    "llm-foundry MPT, scripts/train/yamls/pretrain/mpt-{size}.yaml at 5e85bd62 "
    "(biases, learned positions of max_seq_len = seq_len rows, LM head tied to wte)"
)


def _register_mpt(name: str, d_model: int, layers: int, heads: int) -> None:
    @register_sequence(name, 2048)  # the yamls' max_seq_len
    def build(seq_len: int) -> ModelSpec:
        _check_seq_len(name, seq_len, MPT_MAX_SEQ_LEN)
        config = GPT2Config(d_model, layers, heads, MPT_VOCAB, positions=seq_len)
        spec = gpt2(name, "", config, seq_len)
        return replace(spec, source=MPT_SOURCE.format(size=name[4:]))


for _name, (_d, _layers, _heads) in MPT_SIZES.items():
    _register_mpt(_name, _d, _layers, _heads)


# ---- BERT ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BertConfig:
    d_model: int
    layers: int
    heads: int
    vocab: int = 30522
    positions: int = 512
    token_types: int = 2


BERT_SOURCE = "Hugging Face BertModel (encoder and pooler), {card} config"


def bert(name: str, card: str, c: BertConfig, seq_len: int) -> ModelSpec:
    """BertModel's arrays in ``named_parameters()`` order, per-block Layers."""
    _check_seq_len(name, seq_len, c.positions)
    d, s, f = c.d_model, seq_len, 4 * c.d_model
    e = "embeddings"
    embed = [
        ParamArray(f"{e}.word_embeddings.weight", (c.vocab, d)),
        ParamArray(f"{e}.position_embeddings.weight", (c.positions, d)),
        ParamArray(f"{e}.token_type_embeddings.weight", (c.token_types, d)),
        ParamArray(f"{e}.LayerNorm.weight", (d,)),
        ParamArray(f"{e}.LayerNorm.bias", (d,)),
    ]
    layers = [_matmul_layer("embeddings", embed, s, 2 * s * d, 2 * s * d, (f"{e}.",))]
    for i in range(c.layers):
        p = f"encoder.layer.{i}"
        arrays = []
        for proj in ("query", "key", "value"):
            arrays += [
                ParamArray(f"{p}.attention.self.{proj}.weight", (d, d)),
                ParamArray(f"{p}.attention.self.{proj}.bias", (d,)),
            ]
        arrays += [
            ParamArray(f"{p}.attention.output.dense.weight", (d, d)),
            ParamArray(f"{p}.attention.output.dense.bias", (d,)),
            ParamArray(f"{p}.attention.output.LayerNorm.weight", (d,)),
            ParamArray(f"{p}.attention.output.LayerNorm.bias", (d,)),
            ParamArray(f"{p}.intermediate.dense.weight", (f, d)),
            ParamArray(f"{p}.intermediate.dense.bias", (f,)),
            ParamArray(f"{p}.output.dense.weight", (d, f)),
            ParamArray(f"{p}.output.dense.bias", (d,)),
            ParamArray(f"{p}.output.LayerNorm.weight", (d,)),
            ParamArray(f"{p}.output.LayerNorm.bias", (d,)),
        ]
        layers.append(
            _matmul_layer(
                p, arrays, s, 4.0 * s * s * d, _block_activation_bytes(s, d, c.heads), heads=c.heads
            )
        )
    # The pooler runs on the first token only.
    pooler = [ParamArray("pooler.dense.weight", (d, d)), ParamArray("pooler.dense.bias", (d,))]
    layers.append(_matmul_layer("pooler", pooler, 1, 0.0, 2.0 * d))
    return ModelSpec(name, tuple(layers), BERT_SOURCE.format(card=card), seq_len=seq_len)


BERT_SIZES = {
    "bert_base": ("bert-base-uncased", BertConfig(768, 12, 12)),
    "bert_large": ("bert-large-uncased", BertConfig(1024, 24, 16)),
}


def _register_bert(name: str, card: str, config: BertConfig) -> None:
    @register_sequence(name, 128)  # NVIDIA's BERT pre-training phase 1 sequence length
    def build(seq_len: int) -> ModelSpec:
        return bert(name, card, config, seq_len)


for _name, (_card, _bconfig) in BERT_SIZES.items():
    _register_bert(_name, _card, _bconfig)


# ---- Llama -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LlamaConfig:
    """The fields of a Llama ``config.json`` the arrays depend on."""

    d_model: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    positions: int
    tied_head: bool = False


LLAMA_SOURCE = "Hugging Face LlamaForCausalLM, {card} config.json"


def llama(name: str, card: str, c: LlamaConfig, seq_len: int) -> ModelSpec:
    """LlamaForCausalLM's arrays in ``named_parameters()`` order, per-block Layers."""
    _check_seq_len(name, seq_len, c.positions)
    d, s = c.d_model, seq_len
    kv = d // c.heads * c.kv_heads
    embed = [ParamArray("model.embed_tokens.weight", (c.vocab, d))]
    layers = [_matmul_layer("model.embed_tokens", embed, s, 0.0, 2 * s * d, ("model.embed",))]
    for i in range(c.layers):
        p = f"model.layers.{i}"
        arrays = [
            ParamArray(f"{p}.self_attn.q_proj.weight", (d, d)),
            ParamArray(f"{p}.self_attn.k_proj.weight", (kv, d)),
            ParamArray(f"{p}.self_attn.v_proj.weight", (kv, d)),
            ParamArray(f"{p}.self_attn.o_proj.weight", (d, d)),
            ParamArray(f"{p}.mlp.gate_proj.weight", (c.ffn, d)),
            ParamArray(f"{p}.mlp.up_proj.weight", (c.ffn, d)),
            ParamArray(f"{p}.mlp.down_proj.weight", (d, c.ffn)),
            ParamArray(f"{p}.input_layernorm.weight", (d,)),
            ParamArray(f"{p}.post_attention_layernorm.weight", (d,)),
        ]
        layers.append(
            _matmul_layer(
                p, arrays, s, 4.0 * s * s * d, _block_activation_bytes(s, d, c.heads), heads=c.heads
            )
        )
    head = [ParamArray("model.norm.weight", (d,))]
    if not c.tied_head:
        head.append(ParamArray("lm_head.weight", (c.vocab, d)))
    layers.append(
        Layer("lm_head", 2.0 * s * d * c.vocab, tuple(head), float(LOGIT_BYTES * s * c.vocab))
    )
    return ModelSpec(name, tuple(layers), LLAMA_SOURCE.format(card=card), seq_len=seq_len)


LLAMA_SIZES = {
    "llama2_7b": ("meta-llama/Llama-2-7b-hf", LlamaConfig(4096, 32, 32, 32, 11008, 32000, 4096)),
    "llama2_13b": (
        "meta-llama/Llama-2-13b-hf",
        LlamaConfig(5120, 40, 40, 40, 13824, 32000, 4096),
    ),
    "llama2_70b": ("meta-llama/Llama-2-70b-hf", LlamaConfig(8192, 80, 64, 8, 28672, 32000, 4096)),
    "llama3_1_8b": (
        "meta-llama/Llama-3.1-8B",
        LlamaConfig(4096, 32, 32, 8, 14336, 128256, 131072),
    ),
    "llama3_2_1b": (
        "meta-llama/Llama-3.2-1B",
        LlamaConfig(2048, 16, 32, 8, 8192, 128256, 131072, tied_head=True),
    ),
}
LLAMA_DEFAULT_SEQ_LEN = 4096  # Llama 2's context; Llama 3 was pre-trained at 8,192


def _register_llama(name: str, card: str, config: LlamaConfig) -> None:
    @register_sequence(name, LLAMA_DEFAULT_SEQ_LEN)
    def build(seq_len: int) -> ModelSpec:
        return llama(name, card, config, seq_len)


for _name, (_card, _lconfig) in LLAMA_SIZES.items():
    _register_llama(_name, _card, _lconfig)


# ---- ViT -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ViTConfig:
    d_model: int
    layers: int
    heads: int
    mlp: int
    patch: int = 16
    image: int = 224
    classes: int = 1000


VIT_SOURCE = "torchvision models/vision_transformer.py, {card} (224x224, 1,000 classes)"


def vit(name: str, card: str, c: ViTConfig) -> ModelSpec:
    """torchvision's VisionTransformer arrays in ``named_parameters()`` order (a module's own
    parameters before its children's: ``class_token`` before ``conv_proj``)."""
    d = c.d_model
    patches = (c.image // c.patch) ** 2
    s = patches + 1  # the class token
    stem = [
        ParamArray("class_token", (1, 1, d)),
        ParamArray("conv_proj.weight", (d, 3, c.patch, c.patch)),
        ParamArray("conv_proj.bias", (d,)),
        ParamArray("encoder.pos_embedding", (1, s, d)),
    ]
    # The patch projection is a strided convolution: 2·d·3·p² per patch, and its bias.
    stem_flops = 2.0 * patches * d * 3 * c.patch * c.patch + patches * d + s * d
    layers = [Layer("conv_proj", stem_flops, tuple(stem), 2.0 * s * d)]
    for i in range(c.layers):
        p = f"encoder.layers.encoder_layer_{i}"
        arrays = [
            ParamArray(f"{p}.ln_1.weight", (d,)),
            ParamArray(f"{p}.ln_1.bias", (d,)),
            ParamArray(f"{p}.self_attention.in_proj_weight", (3 * d, d)),
            ParamArray(f"{p}.self_attention.in_proj_bias", (3 * d,)),
            ParamArray(f"{p}.self_attention.out_proj.weight", (d, d)),
            ParamArray(f"{p}.self_attention.out_proj.bias", (d,)),
            ParamArray(f"{p}.ln_2.weight", (d,)),
            ParamArray(f"{p}.ln_2.bias", (d,)),
            ParamArray(f"{p}.mlp.0.weight", (c.mlp, d)),
            ParamArray(f"{p}.mlp.0.bias", (c.mlp,)),
            ParamArray(f"{p}.mlp.3.weight", (d, c.mlp)),
            ParamArray(f"{p}.mlp.3.bias", (d,)),
        ]
        layers.append(
            _matmul_layer(
                p, arrays, s, 4.0 * s * s * d, _block_activation_bytes(s, d, c.heads), heads=c.heads
            )
        )
    head = [
        ParamArray("encoder.ln.weight", (d,)),
        ParamArray("encoder.ln.bias", (d,)),
        ParamArray("heads.head.weight", (c.classes, d)),
        ParamArray("heads.head.bias", (c.classes,)),
    ]
    # The classifier sees the class token only.
    head_flops = 2.0 * d * c.classes + c.classes
    layers.append(Layer("heads", head_flops, tuple(head), LOGIT_BYTES * c.classes))
    spec = ModelSpec(name, tuple(layers), VIT_SOURCE.format(card=card), (3, c.image, c.image))
    return spec


VIT_SIZES = {
    "vit_b_16": ("vit_b_16", ViTConfig(768, 12, 12, 3072)),
    "vit_l_16": ("vit_l_16", ViTConfig(1024, 24, 16, 4096)),
}


def _register_vit(name: str, card: str, config: ViTConfig) -> None:
    from simscale.zoo.registry import register

    @register(name)
    def build() -> ModelSpec:
        return vit(name, card, config)


for _name, (_card, _vconfig) in VIT_SIZES.items():
    _register_vit(_name, _card, _vconfig)
