"""Every supported family, counted from a real config.json, equals a hand derivation from the
transformers modelling code (module by module, written out below) and the published total.

The fixtures are in ``tests/fixtures/hf_configs`` (see SOURCES.md). The counts were cross-checked
against transformers 5.x on the meta device (``test_meta_device_cross_check`` repeats that on
shrunk copies of the same configs when transformers is installed).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainperf.specs.hf_config import model_from_hf_config
from trainperf.specs.model import ModelSpec

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def spec(name: str):
    return model_from_hf_config(FIXTURES / f"{name}.json")


# --- building blocks of the hand derivations (weights as in_features * out_features) -----------------
def linear(i: int, o: int, bias: bool = False) -> int:
    return i * o + (o if bias else 0)


def gated_mlp(h: int, f: int, bias: bool = False) -> int:
    """gate_proj, up_proj, down_proj (LlamaMLP and friends)."""
    return 2 * linear(h, f, bias) + linear(f, h, bias)


def plain_mlp(h: int, f: int, bias: bool = True) -> int:
    """fc1/fc2 (c_fc/c_proj, dense_h_to_4h/dense_4h_to_h)."""
    return linear(h, f, bias) + linear(f, h, bias)


def gqa(h: int, heads: int, kv: int, d: int, qkv_bias: bool = False, o_bias: bool = False) -> int:
    """q_proj, k_proj, v_proj, o_proj."""
    return linear(h, heads * d, qkv_bias) + 2 * linear(h, kv * d, qkv_bias) + linear(heads * d, h, o_bias)


def mla(h: int, heads: int, q_rank: int, kv_rank: int, rope: int, nope: int, v: int) -> int:
    """DeepseekV3Attention: q_a_proj + q_a_layernorm + q_b_proj (or q_proj), kv_a_proj_with_mqa,
    kv_a_layernorm, kv_b_proj, o_proj."""
    qk = rope + nope
    q = (h * q_rank + q_rank + q_rank * heads * qk) if q_rank else h * heads * qk
    return q + h * (kv_rank + rope) + kv_rank + kv_rank * heads * (nope + v) + heads * v * h


def llama_like(L, h, heads, kv, d, f, V, tied=False, qkv_bias=False, qk_norm=False, norms=2) -> int:
    layer = gqa(h, heads, kv, d, qkv_bias) + gated_mlp(h, f) + norms * h + (2 * d if qk_norm else 0)
    return L * layer + V * h * (1 if tied else 2) + h


# --- one test per family -------------------------------------------------------------------------------
def test_llama_3_1_8b():
    # LlamaDecoderLayer: attention + MLP + input/post_attention RMSNorm; embed, norm, lm_head.
    expected = llama_like(32, 4096, 32, 8, 128, 14336, 128256)
    assert expected == 8_030_261_248  # HF meta-llama/Llama-3.1-8B safetensors
    assert spec("llama3.1-8b").total_params == expected


def test_mistral_7b():
    s = spec("mistral-7b-v0.1")
    assert s.total_params == llama_like(32, 4096, 32, 8, 128, 14336, 32000) == 7_241_732_096
    assert (s.sliding_window, s.sliding_window_layers) == (4096, 32)


def test_mixtral_8x7b():
    h, f, L = 4096, 14336, 32
    layer = gqa(h, 32, 8, 128) + h * 8 + 8 * gated_mlp(h, f) + 2 * h  # router (gate) + 8 experts
    expected = L * layer + 2 * 32000 * h + h
    s = spec("mixtral-8x7b-v0.1")
    assert s.total_params == expected == 46_702_792_704  # Mistral AI: 46.7B
    assert s.active_params == expected - L * 6 * gated_mlp(h, f)
    assert s.active_params == pytest.approx(12.9e9, rel=0.002)


def test_qwen2_7b():
    expected = llama_like(28, 3584, 28, 4, 128, 18944, 152064, qkv_bias=True)
    assert spec("qwen2-7b").total_params == expected == 7_615_616_512  # Qwen2-7B: 7.62B


def test_qwen2_57b_a14b_counts_the_shared_expert_gate():
    h, L = 3584, 28
    # Qwen2MoeSparseMoeBlock: gate (64 x h), 64 experts of 2560, shared_expert (20480), shared_expert_gate (h x 1)
    moe = h * 64 + 64 * gated_mlp(h, 2560) + gated_mlp(h, 20480) + h
    layer = gqa(h, 28, 4, 128, qkv_bias=True) + moe + 2 * h
    expected = L * layer + 2 * 151936 * h + h
    s = spec("qwen2-57b-a14b")
    assert s.total_params == expected == 57_408_658_944  # Qwen2-57B-A14B: 57.4B
    assert s.moe_shared_experts == 8 and s.moe_shared_expert_gate
    assert s.active_params == expected - L * 56 * gated_mlp(h, 2560)
    assert s.active_params == pytest.approx(14.2e9, rel=0.01)  # "14B activated"


def test_qwen3_8b():
    expected = llama_like(36, 4096, 32, 8, 128, 12288, 151936, qk_norm=True)
    assert spec("qwen3-8b").total_params == expected == 8_190_735_360  # Qwen3-8B: 8.2B


def test_qwen3_30b_a3b():
    h, L = 2048, 48
    layer = gqa(h, 32, 4, 128) + 2 * 128 + h * 128 + 128 * gated_mlp(h, 768) + 2 * h
    expected = L * layer + 2 * 151936 * h + h
    s = spec("qwen3-30b-a3b-instruct-2507")
    assert s.total_params == expected == 30_532_122_624  # 30.5B total
    assert s.active_params == pytest.approx(3.3e9, rel=0.02)  # 3.3B activated


@pytest.mark.parametrize(("name", "layers", "experts", "total", "active"), [
    ("gpt-oss-120b", 36, 128, 116.83e9, 5.13e9), ("gpt-oss-20b", 24, 32, 20.91e9, 3.61e9)])
def test_gpt_oss(name, layers, experts, total, active):
    """GptOssAttention: biased q/k/v/o and one sink per head; GptOssMLP: a biased router and
    biased gated experts (gate_up_proj, down_proj), 2880 wide; untied head. The model card
    (OpenAI 2025, Table 1) gives the totals and the active count without the embedding."""
    h, V = 2880, 201088
    attn = gqa(h, 64, 8, 64, qkv_bias=True, o_bias=True) + 64
    moe = linear(h, experts, bias=True) + experts * gated_mlp(h, 2880, bias=True)
    expected = layers * (attn + moe + 2 * h) + 2 * V * h + h
    s = spec(name)
    assert s.total_params == expected
    assert s.total_params == pytest.approx(total, rel=5e-4)
    assert s.active_params - s.embedding_params == pytest.approx(active, rel=2e-3)
    assert (s.sliding_window, s.sliding_window_layers, s.moe_topk) == (128, layers // 2, 4)
    assert s.to_dict() | {"name": "", "source": ""} == ModelSpec.preset(name).to_dict() | {"name": "", "source": ""}


def test_gpt2():
    h, L, V, P = 768, 12, 50257, 1024
    # GPT2Block: ln_1, c_attn (h x 3h + 3h), c_proj, ln_2, mlp c_fc/c_proj; wte, wpe, ln_f; tied head
    layer = 2 * 2 * h + linear(h, 3 * h, True) + linear(h, h, True) + plain_mlp(h, 4 * h)
    expected = L * layer + V * h + P * h + 2 * h
    assert spec("gpt2").total_params == expected == 124_439_808


def test_pythia_410m():
    h, L, V = 1024, 24, 50304
    layer = 2 * 2 * h + linear(h, 3 * h, True) + linear(h, h, True) + plain_mlp(h, 4096)
    expected = L * layer + 2 * V * h + 2 * h
    assert spec("pythia-410m").total_params == expected == 405_334_016  # Biderman et al. 2023


def test_mpt_7b():
    h, L, V = 4096, 32, 50432
    # MPTBlock: norm_1, Wqkv, out_proj, norm_2, up_proj, down_proj; no biases (no_bias), tied, ALiBi
    layer = 2 * h + linear(h, 3 * h) + linear(h, h) + linear(h, 4 * h) + linear(4 * h, h)
    expected = L * layer + V * h + h
    assert spec("mpt-7b").total_params == expected == 6_649_286_656  # MPT-7B: 6.7B


def test_gemma_2b():
    expected = llama_like(18, 2048, 8, 1, 256, 16384, 256000, tied=True)
    assert spec("gemma-2b").total_params == expected == 2_506_172_416  # Gemma-2B: 2.51B


def test_gemma2_9b_counts_four_norms_per_block():
    expected = llama_like(42, 3584, 16, 8, 256, 14336, 256000, tied=True, norms=4)
    s = spec("gemma-2-9b")
    assert s.total_params == expected == 9_241_705_984  # HF google/gemma-2-9b
    assert s.norms_per_layer == 4


def test_gemma3_1b_text_only():
    s = spec("gemma-3-1b-it")
    expected = llama_like(26, 1152, 4, 1, 256, 6912, 262144, tied=True, qk_norm=True, norms=4)
    assert s.total_params == expected == 999_885_952  # HF google/gemma-3-1b-it
    assert (s.sliding_window, s.sliding_window_layers) == (512, 22)  # 5 local per global layer


def test_gemma3_27b_multimodal_counted_whole():
    text = llama_like(62, 5376, 32, 16, 128, 21504, 262208, tied=True, qk_norm=True, norms=4)
    hv, iv, Lv, p, img = 1152, 4304, 27, 14, 896
    vit_layer = 4 * linear(hv, hv, True) + plain_mlp(hv, iv) + 2 * 2 * hv
    vision = (3 * p * p * hv + hv) + (img // p) ** 2 * hv + Lv * vit_layer + 2 * hv  # no head
    projector = hv * 5376 + hv
    s = spec("gemma-3-27b-it")
    assert s.total_params == text
    assert [t.params for t in s.towers] == [vision, projector] == [416_866_032, 6_194_304]
    assert s.checkpoint_params == text + vision + projector == 27_432_406_640  # HF gemma-3-27b-it


def test_deepseek_v2_lite():
    h, L, heads = 2048, 27, 16
    attn = mla(h, heads, 0, 512, 64, 128, 128)
    dense = gated_mlp(h, 10944)
    moe = h * 64 + 64 * gated_mlp(h, 1408) + gated_mlp(h, 2 * 1408)
    expected = L * (attn + 2 * h) + 1 * dense + 26 * moe + 2 * 102400 * h + h
    s = spec("deepseek-v2-lite")
    assert s.total_params == expected == 15_706_484_224  # DeepSeek-V2-Lite: 15.7B
    assert s.buffer_params == 0
    assert s.active_params == pytest.approx(2.4e9, rel=0.12)  # "2.4B activated" (excl. embeddings)
    assert s.active_params - s.embedding_params == pytest.approx(2.45e9, rel=0.03)


def test_deepseek_v3_counts_the_router_correction_bias_as_a_buffer():
    h, L = 7168, 61
    attn = mla(h, 128, 1536, 512, 64, 128, 128)
    moe = h * 256 + 256 * gated_mlp(h, 2048) + gated_mlp(h, 2048)
    buffers = 58 * 256  # e_score_correction_bias per MoE layer
    expected = L * (attn + 2 * h) + 3 * gated_mlp(h, 18432) + 58 * moe + 2 * 129280 * h + h + buffers
    s = spec("deepseek-v3")
    assert s.total_params == expected == 671_026_419_200  # 671B
    assert s.buffer_params == buffers == 14_848 and s.trainable_params == expected - buffers
    assert s.active_params == pytest.approx(37e9, rel=0.015)


def test_kimi_k2():
    h, L = 7168, 61
    attn = mla(h, 64, 1536, 512, 64, 128, 128)
    moe = h * 384 + 384 * gated_mlp(h, 2048) + gated_mlp(h, 2048) + 384
    expected = L * (attn + 2 * h) + 1 * gated_mlp(h, 18432) + 60 * moe + 2 * 163840 * h + h
    s = spec("kimi-k2-instruct")
    assert s.total_params == expected == 1_026_408_232_448  # Kimi-K2: 1.04T ("1T total")
    assert s.active_params == pytest.approx(32.9e9, rel=0.01)  # "32B activated"


def test_llama4_scout_moe_chunked_attention_and_vision():
    h, L, V = 5120, 48, 202048
    moe = h * 16 + 16 * gated_mlp(h, 8192) + gated_mlp(h, 8192)  # router, experts, shared_expert
    text = L * (gqa(h, 40, 8, 128) + moe + 2 * h) + 2 * V * h + h
    hv, iv, Lv, p, img = 1408, 5632, 34, 14, 336
    vit_layer = 4 * linear(hv, hv, True) + plain_mlp(hv, iv) + 2 * 2 * hv
    vision = (3 * p * p * hv + hv + ((img // p) ** 2 + 1) * hv + 2 * 2 * hv + Lv * vit_layer
              + iv * 4096 + 4096 * 4096)
    projector = 4096 * h
    s = spec("llama-4-scout-17b-16e")
    assert s.total_params == text
    assert [t.params for t in s.towers] == [vision, projector]
    assert s.checkpoint_params == 108_641_793_536  # HF Llama-4-Scout-17B-16E: 109B
    assert s.active_params == text - L * 15 * gated_mlp(h, 8192)
    assert s.active_params == pytest.approx(17e9, rel=0.015)  # 17B active
    assert (s.attention_chunk, s.chunked_attention_layers) == (8192, 36)


def test_llama4_maverick_interleaves_dense_and_moe_layers():
    h, L, V = 5120, 48, 202048
    moe = h * 128 + 128 * gated_mlp(h, 8192) + gated_mlp(h, 8192)
    dense = gated_mlp(h, 16384)  # intermediate_size_mlp
    text = L * (gqa(h, 40, 8, 128) + 2 * h) + 24 * moe + 24 * dense + 2 * V * h + h
    s = spec("llama-4-maverick-17b-128e")
    assert (s.moe_layers, s.dense_layers) == (24, 24) and s.moe_dense_interleaved
    assert s.total_params == text
    assert s.checkpoint_params == 401_583_781_376  # HF Llama-4-Maverick-17B-128E: 400B ("402B")
    assert s.active_params == pytest.approx(17e9, rel=0.015)


def test_phi_2_and_its_msft_config():
    h, L, V = 2560, 32, 51200
    # PhiDecoderLayer: one input_layernorm, q/k/v/dense with bias, fc1/fc2 with bias; final_layernorm;
    # lm_head with bias; untied.
    layer = 2 * h + 4 * linear(h, h, True) + plain_mlp(h, 4 * h)
    expected = L * layer + V * h + 2 * h + linear(h, V, True)
    assert spec("phi-2").total_params == expected == 2_779_683_840  # Phi-2: 2.78B
    assert spec("phi-2-msft").total_params == expected


def test_phi3_mini():
    # Phi3: fused qkv_proj (h x 3h) and gate_up_proj (h x 2f): Llama counts.
    expected = llama_like(32, 3072, 32, 32, 96, 8192, 32064)
    s = spec("phi-3-mini-4k-instruct")
    assert s.total_params == expected == 3_821_079_552  # Phi-3-mini: 3.8B
    assert (s.sliding_window, s.sliding_window_layers) == (2047, 32)


def test_falcon_7b_multi_query_parallel_block():
    h, L, V, d = 4544, 32, 65024, 64
    # FalconDecoderLayer (parallel_attn, not new arch): one input_layernorm (LayerNorm with bias),
    # query_key_value h x (h + 2d), dense, dense_h_to_4h, dense_4h_to_h, no linear biases; ln_f; tied.
    layer = 2 * h + linear(h, h + 2 * d) + linear(h, h) + plain_mlp(h, 4 * h, bias=False)
    expected = L * layer + V * h + 2 * h
    s = spec("falcon-7b")
    assert s.total_params == expected == 6_921_720_704  # HF tiiuae/falcon-7b: 6.92B ("7B")
    assert (s.kv_heads, s.norms_per_layer, s.bias, s.norm_bias) == (1, 1, False, True)


def test_falcon_40b_new_decoder_architecture():
    h, L, V, d = 8192, 60, 65024, 64
    layer = 2 * 2 * h + linear(h, (128 + 2 * 8) * d) + linear(h, h) + plain_mlp(h, 4 * h, bias=False)
    expected = L * layer + V * h + 2 * h
    assert spec("falcon-40b").total_params == expected == 41_303_293_952  # Falcon-40B: 41.3B


# --- the same configs, shrunk, against transformers on the meta device ---------------------------------
SHRINK = {
    "num_hidden_layers": 4, "n_layer": 4, "n_layers": 4, "num_experts": 8, "num_local_experts": 4,
    "n_routed_experts": 8, "vocab_size": 65536,
}


def _shrunk(cfg: dict) -> dict:
    out = {k: (SHRINK[k] if k in SHRINK and isinstance(v, int) else v) for k, v in cfg.items()
           if k not in ("pad_token_id", "bos_token_id", "eos_token_id")}
    for key in ("text_config", "vision_config"):
        if isinstance(out.get(key), dict):
            out[key] = _shrunk(out[key])
    if "first_k_dense_replace" in out:
        out["first_k_dense_replace"] = 1
    if isinstance(out.get("layer_types"), list):  # one entry per layer left
        out["layer_types"] = out["layer_types"][:out["num_hidden_layers"]]
    if "num_experts_per_tok" in out:
        out["num_experts_per_tok"] = min(out["num_experts_per_tok"], 2)
    if isinstance(out.get("vision_config"), dict):
        out["vision_config"]["num_hidden_layers"] = 2
    return out


META_FIXTURES = sorted(p.stem for p in FIXTURES.glob("*.json") if p.stem != "phi-2-msft")


VARIANTS = [
    ("phi-2", {"qk_layernorm": True}), ("phi-2", {"num_key_value_heads": 8}),
    ("falcon-7b", {"alibi": True}), ("falcon-7b", {"multi_query": False}), ("falcon-7b", {"parallel_attn": False}),
    ("falcon-7b", {"bias": True}), ("falcon-40b", {"num_ln_in_parallel_attn": 1}),
    ("pythia-410m", {"attention_bias": False}), ("llama3.1-8b", {"attention_bias": True, "mlp_bias": True}),
    ("qwen3-8b", {"attention_bias": True}), ("deepseek-v2-lite", {"attention_bias": True}),
    ("deepseek-v3", {"attention_bias": True}), ("qwen2-57b-a14b", {"decoder_sparse_step": 2}),
    ("qwen3-30b-a3b-instruct-2507", {"mlp_only_layers": [0, 2]}),
    ("gpt2", {"n_inner": 1000, "activation_function": "relu", "tie_word_embeddings": False}),
    ("mistral-7b-v0.1", {"head_dim": 64}), ("gemma-2b", {"tie_word_embeddings": False}),
    ("gemma-3-27b-it", {"vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152,
                                          "image_size": 896, "intermediate_size": 4304, "num_attention_heads": 16,
                                          "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": True}}),
    ("llama-4-scout-17b-16e", {"text_config": {"model_type": "llama4_text", "moe_layers": [1, 3],
                                               "attention_bias": True, "num_hidden_layers": 4}}),
]


@pytest.mark.parametrize(("name", "change"), [(n, {}) for n in META_FIXTURES] + VARIANTS,
                         ids=[n for n in META_FIXTURES] + [f"{n}-{'-'.join(c)}" for n, c in VARIANTS])
def test_meta_device_cross_check(name, change):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    base = load(name)
    for key, value in change.items():  # nested configs are merged, not replaced
        base[key] = {**base[key], **value} if isinstance(value, dict) else value
    cfg = _shrunk(base)
    ours = model_from_hf_config(cfg)
    data = dict(cfg)
    data.pop("auto_map", None)
    model_type = data.pop("model_type")
    if model_type == "kimi_k2":
        model_type = "deepseek_v3"
    try:
        config = transformers.AutoConfig.for_model(model_type, **data)
    except (ValueError, KeyError) as exc:  # model type absent in this transformers version
        pytest.skip(f"transformers cannot build {model_type}: {exc}")
    multimodal = model_type in ("gemma3", "llama4")
    with torch.device("meta"):
        auto = transformers.AutoModelForImageTextToText if multimodal else transformers.AutoModelForCausalLM
        model = auto.from_config(config)
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    assert ours.checkpoint_params == params + buffers
    assert ours.buffer_params == buffers


def test_refinedweb_configs_read_like_falcon():
    # tiiuae/falcon-7b's original remote-code config (model_type RefinedWebModel, n_embed/n_head/n_layer)
    old_7b = {"model_type": "RefinedWebModel", "n_embed": 4544, "n_head": 71, "n_layer": 32, "multi_query": True,
              "parallel_attn": True, "bias": False, "vocab_size": 65024, "alibi": False}
    assert model_from_hf_config(old_7b).total_params == spec("falcon-7b").total_params
    # tiiuae/falcon-40b's original config (model_type RefinedWeb: the new decoder architecture)
    old_40b = {"model_type": "RefinedWeb", "n_embed": 8192, "n_head": 128, "n_head_kv": 8, "n_layer": 60,
               "parallel_attn": True, "bias": False, "vocab_size": 65024, "alibi": False}
    assert model_from_hf_config(old_40b).total_params == spec("falcon-40b").total_params


def test_text_configs_alone_are_the_text_models():
    for name, text_type in (("gemma-3-27b-it", "gemma3_text"), ("llama-4-scout-17b-16e", "llama4_text")):
        whole = spec(name)
        text = model_from_hf_config({**load(name)["text_config"], "model_type": text_type})
        assert text.total_params == whole.total_params and not text.towers and whole.towers


def test_llama4_chunked_attention_pairs():
    from trainperf.accounting.flops import attention_pairs

    s = spec("llama-4-scout-17b-16e")
    S, C = 20000, 8192
    chunked = 2 * C * (C + 1) / 2 + (S - 2 * C) * (S - 2 * C + 1) / 2  # causal within each chunk
    full = S * (S + 1) / 2
    assert attention_pairs(s, S, "causal") == 36 * chunked + 12 * full
    assert attention_pairs(s, S, "full") == 36 * (2 * C * C + (S - 2 * C) ** 2) + 12 * S * S
    assert s.attention_context(S) == [C] * 36 + [S] * 12


# --- Llama-like families read by the Llama reader (configs written here from the released
# config.json files, read from memory; the counts are derived by hand from the modelling code) ---------
def _inline(cfg: dict) -> ModelSpec:
    return model_from_hf_config(cfg)


def test_granite_is_llama_with_scalar_multipliers():
    cfg = {"model_type": "granite", "hidden_size": 4096, "intermediate_size": 12800, "num_hidden_layers": 40,
           "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 49155, "tie_word_embeddings": True,
           "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.0078125,
           "logits_scaling": 16.0, "max_position_embeddings": 131072}  # ibm-granite/granite-3.1-8b-base
    assert _inline(cfg).total_params == llama_like(40, 4096, 32, 8, 128, 12800, 49155, tied=True) == 8_170_848_256


def test_smollm3_is_llama_without_rope_on_some_layers():
    cfg = {"model_type": "smollm3", "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
           "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 128256, "tie_word_embeddings": True,
           "no_rope_layer_interval": 4, "max_position_embeddings": 65536}  # HuggingFaceTB/SmolLM3-3B
    assert _inline(cfg).total_params == llama_like(36, 2048, 16, 4, 128, 11008, 128256, tied=True) == 3_075_098_624


def test_olmo2_counts_its_whole_width_qk_norms_per_head_and_says_so():
    cfg = {"model_type": "olmo2", "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 40,
           "num_attention_heads": 40, "num_key_value_heads": 40, "vocab_size": 100352,
           "max_position_embeddings": 4096}  # allenai/OLMo-2-1124-13B
    s = _inline(cfg)
    exact = llama_like(40, 5120, 40, 40, 128, 13824, 100352) + 40 * (5120 + 5120)  # q_norm, k_norm whole width
    left_out = 40 * (5120 + 5120 - 2 * 128)
    assert s.total_params == exact - left_out  # per-head q/k norms: 2 x 128 weights a layer
    assert exact == 13_716_198_400 and "399,360 norm weights left out" in s.extra["notes"]


@pytest.mark.parametrize("cfg", [
    {"model_type": "granite", "hidden_size": 256, "intermediate_size": 640, "num_hidden_layers": 2,
     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": True,
     "attention_bias": True, "mlp_bias": True},
    {"model_type": "smollm3", "hidden_size": 256, "intermediate_size": 640, "num_hidden_layers": 4,
     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": True,
     "no_rope_layer_interval": 4, "pad_token_id": 0},
    {"model_type": "olmo2", "hidden_size": 256, "intermediate_size": 640, "num_hidden_layers": 2,
     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000},
    {"model_type": "olmoe", "hidden_size": 256, "intermediate_size": 128, "num_hidden_layers": 2,
     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "num_experts": 8,
     "num_experts_per_tok": 2, "pad_token_id": 0},
    {"model_type": "granitemoe", "hidden_size": 256, "intermediate_size": 128, "num_hidden_layers": 2,
     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "num_local_experts": 8,
     "num_experts_per_tok": 2, "tie_word_embeddings": True},
    {"model_type": "starcoder2", "hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 2,
     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "use_bias": False,
     "bos_token_id": 0, "eos_token_id": 0},
], ids=lambda c: c["model_type"])
def test_llama_like_families_match_transformers_on_the_meta_device(cfg):
    """The same count transformers builds, but for OLMo 2's whole-width q/k norms, which the notes
    say are counted per head."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    data = dict(cfg)
    try:
        config = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
    except (ValueError, KeyError) as exc:  # model type absent in this transformers version
        pytest.skip(f"transformers cannot build {cfg['model_type']}: {exc}")
    with torch.device("meta"):
        params = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(config).parameters())
    ours = model_from_hf_config(cfg)
    left_out = (4 + 2 - 2) * 64 * 2 if cfg["model_type"] in ("olmo2", "olmoe") else 0
    assert ours.checkpoint_params == params - left_out


