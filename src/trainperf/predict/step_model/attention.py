"""The attention core's time on one device: one causal kernel, or the blocks of a context-parallel
ring with their merges.

Without context parallelism a layer's attention is one fused causal kernel over the sequence, at
the kernel family's measured efficiency at that length (:mod:`trainperf.predict.kernels.attention`).

With context parallelism (``cp`` ranks) each rank holds ``s_loc = s/cp`` tokens; how it computes
depends on the stack's flavour (:mod:`.context_parallel`, :data:`.context_parallel.FLAVOURS`):

* **a ring** (Liu et al. 2023; PyTorch's ``context_parallel``, Transformer Engine's P2P CP): ``cp``
  steps, one attention call each, on the rank's queries and the K/V block it holds at that step.
  With causal load balancing (zigzag / head-tail: the sequence cut into ``2 cp`` chunks, rank
  ``r`` holding chunks ``r`` and ``2 cp - 1 - r``; Megatron-LM's ``get_batch_on_this_cp_rank``,
  PyTorch's ``_HeadTailLoadBalancer``) every step does the same work, ``s_loc^2 / 2`` query-key
  pairs: step 0 is a causal kernel over the rank's own ``s_loc`` tokens (the diagonal); each later
  step a non-causal half block, all queries against half the keys or half the queries against
  all keys (PyTorch ``_templated_ring_attention``: ``key.chunk(2)[0]`` for an earlier source
  rank, ``query.chunk(2)[1]`` for a later one). A half block ``s_loc x s_loc/2`` runs at the
  measured non-causal efficiency at its equal-area length ``s_loc / sqrt(2)`` (assumed: the
  curves are measured with queries = keys). Without load balancing the last rank's queries see
  every key: a causal diagonal and ``cp - 1`` full blocks, ``(2 cp - 1) / cp`` times the
  average work, while the first rank idles (zhuzilin/ring-flash-attention's README measures
  CP-8 "ring" at 61.5-68.8% of a single GPU against 84.1-93.6% for "zigzag", 8 H800/A100).
  Each block's partial output is merged into the running one through their log-sum-exp, and
  backward each block's gradients accumulate: memory-bound passes whose bytes the flavour
  states (:class:`~.context_parallel.Flavour`), at the stack's elementwise bandwidth.
* **one kernel over gathered keys** (MaxText's ``context_parallel_strategy = "all_gather"``):
  the K/V of every rank are all-gathered and the rank's queries attend to all keys in one
  causal-masked kernel, priced at the causal efficiency at the equal-area length
  ``sqrt(s_loc * s)``. Nothing to merge.
* **one kernel over the whole sequence for heads/cp heads** (DeepSpeed-Ulysses): causal at ``s``.

FLOPs are the same as without cp, split over the ranks (:func:`attention_forward_flops` with the
model's mean keys per query): ``cp`` does not change the work, only its kernels' sizes and the
merges. Beyond the longest measured length the kernel efficiency is held flat
(docs/KERNELS.md, "Long context").
"""

from __future__ import annotations

from dataclasses import dataclass

from trainperf import vec
from trainperf.predict.efficiency import KnobValues
from trainperf.predict.kernels import attention as k_attention
from trainperf.predict.step_model.context_parallel import Flavour
from trainperf.predict.step_model.layout import Flag, Layout, Num

FLASH_BACKWARD_FACTOR = 2.5
"""Backward/forward FLOP ratio of FlashAttention-2 (5 GEMMs vs 2, Dao 2023)."""

HALF_BLOCK_LENGTH = 0.5 ** 0.5
"""A load-balanced ring step's ``s_loc x s_loc/2`` block is priced at length ``s_loc / sqrt(2)``
(the square of equal area)."""


def attention_forward_flops(batch: Num, q_len: Num, kv_len_avg: Num, heads: Num, qk_dim: Num, v_dim: Num) -> Num:
    """Forward FLOPs of the attention core: QK^T and PV, ``2*(qk_dim + v_dim)`` per computed pair.

    ``kv_len_avg`` is the mean number of keys a query attends to (``s/2`` for a causal mask that
    a fused kernel skips block-wise; the window for sliding-window layers)."""
    return 2.0 * batch * q_len * kv_len_avg * heads * (qk_dim + v_dim)


def attention_efficiency(lay: Layout, seq: Num, causal: Flag, head_dim: Num | None = None) -> tuple[Num, Num]:
    """(forward, backward) fraction of the 16-bit peak the stack's attention kernel sustains on
    this silicon at ``seq`` tokens (queries = keys), causal or not (a bool, or an array of them
    with one per row). Rows of different head dims are looked up apart."""
    fam, sil = lay.kernels.attn_family, lay.kernels.silicon
    hd = lay.model.qk_head_dim if head_dim is None else head_dim
    if not vec.is_number(hd):
        import numpy as np

        hds = np.unique(hd)
        if len(hds) > 1:
            seq_a = np.broadcast_to(seq, np.shape(hd)).astype(float)
            causal_a = np.broadcast_to(causal, np.shape(hd))
            fw, bw = np.empty(np.shape(hd)), np.empty(np.shape(hd))
            for h in hds:
                sel = hd == h
                fw[sel], bw[sel] = attention_efficiency(lay, seq_a[sel], causal_a[sel], float(h))
            return fw, bw
        hd = float(hds[0])
    table = lay.kernels.attn_table

    def eff(mask: bool) -> tuple[Num, Num]:
        if table is not None:
            return k_attention.efficiency_from(table, seq, hd, mask)
        return k_attention.efficiency(sil, fam, seq, hd, mask)

    if vec.is_number(causal):
        return eff(bool(causal))
    cf, cb = eff(True)
    nf, nb = eff(False)
    return vec.where(causal, cf, nf), vec.where(causal, cb, nb)


