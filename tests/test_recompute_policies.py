"""Named activation-checkpointing policies: recompute FLOPs and kept activations, by hand.

Llama-2-7B (h = 4096, f = 11008, L = 32, MHA, SwiGLU) at s = 4096, causal mask counted exactly.
Forward FLOPs per token of one layer's matrices (2 * in * out):
  q, k, v, o:       2 * 4096 * 4096  =  33,554,432 each
  gate, up, down:   2 * 4096 * 11008 =  90,177,536 each
Attention core per token per layer (scores + values, S(S+1)/2 pairs per sequence):
  4 * h * (S + 1) / 2 = 2 * 4096 * 4097 = 33,562,624
"""

from __future__ import annotations

import pytest

from trainperf.accounting.conventions import recompute_flops_per_token
from trainperf.accounting.flops import forward_flops
from trainperf.accounting.recompute import (
    POLICY_NAMES,
    get_policy,
    kept_tensors,
    recompute_flops,
    saved_activation_bytes_per_token,
    saved_widths,
)
from trainperf.errors import SpecError
from trainperf.specs.presets import get_model

S = 4096
L = 32
QKVO = 2 * 4096 * 4096
MLP = 2 * 4096 * 11008
CORE = 2 * 4096 * (S + 1)


@pytest.fixture(scope="module")
def llama7b():
    return get_model("llama2-7b")


@pytest.mark.parametrize("policy, per_layer", [
    ("none", 0),
    ("selective", CORE),                                    # attention core only
    ("full", 4 * QKVO + 3 * MLP + CORE),                    # the whole block
    ("selective-op", QKVO + QKVO + MLP),                    # mm #2 (wk), #4 (wo), #6 (w3 = up)
    ("minimal", CORE),                                      # every weight dot saved
    ("save_dot_except_mlpwi", 2 * MLP + CORE),              # wi_0, wi_1 + attention (context not saved)
    ("save_dot_except_mlp", 3 * MLP + CORE),                # wi_0, wi_1, wo + attention
    ("save_qkv_proj", QKVO + 3 * MLP + CORE),               # out_proj + MLP + attention
    ("qkv_proj_offloaded", QKVO + 3 * MLP + CORE),          # same recompute, q/k/v on the host
])
def test_recompute_flops_match_hand_derivation(llama7b, policy, per_layer):
    assert recompute_flops(llama7b, S, policy) / S == pytest.approx(L * per_layer, rel=1e-12)


def test_hand_numbers(llama7b):
    """The constants above, against the breakdown itself."""
    fb = forward_flops(llama7b, S)
    assert fb.attention_core / S == pytest.approx(L * CORE)
    assert fb.layers_matmul / S == pytest.approx(L * (4 * QKVO + 3 * MLP + CORE))
    assert recompute_flops(llama7b, S, "selective-op") / S == 5_033_164_800
    assert recompute_flops(llama7b, S, "save_dot_except_mlpwi") / S == 6_845_366_272


def test_partial_layer_policies(llama7b):
    full = recompute_flops(llama7b, S, "full")
    # Megatron block method: 2 layers per model chunk; 1 chunk -> 2/32, pp*vpp = 4 chunks -> 8/32
    assert recompute_flops(llama7b, S, "full:2") == pytest.approx(full * 2 / 32)
    assert recompute_flops(llama7b, S, "full:2", pipeline_chunks=4) == pytest.approx(full * 8 / 32)
    assert recompute_flops(llama7b, S, "full:64") == pytest.approx(full)  # capped at every layer
    # torchtitan selective layer AC, every 2nd block: floor(32/2) = 16 of 32
    assert recompute_flops(llama7b, S, "full-every:2") == pytest.approx(full / 2)
    assert recompute_flops(llama7b, S, "full-every:3") == pytest.approx(full * 10 / 32)
    per_tok = recompute_flops_per_token(llama7b, S, "full:2", "megatron", pipeline_chunks=4)
    assert per_tok == pytest.approx(recompute_flops(llama7b, S, "full", "causal-half") / S / 4)


@pytest.mark.parametrize("policy, h, q, kv, ffn", [
    # none: layer_input, norm1_out, attn_residual, norm2_out (4h); q, attn_context (2q);
    # k, v (2kv); gate, up, act (3f) -> Korthikanti's 34h for MHA with a 4h GELU MLP + masks
    ("none", 4, 2, 2, 3),
    ("selective", 4, 2, 2, 3),           # flash attention never stores the scores
    ("full", 1, 0, 0, 0),                # layer input only
    ("selective-op", 2, 2, 1, 1),        # layer_input, mlp_out (h); q, context; v; gate
    ("minimal", 2, 1, 2, 2),             # layer_input, attn_out; q; k, v; gate, up
    ("save_dot_except_mlpwi", 2, 1, 2, 0),
    ("save_dot_except_mlp", 2, 1, 2, 0),
    ("save_qkv_proj", 1, 1, 2, 0),
    ("qkv_proj_offloaded", 1, 0, 0, 0),  # q/k/v live on the host
])
def test_kept_activation_widths(llama7b, policy, h, q, kv, ffn):
    w = saved_widths(get_policy(policy), llama7b)
    assert (w.h, w.q, w.kv, w.ffn) == (h, q, kv, ffn), kept_tensors(get_policy(policy), llama7b)
    per_token = 2 * (h * 4096 + q * 4096 + kv * 4096 + ffn * 11008)
    assert saved_activation_bytes_per_token(llama7b, policy) == per_token


def test_plain_mlp_keeps_no_gate():
    gpt = get_model("gpt3-175b")
    w = saved_widths(get_policy("none"), gpt)
    assert w.ffn == 2  # fc1 output (GELU input) and GELU output


def test_policy_names_are_validated():
    for name in POLICY_NAMES:
        get_policy(name.replace("K", "2").replace("N", "2"))
    for bad in ("selectiv", "full:0", "full:-1", "full:x", "full-every:", "FULL", 3):
        with pytest.raises(SpecError, match="activation_checkpointing"):
            get_policy(bad)


def test_measured_runs_refuse_prediction_only_policies():
    pytest.importorskip("torch")
    from trainperf.measure.parallelize import apply_ac

    class _Stub:
        layers = ()

    apply_ac(_Stub(), "full")  # the reference model implements the classic three
    with pytest.raises(SpecError, match="prediction-only"):
        apply_ac(_Stub(), "selective-op")
