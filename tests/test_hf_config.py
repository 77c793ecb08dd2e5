"""Hugging Face config.json reader: hermetic round trips against the presets and per-family fields."""

from __future__ import annotations

import json

import pytest

from trainperf.errors import InputFileError, SpecError
from trainperf.specs.hf_config import SUPPORTED_MODEL_TYPES, model_from_hf_config
from trainperf.specs.model import ModelSpec
from trainperf.specs.presets import get_model


def shape(spec: ModelSpec) -> dict:
    d = spec.to_dict()
    d.pop("name")
    d.pop("source")
    return d


LLAMA3_8B = {
    "_name_or_path": "meta-llama/Meta-Llama-3-8B",
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}

MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mixtral",
    "num_attention_heads": 32,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "output_router_logits": False,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1e6,
    "router_aux_loss_coef": 0.02,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 32000,
}

QWEN25_7B = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 3584,
    "initializer_range": 0.02,
    "intermediate_size": 18944,
    "max_position_embeddings": 131072,
    "max_window_layers": 28,
    "model_type": "qwen2",
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_mrope": False,
    "use_sliding_window": False,
    "vocab_size": 152064,
}

QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 12288,
    "max_position_embeddings": 40960,
    "max_window_layers": 36,
    "model_type": "qwen3",
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False,
    "decoder_sparse_step": 1,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

QWEN15_MOE_A27B = {
    "architectures": ["Qwen2MoeForCausalLM"],
    "decoder_sparse_step": 1,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "max_position_embeddings": 8192,
    "max_window_layers": 21,
    "model_type": "qwen2_moe",
    "moe_intermediate_size": 1408,
    "norm_topk_prob": False,
    "num_attention_heads": 16,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_key_value_heads": 16,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "shared_expert_intermediate_size": 5632,
    "sliding_window": 32768,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

GPT2 = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1,
    "bos_token_id": 50256,
    "embd_pdrop": 0.1,
    "eos_token_id": 50256,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "resid_pdrop": 0.1,
    "summary_activation": None,
    "vocab_size": 50257,
}

PYTHIA_410M = {
    "_name_or_path": "EleutherAI/pythia-410m",
    "architectures": ["GPTNeoXForCausalLM"],
    "bos_token_id": 0,
    "eos_token_id": 0,
    "hidden_act": "gelu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 4096,
    "layer_norm_eps": 1e-05,
    "max_position_embeddings": 2048,
    "model_type": "gpt_neox",
    "num_attention_heads": 16,
    "num_hidden_layers": 24,
    "rotary_emb_base": 10000,
    "rotary_pct": 0.25,
    "tie_word_embeddings": False,
    "use_cache": True,
    "use_parallel_residual": True,
    "vocab_size": 50304,
}

MPT_7B = {
    "architectures": ["MPTForCausalLM"],
    "attn_config": {
        "alibi": True, "alibi_bias_max": 8, "attn_impl": "torch", "attn_pdrop": 0,
        "attn_type": "multihead_attention", "attn_uses_sequence_id": False, "clip_qkv": None,
        "prefix_lm": False, "qk_ln": False, "softmax_scale": None,
    },
    "d_model": 4096,
    "emb_pdrop": 0,
    "embedding_fraction": 1.0,
    "expansion_ratio": 4,
    "init_device": "cpu",
    "learned_pos_emb": True,
    "logit_scale": None,
    "max_seq_len": 2048,
    "model_type": "mpt",
    "n_heads": 32,
    "n_layers": 32,
    "no_bias": True,
    "norm_type": "low_precision_layernorm",
    "resid_pdrop": 0,
    "tokenizer_name": "EleutherAI/gpt-neox-20b",
    "torch_dtype": "bfloat16",
    "use_cache": False,
    "verbose": 0,
    "vocab_size": 50432,
}

GEMMA_7B = {
    "architectures": ["GemmaForCausalLM"],
    "attention_bias": False,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "head_dim": 256,
    "hidden_act": "gelu",
    "hidden_size": 3072,
    "initializer_range": 0.02,
    "intermediate_size": 24576,
    "max_position_embeddings": 8192,
    "model_type": "gemma",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 16,
    "pad_token_id": 0,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "torch_dtype": "bfloat16",
    "vocab_size": 256000,
}

