"""Memory per device: model states by ZeRO/FSDP stage, activations by checkpointing policy.

Model states (Rajbhandari et al. 2020, "ZeRO", section 3.1): mixed-precision Adam keeps per
parameter 2 bytes of 16-bit weights, 2 of 16-bit gradients and 12 of fp32 optimizer state
(master weights, momentum, variance) = 16 bytes; ZeRO stage 1 shards the 12, stage 2 also the
gradients, stage 3 (FSDP) also the weights. Pure fp32 training keeps 4 + 4 + 8.

Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", section 4, bytes per layer with 16-bit activations, sequence ``s``, micro-batch ``b``,
hidden ``h``, heads ``a``, tensor parallel ``t``):

* no recomputation, no sequence parallelism: ``s*b*h*(10 + 24/t + 5*a*s/(h*t))``
  (``t = 1`` gives ``s*b*h*(34 + 5*a*s/h)``);
* with sequence parallelism: ``s*b*h*(34/t + 5*a*s/(h*t))``;
* selective recomputation (attention core recomputed): ``s*b*h*34/t`` with SP,
  ``s*b*h*(10 + 24/t)`` without;
* full recomputation: the layer input only, ``2*s*b*h`` (``/t`` with SP).

``5as/h`` is the materialised attention score, softmax and dropout mask; fused (flash)
attention never stores them, which :func:`activation_bytes_per_layer` assumes; a stack that runs
attention unfused (``eager``) keeps them (:func:`eager_attention_score_bytes`). That function
also generalises the ``34`` to GQA widths and gated MLPs (see its docstring).
"""

from __future__ import annotations

import dataclasses

from trainperf.predict import vec

GiB = float(1 << 30)

STATE_BYTES: dict[str, tuple[float, float, float]] = {
    # precision -> (weights, gradients, optimizer) bytes per parameter
    "mixed": (2.0, 2.0, 12.0),
    "fp32": (4.0, 4.0, 8.0),
}


def korthikanti_activation_bytes(s, b, h, a, t=1, sequence_parallel=False, policy="none"):
    """Activation bytes of ONE transformer layer, exactly as Korthikanti et al. (2022) write them
    (GPT block: MHA, 4h GELU MLP, dropout, materialised attention scores)."""
    sbh = s * b * h
    if policy == "full":
        return 2.0 * sbh / (t if sequence_parallel else 1)
    base = 34.0 / t if sequence_parallel else 10.0 + 24.0 / t
    if policy == "selective":
        return sbh * base
    if policy == "none":
        return sbh * (base + 5.0 * a * s / (h * t))
    raise ValueError(f"unknown policy {policy!r}")


def activation_bytes_per_layer(s, b, h, q_dim, kv_dim, ffn, gated, t, sp, policy, flash=True,
                               heads=1.0, act_bytes=2.0):
    """Stored activation bytes of one layer per micro-batch, generalised from Korthikanti et al.

    Per token (16-bit): two norm inputs ``4h``; attention: QKV input ``2h``, Q ``2q``, K and V
    ``4kv``, output-projection input ``2q``; MLP: input ``2h``, then gated ``6f`` (gate, up and
    activation outputs) or plain ``4f`` (GELU input and output). With MHA, ``f = 4h`` GELU and
    Korthikanti's two ``h``-byte dropout masks added, this is exactly ``34h``. Without sequence
    parallelism the norm-region terms (norm inputs, QKV and MLP inputs: ``8h``) are replicated on
    every tp rank; everything else is split ``t`` ways. ``flash=False`` adds the materialised
    ``5*a*s`` scores per token (divided by ``t``). ``full`` keeps only the layer input.
    """
    tokens = s * b
    act_f = vec.where(gated, 3.0, 2.0) * ffn
    split = act_bytes * (2.0 * q_dim + 2.0 * kv_dim + act_f) / t
    norm_region = act_bytes * 4.0 * h
    norm_region = vec.where(sp, norm_region / t, norm_region)
    per_token = split + norm_region
    if not flash:
        per_token = per_token + 5.0 * heads * s / t
    full_input = act_bytes * h / vec.where(sp, t, 1.0)
    per_token = vec.where(vec.equals(policy, "full"), full_input, per_token)
    return tokens * per_token


