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
attention never stores them, which :func:`saved_activation_bytes_per_layer` assumes; a stack that
runs attention unfused (``eager``) keeps them (:func:`eager_attention_score_bytes`). The kept
tensors of each width come from the policy (:class:`~trainperf.accounting.recompute.SavedWidths`),
which generalises the ``34`` to GQA widths and gated MLPs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from trainperf import vec
from trainperf.accounting import recompute
from trainperf.predict.efficiency import KnobValues
from trainperf.predict.step_model.context_parallel import ring_buffer_bytes
from trainperf.predict.step_model.data_parallel import GRAD_REDUCE_BYTES, PARAM_GATHER_BYTES
from trainperf.predict.step_model.layout import Flag, Layout, Num, residual_width
from trainperf.predict.step_model.stage import Stage

GiB = float(1 << 30)

STATE_BYTES: dict[str, tuple[float, float, float]] = {
    # precision -> (weights, gradients, optimizer) bytes per parameter
    "mixed": (2.0, 2.0, 12.0),
    "fp32": (4.0, 4.0, 8.0),
}

DDP_BUCKET_BYTES = 25e6
"""DDP's gradient bucket (``bucket_cap_mb=25``): two are live while one reduces."""


# ----------------------------------------------------------------------------- formulas
def saved_activation_bytes_per_layer(s: Num, b: Num, h: Num, q_dim: Num, kv_dim: Num, ffn: Num, t: Num, sp: Flag,
                                     widths: recompute.SavedWidths, act_bytes: Num = 2.0,
                                     gemm_in_bytes: Num | None = None, core_recomputed: Flag = False,
                                     ctx_dim: Num | None = None) -> Num:
    """Activation bytes one layer keeps per micro-batch under a checkpointing policy.

    ``widths`` (:class:`trainperf.accounting.recompute.SavedWidths`) counts the kept tensors of
    each width, derived from the policy's kept-tensor list: hidden-wide ones are replicated over
    the tp ranks unless sequence parallel (then split ``t`` ways); query, key/value and MLP-wide
    ones are split ``t`` ways, as is the attention context (``ctx_dim`` wide: heads x value head
    dim; ``None``: ``q_dim``, which it is but under MLA). With ``none`` this is :func:`activation_bytes_per_layer` (flash
    attention); with ``full`` the layer input only. Fused attention is assumed (no scores kept).

    ``gemm_in_bytes``: bytes per element a stack keeps of a weight matmul's input under fp8
    (Transformer Engine keeps the fp8 cast, 1 byte); None: ``act_bytes``. The attention context
    is then kept twice unless the attention core is recomputed: in ``act_bytes`` by the fused
    attention for its backward, in fp8 by the output projection.
    """
    rep_div = vec.where(sp, t, 1.0)
    rep = widths.h * h / rep_div
    ctx_w = q_dim if ctx_dim is None else ctx_dim
    split = (widths.q * q_dim + widths.kv * kv_dim + widths.ctx * ctx_w + widths.ffn * ffn) / t
    total = s * b * act_bytes * (rep + split)
    if gemm_in_bytes is None:
        return total
    cheaper = act_bytes - gemm_in_bytes
    gin = widths.gemm_in_h * h / rep_div + widths.gemm_in_ffn * ffn / t
    ctx = widths.gemm_in_ctx * ctx_w / t * vec.where(core_recomputed, cheaper, -gemm_in_bytes)
    return total - s * b * (cheaper * gin + ctx)


