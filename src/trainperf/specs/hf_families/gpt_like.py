"""GPT-style decoders: LayerNorm, plain GELU/ReLU MLP, biases.

Families and the transformers modelling files their counts follow:

* ``gpt2`` (``models/gpt2/modeling_gpt2.py``): ``n_layer``/``n_embd``/``n_head``, ``n_inner``
  (null = 4 x n_embd), learned positions of ``n_positions``, biases and LayerNorm, tied.
* ``gpt_neox`` (``modeling_gpt_neox.py``): LayerNorm with biases, RoPE, GELU MLP with biases,
  ``attention_bias`` (default true) on query_key_value and dense, ``use_parallel_residual``.
* ``mpt`` (MosaicML's ``modeling_mpt.py`` / LLM Foundry): ``d_model``, ``n_heads``, ``n_layers``,
  ``expansion_ratio`` or ``ffn_config.ffn_hidden_size``, ``no_bias``, ALiBi/RoPE/learned
  positions from ``attn_config``, grouped/multi-query attention, ``mptgeglu``/``mptglu``; tied.
* ``phi`` (``modeling_phi.py``) and ``phi-msft`` (the original ``modeling_phi.py`` of
  microsoft/phi-1_5 and phi-2, ``n_embd``/``n_layer``/``n_head``): one LayerNorm per block feeding
  attention and MLP in parallel, biases on q/k/v/dense, fc1/fc2 and the LM head, partial rotary
  (no parameters), optional per-head ``qk_layernorm`` (LayerNorm with bias), untied.
* ``falcon`` (``modeling_falcon.py``; also ``RefinedWebModel``/``RefinedWeb`` configs): fused
  query_key_value of ``hidden + 2 * head_dim`` (multi-query), ``3 * hidden`` (MHA) or
  ``(heads + 2 * num_kv_heads) * head_dim`` (``new_decoder_architecture``); LayerNorms with biases
  (one per parallel block, two with ``num_ln_in_parallel_attn`` = 2, the new-architecture default,
  or without ``parallel_attn``); linear biases only with ``bias``; GELU MLP ``ffn_hidden_size``
  (default 4 x hidden); ALiBi or RoPE; tied by default.
"""

from __future__ import annotations

from typing import Any

from trainperf.errors import SpecError
from trainperf.specs.hf_families.base import (
    HEADS,
    LAYERS,
    LEARNED_POSITIONS,
    POSITIONS,
    VOCAB,
    WIDTH,
    Bound,
    HFConfig,
    gated_mlp,
    plain_mlp,
)


def gpt2(c: HFConfig) -> dict[str, Any]:
    hidden = c.integer("n_embd")
    inner = c.opt_integer("n_inner")
    return {
        "layers": c.integer("n_layer", bound=LAYERS),
        "hidden": hidden,
        "heads": c.integer("n_head", bound=HEADS),
        "ffn_hidden": inner if inner is not None else 4 * hidden,
        "vocab": c.integer("vocab_size", bound=VOCAB),
        "max_seq_len": c.integer("n_positions", 1024, LEARNED_POSITIONS),
        "tied_embeddings": c.flag("tie_word_embeddings", True),
        "mlp": plain_mlp(c, "activation_function", "gelu_new"),
        "norm": "layernorm",
        "bias": True,
        "position": "learned",
    }


def gpt_neox(c: HFConfig) -> dict[str, Any]:
    attention_bias = c.flag("attention_bias", True)
    return {
        "layers": c.integer("num_hidden_layers", bound=LAYERS),
        "hidden": c.integer("hidden_size"),
        "heads": c.integer("num_attention_heads", bound=HEADS),
        "ffn_hidden": c.integer("intermediate_size"),
        "vocab": c.integer("vocab_size", bound=VOCAB),
        "max_seq_len": c.integer("max_position_embeddings", 2048, POSITIONS),
        "tied_embeddings": c.flag("tie_word_embeddings", False),
        "mlp": plain_mlp(c, "hidden_act", "gelu"),
        "norm": "layernorm",
        "bias": attention_bias,
        "mlp_bias": True,
        "norm_bias": True,
        "position": "rope",
        "parallel_residual": c.flag("use_parallel_residual", True),
    }