def saved_activation_bytes_per_layer(s, b, h, q_dim, kv_dim, ffn, t, sp, widths, act_bytes=2.0,
                                     gemm_in_bytes=None, core_recomputed=False):
    """Activation bytes one layer keeps per micro-batch under a checkpointing policy.

    ``widths`` (:class:`trainperf.accounting.recompute.SavedWidths`) counts the kept tensors of
    each width, derived from the policy's kept-tensor list: hidden-wide ones are replicated over
    the tp ranks unless sequence parallel (then split ``t`` ways); query, key/value and MLP-wide
    ones are split ``t`` ways. With ``none`` this is :func:`activation_bytes_per_layer` (flash
    attention); with ``full`` the layer input only. Fused attention is assumed (no scores kept).

    ``gemm_in_bytes``: bytes per element a stack keeps of a weight matmul's input under fp8
    (Transformer Engine keeps the fp8 cast, 1 byte); None: ``act_bytes``. The attention context
    is then kept twice unless the attention core is recomputed: in ``act_bytes`` by the fused
    attention for its backward, in fp8 by the output projection.
    """
    rep_div = vec.where(sp, t, 1.0)
    rep = widths.h * h / rep_div
    split = (widths.q * q_dim + widths.kv * kv_dim + widths.ffn * ffn) / t
    total = s * b * act_bytes * (rep + split)
    if gemm_in_bytes is None:
        return total
    cheaper = act_bytes - gemm_in_bytes
    gin = widths.gemm_in_h * h / rep_div + widths.gemm_in_ffn * ffn / t
    ctx = widths.gemm_in_q * q_dim / t * vec.where(core_recomputed, cheaper, -gemm_in_bytes)
    return total - s * b * (cheaper * gin + ctx)


def routed_activation_bytes(tokens, topk, hidden, etp, t, sp, act_bytes=2.0, gemm_in_bytes=None):
    """Bytes one MoE block keeps per micro-batch, beyond a dense block's, for its routed tokens.

    Counted (Megatron-Core 0.9-0.12 alltoall dispatcher, ``moe_utils.unpermute`` and the expert
    MLPs): the rows the experts of a device receive, ``tokens * topk * etp / t`` of width
    ``hidden`` (all-gathered over the expert-tp group), kept as the expert FC1 input (in
    ``gemm_in_bytes`` under an fp8 recipe that keeps fp8 inputs); the expert outputs the combine
    weights by router probabilities, ``topk`` per token the device dispatched (its sequence-parallel
    share), kept for the probabilities' gradient. The MLP-wide tensors of the experts are counted
    with the dense ones (``topk * expert_ffn`` per token); the router input is the block's MLP
    input. Left out: routing maps and probabilities (integers and floats per token and expert).
    """
    received = tokens * topk * etp / t
    dispatched = tokens * vec.where(sp, 1.0, etp) / t
    gin = act_bytes if gemm_in_bytes is None else gemm_in_bytes
    return hidden * (received * gin + dispatched * topk * act_bytes)


EAGER_SCORE_BYTES = 5.0
"""Bytes per attention score an unfused attention keeps for its backward, in 16-bit training:
Korthikanti et al. (2022), section 4.1: the softmax output (2), the attention-dropout mask (1)
and the dropout output (2). Without attention dropout PyTorch eager code that runs the softmax
in fp32 keeps about as much (its fp32 output, 4, and the 16-bit cast the second matmul saves, 2)."""


def eager_attention_score_bytes(q_tokens, b, kv_len, heads_local, act_bytes=2.0):
    """Bytes of attention scores one layer keeps per micro-batch when attention is not fused:
    ``b * q_tokens * kv_len * heads_local`` scores (the full ``kv_len``: an unfused causal
    attention still materialises the whole square) at :data:`EAGER_SCORE_BYTES` (doubled for
    32-bit activations)."""
    return b * q_tokens * kv_len * heads_local * EAGER_SCORE_BYTES * act_bytes / 2.0


def state_bytes(params, precision_kind, shards_weights, shards_grads, shards_optimizer):
    """(weights, gradients, optimizer) bytes on one device for ``params`` parameters."""
    w, g, o = STATE_BYTES[precision_kind]
    return params * w / shards_weights, params * g / shards_grads, params * o / shards_optimizer


def inflight_microbatches(pp, vpp, grad_accum, schedule_interleaved, schedule_gpipe=False):
    """Micro-batches whose activations the first pipeline stage holds at once.

    1F1B: ``min(pp, m)``; interleaved 1F1B holds ``1 + (pp-1)/(pp*v)`` times more
    (Narayanan et al. 2021, section 2.2.2). GPipe, plain or circular, holds all ``m``: every
    forward runs before the first backward (Huang et al. 2019). That is what the JAX stacks'
    pipelines do: MaxText ``pipeline.py`` and Praxis ``LayerwiseShardablePipelined`` scan the
    forward over every micro-batch and take the backward by autodiff of the scan, which keeps
    each iteration's residuals (unless rematerialised, which the checkpointing policy prices).
    """
    base = vec.minimum(pp, grad_accum)
    factor = vec.where(schedule_interleaved, 1.0 + (pp - 1.0) / (pp * vpp), 1.0)
    return vec.where(schedule_gpipe, grad_accum, base * factor)