def routed_activation_bytes(tokens: Num, topk: Num, hidden: Num, etp: Num, t: Num, sp: Flag, act_bytes: Num = 2.0,
                            gemm_in_bytes: Num | None = None, imbalance: Num = 1.0,
                            probs_in_activation: Flag = False) -> Num:
    """Bytes one MoE block keeps per micro-batch, beyond a dense block's, for its routed tokens.

    Counted (Megatron-Core 0.9-0.12 alltoall dispatcher, ``moe_utils.unpermute`` and the expert
    MLPs): the rows the experts of a device receive, ``tokens * topk * etp / t`` of width
    ``hidden`` (all-gathered over the expert-tp group), kept as the expert FC1 input (in
    ``gemm_in_bytes`` under an fp8 recipe that keeps fp8 inputs); the expert outputs the combine
    weights by router probabilities, ``topk`` per token the device dispatched (its sequence-parallel
    share), kept for the probabilities' gradient, unless ``probs_in_activation``: Megatron-Core
    0.12 onwards weights the rows inside the experts' activation function (``experts.py``
    ``weighted_bias_swiglu_impl``, or the activation output times the probabilities unfused),
    whose input and output the backward keeps anyway (read from memory of the code, not verified
    against its release notes). torchtitan's ``score_before_experts`` keeps the routed input
    instead of the output: one row either way. The MLP-wide tensors of the experts are counted
    with the dense ones (``topk * expert_ffn`` per token); the router input is the block's MLP
    input. Left out: routing maps and probabilities (integers and floats per token and expert).
    The busiest expert-parallel rank receives ``imbalance`` times the mean number of rows.
    """
    received = tokens * topk * etp / t * imbalance
    dispatched = tokens * vec.where(sp, 1.0, etp) / t
    gin = act_bytes if gemm_in_bytes is None else gemm_in_bytes
    weighted = vec.where(probs_in_activation, 0.0, dispatched * topk * act_bytes)
    return hidden * (received * gin + weighted)


EAGER_SCORE_BYTES = 5.0
"""Bytes per attention score an unfused attention keeps for its backward, in 16-bit training:
Korthikanti et al. (2022), section 4.1: the softmax output (2), the attention-dropout mask (1)
and the dropout output (2). Without attention dropout PyTorch eager code that runs the softmax
in fp32 keeps about as much (its fp32 output, 4, and the 16-bit cast the second matmul saves, 2)."""


def eager_attention_score_bytes(q_tokens: Num, b: Num, kv_len: Num, heads_local: Num, act_bytes: Num = 2.0) -> Num:
    """Bytes of attention scores one layer keeps per micro-batch when attention is not fused:
    ``b * q_tokens * kv_len * heads_local`` scores (the full ``kv_len``: an unfused causal
    attention still materialises the whole square) at :data:`EAGER_SCORE_BYTES` (doubled for
    32-bit activations)."""
    return b * q_tokens * kv_len * heads_local * EAGER_SCORE_BYTES * act_bytes / 2.0


def inflight_microbatches(pp: Num, vpp: Num, grad_accum: Num, schedule_interleaved: Flag,
                          schedule_gpipe: Flag = False) -> Num:
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


def second_rank_inflight_microbatches(pp: Num, vpp: Num, grad_accum: Num, schedule_interleaved: Flag,
                                      schedule_gpipe: Flag = False) -> Num:
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


def last_rank_inflight_layers(pp: Num, vpp: Num, grad_accum: Num, layers_last: Num, schedule_interleaved: Flag,
                              schedule_gpipe: Flag = False) -> Num:
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


def dualpipe_inflight_units(pp: Num, grad_accum: Num, v_shape: Flag = False) -> Num:
    """Micro-batch activation sets of a rank's layers (one stage's, the mean of its two) a DualPipe
    rank holds at its peak: ``pp + 1`` (DeepSeek-V3 report, Table 2, against 1F1B's ``pp``), at
    most the micro-batches there are. DualPipeV: ``2 pp + 1`` of its ``2 pp`` half-stages (the same
    table over ``2 pp`` stages; PyTorch's ``ScheduleDualPipeV`` runs ``2 pp`` forward chunks on
    every rank before its first backward), ``pp + 1/2`` sets of the rank's layers."""
    return vec.where(v_shape, 0.5 * vec.minimum(2.0 * pp + 1.0, 2.0 * grad_accum), vec.minimum(pp + 1.0, grad_accum))


def fsdp_unsharded_bytes(p_layer_local: Num, p_edge_local: Num, train_frac: Num, gather_bytes: Num, grad_bytes: Num,
                         grad_unit: Num | None = None) -> Num:
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


def largest_matrix_params(lay: Layout) -> Num:
    """Parameters per device of a layer's largest weight matrix (attention, dense MLP, or one
    routed expert's), split ``tp`` ways (tensor parallelism)."""
    ms = lay.model
    big = 0.0
    for mat in (*ms.attn_mats, *ms.mlp_mats, *ms.expert_mats, *ms.mamba_mats):
        big = vec.maximum(big, mat.in_features * mat.out_features)  # arrays when many rows are predicted at once
    return big / lay.mesh.tp


