"""Nemotron-H (NVIDIA): hybrid Mamba-2 / attention decoders of single-op layers, dense or MoE.

Follows transformers' ``NemotronHConfig`` (``models/nemotron_h/configuration_nemotron_h.py``, whose
defaults apply to absent keys) and ``models/nemotron_h/modeling_nemotron_h.py``, which also read
the config.json files written for NVIDIA's remote-code ``configuration_nemotron_h.py``:

* The layers are single ops, each a ``NemotronHBlock`` of one RMSNorm and one mixer, listed by
  ``hybrid_override_pattern`` (``M`` Mamba-2, ``*`` attention, ``-`` MLP, ``E`` MoE; NVIDIA's
  configs) or ``layers_block_type`` (``linear_attention``/``mamba``, ``full_attention``/``attention``,
  ``mlp``, ``moe``; transformers 5.x, also as ``layer_types``). :class:`~trainperf.specs.model.ModelSpec`
  counts blocks of a mixer and an MLP: each mixer opens a block and an MLP (``-`` or ``E``) joins
  the mixer before it, so ``M-M*E`` is three blocks (Mamba-2 + MLP, Mamba-2 alone, attention +
  MoE). An MLP with no mixer before it (a leading ``-``, or ``-E``) has no such block and is
  rejected.
* ``NemotronHMamba2Mixer``: ``in_proj`` (``hidden -> 2 * inner + 2 * n_groups * ssm_state_size +
  heads``, bias ``use_bias``), a depthwise ``conv1d`` of ``conv_kernel`` taps over x, B and C
  (bias ``use_conv_bias``), per-head ``dt_bias``, ``A_log`` and ``D``, a gated RMSNorm over
  ``inner`` and ``out_proj`` (bias ``use_bias``), where ``inner = mamba_num_heads *
  mamba_head_dim`` (``expand`` is not read by the modelling code, nor here).
* ``NemotronHAttention``: q, k, v, o projections (GQA, ``head_dim``), no position embedding.
  transformers 5.x builds them without biases whatever ``attention_bias`` says; here a true
  ``attention_bias`` (false in the released configs) still counts biases on all four, as the
  other families do.
* ``NemotronHMLP``: ``up_proj`` and ``down_proj`` (bias ``mlp_bias``), ``mlp_hidden_act`` (``relu2``:
  squared ReLU).
* ``NemotronHMoE`` (an ``E`` layer; Nemotron 3 Nano): a ``NemotronHTopkRouter`` (``weight``,
  ``n_routed_experts x hidden``, no linear bias, and the ``e_score_correction_bias`` buffer of
  ``n_routed_experts`` values: ``moe_router_bias``, in ``total_params`` and ``buffer_params``),
  ``NemotronHExperts`` (``n_routed_experts`` non-gated up/down MLPs ``moe_intermediate_size``
  wide with the dense MLP's ``mlp_hidden_act`` and no biases; ``num_experts_per_tok`` of them per
  token) and ``shared_experts``, one ``NemotronHMLP`` ``moe_shared_expert_intermediate_size``
  wide whatever ``n_shared_experts`` says (that width is the total, as in Megatron-Core). ModelSpec
  counts shared experts as routed-expert-wide MLPs, so the shared width becomes
  ``moe_shared_experts = moe_shared_expert_intermediate_size / moe_intermediate_size`` (the same
  parameters and FLOPs for a non-gated MLP; noted when not 1); a width that does not divide is
  rejected. The blocks whose MLP is a ``-`` are ``moe_dense_layers`` (``intermediate_size`` wide),
  interleaved. Grouped routing (``n_group``, ``topk_group``) picks experts, it holds nothing: not
  read. Rejected: ``moe_latent_size`` (the ``fc1_latent_proj``/``fc2_latent_proj`` of a latent
  MoE), ``mlp_bias`` in an MoE model (the experts have no biases, the shared and dense MLPs do:
  one ``mlp_bias`` cannot say both) and ``n_shared_experts: 0`` (transformers builds the shared
  MLP all the same). Without an ``E`` the MoE keys are not read.
* Multi-token prediction (``num_nextn_predict_layers`` > 0): transformers builds no MTP layers (it
  drops the checkpoint's ``mtp.*`` weights on load, ``_keys_to_ignore_on_load_unexpected``), so,
  as for DeepSeek-V3, they are not counted; a note says whether ``--mtp-layers`` would train them
  as the checkpoint lays them out (Megatron-Core's MTP layer: ``enorm``, ``hnorm``, the ``2h -> h``
  ``eh_proj``, the layers of ``mtp_layers_block_type``, legacy ``mtp_hybrid_override_pattern``,
  default ``['full_attention', 'moe']``, and a ``final_layernorm``: ModelSpec's module when those
  layers are one attention and one MoE layer, ``*E``, or ``*-`` without MoE layers).
* ``NemotronHForCausalLM`` declares no tied weights (``_tied_weights_keys = {}``): the LM head is
  its own matrix even under ``tie_word_embeddings: true`` (false in every released config), which
  is then noted.
* The old spellings ``mamba_n_groups``, ``mamba_d_conv``, ``mamba_chunk_size``, ``mamba_conv_bias``
  (NVIDIA's remote code; transformers renames them on load), ``attention_head_dim`` and
  ``num_local_experts`` are read too; given with the new spelling and a different value, the config
  is rejected as ambiguous.
* ``num_hidden_layers`` (deprecated in transformers 5.x) must equal the pattern's length when given.
"""