def second_rank_inflight_microbatches(pp, vpp, grad_accum, schedule_interleaved, schedule_gpipe=False):
    """Micro-batches whose activations the second pipeline rank (the first middle one) holds.

    1F1B: ``min(pp - 1, m)``. Interleaved 1F1B: Megatron-Core's warm-up at rank ``r`` is
    ``(pp - r - 1) * 2 + (vpp - 1) * pp`` model chunks (``schedules.py``) plus the one running,
    ``pp + (pp - 3) / vpp`` micro-batches at ``r = 1`` (at ``r = 0`` it gives
    :func:`inflight_microbatches`' ``pp + (pp - 1) / vpp``). GPipe: all ``m``. A middle rank holding
    more layers than the first (a lighter first stage, the embedding's slot) can be the peak.
    """
    chunks = vec.minimum((pp - 2.0) * 2.0 + (vpp - 1.0) * pp + 1.0, grad_accum * vpp) / vpp
    one_f_one_b = vec.minimum(pp - 1.0, grad_accum)
    return vec.where(schedule_gpipe, grad_accum, vec.where(schedule_interleaved, chunks, one_f_one_b))


def last_rank_inflight_layers(pp, vpp, grad_accum, layers_last, schedule_interleaved, schedule_gpipe=False):
    """Layer-micro-batches of activations the LAST pipeline rank holds at its peak.

    1F1B: the last stage runs each micro-batch's backward right after its forward: one in
    flight. Interleaved 1F1B: its warm-up is ``(vpp - 1) * pp`` model chunks (Megatron-Core
    ``schedules.py``: ``(pp - rank - 1) * 2 + (vpp - 1) * pp`` at rank ``pp - 1``) plus the one
    running, each ``layers_last / vpp`` layers. Capped at every chunk of every micro-batch,
    which is what GPipe holds (:func:`inflight_microbatches`).
    """
    chunks = vec.where(schedule_interleaved, (vpp - 1.0) * pp + 1.0, 1.0)
    chunks = vec.where(schedule_gpipe, grad_accum * vpp, vec.minimum(chunks, grad_accum * vpp))
    return chunks * layers_last / vpp


def fsdp_unsharded_bytes(p_layer_local, p_edge_local, train_frac, gather_bytes, grad_bytes, grad_unit=None):
    """Bytes of parameters FSDP / ZeRO-3 holds unsharded at once, per device.

    A transformer block: its gathered 16-bit weights, the next block's prefetched ones (FSDP2 and
    XLA both prefetch one unit ahead) and its unsharded gradient in the reduce dtype before the
    reduce-scatter: the whole block's (PyTorch FSDP reduce-scatters a unit's gradients together),
    or, with ``grad_unit`` (parameters of the largest weight tensor), one tensor's at a time (GSPMD
    inserts a reduce-scatter per weight, as its gradient's dot finishes: Xu et al. 2021). The
    embedding or the output layer + final norm is its own unit (torchtitan, Composer wrap them
    apart from the blocks); with a large vocabulary it is the biggest one: its weights and
    gradient, nothing prefetched beside it. The larger of the two sets the peak.
    """
    grads = p_layer_local if grad_unit is None else vec.minimum(grad_unit, p_layer_local)
    block = 2.0 * p_layer_local * gather_bytes + grads * train_frac * grad_bytes
    edge = p_edge_local * (gather_bytes + train_frac * grad_bytes)
    return vec.maximum(block, edge)


def largest_matrix_params(f, t):
    """Parameters per device of a layer's largest weight matrix (attention, dense MLP, or one
    routed expert's), split ``t`` ways (tensor parallelism)."""
    big = 0.0
    for i, o, _split, _name in (*f["attn_mats"], *f["mlp_mats"], *f["expert_mats"]):
        big = vec.maximum(big, i * o)  # arrays when many rows are predicted at once
    return big / t