GATED_MLP_KEPT = 3.0
"""MLP-wide tensors per token a gated MLP keeps when the policy recomputes none of it: the gate's
and the up projection's outputs and their product (the down projection's input). A fused
activation (Megatron-Core's bias_swiglu, Liger's, Transformer Engine's, or Inductor's when
compiled: 3 per expert measured, ``benchmarks/activation_memory.py``) recomputes the
activation's output from the gate in its backward."""


def eager_activation_kept(lay: Layout, kept: Num) -> Num:
    """MLP-wide tensors per token an unfused gated activation adds where the policy keeps all of
    a gated MLP's (``kept`` is :data:`GATED_MLP_KEPT`): eager PyTorch's ``act(gate) * up``
    keeps both operands for its backward, so ``act(gate)`` is held beside the gate the
    activation's own backward keeps. 1 there, else 0 (measured: an eager SwiGLU MLP holds 4
    MLP-wide tensors per token, ``benchmarks/activation_memory.py``)."""
    if not (lay.model.gated and lay.kernels.elementwise_impl == "eager"):
        return 0.0
    return vec.where(kept >= GATED_MLP_KEPT, 1.0, 0.0)


def mlp_kept_widths(lay: Layout, rc: recompute.LayerRecompute, moe_share: float) -> recompute.SavedWidths:
    """``rc.widths`` with its MLP-wide counts turned into elements per token of a layer that is a
    MoE layer ``moe_share`` of the time (0: a dense layer, 1: a MoE layer; pass ``ffn = 1``): a dense
    layer's MLP (``ffn`` wide), a MoE layer's ``topk`` routed and its shared experts
    (``expert_ffn`` wide each; the routed ones times the load imbalance), each with what the policy keeps of it
    (:class:`~trainperf.accounting.recompute.LayerRecompute`: Megatron-Core's ``mlp``, ``moe``,
    ``moe_act`` and ``shared_experts`` modules treat them apart) and, in an eager stack, the
    activation's output (:func:`eager_activation_kept`)."""
    ms = lay.model
    dense = (1.0 - moe_share) * _dense_ffn(lay)
    moe = moe_share * ms.expert_ffn
    routed = ms.moe_topk * lay.run.moe_imbalance  # rows the busiest expert-parallel rank's experts get
    d, e, sh = rc.widths.ffn, rc.expert_ffn[0], rc.shared_ffn[0]
    ffn = (dense * (d + eager_activation_kept(lay, d))
           + moe * (routed * (e + eager_activation_kept(lay, e)) + ms.moe_shared * (sh + eager_activation_kept(lay, sh))))
    gin = (dense * rc.widths.gemm_in_ffn
           + moe * (routed * rc.expert_ffn[1] + ms.moe_shared * rc.shared_ffn[1]))
    return dataclasses.replace(rc.widths, ffn=ffn, gemm_in_ffn=gin)


# ------------------------------------------------------------------------ per device
@dataclass(slots=True, eq=False)
class Memory:
    """Memory per device at its peak, by category (bytes)."""

    weights_bytes: Num
    grads_bytes: Num
    optimizer_bytes: Num
    gathered_bytes: Num
    """FSDP / ZeRO-3 units held unsharded."""
    activations_bytes: Num
    """Kept activations of the peak rank, and the working set of the layer in its backward."""
    logits_bytes: Num
    buffers_bytes: Num
    """Tensor-parallel collective buffers, DDP's gradient buckets, the context-parallel ring's."""
    reserve_bytes: Num
    total_bytes: Num
    capacity_bytes: Num
    """What the device exposes to a process."""


def _states(lay: Layout, st: Stage) -> tuple[Num, Num, Num]:
    """(weights, gradients, optimizer states) of the busiest stage under the plan's shard counts
    (:data:`STATE_BYTES`; they span dp x cp: :attr:`~trainperf.specs.parallel.ParallelPlan.shards_optimizer`);
    no optimizer states on the device where the run offloads them to the host (the gradients are
    counted whole: ZeRO-Offload copies them out bucket by bucket, and the buckets are live). The
    frozen parameters (a LoRA base: ``1 - trainable_fraction``) are held in the stack's
    ``frozen_weight_bytes`` (at least the run's weight bytes), having no fp32 master among the
    optimizer states."""
    m, train = lay.mesh, lay.run.trainable_fraction
    w_b, g_b, o_b = STATE_BYTES[lay.run.state_kind]
    frozen_b = vec.maximum(w_b, lay.kernels.frozen_weight_bytes)
    opt = vec.where(lay.run.offload_optimizer, 0.0, st.sharded(st.p_stage, m.shards_optimizer) * train * o_b)
    weights = st.sharded(st.p_stage, m.shards_params) * (train * w_b + (1.0 - train) * frozen_b)
    return weights, st.sharded(st.p_stage, m.shards_grads) * train * g_b, opt