GEMMA2_9B = {
    "architectures": ["Gemma2ForCausalLM"],
    "attn_logit_softcapping": 50.0,
    "bos_token_id": 2,
    "cache_implementation": "hybrid",
    "eos_token_id": 1,
    "final_logit_softcapping": 30.0,
    "head_dim": 256,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 3584,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "gemma2",
    "num_attention_heads": 16,
    "num_hidden_layers": 42,
    "num_key_value_heads": 8,
    "pad_token_id": 0,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "torch_dtype": "float32",
    "vocab_size": 256000,
}

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"},
    "aux_loss_alpha": 0.001,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "initializer_range": 0.02,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "v_head_dim": 128,
    "vocab_size": 129280,
}


@pytest.mark.parametrize(("config", "preset"), [
    (LLAMA3_8B, "llama3-8b"),
    (MIXTRAL_8X7B, "mixtral-8x7b"),
    (QWEN25_7B, "qwen2.5-7b"),
    (GPT2, "gpt2"),
    (MPT_7B, "mpt-7b"),
    (GEMMA2_9B, "gemma2-9b"),
    (DEEPSEEK_V3, "deepseek-v3"),
], ids=lambda v: v if isinstance(v, str) else v["model_type"])
def test_round_trip_matches_preset(config, preset):
    spec = model_from_hf_config(config)
    assert shape(spec) == shape(get_model(preset))
    assert spec.total_params == get_model(preset).total_params


def test_name_and_source_from_dict_and_file(tmp_path):
    spec = model_from_hf_config(LLAMA3_8B)
    assert spec.name == "meta-llama/Meta-Llama-3-8B"
    assert model_from_hf_config(GPT2).name == "gpt2"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT2))
    from_file = model_from_hf_config(path)
    assert from_file.source == str(path) and from_file.name == "gpt2"
    assert shape(from_file) == shape(model_from_hf_config(GPT2))
    assert model_from_hf_config(str(path)) == from_file


def test_directory_path_reads_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B))
    spec = model_from_hf_config(tmp_path)
    assert spec.source == str(tmp_path / "config.json")
    assert shape(spec) == shape(get_model("llama3-8b"))
    assert shape(ModelSpec.from_hf_config(tmp_path)) == shape(spec)


def test_qwen2_has_qkv_bias_and_no_window_when_disabled():
    spec = model_from_hf_config(QWEN25_7B)
    assert spec.qkv_bias and not spec.bias and spec.sliding_window_layers == 0
    windowed = model_from_hf_config({**QWEN25_7B, "use_sliding_window": True, "sliding_window": 4096,
                                     "max_window_layers": 20})
    assert (windowed.sliding_window, windowed.sliding_window_layers) == (4096, 8)


def test_qwen3_head_dim_and_qk_norm():
    spec = model_from_hf_config(QWEN3_8B)
    assert spec.head_dim == 128 and spec.qk_norm and not spec.qkv_bias
    assert spec.q_dim == 4096 and spec.kv_dim == 1024
    # Qwen3-8B: 8.19B parameters (model card).
    assert spec.total_params == pytest.approx(8.19e9, rel=0.002)
    # Qwen3-0.6B-like: head_dim differs from hidden/heads.
    small = model_from_hf_config({**QWEN3_8B, "hidden_size": 1024, "num_attention_heads": 16,
                                  "intermediate_size": 3072, "num_hidden_layers": 28,
                                  "tie_word_embeddings": True})
    assert small.head_dim == 128 != 1024 // 16 and small.q_dim == 2048 and small.tied_embeddings
    assert small.total_params == pytest.approx(0.596e9, rel=0.002)  # Qwen3-0.6B: 596M incl. embeddings


def test_qwen3_moe():
    spec = model_from_hf_config(QWEN3_30B_A3B)
    assert (spec.moe_experts, spec.moe_topk, spec.moe_expert_ffn, spec.moe_shared_experts,
            spec.moe_dense_layers) == (128, 8, 768, 0, 0)
    assert spec.qk_norm and spec.head_dim == 128
    # Qwen3-30B-A3B model card: 30.5B total, 3.3B activated.
    assert spec.total_params == pytest.approx(30.5e9, rel=0.005)
    assert spec.active_params == pytest.approx(3.3e9, rel=0.02)


