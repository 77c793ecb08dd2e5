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
attention never stores them, which :func:`activation_bytes_per_layer` assumes. That function
also generalises the ``34`` to GQA widths and gated MLPs (see its docstring).
"""

from __future__ import annotations

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


def saved_activation_bytes_per_layer(s, b, h, q_dim, kv_dim, ffn, t, sp, widths, act_bytes=2.0):
    """Activation bytes one layer keeps per micro-batch under a checkpointing policy.

    ``widths`` (:class:`trainperf.accounting.recompute.SavedWidths`) counts the kept tensors of
    each width, derived from the policy's kept-tensor list: hidden-wide ones are replicated over
    the tp ranks unless sequence parallel (then split ``t`` ways); query, key/value and MLP-wide
    ones are split ``t`` ways. With ``none`` this is :func:`activation_bytes_per_layer` (flash
    attention); with ``full`` the layer input only. Fused attention is assumed (no scores kept).
    """
    rep = widths.h * h / vec.where(sp, t, 1.0)
    split = (widths.q * q_dim + widths.kv * kv_dim + widths.ffn * ffn) / t
    return s * b * act_bytes * (rep + split)


def state_bytes(params, precision_kind, shards_weights, shards_grads, shards_optimizer):
    """(weights, gradients, optimizer) bytes on one device for ``params`` parameters."""
    w, g, o = STATE_BYTES[precision_kind]
    return params * w / shards_weights, params * g / shards_grads, params * o / shards_optimizer


def inflight_microbatches(pp, vpp, grad_accum, schedule_interleaved):
    """Micro-batches whose activations the first pipeline stage holds at once.

    1F1B: ``min(pp, m)``; interleaved 1F1B holds ``1 + (pp-1)/(pp*v)`` times more
    (Narayanan et al. 2021, section 2.2.2); GPipe would hold all ``m`` (not modelled: treated as
    1F1B, which is what every framework runs by default).
    """
    base = vec.minimum(pp, grad_accum)
    factor = vec.where(schedule_interleaved, 1.0 + (pp - 1.0) / (pp * vpp), 1.0)
    return base * factor