def _gathered(lay: Layout, st: Stage) -> Num:
    """FSDP / ZeRO-3 unsharded units (:func:`fsdp_unsharded_bytes`)."""
    ms = lay.model
    p_edge_local = vec.maximum(ms.params_embedding, ms.params_head) / lay.mesh.tp
    grad_unit = largest_matrix_params(lay) if lay.kernels.fsdp_grad_per_tensor else None
    return vec.where(st.zero3, fsdp_unsharded_bytes(st.p_layer_local, p_edge_local, lay.run.trainable_fraction,
                                                    PARAM_GATHER_BYTES, GRAD_REDUCE_BYTES, grad_unit), 0.0)


@dataclass(slots=True, eq=False)
class _Kept:
    """Activation bytes one layer keeps per micro-batch: a dense layer's and what an MoE layer
    keeps beyond it, under the policy and without recomputation."""

    layer: Num
    moe: Num
    layer_none: Num
    moe_none: Num
    scores: Num
    """Attention scores an unfused attention materialises (0 when fused)."""


def _kept(lay: Layout, st: Stage) -> _Kept:
    """:class:`_Kept` of the stage's layers (over the share the policy covers)."""
    ms, m, rc, act_b = lay.model, lay.mesh, st.rc, lay.run.act_bytes
    gin_b, t = lay.kernels.fp8_gemm_input_bytes, m.tp
    kept_none, kept = [], []
    ctx = ms.heads * ms.v_head_dim  # the attention context (narrower than the queries under MLA)
    for share in (0.0, 1.0):  # a dense layer, an MoE layer
        ffn = (1.0 - share) * _dense_ffn(lay) + share * (ms.moe_topk * lay.run.moe_imbalance + ms.moe_shared) * ms.expert_ffn
        none = dataclasses.replace(rc.widths_none, ffn=rc.widths_none.ffn + eager_activation_kept(lay, rc.widths_none.ffn))
        kept_none.append(saved_activation_bytes_per_layer(ms.seq_len / m.cp, m.micro_batch, ms.hidden, ms.q_dim,
                                                          st.kv_local * t, ffn, t, m.sp, none, act_b, gin_b, False, ctx))
        kept.append(saved_activation_bytes_per_layer(ms.seq_len / m.cp, m.micro_batch, ms.hidden, ms.q_dim,
                                                     st.kv_local * t, 1.0, t, m.sp, mlp_kept_widths(lay, rc, share),
                                                     act_b, gin_b, bool(rc.attention_core), ctx))
    layer_none, layer = kept_none[0], kept[0]
    moe_none, moe = kept_none[1] - kept_none[0], kept[1] - kept[0]
    if ms.mamba_mats:
        layer_none, layer = _with_mamba(lay, st, layer_none, layer)
    # unfused (eager) attention materialises the scores; a policy that keeps the attention core
    # keeps them for the backward, one that recomputes it holds one layer's again while it does.
    # On a CPU "eager" names the speed only: PyTorch's SDPA runs its CPU flash kernel there.
    scores: Num = 0.0
    if lay.kernels.attn_family == "eager" and lay.kernels.silicon != "cpu":
        scores = eager_attention_score_bytes(ms.seq_len / m.cp, m.micro_batch, ms.seq_len, ms.heads / t, act_b)
        layer_none = layer_none + scores
        layer = layer + (1.0 - rc.attention_core) * scores
    # routed experts keep their own inputs: the dispatched, gathered rows (topk copies) the expert
    # FC1 saves, and (where the stack weights them apart) the expert outputs the unpermute's
    # weighting by router probabilities saves for their gradient, unless the policy re-runs the
    # MLP region
    if ms.expert_mats:
        routed = routed_activation_bytes(st.m_tok, ms.moe_topk, ms.hidden, m.etp, t, m.sp, act_b,
                                         None if lay.kernels.experts_16bit else gin_b, lay.run.moe_imbalance,
                                         lay.kernels.moe_probs_in_activation)
        moe_none = moe_none + routed
        moe = moe + (1.0 - rc.moe_region) * routed
    r = st.rec_frac
    return _Kept(r * layer + (1.0 - r) * layer_none, r * moe + (1.0 - r) * moe_none, layer_none, moe_none, scores)


