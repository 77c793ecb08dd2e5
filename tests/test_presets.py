"""Model presets: every entry loads, names its source, and matches published parameter counts."""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainperf.errors import SpecError, UnknownNameError
from trainperf.specs.model import ModelSpec
from trainperf.specs.presets import _build, get_model, list_models, model_ids

REQUIRED_IDS = [
    "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-8b",
    "llama3.1-70b", "llama3.1-405b", "mpt-1b", "mpt-3b", "mpt-7b", "mpt-30b", "mpt-70b",
    "gpt3-175b", "mixtral-8x7b", "mixtral-8x22b", "deepseek-v3", "frontier-175b", "frontier-1t",
    "megatron-1t", "debug", "qwen2.5-7b", "gemma2-9b", "llama3.2-1b", "llama3.2-3b", "gpt2",
]


def _raw_catalog() -> dict:
    ref = resources.files("trainperf.specs").joinpath("data", "models.toml")
    return tomllib.loads(ref.read_text(encoding="utf-8"))


def test_required_ids_present_and_lowercase():
    ids = model_ids()
    assert ids == sorted(ids)
    for model_id in REQUIRED_IDS:
        assert model_id in ids
    for model_id in ids:
        assert model_id == model_id.lower() and " " not in model_id and "_" not in model_id


@pytest.mark.parametrize("model_id", sorted(_raw_catalog()))
def test_every_preset_has_source_and_constructs(model_id):
    entry = _raw_catalog()[model_id]
    assert isinstance(entry.get("source"), str) and entry["source"].strip(), f"{model_id} lacks a source"
    spec = get_model(model_id)
    assert isinstance(spec, ModelSpec)
    assert spec.name == model_id and spec.source == entry["source"]
    assert spec.total_params > 0 and 0 < spec.active_params <= spec.total_params
    if "notes" in entry:
        assert spec.extra["notes"] == entry["notes"]
    # The shape survives a dict round trip and re-validation.
    assert ModelSpec.from_dict(spec.to_dict()) == spec


def test_list_models_matches_ids():
    assert [m.name for m in list_models()] == model_ids()


def test_lookup_is_case_insensitive_and_returns_fresh_extra():
    a = get_model("  Llama2-70B ")
    assert a.name == "llama2-70b"
    a.extra["scratch"] = 1
    assert "scratch" not in get_model("llama2-70b").extra


def test_unknown_name_suggests_neighbours():
    with pytest.raises(UnknownNameError) as info:
        get_model("llama2-71b")
    msg = str(info.value)
    assert "llama2-70b" in msg and "\n" not in msg
    assert info.value.field == "model"


def test_preset_via_modelspec():
    assert ModelSpec.preset("mpt-7b") == get_model("mpt-7b")