from __future__ import annotations

from typing import Any

from trainperf.errors import SpecError
from trainperf.specs.bounds import MODEL_FIELD_BOUNDS
from trainperf.specs.hf_families.base import (
    COUNT,
    EXPERTS,
    HEADS,
    LAYERS,
    LAYERS_OR_ZERO,
    POSITIONS,
    VOCAB,
    WIDTH,
    Bound,
    HFConfig,
    _short,
    note,
    plain_mlp,
)

_DEFAULTS = {  # transformers 5.x NemotronHConfig (the Nemotron-H-8B shape)
    "vocab_size": 131072, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "max_position_embeddings": 4096, "intermediate_size": 21504, "mlp_hidden_act": "relu2",
    "ssm_state_size": 128, "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8, "conv_kernel": 4,
    "chunk_size": 128, "n_routed_experts": 8, "n_shared_experts": 1, "moe_intermediate_size": 7688,
    "moe_shared_expert_intermediate_size": 7688, "num_experts_per_tok": 2, "num_nextn_predict_layers": 0,
}

PATTERN_CHARS = {"M": "Mamba-2", "*": "attention", "-": "MLP", "E": "MoE"}
"""``hybrid_override_pattern`` characters trainperf models."""

BLOCK_TYPES = {"linear_attention": "M", "mamba": "M", "full_attention": "*", "attention": "*", "mlp": "-",
               "moe": "E"}
"""``layers_block_type`` entries (transformers 5.x names and their legacy aliases) -> pattern characters."""

MLP_CHARS = "-E"
"""Pattern characters of an MLP layer (dense, MoE): each joins the block of the mixer before it."""

_PATTERN = Bound(1, 2 * LAYERS.hi, f"{LAYERS.why}; a block is at most two pattern layers")
_VALID_PATTERN = "a string of 'M' (Mamba-2), '*' (attention), '-' (MLP) and 'E' (MoE)"
_MTP_LAYOUT = {"E": ("*E", "['full_attention', 'moe']"), "-": ("*-", "['full_attention', 'mlp']")}
"""The MTP layers ModelSpec's module is, by the MLP kind of the model (MoE, dense)."""


def _aliased(c: HFConfig, keys: tuple[str, ...], bound: Bound) -> int:
    """The integer under the first of ``keys`` present (else the class default of ``keys[0]``);
    two spellings present with different values are rejected."""
    given = [(k, c.check_integer(k, c.data[k], bound)) for k in keys if c.has(k)]
    _agree(c, given)
    return given[0][1] if given else c.integer(keys[0], bound=bound)


def _aliased_flag(c: HFConfig, keys: tuple[str, ...], default: bool) -> bool:
    """:func:`_aliased` for a boolean."""
    given = [(k, c.flag(k, default)) for k in keys if c.has(k)]
    _agree(c, given)
    return given[0][1] if given else default


def _agree(c: HFConfig, given: list[tuple[str, Any]]) -> None:
    if len({v for _, v in given}) > 1:
        (k1, v1), (k2, v2) = given[0], given[1]
        raise SpecError(c.field(k2), v2, f"equal to {k1}={v1!r} (two spellings of one setting) or absent")


