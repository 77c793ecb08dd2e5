"""Exact per-op FLOP breakdown of one forward pass of a decoder-only transformer.

A multiply-add counts as 2 FLOPs. For a matmul of an (m x k) by a (k x n) matrix that is
``2*m*k*n`` (Kaplan et al. 2020, section 2.1; Narayanan et al. 2021, appendix). Everything the
named conventions of :mod:`trainperf.accounting.conventions` report is derived from this one
breakdown.

Counted, per sequence of ``seq_len`` tokens:

* ``attn_qkv``: query/key/value projections (for MLA: the down/up projections of queries and of
  the joint KV latent);
* ``attn_scores``: Q.K^T, ``2 * heads * qk_head_dim`` per (query, key) pair that is computed;
* ``attn_values``: softmax(QK^T).V, ``2 * heads * v_head_dim`` per pair;
* ``attn_out``: output projection;
* ``mamba_proj``: a hybrid's Mamba-2 mixers' input and output projections;
* ``mamba_scan``: their state-space scan by the chunked SSD algorithm
  (:meth:`~trainperf.specs.model.ModelSpec.ssd_flops_per_token`: mostly small matmuls within a
  chunk, so counted with the matmuls, as Megatron-LM's hybrid FLOP count counts its scan term);
* ``mlp``: dense MLP matmuls (2 or 3 matrices);
* ``moe_router``: router logits (and Qwen2-MoE's shared-expert gate, one more output);
* ``moe_experts``: the top-k routed experts plus shared experts each token visits;
* ``lm_head``: the output projection onto the vocabulary (counted for a tied head too);
* ``mtp``: the multi-token-prediction modules (DeepSeek-V3): each one transformer block like the
  last (its projections, attention core over the whole sequence, MLP or routed + shared experts
  and router), the ``2h -> h`` projection and one more pass through the LM head;
* ``embedding``: 0 (the input embedding is a lookup, not a matmul); kept as a row to say so;
* ``norms`` and ``elementwise`` (only when ``include_elementwise``): RMSNorm/LayerNorm about
  4 FLOPs per element, activation function and residual adds about 1-8 per element, softmax
  about 5 per score. These are estimates, never part of MFU in any convention.

The number of (query, key) pairs depends on the attention mask, chosen with ``attention``:

* ``"causal"``: the exact count of the causal mask, ``S*(S+1)/2`` per sequence (a sliding
  window of ``W`` caps each query at ``W`` keys; chunked attention with chunk ``C`` restarts the
  causal mask every ``C`` tokens: ``C*(C+1)/2`` per full chunk);
* ``"causal-half"``: ``S^2/2`` (Megatron-LM's halving, ``C^2/2`` per chunk; windowed layers as
  in ``causal``);
* ``"full"``: ``S^2`` (``S*W`` for windowed layers, ``C^2`` per chunk), as if no mask saved work; this is what
  PaLM's 12*L*H*Q*T term and the NeMo-legacy formula assume.

Left out: optimizer arithmetic, dropout, the loss' softmax over the vocabulary (estimated in
``elementwise`` only), communication.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainperf.errors import SpecError
from trainperf.specs.model import ModelSpec

ATTENTION_MASKS: tuple[str, ...] = ("causal", "causal-half", "full")
MATMUL_OPS: tuple[str, ...] = (
    "attn_qkv", "attn_scores", "attn_values", "attn_out", "mamba_proj", "mamba_scan", "mlp", "moe_router",
    "moe_experts", "lm_head", "embedding", "mtp",
)
ATTENTION_CORE_OPS: tuple[str, ...] = ("attn_scores", "attn_values")


@dataclass(frozen=True)
class FlopBreakdown:
    """Forward FLOPs per sequence, by op. ``ops`` maps op name -> FLOPs."""

    seq_len: int
    attention: str
    ops: dict[str, float] = field(default_factory=dict)
    layers: int = 0

    @property
    def matmul(self) -> float:
        """Forward matmul FLOPs per sequence (what model-FLOP conventions count)."""
        return sum(self.ops.get(k, 0.0) for k in MATMUL_OPS)

    @property
    def attention_core(self) -> float:
        """Q.K^T and attention x V: the part selective recomputation redoes."""
        return sum(self.ops.get(k, 0.0) for k in ATTENTION_CORE_OPS)

    @property
    def layers_matmul(self) -> float:
        """Forward matmul FLOPs inside the transformer blocks (no LM head, no embedding)."""
        return self.matmul - self.ops.get("lm_head", 0.0) - self.ops.get("embedding", 0.0)

    @property
    def per_token(self) -> dict[str, float]:
        return {k: v / self.seq_len for k, v in self.ops.items()}

    def total(self, include_elementwise: bool = False) -> float:
        extra = self.ops.get("norms", 0.0) + self.ops.get("elementwise", 0.0) if include_elementwise else 0.0
        return self.matmul + extra


def attention_pairs(model: ModelSpec, seq_len: int, attention: str = "causal") -> float:
    """(query, key) pairs computed per sequence, summed over layers, under the given mask.

    Layers fall in three groups (sliding-window, chunked, full; see
    :meth:`~trainperf.specs.model.ModelSpec.attention_context`), each with one closed form, so
    the cost does not grow with the layer count (the predictor calls this per prediction)."""
    if attention not in ATTENTION_MASKS:
        raise SpecError("attention", attention, f"one of {', '.join(ATTENTION_MASKS)}")
    s = seq_len
    n_sliding, n_chunked = model.sliding_window_layers, model.chunked_attention_layers
    n_full = model.attention_layers - n_sliding - n_chunked
    total = 0.0
    if n_sliding:
        w = min(model.sliding_window, s) if model.sliding_window else s
        total += n_sliding * (_window_pairs(s, w, attention) if w < s else _full_pairs(s, attention))
    if n_chunked:
        c = min(model.attention_chunk, s) if model.attention_chunk else s
        total += n_chunked * (_chunked_pairs(s, c, attention) if c < s else _full_pairs(s, attention))
    return total + n_full * _full_pairs(s, attention)


def _full_pairs(s: int, attention: str) -> float:
    """Pairs of one layer that attends over the whole sequence."""
    if attention == "causal":
        return s * (s + 1) / 2
    if attention == "causal-half":
        return s * s / 2
    return float(s * s)


def _window_pairs(s: int, w: int, attention: str) -> float:
    """Pairs of one sliding-window layer (w < s): query i sees min(i, w) keys (causal) or w (full)."""
    return w * (w + 1) / 2 + (s - w) * w if attention != "full" else float(s * w)


def _chunked_pairs(s: int, c: int, attention: str) -> float:
    """(query, key) pairs of one chunked-attention layer: the mask is causal within each chunk."""
    full, rest = divmod(s, c)
    if attention == "causal":
        return full * c * (c + 1) / 2 + rest * (rest + 1) / 2
    if attention == "causal-half":
        return full * c * c / 2 + rest * rest / 2
    return float(full * c * c + rest * rest)


def forward_flops(model: ModelSpec, seq_len: int, attention: str = "causal",
                  include_elementwise: bool = False) -> FlopBreakdown:
    """Forward FLOPs of one sequence by op (see the module docstring for what is counted)."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
        raise SpecError("seq_len", seq_len, "a positive integer")
    s, h, L = seq_len, model.hidden, model.layers
    attn_mats = model.attention_matmuls()
    out_key = "o_proj"
    qkv = sum(2 * i * o for name, (i, o) in attn_mats.items() if name != out_key)
    out_i, out_o = attn_mats[out_key]
    pairs = attention_pairs(model, seq_len, attention)
    A = model.attention_layers
    ops: dict[str, float] = {
        "attn_qkv": float(A * s * qkv),
        "attn_scores": 2.0 * model.heads * model.qk_head_dim * pairs,
        "attn_values": 2.0 * model.heads * model.v_dim_per_head * pairs,
        "attn_out": float(A * s * 2 * out_i * out_o),
        "mlp": float(model.dense_layers * s * sum(2 * i * o for i, o in model.dense_mlp_matmuls().values())),
        "moe_router": 0.0,
        "moe_experts": 0.0,
        "lm_head": float(s * 2 * h * model.vocab),
        "embedding": 0.0,
        "mtp": 0.0,
    }
    if model.mamba_layers:  # the keys only where they count, so a transformer's breakdown reads as before
        ops["mamba_proj"] = float(model.mamba_layers * s * sum(2 * i * o for i, o in model.mamba_matmuls().values()))
        ops["mamba_scan"] = model.mamba_layers * s * model.ssd_flops_per_token()
    mlp_block = float(s * sum(2 * i * o for i, o in model.dense_mlp_matmuls().values()))
    if model.is_moe:
        expert = sum(2 * i * o for i, o in model.dense_mlp_matmuls(model.moe_expert_ffn).values())
        router_out = model.moe_experts + (1 if model.moe_shared_expert_gate else 0)
        mlp_block = float(s * (2 * h * router_out + (model.moe_topk + model.moe_shared_experts) * expert))
        ops["moe_router"] = float(model.moe_layers * s * 2 * h * router_out)
        ops["moe_experts"] = float(model.moe_layers * s * (model.moe_topk + model.moe_shared_experts) * expert)
    if model.mtp_layers:
        core = 2.0 * model.heads * (model.qk_head_dim + model.v_dim_per_head) * _full_pairs(s, attention)
        block = s * (qkv + 2 * out_i * out_o) + core + mlp_block
        ops["mtp"] = float(model.mtp_layers * (block + s * 2 * (2 * h) * h + s * 2 * h * model.vocab))
    if include_elementwise:
        ffn_width = model.ffn_hidden
        ops["norms"] = float(s * (2 * L - model.mlp_free_layers + 1) * h * 4)
        act = 8 * ffn_width * (2 if model.gated_mlp else 1)
        ops["elementwise"] = float(model.mlp_layers * s * act + L * s * 2 * h + 5 * model.heads * pairs
                                   + 5 * s * model.vocab)
    return FlopBreakdown(seq_len=seq_len, attention=attention, ops=ops, layers=L)


