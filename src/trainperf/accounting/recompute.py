"""Recompute FLOPs and saved activation memory of every checkpointing policy, derived from the shape.

The policies themselves (what each re-runs and keeps, with the sources they were read from)
are described in :mod:`trainperf.specs.checkpointing`. Here both figures are derived from the
model: recompute FLOPs from the per-matrix breakdown (:func:`layer_matmul_flops`, the same
``2*m*k*n`` counting as :mod:`.flops`) plus the attention core of
:func:`~trainperf.accounting.flops.forward_flops`; saved activation memory from the widths of the
kept tensors (:func:`saved_widths`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from trainperf.specs.checkpointing import (
    MATRIX_OUTPUT,
    POLICIES,
    POLICY_NAMES,
    TENSOR_WIDTH,
    Policy,
    get_policy,
)
from trainperf.specs.model import ModelSpec

__all__ = [
    "POLICIES",
    "POLICY_NAMES",
    "LayerRecompute",
    "Policy",
    "SavedWidths",
    "get_policy",
    "kept_tensors",
    "layer_matmul_flops",
    "layer_matrices",
    "layer_recompute",
    "matrix_roles",
    "recompute_flops",
    "recomputed_matrices",
    "saved_activation_bytes_per_token",
    "saved_widths",
]


def layer_matrices(model: ModelSpec) -> tuple[tuple[str, str, int, int], ...]:
    """Weight matrices of one layer in forward order: ``(role, name, in, out)``.

    ``role`` is ``attn_in``, ``attn_out``, ``mlp_in`` or ``mlp_out`` (gate/up are MLP inputs).
    """
    out: list[tuple[str, str, int, int]] = []
    attn = model.attention_matmuls()
    for name, (i, o) in attn.items():
        if name != "o_proj":
            out.append(("attn_in", name, i, o))
    i, o = attn["o_proj"]
    out.append(("attn_out", "o_proj", i, o))
    for name, (i, o) in model.dense_mlp_matmuls().items():
        out.append(("mlp_out" if name == "down_proj" else "mlp_in", name, i, o))
    return tuple(out)


def matrix_roles(attn_names: tuple[str, ...], mlp_names: tuple[str, ...]) -> tuple[str, ...]:
    """Roles of a layer's matrices given their names (attention ones first, then the MLP's)."""
    return (tuple("attn_out" if n == "o_proj" else "attn_in" for n in attn_names)
            + tuple("mlp_out" if n == "down_proj" else "mlp_in" for n in mlp_names))


def recomputed_matrices(policy: Policy, names: tuple[str, ...], roles: tuple[str, ...]) -> tuple[bool, ...]:
    """For the layer matrices ``names`` in forward order (q/k/v..., o_proj, then the MLP's),
    with their ``roles``, whether each is re-run."""
    if policy.alternate_mm:
        return tuple((pos + 1) % 2 == 0 for pos in range(len(names)))
    flag = {"attn_in": policy.recompute_attn_in, "attn_out": policy.recompute_attn_out,
            "mlp_in": policy.recompute_mlp_in, "mlp_out": policy.recompute_mlp_out}
    return tuple(flag[r] for r in roles)


def _kept(policy: Policy, names: tuple[str, ...], roles: tuple[str, ...], gated: bool) -> tuple[str, ...]:
    kept = list(policy.kept)
    if policy.alternate_mm:
        redo = recomputed_matrices(policy, names, roles)
        kept += [MATRIX_OUTPUT.get(n, "q") for n, r in zip(names, redo, strict=True) if not r]
    if not gated:
        kept = [t for t in kept if t != "mlp_gate"]
    return tuple(dict.fromkeys(kept))


def kept_tensors(policy: Policy, model: ModelSpec) -> tuple[str, ...]:
    """Names of the tensors one layer keeps under ``policy`` (gate only for gated MLPs)."""
    mats = layer_matrices(model)
    return _kept(policy, tuple(n for _, n, _, _ in mats), tuple(r for r, *_ in mats), model.gated_mlp)


@dataclass(frozen=True)
class SavedWidths:
    """Kept activations of one layer per token, as multiples of each width (see :func:`saved_widths`)."""

    h: float
    """Count of hidden-wide tensors (replicated over tp unless sequence parallel)."""
    q: float
    """Count of query-wide tensors (split over tp)."""
    kv: float
    """Count of key/value-wide tensors (split over tp)."""
    ffn: float
    """Count of MLP-wide tensors (split over tp)."""
    gemm_in_h: float = 0.0
    """Of ``h``: tensors that are a weight matmul's input (the norm outputs feeding q/k/v and the MLP)."""
    gemm_in_q: float = 0.0
    """Of ``q``: the attention context, the output projection's input."""
    gemm_in_ffn: float = 0.0
    """Of ``ffn``: the activation output, the down projection's input."""


def saved_widths(policy: Policy, model: ModelSpec) -> SavedWidths:
    """How many tensors of each width one layer keeps under ``policy`` (``none``, gated:
    ``h=4, q=2, kv=2, ffn=3``). Bytes per token = act_bytes * (h*hidden + q*q_dim + kv*kv_dim +
    ffn*ffn_hidden), the split widths divided by tp (:func:`trainperf.predict.memory.saved_activation_bytes_per_layer`)."""
    return _widths(_kept(policy, *_names_roles(model), model.gated_mlp))


def _names_roles(model: ModelSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    mats = layer_matrices(model)
    return tuple(n for _, n, _, _ in mats), tuple(r for r, *_ in mats)


GEMM_INPUTS: frozenset[str] = frozenset({"norm1_out", "attn_context", "norm2_out", "mlp_act"})
"""Kept tensors that are the input of a weight matmul (what an fp8 GEMM may keep in fp8)."""


def _widths(kept: tuple[str, ...]) -> SavedWidths:
    counts = {"h": 0.0, "q": 0.0, "kv": 0.0, "ffn": 0.0}
    gemm_in = {"h": 0.0, "q": 0.0, "kv": 0.0, "ffn": 0.0}
    for t in kept:
        counts[TENSOR_WIDTH[t]] += 1.0
        if t in GEMM_INPUTS:
            gemm_in[TENSOR_WIDTH[t]] += 1.0
    return SavedWidths(**counts, gemm_in_h=gemm_in["h"], gemm_in_q=gemm_in["q"], gemm_in_ffn=gemm_in["ffn"])


@dataclass(frozen=True)
class LayerRecompute:
    """A policy applied to one layer's structure, as numbers the step model multiplies by."""

    attn: tuple[float, ...]
    """1.0 for each attention matrix (model order) that is re-run, else 0.0."""
    mlp: tuple[float, ...]
    """The same for the MLP matrices (dense and expert MLPs share the names)."""
    attention_core: float
    elementwise: float
    attn_region: float
    """1.0 when an attention input projection is re-run: its tp gather (and cp ring) is redone."""
    mlp_region: float
    """1.0 when an MLP input projection is re-run: its tp gather is redone."""
    widths: SavedWidths
    """Kept tensors of a layer the policy covers."""
    widths_none: SavedWidths
    """Kept tensors without recomputation (layers the policy does not cover)."""
    stores_less: bool
    """The policy keeps less than ``none``: a recomputed layer's tensors are live again in its backward."""
    block_layers: int
    every_n_layers: int


@functools.lru_cache(maxsize=256)
def layer_recompute(policy: str, attn_names: tuple[str, ...], mlp_names: tuple[str, ...],
                    gated: bool) -> LayerRecompute:
    """:class:`LayerRecompute` of ``policy`` for a layer with these matrices (cached: the
    predictor calls it once per prediction)."""
    pol = get_policy(policy)
    names = attn_names + mlp_names
    roles = matrix_roles(attn_names, mlp_names)
    redo = recomputed_matrices(pol, names, roles)
    n_attn = len(attn_names)
    attn_in = [r for r, role in zip(redo, roles, strict=True) if role == "attn_in"]
    mlp_in = [r for r, role in zip(redo, roles, strict=True) if role == "mlp_in"]
    widths = _widths(_kept(pol, names, roles, gated))
    none = _widths(_kept(POLICIES["none"], names, roles, gated))
    return LayerRecompute(
        attn=tuple(float(r) for r in redo[:n_attn]), mlp=tuple(float(r) for r in redo[n_attn:]),
        attention_core=float(pol.recompute_attention_core), elementwise=float(pol.recompute_elementwise),
        attn_region=float(any(attn_in)), mlp_region=float(any(mlp_in)), widths=widths, widths_none=none,
        stores_less=widths != none, block_layers=pol.block_layers, every_n_layers=pol.every_n_layers)


def saved_activation_bytes_per_token(model: ModelSpec, policy: str, act_bytes: float = 2.0) -> float:
    """Activation bytes one dense layer keeps per token under ``policy`` (no tp; flash attention)."""
    w = saved_widths(get_policy(policy), model)
    return act_bytes * (w.h * model.hidden + w.q * model.q_dim + w.kv * model.kv_dim + w.ffn * model.ffn_hidden)


def layer_matmul_flops(model: ModelSpec, seq_len: int) -> dict[str, float]:
    """Forward FLOPs per sequence of each weight matrix, summed over the layers that have it.

    Keys are matrix names; MoE layers contribute ``expert.<name>`` (top-k plus shared experts
    per token) and ``router``. Sums to ``forward_flops(...).layers_matmul`` minus the attention core.
    """
    s = seq_len
    out: dict[str, float] = {}
    for role, name, i, o in layer_matrices(model):
        layers = model.layers if role.startswith("attn") else model.dense_layers
        out[name] = float(layers * s * 2 * i * o)
    if model.is_moe:
        per_tok = model.moe_topk + model.moe_shared_experts
        for name, (i, o) in model.dense_mlp_matmuls(model.moe_expert_ffn).items():
            out[f"expert.{name}"] = float(model.moe_layers * s * per_tok * 2 * i * o)
        out["router"] = float(model.moe_layers * s * 2 * model.hidden * model.moe_experts)
    return out


def recompute_flops(model: ModelSpec, seq_len: int, policy: str, attention: str = "causal",
                    pipeline_chunks: int = 1) -> float:
    """Extra forward FLOPs per sequence that ``policy`` re-runs in the backward pass.

    The re-run matrices' FLOPs (:func:`layer_matmul_flops`) plus the attention core when the
    policy re-runs it, times the fraction of layers the policy covers (``full:K`` needs
    ``pipeline_chunks`` = pp * vpp). The LM head and the loss are never recomputed.
    Elementwise ops are not FLOPs of any convention and are left out.
    """
    from trainperf.accounting.flops import forward_flops

    pol = get_policy(policy)
    if not pol.recomputes:
        return 0.0
    fb = forward_flops(model, seq_len, attention)
    mats = layer_matrices(model)
    names = tuple(n for _, n, _, _ in mats)
    redo = dict(zip(names, recomputed_matrices(pol, names, tuple(r for r, *_ in mats)), strict=True))
    per_mat = layer_matmul_flops(model, seq_len)
    total = 0.0
    for key, flops in per_mat.items():
        if key == "router":
            total += flops if redo.get(next(n for r, n, *_ in mats if r == "mlp_in"), False) else 0.0
        elif redo.get(key.removeprefix("expert."), False):
            total += flops
    if pol.recompute_attention_core:
        total += fb.attention_core
    return total * pol.layer_fraction(model.layers, pipeline_chunks)
