"""FLOPs per token of a live ``nn.Module``, counted on the meta device.

For models trainperf has no :class:`~trainperf.specs.model.ModelSpec` preset for: run one
forward (and one backward) of the module with every parameter, buffer and input replaced by a
``meta`` tensor (shapes only, no memory, no arithmetic) under
:class:`torch.utils.flop_counter.FlopCounterMode`, and divide by the tokens in the batch.

What is counted (PyTorch's FLOP registry, 2 FLOPs per multiply-add): ``aten.mm``, ``addmm``,
``bmm``, ``baddbmm``, ``matmul`` decompositions, convolutions, and the scaled-dot-product
attention kernels (flash / efficient / cuDNN / CPU flash, forward and backward). What is left
out: every elementwise and reduction op (norms, activations, softmax outside SDPA, RoPE,
residual adds, the loss), embedding lookups (a gather, not a matmul), and the optimizer step.
Attention through SDPA is counted for the FULL score matrix even when ``is_causal=True``
(PyTorch counts the kernel's nominal work), so the result matches trainperf's ``palm``-style
attention term, not the ``megatron`` convention's causal halving; see
:mod:`trainperf.accounting.conventions`.

``training_flops_per_token`` is forward + backward: the backward of ``out.sum()`` (no matmul of
its own), so it is the model's activation and weight gradients, typically 2x the forward
(Kaplan et al. 2020: 6N per token for training vs 2N for the forward). Gradients of frozen
parameters (``requires_grad=False``, e.g. LoRA's base) are not computed, so the count follows
the parameters that actually train.

Data-dependent reads (``tensor.item()``, ``if mask.all():``) have no value on the meta device;
they read as 1 / ``True`` here (for Hugging Face models: the "no padding, no packed sequences"
path of the mask code, which only changes elementwise work) and are counted in
``FlopCount.scalar_reads_assumed``. Models whose SHAPES depend on data (MoE token routing with
dropped tokens) cannot be counted exactly this way; use the accounting for those.

The module itself is not modified: parameters and buffers are substituted with
:func:`torch.func.functional_call`, so this works on a model already on a GPU with real weights,
or on one built under ``torch.device("meta")``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from trainperf.errors import SpecError


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one forward (and backward) of a module, per token of the batch."""

    forward_flops_per_token: float
    """Forward matmul/conv/attention FLOPs per token."""
    training_flops_per_token: float
    """Forward + backward FLOPs per token (what MFU's numerator counts per token)."""
    batch: int
    seq_len: int
    forward_by_op: dict[str, float] = field(default_factory=dict)
    """Forward FLOPs of the whole batch per aten op (``mm``, ``bmm``, ``_scaled_dot_product_...``)."""
    backward_by_op: dict[str, float] = field(default_factory=dict)
    scalar_reads_assumed: int = 0
    """Data-dependent scalar reads answered with 1 / True (see the module docstring)."""

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len

    @property
    def backward_flops_per_token(self) -> float:
        return self.training_flops_per_token - self.forward_flops_per_token


def _first_tensor(out: Any) -> torch.Tensor:
    """The output to differentiate: a tensor, ``.logits`` (Hugging Face), or the first tensor
    of a tuple/list/dict."""
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    items = out.values() if isinstance(out, dict) else out if isinstance(out, list | tuple) else ()
    for x in items:
        if isinstance(x, torch.Tensor):
            return x
    raise SpecError("module output", type(out).__name__, "a tensor, an object with .logits, or a tuple/dict of tensors")