def mpt(c: HFConfig) -> dict[str, Any]:
    d_model = c.integer("d_model")
    heads = c.integer("n_heads", bound=HEADS)
    attn = c.sub("attn_config", "mpt attn_config", required=False) or HFConfig({}, "mpt", c.where,
                                                                                prefix="attn_config.")
    ffn = c.sub("ffn_config", "mpt ffn_config", required=False) or HFConfig({}, "mpt", c.where,
                                                                             prefix="ffn_config.")
    ffn_hidden = ffn.opt_integer("ffn_hidden_size")
    if ffn_hidden is None:
        ratio = c.number("expansion_ratio", 4)
        if not 0 < ratio <= 1024:
            raise SpecError(c.field("expansion_ratio"), ratio, "a number between 0 and 1024")
        ffn_hidden = int(round(ratio * d_model, 6))
    attn_type = attn.text("attn_type", "multihead_attention")
    kv_heads = None
    if attn_type == "multiquery_attention":
        kv_heads = 1
    elif attn_type == "grouped_query_attention":
        kv_heads = attn.integer("kv_n_heads", heads, HEADS)
    elif attn_type != "multihead_attention":
        raise SpecError(attn.field("attn_type"), attn_type,
                        "multihead_attention, multiquery_attention or grouped_query_attention")
    if attn.flag("alibi", False):
        position = "alibi"
    elif attn.flag("rope", False):
        position = "rope"
    elif c.flag("learned_pos_emb", True):
        position = "learned"
    else:
        position = "none"
    ffn_type = ffn.text("ffn_type", "mptmlp")
    if ffn_type == "mptgeglu":
        mlp = "geglu"
    elif ffn_type == "mptglu":
        act = ffn.sub("ffn_act_fn", "mpt ffn_act_fn", required=False)
        mlp = gated_mlp(act, "name", "silu") if act is not None else "swiglu"
    elif ffn_type == "mptmlp":
        mlp = "gelu"
    else:
        raise SpecError(ffn.field("ffn_type"), ffn_type, "mptmlp, mptgeglu or mptglu")
    norm_type = c.text("norm_type", "low_precision_layernorm")
    return {
        "layers": c.integer("n_layers", bound=LAYERS),
        "hidden": d_model,
        "heads": heads,
        "kv_heads": kv_heads,
        "ffn_hidden": ffn_hidden,
        "vocab": c.integer("vocab_size", bound=VOCAB),
        "max_seq_len": c.integer("max_seq_len", 2048, LEARNED_POSITIONS if position == "learned" else POSITIONS),
        "tied_embeddings": c.flag("tie_word_embeddings", True),
        "mlp": mlp,
        "norm": "rmsnorm" if "rmsnorm" in norm_type else "layernorm",
        "bias": not c.flag("no_bias", False),
        "position": position,
    }


def _phi_common(fields: dict[str, Any]) -> dict[str, Any]:
    return {**fields, "norm": "layernorm", "bias": True, "lm_head_bias": True, "norms_per_layer": 1,
            "parallel_residual": True, "position": "rope"}


def _hf_shape(c: HFConfig, *, max_seq_default: int, tie_default: bool) -> dict[str, Any]:
    """The shape fields under transformers' standard names (``num_hidden_layers``, ``hidden_size``,
    ``num_attention_heads``, ``num_key_value_heads``, ``intermediate_size``, ``vocab_size``,
    ``max_position_embeddings``, ``tie_word_embeddings``)."""
    return {
        "layers": c.integer("num_hidden_layers", bound=LAYERS),
        "hidden": c.integer("hidden_size"),
        "heads": c.integer("num_attention_heads", bound=HEADS),
        "kv_heads": c.opt_integer("num_key_value_heads", HEADS),
        "ffn_hidden": c.integer("intermediate_size"),
        "vocab": c.integer("vocab_size", bound=VOCAB),
        "max_seq_len": c.integer("max_position_embeddings", max_seq_default, POSITIONS),
        "tied_embeddings": c.flag("tie_word_embeddings", tie_default),
    }