def test_starcoder2_15b():
    # bigcode/starcoder2-15b: GQA 48/4, plain GELU MLP 24576 wide, biases everywhere, LayerNorm with
    # bias, untied head, a 4096-token window on every layer
    cfg = {"model_type": "starcoder2", "hidden_size": 6144, "intermediate_size": 24576, "num_hidden_layers": 40,
           "num_attention_heads": 48, "num_key_value_heads": 4, "vocab_size": 49152, "max_position_embeddings": 16384,
           "sliding_window": 4096, "use_bias": True, "tie_word_embeddings": False}
    h, L = 6144, 40
    layer = gqa(h, 48, 4, 128, qkv_bias=True, o_bias=True) + plain_mlp(h, 24576) + 2 * 2 * h
    s = _inline(cfg)
    assert s.total_params == L * layer + 2 * 49152 * h + 2 * h == 15_957_889_024  # "15B"
    assert (s.sliding_window, s.sliding_window_layers) == (4096, 40)


def test_olmoe_1b_7b():
    # allenai/OLMoE-1B-7B-0924: 16 layers of 64 gated experts 1024 wide (8 a token), MHA 16 heads,
    # whole-width q/k norms (counted per head, 16 x (2048 + 2048 - 2 x 128) = 61,440 weights left out)
    cfg = {"model_type": "olmoe", "hidden_size": 2048, "intermediate_size": 1024, "num_hidden_layers": 16,
           "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 50304, "num_experts": 64,
           "num_experts_per_tok": 8, "tie_word_embeddings": False, "max_position_embeddings": 4096}
    h, L = 2048, 16
    layer = gqa(h, 16, 16, 128) + 2 * h + 2 * h + 64 * h + 64 * gated_mlp(h, 1024)  # attn, q/k norms, 2 norms, router
    s = _inline(cfg)
    assert L * layer + 2 * 50304 * h + h == 6_919_161_856  # transformers' OlmoeForCausalLM (7B total)
    assert s.total_params == 6_919_161_856 - 61_440 and "61,440 norm weights left out" in s.extra["notes"]
    assert s.active_params == pytest.approx(1.28e9, rel=0.02)  # "1B active"