def _dense_ffn(lay: Layout) -> Num:
    """MLP width of the average dense block: ``ffn`` times the share of blocks with an MLP in a
    dense hybrid (an MoE model's MLP-free blocks are not separated here)."""
    ms = lay.model
    return ms.ffn * vec.where(ms.moe_layers > 0, 1.0, ms.mlp_frac)


MAMBA_KEPT_INNER = 3.0
"""Inner-wide tensors a Mamba-2 mixer keeps per token for its backward, on the memory-efficient
path Megatron-Core's ``MambaMixer`` and transformers' Nemotron-H take in training
(``mamba_split_conv1d_scan_combined``, state-spaces/mamba ``ssd_combined.py``
``MambaSplitConv1dScanCombinedFn``: it saves the input projection's output ``zxbcdt`` and the scan's
output ``out_x``, and recomputes the convolution, the chunk states and the gated norm in the
backward): the gate z (of ``zxbcdt``), ``out_x``, and the normed output the output projection
saves as its input. Read from memory of both repositories."""

MAMBA_KEPT_CONV = 1.0
"""Convolution-wide tensors (x, B, C) it keeps: the convolution's input, of ``zxbcdt``; its output
is recomputed. The per-head dt of ``zxbcdt`` adds ``heads`` 16-bit values."""


def _with_mamba(lay: Layout, st: Stage, layer_none: Num, layer: Num) -> tuple[Num, Num]:
    """(kept without recomputation, kept under the policy) of the average block with a hybrid's
    Mamba-2 mixers in place of attention in ``1 - attn_frac`` of them: the attention-wide tensors
    (queries, keys and values, context) give way to the mixer's (:data:`MAMBA_KEPT_INNER`,
    :data:`MAMBA_KEPT_CONV`, and dt, ``heads`` wide), split over tp; a policy that re-runs
    the mixer's input projection (``full``) keeps none of them. The block's hidden-wide tensors
    (its input, the norm's output) are the same for both mixers."""
    ms, m, rc, act_b = lay.model, lay.mesh, st.rc, lay.run.act_bytes
    t, tokens = m.tp, ms.seq_len / m.cp * m.micro_batch
    ctx = ms.heads * ms.v_head_dim
    kv = st.kv_local * t

    def attn_only(w: recompute.SavedWidths) -> Num:
        return tokens * act_b * (w.q * ms.q_dim + w.kv * kv + w.ctx * ctx) / t

    mixer = tokens * act_b * (MAMBA_KEPT_INNER * ms.mamba_inner + MAMBA_KEPT_CONV * ms.mamba_conv_dim
                              + ms.mamba_heads) / t
    frac = 1.0 - ms.attn_frac
    kept_none = layer_none + frac * (mixer - attn_only(rc.widths_none))
    kept = layer + frac * ((1.0 - rc.attn_region) * mixer - attn_only(rc.widths))
    return kept_none, kept


def _moe_share(lay: Layout, dense: Num, layers: Num) -> Num:
    """Share of MoE layers among a rank's ``layers``, of which ``dense`` are dense (a hybrid's
    MLP-free blocks are neither: ``mlp_frac`` of the blocks have an MLP)."""
    return vec.where(lay.model.moe_layers > 0, lay.model.mlp_frac - dense / vec.maximum(layers, 1.0), 0.0)


def autocast_weight_copies(lay: Layout, st: Stage) -> Num:
    """Bytes of the 16-bit weight copies ``torch.autocast`` makes over fp32 weights and autograd
    keeps for the backward (each matmul saves the cast weight it multiplied by), on the stage's
    layers whose matrices are not re-run: where the stack runs 16-bit by autocast over fp32
    weights (``autocast_unsharded``, :func:`~.layout.residual_width`) and eagerly (a compiled
    step re-casts in the backward: the partitioner recomputes casts rather than saving them).
    A layer the policy re-runs keeps its input only; its copies live again one layer at a time.
    Counted over the layer's parameters (its norms' few weights included)."""
    rc = st.rc
    mats = rc.attn + rc.mlp
    rerun = sum(mats) / len(mats) if mats else 0.0
    kept_share = 1.0 - st.rec_frac * rerun
    applies = (residual_width(lay) > 1.0) & (not lay.kernels.compiled)
    return vec.where(applies, lay.mesh.layers_first * st.p_layer_local * lay.run.act_bytes * kept_share, 0.0)


