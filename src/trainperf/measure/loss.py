"""The LM head and the cross-entropy in one pass, chunked over tokens (no full logits tensor).

``F.cross_entropy(output(h))`` materialises the (tokens x vocab) logits, then their
log-softmax, then (in the backward) a zero-filled gradient of the same size and the
log-softmax backward: four passes over a tensor that, for a 32k vocabulary and 1024 tokens, is
131 MB in fp32, far beyond any CPU cache. :func:`linear_cross_entropy` instead walks the tokens
in chunks (:func:`chunk_tokens`: 32 MiB of fp32 logits per chunk on a CPU, 1 GiB on a GPU): per
chunk it computes the logits, their log-sum-exp and the loss, turns the logits
in place into their gradient (softmax minus one-hot) and does the head's two backward matmuls
right there, keeping only ``dL/dh`` and ``dL/dW`` for the backward (which just scales them).

Same model, same maths, same FLOPs (the head's forward and both backward matmuls are still
done, 6 x tokens x hidden x vocab), the same mean next-token loss in fp32; only memory traffic
is saved. The technique is Liger-Kernel's fused linear cross-entropy (Hsu et al. 2024), here in
plain PyTorch. Used by the bench for a single-process, unsharded head (see the trainer).
"""

from __future__ import annotations

import torch

CHUNK_TOKENS = 256
"""The fewest tokens per chunk, and the step chunk sizes come in."""

CHUNK_BYTES = {"cpu": 32 * 2**20}
"""The fp32 logits block one chunk may hold, by device type: 32 MiB on a CPU (256 tokens at a 32k
vocabulary); :data:`DEFAULT_CHUNK_BYTES` elsewhere."""

DEFAULT_CHUNK_BYTES = 2**30
"""1 GiB on a GPU. Every chunk adds its (vocab x hidden) ``dL/dW`` into the fp32 accumulator, a
pass over the whole head: at 256 tokens a Llama 3.2 1B step (8,192 tokens, vocab 128,256) made
32 such passes, ~50 ms of a 226 ms step on an H200 (``benchmarks/gpu_profile.py``, 2026-11-28:
fp32 adds and casts of the head's size); at 1 GiB it makes 4."""


def chunk_tokens(vocab: int, device_type: str) -> int:
    """Tokens per chunk for ``vocab`` on ``device_type``: the device's logits budget
    (:data:`CHUNK_BYTES`), rounded down to a multiple of :data:`CHUNK_TOKENS`, at least that."""
    budget = CHUNK_BYTES.get(device_type, DEFAULT_CHUNK_BYTES)
    return max(CHUNK_TOKENS, budget // (4 * max(1, vocab)) // CHUNK_TOKENS * CHUNK_TOKENS)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                compute_dtype: torch.dtype | None, chunk: int) -> torch.Tensor:
        n = h.shape[0]
        dt = compute_dtype or h.dtype
        with torch.autocast(h.device.type, enabled=False):
            w = weight.to(dt)
            hh = h.to(dt)
            # A frozen head (LoRA) or input needs no gradient: skip its matmul, as autograd would.
            grad_h = torch.empty_like(h) if h.requires_grad else None
            grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) \
                if weight.requires_grad else None
            total = torch.zeros((), dtype=torch.float32, device=h.device)
            for s in range(0, n, chunk):
                hc, tc = hh[s:s + chunk], targets[s:s + chunk]
                logits = (hc @ w.t()).float()
                # Stable log-softmax in place: shift by the row max, exponentiate, normalise.
                logits.sub_(logits.amax(dim=-1, keepdim=True))
                target = logits.gather(1, tc[:, None]).squeeze(1)
                sums = logits.exp_().sum(dim=-1, keepdim=True)
                total += (sums.log().squeeze(1) - target).sum()
                g = logits.div_(sums)  # softmax
                g[torch.arange(g.shape[0], device=g.device), tc] -= 1.0
                g = g.to(dt)
                if grad_h is not None:
                    grad_h[s:s + chunk] = g @ w
                if grad_w is not None:
                    grad_w += (g.t() @ hc).float()
        ctx.grads = (grad_h, grad_w)
        ctx.n, ctx.w_dtype = n, weight.dtype
        return total / n

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        grad_h, grad_w = ctx.grads
        ctx.grads = None
        scale = grad_out / ctx.n
        return (None if grad_h is None else grad_h * scale.to(grad_h.dtype),
                None if grad_w is None else (grad_w * scale).to(ctx.w_dtype), None, None, None)


def linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                         compute_dtype: torch.dtype | None = None, chunk: int | None = None) -> torch.Tensor:
    """Mean cross-entropy of ``h @ weight.T`` against ``targets``, computed chunk by chunk.

    ``h``: (..., hidden) final hidden states (after the last norm); ``weight``: the LM head
    (vocab x hidden); ``targets``: (...) token ids. Matmuls run in ``compute_dtype`` (the
    autocast dtype; default ``h``'s), the softmax and the loss in fp32, ``dL/dweight`` is
    accumulated in fp32. ``chunk``: tokens per chunk (default :func:`chunk_tokens` for the
    head's vocabulary and device). Equal to ``F.cross_entropy((h @ weight.T).float().flatten(0, -2),
    targets.flatten())`` up to rounding (a test checks loss and gradients).
    """
    if chunk is None:
        chunk = chunk_tokens(weight.shape[0], weight.device.type)
    return _LinearCrossEntropy.apply(h.reshape(-1, h.shape[-1]), weight, targets.reshape(-1), compute_dtype, chunk)
