"""The bench's reference decoder: a Llama-family transformer in plain, single-device PyTorch.

Built from the same :class:`~trainperf.specs.model.ModelSpec` the accounting uses, so the
module's parameter count is ``ModelSpec.total_params`` and its matmuls are those of
:func:`trainperf.accounting.flops.forward_flops` (a test checks both).

Covered: RMSNorm pre-norms, rotary positions (rotate-half form, theta 10000), grouped-query
attention (``kv_heads <= heads``) through ``F.scaled_dot_product_attention`` with the causal
mask, gated (SwiGLU/GeGLU) or plain (GELU/ReLU) MLPs, tied or untied embeddings, no biases,
and mixture-of-experts MLPs (:mod:`trainperf.measure.moe`: routed, shared and gated-shared
experts, leading or interleaved dense layers, DeepSeek's router bias).
Not covered (a :class:`~trainperf.errors.SpecError` says so): MLA, biases, LayerNorm,
qk-norm, learned/ALiBi positions, sliding-window and chunked attention, attention sinks, parallel
blocks, extra norms, multi-token prediction.

Module names follow torchtitan (``tok_embeddings``, ``layers.N.attention.wq`` ...,
``feed_forward.w1/w2/w3`` or ``moe.router/experts/shared_experts``, ``norm``, ``output``) so
that its tensor-parallel plan applies unchanged. Parallelism lives in :mod:`trainperf.measure.parallelize`, never here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from trainperf.errors import SpecError
from trainperf.specs.model import ModelSpec

ROPE_THETA = 10_000.0
NORM_EPS = 1e-5
INIT_STD = 0.02


def check_supported(spec: ModelSpec) -> None:
    """Raise SpecError for a ModelSpec feature the reference model does not implement."""
    unsupported = [
        ("mamba_layers", spec.mamba_layers, 0, "0 (Mamba-2 mixers are not implemented in the bench model)"),
        ("mlp_free_layers", spec.mlp_free_layers, 0, "0 (every bench block has an MLP)"),
        ("attention", spec.attention, "mha", "'mha' (MLA is not implemented in the bench model)"),
        ("bias", spec.bias, False, "false (the bench model has no biases)"),
        ("qkv_bias", spec.qkv_bias, False, "false (the bench model has no biases)"),
        ("qk_norm", spec.qk_norm, False, "false (qk-norm is not implemented in the bench model)"),
        ("norm", spec.norm, "rmsnorm", "'rmsnorm' (the bench model is Llama-style)"),
        ("position", spec.position, "rope", "'rope' (the bench model uses rotary positions)"),
        ("sliding_window", spec.sliding_window, 0, "0 (sliding windows are not implemented)"),
        ("attention_chunk", spec.attention_chunk, 0, "0 (chunked attention is not implemented)"),
        ("attn_bias", spec.attn_bias, False, "false (the bench model has no biases)"),
        ("mlp_bias", spec.mlp_bias, False, "false (the bench model has no biases)"),
        ("lm_head_bias", spec.lm_head_bias, False, "false (the bench model has no biases)"),
        ("moe_router_linear_bias", spec.moe_router_linear_bias, False, "false (the bench model has no biases)"),
        ("attention_sinks", spec.attention_sinks, False, "false (attention sinks are not implemented)"),
        ("parallel_residual", spec.parallel_residual, False, "false (the bench model is pre-norm sequential)"),
        ("norms_per_layer", spec.norms_per_layer, 2, "2 (the bench model has two pre-norms a block)"),
        ("mtp_layers", spec.mtp_layers, 0, "0 (multi-token prediction is not implemented)"),
    ]
    for field, value, ok, valid in unsupported:
        if value != ok:
            raise SpecError(f"model.{field}", value, valid)
    if spec.head_dim % 2:  # type: ignore[operator]
        raise SpecError("model.head_dim", spec.head_dim, "an even number (rotary embeddings pair dimensions)")


def rope_tables(head_dim: int, max_seq_len: int, theta: float = ROPE_THETA) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables of shape (max_seq_len, head_dim) in fp32 (Su et al. 2021, rotate-half form)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    t = torch.arange(max_seq_len, dtype=torch.float32)
    freqs = torch.outer(t, inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` of shape (batch, seq, heads, head_dim); cos/sin are (seq, head_dim)."""
    cos = cos[None, :, None, :].to(x.dtype)
    sin = sin[None, :, None, :].to(x.dtype)
    return x * cos + _rotate_half(x) * sin


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned scale (Zhang & Sennrich 2019); ``width`` weights."""

    def __init__(self, width: int, eps: float = NORM_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class Attention(nn.Module):
    """Grouped-query self-attention with rotary positions and a causal mask.

    Head counts are inferred from the projections' local widths at run time (``view(..., -1,
    head_dim)``), so the same code runs on tensor-parallel shards.
    """

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        h, hd = spec.hidden, spec.head_dim
        assert hd is not None and spec.kv_heads is not None
        self.head_dim = hd
        self.n_rep = spec.heads // spec.kv_heads
        self.wq = nn.Linear(h, spec.heads * hd, bias=False)
        self.wk = nn.Linear(h, spec.kv_heads * hd, bias=False)
        self.wv = nn.Linear(h, spec.kv_heads * hd, bias=False)
        self.wo = nn.Linear(spec.heads * hd, h, bias=False)
        self.recompute_core = False
        """Selective activation checkpointing: recompute the attention core in the backward."""

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.n_rep > 1:
            # Explicit repeat: the CPU flash kernel does not take enable_gqa, the math path does
            # (and is much slower); repeat_interleave costs one copy of K and V.
            k = k.repeat_interleave(self.n_rep, dim=1)
            v = v.repeat_interleave(self.n_rep, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, -1, self.head_dim)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if self.recompute_core and torch.is_grad_enabled():
            out = checkpoint(self._core, q, k, v, use_reentrant=False)
        else:
            out = self._core(q, k, v)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


ACTIVATIONS = {"swiglu": F.silu, "geglu": F.gelu, "gelu": F.gelu, "relu": F.relu}
"""The MLP activation of each ``ModelSpec.mlp`` the bench implements."""


class FeedForward(nn.Module):
    """Gated MLP ``w2(act(w1 x) * w3 x)`` (Shazeer 2020) or plain ``w2(act(w1 x))``, ``ffn``
    wide (default the model's ``ffn_hidden``; an MoE layer's shared experts pass theirs)."""

    def __init__(self, spec: ModelSpec, ffn: int | None = None) -> None:
        super().__init__()
        ffn = ffn or spec.ffn_hidden
        self.act = ACTIVATIONS[spec.mlp]
        self.gated = spec.gated_mlp
        self.w1 = nn.Linear(spec.hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, spec.hidden, bias=False)
        self.w3 = nn.Linear(spec.hidden, ffn, bias=False) if self.gated else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.act(self.w1(x))
        if self.w3 is not None:
            a = a * self.w3(x)
        return self.w2(a)


class TransformerBlock(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``; the MLP is ``moe`` (an
    :class:`~trainperf.measure.moe.MoE`) in an MoE layer, ``feed_forward`` otherwise."""

    def __init__(self, spec: ModelSpec, layer_id: int = 0) -> None:
        super().__init__()
        from trainperf.measure.moe import MoE

        self.attention_norm = RMSNorm(spec.hidden)
        self.attention = Attention(spec)
        self.ffn_norm = RMSNorm(spec.hidden)
        is_moe = spec.layer_is_moe(layer_id)
        self.feed_forward = None if is_moe else FeedForward(spec)
        self.moe = MoE(spec, layer_id) if is_moe else None
        self.checkpoint = False
        """Full activation checkpointing: keep only the block input, recompute the rest."""

    def _forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        mlp: nn.Module = self.moe if self.moe is not None else self.feed_forward
        return x + mlp(self.ffn_norm(x))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.checkpoint and torch.is_grad_enabled():
            return checkpoint(self._forward, x, cos, sin, use_reentrant=False)
        return self._forward(x, cos, sin)