def test_qwen2_moe_shared_expert_as_multiple_of_expert_width():
    spec = model_from_hf_config(QWEN15_MOE_A27B)
    assert spec.qkv_bias
    assert (spec.moe_experts, spec.moe_topk, spec.moe_expert_ffn, spec.moe_shared_experts) == (60, 4, 1408, 4)
    # Qwen1.5-MoE-A2.7B: 14.3B total, 2.7B activated (model card); the shared-expert gates are counted.
    assert spec.total_params == pytest.approx(14.3e9, rel=0.005)
    assert spec.active_params == pytest.approx(2.7e9, rel=0.03)
    odd = model_from_hf_config({**QWEN15_MOE_A27B, "shared_expert_intermediate_size": 2000,
                                "mlp_only_layers": [0, 1]})
    assert odd.moe_shared_experts == 1 and odd.moe_dense_layers == 2 and not odd.moe_dense_interleaved
    assert not spec.moe_dense_interleaved
    # dense layers after the first MoE one are interleaved with the MoE layers
    spread = model_from_hf_config({**QWEN15_MOE_A27B, "mlp_only_layers": [0, 5]})
    assert spread.moe_dense_layers == 2 and spread.moe_dense_interleaved
    every_other = model_from_hf_config({**QWEN15_MOE_A27B, "decoder_sparse_step": 2})
    assert every_other.moe_dense_layers == 12 and every_other.moe_dense_interleaved
    assert "approximated" in odd.extra["notes"]


def test_gpt2_defaults():
    spec = model_from_hf_config(GPT2)
    assert spec.total_params == 124_439_808
    assert (spec.ffn_hidden, spec.tied_embeddings, spec.bias, spec.position, spec.max_seq_len, spec.mlp) == (
        3072, True, True, "learned", 1024, "gelu")
    assert model_from_hf_config({**GPT2, "n_inner": 1000}).ffn_hidden == 1000
    assert model_from_hf_config({**GPT2, "activation_function": "relu"}).mlp == "relu"


def test_gpt_neox():
    spec = model_from_hf_config(PYTHIA_410M)
    assert spec.name == "EleutherAI/pythia-410m"
    assert (spec.bias, spec.norm, spec.mlp, spec.parallel_residual, spec.tied_embeddings, spec.position) == (
        True, "layernorm", "gelu", True, False, "rope")
    # Pythia-410M: 405,334,016 parameters (Biderman et al. 2023 Table 1).
    assert spec.total_params == 405_334_016


def test_mpt_fields():
    spec = model_from_hf_config(MPT_7B)
    assert (spec.ffn_hidden, spec.bias, spec.position, spec.norm, spec.tied_embeddings, spec.mlp) == (
        16384, False, "alibi", "layernorm", True, "gelu")
    gqa = model_from_hf_config({**MPT_7B, "attn_config": {"attn_type": "grouped_query_attention",
                                                         "kv_n_heads": 8, "rope": True},
                                "ffn_config": {"ffn_type": "mptgeglu"}, "expansion_ratio": 3,
                                "no_bias": False})
    assert (gqa.kv_heads, gqa.position, gqa.mlp, gqa.ffn_hidden, gqa.bias) == (8, "rope", "geglu", 12288, True)


def test_gemma_ties_by_default_with_head_dim_256_and_geglu():
    spec = model_from_hf_config(GEMMA_7B)
    assert (spec.tied_embeddings, spec.head_dim, spec.mlp, spec.q_dim) == (True, 256, "geglu", 4096)
    # Gemma-7B: 8.54B parameters (Gemma report, Table 2: 786M embedding + 7751M non-embedding).
    assert spec.total_params == pytest.approx(8.538e9, rel=0.002)


def test_gemma2_sliding_window_on_half_the_layers():
    spec = model_from_hf_config(GEMMA2_9B)
    assert (spec.sliding_window, spec.sliding_window_layers) == (4096, 21)
    assert spec.attention_context(8192).count(4096) == 21
    typed = model_from_hf_config({**GEMMA2_9B, "layer_types": ["sliding_attention", "full_attention"] * 21})
    assert typed.sliding_window_layers == 21


