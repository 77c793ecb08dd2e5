"""Issue 12, item 5: each defect found counting 45 real config.json files, reproduced and fixed;
and malformed configs never give a traceback, only a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainperf.accounting.conventions import model_flops_per_token
from trainperf.accounting.flops import forward_flops
from trainperf.cli.main import main
from trainperf.errors import SpecError, TrainperfError
from trainperf.specs.hf_config import SUPPORTED_MODEL_TYPES, model_from_hf_config

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def path(name: str) -> str:
    return str(FIXTURES / f"{name}.json")


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- multimodal checkpoints are counted whole ------------------------------------------------------
def test_gemma3_multimodal_is_counted_whole_and_flops_are_the_text_models(capsys):
    cfg = load("gemma-3-27b-it")
    whole = model_from_hf_config(cfg)
    text_only = model_from_hf_config(cfg["text_config"])
    # Before: the text tower only, silently (-1.54% against the checkpoint).
    assert whole.total_params == text_only.total_params == 27_009_346_304
    assert whole.checkpoint_params == 27_432_406_640
    assert {t.name: t.params for t in whole.towers} == {"vision_tower": 416_866_032,
                                                        "multi_modal_projector": 6_194_304}
    assert forward_flops(whole, 4096).ops == forward_flops(text_only, 4096).ops
    code, out, _ = run_cli(capsys, "flops", "--hf-config", path("gemma-3-27b-it"), "--seq-len", "4096")
    assert code == 0
    assert "multimodal checkpoint: 27,432,406,640 parameters" in out
    assert "vision_tower 416,866,032" in out and "FLOPs are the text model's" in out
    code, out, _ = run_cli(capsys, "flops", "--hf-config", path("gemma-3-27b-it"), "--seq-len", "4096", "--json")
    d = json.loads(out)
    assert d["flops_cover"] == "text model only" and d["params"]["checkpoint"] == 27_432_406_640
    assert [t["name"] for t in d["towers"]] == ["vision_tower", "multi_modal_projector"]


# --- the sequence length: a default is stated on its own line; beyond the position table warns ------
@pytest.mark.parametrize(("name", "ratio"), [("llama3.1-8b", 2.9), ("deepseek-v3", 5.1),
                                             ("qwen3-30b-a3b-instruct-2507", 11.7)])
def test_default_seq_len_is_stated_on_its_own_line(capsys, name, ratio):
    spec = model_from_hf_config(path(name))
    # What the default does to per-token FLOPs (the numbers): hence the explicit line.
    assert (model_flops_per_token(spec, spec.max_seq_len) / model_flops_per_token(spec, 8192)
            == pytest.approx(ratio, abs=0.05))
    code, out, _ = run_cli(capsys, "flops", "--hf-config", path(name))
    assert code == 0
    lines = out.splitlines()
    assert lines[1].startswith(f"seq_len: {spec.max_seq_len:,} (default: the model's position table")
    assert "--seq-len" in lines[1]
    code, out, _ = run_cli(capsys, "flops", "--hf-config", path(name), "--json")
    assert json.loads(out)["seq_len_source"].startswith("default")
    code, out, _ = run_cli(capsys, "flops", "--hf-config", path(name), "--seq-len", "8192")
    assert "(default" not in out
    code, out, _ = run_cli(capsys, "flops", "--hf-config", path(name), "--seq-len", "8192", "--json")
    assert json.loads(out)["seq_len_source"] == "flag"


def test_seq_len_from_a_workload_file_is_not_called_a_default(tmp_path, capsys):
    w = tmp_path / "w.toml"
    w.write_text(f'[model]\nhf_config = "{path("llama3.1-8b")}"\n[training]\nseq_len = 8192\n')
    code, out, _ = run_cli(capsys, "flops", str(w), "--json")
    assert code == 0 and json.loads(out)["seq_len_source"] == "workload file"


def test_seq_len_beyond_the_position_table_warns(capsys):
    code, out, err = run_cli(capsys, "flops", "--hf-config", path("gpt2"), "--seq-len", "8192")
    assert code == 0
    assert "warning: seq_len 8,192 is beyond the model's position table (1,024)" in err
    assert "learned position table" in err and "\n" not in err.strip()
    code, _, err = run_cli(capsys, "flops", "--hf-config", path("gpt2"), "--seq-len", "1024")
    assert err == ""
    code, out, err = run_cli(capsys, "flops", "--hf-config", path("mistral-7b-v0.1"), "--seq-len", "65536",
                             "--json")
    assert "RoPE" in err and json.loads(out)["warnings"]


# --- small tensors that contradicted "exact" ------------------------------------------------------
def test_gemma2_and_gemma3_post_norms_are_counted():
    g2 = model_from_hf_config(load("gemma-2-9b"))
    assert g2.norms_per_layer == 4 and g2.norm_params_per_layer == 4 * 3584
    g3 = model_from_hf_config(load("gemma-3-27b-it"))
    assert g3.norms_per_layer == 4
    assert model_from_hf_config(load("gemma-2b")).norms_per_layer == 2


def test_qwen2_moe_shared_expert_gate_is_counted():
    s = model_from_hf_config(load("qwen2-57b-a14b"))
    without = s.replace(moe_shared_expert_gate=False)
    assert s.total_params - without.total_params == 28 * 3584
    assert s.active_params - without.active_params == 28 * 3584
    assert forward_flops(s, 8).ops["moe_router"] - forward_flops(without, 8).ops["moe_router"] == 28 * 8 * 2 * 3584


def test_deepseek_v3_router_correction_bias_is_counted_not_trainable():
    s = model_from_hf_config(load("deepseek-v3"))
    assert s.moe_router_bias and s.buffer_params == 58 * 256
    assert s.total_params == s.trainable_params + 58 * 256
    assert model_from_hf_config(load("deepseek-v2-lite")).buffer_params == 0  # V2 has none


def test_llama_attention_bias_includes_the_output_projection_and_mlp_bias_counts():
    base = load("llama3.1-8b")
    plain = model_from_hf_config(base)
    attn = model_from_hf_config({**base, "attention_bias": True})
    # LlamaAttention: q, k, v and o_proj all carry bias=config.attention_bias.
    assert attn.total_params - plain.total_params == 32 * (4096 + 2 * 1024 + 4096)
    mlp = model_from_hf_config({**base, "mlp_bias": True})
    # LlamaMLP: gate_proj, up_proj (14336 each) and down_proj (4096).
    assert mlp.total_params - plain.total_params == 32 * (2 * 14336 + 4096)


# --- types validated as transformers validates them -----------------------------------------------
def test_string_false_is_rejected_not_taken_as_tied():
    with pytest.raises(SpecError) as info:
        model_from_hf_config({**load("llama3.1-8b"), "tie_word_embeddings": "false"})
    assert info.value.field == "tie_word_embeddings" and "true or false" in str(info.value)


@pytest.mark.parametrize(("key", "value"), [("hidden_size", 4096.0), ("hidden_size", "4096"),
                                            ("num_hidden_layers", True), ("intermediate_size", -1),
                                            ("num_key_value_heads", [8])])
def test_ints_must_be_ints(key, value):
    with pytest.raises(SpecError) as info:
        model_from_hf_config({**load("llama3.1-8b"), key: value})
    assert info.value.field == key and "\n" not in str(info.value)


def test_layer_types_must_have_one_entry_per_layer():
    cfg = load("gemma-2-9b")
    with pytest.raises(SpecError) as info:
        model_from_hf_config({**cfg, "layer_types": ["sliding_attention", "full_attention"] * 20})
    assert info.value.field == "layer_types" and "42" in str(info.value)
    with pytest.raises(SpecError):
        model_from_hf_config({**cfg, "layer_types": ["sliding_attention", "linear_attention"] * 21})
    ok = model_from_hf_config({**cfg, "layer_types": ["full_attention"] * 42})
    assert ok.sliding_window_layers == 0


def test_absurd_vocab_is_rejected_with_the_bound(capsys, tmp_path):
    with pytest.raises(SpecError) as info:
        model_from_hf_config({**load("llama3.1-8b"), "vocab_size": 10**30})
    msg = str(info.value)
    assert info.value.field == "vocab_size" and "16,777,216" in msg and "vocabulary" in msg
    f = tmp_path / "config.json"
    f.write_text(json.dumps({**load("llama3.1-8b"), "vocab_size": 10**30}))
    code, out, err = run_cli(capsys, "flops", "--hf-config", str(f))
    assert code == 2 and out == "" and "e+24B" not in err and len(err.strip().splitlines()) == 1


def test_nested_keys_are_named_with_their_parent():
    cfg = load("gemma-3-27b-it")
    with pytest.raises(SpecError) as info:
        model_from_hf_config({**cfg, "vision_config": {**cfg["vision_config"], "hidden_size": "1152"}})
    assert info.value.field == "vision_config.hidden_size"


# --- families that were rejected ------------------------------------------------------------------
@pytest.mark.parametrize(("name", "total"), [
    ("deepseek-v2-lite", 15.7e9), ("kimi-k2-instruct", 1.03e12), ("llama-4-scout-17b-16e", 109e9),
    ("phi-2", 2.78e9), ("phi-2-msft", 2.78e9), ("phi-3-mini-4k-instruct", 3.82e9), ("falcon-7b", 6.92e9),
])
def test_previously_rejected_families_are_read(name, total):
    assert load(name)["model_type"] in SUPPORTED_MODEL_TYPES
    assert model_from_hf_config(path(name)).checkpoint_params == pytest.approx(total, rel=0.005)


def test_deepseek_v2_relabelled_v3_and_kimi_k2_as_deepseek_v3():
    v2 = load("deepseek-v2-lite")
    # The same structure as V3 apart from the router bias buffer (relabelled: 15.7B plus 26 x 64).
    as_v3 = model_from_hf_config({**v2, "model_type": "deepseek_v3"})
    assert as_v3.total_params == model_from_hf_config(v2).total_params + 26 * 64
    kimi = load("kimi-k2-instruct")
    assert (model_from_hf_config({**kimi, "model_type": "deepseek_v3"}).total_params
            == model_from_hf_config(kimi).total_params)


# --- trainperf models --hf-config -----------------------------------------------------------------
def test_models_shows_a_hf_config(capsys):
    code, out, _ = run_cli(capsys, "models", "--hf-config", path("deepseek-v3"))
    assert code == 0 and "671,026,419,200" in out and "trainable_params" in out and "buffers:" in out
    code, out, _ = run_cli(capsys, "models", "--hf-config", path("llama-4-scout-17b-16e"), "--json")
    d = json.loads(out)
    assert d["checkpoint_params"] == 108_641_793_536 and d["towers"][0]["name"] == "vision_model"
    assert sum(d["towers"][0]["parts"].values()) == d["towers"][0]["params"]
    code, _, err = run_cli(capsys, "models", "llama3-8b", "--hf-config", path("gpt2"))
    assert code == 2 and len(err.strip().splitlines()) == 1


# --- fuzz: malformed configs give our one-line error, never a traceback ----------------------------
JSON_SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
                | st.floats(allow_nan=True) | st.text(max_size=12))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=8)
BASES = sorted(p.stem for p in FIXTURES.glob("*.json"))


def _mutate(cfg: dict, edits: list[tuple[int, int, object]]) -> dict:
    out = json.loads(json.dumps(cfg))
    for key_index, action, value in edits:
        target = out
        nested = [k for k in ("text_config", "vision_config", "attn_config") if isinstance(out.get(k), dict)]
        if nested and key_index % 3 == 0:
            target = out[nested[key_index % len(nested)]]
        keys = sorted(target)
        if not keys:
            continue
        key = keys[key_index % len(keys)]
        if action == 0:
            del target[key]
        else:
            target[key] = value
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(BASES),
       edits=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 2), JSON_VALUES), min_size=1, max_size=4),
       model_type=st.none() | st.sampled_from(SUPPORTED_MODEL_TYPES))
def test_malformed_configs_give_one_line_errors(base, edits, model_type):
    cfg = _mutate(load(base), edits)
    if model_type is not None:
        cfg["model_type"] = model_type
    try:
        spec = model_from_hf_config(cfg)
    except TrainperfError as exc:
        assert "\n" not in str(exc)
        return
    assert spec.checkpoint_params > 0 and spec.trainable_params <= spec.total_params
    assert forward_flops(spec, 64).matmul > 0


def test_predict_and_mfu_state_a_defaulted_seq_len_and_warn_beyond_the_table(capsys):
    code, out, _ = run_cli(capsys, "predict", "--hf-config", path("llama3.1-8b"), "--device", "h100-sxm",
                           "--num-devices", "8", "--fsdp", "8")
    # a training workload's default stops at 8,192 (the table, 131,072, is a long-context extension)
    assert code == 0 and "note: seq_len: 8,192 (default: the model's position table holds 131,072 tokens" in out
    assert "seq 8192," in out.splitlines()[0]
    code, out, _ = run_cli(capsys, "predict", "--hf-config", path("llama3.1-8b"), "--device", "h100-sxm",
                           "--num-devices", "8", "--fsdp", "8", "--seq-len", "8192")
    assert code == 0 and "(default" not in out and "position table" not in out
    code, out, _ = run_cli(capsys, "mfu", "--hf-config", path("gpt2"), "--device", "h100-sxm", "--seq-len", "4096",
                           "--step-time", "1", "--global-batch", "8")
    assert code == 0 and "beyond the model's position table (1,024)" in out


def test_absurd_sizes_given_inline_are_rejected_too(capsys):
    code, out, err = run_cli(capsys, "flops", "--model", "llama3-8b", "--vocab", str(10**30))
    assert code == 2 and out == "" and "16,777,216" in err and len(err.strip().splitlines()) == 1
    from trainperf.specs.model import ModelSpec

    with pytest.raises(SpecError) as info:
        ModelSpec(layers=10**6, hidden=64, heads=1, ffn_hidden=64, vocab=64)
    assert info.value.field == "layers" and "10,000" in str(info.value)
