"""Activation-checkpointing policies by name: what each one recomputes and what it keeps.

This module only describes the policies (which ops of a transformer layer each re-runs in the
backward pass, which tensors it keeps) and validates their names. The FLOPs and bytes are
DERIVED from the model's shape in :mod:`trainperf.accounting.recompute` (recompute FLOPs from
the per-matrix breakdown, saved activation memory from the widths of the kept tensors).

The tensors of one layer, in forward order (per token; ``h`` hidden, ``q`` query width, ``kv``
key/value width, ``f`` MLP width):

==================  =====  ==========================================================
name                width  what it is
==================  =====  ==========================================================
``layer_input``     h      block input = first norm input (the checkpoint boundary)
``norm1_out``       h      first norm output = q/k/v projection input
``q`` ``k`` ``v``   q, kv  projection outputs
``attn_context``    ctx    attention (SDPA / flash) output = o_proj input (heads x value
                           head dim: the query width, but narrower under MLA)
``attn_out``        h      o_proj output
``attn_residual``   h      residual after attention = second norm input
``norm2_out``       h      second norm output = MLP input
``mlp_gate``        f      gate projection output (gated MLPs only)
``mlp_up``          f      up projection output (plain MLPs: the fc1 output = activation input)
``mlp_act``         f      activation output = down projection input
``mlp_out``         h      down projection output
==================  =====  ==========================================================

Policies (``full:K`` and ``full-every:N`` take an integer):

``none``
    Keeps every tensor backward needs: ``layer_input, norm1_out, q, k, v, attn_context,
    attn_residual, norm2_out, (mlp_gate), mlp_up, mlp_act`` = ``4h + 2q + 2kv + 3f`` (gated) or
    ``2f`` (plain); with MHA, a 4h GELU MLP and two dropout masks this is Korthikanti et al.'s 34h.
``selective``
    Megatron-LM's selective recompute (Korthikanti et al. 2022, section 5): the attention core
    (Q.K^T, softmax, x V) is re-run. With fused (flash) attention the scores are never stored, so
    the kept tensors are those of ``none``.
``full``
    Keeps ``layer_input`` only; the whole layer forward is re-run (Megatron ``full``, torchtitan
    ``full``, MaxText ``remat_policy=full``).
``full:K``
    Megatron ``recompute_method=block``, ``recompute_num_layers=K`` (NeMo "block, K layers"): the
    first K layers of every model chunk (pipeline stage, or virtual stage with vpp) are fully
    recomputed, the others keep everything. Per rank ``min(K * vpp, layers on the rank)``.
``full-every:N``
    torchtitan ``selective_ac_option = "N"`` ("selective layer"): every N-th block is wrapped in
    full checkpointing (``floor(L / N)`` of L layers).
``selective-op``
    torchtitan per-op selective AC (``selective_ac_option = "op"``): the outputs of ops in
    ``_save_list`` (``aten.mm``, the SDPA kernels, ``reduce_scatter``) are saved, except every
    second ``aten.mm`` of a block, counted in forward order, which is recomputed (the policy
    recomputes an mm when its per-block count is even). For a Llama block the mm order is
    wq(1) wk(2) wv(3) wo(4) w1(5) w3(6) w2(7): wk, wo and w3 (up) are recomputed, with the
    elementwise ops (norms, RoPE, SiLU, products); kept: ``layer_input, q, v, attn_context,
    mlp_gate, mlp_out``. Under sequence parallelism torchtitan also keeps the reduce-scatter
    output after wo (h/tp per token), left out here. For MoE layers the same parity is applied
    to the expert matrices; the router is counted with the MLP input projections.
``minimal``
    MaxText ``remat_policy=minimal`` = ``jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims``:
    every weight matmul output is saveable, the attention einsums/kernels (which carry batch and
    head dims) are not. Recomputed: attention core and elementwise ops. Kept: ``layer_input, q,
    k, v, attn_out`` (to rebuild the residual), ``mlp_gate, mlp_up``; ``attn_context`` and
    ``mlp_act`` are rebuilt, ``mlp_out`` is saveable but nothing in the backward needs it.
``save_dot_except_mlpwi``
    MaxText: ``save_only_these_names(query_proj, key_proj, value_proj, qkv_proj, out_proj,
    mlpwo)``. ``context`` is not saved (MaxText's ``save_dot_with_context_except_mlp`` adds it),
    so the attention core is recomputed, and so are the MLP input projections wi_0/wi_1 and the
    elementwise ops. Kept: ``layer_input, q, k, v, attn_out``. The DGX Cloud MaxText bf16 recipes
    (``remat_policy=custom``) are this policy.
``save_dot_except_mlp``
    MaxText: ``save_only_these_names(query_proj, key_proj, value_proj, qkv_proj, out_proj)``:
    recomputes the attention core, the MLP input projections (wi_0, wi_1) and the elementwise ops.
    Kept: as ``save_dot_except_mlpwi``. The down projection (wo) is not re-run: its output feeds
    only the residual add, whose backward does not read it, and JAX re-runs in the backward only
    what the backward reads (a recomputed wo would have no consumer and is removed as dead code),
    so on a transformer layer this policy and ``save_dot_except_mlpwi`` save and re-run the same.
    The DGX Cloud MaxText fp8 recipes are this policy.
``save_dot_with_context_except_mlp``
    MaxText: ``save_only_these_names(query_proj, key_proj, value_proj, qkv_proj, context,
    out_proj)``: as ``save_dot_except_mlp`` with the attention output (``context``) saved too, so
    the attention core is not re-run. Kept: ``layer_input, q, k, v, attn_context, attn_out``.
``save_qkv_proj``
    MaxText: saves the q/k/v projections only; recomputes attention core, out_proj, the MLP input
    projections and the elementwise ops (not wo, as above). Kept: ``layer_input, q, k, v``.
``save_out_proj``
    MaxText: ``save_only_these_names(out_proj)``: recomputes q/k/v, the attention core, the MLP
    input projections and the elementwise ops. Kept: ``layer_input, attn_out``.
``qkv_proj_offloaded``
    MaxText: ``save_and_offload_only_these_names(names_which_can_be_saved=[],
    names_which_can_be_offloaded=[query_proj, key_proj, value_proj])``: as ``save_qkv_proj`` but
    q/k/v go to pinned host memory: the device keeps ``layer_input`` only (the host transfer time
    is not modelled).
``minimal_flash``
    MaxText: ``save_from_both_policies(checkpoint_dots_with_no_batch_dims,
    save_only_these_names(context))``: ``minimal`` with the attention output saved, so the
    attention core is not re-run. Kept: ``layer_input, q, k, v, attn_context, attn_out, mlp_gate,
    mlp_up``.
``minimal_offloaded``
    MaxText: ``offload_dot_with_no_batch_dims(device, pinned_host)``: every weight matmul output
    ``minimal`` would save goes to host memory instead; the device keeps ``layer_input`` and re-runs
    the attention core and the elementwise ops (the host transfer time is not modelled).
``custom:NAME=WHERE+...``
    MaxText ``remat_policy=custom``: ``save_and_offload_only_these_names`` over MaxText's
    checkpoint names (:data:`MAXTEXT_NAMES`), each ``device`` (saved), ``offload`` (to pinned host
    memory) or ``remat`` (re-run), as the run's flags say (``query_proj=device out_proj=offload
    ...``); names not given take MaxText's ``configs/base.yml`` values (``decoder_layer_input``
    on the device, every other name re-run). A matmul whose output is saved or offloaded is not
    re-run; the attention core is re-run unless ``context`` is kept.
``selective:M1+M2+...``
    Megatron-Core ``--recompute-granularity selective --recompute-modules M1 M2 ...``
    (``transformer_config.py`` ``recompute_modules``, Megatron-Core 0.12+): each module named is
    re-run in the backward pass, the others keep their tensors. ``selective`` alone is
    ``selective:core_attn`` (Megatron's default list). The modules (:data:`RECOMPUTE_MODULES`):

    * ``core_attn``: the attention core (as ``selective``);
    * ``layernorm``: the two block norms; their outputs (``norm1_out``, ``norm2_out``) are not kept
      (Megatron checkpoints them without output, re-running the norm when the next GEMM needs its
      input);
    * ``mla_up_proj``: MLA's q/kv up-projections and RoPE; ``q``, ``k``, ``v`` are not kept (the
      compressed latents, which were kept already as the up-projections' inputs, rebuild them).
      No effect on a model without MLA;
    * ``moe_act``: the routed experts' activation function; its output (``mlp_act``, per routed
      copy) is not kept;
    * ``mlp``: the dense MLP of a dense layer (it keeps its input only);
    * ``moe``: the whole MoE block of a MoE layer (router, dispatch all-to-all, routed and shared
      experts, combine): it keeps its input only;
    * ``shared_experts``: the shared experts of a MoE layer (they keep their input only).

Sources: Korthikanti et al. 2022 (selective, full); Megatron-LM ``transformer_config.py``
(``recompute_granularity``, ``recompute_method``, ``recompute_num_layers``, ``recompute_modules``
and its docstring: "moe_act, layernorm and mla_up_proj use output-discarding checkpointing,
core_attn, mlp, moe and shared_experts use normal checkpointing"); torchtitan
``parallelize_llama.py`` ``_apply_ac_to_transformer_block`` and ``_save_list`` (2024-08);
MaxText ``layers/decoders.py`` ``get_remat_policy`` (2024-12; the checkpoint names of
``layers/attentions.py``: ``query_proj``, ``key_proj``, ``value_proj`` after RoPE, ``context``,
``out_proj``; ``layers/linears.py`` ``MlpBlock``: ``mlpwi_0``, ``mlpwi_1`` or the fused ``mlpwi``,
``mlpwo``; ``decoder_layer_input`` on the input of a decoder layer; ``configs/base.yml``: the
remat_policy list and the ``custom`` defaults) and JAX ``jax.checkpoint_policies``. These are read
from the projects' code as remembered, not re-run.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from trainperf.errors import SpecError

TENSOR_WIDTH: dict[str, str] = {
    "layer_input": "h", "norm1_out": "h", "q": "q", "k": "kv", "v": "kv", "attn_context": "ctx",
    "attn_out": "h", "attn_residual": "h", "norm2_out": "h", "mlp_gate": "ffn", "mlp_up": "ffn",
    "mlp_act": "ffn", "mlp_out": "h",
}
"""Per-token width kind of every tensor of a layer (see the module docstring)."""

MATRIX_OUTPUT: dict[str, str] = {
    "q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "attn_out", "gate_proj": "mlp_gate",
    "up_proj": "mlp_up", "down_proj": "mlp_out",
    # MLA (DeepSeek): down/up projections count as the q or k/v outputs they build
    "q_down": "q", "q_up": "q", "kv_down": "k", "kv_up": "v",
}
"""The tensor each weight matrix writes (by the matrix names of :class:`ModelSpec`)."""

RECOMPUTE_MODULES: tuple[str, ...] = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                                      "shared_experts")
"""Megatron-Core's ``--recompute-modules`` names, in the canonical order a ``selective:`` policy
is written in (see the module docstring)."""

_ALL_KEPT = ("layer_input", "norm1_out", "q", "k", "v", "attn_context", "attn_residual", "norm2_out",
             "mlp_gate", "mlp_up", "mlp_act")


@dataclass(frozen=True)
class Policy:
    """One checkpointing policy: which layer ops it re-runs, which tensors it keeps."""

    name: str
    """The policy as written (``full:2`` included)."""
    recompute_attn_in: bool = False
    """Re-runs the attention input projections (q/k/v, MLA down/up)."""
    recompute_attn_out: bool = False
    """Re-runs the attention output projection."""
    recompute_mlp_in: bool = False
    """Re-runs the MLP input projections (gate/up, router)."""
    recompute_mlp_out: bool = False
    """Re-runs the MLP down projection."""
    recompute_attention_core: bool = False
    """Re-runs Q.K^T, softmax and x V."""
    recompute_elementwise: bool = False
    """Re-runs the layer's norms, RoPE, activation and residual adds."""
    alternate_mm: bool = False
    """torchtitan per-op SAC: every second matmul of a block is re-run (overrides the four
    projection flags); matmul outputs not re-run are kept."""
    kept: tuple[str, ...] = _ALL_KEPT
    """Tensors kept per layer (names of :data:`TENSOR_WIDTH`)."""
    block_layers: int = 0
    """``full:K``: layers per model chunk fully recomputed (0: the policy covers every layer)."""
    every_n_layers: int = 0
    """``full-every:N``: one layer in N fully recomputed (0: every layer)."""
    modules: tuple[str, ...] = ()
    """``selective:M1+M2``: the Megatron-Core recompute modules beyond ``core_attn`` (canonical
    order of :data:`RECOMPUTE_MODULES`); empty for every other policy."""

    @property
    def recomputes(self) -> bool:
        return bool(self.recompute_attention_core or self.recompute_elementwise or self.alternate_mm
                    or self.recompute_attn_in or self.recompute_mlp_in or self.modules)

    def has(self, module: str) -> bool:
        """Whether this ``selective:`` policy re-runs Megatron-Core module ``module``."""
        return module in self.modules

    def layer_fraction(self, layers: int, pipeline_chunks: int = 1) -> float:
        """Fraction of the model's ``layers`` the policy applies to (the rest keep everything).

        ``pipeline_chunks`` = pp * vpp model chunks, for ``full:K`` (K layers per chunk)."""
        if self.block_layers:
            return min(layers, self.block_layers * pipeline_chunks) / layers
        if self.every_n_layers:
            return (layers // self.every_n_layers) / layers
        return 1.0


_FULL: dict[str, Any] = dict(recompute_attn_in=True, recompute_attn_out=True, recompute_mlp_in=True, recompute_mlp_out=True,
             recompute_attention_core=True, recompute_elementwise=True, kept=("layer_input",))
POLICIES: dict[str, Policy] = {p.name: p for p in (
    Policy("none"),
    Policy("selective", recompute_attention_core=True),
    Policy("full", **_FULL),
    Policy("selective-op", alternate_mm=True, recompute_elementwise=True,
           kept=("layer_input", "attn_context")),  # + the outputs of the matmuls not re-run
    Policy("minimal", recompute_attention_core=True, recompute_elementwise=True,
           kept=("layer_input", "q", "k", "v", "attn_out", "mlp_gate", "mlp_up")),
    Policy("save_dot_except_mlpwi", recompute_attention_core=True, recompute_mlp_in=True,
           recompute_elementwise=True, kept=("layer_input", "q", "k", "v", "attn_out")),
    Policy("save_dot_except_mlp", recompute_attention_core=True, recompute_mlp_in=True,
           recompute_elementwise=True, kept=("layer_input", "q", "k", "v", "attn_out")),
    Policy("save_dot_with_context_except_mlp", recompute_mlp_in=True, recompute_elementwise=True,
           kept=("layer_input", "q", "k", "v", "attn_context", "attn_out")),
    Policy("save_qkv_proj", recompute_attention_core=True, recompute_attn_out=True, recompute_mlp_in=True,
           recompute_elementwise=True, kept=("layer_input", "q", "k", "v")),
    Policy("save_out_proj", recompute_attn_in=True, recompute_attention_core=True, recompute_mlp_in=True,
           recompute_elementwise=True, kept=("layer_input", "attn_out")),
    Policy("qkv_proj_offloaded", recompute_attention_core=True, recompute_attn_out=True,
           recompute_mlp_in=True, recompute_elementwise=True, kept=("layer_input",)),
    Policy("minimal_flash", recompute_elementwise=True,
           kept=("layer_input", "q", "k", "v", "attn_context", "attn_out", "mlp_gate", "mlp_up")),
    Policy("minimal_offloaded", recompute_attention_core=True, recompute_elementwise=True, kept=("layer_input",)),
)}
PARAMETRISED: tuple[str, ...] = ("full:K", "full-every:N", "selective:MODULES", "custom:NAME=WHERE")
POLICY_NAMES: tuple[str, ...] = (*POLICIES, *PARAMETRISED)
"""Every accepted spelling, for messages (``K``/``N`` stand for positive integers, ``MODULES`` for
Megatron-Core recompute modules joined by ``+``, e.g. ``selective:core_attn+moe_act``;
``NAME=WHERE`` for MaxText checkpoint names joined by ``+``, e.g. ``custom:query_proj=device+out_proj=offload``)."""

MAXTEXT_NAMES: dict[str, tuple[str, ...]] = {
    "decoder_layer_input": ("layer_input",), "query_proj": ("q",), "key_proj": ("k",), "value_proj": ("v",),
    "qkv_proj": ("q", "k", "v"), "context": ("attn_context",), "out_proj": ("attn_out",),
    "mlpwi": ("mlp_gate", "mlp_up"), "mlpwi_0": ("mlp_gate",), "mlpwi_1": ("mlp_up",), "mlpwo": ("mlp_out",),
}
"""MaxText's checkpoint names (``configs/base.yml``, the ``custom`` policy's keys) -> the tensors
of :data:`TENSOR_WIDTH` they name (``qkv_proj`` is the fused projection, ``mlpwi`` the fused gate
and up projection)."""

MAXTEXT_PLACES: tuple[str, ...] = ("device", "offload", "remat")


# ------------------------------------------------------------ each framework's own names
_TT_OP = ('mode = "selective" with selective_ac_option = "op", the option of torchtitan\'s Llama 3 configs; '
          'an integer option N is full-every:N')
FRAMEWORK_NAMES: dict[str, dict[str, tuple[str, str]]] = {
    "torchtitan": {
        "none": ("none", 'mode = "none"'),
        "full": ("full", 'mode = "full"'),
        "selective": ("selective-op", _TT_OP),
        "selective:op": ("selective-op", 'mode = "selective", selective_ac_option = "op"'),
        "selective:N": ("full-every:N", 'mode = "selective", selective_ac_option = "N": one block in N fully recomputed'),
    },
    "maxtext": {
        **{name: (name, f"remat_policy={name}") for name in (
            "full", "minimal", "save_dot_except_mlpwi", "save_dot_except_mlp", "save_qkv_proj",
            "qkv_proj_offloaded")},
    },
    "megatron": {
        "selective": ("selective", "--recompute-granularity selective (its default --recompute-modules core_attn)"),
        "full": ("full", "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"),
        "full:uniform": ("full", "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"),
        "full:block:K": ("full:K", "--recompute-granularity full --recompute-method block --recompute-num-layers K"),
        "selective:MODULES": ("selective:MODULES", "--recompute-granularity selective --recompute-modules MODULES"),
    },
}
"""Checkpointing as each framework names it -> (trainperf's policy, the framework's setting in
words). Written ``FRAMEWORK:NAME`` anywhere (``torchtitan:selective``), or ``NAME`` alone with a
stack of that framework (:data:`STACK_FRAMEWORK`: ``--stack torchtitan --activation-checkpointing
selective``). ``N``, ``K``, ``MODULES`` stand for a positive integer and Megatron-Core modules."""

STACK_FRAMEWORK: dict[str, str] = {"torchtitan": "torchtitan", "maxtext": "maxtext",
                                   "megatron-core": "megatron", "megatron-lm-2021": "megatron"}
"""The framework whose names a stack profile's runs use."""


def framework_policy(name: str, stack: str | None = None,
                     field: str = "training.activation_checkpointing") -> tuple[str, str | None]:
    """(trainperf's policy name, the mapping in words or ``None``) for ``name``, which may be a
    framework's own name (see :data:`FRAMEWORK_NAMES`); a one-line :class:`SpecError` for a
    framework prefix with a name that framework does not have."""
    if not isinstance(name, str):
        return name, None
    head, sep, tail = name.partition(":")
    if sep and head in FRAMEWORK_NAMES:
        return _framework_name(head, tail, field)
    fw = STACK_FRAMEWORK.get(str(stack))
    if fw is not None and (name not in POLICIES or FRAMEWORK_NAMES[fw].get(name, (name, ""))[0] != name):
        try:
            canonical, how = _framework_name(fw, name, field)
        except SpecError:
            return name, None
        if canonical != name:
            return canonical, how
    return name, None


def _framework_name(fw: str, name: str, field: str) -> tuple[str, str]:
    """``name`` in framework ``fw``'s terms -> (trainperf's policy, the mapping in words)."""
    table = FRAMEWORK_NAMES[fw]
    head, _, arg = name.partition(":")
    key, value = name, ""
    if name not in table:
        if fw == "torchtitan" and head == "selective" and arg.isdigit() and int(arg) > 0:
            key, value = "selective:N", arg
        elif fw == "megatron" and name.startswith("full:block:") and name[11:].isdigit() and int(name[11:]) > 0:
            key, value = "full:block:K", name[11:]
        elif fw == "megatron" and head == "selective" and arg:
            key, value = "selective:MODULES", arg
        else:
            raise SpecError(field, f"{fw}:{name}", f"one of {fw}'s names: {', '.join(f'{fw}:{k}' for k in table)}")
    policy, how = table[key]
    for symbol in ("N", "K", "MODULES"):
        if symbol in key.split(":"):
            policy, how = policy.replace(symbol, value), how.replace(symbol, value)
    get_policy(policy, field)  # a module list Megatron-Core does not have is refused here
    return policy, f"{fw}'s {name!r} ({how}) is trainperf's {policy}"


def get_policy(name: str, field: str = "training.activation_checkpointing") -> Policy:
    """The :class:`Policy` named ``name`` (a framework's own name included, ``torchtitan:selective``);
    a one-line :class:`SpecError` for anything else (a list or a table from a TOML file too)."""
    if not isinstance(name, str):
        raise SpecError(field, name, f"one of {', '.join(POLICY_NAMES)}")
    return _policy(name, field)


@functools.lru_cache(maxsize=64)
def _policy(name: str, field: str) -> Policy:
    if name in POLICIES:
        return POLICIES[name]
    head, sep, tail = name.partition(":")
    if sep and head in FRAMEWORK_NAMES:
        return get_policy(_framework_name(head, tail, field)[0], field)
    if sep and head == "selective":
        return _selective_modules(name, tail, field)
    if sep and head == "custom":
        return _maxtext_custom(name, tail, field)
    if sep and head in ("full", "full-every") and tail.isdigit() and int(tail) > 0:
        full = dict(_FULL)
        if head == "full":
            return Policy(name, block_layers=int(tail), **full)
        return Policy(name, every_n_layers=int(tail), **full)
    raise SpecError(field, name, f"one of {', '.join(POLICY_NAMES)} (K, N positive integers), or a framework's "
                                 f"own name: {', '.join(f'{fw}:NAME' for fw in FRAMEWORK_NAMES)}")


def _selective_modules(name: str, tail: str, field: str) -> Policy:
    """``selective:M1+M2``: Megatron-Core's ``--recompute-modules`` (see the module docstring)."""
    given = [m.strip() for m in tail.split("+")]
    bad = [m for m in given if m not in RECOMPUTE_MODULES]
    if bad or not given:
        raise SpecError(field, name, "selective:MODULES with MODULES joined by '+' from "
                                     f"{', '.join(RECOMPUTE_MODULES)} (e.g. selective:core_attn+moe_act)")
    mods = tuple(m for m in RECOMPUTE_MODULES if m in given and m != "core_attn")
    core = "core_attn" in given
    if not mods:  # core_attn alone: Megatron's default selective
        return POLICIES["selective"]
    canon = "selective:" + "+".join((("core_attn",) if core else ()) + mods)
    return Policy(canon, recompute_attention_core=core, modules=mods)


def _maxtext_custom(name: str, tail: str, field: str) -> Policy:
    """``custom:NAME=WHERE+...``: MaxText's ``remat_policy=custom`` (see the module docstring)."""
    where = {"decoder_layer_input": "device"}
    for part in (p.strip() for p in tail.split("+")):
        key, eq, place = (x.strip() for x in part.partition("="))
        if not eq or key not in MAXTEXT_NAMES or place not in MAXTEXT_PLACES:
            raise SpecError(field, name, "custom:NAME=WHERE joined by '+', NAME one of "
                                         f"{', '.join(MAXTEXT_NAMES)}, WHERE one of {', '.join(MAXTEXT_PLACES)}")
        where[key] = place
    saved = {t for k, p in where.items() if p != "remat" for t in MAXTEXT_NAMES[k]}
    kept = tuple(t for t in (*_ALL_KEPT, "attn_out")
                 if any(where.get(k) == "device" and t in MAXTEXT_NAMES[k] for k in where))
    canon = "+".join(f"{k}={where[k]}" for k in MAXTEXT_NAMES
                     if k in where and where[k] != ("device" if k == "decoder_layer_input" else "remat"))
    return Policy(f"custom:{canon or 'decoder_layer_input=device'}",
                  recompute_attn_in=not {"q", "k", "v"} <= saved, recompute_attn_out="attn_out" not in saved,
                  recompute_mlp_in=not {"mlp_gate", "mlp_up"} <= saved,
                  recompute_attention_core="attn_context" not in saved, recompute_elementwise=True,
                  kept=tuple(dict.fromkeys(kept)))


def policy_for_model(name: str, *, moe: bool, mla: bool, shared_experts: bool, dense_layers: bool) -> str:
    """The spelling of policy ``name`` that does the same to a model with (or without) MoE
    layers, MLA, shared experts and dense layers: the Megatron-Core modules the model has no part
    for are dropped (``selective:core_attn+moe_act`` on a dense model is ``selective``), so a
    planner tries each distinct policy once."""
    pol = get_policy(name)
    if not pol.modules:
        return pol.name
    has = {"moe_act": moe, "layernorm": True, "mla_up_proj": mla, "mlp": dense_layers, "moe": moe,
           "shared_experts": shared_experts and moe}
    mods = tuple(m for m in pol.modules if has[m])
    if "moe" in mods:  # re-running the whole MoE block covers its activation and shared experts
        mods = tuple(m for m in mods if m not in ("moe_act", "shared_experts"))
    core = ("core_attn",) if pol.recompute_attention_core else ()
    return get_policy("selective:" + "+".join(core + mods)).name if core + mods else "none"
