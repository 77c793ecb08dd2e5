"""Training FLOPs of a LoRA fine-tune, layer by layer, as autograd computes them.

The ``lora`` convention's short form (:func:`trainperf.accounting.conventions.model_flops_per_token`
with only an adapter fraction) is ``4 N + 6 N_adapters + 3 x attention core``: the frozen base
runs its forward and activation gradients but no weight gradients (the correction made in a forum thread on a 405B LoRA fine-tune on MI300X), the
adapters all three passes (Hu et al. 2021). Given the adapters themselves
(:class:`~trainperf.specs.lora.LoraSpec`), :func:`lora_flops_per_token` counts the same
terms per matmul and also leaves out what autograd skips: no gradient flows upstream of the
first trainable parameter, so the first layer's projections that read the (frozen) embedding
compute no activation gradient, nor does anything else whose inputs need none (the attention
core's backward, ``o``'s activation gradient... when no adapter precedes them). This is what
``torch.utils.flop_counter.FlopCounterMode`` measures on the bench's step; the difference from
the short form is about ``1 / (4 L)`` of the count, so it matters for small test models only.

Counted: matmuls, 2 FLOPs per multiply-add, attention core over the full score matrix (no
causal halving, like the ``palm`` family); the input embedding is a gather (no FLOPs). Left out:
elementwise work, norms, the loss, the optimizer.
"""

from __future__ import annotations

from trainperf.accounting.flops import forward_flops
from trainperf.specs.lora import LoraSpec
from trainperf.specs.model import ModelSpec

_ATTN_IN = ("q", "k", "v")
_MLP_IN = ("gate", "up")


def lora_flops_per_token(model: ModelSpec, seq_len: int, lora: LoraSpec) -> float:
    """Forward + backward FLOPs per token of one LoRA training step (module docstring)."""
    mats = {**{k: v for k, v in zip(("q", "k", "v", "o"), model.attention_matmuls().values(), strict=True)},
            **_mlp_roles(model)}
    adapted = set(lora.targets)
    r = lora.rank
    core_fwd = forward_flops(model, seq_len, "full").attention_core / seq_len / model.layers

    def linear(role: str, grad_in: bool) -> float:
        """Forward, activation gradient (if the input needs one) and the adapter's passes."""
        i, o = mats[role]
        flops = 2.0 * i * o * (2 if grad_in else 1)
        if role in adapted:  # A: fwd, weight grad, input grad if needed; B: all three
            flops += 2.0 * r * i * (3 if grad_in else 2) + 6.0 * r * o
        return flops

    total, grad = 0.0, False  # grad: does the residual stream entering the layer need a gradient?
    for _ in range(model.layers):
        total += sum(linear(t, grad) for t in _ATTN_IN)
        qkv_grad = grad or bool(adapted & set(_ATTN_IN))
        total += core_fwd * (3 if qkv_grad else 1)
        total += linear("o", qkv_grad)
        grad = grad or qkv_grad or "o" in adapted
        mlp_in = [t for t in _MLP_IN if t in mats]
        total += sum(linear(t, grad) for t in mlp_in)
        act_grad = grad or bool(adapted & set(mlp_in))
        total += linear("down", act_grad)
        grad = grad or act_grad or "down" in adapted
    head = 2.0 * model.vocab * model.hidden
    return total + head * (2 if grad else 1)


def _mlp_roles(model: ModelSpec) -> dict[str, tuple[int, int]]:
    mlp = model.dense_mlp_matmuls()
    roles = {"up": mlp["up_proj"], "down": mlp["down_proj"]}
    if "gate_proj" in mlp:
        roles["gate"] = mlp["gate_proj"]
    return roles