class Transformer(nn.Module):
    """The decoder: embedding, ``layers`` blocks, final norm, LM head (optionally tied).

    ``forward(tokens)`` returns logits of shape (batch, seq, vocab) in the compute dtype.
    """

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        check_supported(spec)
        self.spec = spec
        self.tok_embeddings = nn.Embedding(spec.vocab, spec.hidden)
        self.layers = nn.ModuleList(TransformerBlock(spec, i) for i in range(spec.layers))
        self.norm = RMSNorm(spec.hidden)
        self.output = nn.Linear(spec.hidden, spec.vocab, bias=False)
        if spec.tied_embeddings:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rope_tables(spec.head_dim, spec.max_seq_len)  # type: ignore[arg-type]
        # Non-persistent: derived from the shape, so not part of a checkpoint.
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Normal(0, 0.02) weights (experts' too), unit norms (GPT-2 / Llama reference initialisation)."""
        from trainperf.measure.moe import GroupedExperts

        for m in self.modules():
            if isinstance(m, nn.Linear | nn.Embedding):
                nn.init.normal_(m.weight, mean=0.0, std=INIT_STD)
            elif isinstance(m, GroupedExperts):
                m.reset_parameters()
            elif isinstance(m, RMSNorm):
                nn.init.ones_(m.weight)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits for token ids. A pipeline stage (see :mod:`trainperf.measure.pipeline`) may lack
        the embedding (then it takes hidden states) or the head (then it returns them)."""
        h = self._trunk(tokens)
        if self.output is None:
            return h
        return self.output(self.norm(h))

    def features(self, tokens: torch.Tensor) -> torch.Tensor:
        """The LM head's input: the final-normed hidden states (``forward`` is ``output(features)``),
        for a loss that fuses the head (:func:`trainperf.measure.loss.linear_cross_entropy`)."""
        return self.norm(self._trunk(tokens))

    def _trunk(self, tokens: torch.Tensor) -> torch.Tensor:
        s = tokens.shape[1]
        if s > self.rope_cos.shape[0]:
            raise SpecError("training.seq_len", s, f"at most model.max_seq_len={self.rope_cos.shape[0]}")
        cos, sin = self.rope_cos[:s], self.rope_sin[:s]
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for layer in self.layers:
            h = layer(h, cos, sin)
        return h


def build_model(spec: ModelSpec, *, seq_len: int | None = None, seed: int = 0,
                device: str | torch.device = "cpu", exact_rope: bool = False) -> Transformer:
    """The reference model for ``spec``, initialised identically on every rank from ``seed``.

    ``seq_len`` longer than ``spec.max_seq_len`` raises the RoPE table's size (the shape, and so
    the parameter count, is unchanged); ``exact_rope``: the table is exactly ``seq_len`` long
    (context parallel shards it along the sequence like the tokens).
    """
    if seq_len is not None and (seq_len > spec.max_seq_len or exact_rope):
        spec = spec.replace(max_seq_len=seq_len)
    torch.manual_seed(seed)
    with torch.device(device):
        return Transformer(spec)


def num_params(module: nn.Module) -> int:
    """Parameters stored by ``module`` (a tied matrix once); DTensor shards count as their full size."""
    return sum(p.numel() for p in module.parameters())
