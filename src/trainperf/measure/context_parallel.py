"""Context parallelism for the bench: PyTorch's ``context_parallel`` API, extended to CPUs.

``torch.distributed.tensor.experimental.context_parallel`` (as torchtitan uses it) shards the
step's buffers -- input tokens, labels and the rotary tables -- along the sequence over the
``cp`` ranks, with causal load balancing (each rank holds chunk ``r`` and chunk ``2 cp - 1 - r``
of ``2 cp`` chunks, so every rank does the same share of the causal triangle), and replaces
``F.scaled_dot_product_attention`` by ring attention: each rank's K/V blocks travel round the
ring while its queries attend to them, the partial results merged through their log-sum-exp.

PyTorch dispatches the ring to its CUDA attention kernels (flash, memory-efficient, cuDNN).
On a CPU SDPA runs ``aten._scaled_dot_product_flash_attention_for_cpu``, which the API does not
handle: :func:`enable_cpu_ring_attention` registers handlers for it and its backward that run
the same ring (``_templated_ring_attention`` and its backward, PyTorch's own) over the CPU
kernel. Those are private functions of torch; a torch without them is refused in one line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from trainperf.errors import SpecError

SEQ_DIM = 2
"""Sequence dimension of SDPA's (batch, heads, seq, head_dim) tensors."""


def _ring_module() -> Any:
    try:
        from torch.distributed.tensor.experimental._context_parallel import _attention
    except ImportError:  # older layout (torch 2.6-2.8)
        from torch.distributed.tensor.experimental import _attention
    return _attention


def check_available(device_type: str) -> None:
    """Raise SpecError when this torch cannot run the bench's context parallel on ``device_type``."""
    try:
        from torch.distributed.tensor.experimental import context_parallel  # noqa: F401

        ring = _ring_module()
    except ImportError:
        raise SpecError("parallel.cp", "> 1", f"a torch with the context-parallel API (this is "
                        f"{torch.__version__}; it needs 2.7 or later)") from None
    needed = ("_templated_ring_attention", "_templated_ring_attention_backward", "custom_ops")
    if device_type == "cpu" and not all(hasattr(ring, n) for n in needed):
        raise SpecError("parallel.cp", "> 1", f"a torch whose ring attention runs on CPUs (torch "
                        f"{torch.__version__} lacks {', '.join(n for n in needed if not hasattr(ring, n))})")


def _wrap(local: tuple[torch.Tensor, ...], like: Any) -> tuple[Any, ...]:
    """Local results as DTensors sharded on the sequence like ``like`` (a q/k/v DTensor)."""
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

    mesh = like.device_mesh
    out = []
    for t in local:
        shape = list(t.shape)
        shape[SEQ_DIM] *= mesh.size()
        meta = torch.empty(shape, dtype=t.dtype, device="meta")
        spec = DTensorSpec(mesh, (Shard(SEQ_DIM),), tensor_meta=TensorMeta(meta.shape, meta.stride(), t.dtype))
        out.append(DTensor(t, spec, requires_grad=False))
    return tuple(out)


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


def _cpu_forward(op_call: Any, args: tuple, kwargs: dict) -> tuple[Any, ...]:
    """Ring attention over the CPU flash kernel: (output, logsumexp) sharded on the sequence."""
    ring = _ring_module()
    q, k, v = args[:3]
    if kwargs.get("attn_mask") is not None:
        raise NotImplementedError("context parallel on a CPU supports the causal mask only")
    out, lse = ring._templated_ring_attention(
        q.device_mesh.get_group(), SEQ_DIM, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
        q.to_local(), k.to_local(), v.to_local(), is_causal=_arg(args, kwargs, 4, "is_causal", False),
        dropout_p=_arg(args, kwargs, 3, "dropout_p", 0.0), scale=kwargs.get("scale"))
    return _wrap((out, lse), q)


def _cpu_backward(op_call: Any, args: tuple, kwargs: dict) -> tuple[Any, ...]:
    """The ring's backward over the CPU flash kernel's backward: (dq, dk, dv)."""
    ring = _ring_module()
    grad_out, q, k, v, out, lse = args[:6]
    grads = ring._templated_ring_attention_backward(
        q.device_mesh.get_group(), SEQ_DIM,
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
        grad_out=grad_out.to_local(), grad_out_name="grad_out", query=q.to_local(), key=k.to_local(),
        value=v.to_local(), out=out.to_local(), logsumexp=lse.to_local(),
        is_causal=_arg(args, kwargs, 7, "is_causal", False), dropout_p=_arg(args, kwargs, 6, "dropout_p", 0.0),
        scale=kwargs.get("scale"))
    return _wrap(tuple(grads[:3]), q)


def enable_cpu_ring_attention() -> None:
    """Register the CPU flash kernel with the context-parallel dispatcher (idempotent)."""
    ring = _ring_module()
    aten = torch.ops.aten
    ring.custom_ops[aten._scaled_dot_product_flash_attention_for_cpu.default] = _cpu_forward
    ring.custom_ops[aten._scaled_dot_product_flash_attention_for_cpu_backward.default] = _cpu_backward


@contextlib.contextmanager
def sharded(cp_mesh: Any, tokens: torch.Tensor, labels: torch.Tensor, rope: list[torch.Tensor]) -> Iterator[None]:
    """Within: ``tokens``/``labels`` (batch, seq) and the rotary tables (seq, dim) hold this rank's
    load-balanced share of the sequence (sharded in place), and SDPA runs ring attention. The
    rotary tables are restored on exit; the batch is not (it is used once)."""
    from torch.distributed.tensor.experimental import context_parallel

    if cp_mesh.device_type == "cpu":
        enable_cpu_ring_attention()
    with context_parallel(cp_mesh, buffers=[tokens, labels, *rope], buffer_seq_dims=[1, 1] + [0] * len(rope),
                          no_restore_buffers={tokens, labels}):
        yield