def _meta_scalar_mode() -> Any:
    """A dispatch mode answering ``.item()`` / ``bool()`` of meta tensors with 1 / True."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class MetaScalars(TorchDispatchMode):
        reads = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta":
                MetaScalars.reads += 1
                dtype = args[0].dtype
                return True if dtype == torch.bool else 1.0 if dtype.is_floating_point else 1
            return func(*args, **(kwargs or {}))

    return MetaScalars()


def _by_op(counter: Any) -> dict[str, float]:
    counts = counter.get_flop_counts().get("Global", {})
    return {str(getattr(op, "__name__", op)).split(".")[0]: float(n) for op, n in counts.items()}


def count_flops_per_token(
    module: nn.Module,
    seq_len: int,
    *,
    batch: int = 1,
    vocab_size: int | None = None,
    make_inputs: Callable[[int, int], tuple[tuple[Any, ...], dict[str, Any]]] | None = None,
    backward: bool = True,
) -> FlopCount:
    """FLOPs per token of ``module`` for ``batch`` sequences of ``seq_len`` tokens (module doc).

    By default the module is called as ``module(input_ids)`` with ``input_ids`` a ``long``
    meta tensor of shape ``(batch, seq_len)`` (Hugging Face causal LMs and trainperf's
    reference model take this). ``make_inputs(batch, seq_len) -> (args, kwargs)`` builds other
    inputs; its tensors are moved to the meta device. ``vocab_size`` is accepted for
    documentation of the token ids and is not needed on the meta device.
    """
    _check_arguments(module, seq_len, batch)
    from torch.func import functional_call
    from torch.utils.flop_counter import FlopCounterMode

    del vocab_size  # token values do not exist on the meta device; only shapes matter
    meta = torch.device("meta")
    state = _meta_state(module, meta)
    args, kwargs = _meta_inputs(batch, seq_len, make_inputs, meta)

    def forward() -> Any:
        return functional_call(module, state, args, kwargs)

    passes = _count_passes(module, forward, FlopCounterMode, backward)
    tokens = batch * seq_len
    return FlopCount(forward_flops_per_token=passes.forward / tokens,
                     training_flops_per_token=(passes.forward + passes.backward) / tokens,
                     batch=batch, seq_len=seq_len, forward_by_op=passes.forward_by_op,
                     backward_by_op=passes.backward_by_op, scalar_reads_assumed=passes.scalar_reads)


def _check_arguments(module: nn.Module, seq_len: int, batch: int) -> None:
    """Reject a non-positive (or non-int) ``seq_len`` / ``batch`` and a ``module`` that is not one."""
    for name, v in (("seq_len", seq_len), ("batch", batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise SpecError(name, v, "a positive integer")
    if not isinstance(module, nn.Module):
        raise SpecError("module", type(module).__name__, "a torch.nn.Module")


def _meta_state(module: nn.Module, meta: torch.device) -> dict[str, torch.Tensor]:
    """Meta stand-ins for the module's parameters (keeping ``requires_grad``) and buffers."""
    params = {n: torch.empty_like(p, device=meta).requires_grad_(p.requires_grad)
              for n, p in module.named_parameters()}
    buffers = {n: torch.empty_like(b, device=meta) for n, b in module.named_buffers()}
    return {**params, **buffers}


def _meta_inputs(batch: int, seq_len: int,
                 make_inputs: Callable[[int, int], tuple[tuple[Any, ...], dict[str, Any]]] | None,
                 meta: torch.device) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's ``(args, kwargs)`` on the meta device: ``make_inputs``'s, else one
    ``(batch, seq_len)`` tensor of token ids."""
    if make_inputs is None:
        return (torch.zeros(batch, seq_len, dtype=torch.long, device=meta),), {}

    def to_meta(x: Any) -> Any:
        return torch.empty_like(x, device=meta) if isinstance(x, torch.Tensor) else x

    a, kw = make_inputs(batch, seq_len)
    return tuple(to_meta(x) for x in a), {k: to_meta(v) for k, v in kw.items()}


@dataclass(frozen=True)
class _Passes:
    """FLOPs of the whole batch in the forward and the backward pass, by aten op, and the
    data-dependent scalar reads answered with 1 / True."""

    forward: float
    forward_by_op: dict[str, float]
    backward: float
    backward_by_op: dict[str, float]
    scalar_reads: int


def _count_passes(module: nn.Module, forward: Callable[[], Any], counter_mode: Callable[..., Any],
                  backward: bool) -> _Passes:
    """Count one ``forward()`` and (when ``backward``) the backward of its output's sum under
    ``counter_mode`` (``FlopCounterMode``), in training mode; the module's mode is restored."""
    was_training = module.training
    module.train()  # training-mode graph (dropout and the like take part as in a training step)
    scalars = _meta_scalar_mode()
    try:
        with counter_mode(display=False) as fwd_counter, scalars:
            out = _first_tensor(forward())
        fwd = float(fwd_counter.get_total_flops())
        fwd_ops = _by_op(fwd_counter)
        bwd, bwd_ops = 0.0, {}
        if backward and out.requires_grad:
            with counter_mode(display=False) as bwd_counter, scalars:
                out.sum().backward()
            bwd, bwd_ops = float(bwd_counter.get_total_flops()), _by_op(bwd_counter)
    finally:
        module.train(was_training)
    return _Passes(fwd, fwd_ops, bwd, bwd_ops, type(scalars).reads)
