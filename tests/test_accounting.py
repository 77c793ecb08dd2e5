"""FLOP breakdown and conventions against hand-derived numbers, plus property tests."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainperf.accounting.conventions import (
    CONVENTIONS,
    all_conventions,
    hardware_flops_per_token,
    model_flops_per_token,
    palm_params,
)
from trainperf.accounting.flops import attention_pairs, forward_flops, recompute_flops, training_flops
from trainperf.accounting.summarize import default_warmup_steps, percentile, summarize
from trainperf.accounting.throughput import throughput
from trainperf.errors import SpecError, TrainperfError, UnknownNameError
from trainperf.records.run_record import RunRecord, StepRecord
from trainperf.specs.hardware import get_hardware
from trainperf.specs.model import ModelSpec
from trainperf.specs.workload import Workload

# A tiny model whose FLOPs are easy to derive by hand:
# L=2, h=8, heads=2 (d=4), kv=1, F=16 SwiGLU, V=10, S=4.
TINY = ModelSpec(layers=2, hidden=8, heads=2, kv_heads=1, ffn_hidden=16, vocab=10)


def test_tiny_forward_by_hand():
    fb = forward_flops(TINY, 4, "causal")
    # qkv: 2*S*h*(heads*d + 2*kv*d) per layer = 2*4*8*(8+8) = 1024; x2 layers
    assert fb.ops["attn_qkv"] == 2 * 1024
    # o: 2*S*8*8 = 512 per layer
    assert fb.ops["attn_out"] == 2 * 512
    # causal pairs per layer: 4*5/2 = 10; scores 2*heads*d*pairs = 2*2*4*10 = 160 per layer
    assert fb.ops["attn_scores"] == 2 * 160 and fb.ops["attn_values"] == 2 * 160
    # SwiGLU: 3 matrices 8x16: 2*S*3*8*16 = 3072 per layer
    assert fb.ops["mlp"] == 2 * 3072
    # LM head: 2*S*h*V = 640
    assert fb.ops["lm_head"] == 640
    assert fb.ops["embedding"] == 0
    assert training_flops(TINY, 4) == 3 * fb.matmul


def test_attention_masks():
    assert attention_pairs(TINY, 4, "causal") == 2 * 10
    assert attention_pairs(TINY, 4, "causal-half") == 2 * 8
    assert attention_pairs(TINY, 4, "full") == 2 * 16
    swa = TINY.replace(sliding_window=2, sliding_window_layers=1)
    # windowed layer: queries see 1,2,2,2 keys -> 7 pairs; full layer 10
    assert attention_pairs(swa, 4, "causal") == 7 + 10
    with pytest.raises(SpecError):
        attention_pairs(TINY, 4, "diagonal")


def test_recompute_policies():
    fb = forward_flops(TINY, 4, "causal")
    assert recompute_flops(TINY, 4, "none") == 0
    assert recompute_flops(TINY, 4, "selective") == fb.attention_core
    assert recompute_flops(TINY, 4, "full") == fb.matmul - fb.ops["lm_head"]


def test_megatron_equals_published_formula():
    # Megatron-LM num_floating_point_operations (dense, SwiGLU, causal halving):
    # 12*L*h^2*S... per token: 12*L*h^2*((1 + G/A + S/(2h)) + 1.5*F/h) + 6*V*h
    m = ModelSpec.preset("llama3-70b")
    s = 8192
    L, h, a, g, f, v = m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.vocab
    expected = 12 * L * h * h * ((1 + g / a + s / (2 * h)) + 1.5 * f / h) + 6 * v * h
    assert model_flops_per_token(m, s, "megatron") == pytest.approx(expected, rel=1e-12)


def test_palm_formula_and_tied_head():
    m = ModelSpec.preset("llama3-8b")
    n = m.total_params - m.vocab * m.hidden  # untied: drop the input embedding only
    assert palm_params(m) == n
    assert model_flops_per_token(m, 8192, "palm") == pytest.approx(6 * n + 12 * 32 * 4096 * 8192)
    gpt2 = ModelSpec.preset("gpt2")  # tied: the head is counted once, positions left out
    assert palm_params(gpt2) == gpt2.total_params - gpt2.max_seq_len * gpt2.hidden


def test_moe_counts_active_experts_only():
    m = ModelSpec.preset("mixtral-8x7b")
    assert model_flops_per_token(m, 4096, "6n") == 6 * m.active_params
    dense = m.replace(moe_experts=0, moe_topk=0, moe_expert_ffn=None)
    # top-2 of 8 experts: MLP FLOPs are twice a dense model's of the same expert width
    fm, fd = forward_flops(m, 1024), forward_flops(dense, 1024)
    assert fm.ops["moe_experts"] == pytest.approx(2 * fd.ops["mlp"])


def test_lora_is_two_thirds_of_six_n_plus_adapters():
    m = ModelSpec.preset("llama2-7b")
    attn = model_flops_per_token(m, 512, "palm") - 6 * palm_params(m)
    # The frozen base: palm's N (no input embedding: a gather) x (forward + activation gradient).
    assert model_flops_per_token(m, 512, "lora", 0.0) == pytest.approx(4 * palm_params(m) + attn)
    assert model_flops_per_token(m, 512, "lora", 0.01) == pytest.approx(
        4 * palm_params(m) + 0.06 * m.active_params + attn)


def test_hfu_adds_recompute():
    m = ModelSpec.preset("llama3-8b")
    base = model_flops_per_token(m, 8192, "megatron")
    full = hardware_flops_per_token(m, 8192, "full", "megatron")
    fb = forward_flops(m, 8192, "causal-half")
    assert full - base == pytest.approx((fb.matmul - fb.ops["lm_head"]) / 8192)


def test_an_unnamed_convention_is_lora_for_a_lora_run_only():
    from trainperf.accounting.conventions import run_convention

    assert run_convention(None, lora=True) == "lora"
    assert run_convention(None, lora=False) == "megatron"
    assert run_convention("Megatron", lora=True) == "megatron"  # a named one is kept, LoRA or not
    with pytest.raises(UnknownNameError, match="convention"):
        run_convention("6m", lora=True)


def test_a_lora_run_counted_in_full_is_said_to_be():
    from trainperf.accounting.conventions import lora_counted_in_full_note

    assert "frozen base does not compute" in lora_counted_in_full_note("r", True, "megatron")
    assert lora_counted_in_full_note("r", True, "lora") is None
    assert lora_counted_in_full_note("r", False, "megatron") is None


def test_summary_excludes_warmup_and_names_convention():
    w = Workload(model=ModelSpec.preset("llama2-70b"), hardware=get_hardware("h100-sxm"), num_devices=64,
                 seq_len=4096, global_batch=128, micro_batch=2)
    times = [30.0, 9.0] + [7.908] * 18
    run = RunRecord("bench", [StepRecord(i, t) for i, t in enumerate(times)], workload=w)
    s = summarize(run, convention="nemo-legacy", peak_tflops=989)
    assert s.warmup_steps == 2 and s.steps_measured == 18
    assert s.step_time_median_s == 7.908
    assert s.tokens_per_s == pytest.approx(66298.43, abs=0.01)
    # nemo-legacy's exact count (1.8206e15 per sequence) rather than the recipe's rounded 1.82e15
    assert s.mfu_pct == pytest.approx(46.55, abs=0.01)
    assert s.convention == "nemo-legacy" and "given by the user" in s.peak_source


def test_warmup_rule_and_percentile():
    assert [default_warmup_steps(n) for n in (0, 1, 2, 10, 11, 50, 1000)] == [0, 0, 1, 1, 2, 5, 10]
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5.0], 90) == 5.0


def test_cost_and_rate_inputs_agree():
    w = Workload(model=ModelSpec.preset("llama3-8b"), hardware=get_hardware("a100-sxm-80gb"), num_devices=64,
                 seq_len=8192, global_batch=64)
    a = throughput(w, step_time_s=2.0, usd_per_device_hour=2.0)
    b = throughput(w, tokens_per_s=a.tokens_per_s, usd_per_device_hour=2.0)
    c = throughput(w, tokens_per_s_per_device=a.tokens_per_s_per_device, usd_per_device_hour=2.0)
    assert a.mfu_pct == pytest.approx(b.mfu_pct) == pytest.approx(c.mfu_pct)
    assert a.cost_usd == pytest.approx(2.0 * 64 * a.days_to_train * 24)
    with pytest.raises(SpecError):
        throughput(w, step_time_s=2.0, tokens_per_s=3.0)
    with pytest.raises(SpecError):
        throughput(w, step_time_s=-1)
    with pytest.raises(SpecError):
        throughput(w, step_time_s=float("nan"))


# --- properties --------------------------------------------------------------------------------
@st.composite
def model_specs(draw):
    heads = draw(st.sampled_from([1, 2, 4, 8, 16]))
    kv = draw(st.sampled_from([d for d in (1, 2, 4, 8, 16) if heads % d == 0]))
    head_dim = draw(st.sampled_from([8, 16, 64, 128]))
    moe = draw(st.booleans())
    layers = draw(st.integers(1, 64))
    experts = draw(st.integers(2, 64)) if moe else 0
    return ModelSpec(
        layers=layers, hidden=heads * head_dim, heads=heads, kv_heads=kv,
        ffn_hidden=draw(st.integers(1, 20000)), vocab=draw(st.integers(1, 300000)),
        tied_embeddings=draw(st.booleans()), mlp=draw(st.sampled_from(["swiglu", "gelu", "geglu", "relu"])),
        moe_experts=experts, moe_topk=draw(st.integers(1, experts)) if moe else 0,
        moe_dense_layers=draw(st.integers(0, layers - 1)) if moe else 0,
        sliding_window=draw(st.integers(1, 4096)), sliding_window_layers=draw(st.integers(0, layers)),
    )


@settings(max_examples=150, deadline=None)
@given(model_specs(), st.integers(1, 131072), st.floats(0, 1))
def test_every_convention_is_finite_and_positive(model, seq, frac):
    for name, v in all_conventions(model, seq, frac).items():
        assert math.isfinite(v) and v > 0, name
    assert model.active_params <= model.total_params
    assert model_flops_per_token(model, seq, "exact") <= model_flops_per_token(model, seq, "nemo-legacy") + 1e-6
    assert model_flops_per_token(model, seq, "megatron") <= model_flops_per_token(model, seq, "nemo-legacy") + 1e-6


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(
    st.sampled_from(["layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "moe_experts", "moe_topk"]),
    st.one_of(st.integers(-5, 64), st.floats(allow_nan=True), st.text(max_size=3), st.none(), st.booleans()),
    max_size=5))
def test_invalid_specs_raise_only_our_error(changes):
    base = dict(layers=2, hidden=64, heads=8, ffn_hidden=128, vocab=100)
    base.update(changes)
    try:
        ModelSpec(**base)
    except TrainperfError as e:
        assert "\n" not in str(e)


def test_conventions_table_complete():
    assert set(CONVENTIONS) == {"megatron", "palm", "torchtitan-2024", "nemo-legacy", "6n", "lora", "exact", "llm.c"}


def test_llmc_convention_is_its_gpt2_count():
    """llm.c's ``6 * N + 6 * L * C * T`` (N every parameter): GPT-2 small with llm.c's padded
    vocabulary (50,304) has 124,475,904 parameters, so 6 x 124,475,904 + 6 x 12 x 768 x 1024 =
    803,478,528 FLOPs per token at T = 1024; half PaLM's attention term."""
    gpt2 = ModelSpec.preset("gpt2").replace(vocab=50304)
    assert gpt2.total_params == 124_475_904
    assert model_flops_per_token(gpt2, 1024, "llm.c") == 803_478_528
