"""Recompute FLOPs and saved activation memory of every checkpointing policy, derived from the shape.

The policies themselves (what each re-runs and keeps, with the sources they were read from)
are described in :mod:`trainperf.specs.checkpointing`. Here both figures are derived from the
model: recompute FLOPs from the per-matrix breakdown (:func:`layer_matmul_flops`, the same
``2*m*k*n`` counting as :mod:`.flops`) plus the attention core of
:func:`~trainperf.accounting.flops.forward_flops`; saved activation memory from the widths of the
kept tensors (:func:`saved_widths`).
"""

from __future__ import annotations

import dataclasses
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


MLA_UP_PROJECTIONS: frozenset[str] = frozenset({"q_up", "kv_up"})
"""MLA's up-projections, which Megatron-Core's ``mla_up_proj`` recompute module re-runs."""


def recomputed_matrices(policy: Policy, names: tuple[str, ...], roles: tuple[str, ...],
                        mlp_module: str = "mlp") -> tuple[bool, ...]:
    """For the layer matrices ``names`` in forward order (q/k/v..., o_proj, then the MLP's),
    with their ``roles``, whether each is re-run.

    ``mlp_module`` names the Megatron-Core recompute module that re-runs the MLP matrices of the
    layer kind asked about (``mlp`` for a dense layer, ``moe`` for routed experts,
    ``shared_experts`` for shared ones; ``moe`` re-runs those too)."""
    if policy.alternate_mm:
        return tuple((pos + 1) % 2 == 0 for pos in range(len(names)))
    mlp_mod = policy.has(mlp_module) or (mlp_module == "shared_experts" and policy.has("moe"))
    flag = {"attn_in": policy.recompute_attn_in, "attn_out": policy.recompute_attn_out,
            "mlp_in": policy.recompute_mlp_in or mlp_mod, "mlp_out": policy.recompute_mlp_out or mlp_mod}
    up = policy.has("mla_up_proj")
    return tuple(flag[r] or (up and n in MLA_UP_PROJECTIONS) for n, r in zip(names, roles, strict=True))


_MLP_TENSORS = ("mlp_gate", "mlp_up", "mlp_act")


def _kept(policy: Policy, names: tuple[str, ...], roles: tuple[str, ...], gated: bool) -> tuple[str, ...]:
    """Tensors a dense layer keeps (the MLP ones are a dense MLP's; see :func:`_expert_ffn_kept`)."""
    kept = list(policy.kept)
    if policy.alternate_mm:
        redo = recomputed_matrices(policy, names, roles)
        kept += [MATRIX_OUTPUT.get(n, "q") for n, r in zip(names, redo, strict=True) if not r]
    drop: set[str] = set()
    if policy.has("layernorm"):
        drop |= {"norm1_out", "norm2_out"}
    if policy.has("mla_up_proj") and MLA_UP_PROJECTIONS & set(names):
        drop |= {"q", "k", "v"}
    if policy.has("mlp"):
        drop |= set(_MLP_TENSORS)
    if not gated:
        drop.add("mlp_gate")
    return tuple(t for t in dict.fromkeys(kept) if t not in drop)


def _expert_ffn_kept(policy: Policy, dense: SavedWidths, gated: bool, module: str) -> tuple[float, float]:
    """(MLP-wide tensors, of them weight-matmul inputs) one routed (``module="moe"``) or shared
    (``"shared_experts"``) expert keeps per token it processes: what the dense MLP keeps
    (``dense``) under every policy but Megatron-Core's modules, which drop them all (``moe``;
    ``shared_experts`` for shared ones) or the activation output (``moe_act``, routed experts)."""
    if not policy.modules:
        return dense.ffn, dense.gemm_in_ffn
    if policy.has("moe") or policy.has(module):
        return 0.0, 0.0
    if module == "moe" and policy.has("moe_act"):
        return (2.0 if gated else 1.0), 0.0
    return (3.0 if gated else 2.0), 1.0


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
    ctx: float = 0.0
    """Count of attention-context tensors (heads x value head dim, split over tp)."""
    gemm_in_h: float = 0.0
    """Of ``h``: tensors that are a weight matmul's input (the norm outputs feeding q/k/v and the MLP)."""
    gemm_in_ctx: float = 0.0
    """Of ``ctx``: the attention context, the output projection's input."""
    gemm_in_ffn: float = 0.0
    """Of ``ffn``: the activation output, the down projection's input."""


def saved_widths(policy: Policy, model: ModelSpec) -> SavedWidths:
    """How many tensors of each width one layer keeps under ``policy`` (``none``, gated:
    ``h=4, q=1, kv=2, ctx=1, ffn=3``). Bytes per token = act_bytes * (h*hidden + q*q_dim + kv*kv_dim +
    ctx*context_dim + ffn*ffn_hidden), the split widths divided by tp (:func:`trainperf.predict.step_model.memory.saved_activation_bytes_per_layer`)."""
    return _widths(_kept(policy, *_names_roles(model), model.gated_mlp))


