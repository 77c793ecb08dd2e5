"""Compute time of one device: the GEMMs by shape, fused attention, memory-bound ops, kernel
launches; per layer, for the LM head and loss, and on the slowest pipeline rank.

Formulas (every argument a float or a numpy array):

* A GEMM ``(m x k) @ (k x n)`` does ``2*m*n*k`` FLOPs (Kaplan et al. 2020) at
  ``peak * efficiency * s(m) * s(n) * s(k)`` (the silicon's measured GEMM efficiency times the
  share the stack keeps, :func:`gemm_speed`) with the shape factor
  ``s(d) = d / (d + matmul_half_dim)`` (small or skinny GEMMs cannot fill the tensor cores),
  but never faster than moving its operands through HBM (roofline, Williams et al. 2009).
* Fused (flash) attention: forward ``4 * b * s_q * s_k_avg * heads * head_dim`` FLOPs,
  backward 2.5x the forward (FlashAttention-2 runs five GEMMs backward versus two forward,
  Dao 2023), at ``peak * attention_efficiency``; under context parallelism as the blocks of a
  ring (:mod:`.attention`).
* Memory-bound ops take ``bytes / (hbm_bandwidth * memory_efficiency)``.

Per micro-batch and layer: backward is 2x the GEMMs (activation and weight gradients; LoRA skips
the frozen weights' gradients), 2.5x attention, 2x the elementwise bytes; recomputation re-runs
what the checkpointing policy says (:mod:`trainperf.accounting.recompute`: the GEMMs it re-runs,
the attention core, the elementwise ops) over the share of layers it covers. A layer takes its
device time or its launch time, whichever is longer, blended smoothly.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from trainperf import vec
from trainperf.predict.efficiency import KnobValues
from trainperf.predict.step_model.attention import AttentionTimes, attention_times
from trainperf.predict.step_model.layout import (
    COLUMN,
    HEAD_16BIT_UNDER_FP8,
    KV,
    REPLICA,
    ROW,
    Layout,
    Matmul,
    Num,
    residual_width,
)
from trainperf.predict.step_model.stage import Stage

KERNELS_PER_LAYER_FWD = 14.0
"""Kernels one layer launches forward in an eager framework: ~7 GEMMs, 2 norms, 2 adds, RoPE,
activation, attention."""

ADAPTER_KERNELS = 3.0
"""Kernels (operators) a LoRA adapter adds forward: its two GEMMs and the scaled add of its
output (peft's ``lora.Linear.forward``: ``result + lora_B(lora_A(dropout(x))) * scaling``; the
dropout is an identity at p = 0)."""

PER_EXPERT_LAUNCHES = frozenset({"te-grouped", "other"})
"""Grouped-GEMM implementations that launch one GEMM per local expert: Transformer Engine's
GroupedLinear runs a cuBLAS GEMM per group (``general_grouped_gemm`` over streams, TE 1.x-2.x on
Hopper; read from memory), a loop over experts does too. ``torch-grouped-mm`` is one kernel per
weight matrix."""

MOE_HOST_SYNC_LAUNCHES = 2.0
"""A dispatcher that copies the tokens-per-expert counts to the host (to size its all-to-all)
drains the device queue once per MoE block forward: the device waits for the copy's launch and,
once the host has the counts, for the next kernel's launch: two kernel launches' time, exposed
(an assumption: no measurement of the stall was found)."""

ROUTER_BYTES_PER_SCORE = 20.0
"""HBM bytes per (token, expert) router score forward, fp32: the router GEMM's logits written (4),
the softmax/sigmoid read and written (8), top-k's read (4), the probabilities scattered into the
dense [tokens, experts] map (4) (Megatron-Core ``router.py``/``moe_utils.topk_softmax_with_capacity``,
read from memory; a fused router moves fewer)."""

LOSS_BYTES_PER_LOGIT = 16.0
"""Cross-entropy in one fused kernel (or compiled), forward and backward, per logit: write bf16
logits (2), fp32 softmax read and write (8), gradient write and read (6)."""

EAGER_LOSS_BYTES_PER_LOGIT = 44.0
"""The same run as separate PyTorch ops (``F.cross_entropy(logits.float())``, Megatron's
vocab-parallel cross-entropy): forward, the fp32 upcast (read 2, write 4) and the log-softmax
(reads for the max and the exponent sum, read and write of the output: 16); backward, the NLL's
zero-filled gradient (4), the log-softmax backward (read the gradient and the output, write: 12)
and the cast of the gradient to 16 bits (read 4, write 2). 22 + 22 bytes."""


# ----------------------------------------------------------------------------- formulas
def shape_factor(d: Num, half_dim: Num) -> Num:
    """``d / (d + half_dim)``: the fraction of peak a GEMM dimension of size ``d`` allows."""
    return d / (d + half_dim)


def matmul_time_s(m: Num, n: Num, k: Num, peak_flops: Num, efficiency: Num, half_dim: Num, hbm_bytes_per_s: Num,
                  bytes_per_elem: Num = 2.0) -> Num:
    """Seconds for one ``(m x k) @ (k x n)`` GEMM: compute at the shaped efficiency, floored by
    the time to read both operands and write the result once (roofline)."""
    eff = efficiency * shape_factor(m, half_dim) * shape_factor(n, half_dim) * shape_factor(k, half_dim)
    t_compute = 2.0 * m * n * k / (peak_flops * eff)
    t_memory = bytes_per_elem * (m * k + k * n + m * n) / hbm_bytes_per_s
    return vec.maximum(t_compute, t_memory)


def elementwise_bytes_per_token(hidden_norm: Num, q_dim: Num, kv_dim: Num, ffn: Num, gated: Any, act_bytes: Num = 2.0,
                                rope: Any = True, norm_passes: Num = 1.0, rope_passes: Num = 1.0,
                                act_passes: Num = 1.0) -> Num:
    """HBM bytes per token moved by the memory-bound ops of one transformer block, forward.

    Counted (bytes of 16-bit activations): two norms (read + write ``h``: 4h each), two residual
    adds (read 2, write 1: 6h each), RoPE on queries and keys (read + write; only with ``rope``),
    the MLP activation (gated: read gate and up, write one; plain: read + write). ``hidden_norm``
    is ``h`` or ``h/tp`` under sequence parallelism; ``q_dim``, ``kv_dim`` and ``ffn`` are
    per-device (tp-split) widths. ``*_passes``: how many times its ideal bytes unfused code moves
    for the norm, RoPE and activation (:func:`trainperf.predict.kernels.memory_bound.eager_penalty`;
    1 when fused or compiled). Left out: dropout (off in modern LLM training), casts fused into
    GEMMs. Backward moves about twice these bytes.
    """
    norms = 2.0 * 2.0 * hidden_norm * norm_passes
    residual = 2.0 * 3.0 * hidden_norm
    rope_b = vec.where(rope, 2.0 * (q_dim + kv_dim) * rope_passes, 0.0)
    act = vec.where(gated, 3.0 * ffn, 2.0 * ffn) * act_passes
    return act_bytes * (norms + residual + rope_b + act)


def mamba_bytes_per_token(conv_dim: Num, inner: Num, tp: Num, act_bytes: Num = 2.0) -> Num:
    """HBM bytes per token the memory-bound ops of one Mamba-2 mixer move forward, split over tp:
    the causal depthwise convolution with its SiLU over x, B and C (read and write ``conv_dim``)
    and the gated RMSNorm (read the scan's output and the gate z, write: ``3 * inner``; one fused
    kernel in state-spaces/mamba's ``RMSNormGated``). Left out: dt's softplus and the per-head
    decay (``heads`` wide), the D skip (fused into the scan). Backward moves about twice these."""
    return act_bytes * (2.0 * conv_dim + 3.0 * inner) / tp


def moe_routing_bytes(tokens: Num, received: Num, topk: Num, hidden: Num, local_experts: Num,
                      act_bytes: Num = 2.0) -> Num:
    """HBM bytes one device moves, forward, to route tokens through one MoE block.

    Counted (Megatron-Core's alltoall dispatcher, ``moe_utils.permute``/``unpermute``): the
    permutation of the ``tokens`` the device dispatches into expert order, ``topk`` copies
    (read 1, write ``topk``), and the unpermutation that sums the ``topk`` weighted expert outputs
    back (read ``topk``, write 1); with more than one local expert, the ``received`` rows are
    sorted by expert after the all-to-all and back before it (``sort_chunks_by_idxs``: read +
    write, twice). Left out: the router's softmax/top-k (``experts`` wide, not ``hidden``), the
    routing maps (integers per token). Backward moves about twice these bytes.
    """
    h = hidden * act_bytes
    permute = 2.0 * tokens * (1.0 + topk) * h
    sort = vec.where(local_experts > 1, 4.0 * received * h, 0.0)
    return permute + sort


def memory_time_s(nbytes: Num, hbm_bytes_per_s: Num, efficiency: Num) -> Num:
    """Seconds to move ``nbytes`` through HBM at the achieved fraction of its bandwidth."""
    return nbytes / (hbm_bytes_per_s * efficiency)


SMOOTH_MAX_P = 3.0
"""The exponent of the smooth maximum of device and launch time (:func:`exposed_launch_s`): at
equal times the step takes 2^(1/3) = 1.26 of either. The host queues kernels ahead of the device,
so a step takes about the longer of the two; the smoothing stands for the stretches where one
or the other leads. The earlier form, ``launch^2 / (device + launch)`` (1.5 at equal times),
over-predicted the bench's partly launch-bound GPU runs (an 85M model at 8,192 tokens on an H200:
+20%, now +6%; Llama 3.2 1B eager +4.4%, now -1.4%; 2026-11-28) and left the fit on the published
tables as it was (group-out MAPE 7.26% -> 7.27%)."""


def exposed_launch_s(device_s: Num, launch_s: Num, host_bound: bool = False) -> Num:
    """Launch time left exposed beside ``device_s`` of kernels that take ``launch_s`` to launch:
    ``(device^p + launch^p)^(1/p) - device`` (p = :data:`SMOOTH_MAX_P`), the smooth form of
    ``max(device, launch) - device``; all of it where the host is the device (``host_bound``, a
    CPU: dispatch and compute share the cores)."""
    if host_bound:
        return launch_s
    both = vec.maximum(device_s, launch_s)
    safe = vec.where(both > 0, both, 1.0)
    ratio_d, ratio_l = device_s / safe, launch_s / safe
    return vec.where(both > 0, safe * (ratio_d ** SMOOTH_MAX_P + ratio_l ** SMOOTH_MAX_P) ** (1.0 / SMOOTH_MAX_P)
                     - device_s, 0.0)


# ------------------------------------------------------------------------------ GEMMs
@dataclass(slots=True, eq=False)
class GemmSpeed:
    """What every GEMM of the layout is priced with."""

    peak_flops: Num
    efficiency: Num
    """Measured GEMM efficiency of the dtype x the share the stack keeps x the fp8 recipe's cost."""
    half_dim: Num
    hbm_bytes_per_s: Num
    elem_bytes: Num
    """Bytes per operand element (1 under fp8)."""
    table: tuple[tuple[float, float, float, float], ...] = ()
    """Measured shapes (:attr:`~.layout.KernelPhysics.gemm_table`); empty: the shape law alone."""
    grouped_table: tuple[tuple[float, float, float, float], ...] = ()
    """Measured grouped GEMMs (:attr:`~.layout.KernelPhysics.grouped_table`)."""
    experts: GemmSpeed | None = None
    """What the routed experts run at where it differs (an fp8 run's 16-bit experts:
    :attr:`~.layout.KernelPhysics.experts_16bit`); None: this."""

    def time_s(self, m: Num, n: Num, k: Num, scale: Num = 1.0) -> Num:
        return self._time_s(m, n, k, scale, self.table)

    def grouped_time_s(self, m: Num, n: Num, k: Num, scale: Num = 1.0) -> Num:
        """One routed expert's ``(m x k) @ (k x n)`` in the stack's grouped GEMM: the measured grouped
        shapes where there are, else the dense GEMM's speed times ``scale`` (the grouped fraction)."""
        return self._time_s(m, n, k, scale, self.grouped_table or self.table)

    def _time_s(self, m: Num, n: Num, k: Num, scale: Num, table: tuple[tuple[float, float, float, float], ...]) -> Num:
        if table:
            eff = self.efficiency * scale * measured_efficiency(m, n, k, table, self.half_dim)
            return matmul_time_s(m, n, k, self.peak_flops, eff, 0.0, self.hbm_bytes_per_s, self.elem_bytes)
        return matmul_time_s(m, n, k, self.peak_flops, self.efficiency * scale, self.half_dim,
                             self.hbm_bytes_per_s, self.elem_bytes)


def measured_efficiency(m: Num, n: Num, k: Num, table: tuple[tuple[float, float, float, float], ...],
                        half_dim: Num) -> Num:
    """Fraction of the peak an ``(m x k) @ (k x n)`` GEMM runs at, forward and backward, where
    shapes were timed (``table`` of ``(m, n, k, fraction)``): the fraction of the shape nearest it
    (distance in log2 of each dimension), times the shape law's ratio between the two
    (:func:`shape_factor` at ``half_dim``), so that a shape far from every timed one still moves
    the way the law says. A CPU's GEMM speed depends on the shape far more than the law's one
    half-dimension allows (``trainperf.specs.cpu_calibration.MeasuredGemm``)."""
    def law(a: Num, b: Num, c: Num) -> Num:
        return shape_factor(a, half_dim) * shape_factor(b, half_dim) * shape_factor(c, half_dim)

    def log2(x: Num) -> Num:
        return vec.log2(vec.maximum(x, 1.0))

    best_d: Num = float("inf")
    best_eff: Num = 1.0
    here = law(m, n, k)
    for tm, tn, tk, frac in table:
        d = (log2(m) - math.log2(tm)) ** 2 + (log2(n) - math.log2(tn)) ** 2 + (log2(k) - math.log2(tk)) ** 2
        eff = frac * here / law(tm, tn, tk)
        closer = d < best_d
        best_eff, best_d = vec.where(closer, eff, best_eff), vec.where(closer, d, best_d)
    return best_eff


def gemm_speed(lay: Layout, kn: KnobValues) -> GemmSpeed:
    """The silicon's measured GEMM efficiency for the dtype (kernel physics), the share of it the
    stack keeps (fitted), the fp8 recipe's quantisation cost (kernel physics)."""
    k, fp8 = lay.kernels, lay.run.fp8
    share = vec.where(fp8, kn.fp8_matmul_fraction, kn.matmul_fraction)
    experts = sixteen_bit_speed(lay, kn) if k.experts_16bit else None
    return GemmSpeed(lay.device.peak_flops, k.gemm_peak_fraction * share / k.fp8_recipe_factor, k.gemm_half_dim,
                     lay.device.hbm_bytes_per_s, vec.where(fp8, 1.0, lay.run.act_bytes), k.gemm_table,
                     k.grouped_table, experts)


def sixteen_bit_speed(lay: Layout, kn: KnobValues) -> GemmSpeed:
    """The 16-bit GEMM an fp8 run keeps for what its fp8 leaves out (the LM head:
    :data:`HEAD_16BIT_UNDER_FP8`; a stack's routed experts: :attr:`~.layout.KernelPhysics.experts_16bit`):
    the 16-bit peak at :attr:`~.layout.KernelPhysics.head_gemm_peak_fraction` and the stack's
    16-bit share, at the shape law."""
    k = lay.kernels
    return GemmSpeed(lay.device.attn_peak_flops, k.head_gemm_peak_fraction * kn.matmul_fraction, k.gemm_half_dim,
                     lay.device.hbm_bytes_per_s, lay.run.act_bytes)


def _local_shape(lay: Layout, mat: Matmul, deg: Num) -> tuple[Num, Num]:
    """(n, k) of a weight GEMM on one device of a ``deg``-way tensor-parallel group."""
    if mat.split == ROW:
        return mat.out_features, mat.in_features / deg
    if mat.split == KV:  # kv heads are replicated when tp > kv_heads
        return lay.model.head_dim * vec.maximum(lay.model.kv_heads / deg, 1.0), mat.in_features
    if mat.split == REPLICA:
        return mat.out_features, mat.in_features
    assert mat.split == COLUMN
    return mat.out_features / deg, mat.in_features


def _dense_gemms(lay: Layout, st: Stage, g: GemmSpeed) -> tuple[Num, Num]:
    """(forward, recomputed) seconds of one layer's attention and dense-MLP GEMMs (an average
    layer: a dense MLP weighs ``dense_frac``, attention ``attn_frac``), and of a hybrid's Mamba-2
    mixers (:func:`mamba_mixer`)."""
    fwd = rec = 0.0
    ms, t = lay.model, lay.mesh.tp
    for mats, redo, weight in ((ms.attn_mats, st.rc.attn, ms.attn_frac), (ms.mlp_mats, st.rc.mlp, st.dense_frac)):
        for mat, r in zip(mats, redo, strict=True):
            n, k = _local_shape(lay, mat, t)
            tm = weight * g.time_s(st.m_tok, n, k)
            fwd = fwd + tm
            rec = rec + r * tm
    if ms.mamba_mats:
        m_fwd, m_rec = mamba_mixer(lay, st, g)
        fwd, rec = fwd + (1.0 - ms.attn_frac) * m_fwd, rec + (1.0 - ms.attn_frac) * m_rec
    return fwd, rec


def mamba_mixer(lay: Layout, st: Stage, g: GemmSpeed) -> tuple[Num, Num]:
    """(forward, recomputed) seconds of one Mamba-2 mixer's matmul work per micro-batch: its
    input and output projections (split over tp like attention's, Megatron-Core ``MambaMixer``)
    and the SSD scan (:meth:`~trainperf.specs.model.ModelSpec.ssd_flops_per_token`, heads split over
    tp). The scan's intra-chunk work is attention over ``mamba_chunk`` tokens, so it is priced at
    the stack's fused-attention efficiency at that length and the Mamba head dim, in 16 bits (no
    measurement of the SSD kernels was found: an assumption). A policy that re-runs attention's
    projections (``full``) re-runs the mixer; selective recomputation of the attention core does
    not touch it (Megatron-Core recomputes ``core_attn`` in attention layers only)."""
    from trainperf.predict.step_model.attention import attention_efficiency

    ms, t, rc = lay.model, lay.mesh.tp, st.rc
    t_in = g.time_s(st.m_tok, *_local_shape(lay, ms.mamba_mats[0], t))
    t_out = g.time_s(st.m_tok, *_local_shape(lay, ms.mamba_mats[1], t))
    eff, _ = attention_efficiency(lay, ms.mamba_chunk, True, ms.mamba_head_dim)
    t_scan = st.m_tok * ms.ssd_flops / t / (lay.device.attn_peak_flops * eff)
    redo_in, redo_out = rc.attn_region, rc.attn[-1]
    return t_in + t_out + t_scan, redo_in * (t_in + t_scan) + redo_out * t_out


def expert_rows(lay: Layout, st: Stage) -> Num:
    """Rows of each local expert's GEMMs on the busiest expert-parallel rank per micro-batch:
    ``m_tok * topk * ep / E * etp / tp`` (each device still does 1/N of the stage's expert FLOPs:
    MoE parallel folding) times the load imbalance (:attr:`~.layout.Run.moe_imbalance`)."""
    ms, m = lay.model, lay.mesh
    return st.m_tok * ms.moe_topk * m.ep / ms.moe_experts * (m.etp / m.tp) * lay.run.moe_imbalance


def _moe_gemms(lay: Layout, st: Stage, g: GemmSpeed) -> tuple[Num, Num, Num, Num]:
    """(forward, recomputed, routed-expert forward, routed-expert recomputed) seconds of one MoE
    block's GEMMs: routed experts (split ``etp`` ways, :func:`expert_rows` rows each, at the
    stack's grouped-GEMM speed: the dense law at those rows, so efficiency falls as tokens per
    expert fall; in 16 bits in an fp8 run whose stack leaves them out of fp8), shared experts
    (split like a dense MLP) and the router."""
    ms, m, rc = lay.model, lay.mesh, st.rc
    local_experts = ms.moe_experts / m.ep
    m_e = expert_rows(lay, st)
    t_exp = t_rec = t_sh = t_sh_rec = 0.0
    for mat, redo, redo_sh in zip(ms.expert_mats, rc.expert, rc.shared, strict=True):
        n, k = _local_shape(lay, mat, m.etp)
        n_s, k_s = _local_shape(lay, mat, m.tp)
        te = (g.experts or g).grouped_time_s(m_e, n, k, lay.kernels.grouped_fraction)
        ts = ms.moe_shared * g.time_s(st.m_tok, n_s, k_s)
        t_exp, t_rec = t_exp + te, t_rec + redo * te
        t_sh, t_sh_rec = t_sh + ts, t_sh_rec + redo_sh * ts
    t_router = g.time_s(st.m_tok, ms.moe_experts, ms.hidden)
    routed, routed_rec = local_experts * t_exp, local_experts * t_rec
    return (routed + t_sh + t_router, routed_rec + t_sh_rec + rc.moe_region * t_router, routed, routed_rec)


def adapter_gemms(lay: Layout, st: Stage, g: GemmSpeed) -> Num:
    """Forward seconds of one layer's LoRA adapters (Hu et al. 2021) per micro-batch: for each
    adapted matrix ``in -> out``, ``A`` as ``(m x in) @ (in x r)`` and ``B`` as ``(m x r) @ (r x out)``
    at the shape law (``r`` is small: skinny GEMMs, far below the peak), on the whole
    ``in``/``out`` (adapters are not split by tensor parallelism here). 0 without adapters."""
    r = lay.run.adapter_rank
    return sum((g.time_s(st.m_tok, r, i) + g.time_s(st.m_tok, o, r) for i, o in lay.run.adapters), 0.0)


def layer_gemms(lay: Layout, st: Stage, g: GemmSpeed) -> tuple[Num, Num, Num, Num]:
    """(forward, recomputed) GEMM seconds of the stage's average layer per micro-batch, and of
    them the routed experts' grouped GEMMs (forward, recomputed)."""
    fwd, rec = _dense_gemms(lay, st, g)
    exp_fwd = exp_rec = 0.0
    if lay.model.expert_mats:
        moe_fwd, moe_rec, routed, routed_rec = _moe_gemms(lay, st, g)
        fwd = fwd + st.moe_frac * moe_fwd
        rec = rec + st.moe_frac * moe_rec
        exp_fwd, exp_rec = st.moe_frac * routed, st.moe_frac * routed_rec
    return fwd, rec, exp_fwd, exp_rec


# -------------------------------------------------------------------------- attention
def attention_core(lay: Layout, kn: KnobValues) -> AttentionTimes:
    """One layer's attention core per micro-batch at the fused kernel's measured efficiency at the
    lengths it runs on: the whole causal sequence, or with context parallelism the blocks of the
    stack's ring and their merges (:mod:`.attention`); of the average layer, so a hybrid's share of
    attention blocks (``attn_frac``) weighs it."""
    times = attention_times(lay, kn, lay.kernels.cp_flavour)
    frac = lay.model.attn_frac
    if vec.is_number(frac) and frac == 1.0:
        return times
    return AttentionTimes(*(frac * getattr(times, f.name) for f in dataclasses.fields(times)))


# ----------------------------------------------------------------------- memory-bound
def router_bytes(tokens: Num, experts: Num) -> Num:
    """HBM bytes the router's score pipeline moves forward for ``tokens`` over ``experts``
    (:data:`ROUTER_BYTES_PER_SCORE` per score)."""
    return tokens * experts * ROUTER_BYTES_PER_SCORE


def _routing_bytes(lay: Layout, st: Stage) -> Num:
    """Bytes one MoE block's routing moves forward: the router's scores over the tokens the device
    routes (its sequence-parallel share, else all it holds), the permutation of the tokens it
    dispatches (without SP, etp/tp of those its tp group holds), the sort of the ``m_tok * topk *
    etp / tp`` rows its experts receive (times the load imbalance on the busiest rank)."""
    ms, m = lay.model, lay.mesh
    m_route = st.m_tok * vec.where(m.sp, 1.0, m.etp) / m.tp
    m_disp = st.m_tok * ms.moe_topk * m.etp / m.tp * lay.run.moe_imbalance
    scores = router_bytes(st.m_tok * vec.where(m.sp, 1.0 / m.tp, 1.0), ms.moe_experts)
    return scores + moe_routing_bytes(m_route, m_disp, ms.moe_topk, ms.hidden, ms.moe_experts / m.ep,
                                      lay.run.act_bytes)


def _residual_bytes_width(lay: Layout) -> Num:
    """How many times a 16-bit activation's bytes the norms and residual adds move per element:
    :func:`~trainperf.predict.step_model.layout.residual_width` (2 where the residual stream and
    the norms' outputs are fp32, under autocast over unsharded fp32 weights: trainperf's own bench
    on one GPU, whose H200 runs this prices within 12%) on a device whose memory-bound ops are
    bandwidth-bound; 1 on a CPU, whose measured rate (its calibration, at the run's token count,
    where the tensors sit in cache) is not: pricing the fp32 bytes there put the bench's own CPU
    runs 3-6 points slower than measured (default +13% instead of +7%, 2026-11-28)."""
    return 1.0 if lay.kernels.host_bound else residual_width(lay)


def _elementwise_bytes(lay: Layout, st: Stage) -> Num:
    """Bytes the memory-bound ops of the average layer move forward per micro-batch."""
    ms, m, k = lay.model, lay.mesh, lay.kernels
    hn = vec.where(m.sp, ms.hidden / m.tp, ms.hidden) * _residual_bytes_width(lay)
    b = st.m_tok * elementwise_bytes_per_token(hn, ms.attn_frac * st.rope_q_local, ms.attn_frac * st.rope_k_local,
                                               st.ffn_eff / m.tp, ms.gated, lay.run.act_bytes, ms.rope,
                                               k.norm_passes, k.rope_passes, k.act_passes)
    if ms.mamba_mats:
        b = b + (1.0 - ms.attn_frac) * st.m_tok * mamba_bytes_per_token(ms.mamba_conv_dim, ms.mamba_inner, m.tp,
                                                                         lay.run.act_bytes)
    if ms.expert_mats:
        b = b + st.moe_frac * _routing_bytes(lay, st)
    return b


def _recomputed_op_bytes(lay: Layout, st: Stage) -> Num:
    """Bytes of the single memory-bound ops Megatron-Core's recompute modules re-run (the norms,
    RoPE, an MLP's activation, a MoE block's permutations); 0 for the other policies, which
    re-run all of them (``elementwise``) or none."""
    ms, m, k, rc = lay.model, lay.mesh, lay.kernels, st.rc
    act_b, t = lay.run.act_bytes, m.tp
    if rc.elementwise or not (rc.norms or rc.rope or rc.expert_act or rc.shared_act or rc.dense_act
                              or rc.moe_region):
        return 0.0
    hn = vec.where(m.sp, ms.hidden / t, ms.hidden) * _residual_bytes_width(lay)
    zero = 0.0 * hn
    norms_b = elementwise_bytes_per_token(hn, zero, zero, zero, ms.gated, act_b, False, k.norm_passes, 0.0,
                                          0.0) - 2.0 * 3.0 * hn * act_b
    rope_b = elementwise_bytes_per_token(zero, st.rope_q_local, st.rope_k_local, zero, ms.gated, act_b, ms.rope, 0.0,
                                         k.rope_passes, 0.0)
    act_w = rc.dense_act * st.dense_frac * ms.ffn + st.moe_frac * (rc.expert_act * st.ffn_moe
                                                                     + rc.shared_act * st.ffn_shared)
    act_b_tok = elementwise_bytes_per_token(zero, zero, zero, act_w / t, ms.gated, act_b, False, 0.0, 0.0,
                                            k.act_passes)
    b = st.m_tok * (rc.norms * norms_b + rc.rope * rope_b + act_b_tok)
    if ms.expert_mats:
        b = b + rc.moe_region * st.moe_frac * _routing_bytes(lay, st)
    return b


def memory_bound(lay: Layout, st: Stage, kn: KnobValues) -> tuple[Num, Num, Num, Num]:
    """(forward, recomputed) seconds of the average layer's memory-bound ops per micro-batch, at
    the silicon's achieved bandwidth for the stack's implementation, and of them an MoE block's
    router scores and permutations (forward, recomputed)."""
    hbm, eff = lay.device.hbm_bytes_per_s, lay.kernels.elementwise_fraction * kn.memory_bound_fraction
    fwd = memory_time_s(_elementwise_bytes(lay, st), hbm, eff)
    rc = st.rc
    rec = rc.elementwise * fwd + (1.0 - rc.elementwise) * memory_time_s(_recomputed_op_bytes(lay, st), hbm, eff)
    route = route_rec = 0.0
    if lay.model.expert_mats:
        route = st.moe_frac * memory_time_s(_routing_bytes(lay, st), hbm, eff)
        route_rec = vec.maximum(rc.elementwise, rc.moe_region) * route
    return fwd, rec, route, route_rec


# ------------------------------------------------------------------------- the layer
@dataclass(slots=True, eq=False)
class LayerTimes:
    """Seconds of the stage's average layer per micro-batch, by kind of work."""

    gemm_fwd: Num
    gemm_rec: Num
    attn_fwd: Num
    attn_bwd: Num
    attn: AttentionTimes
    """The attention core in parts (ring blocks and merges under context parallelism)."""
    mem_fwd: Num
    mem_rec: Num
    launch_fwd: Num
    """Launch time left exposed forward (beside the device time), with the MoE dispatcher's host
    sync."""
    launch_bwd: Num
    launch_rec: Num
    fwd: Num
    """Forward: device time and exposed launches."""
    bwd: Num
    rec: Num
    """Recomputation, over the share of layers the policy covers."""
    expert_fwd: Num = 0.0
    """Of ``gemm_fwd``: the routed experts' grouped GEMMs."""
    expert_rec: Num = 0.0
    route_fwd: Num = 0.0
    """Of ``mem_fwd``: an MoE block's router scores and permutations."""
    route_rec: Num = 0.0
    adapter_fwd: Num = 0.0
    """LoRA adapters' GEMMs forward (backward runs twice these: both gradients train)."""


def moe_launches(lay: Layout, st: Stage) -> tuple[Num, Num]:
    """(kernels an MoE block launches forward beyond a dense MLP's, exposed host-sync launches) of
    the stage's average layer: the routed experts' GEMMs and activation (one kernel per weight
    matrix, or per local expert for :data:`PER_EXPERT_LAUNCHES`: Megatron-Core's fc1 (gate and up
    fused) and fc2 each), the shared experts' like a dense MLP, less the dense MLP's own; and
    :data:`MOE_HOST_SYNC_LAUNCHES` where the dispatcher syncs the host.

    The routing kernels (router softmax and top-k, permutation, sorts, unpermute: about 15 a block
    in Megatron-Core) are not counted: they run between the block's GEMMs, where a host running
    ahead hides them, and :func:`exposed_launch_s` charges launch time smoothly even then
    (a smooth maximum of device and launch time). Counted, they charged Grok-1's large layers launch time
    and let the fitted per-kernel cost absorb an unrelated bias of its fp8 tables (5.7 -> 8.7 us,
    and 0.4 points more held-out error on the dense tables); their bytes are priced
    (:func:`router_bytes`, :func:`moe_routing_bytes`)."""
    ms, k = lay.model, lay.kernels
    if not ms.expert_mats:
        return 0.0, 0.0
    n_mats = float(len(ms.expert_mats))
    experts = (2.0 * ms.moe_experts / lay.mesh.ep if k.grouped_impl in PER_EXPERT_LAUNCHES else n_mats) + 1.0
    shared = vec.where(ms.moe_shared > 0, n_mats + 1.0, 0.0)
    extra = experts + shared - (float(len(ms.mlp_mats)) + 1.0)
    sync = MOE_HOST_SYNC_LAUNCHES if k.moe_host_sync else 0.0
    return st.moe_frac * extra, st.moe_frac * sync * (lay.mesh.ep > 1)


def host_s_per_kernel(lay: Layout, kn: KnobValues) -> Num:
    """Host seconds per kernel launched: the stack's measured figure on a GPU host where its profile
    states one (``[kernels] host_us_per_kernel``), else the fitted ``op_overhead_us`` knob (on a
    CPU, the calibration's measured operator cost)."""
    measured = lay.kernels.host_us_per_kernel
    return vec.where(measured > 0, measured, kn.op_overhead_us) * 1e-6


def layer_times(lay: Layout, st: Stage, kn: KnobValues, g: GemmSpeed) -> LayerTimes:
    """The stage's average layer. The host launches kernels while the device runs earlier ones:
    a layer takes its device time or its launch time, whichever is longer, blended smoothly
    (:func:`exposed_launch_s`); compiling keeps the profile's share of the launch cost. An MoE
    block's routed experts may launch more kernels (:func:`moe_launches`), and a dispatcher that
    reads its token counts on the host exposes two launches per block forward."""
    gemm_fwd, gemm_rec, exp_fwd, exp_rec = layer_gemms(lay, st, g)
    adapter = 0.0
    if lay.run.adapters:
        adapter = adapter_gemms(lay, st, g)
        gemm_rec = gemm_rec * (1.0 + adapter / gemm_fwd)  # recomputed with the GEMMs they ride on
    attn = attention_core(lay, kn)
    attn_fwd, attn_bwd = attn.fwd, attn.bwd
    mem_fwd, mem_rec, route_fwd, route_rec = memory_bound(lay, st, kn)
    rc, train = st.rc, lay.run.trainable_fraction
    per_kernel = host_s_per_kernel(lay, kn)
    moe_extra, sync = moe_launches(lay, st)
    k = lay.kernels
    adapter_ops = ADAPTER_KERNELS * len(lay.run.adapters)
    ops = vec.where(k.ops_per_layer_fwd > 0, k.ops_per_layer_fwd, KERNELS_PER_LAYER_FWD)
    counted = k.moe_ops_per_layer_fwd > 0  # an MoE layer's own count holds its extra kernels
    ops = vec.where(counted, ops + st.moe_frac * (k.moe_ops_per_layer_fwd - ops), ops)
    moe_extra = vec.where(counted, 0.0, moe_extra)
    launch = (ops + adapter_ops + attn.extra_kernels + moe_extra) * per_kernel
    if lay.kernels.compiled:  # fewer, fused kernels: the profile says how much of the launch cost stays
        launch = launch * kn.compile_overhead_factor
    dev_fwd = gemm_fwd + adapter + attn_fwd + mem_fwd
    dev_bwd = (1.0 + train) * gemm_fwd + 2.0 * adapter + attn_bwd + 2.0 * mem_fwd
    dev_rec = gemm_rec + rc.attention_core * attn_fwd + mem_rec
    l_fwd = exposed_launch_s(dev_fwd, launch, k.host_bound) + sync * per_kernel
    l_bwd = exposed_launch_s(dev_bwd, 2.0 * launch, k.host_bound)
    l_rec = exposed_launch_s(dev_rec, rc.elementwise * launch, k.host_bound) + rc.moe_region * sync * per_kernel
    return LayerTimes(gemm_fwd, gemm_rec, attn_fwd, attn_bwd, attn, mem_fwd, mem_rec, l_fwd, l_bwd, l_rec,
                      dev_fwd + l_fwd, dev_bwd + l_bwd, st.rec_frac * (dev_rec + l_rec), exp_fwd, exp_rec,
                      route_fwd, route_rec, adapter)


@dataclass(slots=True, eq=False)
class HeadTimes:
    """The LM head and loss of the last stage, per micro-batch."""

    gemm: Num
    loss: Num
    """The loss' memory-bound kernels, forward and backward."""
    fwd: Num
    bwd: Num


def head_times(lay: Layout, st: Stage, kn: KnobValues, g: GemmSpeed) -> HeadTimes:
    """LM head GEMM (in 16 bits under fp8: :data:`HEAD_16BIT_UNDER_FP8`) and the loss, half of it
    each way: its bytes per logit as the stack runs it (``[kernels] cross_entropy``: separate
    PyTorch ops, :data:`EAGER_LOSS_BYTES_PER_LOGIT`, or fused or compiled,
    :data:`LOSS_BYTES_PER_LOGIT`)."""
    ms, d, train = lay.model, lay.device, lay.run.trainable_fraction
    head_16 = lay.run.fp8 & HEAD_16BIT_UNDER_FP8
    n_head = ms.vocab / lay.mesh.tp
    gemm = vec.where(head_16, sixteen_bit_speed(lay, kn).time_s(st.m_tok, n_head, ms.hidden),
                     g.time_s(st.m_tok, n_head, ms.hidden))
    loss = memory_time_s(st.m_tok * ms.vocab / lay.mesh.tp * lay.kernels.loss_traffic_bytes, d.hbm_bytes_per_s,
                         lay.kernels.elementwise_fraction * kn.memory_bound_fraction)
    launch = 3 * host_s_per_kernel(lay, kn)
    fwd = gemm + 0.5 * loss
    bwd = (1.0 + train) * gemm + 0.5 * loss
    hb = lay.kernels.host_bound
    return HeadTimes(gemm, loss, fwd + exposed_launch_s(fwd, launch, hb), bwd + exposed_launch_s(bwd, launch, hb))


# --------------------------------------------------------------------- the slowest rank
@dataclass(slots=True, eq=False)
class Compute:
    """Compute of one micro-batch on the slowest pipeline rank."""

    layer: LayerTimes
    head: HeadTimes
    layers: Num
    """Layers of the slowest rank: the last (with the LM head and loss, and its multi-token-
    prediction blocks) or the busiest other."""
    head_on: Num
    """Heads and losses the slowest rank runs: 1 + the multi-token-prediction modules on the last
    rank, else 0."""
    fwd_mb: Num
    bwd_mb: Num
    rec_mb: Num
    mtp_proj: Num = 0.0
    """Forward seconds of the multi-token-prediction modules' ``2h -> h`` projections on the
    slowest rank."""

    @property
    def mb_s(self) -> Num:
        return self.fwd_mb + self.bwd_mb + self.rec_mb


def compute(lay: Layout, st: Stage, kn: KnobValues) -> Compute:
    """Compute per micro-batch of the slowest pipeline rank: the last (its layers plus the LM head
    and loss, and each multi-token-prediction module: one more layer, its ``2h -> h`` projection
    and one more head and loss) or, with an uneven split, a busier earlier one.

    Under DualPipe rank ``i`` runs stage ``i`` for the micro-batches entering at one end and stage
    ``pp - 1 - i`` for those entering at the other, half of them each (DeepSeek-V3 report,
    section 3.2.1): per micro-batch, the mean of the two. The first rank's pair is the first and
    the last stage (the head, the loss and the multi-token-prediction modules at half their
    count); a middle rank's pair, two middle stages. Under DualPipeV rank 0 holds the first and
    the last of ``2 * pp`` stages: its layers, the head and the loss for every micro-batch."""
    g = gemm_speed(lay, kn)
    lt, ht, m = layer_times(lay, st, kn, g), head_times(lay, st, kn, g), lay.mesh
    mtp = lay.model.mtp_layers
    per_layer = lt.fwd + lt.bwd + lt.rec
    proj = mtp * g.time_s(st.m_tok, lay.model.hidden, 2.0 * lay.model.hidden)
    share = vec.where(m.dualpipe, 0.5, 1.0)  # of the last stage's work on its rank, per micro-batch
    end_layers = vec.where(m.dualpipe, 0.5 * (m.layers_first + m.layers_last + mtp),
                           vec.where(m.dualpipev, m.layers_first, m.layers_last) + mtp)
    others = vec.where(m.dualpipe, m.layers_mid, vec.maximum(vec.where(m.dualpipev, m.layers_last, m.layers_first),
                                                            m.layers_mid))
    last = (end_layers * per_layer + share * ((1.0 + mtp) * (ht.fwd + ht.bwd)
                                              + (2.0 + lay.run.trainable_fraction) * proj))
    crit_last = last >= others * per_layer
    n = vec.where(crit_last, end_layers, others)
    on = vec.where(crit_last, share * (1.0 + mtp), 0.0)
    p_on = vec.where(crit_last, share * proj, 0.0)
    return Compute(lt, ht, n, on, n * lt.fwd + on * ht.fwd + p_on,
                   n * lt.bwd + on * ht.bwd + (1.0 + lay.run.trainable_fraction) * p_on, n * lt.rec, p_on)
