"""The analytic step model as pure functions of numbers (floats or numpy arrays).

:func:`workload_features` turns a :class:`~trainperf.specs.workload.Workload` into a flat dict
of numbers; :func:`step_core` maps those numbers and a knob dict to seconds and bytes. Nothing
here reads a catalog or builds an object per call, so the planner can pass numpy arrays (one
element per candidate plan) for any plan-dependent feature and get arrays back.

What one optimizer step costs on the slowest device: the slowest pipeline rank, i.e. the last
one (its layers plus the LM head and the loss) or, with an uneven split
(:meth:`~trainperf.specs.parallel.ParallelPlan.stage_layers`), a busier earlier one:

* per micro-batch, per layer: every GEMM by shape (:mod:`.compute`), fused attention, the
  memory-bound ops; backward is 2x the GEMMs (activation and weight gradients; LoRA skips the
  frozen weights' gradients), 2.5x attention, 2x the elementwise bytes; recomputation re-runs
  what the named checkpointing policy says (:mod:`trainperf.accounting.recompute`: the GEMMs
  it re-runs, the attention core, the elementwise ops), over the fraction of layers it covers;
* device physics: compute peaks are scaled by the device's sustained-clock fraction (power cap);
* software features, whose sizes are profile keys read with neutral defaults: ``compile``
  scales memory-bound time by ``compile_memory_bound_factor`` and kernel overhead by
  ``compile_overhead_factor``; an fp8 recipe scales the fp8 GEMM efficiency by
  ``fp8_<recipe>_matmul_factor``; ``async_tp`` hides ``async_tp_overlap`` of the TP collectives;
* tensor-parallel collectives (2 all-reduces per layer forward, or 2 all-gathers + 2
  reduce-scatters with sequence parallelism, the same again backward, and per region again when
  recomputation re-runs its input projection) sit on the critical path: exposed in full
  (less what async TP hides);
* expert-parallel all-to-all (dispatch + combine) is exposed in full; routed experts are split
  ``etp`` ways (MoE parallel folding), each device dispatching its own tokens;
* FSDP/ZeRO-3 all-gathers (forward, and again backward: parameters are resharded after the
  forward) and reduce-scatters (every micro-batch), the DP all-reduce / ZeRO-1/2 reduce-scatter
  (once per step), the CP K/V ring and PP send/recv overlap compute as
  :func:`~trainperf.predict.comms.exposed_s` says, plus the first all-gather and last
  reduce-scatter of a micro-batch, which nothing can hide;
* the pipeline bubble, ``(p-1)/v`` micro-batch times (:mod:`.pipeline`);
* the optimizer step, memory-bound over the local optimizer shard.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from trainperf.accounting import recompute
from trainperf.accounting.flops import attention_pairs
from trainperf.predict import comms, compute, memory, pipeline, stack_capabilities, stack_kernels, vec
from trainperf.predict.kernels import attention as k_attention
from trainperf.predict.kernels import fp8 as k_fp8
from trainperf.predict.kernels import gemm as k_gemm
from trainperf.predict.kernels import memory_bound as k_memory

ATTENTION_PEAK_PRECISION = {"fp8": "bf16", "fp4": "bf16"}
"""Attention runs in 16-bit even when the GEMMs run in fp8/fp4 (torchtitan's performance page, 2024,
footnote 2: its fused attention is not done in fp8)."""

HEAD_16BIT_UNDER_FP8 = True
"""The LM head (output projection) runs in 16 bits when the transformer layers' GEMMs run in
fp8/fp4: Megatron-Core's ``output_layer`` is its own ``ColumnParallelLinear``, not a Transformer
Engine module, so TE's ``fp8_autocast`` leaves it in bf16 (megatron/core/models/gpt/gpt_model.py);
torchtitan's float8 conversion skips the ``output`` linear (torchtitan float8 docs: the final
output layer is excluded for numerics). Read from memory of both repositories; assumed for the
other stacks."""

KERNELS_PER_LAYER_FWD = 14.0
"""Kernels one layer launches forward in an eager framework: ~7 GEMMs, 2 norms, 2 adds, RoPE,
activation, attention."""

GRAD_REDUCE_BYTES = 4.0
"""Gradients are reduced in fp32 (torchtitan's default reduce dtype, Megatron-LM's fp32 grad
buffer, PyTorch DDP with fp32 master weights)."""

PARAM_GATHER_BYTES = 2.0
"""Parameters are gathered in 16-bit (FSDP mixed precision param dtype)."""

LOGIT_BYTES = 6.0
"""Live bytes per logit at the loss: bf16 logits + fp32 upcast for the softmax."""


def _kv_avg(model: Any, seq_len: int) -> float:
    """Mean number of keys per query a block-sparse causal kernel computes, over layers
    (sliding-window and chunked layers as :func:`~trainperf.accounting.flops.attention_pairs`)."""
    return attention_pairs(model, seq_len, "causal") / (seq_len * model.layers)


def model_features(model: Any, seq_len: int) -> dict[str, Any]:
    """Numbers of a model that do not depend on the plan."""
    attn = model.attention_matmuls()
    mats: list[tuple[float, float, int, str]] = []  # (in, out, split: 0 col / 1 row / 2 kv, tag)
    for name, (i, o) in attn.items():
        if name == "o_proj":
            mats.append((i, o, 1, "attn"))
        elif name in ("k_proj", "v_proj"):
            mats.append((i, o, 2, "attn"))
        else:
            mats.append((i, o, 0, "attn"))
    dense_mlp = [(i, o, 1 if name == "down_proj" else 0, "mlp")
                 for name, (i, o) in model.dense_mlp_matmuls().items()]
    expert_mlp = ([(i, o, 1 if name == "down_proj" else 0, "expert")
                   for name, (i, o) in model.dense_mlp_matmuls(model.moe_expert_ffn).items()]
                  if model.is_moe else [])
    attn_params = model.attention_params_per_layer + model.norm_params_per_layer
    return {
        "layers": float(model.layers), "hidden": float(model.hidden), "heads": float(model.heads),
        "kv_heads": float(model.kv_heads), "head_dim": float(model.head_dim),
        "q_dim": float(model.q_dim), "kv_dim": float(model.kv_dim),
        "qk_head_dim": float(model.qk_head_dim), "v_head_dim": float(model.v_dim_per_head),
        "ffn": float(model.ffn_hidden), "gated": bool(model.gated_mlp), "vocab": float(model.vocab),
        "moe_layers": float(model.moe_layers), "dense_layers": float(model.dense_layers),
        "dense_interleaved": bool(model.moe_dense_interleaved),
        "moe_experts": float(model.moe_experts), "moe_topk": float(model.moe_topk),
        "moe_shared": float(model.moe_shared_experts),
        "expert_ffn": float(model.moe_expert_ffn or 0),
        "attn_mats": tuple(mats), "mlp_mats": tuple(dense_mlp), "expert_mats": tuple(expert_mlp),
        "attn_names": tuple(attn), "mlp_names": tuple(model.dense_mlp_matmuls()),
        "params_attn_layer": float(attn_params),
        "params_dense_mlp_layer": float(model.dense_mlp_params_per_layer),
        "params_expert": float(model.expert_params),
        "params_router_layer": float(model.router_params_per_layer),
        "params_embedding": float(model.embedding_params),
        "params_head": float(model.lm_head_params + model.final_norm_params),
        "params_total": float(model.total_params),
        "kv_avg": _kv_avg(model, seq_len),
        "seq_len": float(seq_len),
    }


@functools.lru_cache(maxsize=1024)
def _model_features_cached(model: Any, seq_len: int) -> dict[str, Any]:
    # model_features is pure in the frozen ModelSpec and seq_len; callers get a copy.
    return model_features(model, seq_len)


def workload_features(w: Any, trainable_fraction: float = 1.0) -> dict[str, Any]:
    """All numbers :func:`step_core` needs, for one workload."""
    p = w.plan
    hw = w.hardware
    f = dict(_model_features_cached(w.model, w.seq_len))  # a copy: updated below
    precision = w.precision
    attn_prec = ATTENTION_PEAK_PRECISION.get(precision, precision)
    if not hw.supports(attn_prec):
        attn_prec = precision
    f.update({
        "num_devices": float(w.num_devices), "devices_per_node": float(w.devices_per_node),
        "micro_batch": float(w.micro_batch), "grad_accum": float(w.grad_accum_steps),
        "dp": float(p.dp or 1), "fsdp": float(p.fsdp), "zero_stage": float(p.zero_stage),
        "tp": float(p.tp), "sp": bool(p.sequence_parallel), "pp": float(p.pp), "vpp": float(p.vpp),
        "interleaved": p.pp_schedule == "interleaved",
        "gpipe": p.pp > 1 and p.pp_schedule == "gpipe", "cp": float(p.cp), "ep": float(p.ep),
        "shards_params": float(p.shards_params), "shards_grads": float(p.shards_grads),
        "shards_optimizer": float(p.shards_optimizer),
        "etp": float(p.expert_tp),
        **dict(zip(("layers_first", "layers_mid", "layers_last"),
                   (float(n) for n in p.stage_layers(w.model.layers)), strict=True)),
        "policy": w.activation_checkpointing,
        "compile": bool(w.compile), "async_tp": bool(w.async_tp), "fp8_recipe": w.fp8_recipe or "",
        # compute runs at the clock the part sustains under its power cap (device physics)
        "peak_flops": hw.sustained_peak_flops(precision),
        "attn_peak_flops": hw.sustained_peak_flops(attn_prec),
        "fp8": precision in ("fp8", "fp4"),
        **kernel_features(w),
        "state_kind": "fp32" if precision in ("fp32", "tf32") else "mixed",
        "act_bytes": 4.0 if precision in ("fp32", "tf32") else 2.0,
        "hbm_bytes_per_s": hw.hbm_bandwidth_GB_per_s * 1e9,
        "intra_bytes_per_s": hw.intra_node_link_GB_per_s * 1e9,
        "inter_bytes_per_s": hw.inter_node_link_GB_per_s * 1e9,
        # what the device exposes to a process (memory_usable_GiB, else hbm_GB decimal GB)
        "hbm_capacity_bytes": hw.usable_memory_bytes,
        # devices per NVLink/xGMI/ICI domain: the catalog's when it states one (GB200 NVL72: 72),
        # else the workload's node
        "scale_up_domain": float(min(hw.scale_up_domain or w.devices_per_node, w.num_devices)),
        "loss_bytes_per_logit": stack_capabilities.loss_bytes_per_logit(getattr(w, "stack", None), bool(w.compile)),
        "fp8_gemm_input_bytes": stack_capabilities.fp8_gemm_input_bytes(getattr(w, "stack", None), precision),
        "fsdp_grad_per_tensor": stack_capabilities.fsdp_grad_per_tensor(getattr(w, "stack", None)),
        "trainable_fraction": float(trainable_fraction),
    })
    return f


def kernel_features(w: Any) -> dict[str, Any]:
    """What the workload's software stack runs on its silicon, and how fast the silicon runs it
    (kernel physics, :mod:`trainperf.predict.kernels`): GEMM efficiency and shape constant for the
    GEMM dtype, the attention kernel family, the memory-bound implementation and its achieved
    bandwidth, the fp8 recipe's quantisation cost, the collective parameters per link level."""
    hw = w.hardware
    sil = _silicon(hw)
    sk = stack_kernels.for_stack(getattr(w, "stack", None), sil)
    precision = w.precision
    gdt = precision if precision not in ("fp4",) else "fp8"
    attn = sk.attention
    links = (comms.level_model(sil, "scale-up"), comms.level_model(sil, "scale-out"))
    return {
        "silicon": sil, "attn_family": attn,
        "gemm_peak_fraction": float(k_gemm.peak_fraction(sil, gdt)),
        "gemm_half_dim": float(k_gemm.half_dim(sil, gdt)),
        # the LM head's GEMM dtype (HEAD_16BIT_UNDER_FP8): the 16-bit fraction under fp8/fp4
        "head_gemm_peak_fraction": float(k_gemm.peak_fraction(sil, _head_dtype(hw, precision))),
        # routed experts run the stack's grouped GEMM: its speed over the dense law where measured
        "grouped_fraction": float(k_gemm.grouped_fraction(sil, "bf16" if gdt == "fp16" else gdt, sk.grouped_gemm)),
        "hbm_fraction": float(k_memory.hbm_fraction(sil)),
        "tp_overlap_rule": sk.tp_overlap,
        # a runtime that preallocates a share of a GPU's memory (JAX/XLA) leaves the rest unused
        "memory_fraction": sk.gpu_memory_fraction if hw.kind == "gpu" else 1.0,
        "link_up": links[0], "link_out": links[1],
        **software_features(w.model, sil, sk, precision, bool(w.compile), w.fp8_recipe),
    }


