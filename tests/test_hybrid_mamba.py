"""Hybrid Mamba-2 / attention models (Nemotron-H): shape, parameters and FLOPs counted by hand,
the step model's average block, the memory model, the planner's and the workload's tp rule, and
runs tables that name such a model."""

from __future__ import annotations

import pytest

from hand_runs import parse_hand_rows
from trainperf.accounting.flops import forward_flops
from trainperf.accounting.recompute import layer_matmul_flops, recompute_flops
from trainperf.errors import SpecError
from trainperf.predict import predict
from trainperf.predict.step_model import layout_of
from trainperf.predict.step_model.compute import mamba_bytes_per_token
from trainperf.specs.model import ModelSpec
from trainperf.specs.workload_file import workload_from_dict

H56 = ModelSpec.preset("nemotron-h-56b")


def _all_attention(m: ModelSpec) -> ModelSpec:
    """The same blocks with attention in every mixer (the Mamba-2 shape cleared)."""
    return m.replace(mamba_layers=0, mamba_heads=0, mamba_head_dim=0, mamba_state_dim=0, mamba_groups=0)


def _w(model: ModelSpec | str = "nemotron-h-8b", n: int = 8, parallel: dict | None = None, **training):
    spec = model if isinstance(model, ModelSpec) else ModelSpec.preset(model)
    return workload_from_dict({
        "model": spec.to_dict(), "hardware": {"device": "h100-sxm", "num_devices": n},
        "parallel": parallel or {"dp": n, "zero_stage": 1},
        "training": {"seq_len": 8192, "global_batch": 2 * n, "micro_batch": 1, "precision": "bf16",
                     "stack": "megatron-core", **training}})


# ------------------------------------------------------------------------------ the shape
def test_nemotron_h_56b_parameters_counted_by_hand():
    """arXiv:2504.03624 Table 1's shape: 54 Mamba-2, 10 attention, 54 MLP layers."""
    embed = head = 131072 * 8192
    in_proj = 8192 * (2 * 16384 + 2 * 8 * 256 + 256)  # z, x, B, C, dt
    mamba = in_proj + 16384 * 8192 + (16384 + 2 * 8 * 256) * (4 + 1) + 3 * 256 + 16384  # out, conv, dt/A/D, norm
    attention = 2 * 8192 * 8192 + 2 * 8192 * 1024
    mlp = 2 * 8192 * 32768
    norms = (64 * 2 - 10 + 1) * 8192  # one per pattern layer and the final norm
    assert H56.total_params == embed + head + 54 * mamba + 10 * attention + 54 * mlp + norms == 56_324_350_464
    assert (H56.pattern_layers, H56.attention_layers, H56.dense_layers) == (118, 10, 54)
    assert ModelSpec.preset("nemotron-h-8b").pattern_layers == 52


def test_ssd_scan_flops_counted_by_hand():
    # per token and mixer: C B^T per group (2QN), scores x per head (2QP), chunk states and the
    # output from the state per head (2NP each)
    per_token = 8 * 2 * 128 * 256 + 256 * (2 * 128 * 64 + 4 * 256 * 64)
    assert H56.ssd_flops_per_token() == per_token == 21_495_808
    fb = forward_flops(H56, 8192)
    assert fb.ops["mamba_scan"] == 54 * 8192 * per_token
    assert fb.ops["attn_qkv"] == 10 * 8192 * 2 * (8192 * 8192 + 2 * 8192 * 1024)
    assert fb.ops["attn_scores"] == 2 * 64 * 128 * 10 * 8192 * 8193 / 2
    assert fb.ops["mlp"] == 54 * 8192 * 2 * 2 * 8192 * 32768
    assert "mamba_proj" not in forward_flops(ModelSpec.preset("llama3-8b"), 8192).ops


def test_recompute_of_a_hybrid():
    """``full`` re-runs every block's matmuls and scans; selective re-runs attention's core only."""
    fb = forward_flops(H56, 8192)
    assert sum(layer_matmul_flops(H56, 8192).values()) == pytest.approx(fb.layers_matmul - fb.attention_core)
    assert recompute_flops(H56, 8192, "full") == pytest.approx(fb.layers_matmul)
    assert recompute_flops(H56, 8192, "selective") == pytest.approx(fb.attention_core)


@pytest.mark.parametrize(("changes", "field"), [
    ({"mamba_layers": 64}, "mamba_layers"),
    ({"mamba_groups": 7}, "mamba_groups"),
    ({"mamba_state_dim": 0}, "mamba_state_dim"),
    ({"mlp_free_layers": 64}, "mlp_free_layers"),
    ({"sliding_window": 4096, "sliding_window_layers": 2}, "mamba_layers"),
])
def test_a_hybrid_that_cannot_be_built_says_which_field(changes, field):
    with pytest.raises(SpecError) as e:
        H56.replace(**changes)
    assert field in str(e.value)
    with pytest.raises(SpecError, match="mamba_layers"):
        ModelSpec.preset("llama3-8b").replace(mamba_heads=8)


def test_a_shallower_proxy_keeps_the_mix():
    two = H56.replace(layers=8)
    assert (two.mamba_layers, two.mlp_free_layers) == (7, 1)
    assert (H56.replace(layers=2).mamba_layers, H56.replace(layers=2).attention_layers) == (1, 1)
    with pytest.raises(SpecError, match="layers=1 is invalid: at least 2 for a hybrid"):
        H56.replace(layers=1)


