"""Nemotron-H (NVIDIA): hybrid Mamba-2 / attention decoders of single-op layers.

Follows transformers' ``NemotronHConfig`` (``models/nemotron_h/configuration_nemotron_h.py``, whose
defaults apply to absent keys) and ``models/nemotron_h/modeling_nemotron_h.py``, which also read
the config.json files written for NVIDIA's remote-code ``configuration_nemotron_h.py``:

* The layers are single ops, each a ``NemotronHBlock`` of one RMSNorm and one mixer, listed by
  ``hybrid_override_pattern`` (``M`` Mamba-2, ``*`` attention, ``-`` MLP; NVIDIA's configs) or
  ``layers_block_type`` (``linear_attention``/``mamba``, ``full_attention``/``attention``,
  ``mlp``; transformers 5.x, also as ``layer_types``). :class:`~trainperf.specs.model.ModelSpec`
  counts blocks of a mixer and an MLP: each mixer opens a block and an MLP joins the mixer before
  it, so ``M-M*-`` is three blocks (Mamba-2 + MLP, Mamba-2 alone, attention + MLP). An MLP with no
  mixer before it (a leading ``-``, or ``--``) has no such block and is rejected, as are the MoE
  layers (``E``, ``moe``) of the later Nemotron releases.
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
* ``NemotronHForCausalLM`` declares no tied weights (``_tied_weights_keys = {}``): the LM head is
  its own matrix even under ``tie_word_embeddings: true`` (false in every released config), which
  is then noted.
* The old spellings ``mamba_n_groups``, ``mamba_d_conv``, ``mamba_chunk_size``, ``mamba_conv_bias``
  (NVIDIA's remote code; transformers renames them on load) and ``attention_head_dim`` are read
  too; given with the new spelling and a different value, the config is rejected as ambiguous.
* ``num_hidden_layers`` (deprecated in transformers 5.x) must equal the pattern's length when given.
"""

from __future__ import annotations

from typing import Any

from trainperf.errors import SpecError
from trainperf.specs.bounds import MODEL_FIELD_BOUNDS
from trainperf.specs.hf_families.base import (
    HEADS,
    LAYERS,
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
    "chunk_size": 128,
}

PATTERN_CHARS = {"M": "Mamba-2", "*": "attention", "-": "MLP"}
"""``hybrid_override_pattern`` characters trainperf models."""

BLOCK_TYPES = {"linear_attention": "M", "mamba": "M", "full_attention": "*", "attention": "*", "mlp": "-"}
"""``layers_block_type`` entries (transformers 5.x names and their legacy aliases) -> pattern characters."""

_PATTERN = Bound(1, 2 * LAYERS.hi, f"{LAYERS.why}; a block is at most two pattern layers")
_VALID_PATTERN = "a string of 'M' (Mamba-2), '*' (attention) and '-' (MLP)"


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


def _pattern(c: HFConfig) -> tuple[str, str]:
    """The layer pattern as a string of ``M``, ``*``, ``-`` (from either key), validated, and the key."""
    type_key = next((k for k in ("layers_block_type", "layer_types") if c.has(k)), None)
    from_types = None
    if type_key is not None:
        types = c.items(type_key) or []
        if not _PATTERN.lo <= len(types) <= _PATTERN.hi:
            raise SpecError(c.field(type_key), _short(types), f"a list of {_PATTERN.lo} to {_PATTERN.hi:,} entries")
        for item in types:
            if not isinstance(item, str) or item not in BLOCK_TYPES:
                hint = " (MoE layers are not modelled)" if item == "moe" else ""
                raise SpecError(c.field(type_key), _short(types),
                                f"a list of {', '.join(repr(t) for t in BLOCK_TYPES)}; {item!r} is not one{hint}")
        from_types = "".join(BLOCK_TYPES[t] for t in types)
    key = "hybrid_override_pattern"
    if not c.has(key):
        if from_types is None or type_key is None:
            raise SpecError(c.field(key), None,
                            f"required (or layers_block_type) in a {c.model_type} config.json ({c.where})")
        return from_types, type_key
    pattern = c.text(key, "")
    if not _PATTERN.lo <= len(pattern) <= _PATTERN.hi:
        raise SpecError(c.field(key), _short(pattern), f"{_VALID_PATTERN}, {_PATTERN.lo} to {_PATTERN.hi:,} long")
    bad = next((ch for ch in pattern if ch not in PATTERN_CHARS), None)
    if bad is not None:
        hint = " (the MoE layers of later Nemotron releases are not modelled)" if bad == "E" else ""
        raise SpecError(c.field(key), _short(pattern), f"{_VALID_PATTERN}; {bad!r} is not one{hint}")
    if from_types is not None and from_types != pattern:
        raise SpecError(c.field(key), _short(pattern), f"the same layers as {type_key}, or absent")
    return pattern, key


def blocks(pattern: str, field: str = "hybrid_override_pattern") -> tuple[int, int, int]:
    """``(blocks, Mamba-2 blocks, MLP-free blocks)`` of a pattern: each mixer (``M``, ``*``) opens
    a block, each MLP (``-``) joins the open block if it has no MLP yet."""
    mixers = mamba = with_mlp = 0
    open_has_mlp = True  # no block open yet: an MLP here has nothing to join
    for i, ch in enumerate(pattern):
        if ch == "-":
            if open_has_mlp:
                where = "leads the pattern" if i == 0 else f"follows another MLP (position {i})"
                raise SpecError(field, _short(pattern),
                                f"a pattern whose every '-' (MLP) follows an 'M' or '*' (mixer); the '-' that "
                                f"{where} is not expressible as mixer+MLP blocks")
            open_has_mlp = True
            with_mlp += 1
        else:
            mixers += 1
            mamba += ch == "M"
            open_has_mlp = False
    return mixers, mamba, mixers - with_mlp


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
        "mlp": plain_mlp(c, "mlp_hidden_act", "relu2"),
        "norm": "rmsnorm",
        "position": "none",
        "attn_bias": c.flag("attention_bias", False),
        "mlp_bias": c.flag("mlp_bias", False),
    }
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
