"""Transformers in the zoo: exact parameter counts, array names, FLOPs with the sequence term."""

from __future__ import annotations

import pytest

from simscale import zoo

# Parameter counts of the reference implementations: Hugging Face ``model.num_parameters()`` of
# GPT2LMHeadModel (tied head), BertModel (with pooler) and LlamaForCausalLM for each model
# card's config, and torchvision's ``num_params`` weights meta for the ViTs. Each is also the
# figure the model card states (GPT-2 "124M", Llama 2 7B "6.74B" ...), to the parameter.
REFERENCE_PARAMS = {
    "gpt2": 124_439_808,
    "gpt2_medium": 354_823_168,
    "gpt2_large": 774_030_080,
    "gpt2_xl": 1_557_611_200,
    "bert_base": 109_482_240,
    "bert_large": 335_141_888,
    "llama2_7b": 6_738_415_616,
    "llama2_13b": 13_015_864_320,
    "llama2_70b": 68_976_648_192,
    "llama3_1_8b": 8_030_261_248,
    "llama3_2_1b": 1_235_814_400,
    "vit_b_16": 86_567_656,
    "vit_l_16": 304_326_632,
}

# torchvision's ``_ops`` meta (GMACs at 224x224) for its ViTs.
TORCHVISION_GMACS = {"vit_b_16": 17.564, "vit_l_16": 61.555}


@pytest.mark.parametrize(("name", "params"), REFERENCE_PARAMS.items())
def test_parameter_count_equals_the_reference_implementation(name: str, params: int) -> None:
    assert zoo.get(name).params == params


def test_gpt2_arrays_follow_hugging_face_names_and_conv1d_shapes() -> None:
    arrays = zoo.get("gpt2").arrays
    assert arrays[0].name == "transformer.wte.weight" and arrays[0].shape == (50257, 768)
    assert arrays[2].name == "transformer.h.0.ln_1.weight"
    c_attn = next(a for a in arrays if a.name == "transformer.h.0.attn.c_attn.weight")
    assert c_attn.shape == (768, 2304)  # Conv1D stores (in, out)
    assert arrays[-1].name == "transformer.ln_f.bias"
    assert len(arrays) == 2 + 12 * 12 + 2


def test_llama_uses_grouped_query_attention_where_its_config_says() -> None:
    k_proj = next(
        a for a in zoo.get("llama2_70b").arrays if a.name.endswith("0.self_attn.k_proj.weight")
    )
    assert k_proj.shape == (1024, 8192)  # 8 KV heads of 128
    names = [a.name for a in zoo.get("llama3_2_1b").arrays]
    assert "lm_head.weight" not in names  # tied to the embedding
    assert "lm_head.weight" in [a.name for a in zoo.get("llama3_1_8b").arrays]


def test_vit_class_token_comes_first_as_torchvision_registers_it() -> None:
    names = [a.name for a in zoo.get("vit_b_16").arrays]
    assert names[:3] == ["class_token", "conv_proj.weight", "conv_proj.bias"]
    assert names[-1] == "heads.head.bias"


@pytest.mark.parametrize(("name", "gmacs"), TORCHVISION_GMACS.items())
def test_vit_forward_flops_match_torchvision_within_one_percent(name: str, gmacs: float) -> None:
    # torchvision counts matmuls only; the bias adds here are well under 1 %.
    assert zoo.get(name).fwd_flops / 2e9 == pytest.approx(gmacs, rel=0.01)


def test_gpt2_forward_flops_are_weights_attention_and_head() -> None:
    # Per sequence: 2·s·(block weights) + 4·s²·d per block + 2·s·d·V (Megatron-LM's count),
    # plus bias adds and the position-embedding add, well under 1 %.
    s, d, layers, vocab = 1024, 768, 12, 50257
    block_weights = 12 * d * d
    expected = layers * (2 * s * block_weights + 4 * s * s * d) + 2 * s * d * vocab
    assert zoo.get("gpt2").fwd_flops == pytest.approx(expected, rel=0.01)


def test_attention_makes_flops_grow_faster_than_the_sequence() -> None:
    short, long = zoo.get("gpt2", 512), zoo.get("gpt2", 1024)
    assert 2.0 < long.fwd_flops / short.fwd_flops < 2.3
    assert long.params == short.params and long.seq_len == 1024


def test_sequence_length_beyond_the_position_table_is_refused() -> None:
    with pytest.raises(ValueError, match=r"seq_len 2048 out of range, expected 1\.\.1024"):
        zoo.get("gpt2", 2048)


def test_an_image_model_takes_no_sequence_length() -> None:
    with pytest.raises(ValueError, match="takes no seq_len"):
        zoo.get("resnet50", 128)
    assert not zoo.is_sequence_model("vit_b_16") and zoo.is_sequence_model("bert_base")


def test_blocks_store_activations_as_korthikanti_et_al_count_them() -> None:
    # s·d·34 + 5·a·s² bytes per block per sequence at 16-bit activations.
    block = zoo.get("gpt2", 1024).layers[1]
    assert block.activation_bytes == 34 * 1024 * 768 + 5 * 12 * 1024 * 1024


# NumParams as llm-foundry's training benchmark tables print it (scripts/train/benchmarking/
# README.md at 49521837): the model's own count, which grows with seq_len (position rows).
MPT_TABLE_PARAMS = {
    ("mpt_125m", 2048): 125_311_488,
    ("mpt_125m", 65536): 174_070_272,
    ("mpt_350m", 2048): 355_985_408,
    ("mpt_760m", 2048): 760_470_528,
    ("mpt_1b", 1024): 1_313_853_440,
    ("mpt_1b", 2048): 1_315_950_592,
    ("mpt_3b", 2048): 2_651_837_440,
    ("mpt_7b", 2048): 6_658_859_008,
    ("mpt_13b", 2048): 12_853_954_560,
}


@pytest.mark.parametrize(("key", "params"), MPT_TABLE_PARAMS.items())
def test_mpt_parameter_count_equals_llm_foundry_benchmark_tables(
    key: tuple[str, int], params: int
) -> None:
    name, seq_len = key
    assert zoo.get(name, seq_len).params == params
