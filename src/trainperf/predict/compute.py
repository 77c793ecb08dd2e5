"""Compute time of one device: matmuls by shape, fused attention, memory-bound ops.

Pure functions of numbers; every argument may be a float or a numpy array (the planner
evaluates many plans at once), so only numpy ufuncs are used.

* A GEMM ``(m x k) @ (k x n)`` does ``2*m*n*k`` FLOPs (Kaplan et al. 2020) at
  ``peak * matmul_efficiency * s(m) * s(n) * s(k)`` with the shape factor
  ``s(d) = d / (d + matmul_half_dim)`` (small or skinny GEMMs cannot fill the tensor cores),
  but never faster than moving its operands through HBM (roofline, Williams et al. 2009).
* Fused (flash) attention: forward ``4 * b * s_q * s_k_avg * heads * head_dim`` FLOPs,
  backward 2.5x the forward (FlashAttention-2 runs five GEMMs backward versus two forward,
  Dao 2023), at ``peak * attention_efficiency``.
* Memory-bound ops take ``bytes / (hbm_bandwidth * memory_efficiency)``.
"""

from __future__ import annotations

from trainperf.predict import vec

FLASH_BACKWARD_FACTOR = 2.5
"""Backward/forward FLOP ratio of FlashAttention-2 (5 GEMMs vs 2, Dao 2023)."""


def shape_factor(d, half_dim):
    """``d / (d + half_dim)``: the fraction of peak a GEMM dimension of size ``d`` allows."""
    return d / (d + half_dim)


def matmul_time_s(m, n, k, peak_flops, efficiency, half_dim, hbm_bytes_per_s, bytes_per_elem=2.0):
    """Seconds for one ``(m x k) @ (k x n)`` GEMM: compute at the shaped efficiency, floored by
    the time to read both operands and write the result once (roofline)."""
    eff = efficiency * shape_factor(m, half_dim) * shape_factor(n, half_dim) * shape_factor(k, half_dim)
    t_compute = 2.0 * m * n * k / (peak_flops * eff)
    t_memory = bytes_per_elem * (m * k + k * n + m * n) / hbm_bytes_per_s
    return vec.maximum(t_compute, t_memory)


def attention_forward_flops(batch, q_len, kv_len_avg, heads, qk_dim, v_dim):
    """Forward FLOPs of the attention core: QK^T and PV, ``2*(qk_dim + v_dim)`` per computed pair.

    ``kv_len_avg`` is the mean number of keys a query attends to (``s/2`` for a causal mask that
    a fused kernel skips block-wise; the window for sliding-window layers)."""
    return 2.0 * batch * q_len * kv_len_avg * heads * (qk_dim + v_dim)


def attention_time_s(fwd_flops, peak_flops, efficiency):
    """(forward seconds, backward seconds) of a fused attention kernel."""
    t = fwd_flops / (peak_flops * efficiency)
    return t, FLASH_BACKWARD_FACTOR * t


def elementwise_bytes_per_token(hidden_norm, q_dim, kv_dim, ffn, gated, act_bytes=2.0, rope=True,
                                norm_passes=1.0, rope_passes=1.0, act_passes=1.0):
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


def moe_routing_bytes(tokens, received, topk, hidden, local_experts, act_bytes=2.0):
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


LOSS_BYTES_PER_LOGIT = 16.0
"""Cross-entropy, forward and backward, per logit: write bf16 logits (2), fp32 softmax read and
write (8), gradient write and read (6)."""

OPTIMIZER_BYTES_PER_PARAM = 34.0
"""AdamW step per local parameter: read fp32 master, m, v and grad (16), write master, m, v (12),
write the 16-bit working copy (2), read grads once more for clipping (4)."""


def memory_time_s(nbytes, hbm_bytes_per_s, efficiency):
    """Seconds to move ``nbytes`` through HBM at the achieved fraction of its bandwidth."""
    return nbytes / (hbm_bytes_per_s * efficiency)