def _layers(c: HFConfig, type_keys: tuple[str, ...], key: str) -> tuple[str, str] | None:
    """A layer list as a string of ``M``, ``*``, ``-``, ``E`` (from a list under one of
    ``type_keys`` or the pattern string under ``key``), validated, and the key it came from;
    ``None`` when neither is given."""
    type_key = next((k for k in type_keys if c.has(k)), None)
    from_types = None
    if type_key is not None:
        types = c.items(type_key) or []
        if not _PATTERN.lo <= len(types) <= _PATTERN.hi:
            raise SpecError(c.field(type_key), _short(types), f"a list of {_PATTERN.lo} to {_PATTERN.hi:,} entries")
        for item in types:
            if not isinstance(item, str) or item not in BLOCK_TYPES:
                raise SpecError(c.field(type_key), _short(types),
                                f"a list of {', '.join(repr(t) for t in BLOCK_TYPES)}; {item!r} is not one")
        from_types = "".join(BLOCK_TYPES[t] for t in types)
    if not c.has(key):
        return None if from_types is None or type_key is None else (from_types, type_key)
    pattern = c.text(key, "")
    if not _PATTERN.lo <= len(pattern) <= _PATTERN.hi:
        raise SpecError(c.field(key), _short(pattern), f"{_VALID_PATTERN}, {_PATTERN.lo} to {_PATTERN.hi:,} long")
    bad = next((ch for ch in pattern if ch not in PATTERN_CHARS), None)
    if bad is not None:
        raise SpecError(c.field(key), _short(pattern), f"{_VALID_PATTERN}; {bad!r} is not one")
    if from_types is not None and from_types != pattern:
        raise SpecError(c.field(key), _short(pattern), f"the same layers as {type_key}, or absent")
    return pattern, key


def _pattern(c: HFConfig) -> tuple[str, str]:
    """The model's layer pattern (from either key) and the key."""
    found = _layers(c, ("layers_block_type", "layer_types"), "hybrid_override_pattern")
    if found is None:
        raise SpecError(c.field("hybrid_override_pattern"), None,
                        f"required (or layers_block_type) in a {c.model_type} config.json ({c.where})")
    return found


def blocks(pattern: str, field: str = "hybrid_override_pattern") -> tuple[int, int, int]:
    """``(blocks, Mamba-2 blocks, MLP-free blocks)`` of a pattern: each mixer (``M``, ``*``) opens
    a block, each MLP (``-`` dense, ``E`` MoE) joins the open block if it has no MLP yet."""
    mixers = mamba = with_mlp = 0
    open_has_mlp = True  # no block open yet: an MLP here has nothing to join
    for i, ch in enumerate(pattern):
        if ch in MLP_CHARS:
            if open_has_mlp:
                where = "leads the pattern" if i == 0 else f"follows another MLP (position {i})"
                raise SpecError(field, _short(pattern),
                                f"a pattern whose every '-' (MLP) or 'E' (MoE) follows an 'M' or '*' (mixer); "
                                f"the {ch!r} that {where} is not expressible as mixer+MLP blocks")
            open_has_mlp = True
            with_mlp += 1
        else:
            mixers += 1
            mamba += ch == "M"
            open_has_mlp = False
    return mixers, mamba, mixers - with_mlp


def _moe(c: HFConfig, f: dict[str, Any], pattern: str) -> None:
    """The MoE fields of a pattern with ``E`` layers (see the module docstring)."""
    if c.has("moe_latent_size"):
        raise SpecError(c.field("moe_latent_size"), _short(c.data["moe_latent_size"]),
                        "null or absent: latent MoE projections (NemotronHMoE fc1_latent_proj/fc2_latent_proj) "
                        "are not modelled")
    if f["mlp_bias"]:
        raise SpecError(c.field("mlp_bias"), True,
                        "false in an MoE config: NemotronHExperts has no biases while the dense and shared-expert "
                        "MLPs have them, which one mlp_bias cannot express")
    expert_ffn = c.integer("moe_intermediate_size")
    shared_ffn = c.integer("moe_shared_expert_intermediate_size")
    shared = c.integer("n_shared_experts", bound=COUNT)
    if shared == 0:
        raise SpecError(c.field("n_shared_experts"), 0,
                        f"at least 1: NemotronHMoE builds its shared-expert MLP ({shared_ffn} wide, "
                        f"moe_shared_expert_intermediate_size) whatever n_shared_experts says")
    if shared_ffn % expert_ffn:
        raise SpecError(c.field("moe_shared_expert_intermediate_size"), shared_ffn,
                        f"a multiple of moe_intermediate_size={expert_ffn}: a shared expert of another width "
                        f"is not expressible (ModelSpec counts shared experts as routed-expert-wide MLPs)")
    count = shared_ffn // expert_ffn
    f.update(
        moe_experts=_aliased(c, ("n_routed_experts", "num_local_experts"), EXPERTS),
        moe_topk=c.integer("num_experts_per_tok", bound=EXPERTS),
        moe_expert_ffn=expert_ffn,
        moe_shared_experts=count,
        moe_router_bias=True,  # NemotronHTopkRouter.e_score_correction_bias, a buffer
    )
    dense = pattern.count("-")  # each '-' is the MLP of its own block (see blocks())
    if dense:
        f.update(moe_dense_layers=dense, moe_dense_interleaved=True)
    if shared != 1:
        note(f, f"n_shared_experts={shared}: NemotronHMoE builds one shared-expert MLP "
                f"moe_shared_expert_intermediate_size={shared_ffn} wide (the total width, as in Megatron-Core), "
                f"counted as {count} of the routed experts' {expert_ffn}")
    elif count != 1:
        note(f, f"1 shared expert {shared_ffn} wide counted as {count} of the routed experts' {expert_ffn}")