def mlp_kept_widths(f, rc, moe_share):
    """``rc.widths`` with its MLP-wide counts turned into elements per token of a layer that is a
    MoE layer ``moe_share`` of the time (0: a dense layer, 1: a MoE layer; pass ``ffn = 1``): a dense
    layer's MLP (``ffn`` wide), a MoE layer's ``topk`` routed and its shared experts
    (``expert_ffn`` wide each), each with what the policy keeps of it
    (:class:`~trainperf.accounting.recompute.LayerRecompute`: Megatron-Core's ``mlp``, ``moe``,
    ``moe_act`` and ``shared_experts`` modules treat them apart)."""
    dense = (1.0 - moe_share) * f["ffn"]
    moe = moe_share * f["expert_ffn"]
    ffn = (dense * rc.widths.ffn
           + moe * (f["moe_topk"] * rc.expert_ffn[0] + f["moe_shared"] * rc.shared_ffn[0]))
    gin = (dense * rc.widths.gemm_in_ffn
           + moe * (f["moe_topk"] * rc.expert_ffn[1] + f["moe_shared"] * rc.shared_ffn[1]))
    return dataclasses.replace(rc.widths, ffn=ffn, gemm_in_ffn=gin)


def device_memory_bytes(f, k, *, p_stage, p_layer_local, sharded, zero3, rc, rec_frac, kv_local, dense_by_rank,
                        m_tok, tp_buf, plain_dp, gather_bytes, grad_bytes):
    """Memory per device (bytes) by category, the total and the capacity it must fit in.

    ``f``: :func:`~trainperf.predict.core.workload_features`; ``k``: knob values; the rest are
    the step model's per-stage parameter counts and layout terms. Counted:

    * model states of the busiest stage (:data:`STATE_BYTES`) under the plan's shard counts
      (which span dp x cp: :attr:`~trainperf.specs.parallel.ParallelPlan.shards_optimizer`);
    * FSDP / ZeRO-3 unsharded units (:func:`fsdp_unsharded_bytes`);
    * activations: the first rank's in-flight micro-batches (:func:`inflight_microbatches`) x its
      layers x the policy's kept bytes (a dense and a MoE layer's apart: ``dense_by_rank``, the
      dense layers on the first, second and last rank), plus one layer's full set while a recomputed layer runs
      its backward; the last rank's (:func:`last_rank_inflight_layers`) plus the logits at the
      loss (``loss_bytes_per_logit`` of the stack); the larger of the two ranks;
    * communication buffers: the tp all-gather/reduce-scatter input and output, DDP's buckets;
    * the framework reserve (``reserve_GiB``: driver carve-out, CUDA/ROCm context, library
      workspaces, collective buffers), or, when larger, the share of the device a preallocating
      runtime leaves outside its pool (``memory_fraction``: JAX/XLA on a GPU).

    Left out: allocator fragmentation beyond the reserve, optimizer-step temporaries (they live
    when activations are freed), and CPU offload.
    """
    t, pp, vpp, s, b, cp = f["tp"], f["pp"], f["vpp"], f["seq_len"], f["micro_batch"], f["cp"]
    sp, act_b, train_frac = f["sp"], f["act_bytes"], f["trainable_fraction"]
    w_b, g_b, o_b = STATE_BYTES[f["state_kind"]]
    weights = sharded(p_stage, f["shards_params"]) * w_b
    grads = sharded(p_stage, f["shards_grads"]) * train_frac * g_b
    optim = sharded(p_stage, f["shards_optimizer"]) * train_frac * o_b
    p_edge_local = vec.maximum(f["params_embedding"], f["params_head"]) / t
    grad_unit = largest_matrix_params(f, t) if f.get("fsdp_grad_per_tensor") else None
    gathered = vec.where(zero3, fsdp_unsharded_bytes(p_layer_local, p_edge_local, train_frac, gather_bytes,
                                                     grad_bytes, grad_unit), 0.0)
    gin_b = f.get("fp8_gemm_input_bytes")  # None unless an fp8 run of a stack that keeps fp8 inputs
    ffn_moe = (f["moe_topk"] + f["moe_shared"]) * f["expert_ffn"]
    # a dense layer's kept bytes (share 0) and a MoE layer's (share 1); a rank's layer mixes them
    kept_none, kept = [], []
    for share in (0.0, 1.0):
        ffn_eff = (1.0 - share) * f["ffn"] + share * ffn_moe
        kept_none.append(saved_activation_bytes_per_layer(s / cp, b, f["hidden"], f["q_dim"], kv_local * t,
                                                          ffn_eff, t, sp, rc.widths_none, act_b, gin_b, False))
        kept.append(saved_activation_bytes_per_layer(s / cp, b, f["hidden"], f["q_dim"], kv_local * t,
                                                     1.0, t, sp, mlp_kept_widths(f, rc, share), act_b, gin_b,
                                                     bool(rc.attention_core)))
    act_layer_none, act_layer = kept_none[0], kept[0]
    act_moe_none, act_moe = kept_none[1] - kept_none[0], kept[1] - kept[0]
    # unfused (eager) attention materialises the scores; a policy that keeps the attention core
    # keeps them for the backward, one that recomputes it holds one layer's again while it does.
    # On a CPU "eager" names the speed only: PyTorch's SDPA runs its CPU flash kernel there.
    scores = 0.0
    if f.get("attn_family") == "eager" and f.get("silicon") != "cpu":
        scores = eager_attention_score_bytes(s / cp, b, f["seq_len"], f["heads"] / t, act_b)
        act_layer_none = act_layer_none + scores
        act_layer = act_layer + (1.0 - rc.attention_core) * scores
    # routed experts keep their own inputs: the dispatched, gathered rows (topk copies) the expert
    # FC1 saves, and the expert outputs the unpermute's weighting by router probabilities saves
    # for their gradient, unless the policy re-runs the MLP region
    if f["expert_mats"]:
        moe = routed_activation_bytes(m_tok, f["moe_topk"], f["hidden"], f["etp"], t, sp, act_b, gin_b)
        act_moe_none = act_moe_none + moe
        act_moe = act_moe + (1.0 - rc.moe_region) * moe
    act_layer = rec_frac * act_layer + (1.0 - rec_frac) * act_layer_none
    act_moe = rec_frac * act_moe + (1.0 - rec_frac) * act_moe_none

    def moe_share(dense, layers):
        return vec.where(f["moe_layers"] > 0, 1.0 - dense / vec.maximum(layers, 1.0), 0.0)

    d_first, d_second, d_last = dense_by_rank
    share_first = moe_share(d_first, f["layers_first"])
    share_second = moe_share(d_second, f["layers_mid"])
    share_last = moe_share(d_last, f["layers_last"])
    M = f["grad_accum"]
    gpipe = f.get("gpipe", False)
    # the first rank holds the most micro-batches; with three or more ranks the second, holding
    # one fewer, peaks instead when it holds more layers (a lighter first stage, the embedding slot)
    # or more MoE layers (a MoE model's leading dense layers sit on the first)
    first = (f["layers_first"] * (act_layer + share_first * act_moe)
             * inflight_microbatches(pp, vpp, M, f["interleaved"], gpipe))
    second = vec.where(pp >= 3, f["layers_mid"] * (act_layer + share_second * act_moe)
                       * second_rank_inflight_microbatches(pp, vpp, M, f["interleaved"], gpipe), 0.0)
    second_peaks = second > first
    first = vec.maximum(first, second)
    # GPipe keeps every micro-batch's loss residuals until the first backward (the JAX pipelines
    # apply the head and loss to all outputs at once; PyTorch's keeps each micro-batch's graph)
    logits = m_tok * vec.where(gpipe, M, 1.0) * f["vocab"] / t * f["loss_bytes_per_logit"]
    last = (last_rank_inflight_layers(pp, vpp, M, f["layers_last"], f["interleaved"], gpipe)
            * (act_layer + share_last * act_moe))
    # one stage is both the first and the last rank; with pp > 1 the busier of the two sets the peak
    last_peaks = vec.where(pp > 1, last + logits > first, False)
    activations = vec.where(last_peaks, last, first)
    logits_on_peak = vec.where(pp > 1, vec.where(last_peaks, logits, 0.0), logits)
    # a recomputed layer's tensors are live again during its backward: one layer's full set (of
    # the peak rank's average layer), which also stands in for the backward's own temporaries
    # (activation gradients) beside what it kept; this is what matched the published torchtitan
    # peaks (tests/test_memory_model.py)
    share_peak = vec.where(last_peaks, share_last, vec.where(second_peaks, share_second, share_first))
    working = act_layer_none + share_peak * act_moe_none if rc.stores_less else rc.attention_core * scores
    buffers = vec.where(t > 1, 2.0 * tp_buf, 0.0) + vec.where(plain_dp, 2.0 * 25e6 * grad_bytes, 0.0)
    # taken once: what a preallocating runtime leaves outside its pool holds the context,
    # workspaces and collective buffers the reserve stands for
    reserve = vec.maximum(k["reserve_GiB"] * GiB, (1.0 - f.get("memory_fraction", 1.0)) * f["hbm_capacity_bytes"])
    total = weights + grads + optim + gathered + activations + working + logits_on_peak + buffers + reserve
    return {
        "mem_weights": weights, "mem_grads": grads, "mem_optimizer": optim, "mem_gathered": gathered,
        "mem_activations": activations + working, "mem_logits": logits_on_peak, "mem_buffers": buffers,
        "mem_reserve": reserve + 0.0 * weights, "mem_total": total, "mem_capacity": f["hbm_capacity_bytes"],
    }