FUSED_CHUNK_STEP_TOKENS = 256
"""Chunks of a fused loss come in multiples of this many tokens, and never fewer
(``trainperf.measure.loss.CHUNK_TOKENS``)."""


def fused_loss_bytes(lay: Layout, tokens: Num) -> Num:
    """Bytes live at a fused, chunked head-and-loss over ``tokens`` tokens (one device alone;
    ``trainperf.measure.loss.linear_cross_entropy``, after Liger-Kernel's fused linear
    cross-entropy): one chunk's logits in fp32 (4 bytes), its 16-bit matmul output and gradient
    (2 + 2), the head weight's 16-bit copy, its fp32 gradient accumulator (kept into the backward)
    and the fp32 gradient of the hidden states. A chunk holds the stack's
    ``fused_loss_chunk_bytes`` of fp32 logits, rounded down to :data:`FUSED_CHUNK_STEP_TOKENS`
    tokens and at least that many, and at most the tokens there are."""
    ms = lay.model
    per_chunk = lay.kernels.fused_loss_chunk_bytes / (4.0 * ms.vocab)
    chunk = vec.maximum(FUSED_CHUNK_STEP_TOKENS, vec.floor(per_chunk / FUSED_CHUNK_STEP_TOKENS)
                        * FUSED_CHUNK_STEP_TOKENS)
    chunk = vec.minimum(chunk, tokens)
    head = ms.vocab * ms.hidden
    return chunk * ms.vocab * 8.0 + head * (4.0 + lay.run.act_bytes) + tokens * ms.hidden * 4.0


def _peak_activations(lay: Layout, st: Stage, kept: _Kept) -> tuple[Num, Num]:
    """(activations with the working set, logits) on the rank whose sum peaks.

    The first rank holds the most micro-batches (:func:`inflight_microbatches`); with three or
    more ranks the second, holding one fewer, peaks instead when it holds more layers (a lighter
    first stage, the embedding slot) or more MoE layers (a MoE model's leading dense layers sit on
    the first); the last rank holds fewer (:func:`last_rank_inflight_layers`) plus the logits at
    the loss. A recomputed layer's tensors are live again during its backward: one layer's full
    set (of the peak rank's average layer), which also stands in for the backward's own
    temporaries (activation gradients) beside what it kept; this is what matched the published
    torchtitan peaks (tests/test_memory_model.py)."""
    m, M = lay.mesh, lay.mesh.grad_accum
    sh_first = _moe_share(lay, st.dense_first, m.layers_first)
    sh_second = _moe_share(lay, st.dense_second, m.layers_mid)
    sh_last = _moe_share(lay, st.dense_last, m.layers_last)
    first = m.layers_first * (kept.layer + sh_first * kept.moe) * inflight_microbatches(
        m.pp, m.vpp, M, m.interleaved, m.gpipe)
    second = vec.where(m.pp >= 3, m.layers_mid * (kept.layer + sh_second * kept.moe)
                       * second_rank_inflight_microbatches(m.pp, m.vpp, M, m.interleaved, m.gpipe), 0.0)
    second_peaks = second > first
    first = vec.maximum(first, second)
    # GPipe keeps every micro-batch's loss residuals until the first backward (the JAX pipelines
    # apply the head and loss to all outputs at once; PyTorch's keeps each micro-batch's graph)
    # each multi-token-prediction module adds a layer and a loss on the last rank
    mtp = lay.model.mtp_layers
    logits = (st.m_tok * vec.where(m.gpipe, M, 1.0) * lay.model.vocab / m.tp * lay.kernels.loss_bytes_per_logit
              * (1.0 + mtp))
    alone = (m.dp * m.fsdp * m.tp * m.pp * m.cp == 1) & (mtp == 0)
    logits = logits_all = vec.where(alone & (lay.kernels.fused_loss_chunk_bytes > 0), fused_loss_bytes(lay, st.m_tok),
                                    logits)
    last = (last_rank_inflight_layers(m.pp, m.vpp, M, m.layers_last + mtp, m.interleaved, m.gpipe)
            * (kept.layer + sh_last * kept.moe))
    # one stage is both the first and the last rank; with pp > 1 the busier of the two sets the peak
    last_peaks = vec.where(m.pp > 1, last + logits > first, False)
    share = vec.where(last_peaks, sh_last, vec.where(second_peaks, sh_second, sh_first))
    working = kept.layer_none + share * kept.moe_none if st.rc.stores_less else st.rc.attention_core * kept.scores
    acts = vec.where(last_peaks, last, first)
    logits = vec.where(m.pp > 1, vec.where(last_peaks, logits, 0.0), logits)
    if vec.is_number(m.dualpipe) and not (m.dualpipe or m.dualpipev):
        return acts + working, logits
    dual, dual_logits = _dualpipe_activations(lay, kept, (sh_first, sh_second, sh_last), logits_all)
    on = vec.where(m.dualpipe, True, m.dualpipev)
    return (vec.where(on, dual, acts) + working, vec.where(on, dual_logits, logits))