@dataclass(slots=True, eq=False)
class AttentionTimes:
    """Seconds of one layer's attention core per micro-batch on the slowest rank (kernels and,
    with a ring, the merges of the blocks' results)."""

    fwd: Num
    bwd: Num
    first_fwd: Num
    """The first kernel (the ring's diagonal block, or the only kernel): the window the first
    K/V transfer or the K/V all-gather hides behind."""
    first_bwd: Num
    step_fwd: Num
    """One later ring step, kernel and merge (0 without a ring): the window of one transfer."""
    step_bwd: Num
    merge_fwd: Num
    """Merging the blocks' partial outputs (included in ``fwd``)."""
    merge_bwd: Num
    """Accumulating the blocks' gradients (included in ``bwd``)."""
    extra_kernels: Num
    """Kernels a layer launches forward beyond one attention call (the ring's calls and merges)."""


def _rank_shares(cp: Num, balanced: bool) -> tuple[Num, Num]:
    """(work of the slowest rank over the average, share of it in the diagonal block)."""
    if balanced:
        return 1.0 + 0.0 * cp, 1.0 / cp
    return (2.0 * cp - 1.0) / cp, 1.0 / (2.0 * cp - 1.0)


def attention_times(lay: Layout, kn: KnobValues, fl: Flavour) -> AttentionTimes:
    """The attention core of one layer per micro-batch (see the module docstring) under the
    stack's context-parallel :class:`~.context_parallel.Flavour` (no part with ``cp = 1``)."""
    ms, m = lay.model, lay.mesh
    rate = lay.device.attn_peak_flops * kn.attention_fraction
    if vec.is_number(m.cp) and m.cp <= 1:  # one causal kernel over the sequence
        flops = attention_forward_flops(m.micro_batch, ms.seq_len, ms.kv_avg, ms.heads / m.tp, ms.qk_head_dim,
                                        ms.v_head_dim)
        a_f, a_b = attention_efficiency(lay, ms.seq_len, True)
        fwd, bwd = flops / (rate * a_f), FLASH_BACKWARD_FACTOR * flops / (rate * a_b)
        return AttentionTimes(fwd, bwd, fwd, bwd, 0.0, 0.0, 0.0, 0.0, 0.0)
    s_loc = ms.seq_len / m.cp
    work, diag = _rank_shares(m.cp, fl.load_balance)
    flops = work * attention_forward_flops(m.micro_batch, s_loc, ms.kv_avg, ms.heads / m.tp, ms.qk_head_dim,
                                           ms.v_head_dim)
    if fl.ring:  # the diagonal block causal at s_loc, the other steps non-causal blocks
        d_f, d_b = attention_efficiency(lay, s_loc, True)
        o_f, o_b = attention_efficiency(lay, s_loc * (HALF_BLOCK_LENGTH if fl.load_balance else 1.0), False)
    else:  # one kernel: the rank's queries over the gathered keys, or all queries of heads/cp heads
        length = ms.seq_len if fl.kv_exchange == "all-to-all" else (s_loc * ms.seq_len) ** 0.5
        d_f, d_b = attention_efficiency(lay, length, True)
        o_f, o_b, diag = d_f, d_b, 1.0
    first_f, first_b = diag * flops / (rate * d_f), FLASH_BACKWARD_FACTOR * diag * flops / (rate * d_b)
    rest_f = (1.0 - diag) * flops / (rate * o_f)
    rest_b = FLASH_BACKWARD_FACTOR * (1.0 - diag) * flops / (rate * o_b)
    merge_f, merge_b, kernels = _merges(lay, kn, fl)
    steps = vec.maximum(m.cp - 1.0, 1.0)
    on = m.cp > 1
    return AttentionTimes(first_f + rest_f + merge_f, first_b + rest_b + merge_b, first_f, first_b,
                          vec.where(on, (rest_f + merge_f) / steps, 0.0), vec.where(on, (rest_b + merge_b) / steps, 0.0),
                          merge_f, merge_b, kernels)


def _merges(lay: Layout, kn: KnobValues, fl: Flavour) -> tuple[Num, Num, Num]:
    """(forward, backward) seconds of a ring's merges and accumulations on the slowest rank, and
    the kernels they launch forward: the flavour's bytes per element of the rank's query rows
    (``Q = b s_loc heads/tp head_dim``) and key or value rows (``K = b s_loc kv_width``) per
    step and per layer (:class:`~.context_parallel.Flavour`), at the stack's elementwise
    bandwidth. 0 with ``cp = 1``."""
    ms, m = lay.model, lay.mesh
    tokens = m.micro_batch * ms.seq_len / m.cp
    q = tokens * ms.q_dim / m.tp
    kv = tokens * ms.head_dim * vec.maximum(ms.kv_heads / m.tp, 1.0)
    steps, on = m.cp - 1.0, m.cp > 1
    f_bytes = steps * (fl.fwd_q_step * q + fl.fwd_kv_step * kv) + fl.fwd_q_once * q
    b_bytes = steps * (fl.bwd_q_step * q + fl.bwd_kv_step * kv) + fl.bwd_q_once * q + fl.bwd_kv_once * kv
    bw = lay.device.hbm_bytes_per_s * lay.kernels.elementwise_fraction * kn.memory_bound_fraction
    return (vec.where(on, f_bytes / bw, 0.0), vec.where(on, b_bytes / bw, 0.0),
            vec.where(on, steps * fl.kernels_per_step, 0.0))