def test_gemma3_text_config_defaults_and_pattern():
    cfg = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "_name_or_path": "google/gemma-3-4b-it",
        "text_config": {
            "hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
            "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024,
        },
        "vision_config": {"model_type": "siglip_vision_model"},
    }
    spec = model_from_hf_config(cfg)
    assert spec.name == "google/gemma-3-4b-it"
    assert (spec.heads, spec.kv_heads, spec.head_dim, spec.vocab, spec.qk_norm, spec.tied_embeddings) == (
        8, 4, 256, 262208, True, True)
    assert (spec.sliding_window, spec.sliding_window_layers) == (1024, 34 - 34 // 6)
    text = model_from_hf_config(cfg["text_config"])
    assert shape(text) == shape(spec)


def test_deepseek_v3_mla_and_moe():
    spec = model_from_hf_config(DEEPSEEK_V3)
    assert spec.attention == "mla" and spec.kv_heads == spec.heads == 128
    assert (spec.q_lora_rank, spec.kv_lora_rank, spec.qk_rope_head_dim, spec.qk_nope_head_dim,
            spec.v_head_dim) == (1536, 512, 64, 128, 128)
    assert (spec.moe_experts, spec.moe_topk, spec.moe_expert_ffn, spec.moe_shared_experts,
            spec.moe_dense_layers, spec.ffn_hidden) == (256, 8, 2048, 1, 3, 18432)
    assert not spec.moe_dense_interleaved  # first_k_dense_replace: the leading 3
    freq2 = model_from_hf_config({**DEEPSEEK_V3, "moe_layer_freq": 2})
    assert freq2.moe_dense_interleaved and freq2.moe_layers == 29  # layers 4, 6, ..., 60 of 61
    lite = model_from_hf_config({**DEEPSEEK_V3, "q_lora_rank": None})
    assert lite.q_lora_rank == 0 and "q_proj" in lite.attention_matmuls()


def test_mistral_sliding_window_on_every_layer():
    cfg = {**LLAMA3_8B, "model_type": "mistral", "sliding_window": 4096, "vocab_size": 32000,
           "max_position_embeddings": 32768}
    spec = model_from_hf_config(cfg)
    assert (spec.sliding_window, spec.sliding_window_layers) == (4096, 32)
    assert model_from_hf_config({**cfg, "sliding_window": None}).sliding_window_layers == 0


def test_missing_kv_heads_means_mha_and_llama_is_untied_by_default():
    cfg = {k: v for k, v in LLAMA3_8B.items() if k not in ("num_key_value_heads", "tie_word_embeddings")}
    spec = model_from_hf_config(cfg)
    assert spec.kv_heads == spec.heads and not spec.tied_embeddings


def test_unsupported_model_type_lists_supported():
    with pytest.raises(SpecError) as info:
        model_from_hf_config({"model_type": "bert", "hidden_size": 768})
    msg = str(info.value)
    assert info.value.field == "model_type" and "'bert'" in msg
    for model_type in ("llama", "gpt2", "deepseek_v3", "gemma3_text"):
        assert model_type in msg
    assert set(SUPPORTED_MODEL_TYPES) >= {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3",
                                          "qwen3_moe", "gpt2", "gpt_neox", "mpt", "gemma", "gemma2",
                                          "gemma3_text", "gemma3", "deepseek_v3"}


def test_missing_model_type():
    with pytest.raises(SpecError) as info:
        model_from_hf_config({"hidden_size": 768})
    assert info.value.field == "model_type"


def test_missing_required_key_is_named():
    cfg = {k: v for k, v in LLAMA3_8B.items() if k != "intermediate_size"}
    with pytest.raises(SpecError) as info:
        model_from_hf_config(cfg)
    assert info.value.field == "intermediate_size" and "llama" in str(info.value)


def test_malformed_json_is_one_line_input_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",\n "hidden_size": 4096,,\n}')
    with pytest.raises(InputFileError) as info:
        model_from_hf_config(path)
    msg = str(info.value)
    assert str(path) in msg and "\n" not in msg and "line 2" in msg


def test_missing_file_and_non_object(tmp_path):
    with pytest.raises(InputFileError) as info:
        model_from_hf_config(tmp_path / "nope.json")
    assert "nope.json" in str(info.value)
    with pytest.raises(InputFileError):
        model_from_hf_config(tmp_path)  # directory without config.json
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(InputFileError) as info:
        model_from_hf_config(tmp_path / "list.json")
    assert "JSON object" in str(info.value)