def _dualpipe_activations(lay: Layout, kept: _Kept, shares: tuple[Num, Num, Num], logits: Num) -> tuple[Num, Num]:
    """(activations, logits) of the DualPipe (or DualPipeV) rank whose sum peaks, working set
    aside: the first rank holds :func:`dualpipe_inflight_units` sets of the mean of its two stages
    (the first and the last, with the multi-token-prediction modules; DualPipeV: of its layers,
    the first and last half-stages) and the logits of the micro-batches that end on it; a middle
    rank as many of its layers."""
    m = lay.mesh
    sh_first, sh_mid, sh_last = shares
    units = dualpipe_inflight_units(m.pp, m.grad_accum, m.dualpipev)
    mtp = lay.model.mtp_layers
    first = m.layers_first * (kept.layer + sh_first * kept.moe)
    ends = vec.where(m.dualpipev, first + mtp * (kept.layer + sh_last * kept.moe),
                     0.5 * (first + (m.layers_last + mtp) * (kept.layer + sh_last * kept.moe)))
    mid = m.layers_mid * (kept.layer + sh_mid * kept.moe)
    mid_peaks = units * mid > units * ends + logits
    return units * vec.where(mid_peaks, mid, ends), vec.where(mid_peaks, 0.0, logits)


def memory(lay: Layout, st: Stage, kn: KnobValues) -> Memory:
    """Memory per device by category, the total and the capacity it must fit in.

    Counted: model states (:func:`_states`), FSDP / ZeRO-3 unsharded units, activations of the
    peak rank (:func:`_peak_activations`), communication buffers (the tp all-gather/reduce-scatter
    input and output, DDP's buckets, the context-parallel K/V blocks and merge buffers of one
    layer's attention: :func:`~.context_parallel.ring_buffer_bytes`), and the framework reserve (``reserve_GiB``: driver
    carve-out, CUDA/ROCm context, library workspaces, collective buffers), or, when larger, the
    share of the device a preallocating runtime leaves outside its pool (JAX/XLA on a GPU): what
    it leaves holds the context, workspaces and buffers the reserve stands for, so it is taken
    once. Left out: allocator fragmentation beyond the reserve, optimizer-step temporaries (they
    live when activations are freed), and CPU offload.
    """
    weights, grads, optim = _states(lay, st)
    gathered = _gathered(lay, st)
    activations, logits = _peak_activations(lay, st, _kept(lay, st))
    activations = activations + autocast_weight_copies(lay, st)
    buffers = (vec.where(lay.mesh.tp > 1, 2.0 * st.tp_buf, 0.0)
               + vec.where(st.plain_dp, 2.0 * DDP_BUCKET_BYTES * GRAD_REDUCE_BYTES, 0.0) + ring_buffer_bytes(lay, st))
    capacity = lay.device.hbm_capacity_bytes
    reserve = vec.maximum(kn.reserve_GiB * GiB, (1.0 - lay.kernels.memory_fraction) * capacity)
    total = weights + grads + optim + gathered + activations + logits + buffers + reserve
    return Memory(weights, grads, optim, gathered, activations, logits, buffers, reserve + 0.0 * weights, total,
                  capacity)