def _head_dtype(hw: Any, precision: str) -> str:
    """The LM head's GEMM dtype: 16-bit under an fp8/fp4 run (:data:`HEAD_16BIT_UNDER_FP8`)."""
    gdt = precision if precision != "fp4" else "fp8"
    if gdt == "fp8" and HEAD_16BIT_UNDER_FP8:
        alt = ATTENTION_PEAK_PRECISION[precision]
        return alt if hw.supports(alt) else gdt
    return gdt


def software_features(model: Any, silicon: str, sk: Any, precision: str, compile_flag: bool,
                      fp8_recipe: str | None) -> dict[str, Any]:
    """The features a run's software fields change (``compile``, ``fp8_recipe``): the memory-bound
    implementation with its bandwidth and per-op passes, and the fp8 recipe with its GEMM cost.
    The planner calls it when it sets those fields on a representative workload's features."""
    fp8 = precision in ("fp8", "fp4")
    impl = sk.elementwise_impl(compile_flag)
    recipe = (fp8_recipe or sk.fp8_recipe) if fp8 else ""
    return {
        "compiled": bool(compile_flag) or sk.compiled, "elementwise_impl": impl,
        "fp8_recipe": recipe,
        "fp8_recipe_factor": float(k_fp8.recipe_gemm_factor(silicon, recipe)) if fp8 else 1.0,
        # memory-bound ops run at the fused bandwidth of the silicon; unfused code moves an op's
        # bytes several times (per-op penalties measured fused vs eager), native single kernels once
        "elementwise_fraction": float(k_memory.elementwise_fraction(
            silicon, "compiled" if impl == "compiled" else "fused")),
        **_eager_passes(model, impl),
    }


