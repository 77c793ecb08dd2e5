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
    # MaxText (JAX) re-runs only what the backward reads: wo's output feeds the residual add only,
    # so wo is never re-run, whether mlpwo is saved (save_dot_except_mlpwi) or not
    ("save_dot_except_mlp", 2 * MLP + CORE),                # wi_0, wi_1 + attention
    ("save_dot_with_context_except_mlp", 2 * MLP),          # context saved: no attention core
    ("save_qkv_proj", QKVO + 2 * MLP + CORE),               # out_proj + MLP inputs + attention
    ("qkv_proj_offloaded", QKVO + 2 * MLP + CORE),          # same recompute, q/k/v on the host
    ("save_out_proj", 3 * QKVO + 2 * MLP + CORE),           # q/k/v + MLP inputs + attention
    ("minimal_flash", 0),                                   # every weight dot and the context saved
    ("minimal_offloaded", CORE),                            # every weight dot offloaded, none re-run
    ("custom:query_proj=device+key_proj=device+value_proj=device+out_proj=device+mlpwo=device",
     2 * MLP + CORE),                                       # = save_dot_except_mlpwi (DGX Cloud bf16)
    ("custom:out_proj=offload+mlpwi_0=device", QKVO * 3 + 2 * MLP + CORE),  # wi_1 re-run: both wi re-run
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
    # q counts the queries, ctx the attention context (of equal width but under MLA)
    assert (w.h, w.q + w.ctx, w.kv, w.ffn) == (h, q, kv, ffn), kept_tensors(get_policy(policy), llama7b)
    per_token = 2 * (h * 4096 + q * 4096 + kv * 4096 + ffn * 11008)
    assert saved_activation_bytes_per_token(llama7b, policy) == per_token


def test_plain_mlp_keeps_no_gate():
    gpt = get_model("gpt3-175b")
    w = saved_widths(get_policy("none"), gpt)
    assert w.ffn == 2  # fc1 output (GELU input) and GELU output


def test_policy_names_are_validated():
    for name in POLICY_NAMES:
        get_policy(name.replace("NAME=WHERE", "out_proj=offload").replace("MODULES", "core_attn+moe_act")
                   .replace("K", "2").replace("N", "2"))
    for bad in ("selectiv", "full:0", "full:-1", "full:x", "full-every:", "FULL", 3, "selective:",
                "selective:mlp+attn", "selective:core_attn,moe_act", "custom:", "custom:out_proj",
                "custom:out_proj=disk", "custom:attn_out=device"):
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


# --- Megatron-Core --recompute-modules (selective:M1+M2)

def test_recompute_modules_are_written_in_megatrons_order():
    """Any order in, the canonical one (Megatron-Core's list order) out; ``selective:core_attn``
    is Megatron's default ``selective``."""
    assert get_policy("selective:moe_act+layernorm+core_attn").name == "selective:core_attn+moe_act+layernorm"
    assert get_policy("selective:core_attn").name == "selective"
    p = get_policy("selective:layernorm")  # a list without core_attn leaves attention alone
    assert not p.recompute_attention_core and p.modules == ("layernorm",)
    from trainperf.specs.workload_file import workload_from_dict

    w = workload_from_dict({"model": {"preset": "mixtral-8x7b"}, "hardware": {"device": "h100-sxm", "num_devices": 8},
                            "parallel": {"ep": 8}, "training": {"seq_len": 4096, "global_batch": 8,
                                                                "activation_checkpointing": "selective:moe_act+core_attn"}})
    assert w.activation_checkpointing == "selective:core_attn+moe_act"


@pytest.mark.parametrize("policy, per_layer", [
    ("selective:core_attn+layernorm", CORE),       # norms are not FLOPs of any convention
    ("selective:core_attn+mlp", CORE + 3 * MLP),   # the dense MLP re-run
    ("selective:mlp", 3 * MLP),
    ("selective:moe_act+mla_up_proj", 0),          # nothing of a dense GQA-free model
])
def test_recompute_module_flops_on_a_dense_model(llama7b, policy, per_layer):
    assert recompute_flops(llama7b, S, policy) / S == pytest.approx(L * per_layer, rel=1e-12)


def test_recompute_module_widths_on_a_dense_model(llama7b):
    """Llama-2-7B keeps h 4, q 2, kv 2, ffn 3 without recomputation; ``layernorm`` drops the two
    norm outputs, ``mlp`` the gate, up and activation outputs."""
    w = saved_widths(get_policy("selective:core_attn+layernorm"), llama7b)
    assert (w.h, w.q, w.ctx, w.kv, w.ffn) == (2, 1, 1, 2, 3)
    w = saved_widths(get_policy("selective:layernorm+mlp"), llama7b)
    assert (w.h, w.q, w.ctx, w.kv, w.ffn) == (2, 1, 1, 2, 0)