GLM45 = {"model_type": "glm4_moe", "hidden_size": 5120, "intermediate_size": 12288, "moe_intermediate_size": 1536,
         "num_hidden_layers": 92, "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128,
         "n_routed_experts": 160, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
         "vocab_size": 151552, "partial_rotary_factor": 0.5, "use_qk_norm": True, "attention_bias": True,
         "max_position_embeddings": 131072, "tie_word_embeddings": False}  # zai-org/GLM-4.5 (read from memory)


def test_glm45_is_gqa_over_deepseek_v3s_moe():
    h, L, dense = 5120, 92, 3
    attn = gqa(h, 96, 8, 128, qkv_bias=True) + 2 * 128 + 2 * h  # q/k norms per head, two RMSNorms
    moe = 160 * gated_mlp(h, 1536) + gated_mlp(h, 1536) + 160 * h  # routed, shared, router
    s = _inline(GLM45)
    trained = L * attn + dense * gated_mlp(h, 12288) + (L - dense) * moe + 2 * 151552 * h + h
    assert s.total_params == trained + (L - dense) * 160  # + the routers' correction-bias buffers
    assert s.buffer_params == (L - dense) * 160
    assert s.checkpoint_params == 352_797_829_024  # transformers' Glm4MoeForCausalLM (355B with its MTP layer)
    assert s.active_params == pytest.approx(32e9, rel=0.06)  # "32B active"


def test_glm4_moe_matches_transformers_on_the_meta_device():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = {**GLM45, "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 64, "num_hidden_layers": 3,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "n_routed_experts": 8,
           "num_experts_per_tok": 2, "first_k_dense_replace": 1, "vocab_size": 1000, "pad_token_id": 0}
    data = dict(cfg)
    try:
        config = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
    except (ValueError, KeyError) as exc:
        pytest.skip(f"transformers cannot build glm4_moe: {exc}")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    ours = model_from_hf_config(cfg)
    assert (ours.checkpoint_params, ours.buffer_params) == (params + buffers, buffers)