def _names_roles(model: ModelSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    mats = layer_matrices(model)
    return tuple(n for _, n, _, _ in mats), tuple(r for r, *_ in mats)


GEMM_INPUTS: frozenset[str] = frozenset({"norm1_out", "attn_context", "norm2_out", "mlp_act"})
"""Kept tensors that are the input of a weight matmul (what an fp8 GEMM may keep in fp8)."""


def _widths(kept: tuple[str, ...]) -> SavedWidths:
    counts = {"h": 0.0, "q": 0.0, "kv": 0.0, "ctx": 0.0, "ffn": 0.0}
    gemm_in = dict.fromkeys(counts, 0.0)
    for t in kept:
        counts[TENSOR_WIDTH[t]] += 1.0
        if t in GEMM_INPUTS:
            gemm_in[TENSOR_WIDTH[t]] += 1.0
    return SavedWidths(**counts, gemm_in_h=gemm_in["h"], gemm_in_ctx=gemm_in["ctx"], gemm_in_ffn=gemm_in["ffn"])


@dataclass(frozen=True)
class LayerRecompute:
    """A policy applied to one layer's structure, as numbers the step model multiplies by."""

    attn: tuple[float, ...]
    """1.0 for each attention matrix (model order) that is re-run, else 0.0."""
    mlp: tuple[float, ...]
    """The same for a dense layer's MLP matrices."""
    attention_core: float
    elementwise: float
    attn_region: float
    """1.0 when an attention input projection is re-run: its tp gather (and cp ring) is redone."""
    mlp_region: float
    """1.0 when a dense MLP's input projection is re-run: its tp gather is redone."""
    widths: SavedWidths
    """Kept tensors of a layer the policy covers (the MLP-wide ones: a dense layer's MLP)."""
    widths_none: SavedWidths
    """Kept tensors without recomputation (layers the policy does not cover)."""
    stores_less: bool
    """The policy keeps less than ``none``: a recomputed layer's tensors are live again in its backward."""
    block_layers: int
    every_n_layers: int
    expert: tuple[float, ...] = ()
    """1.0 for each routed-expert matrix (the MLP names) that is re-run (empty: as ``mlp``)."""
    shared: tuple[float, ...] = ()
    """The same for the shared experts' matrices (empty: as ``mlp``)."""
    moe_region: float = -1.0
    """1.0 when a MoE block's dispatch is re-run (router, permutation, all-to-all, expert-tp
    gathers), and its routed rows are not kept; -1: as ``mlp_region``."""
    shared_region: float = -1.0
    """1.0 when the shared experts' input projection is re-run (their tp gather); -1: as ``mlp_region``."""
    norms: float = 0.0
    """Beyond ``elementwise``: the block norms are re-run (Megatron-Core ``layernorm``)."""
    rope: float = 0.0
    """Beyond ``elementwise``: RoPE is re-run (Megatron-Core ``mla_up_proj``)."""
    expert_act: float = 0.0
    """Beyond ``elementwise``: the routed experts' activation function is re-run (``moe_act``, ``moe``)."""
    shared_act: float = 0.0
    """Beyond ``elementwise``: the shared experts' activation function is re-run."""
    dense_act: float = 0.0
    """Beyond ``elementwise``: a dense MLP's activation function is re-run (``mlp``)."""
    expert_ffn: tuple[float, float] = (-1.0, -1.0)
    """(MLP-wide tensors, of them matmul inputs) a routed expert keeps per routed token; -1: the dense MLP's."""
    shared_ffn: tuple[float, float] = (-1.0, -1.0)
    """The same for a shared expert per token."""

    def __post_init__(self) -> None:
        # the MoE fields default to the dense MLP's (every policy but Megatron-Core's modules)
        for name, like in (("expert", self.mlp), ("shared", self.mlp)):
            if not getattr(self, name):
                object.__setattr__(self, name, like)
        for name in ("moe_region", "shared_region"):
            if getattr(self, name) < 0:
                object.__setattr__(self, name, self.mlp_region)
        for name in ("expert_ffn", "shared_ffn"):
            if getattr(self, name)[0] < 0:
                object.__setattr__(self, name, (self.widths.ffn, self.widths.gemm_in_ffn))


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
    rc = LayerRecompute(
        attn=tuple(float(r) for r in redo[:n_attn]), mlp=tuple(float(r) for r in redo[n_attn:]),
        attention_core=float(pol.recompute_attention_core), elementwise=float(pol.recompute_elementwise),
        attn_region=float(any(attn_in)), mlp_region=float(any(mlp_in)), widths=widths, widths_none=none,
        stores_less=widths != none, block_layers=pol.block_layers, every_n_layers=pol.every_n_layers)
    if not pol.modules:
        return rc
    # Megatron-Core's recompute modules treat dense MLPs, routed and shared experts apart
    expert = recomputed_matrices(pol, names, roles, "moe")[n_attn:]
    shared = recomputed_matrices(pol, names, roles, "shared_experts")[n_attn:]
    moe, moe_act = pol.has("moe"), pol.has("moe_act") or pol.has("moe")
    shared_all = moe or pol.has("shared_experts")
    mlp_in_roles = [role == "mlp_in" for role in roles[n_attn:]]
    return dataclasses.replace(
        rc, expert=tuple(float(r) for r in expert), shared=tuple(float(r) for r in shared),
        moe_region=float(moe), shared_region=float(any(r for r, i in zip(shared, mlp_in_roles, strict=True) if i)),
        norms=float(pol.has("layernorm")), rope=float(pol.has("mla_up_proj") and bool(MLA_UP_PROJECTIONS & set(names))),
        expert_act=float(moe_act), shared_act=float(shared_all), dense_act=float(pol.has("mlp")),
        expert_ffn=_expert_ffn_kept(pol, widths, gated, "moe"),
        shared_ffn=_expert_ffn_kept(pol, widths, gated, "shared_experts"),
        stores_less=widths != none or moe_act or shared_all)


def saved_activation_bytes_per_token(model: ModelSpec, policy: str, act_bytes: float = 2.0) -> float:
    """Activation bytes one dense layer keeps per token under ``policy`` (no tp; flash attention).
    Under MLA the kept keys and values are the up-projected ones (``heads x qk_head_dim`` and
    ``heads x v_head_dim``), the context ``heads x v_head_dim``."""
    w = saved_widths(get_policy(policy), model)
    return act_bytes * (w.h * model.hidden + w.q * model.q_dim + w.kv * model.kept_kv_dim + w.ctx * model.context_dim
                        + w.ffn * model.ffn_hidden)


def layer_matmul_flops(model: ModelSpec, seq_len: int) -> dict[str, float]:
    """Forward FLOPs per sequence of each weight matrix, summed over the layers that have it.

    Keys are matrix names; MoE layers contribute ``expert.<name>`` (top-k plus shared experts
    per token) and ``router``, a hybrid's Mamba-2 mixers ``mamba.in_proj``, ``mamba.out_proj`` and
    ``mamba.scan`` (the SSD scan). Sums to ``forward_flops(...).layers_matmul`` minus the attention
    core.
    """
    s = seq_len
    out: dict[str, float] = {}
    for role, name, i, o in layer_matrices(model):
        layers = model.attention_layers if role.startswith("attn") else model.dense_layers
        out[name] = float(layers * s * 2 * i * o)
    for name, (i, o) in model.mamba_matmuls().items():
        out[f"mamba.{name}"] = float(model.mamba_layers * s * 2 * i * o)
    if model.mamba_layers:
        out["mamba.scan"] = model.mamba_layers * s * model.ssd_flops_per_token()
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
    roles = tuple(r for r, *_ in mats)
    redo = dict(zip(names, recomputed_matrices(pol, names, roles), strict=True))
    per_mat = layer_matmul_flops(model, seq_len)
    routed = dict(zip(names, recomputed_matrices(pol, names, roles, "moe"), strict=True))
    shared = dict(zip(names, recomputed_matrices(pol, names, roles, "shared_experts"), strict=True))
    # expert.* FLOPs count topk routed and the shared experts per token
    per_tok = max(model.moe_topk + model.moe_shared_experts, 1)
    # a hybrid's Mamba-2 mixer is re-run with attention's projections (``full``), its scan with the
    # input projection; selective recomputation of the attention core leaves it (Megatron-Core)
    mixer_in = any(redo[n] for r, n, *_ in mats if r == "attn_in")
    redo |= {"mamba.in_proj": mixer_in, "mamba.scan": mixer_in, "mamba.out_proj": redo["o_proj"]}
    total = 0.0
    for key, flops in per_mat.items():
        if key == "router":
            # the router is re-run with the routed experts' input projections
            total += flops if routed[next(n for r, n, *_ in mats if r == "mlp_in")] else 0.0
        elif key.startswith("expert."):
            name = key.removeprefix("expert.")
            total += flops * (model.moe_topk * routed[name] + model.moe_shared_experts * shared[name]) / per_tok
        elif redo.get(key, False):
            total += flops
    if pol.recompute_attention_core:
        total += fb.attention_core
    return total * pol.layer_fraction(model.layers, pipeline_chunks)