# ------------------------------------------------------------------------------ the step model
def test_attention_time_is_the_attention_blocks_share():
    """The attention core runs in 4 of Nemotron-H-8B's 28 blocks: its time is 4/28 of the same
    blocks all attending (the same kernel at the same length)."""
    hybrid = predict(_w())
    dense = predict(_w(_all_attention(ModelSpec.preset("nemotron-h-8b"))))
    ratio = hybrid.compute_breakdown["attention"] / dense.compute_breakdown["attention"]
    assert ratio == pytest.approx(4 / 28, rel=1e-9)
    # Mamba-2 mixers do more matmul work than the GQA attention they replace
    assert hybrid.compute_breakdown["matmul"] > dense.compute_breakdown["matmul"]


_MIXER = 2 * (3 * 8192 + (8192 + 2 * 8 * 128) + 128)
"""Bytes per token a Nemotron-H-8B Mamba-2 mixer keeps on the memory-efficient path: the input
projection's output (z, x B C, dt), the scan's output and the output projection's input, 16-bit."""
_ATTENTION = 2 * (4096 + 2 * 1024 + 4096)
"""Bytes per token its attention keeps beyond the block's hidden-wide tensors: q, k, v, context."""


def test_full_recomputation_keeps_only_block_inputs_whatever_the_mixer():
    """Under ``full`` every block keeps its input alone; the one block recomputed in the backward
    holds its whole set again, which is where the mixers differ."""
    hybrid = predict(_w(activation_checkpointing="full"))
    dense = predict(_w(_all_attention(ModelSpec.preset("nemotron-h-8b")), activation_checkpointing="full"))
    one_block = (24 / 28) * 8192 * (_MIXER - _ATTENTION) / 2 ** 30
    assert (hybrid.memory_breakdown_GiB["activations"] - dense.memory_breakdown_GiB["activations"]
            == pytest.approx(one_block, rel=1e-6))


def test_without_recomputation_a_mamba_block_keeps_its_own_tensors():
    """Each of the 24 Mamba-2 blocks of 28 keeps the mixer's tensors instead of attention's."""
    m = ModelSpec.preset("nemotron-h-8b")
    hybrid, dense = layout_of(_w()), layout_of(_w(_all_attention(m)))
    assert (hybrid.model.attn_frac, dense.model.attn_frac) == (pytest.approx(4 / 28), 1.0)
    a_h = predict(_w()).memory_breakdown_GiB["activations"]
    a_d = predict(_w(_all_attention(m))).memory_breakdown_GiB["activations"]
    assert a_h - a_d == pytest.approx(24 * 8192 * (_MIXER - _ATTENTION) / 2 ** 30, rel=1e-6)


def test_mamba_memory_bound_bytes():
    assert mamba_bytes_per_token(10.0, 4.0, 2.0) == 2.0 * (2 * 10 + 3 * 4) / 2


def test_tp_must_divide_the_mamba_groups():
    with pytest.raises(SpecError, match="mamba_groups=8"):
        _w(n=16, parallel={"tp": 16})
    assert predict(_w(n=16, parallel={"tp": 8, "dp": 2, "sequence_parallel": True})).fits


# ------------------------------------------------------------------------------ runs tables
def _row(**cells: str):
    (r,) = parse_hand_rows([{
        "row_id": "h1", "table_id": "hand", "source": "hand-built", "seq_len": "8192", "micro_batch": "1",
        "global_batch_seqs": "192", "hardware": "H100 SXM5 80GB", "num_gpus": "256", "act_ckpt": "none",
        "precision": "fp8", "framework": "NeMo 25.04 (Megatron-Core)", "step_time_s": "3", "tp": "8",
        "pp": "1", **cells}])
    return r


@pytest.mark.parametrize("layers", ["118", "64", ""])
def test_a_nemotron_h_row_is_read_from_its_preset(layers):
    r = _row(model="Nemotron-H 56B", arch_type="hybrid Mamba-2 / Transformer", layers=layers, hidden="8192")
    assert r.included, r.exclude_reason
    assert r.workload.model == H56


def test_other_state_space_models_stay_unread():
    r = _row(model="Jamba 1.5 Large", arch_type="hybrid Mamba / Transformer MoE", layers="72", hidden="8192",
             heads="64", ffn_hidden="24576", vocab="65536")
    assert not r.included and "mamba" in r.exclude_reason


def test_an_moe_hybrid_prices_experts_in_the_blocks_that_have_them():
    """A hybrid whose MLPs are experts (Nemotron-H's 'E' layers): 24 of 28 blocks have an MLP, all
    of them MoE, so the stage's MoE share is 24/28 and no block is dense."""
    moe = ModelSpec.preset("nemotron-h-8b").replace(moe_experts=8, moe_topk=2, moe_expert_ffn=2688)
    assert (moe.moe_layers, moe.dense_layers) == (24, 0)
    from trainperf.predict.step_model.stage import busiest_stage

    w = _w(moe, parallel={"dp": 8, "ep": 8, "zero_stage": 1})
    st = busiest_stage(layout_of(w))
    assert (st.moe_frac, st.dense_frac) == (pytest.approx(24 / 28), 0.0)
    p = predict(w)
    assert p.fits and p.compute_breakdown["grouped GEMMs (routed experts)"] > 0


def test_the_bench_model_refuses_a_hybrid():
    from trainperf.measure.model import check_supported

    with pytest.raises(SpecError, match="mamba_layers"):
        check_supported(ModelSpec.preset("nemotron-h-8b").replace(position="rope"))


def test_lora_on_a_hybrid_is_refused_not_miscounted():
    from trainperf.specs.lora import LoraSpec

    with pytest.raises(SpecError, match="Mamba-2"):
        LoraSpec(rank=8).matrices(ModelSpec.preset("nemotron-h-8b"))