def test_mla_keeps_its_narrower_context_and_up_projected_keys_and_values():
    """DeepSeek-V3 (128 heads, qk 128 + 64 rope, v 128): the attention context, the output
    projection's input, is 128 x 128 wide, not the queries' 128 x 192; the kept keys and values
    are the up-projected ones (24,576 and 16,384 wide), not kv_heads x hidden/heads."""
    ds = get_model("deepseek-v3")
    assert (ds.q_dim, ds.context_dim) == (24576, 16384)
    per_token = 2 * (4 * 7168 + 24576 + (24576 + 16384) + 16384 + 3 * 18432)
    assert saved_activation_bytes_per_token(ds, "none") == per_token
    # mla_up_proj re-runs the up-projections: q, k and v are not kept, the context is
    per_token_up = 2 * (2 * 7168 + 16384 + 3 * 18432)
    assert saved_activation_bytes_per_token(ds, "selective:layernorm+mla_up_proj") == per_token_up


def test_recompute_module_flops_on_moe_and_mla():
    """Mixtral 8x7B (h 4096, expert ffn 14336, top-2 of 8, 32 MoE layers): ``moe`` re-runs the
    routed experts and the router, ``moe_act`` no matmul. DeepSeek-V3 (MLA: q_lora 1536,
    kv_lora 512, 128 heads, qk 128 + 64 rope, v 128; 61 layers): ``mla_up_proj`` re-runs q_up and
    kv_up; ``shared_experts`` the shared expert of its 58 MoE layers (ffn 2048, SwiGLU)."""
    mix = get_model("mixtral-8x7b")
    experts = 2 * 3 * 2 * 4096 * 14336
    router = 2 * 4096 * 8
    assert recompute_flops(mix, S, "selective:moe") / S == pytest.approx(32 * (experts + router), rel=1e-12)
    assert recompute_flops(mix, S, "selective:moe_act") == 0.0
    ds = get_model("deepseek-v3")
    up = 2 * 1536 * 128 * 192 + 2 * 512 * 128 * (128 + 128)
    assert recompute_flops(ds, S, "selective:mla_up_proj") / S == pytest.approx(61 * up, rel=1e-12)
    shared = 3 * 2 * 7168 * 2048
    assert recompute_flops(ds, S, "selective:shared_experts") / S == pytest.approx(58 * shared, rel=1e-12)


def test_policies_a_model_has_no_part_for_reduce():
    from trainperf.specs.checkpointing import policy_for_model

    dense = dict(moe=False, mla=False, shared_experts=False, dense_layers=True)
    assert policy_for_model("selective:core_attn+moe_act+layernorm+mla_up_proj", **dense) == \
        "selective:core_attn+layernorm"
    assert policy_for_model("selective:moe_act", **dense) == "none"
    moe = dict(moe=True, mla=False, shared_experts=False, dense_layers=False)
    assert policy_for_model("selective:core_attn+moe_act+layernorm+mla_up_proj", **moe) == \
        "selective:core_attn+moe_act+layernorm"
    assert policy_for_model("selective:moe_act+moe+shared_experts", **moe) == "selective:moe"


@pytest.mark.parametrize(("policy", "kept"), [
    # MaxText layers/attentions.py, linears.py, decoders.py get_remat_policy: the names each saves
    ("save_dot_with_context_except_mlp", ("layer_input", "q", "k", "v", "attn_context", "attn_out")),
    ("save_out_proj", ("layer_input", "attn_out")),
    ("minimal_flash", ("layer_input", "q", "k", "v", "attn_context", "attn_out", "mlp_gate", "mlp_up")),
    ("minimal_offloaded", ("layer_input",)),
    # the DGX Cloud bf16 recipe: qkv, out and mlpwo on the device (mlpwo's output is not needed)
    ("custom:query_proj=device+key_proj=device+value_proj=device+out_proj=device+mlpwo=device",
     ("layer_input", "q", "k", "v", "attn_out")),
    # offloaded tensors leave the device; the layer input too when offloaded
    ("custom:decoder_layer_input=offload+qkv_proj=offload+out_proj=device", ("attn_out",)),
])
def test_maxtext_policies_keep_what_maxtext_saves(llama7b, policy, kept):
    assert kept_tensors(get_policy(policy), llama7b) == kept
    # bytes per token per layer from the kept widths (2 bytes each): hand-derived for Llama 2 7B (MHA)
    width = {"layer_input": 4096, "q": 4096, "k": 4096, "v": 4096, "attn_context": 4096, "attn_out": 4096,
             "mlp_gate": 11008, "mlp_up": 11008}
    assert saved_activation_bytes_per_token(llama7b, policy) == 2 * sum(width[t] for t in kept)


def test_maxtext_custom_is_written_one_way():
    a = get_policy("custom:out_proj=device+query_proj=device")
    b = get_policy("custom:query_proj=device+out_proj=device+decoder_layer_input=device")
    assert a.name == b.name == "custom:query_proj=device+out_proj=device"
    assert get_policy("custom:decoder_layer_input=device").name == "custom:decoder_layer_input=device"