# Published parameter counts: (id, total, active, relative tolerance, source).
PUBLISHED = [
    ("llama-7b", 6.7e9, None, 0.01, "LLaMA paper (arXiv:2302.13971) Table 2: 6.7B"),
    ("llama-13b", 13.0e9, None, 0.01, "LLaMA paper Table 2: 13.0B"),
    ("llama-33b", 32.5e9, None, 0.01, "LLaMA paper Table 2: 32.5B"),
    ("llama-65b", 65.2e9, None, 0.01, "LLaMA paper Table 2: 65.2B"),
    ("llama2-7b", 6.74e9, None, 0.002, "Llama 2 paper/model card: 6.74B (6,738,415,616)"),
    ("llama2-13b", 13.0e9, None, 0.005, "Llama 2 model card: 13B (13,015,864,320)"),
    ("llama2-70b", 68.98e9, None, 0.001, "Llama 2 70B: 68,976,648,192"),
    ("llama3-8b", 8_030_261_248, None, 0.0, "HF Meta-Llama-3-8B safetensors: 8,030,261,248"),
    ("llama3-70b", 70_553_706_496, None, 0.0, "HF Meta-Llama-3-70B safetensors: 70,553,706,496"),
    ("llama3.1-405b", 405_853_388_800, None, 0.0, "HF Llama-3.1-405B safetensors: 405,853,388,800"),
    ("llama3.2-1b", 1_235_814_400, None, 0.0, "HF Llama-3.2-1B safetensors: 1,235,814,400"),
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.005, "Mistral AI Mixtral announcement: 46.7B total, 12.9B active"),
    ("mixtral-8x22b", 141e9, 39e9, 0.005, "Mistral AI Mixtral 8x22B announcement: 141B total, 39B active"),
    ("deepseek-v3", 671e9, 37e9, 0.015, "DeepSeek-V3 report arXiv:2412.19437: 671B total, 37B active"),
    ("gpt3-175b", 175e9, None, 0.01, "Brown et al. 2020 Table 2.1: 175.0B"),
    ("megatron-1t", 1008e9, None, 0.001, "Narayanan et al. 2021 Table 1: 1008B"),
    ("palm-8b", 8.63e9, None, 0.001, "PaLM paper (arXiv:2204.02311) Table 1: 8.63B"),
    ("palm-62b", 62.50e9, None, 0.001, "PaLM paper Table 1: 62.50B"),
    ("palm-540b", 540.35e9, None, 0.001, "PaLM paper Table 1: 540.35B"),
    ("mt-nlg-530b", 530e9, None, 0.002, "MT-NLG paper (arXiv:2201.11990): 530B"),
    ("bloom-176b", 176.2e9, None, 0.002, "BLOOM model card: 176,247,271,424"),
    ("mpt-7b", 6.7e9, None, 0.01, "MosaicML MPT-7B model card: 6.7B"),
    ("mpt-30b", 30e9, None, 0.01, "MosaicML MPT-30B model card: 30B"),
    ("mpt-1b", 1.3e9, None, 0.01, "MosaicML MI250 blog (seed 001): AMD-MPT-1B 1.3B"),
    ("mpt-3b", 2.7e9, None, 0.025, "MosaicML MI250 blog (seed 001): AMD-MPT-3B 2.7B"),
    ("qwen2.5-7b", 7.61e9, None, 0.002, "Qwen2.5-7B model card: 7.61B"),
    ("gemma2-9b", 9.24e9, None, 0.002, "HF gemma-2-9b safetensors: 9.24B"),
    ("gemma3-1b", 1.0e9, None, 0.002, "Gemma 3 model card: 1B (999,885,952)"),
    ("gpt-neox-20b", 20_554_567_680, None, 0.0, "HF EleutherAI/gpt-neox-20b: 20,554,567,680"),
    ("pythia-12b", 11_846_072_320, None, 0.0, "Pythia paper (arXiv:2304.01373) Table 1: 11,846,072,320"),
    ("pythia-6.9b", 6_857_302_016, None, 0.0, "Pythia paper Table 1: 6,857,302,016"),
    ("gemma-7b", 8.54e9, None, 0.001, "Gemma paper (arXiv:2403.08295): 8.54B"),
    ("deepseek-llm-67b", 67.4e9, None, 0.002, "DeepSeek LLM 67B model card: 67B"),
    ("phi-3-mini", 3.82e9, None, 0.002, "Phi-3-mini model card: 3.8B (3,821,079,552)"),
    ("gpt2", 124_439_808, None, 0.0, "HF openai-community/gpt2: 124,439,808 (tied, learned positions)"),
    ("gpt2-medium", 354_823_168, None, 0.0, "HF openai-community/gpt2-medium: 354,823,168"),
    ("gpt2-large", 774_030_080, None, 0.0, "HF openai-community/gpt2-large: 774,030,080"),
    ("gpt2-xl", 1_557_611_200, None, 0.0, "HF openai-community/gpt2-xl: 1,557,611,200"),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02, "Qwen3-30B-A3B model card: 30.5B total, 3.3B activated"),
    ("qwen3-235b-a22b", 235e9, 22e9, 0.01, "Qwen3-235B-A22B model card: 235B total, 22B activated"),
    ("qwen3-32b", 32.8e9, None, 0.002, "Qwen3-32B model card: 32.8B"),
    ("qwen3-14b", 14.8e9, None, 0.003, "Qwen3-14B model card: 14.8B"),
    ("qwen3-4b", 4.0e9, None, 0.01, "Qwen3-4B model card: 4.0B"),
    ("mistral-nemo-12b", 12.2e9, None, 0.005, "Mistral NeMo (Mistral AI, 2024): 12B; model card 12.2B"),
    ("dbrx", 132e9, 36e9, 0.015, "Databricks, Introducing DBRX (2024): 132B total, 36B active"),
    ("llama4-scout", 109e9, 17e9, 0.015, "Meta Llama 4 Scout model card: 109B total (with the vision encoder), 17B active"),
    ("llama4-maverick", 400e9, 17e9, 0.015, "Meta Llama 4 Maverick model card: 400B total, 17B active"),
]