def phi(c: HFConfig) -> dict[str, Any]:
    return _phi_common({
        **_hf_shape(c, max_seq_default=2048, tie_default=False),
        "mlp": plain_mlp(c, "hidden_act", "gelu_new"),
        "qk_norm": c.flag("qk_layernorm", False),
    })


def phi_msft(c: HFConfig) -> dict[str, Any]:
    hidden = c.integer("n_embd")
    inner = c.opt_integer("n_inner")
    return _phi_common({
        "layers": c.integer("n_layer", bound=LAYERS),
        "hidden": hidden,
        "heads": c.integer("n_head", bound=HEADS),
        "kv_heads": c.opt_integer("n_head_kv", HEADS),
        "ffn_hidden": inner if inner is not None else 4 * hidden,
        "vocab": c.integer("vocab_size", bound=VOCAB),
        "max_seq_len": c.integer("n_positions", 2048, POSITIONS),
        "tied_embeddings": c.flag("tie_word_embeddings", False),
        "mlp": plain_mlp(c, "activation_function", "gelu_new"),
    })


def _alias(c: HFConfig, key: str, old: str, bound: Bound, default: int) -> int:
    """``key``, or its RefinedWeb spelling ``old`` when only that is present."""
    if not c.has(key) and c.has(old):
        return c.integer(old, bound=bound)
    return c.integer(key, default, bound)


def falcon(c: HFConfig, *, new_arch_default: bool = False) -> dict[str, Any]:
    hidden = _alias(c, "hidden_size", "n_embed", WIDTH, 4544)
    heads = _alias(c, "num_attention_heads", "n_head", HEADS, 71)
    layers = _alias(c, "num_hidden_layers", "n_layer", LAYERS, 32)
    new_arch = c.flag("new_decoder_architecture", new_arch_default)
    multi_query = c.flag("multi_query", True)
    parallel = c.flag("parallel_attn", True)
    if new_arch:
        kv_heads = _alias(c, "num_kv_heads", "n_head_kv", HEADS, heads)
    elif multi_query:
        kv_heads = 1
    else:
        kv_heads = heads
    if not parallel:
        norms = 2
    else:
        n_ln = c.opt_integer("num_ln_in_parallel_attn", Bound(1, 2, "1 or 2 norms in a parallel block"))
        norms = 2 if (n_ln == 2 or (n_ln is None and new_arch)) else 1
    ffn = c.opt_integer("ffn_hidden_size")
    alibi = c.flag("alibi", False)
    return {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "kv_heads": kv_heads,
        "ffn_hidden": ffn if ffn is not None else 4 * hidden,
        "vocab": c.integer("vocab_size", 65024, VOCAB),
        "max_seq_len": c.integer("max_position_embeddings", 2048, POSITIONS),
        "tied_embeddings": c.flag("tie_word_embeddings", True),
        "mlp": plain_mlp(c, "activation", "gelu"),
        "norm": "layernorm",
        "bias": c.flag("bias", False),
        "norm_bias": True,
        "norms_per_layer": norms,
        "parallel_residual": parallel,
        "position": "alibi" if alibi else "rope",
    }


def refined_web(c: HFConfig) -> dict[str, Any]:
    """Falcon-40B/180B's original ``RefinedWeb`` configs: the new decoder architecture."""
    return falcon(c, new_arch_default=True)


def starcoder2(c: HFConfig) -> dict[str, Any]:
    """StarCoder2 (``models/starcoder2/modeling_starcoder2.py``): GQA attention and a plain
    ``c_fc``/``c_proj`` MLP, each with biases (``use_bias``), LayerNorm with bias, RoPE; a
    ``sliding_window`` on every layer when set."""
    from trainperf.specs.hf_families.llama_like import window_all_layers

    use_bias = c.flag("use_bias", True)
    f = {
        **_hf_shape(c, max_seq_default=4096, tie_default=True),
        "mlp": plain_mlp(c, "hidden_act", "gelu_pytorch_tanh"),
        "norm": "layernorm",
        "bias": use_bias,
        "mlp_bias": use_bias,
        "norm_bias": True,
        "position": "rope",
    }
    window_all_layers(c, f)
    return f