def training_flops(model: ModelSpec, seq_len: int, attention: str = "causal") -> float:
    """Model FLOPs of forward + backward for one sequence: 3x the forward matmuls.

    The backward pass costs twice the forward (activation gradient + weight gradient for each
    matmul; for the attention core, the gradients with respect to Q, K and V). Recomputation is
    not model FLOPs (see :func:`recompute_flops`).
    """
    return 3.0 * forward_flops(model, seq_len, attention).matmul


def recompute_flops(model: ModelSpec, seq_len: int, policy: str, attention: str = "causal",
                    pipeline_chunks: int = 1) -> float:
    """Extra forward FLOPs per sequence that activation checkpointing redoes in the backward.

    ``none``: 0. ``selective``: the attention core (Q.K^T, softmax, x V), Korthikanti et al.
    2022 section 5. ``full``: the whole forward of every transformer block (the LM head and the
    loss are not recomputed, as in Megatron-LM and torchtitan). Every other named policy
    (``full:K``, ``selective-op``, MaxText's ``save_dot_except_mlpwi``...) is described in
    :mod:`trainperf.accounting.recompute`, which this delegates to.
    """
    from trainperf.accounting.recompute import recompute_flops as _recompute

    return _recompute(model, seq_len, policy, attention, pipeline_chunks)