@pytest.mark.parametrize(("model_id", "total", "active", "rel", "source"), PUBLISHED,
                         ids=[p[0] for p in PUBLISHED])
def test_published_parameter_counts(model_id, total, active, rel, source):
    spec = get_model(model_id)
    assert spec.total_params == pytest.approx(total, rel=rel, abs=0), source
    if active is not None:
        assert spec.active_params == pytest.approx(active, rel=rel, abs=0), source
    else:
        assert spec.active_params == spec.total_params


def test_shapes_called_out_in_the_sources():
    l2 = get_model("llama2-13b")
    assert l2.kv_heads == l2.heads == 40
    mpt = get_model("mpt-7b")
    assert (mpt.position, mpt.mlp, mpt.norm, mpt.bias, mpt.tied_embeddings) == (
        "alibi", "gelu", "layernorm", False, True)
    gpt3 = get_model("gpt3-175b")
    assert (gpt3.position, gpt3.bias, gpt3.tied_embeddings, gpt3.max_seq_len) == ("learned", True, True, 2048)
    ds = get_model("deepseek-v3")
    assert (ds.moe_layers, ds.dense_layers, ds.attention) == (58, 3, "mla")
    g2 = get_model("gemma2-9b")
    assert g2.attention_context(8192) == [4096] * 21 + [8192] * 21
    f1t = get_model("frontier-1t")
    assert (f1t.layers, f1t.hidden, f1t.heads, f1t.vocab) == (128, 25600, 160, 51200)
    assert f1t.to_dict() | {"name": "", "source": ""} == get_model("megatron-1t").to_dict() | {
        "name": "", "source": ""}
    dbg = get_model("debug")
    assert (dbg.layers, dbg.hidden, dbg.heads, dbg.kv_heads, dbg.ffn_hidden, dbg.vocab, dbg.max_seq_len,
            dbg.tied_embeddings, dbg.mlp) == (4, 256, 8, 4, 768, 256, 256, False, "swiglu")


def test_preset_missing_source_is_rejected():
    with pytest.raises(SpecError) as info:
        _build("x", {"layers": 1, "hidden": 8, "heads": 1, "ffn_hidden": 8, "vocab": 8})
    assert "source" in info.value.field


@pytest.mark.parametrize(("model_id", "layers", "field", "expected"), [
    # Llama 4: 3 of every 4 layers chunked; a 2-layer proxy (torchao's MoE benchmark) has two
    ("llama4-scout", 2, "chunked_attention_layers", 2),
    ("llama4-scout", 6, "chunked_attention_layers", 5),  # layers 0-2, 4, 5; layer 3 global
    ("llama4-maverick", 4, "moe_dense_layers", 2),  # interleaved dense MLPs: every other layer
    ("gemma2-9b", 4, "sliding_window_layers", 2),  # alternating local/global
    ("deepseek-v3", 10, "moe_dense_layers", 3),  # the leading 3 dense layers stay
    ("deepseek-v3", 2, "moe_dense_layers", 1),  # ... but one MoE layer remains
])
def test_fewer_layers_keep_the_layer_mix(model_id, layers, field, expected):
    """``--layers N`` on a preset (a reduced-depth proxy) keeps its mix of layer kinds instead of
    refusing the preset's counts."""
    m = get_model(model_id).replace(layers=layers)
    assert m.layers == layers and getattr(m, field) == expected
    # a count given with the change is taken as given
    assert get_model("llama4-scout").replace(layers=4, chunked_attention_layers=1).chunked_attention_layers == 1


@given(st.sampled_from(["llama4-scout", "llama4-maverick", "gemma2-9b", "deepseek-v3", "qwen3-30b-a3b"]),
       st.integers(min_value=1, max_value=256))
@settings(max_examples=200, deadline=None)
def test_any_layer_count_keeps_a_valid_mix(model_id, layers):
    """Any ``layers`` gives a valid model whose layer kinds keep the preset's proportions to within
    one layer (leading dense layers kept as they are, one MoE layer at least)."""
    base = get_model(model_id)
    m = base.replace(layers=layers)
    assert m.layers == layers
    assert m.sliding_window_layers + m.chunked_attention_layers <= layers
    for name in ("sliding_window_layers", "chunked_attention_layers"):
        share = getattr(base, name) / base.layers
        assert abs(getattr(m, name) - share * layers) <= 1.0
    if base.moe_dense_layers:
        assert m.moe_dense_layers < layers
        if not base.moe_dense_interleaved:
            assert m.moe_dense_layers == min(base.moe_dense_layers, layers - 1)