def _mtp(c: HFConfig, f: dict[str, Any], depth: int, mlp: str) -> None:
    """A note on ``num_nextn_predict_layers``: not counted, as DeepSeek-V3's are not (transformers
    builds none); whether ``--mtp-layers`` would train them as the checkpoint lays them out (one
    attention + MLP block, ``mlp``: the model's MLP kind, ``E`` or ``-``)."""
    found = _layers(c, ("mtp_layers_block_type",), "mtp_hybrid_override_pattern")
    layout = found[0] if found is not None else "*E"  # transformers' default
    want, _spelled = _MTP_LAYOUT[mlp]
    how = (f"`--mtp-layers {depth}` trains them as laid out ({want!r}: one attention and one "
           f"{'MoE' if mlp == 'E' else 'MLP'} block each)" if layout == want else
           f"their layout {layout!r} is not trainperf's MTP module ({want!r})")
    note(f, f"num_nextn_predict_layers={depth}: multi-token-prediction modules not counted (transformers builds "
            f"none and drops the checkpoint's mtp.* weights); {how}")


def nemotron_h(c: HFConfig) -> dict[str, Any]:
    c.defaults = {**_DEFAULTS, **c.defaults}
    pattern, pattern_key = _pattern(c)
    declared = c.opt_integer("num_hidden_layers", _PATTERN)
    if declared is not None and declared != len(pattern):
        raise SpecError(c.field("num_hidden_layers"), declared,
                        f"the length of {pattern_key} ({len(pattern)} layers)")
    layers, mamba, mlp_free = blocks(pattern, c.field(pattern_key))
    if layers > LAYERS.hi:
        raise SpecError(c.field(pattern_key), _short(pattern), f"at most {LAYERS.hi:,} mixers ({LAYERS.why})")
    f: dict[str, Any] = {
        "layers": layers,
        "mlp_free_layers": mlp_free,
        "hidden": c.integer("hidden_size"),
        "heads": c.integer("num_attention_heads", bound=HEADS),
        "kv_heads": c.integer("num_key_value_heads", bound=HEADS),
        "head_dim": _aliased(c, ("head_dim", "attention_head_dim"), WIDTH),
        "ffn_hidden": c.integer("intermediate_size"),
        "vocab": c.integer("vocab_size", bound=VOCAB),
        "max_seq_len": c.integer("max_position_embeddings", bound=POSITIONS),
        "tied_embeddings": False,  # see the module docstring
        "mlp": plain_mlp(c, "mlp_hidden_act", "relu2"),  # NemotronHMLP and NemotronHExperts alike
        "norm": "rmsnorm",
        "position": "none",
        "attn_bias": c.flag("attention_bias", False),
        "mlp_bias": c.flag("mlp_bias", False),
    }
    moe = "E" in pattern
    if moe:
        _moe(c, f, pattern)
    depth = c.integer("num_nextn_predict_layers", bound=LAYERS_OR_ZERO)
    if depth:
        _mtp(c, f, depth, "E" if moe else "-")
    if c.flag("tie_word_embeddings", False):
        note(f, "tie_word_embeddings=true: NemotronHForCausalLM ties nothing (transformers 5.x), so the "
                "LM head is counted apart from the embedding")
    if not mamba:
        return f
    f.update(
        mamba_layers=mamba,
        mamba_heads=c.integer("mamba_num_heads", bound=HEADS),
        mamba_head_dim=c.integer("mamba_head_dim"),
        mamba_state_dim=c.integer("ssm_state_size"),
        mamba_groups=_aliased(c, ("n_groups", "mamba_n_groups"), HEADS),
        mamba_conv_kernel=_aliased(c, ("conv_kernel", "mamba_d_conv"), MODEL_FIELD_BOUNDS["mamba_conv_kernel"]),
        mamba_chunk=_aliased(c, ("chunk_size", "mamba_chunk_size"), POSITIONS),
    )
    inner = f["mamba_heads"] * f["mamba_head_dim"]
    conv_dim = inner + 2 * f["mamba_groups"] * f["mamba_state_dim"]
    if c.flag("use_bias", False):
        note(f, f"use_bias: the Mamba-2 in_proj and out_proj biases ({inner + conv_dim + f['mamba_heads']} + "
                f"{f['hidden']} values a Mamba-2 layer) are not counted")
    if not _aliased_flag(c, ("use_conv_bias", "mamba_conv_bias"), True):
        note(f, f"use_conv_bias=false: the {conv_dim} convolution biases of a Mamba-2 layer are counted all the same")
    return f