def _eager_passes(model: Any, impl: str) -> dict[str, Any]:
    """Per-op pass counts of the memory-bound ops (1 unless the stack runs them unfused)."""
    eager = impl == "eager"

    def passes(op: str) -> float:
        return float(k_memory.eager_penalty(op)) if eager else 1.0

    gated = model.mlp in ("swiglu", "geglu")
    return {"rope": model.position == "rope",
            "norm_passes": passes("rmsnorm" if model.norm == "rmsnorm" else "layernorm"),
            "rope_passes": passes("rope"), "act_passes": passes("swiglu" if gated else "gelu")}


def _silicon(hw: Any) -> str:
    from trainperf.predict.stacks import generation_of

    return generation_of(hw)


def dense_layers_per_rank(f: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """Dense-MLP layers on the first, the second, the middle rank with the fewest, and the last
    pipeline rank (of ``layers_first``, ``layers_mid``, ``layers_mid`` and ``layers_last``).

    An MoE model's leading dense layers (DeepSeek-V3's first 3) fill the model's first layers,
    which the pipeline lays out chunk by chunk: the first rank's first chunk (``layers_first /
    vpp`` layers), then the next rank's, and so on (Megatron-Core's interleaved order), so with
    ``pp > 1`` the first rank holds them and the others hold MoE layers only. Interleaved dense
    layers (Llama 4), more leading dense layers than one round of chunks holds, a dense model and
    ``pp = 1`` give every rank its share: ``dense_layers * its layers / layers``.
    """
    pp, vpp, n_layers, n_dense = f["pp"], f["vpp"], f["layers"], f["dense_layers"]
    lf, lm, ll = f["layers_first"], f["layers_mid"], f["layers_last"]
    c0, cm, cl = lf / vpp, lm / vpp, ll / vpp
    one_round = c0 + vec.maximum(pp - 2.0, 0.0) * cm + cl
    leading = vec.where(f.get("dense_interleaved", False), False,
                        vec.where(f["moe_layers"] > 0, vec.where(pp > 1, n_dense <= one_round, False), False))
    rest = vec.maximum(n_dense - c0, 0.0)
    by_round = (vec.minimum(n_dense, c0), vec.minimum(rest, cm),
                vec.minimum(vec.maximum(rest - vec.maximum(pp - 3.0, 0.0) * cm, 0.0), cm),
                vec.minimum(vec.maximum(rest - vec.maximum(pp - 2.0, 0.0) * cm, 0.0), cl))
    share = tuple(n_dense * n / n_layers for n in (lf, lm, lm, ll))
    a0, a1, a2, a3 = (vec.where(leading, a, b) for a, b in zip(by_round, share, strict=True))
    return a0, a1, a2, a3


def layout_terms(f: dict[str, Any]) -> dict[str, Any]:
    """The plan's layout terms that both the step time and the memory need: token rows per
    device, the busiest stage's layers and parameters (routed experts sharded over their
    expert-data-parallel group), the checkpointing policy as the layer's numbers, the activation
    widths, the tp buffer, whether ZeRO-3 / plain data parallelism applies."""
    t, pp, cp, ep, vpp, etp = f["tp"], f["pp"], f["cp"], f["ep"], f["vpp"], f["etp"]
    L = f["layers"]
    m_tok = f["micro_batch"] * f["seq_len"] / cp  # token rows of every GEMM on one device
    # layers on the first, busiest middle and last pipeline rank (uneven splits included)
    layers_stage = vec.maximum(vec.maximum(f["layers_first"], f["layers_mid"]), f["layers_last"])
    # the busiest rank's mix of dense and MoE layers: of the ranks holding the most layers, the one
    # with the fewest dense ones (a MoE layer holds more and does more)
    d_first, d_second, d_mid, d_last = dense_layers_per_rank(f)
    big = 1e18
    dense_crit = vec.minimum(vec.minimum(
        vec.where(f["layers_first"] >= layers_stage, d_first, big),
        vec.where(vec.where(pp >= 3, f["layers_mid"] >= layers_stage, False), d_mid, big)),
        vec.where(vec.where(pp >= 2, f["layers_last"] >= layers_stage, False), d_last, big))
    dense_crit = vec.where(dense_crit < big, dense_crit, 0.0)  # layers_stage is always some rank's
    dense_frac = dense_crit / layers_stage
    moe_frac = vec.where(f["moe_layers"] > 0, 1.0 - dense_frac, 0.0)
    rc = recompute.layer_recompute(f["policy"], f["attn_names"], f["mlp_names"], f["gated"])
    # fraction of a stage's layers the policy covers (full:K: K per model chunk; full-every:N)
    if rc.block_layers:
        rec_frac = vec.minimum(rc.block_layers * vpp, layers_stage) / layers_stage
    elif rc.every_n_layers:
        rec_frac = (L // rc.every_n_layers) / L
    else:
        rec_frac = 1.0
    ffn_moe = f["moe_topk"] * f["expert_ffn"]  # MLP-wide elements per token of a MoE block
    ffn_shared = f["moe_shared"] * f["expert_ffn"]
    p_layer = (f["params_attn_layer"] + dense_frac * f["params_dense_mlp_layer"]
               + moe_frac * (f["params_router_layer"]
                             + (f["moe_experts"] / ep * (t / etp) + f["moe_shared"]) * f["params_expert"]))
    p_stage = (layers_stage * p_layer + vec.where(pp > 1, vec.maximum(f["params_embedding"], f["params_head"]),
                                                   f["params_embedding"] + f["params_head"])) / t
    # Routed experts held by this ep rank. The expert grid etp x ep x edp covers the dense grid
    # tp x (shards...), so these are sharded only over the expert-data-parallel group
    # (shards * tp / (ep * etp) ranks; shards / ep when etp = tp), not all shards.
    p_experts_stage = layers_stage * moe_frac * (f["moe_experts"] / ep) * f["params_expert"] / etp

    def sharded(params: Any, shards: Any) -> Any:
        """Per-device share of ``params`` (``p_stage``-shaped) under ``shards``-way sharding."""
        dense = (params - p_experts_stage) / shards
        return dense + p_experts_stage / vec.maximum(1.0, shards * t / (ep * etp))

    return {
        "m_tok": m_tok, "layers_stage": layers_stage, "moe_frac": moe_frac, "dense_frac": dense_frac,
        "dense_by_rank": (d_first, d_second, d_last),
        "rc": rc, "rec_frac": rec_frac, "kv_local": f["head_dim"] * vec.maximum(f["kv_heads"] / t, 1.0),
        "ffn_moe": ffn_moe, "ffn_shared": ffn_shared, "ffn_eff": dense_frac * f["ffn"] + moe_frac * (ffn_moe + ffn_shared),
        "tp_buf": m_tok * f["hidden"] * f["act_bytes"], "p_layer_local": p_layer / t, "p_stage": p_stage,
        "sharded": sharded, "zero3": f["shards_params"] > 1,
        # dp > 1 and not ZeRO-3 over dp (which the FSDP terms carry)
        "plain_dp": vec.where(f["dp"] > 1, vec.where(f["fsdp"] <= 1, f["zero_stage"] < 3, True), False),
    }


def memory_core(f: dict[str, Any], k: dict[str, float], lt: dict[str, Any] | None = None) -> dict[str, Any]:
    """Memory per device by category (:func:`trainperf.predict.memory.device_memory_bytes`) without
    the step time: what a planner checks first, pricing only the plans that fit. ``lt``: the
    :func:`layout_terms` of ``f`` when the caller has them."""
    lt = layout_terms(f) if lt is None else lt
    return memory.device_memory_bytes(f, k, p_stage=lt["p_stage"], p_layer_local=lt["p_layer_local"],
                                      sharded=lt["sharded"], zero3=lt["zero3"], rc=lt["rc"],
                                      rec_frac=lt["rec_frac"], kv_local=lt["kv_local"], dense_by_rank=lt["dense_by_rank"],
                                      m_tok=lt["m_tok"], tp_buf=lt["tp_buf"], plain_dp=lt["plain_dp"],
                                      gather_bytes=PARAM_GATHER_BYTES, grad_bytes=GRAD_REDUCE_BYTES)


def step_core(f: dict[str, Any], k: dict[str, float]) -> dict[str, Any]:
    """Seconds per step by component, collective details and memory bytes per device.

    ``f``: :func:`workload_features` (plan entries may be numpy arrays); ``k``: knob values
    (:meth:`~trainperf.predict.efficiency.Knobs.values`). Returns a dict of numbers/arrays.
    """
    t, pp, cp, ep, vpp = f["tp"], f["pp"], f["cp"], f["ep"], f["vpp"]
    sp = f["sp"]
    b, s, M = f["micro_batch"], f["seq_len"], f["grad_accum"]
    dom = f["scale_up_domain"]  # collectives are priced by the scale-up domains a group spans
    act_b = f["act_bytes"]
    hbm = f["hbm_bytes_per_s"]
    ovh = k["op_overhead_us"] * 1e-6
    train_frac = f["trainable_fraction"]
    # GEMMs: the silicon's measured GEMM efficiency for the dtype (kernel physics), the share of
    # it the stack keeps (fitted), the fp8 recipe's quantisation cost (kernel physics)
    mm_eff = f["gemm_peak_fraction"] * vec.where(f["fp8"], k["fp8_matmul_fraction"],
                                                 k["matmul_fraction"]) / f["fp8_recipe_factor"]
    half = f["gemm_half_dim"]
    peak = f["peak_flops"]
    elem = vec.where(f["fp8"], 1.0, act_b)
    # memory-bound ops at the silicon's achieved bandwidth for the stack's implementation
    mb_eff = f["elementwise_fraction"] * k["memory_bound_fraction"]
    opt_eff = f["hbm_fraction"] * k["memory_bound_fraction"]

    lt = layout_terms(f)
    etp, m_tok, layers_stage = f["etp"], lt["m_tok"], lt["layers_stage"]
    l_first, l_mid, l_last = f["layers_first"], f["layers_mid"], f["layers_last"]
    moe_frac, dense_frac, rc, rec_frac = lt["moe_frac"], lt["dense_frac"], lt["rc"], lt["rec_frac"]

    def col_row(i, o, split, deg=t):
        if split == 1:
            return o, i / deg  # (n, k) of a row-parallel GEMM
        if split == 2:  # k/v projections: kv heads are replicated when tp > kv_heads
            return f["head_dim"] * vec.maximum(f["kv_heads"] / deg, 1.0), i
        return o / deg, i

    # --- GEMMs of one layer, forward (average layer: dense and MoE layers mixed by count), and
    # the part of them the checkpointing policy re-runs
    mm_fwd = 0.0
    mm_rec = 0.0
    for (i, o, split, _), redo in zip(f["attn_mats"], rc.attn, strict=True):
        n, kk = col_row(i, o, split)
        tm = compute.matmul_time_s(m_tok, n, kk, peak, mm_eff, half, hbm, elem)
        mm_fwd = mm_fwd + tm
        mm_rec = mm_rec + redo * tm
    for (i, o, split, _), redo in zip(f["mlp_mats"], rc.mlp, strict=True):
        n, kk = col_row(i, o, split)
        tm = dense_frac * compute.matmul_time_s(m_tok, n, kk, peak, mm_eff, half, hbm, elem)
        mm_fwd = mm_fwd + tm
        mm_rec = mm_rec + redo * tm
    if f["expert_mats"]:
        # Routed experts are split etp ways (MoE parallel folding); each device still does 1/N of
        # the stage's expert FLOPs, so an expert sees m_tok*topk*ep*etp/(E*tp) rows.
        local_experts = f["moe_experts"] / ep
        m_e = m_tok * f["moe_topk"] * ep / f["moe_experts"] * (etp / t)
        t_exp = 0.0
        t_exp_rec = 0.0
        for (i, o, split, _), redo, redo_sh in zip(f["expert_mats"], rc.expert, rc.shared, strict=True):
            n, kk = col_row(i, o, split, etp)
            n_s, k_s = col_row(i, o, split)  # shared experts follow tp
            te = compute.matmul_time_s(m_e, n, kk, peak, mm_eff * f["grouped_fraction"], half, hbm, elem)
            ts = f["moe_shared"] / local_experts * compute.matmul_time_s(m_tok, n_s, k_s, peak, mm_eff, half,
                                                                         hbm, elem)
            t_exp = t_exp + te + ts
            t_exp_rec = t_exp_rec + redo * te + redo_sh * ts
        t_router = compute.matmul_time_s(m_tok, f["moe_experts"], f["hidden"], peak, mm_eff, half, hbm, elem)
        mm_fwd = mm_fwd + moe_frac * (local_experts * t_exp + t_router)
        mm_rec = mm_rec + moe_frac * (local_experts * t_exp_rec + rc.moe_region * t_router)

    # --- attention core and memory-bound ops of one layer, forward
    attn_flops = compute.attention_forward_flops(b, s / cp, f["kv_avg"], f["heads"] / t,
                                                 f["qk_head_dim"], f["v_head_dim"])
    # the fused-attention kernel's measured efficiency at the length it runs on: the whole causal
    # sequence, or with context parallelism the s/cp blocks of the ring (load-balanced, so mostly
    # full, non-causal blocks)
    a_fwd, a_bwd = _attention_efficiency(f, s / cp, cp)
    attn_fwd = attn_flops / (f["attn_peak_flops"] * a_fwd * k["attention_fraction"])
    attn_bwd = compute.FLASH_BACKWARD_FACTOR * attn_flops / (f["attn_peak_flops"] * a_bwd
                                                             * k["attention_fraction"])
    hn = vec.where(sp, f["hidden"] / t, f["hidden"])
    kv_local, ffn_moe, ffn_shared, ffn_eff = lt["kv_local"], lt["ffn_moe"], lt["ffn_shared"], lt["ffn_eff"]
    el_bytes = m_tok * compute.elementwise_bytes_per_token(hn, f["q_dim"] / t, kv_local, ffn_eff / t,
                                                           f["gated"], act_b, f["rope"], f["norm_passes"],
                                                           f["rope_passes"], f["act_passes"])
    # routed tokens: a device dispatches its sequence-parallel share (without SP, etp/tp of the
    # tokens its tp group holds); its experts receive m_tok*topk*etp/tp rows in all
    m_route = m_tok * vec.where(sp, 1.0, etp) / t
    m_disp = m_tok * f["moe_topk"] * etp / t
    if f["expert_mats"]:
        el_bytes = el_bytes + moe_frac * compute.moe_routing_bytes(
            m_route, m_disp, f["moe_topk"], f["hidden"], f["moe_experts"] / ep, act_b)
    mem_fwd = compute.memory_time_s(el_bytes, hbm, mb_eff)
    # Megatron-Core's recompute modules re-run single memory-bound ops (the rest re-run all of them
    # with ``elementwise``): the norms, RoPE, an MLP's activation, a MoE block's permutations
    rec_bytes = 0.0
    if not rc.elementwise and (rc.norms or rc.rope or rc.expert_act or rc.shared_act or rc.dense_act
                               or rc.moe_region):
        zero = 0.0 * hn
        norms_b = compute.elementwise_bytes_per_token(hn, zero, zero, zero, f["gated"], act_b, False,
                                                      f["norm_passes"], 0.0, 0.0) - 2.0 * 3.0 * hn * act_b
        rope_b = compute.elementwise_bytes_per_token(zero, f["q_dim"] / t, kv_local, zero, f["gated"], act_b,
                                                     f["rope"], 0.0, f["rope_passes"], 0.0)
        act_w = (rc.dense_act * dense_frac * f["ffn"]
                 + moe_frac * (rc.expert_act * ffn_moe + rc.shared_act * ffn_shared))
        act_b_tok = compute.elementwise_bytes_per_token(zero, zero, zero, act_w / t, f["gated"], act_b, False,
                                                        0.0, 0.0, f["act_passes"])
        rec_bytes = m_tok * (rc.norms * norms_b + rc.rope * rope_b + act_b_tok)
        if f["expert_mats"]:
            rec_bytes = rec_bytes + rc.moe_region * moe_frac * compute.moe_routing_bytes(
                m_route, m_disp, f["moe_topk"], f["hidden"], f["moe_experts"] / ep, act_b)
    mem_rec = rc.elementwise * mem_fwd + (1.0 - rc.elementwise) * compute.memory_time_s(rec_bytes, hbm, mb_eff)
    ovh_fwd = KERNELS_PER_LAYER_FWD * ovh
    if f["compiled"]:  # fewer, fused kernels: the profile says how much of the launch cost stays
        ovh_fwd = ovh_fwd * k.get("compile_overhead_factor", 1.0)

    # the host launches kernels while the device runs earlier ones: a layer takes its device time
    # or its launch time, whichever is longer, blended smoothly (device + launch^2/(device+launch):
    # launch-bound when the kernels are short, the launches hidden when they are long)
    gpu_fwd = mm_fwd + attn_fwd + mem_fwd
    gpu_bwd = (1.0 + train_frac) * mm_fwd + attn_bwd + 2.0 * mem_fwd
    gpu_rec = mm_rec + rc.attention_core * attn_fwd + mem_rec
    ovh_rec = rc.elementwise * ovh_fwd
    exp_fwd = _exposed_launch(gpu_fwd, ovh_fwd)
    exp_bwd = _exposed_launch(gpu_bwd, 2.0 * ovh_fwd)
    exp_rec = _exposed_launch(gpu_rec, ovh_rec)
    layer_fwd = gpu_fwd + exp_fwd
    layer_bwd = gpu_bwd + exp_bwd
    layer_rec = rec_frac * (gpu_rec + exp_rec)

    # --- LM head + loss (last stage); in 16 bits under fp8 (HEAD_16BIT_UNDER_FP8)
    head_16 = f["fp8"] & HEAD_16BIT_UNDER_FP8
    head_eff = vec.where(head_16, f["head_gemm_peak_fraction"] * k["matmul_fraction"], mm_eff)
    head_mm = compute.matmul_time_s(m_tok, f["vocab"] / t, f["hidden"], vec.where(head_16, f["attn_peak_flops"], peak),
                                    head_eff, half, hbm, vec.where(head_16, act_b, elem))
    # the loss is PyTorch's native log-softmax/NLL kernels (or a fused one): no eager penalty
    loss_t = compute.memory_time_s(m_tok * f["vocab"] / t * compute.LOSS_BYTES_PER_LOGIT, hbm, mb_eff)
    head_fwd = head_mm + 0.5 * loss_t + _exposed_launch(head_mm + 0.5 * loss_t, 3 * ovh)
    head_bwd = ((1.0 + train_frac) * head_mm + 0.5 * loss_t
                + _exposed_launch((1.0 + train_frac) * head_mm + 0.5 * loss_t, 3 * ovh))

    # the slowest pipeline rank: the last (its layers + LM head and loss) or the busiest other one
    per_layer = layer_fwd + layer_bwd + layer_rec
    t_other = vec.maximum(l_first, l_mid) * per_layer
    crit_last = l_last * per_layer + head_fwd + head_bwd >= t_other
    n_crit = vec.where(crit_last, l_last, vec.maximum(l_first, l_mid))
    head_on = vec.where(crit_last, 1.0, 0.0)
    fwd_mb = n_crit * layer_fwd + head_on * head_fwd
    bwd_mb = n_crit * layer_bwd + head_on * head_bwd
    rec_mb = n_crit * layer_rec
    compute_mb = fwd_mb + bwd_mb + rec_mb

    # --- mesh layout: pp x dp x fsdp x cp x tp (tp innermost, pp outermost: Megatron-Core's
    # default order tp-cp-ep-dp-pp, torchtitan's pp/dp_replicate/dp_shard/cp/tp mesh); experts
    # fold over the cp x dp ranks next to their etp group.
    tp_k, tp_N = comms.group_layout(t, 1.0, dom)
    cp_k, cp_N = comms.group_layout(cp, t, dom)
    fs_k, fs_N = comms.group_layout(f["fsdp"], t * cp, dom)
    dp_k, dp_N = comms.group_layout(f["dp"], t * cp * f["fsdp"], dom)
    pp_k, pp_N = comms.group_layout(pp, t * cp * f["fsdp"] * f["dp"], dom)
    ep_k, ep_N = comms.group_layout(ep, etp, dom)
    intra, inter, leff = f["intra_bytes_per_s"], f["inter_bytes_per_s"], k["link_fraction"]
    lv = (f["link_up"], f["link_out"])

    # --- tensor parallel: per layer forward 2 all-reduces (or 2 AG + 2 RS with SP) of the
    # activations [b, s/cp, h]; the same backward and for full recomputation.
    tp_buf = lt["tp_buf"]
    gather_scale = vec.where(f["fp8"], 0.5, 1.0)  # fp8 recipes gather fp8 inputs (torchtitan, TE)
    ar = comms.collective_time_s("all-reduce", tp_buf, t, tp_k, tp_N, intra, inter, *lv, leff)
    agrs = (comms.collective_time_s("all-gather", tp_buf * gather_scale, t, tp_k, tp_N, intra, inter, *lv, leff)
            + comms.collective_time_s("reduce-scatter", tp_buf, t, tp_k, tp_N, intra, inter, *lv, leff))
    # forward, per block: attention and a dense MLP each 1 all-reduce, or 1 all-gather + 1
    # reduce-scatter with sequence parallelism
    tp_block = vec.where(sp, agrs, ar)
    # A MoE block's routed experts are split over the etp group: Megatron-Core's alltoall
    # dispatcher all-gathers the tokens it received over that group (topk copies of every token)
    # and reduce-scatters the expert outputs back (token_dispatcher.py: gather_from_sequence_
    # parallel_region / reduce_scatter_to_sequence_parallel_region), in 16 bits even under fp8;
    # without sequence parallelism the expert outputs are all-reduced over etp. With etp = 1 there
    # is nothing to gather (MoE parallel folding). Shared experts follow tp like a dense MLP.
    etp_k, etp_N = comms.group_layout(etp, 1.0, dom)
    moe_buf = tp_buf * f["moe_topk"]
    moe_agrs = (comms.collective_time_s("all-gather", moe_buf, etp, etp_k, etp_N, intra, inter, *lv, leff)
                + comms.collective_time_s("reduce-scatter", moe_buf, etp, etp_k, etp_N, intra, inter, *lv, leff))
    moe_ar = comms.collective_time_s("all-reduce", tp_buf, etp, etp_k, etp_N, intra, inter, *lv, leff)
    moe_block = vec.where(etp > 1, vec.where(sp, moe_agrs, moe_ar), 0.0)
    shared_on = moe_frac * vec.minimum(f["moe_shared"], 1.0)
    # recomputation redoes a region's collective when it re-runs the region's input projection
    attn_passes = 2.0 + rec_frac * rc.attn_region
    mlp_passes = 2.0 + rec_frac * rc.mlp_region
    shared_passes = 2.0 + rec_frac * rc.shared_region
    moe_passes = 2.0 + rec_frac * rc.moe_region
    mlp_tp_passes = dense_frac * mlp_passes + shared_on * shared_passes
    tp_linear_mb = n_crit * tp_block * (attn_passes + mlp_tp_passes)
    tp_moe_mb = n_crit * moe_frac * moe_block * moe_passes
    tp_total_mb = tp_linear_mb + tp_moe_mb
    # async TP / TP comm overlap (when the stack does it for this run) hides the profile's
    # fraction of the linear layers' TP collectives behind their GEMMs (not the dispatcher's)
    tp_ovl = _tp_overlapped(f["tp_overlap_rule"], f["async_tp"], sp)
    tp_mb = tp_linear_mb * (1.0 - vec.where(tp_ovl, k.get("async_tp_overlap", 0.0), 0.0)) + tp_moe_mb
    tp_bytes_mb = n_crit * (
        (attn_passes + mlp_tp_passes) * comms.ring_bytes_per_device("all-reduce", tp_buf, t)
        + moe_frac * moe_passes * comms.ring_bytes_per_device("all-reduce", moe_buf, etp) * (etp > 1))

    # --- expert parallel all-to-all: dispatch + combine forward, again backward
    # Each device dispatches the tokens it alone holds: with sequence parallelism its s/tp share
    # (Megatron-Core's alltoall dispatcher routes the SP-split hidden states, then all-gathers the
    # received tokens over the expert-TP group); without it, tp ranks hold the same tokens and
    # etp/tp of them are dispatched per rank.
    a2a_buf = m_route * f["moe_topk"] * f["hidden"] * act_b
    a2a = comms.collective_time_s("all-to-all", a2a_buf, ep, ep_k, ep_N, intra, inter, *lv, leff)
    # dispatch + combine, forward and backward, and again when recomputation re-runs the MLP
    a2a_passes = 4.0 + 2.0 * rec_frac * rc.moe_region
    ep_mb = n_crit * moe_frac * a2a_passes * a2a * (ep > 1)

    # critical-path time of one micro-batch on one stage
    t_mb = compute_mb + tp_mb + ep_mb

    # --- parameters held by the slowest stage, before data-parallel sharding
    # (routed experts are split etp ways: scaled by t/etp here so that the /t below gives /etp)
    p_stage, _sharded, zero3 = lt["p_stage"], lt["sharded"], lt["zero3"]

    # --- FSDP / ZeRO-3: all-gather forward + backward, reduce-scatter, every micro-batch
    fs_deg = vec.where(f["fsdp"] > 1, f["fsdp"], f["dp"])
    fsk = vec.where(f["fsdp"] > 1, fs_k, dp_k)
    fsN = vec.where(f["fsdp"] > 1, fs_N, dp_N)
    gather_bytes = PARAM_GATHER_BYTES * gather_scale
    ag_one = comms.collective_time_s("all-gather", p_stage * gather_bytes, fs_deg, fsk, fsN,
                                     intra, inter, *lv, leff, layers_stage)
    rs_one = comms.collective_time_s("reduce-scatter", p_stage * train_frac * GRAD_REDUCE_BYTES, fs_deg,
                                     fsk, fsN, intra, inter, *lv, leff, layers_stage)
    fsdp_ag = vec.where(zero3, 2.0 * M * ag_one, 0.0)
    fsdp_rs = vec.where(zero3, M * rs_one, 0.0)
    # the first layer's gather and the last layer's reduce-scatter of each micro-batch cannot hide
    edge = vec.where(zero3, M * (ag_one + rs_one) / vec.maximum(layers_stage, 1.0), 0.0)

    # --- replicated data parallel: DDP all-reduce, ZeRO-1/2 reduce-scatter + all-gather, HSDP
    dp = f["dp"]
    zs = f["zero_stage"]
    grad_shard = p_stage * train_frac * GRAD_REDUCE_BYTES / vec.where(f["fsdp"] > 1, f["fsdp"], 1.0)
    # gradients are reduced in buckets (DDP/Megatron: ~25-40 MB; a handful per stage)
    dp_ar = comms.collective_time_s("all-reduce", grad_shard, dp, dp_k, dp_N, intra, inter, *lv, leff,
                                    vec.minimum(layers_stage, 8.0))
    dp_rs = comms.collective_time_s("reduce-scatter", grad_shard, dp, dp_k, dp_N, intra, inter, *lv, leff)
    dp_ag = comms.collective_time_s("all-gather", p_stage * train_frac * PARAM_GATHER_BYTES, dp, dp_k,
                                    dp_N, intra, inter, *lv, leff)
    plain_dp = lt["plain_dp"]
    zero12 = vec.where(plain_dp, vec.where(f["fsdp"] <= 1, zs >= 1, False), False)
    dp_grad = vec.where(plain_dp, vec.where(zero12, dp_rs, dp_ar), 0.0)
    zero_ag = vec.where(zero12, dp_ag, 0.0)

    # --- context parallel ring (Liu et al. 2023, ring attention; Megatron-Core / torchtitan CP):
    # cp-1 steps per layer, each passing a K/V block (forward; K, V, dK, dV backward) to the next
    # rank while the current block's attention runs; a step's transfer hides behind that step's
    # attention, what is longer is exposed. Recomputation re-runs the forward ring.
    kv_chunk = b * s / cp * 2.0 * kv_local * act_b
    cp_step = comms.collective_time_s("send-recv", kv_chunk, cp, cp_k, cp_N, intra, inter, *lv, leff)
    steps = vec.maximum(cp - 1.0, 0.0)
    ovl = k["overlap"]
    cp_fwd_exp = steps * vec.maximum(0.0, cp_step - ovl * attn_fwd / vec.maximum(cp, 1.0))
    cp_bwd_exp = steps * vec.maximum(0.0, 2.0 * cp_step - ovl * attn_bwd / vec.maximum(cp, 1.0))
    cp_passes_fwd = 1.0 + rec_frac * rc.attention_core
    cp_mb = vec.where(cp > 1, n_crit * steps * cp_step * (cp_passes_fwd + 2.0), 0.0)
    cp_exp_mb = vec.where(cp > 1, n_crit * (cp_passes_fwd * cp_fwd_exp + cp_bwd_exp), 0.0)
    pp_msg = b * s / cp * f["hidden"] * act_b / vec.where(sp, t, 1.0)
    pp_one = comms.collective_time_s("send-recv", pp_msg, pp, pp_k, pp_N, intra, inter, *lv, leff)
    pp_mb = vec.where(pp > 1, 2.0 * vpp * pp_one, 0.0)

    # --- overlap: FSDP, CP and PP traffic hide behind the step's compute; DP behind the last
    # micro-batch's backward; the ZeRO-1/2 parameter gather behind the first forward.
    ovl = k["overlap"]
    fwd_all, bwd_all = M * fwd_mb, M * (bwd_mb + rec_mb)
    ag_fwd_exp = comms.exposed_s(0.5 * fsdp_ag, fwd_all, ovl)
    bwd_comm = 0.5 * fsdp_ag + fsdp_rs
    bwd_exp = comms.exposed_s(bwd_comm, bwd_all, ovl)
    bwd_share = vec.where(bwd_comm > 0, bwd_exp / vec.where(bwd_comm > 0, bwd_comm, 1.0), 0.0)
    edge_ag = edge * ag_one / vec.where(ag_one + rs_one > 0, ag_one + rs_one, 1.0)
    fsdp_ag_exp = ag_fwd_exp + 0.5 * fsdp_ag * bwd_share + edge_ag
    fsdp_rs_exp = fsdp_rs * bwd_share + (edge - edge_ag)
    # PP traffic hides in what the FSDP traffic left of the step's compute; the CP ring's exposed
    # part was priced step by step above
    left = vec.maximum(0.0, fwd_all + bwd_all - ovl * (fsdp_ag + fsdp_rs))
    pp_exp = comms.exposed_s(M * pp_mb, left, ovl)
    cp_exp = M * cp_exp_mb
    dp_exp = comms.exposed_s(dp_grad, bwd_mb, ovl)
    zero_ag_exp = comms.exposed_s(zero_ag, fwd_mb, ovl)

    # --- pipeline bubble and optimizer
    # vpp > 1 only under the interleaved 1F1B or the circular GPipe schedule: both cut the bubble v-fold
    bubble = vec.where(pp > 1, pipeline.bubble_time_s(pp, vpp, t_mb), 0.0)
    p_opt_local = _sharded(p_stage, f["shards_optimizer"]) * train_frac
    optimizer = compute.memory_time_s(p_opt_local * compute.OPTIMIZER_BYTES_PER_PARAM, hbm, opt_eff) + 20 * ovh

    step = (M * t_mb + bubble + fsdp_ag_exp + fsdp_rs_exp + dp_exp + zero_ag_exp + cp_exp
            + pp_exp + optimizer)

    # --- memory per device (bytes): predict/memory.py
    mem = memory_core(f, k, lt)

    return {
        "step_time_s": step,
        "forward_s": M * fwd_mb, "backward_s": M * bwd_mb, "recompute_s": M * rec_mb,
        "matmul_s": M * (n_crit * (mm_fwd * (2.0 + train_frac) + rec_frac * mm_rec)
                         + head_on * head_mm * (2.0 + train_frac)),
        "attention_s": M * n_crit * (attn_fwd + attn_bwd + rec_frac * rc.attention_core * attn_fwd),
        "memory_bound_s": M * (n_crit * mem_fwd * (3.0 + rec_frac * rc.elementwise) + head_on * loss_t),
        "overhead_s": M * n_crit * (exp_fwd + exp_bwd + rec_frac * exp_rec),
        "optimizer_s": optimizer, "bubble_s": bubble,
        "tp_s": M * tp_mb, "tp_total_s": M * tp_total_mb, "ep_s": M * ep_mb,
        "fsdp_allgather_s": fsdp_ag, "fsdp_allgather_exposed_s": fsdp_ag_exp,
        "fsdp_reducescatter_s": fsdp_rs, "fsdp_reducescatter_exposed_s": fsdp_rs_exp,
        "dp_grad_s": dp_grad, "dp_grad_exposed_s": dp_exp,
        "zero_allgather_s": zero_ag, "zero_allgather_exposed_s": zero_ag_exp,
        "cp_s": M * cp_mb, "cp_exposed_s": cp_exp, "pp_s": M * pp_mb, "pp_exposed_s": pp_exp,
        "tp_bytes": M * tp_bytes_mb,
        "fsdp_allgather_bytes": vec.where(zero3, 2.0 * M * comms.ring_bytes_per_device(
            "all-gather", p_stage * gather_bytes, fs_deg), 0.0),
        "fsdp_reducescatter_bytes": vec.where(zero3, M * comms.ring_bytes_per_device(
            "reduce-scatter", p_stage * train_frac * GRAD_REDUCE_BYTES, fs_deg), 0.0),
        "dp_grad_bytes": vec.where(plain_dp, comms.ring_bytes_per_device(
            "all-reduce", grad_shard, dp) / vec.where(zero12, 2.0, 1.0), 0.0),
        "ep_bytes": M * n_crit * moe_frac * a2a_passes * comms.ring_bytes_per_device("all-to-all", a2a_buf, ep)
                    * (ep > 1),
        "cp_bytes": M * layers_stage * 4.0 * (cp - 1.0) * kv_chunk,
        "pp_bytes": M * 2.0 * vpp * pp_msg * (pp > 1),
        "tp_nodes": tp_N, "fsdp_nodes": fsN, "dp_nodes": dp_N, "cp_nodes": cp_N, "pp_nodes": pp_N,
        "ep_nodes": ep_N, "fsdp_degree": fs_deg,
        **mem,
        "microbatch_s": t_mb,
    }


def _exposed_launch(device_s: Any, launch_s: Any) -> Any:
    """Launch time left exposed beside ``device_s`` of kernels that take ``launch_s`` to launch:
    ``launch^2 / (device + launch)``, the smooth form of ``max(device, launch) - device``."""
    total = device_s + launch_s
    return vec.where(total > 0, launch_s * launch_s / vec.where(total > 0, total, 1.0), 0.0)


def _tp_overlapped(rule: str, async_tp: Any, sp: Any) -> Any:
    """Whether the stack overlaps the tensor-parallel collectives of this plan with GEMMs
    (:meth:`~trainperf.predict.stack_kernels.StackKernels.tp_overlapped`, vectorised over ``sp``)."""
    if rule == "always":
        return True
    if rule == "sequence-parallel":
        return vec.where(sp, True, async_tp)
    return async_tp


def _attention_efficiency(f: dict[str, Any], seq: Any, cp: Any) -> tuple[Any, Any]:
    """(forward, backward) fraction of the 16-bit peak the stack's attention kernel sustains on
    this silicon at ``seq`` tokens per block: causal for the whole sequence, non-causal blocks for
    a context-parallel ring (cp > 1)."""
    fam, sil, hd = f["attn_family"], f["silicon"], f["qk_head_dim"]
    if not isinstance(hd, int | float):  # stacked rows: the kernel curves take one head dim a call
        import numpy as np

        hds = np.unique(hd)
        if len(hds) > 1:
            seq_a = np.broadcast_to(seq, np.shape(hd)).astype(float)
            cp_a = np.broadcast_to(cp, np.shape(hd)).astype(float)
            fw, bw = np.empty(np.shape(hd)), np.empty(np.shape(hd))
            for h in hds:
                m = hd == h
                fw[m], bw[m] = _attention_efficiency({**f, "qk_head_dim": float(h)}, seq_a[m], cp_a[m])
            return fw, bw
        hd = float(hds[0])
    if isinstance(cp, int | float) and not isinstance(cp, bool):
        return k_attention.efficiency(sil, fam, seq, hd, cp <= 1)
    cf, cb = k_attention.efficiency(sil, fam, seq, hd, True)
    nf, nb = k_attention.efficiency(sil, fam, seq, hd, False)
    return vec.where(cp <= 1, cf, nf), vec.where(cp <= 1, cb, nb)


def as_float(x: Any) -> float:
    """A scalar result as a Python float (0-d arrays and numpy scalars included)."""
    if type(x) is float:
        v = x
    elif type(x) is int or type(x) is bool:
        v = float(x)
    else:
        import numpy as np

        v = float(np.asarray(x))
    return v if math.isfinite(v) else float("nan")
