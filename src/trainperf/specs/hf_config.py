"""Read a Hugging Face ``config.json`` into a :class:`~trainperf.specs.model.ModelSpec`.

Only the :mod:`json` module is used (transformers is never imported). Each supported
``model_type`` maps its own field names, and where a key is absent the default of the matching
transformers config class is used (e.g. Gemma and GPT-2 tie embeddings by default, Llama and
Qwen2 do not). Shape keys (layers, width, heads, MLP width, vocabulary) are required and a
missing one raises :class:`SpecError` naming it.

Supported families and their mapping:

* ``llama``, ``mistral``, ``mixtral``: RMSNorm, RoPE, GQA via ``num_key_value_heads`` (absent
  means MHA), ``head_dim`` when present, gated MLP (``silu`` -> SwiGLU, ``gelu*`` -> GeGLU).
  Llama's ``attention_bias`` sets ``qkv_bias`` (the output projection's bias is not counted).
  Mistral/Mixtral ``sliding_window`` (when not null) applies to every layer. Mixtral's
  ``num_local_experts``/``num_experts_per_tok`` with ``intermediate_size`` per expert.
* ``qwen2``: as Llama plus biases on q/k/v (always, in transformers' Qwen2Attention).
  Sliding windows only when ``use_sliding_window`` is true, on layers ``>= max_window_layers``.
* ``qwen2_moe``: ``num_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``. Its shared
  expert is one MLP of width ``shared_expert_intermediate_size``; ModelSpec's shared experts are
  each ``moe_expert_ffn`` wide, so it becomes ``moe_shared_experts = shared_width /
  moe_intermediate_size`` (4 for Qwen1.5-MoE-A2.7B, 8 for Qwen2-57B-A14B), which has exactly the
  same parameters and FLOPs. If the width is not a multiple, the nearest count is used and the
  approximation is recorded in ``extra["notes"]``. The shared expert's sigmoid gate
  (``hidden`` weights per layer) is not counted. Dense layers from ``mlp_only_layers`` /
  ``decoder_sparse_step`` are counted as ``moe_dense_layers`` (ModelSpec places them first;
  counts and FLOPs are unchanged).
* ``qwen3``, ``qwen3_moe``: ``head_dim`` (default 128), per-head q/k RMSNorm (``qk_norm``),
  ``attention_bias`` for q/k/v bias; MoE as qwen2_moe without a shared expert.
* ``gpt2``: ``n_layer``/``n_embd``/``n_head``, ``n_inner`` (None = 4 x n_embd), learned positions
  of ``n_positions``, biases and LayerNorm, tied by default, ``activation_function``
  (``gelu*`` -> gelu, ``relu`` -> relu).
* ``gpt_neox``: LayerNorm with biases, RoPE, plain GELU MLP, ``use_parallel_residual``
  (default true), untied by default.
* ``mpt``: ``d_model``/``n_heads``/``n_layers``, ``expansion_ratio`` (or
  ``ffn_config.ffn_hidden_size``), ``no_bias``, ``vocab_size``, ``max_seq_len``;
  ``attn_config.alibi`` -> ALiBi (else RoPE or learned positions), ``attn_config.attn_type``
  grouped/multi-query with ``kv_n_heads``; ``ffn_config.ffn_type`` ``mptgeglu`` -> GeGLU; tied.
* ``gemma``, ``gemma2``, ``gemma3_text`` (and ``gemma3`` through its ``text_config``): GeGLU,
  RMSNorm, tied by default, ``head_dim`` (default 256). Gemma 2 alternates local/global layers
  (even-indexed layers local); Gemma 3 has 5 local layers per global one
  (``sliding_window_pattern`` 6) and q/k norms. ``layer_types``, when present, is counted
  directly. Gemma 2/3's extra post-norms are not counted (ModelSpec has two norms per block).
  The official Gemma 3 ``text_config`` omits keys that rely on ``Gemma3TextConfig`` defaults
  (vocab 262208, 8 heads, 4 KV heads, head_dim 256, window 4096); those defaults are applied.
* ``deepseek_v3``: multi-head latent attention (``q_lora_rank`` null -> 0, ``kv_lora_rank``,
  ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``), ``n_routed_experts``,
  ``num_experts_per_tok``, ``moe_intermediate_size``, ``n_shared_experts``,
  ``first_k_dense_replace`` dense layers of ``intermediate_size``. The multi-token-prediction
  module (``num_nextn_predict_layers``) is not part of the spec.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from trainperf.errors import InputFileError, SpecError
from trainperf.specs.model import ModelSpec

_MISSING = object()


class _Config:
    """A config dict with the family name, for error messages."""

    def __init__(self, data: Mapping[str, Any], model_type: str, where: str,
                 defaults: Mapping[str, Any] | None = None) -> None:
        self.data = data
        self.model_type = model_type
        self.where = where
        self.defaults = defaults or {}

    def req(self, key: str) -> Any:
        value = self.data.get(key)
        if value is None:
            value = self.defaults.get(key)
        if value is None:
            raise SpecError(key, None, f"required in a {self.model_type} config.json ({self.where})")
        return value

    def get(self, key: str, default: Any = None) -> Any:
        """The value, or ``default`` when the key is absent or null."""
        value = self.data.get(key)
        if value is None:
            value = self.defaults.get(key, default)
        return value

    def sub(self, key: str) -> dict[str, Any]:
        value = self.data.get(key) or {}
        if not isinstance(value, Mapping):
            raise SpecError(key, value, f"a JSON object in a {self.model_type} config.json")
        return dict(value)


# --- helpers ------------------------------------------------------------------------------
def _gated_mlp(act: Any) -> str:
    a = str(act).lower()
    if a in ("silu", "swish"):
        return "swiglu"
    if a.startswith("gelu"):
        return "geglu"
    raise SpecError("hidden_act", act, "silu/swish (SwiGLU) or gelu* (GeGLU) for a gated MLP")


def _plain_mlp(act: Any) -> str:
    a = str(act).lower()
    if a.startswith("gelu"):
        return "gelu"
    if a == "relu":
        return "relu"
    if a in ("relu2", "squared-relu", "squared_relu", "relu_squared"):  # Nemotron-4 (HF: "relu2")
        return "relu2"
    raise SpecError("activation", act, "gelu*, relu or relu2 (squared ReLU)")


def _int(value: Any) -> Any:
    """Integral floats (2.0e3 in hand-written configs) become ints; the rest is left to validation."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _layer_types_sliding(c: _Config) -> int | None:
    types = c.data.get("layer_types")
    if isinstance(types, list) and types:
        return sum(1 for t in types if t == "sliding_attention")
    return None


def _rope_decoder(c: _Config, *, tie_default: bool, max_seq_default: int, act_default: str = "silu",
                  act_key: str = "hidden_act") -> dict[str, Any]:
    """Fields shared by the Llama-like families (RMSNorm, RoPE, gated MLP)."""
    return {
        "layers": c.req("num_hidden_layers"),
        "hidden": c.req("hidden_size"),
        "heads": c.req("num_attention_heads"),
        "kv_heads": c.get("num_key_value_heads"),
        "head_dim": c.get("head_dim"),
        "ffn_hidden": c.req("intermediate_size"),
        "vocab": c.req("vocab_size"),
        "max_seq_len": _int(c.get("max_position_embeddings", max_seq_default)),
        "tied_embeddings": bool(c.get("tie_word_embeddings", tie_default)),
        "mlp": _gated_mlp(c.get(act_key, act_default)),
        "norm": "rmsnorm",
        "position": "rope",
    }


def _window_all_layers(c: _Config, fields: dict[str, Any]) -> None:
    window = c.get("sliding_window")
    if window:
        n = _layer_types_sliding(c)
        fields["sliding_window"] = window
        fields["sliding_window_layers"] = fields["layers"] if n is None else n


def _qwen_window(c: _Config, fields: dict[str, Any]) -> None:
    n = _layer_types_sliding(c)
    window = c.get("sliding_window")
    if n is None:
        if not c.get("use_sliding_window", False) or not window:
            return
        layers = fields["layers"]
        n = layers - min(max(int(c.get("max_window_layers", layers)), 0), layers)
    if n and window:
        fields["sliding_window"] = window
        fields["sliding_window_layers"] = n


def _moe_dense_count(c: _Config, layers: int) -> int:
    """Qwen MoE: layers in ``mlp_only_layers`` or off the ``decoder_sparse_step`` grid are dense."""
    step = int(c.get("decoder_sparse_step", 1)) or 1
    mlp_only = set(c.get("mlp_only_layers", []) or [])
    return sum(1 for i in range(layers) if i in mlp_only or (i + 1) % step != 0)


# --- families -----------------------------------------------------------------------------
def _llama(c: _Config) -> dict[str, Any]:
    f = _rope_decoder(c, tie_default=False, max_seq_default=2048)
    f["qkv_bias"] = bool(c.get("attention_bias", False))
    return f


def _mistral(c: _Config) -> dict[str, Any]:
    f = _rope_decoder(c, tie_default=False, max_seq_default=4096 * 32)
    _window_all_layers(c, f)
    return f


def _mixtral(c: _Config) -> dict[str, Any]:
    f = _rope_decoder(c, tie_default=False, max_seq_default=4096 * 32)
    _window_all_layers(c, f)
    f["moe_experts"] = c.req("num_local_experts")
    f["moe_topk"] = c.req("num_experts_per_tok")
    f["moe_expert_ffn"] = f["ffn_hidden"]
    return f


def _qwen2(c: _Config) -> dict[str, Any]:
    f = _rope_decoder(c, tie_default=False, max_seq_default=32768)
    f["qkv_bias"] = True
    _qwen_window(c, f)
    return f


def _qwen_moe(c: _Config, f: dict[str, Any]) -> list[str]:
    notes: list[str] = []
    f["moe_experts"] = c.req("num_experts")
    f["moe_topk"] = c.req("num_experts_per_tok")
    f["moe_expert_ffn"] = c.req("moe_intermediate_size")
    dense = _moe_dense_count(c, f["layers"])
    if dense:
        f["moe_dense_layers"] = dense
        notes.append(f"{dense} dense-MLP layers (mlp_only_layers/decoder_sparse_step) counted as leading "
                     "dense layers")
    return notes


def _qwen2_moe(c: _Config) -> dict[str, Any]:
    f = _rope_decoder(c, tie_default=False, max_seq_default=32768)
    f["qkv_bias"] = True
    _qwen_window(c, f)
    notes = _qwen_moe(c, f)
    shared = c.get("shared_expert_intermediate_size", 0)
    if shared:
        expert = f["moe_expert_ffn"]
        count = max(1, round(shared / expert))
        f["moe_shared_experts"] = count
        if count * expert != shared:
            notes.append(f"shared expert width {shared} approximated as {count} x {expert}")
    if notes:
        f["extra"] = {"notes": "; ".join(notes)}
    return f


def _qwen3(c: _Config) -> dict[str, Any]:
    c.defaults = {"head_dim": 128}
    f = _rope_decoder(c, tie_default=False, max_seq_default=32768)
    f["qkv_bias"] = bool(c.get("attention_bias", False))
    f["qk_norm"] = True
    _qwen_window(c, f)
    return f


def _qwen3_moe(c: _Config) -> dict[str, Any]:
    f = _qwen3(c)
    notes = _qwen_moe(c, f)
    if notes:
        f["extra"] = {"notes": "; ".join(notes)}
    return f


def _gpt2(c: _Config) -> dict[str, Any]:
    hidden = c.req("n_embd")
    return {
        "layers": c.req("n_layer"),
        "hidden": hidden,
        "heads": c.req("n_head"),
        "ffn_hidden": c.get("n_inner") or (4 * hidden if isinstance(hidden, int) else hidden),
        "vocab": c.req("vocab_size"),
        "max_seq_len": c.get("n_positions", 1024),
        "tied_embeddings": bool(c.get("tie_word_embeddings", True)),
        "mlp": _plain_mlp(c.get("activation_function", "gelu_new")),
        "norm": "layernorm",
        "bias": True,
        "position": "learned",
    }


def _gpt_neox(c: _Config) -> dict[str, Any]:
    return {
        "layers": c.req("num_hidden_layers"),
        "hidden": c.req("hidden_size"),
        "heads": c.req("num_attention_heads"),
        "ffn_hidden": c.req("intermediate_size"),
        "vocab": c.req("vocab_size"),
        "max_seq_len": c.get("max_position_embeddings", 2048),
        "tied_embeddings": bool(c.get("tie_word_embeddings", False)),
        "mlp": _plain_mlp(c.get("hidden_act", "gelu")),
        "norm": "layernorm",
        "bias": True,
        "position": "rope",
        "parallel_residual": bool(c.get("use_parallel_residual", True)),
    }


def _mpt(c: _Config) -> dict[str, Any]:
    d_model = c.req("d_model")
    heads = c.req("n_heads")
    attn = c.sub("attn_config")
    ffn = c.sub("ffn_config")
    ffn_hidden = ffn.get("ffn_hidden_size")
    if ffn_hidden is None:
        ratio = c.get("expansion_ratio", 4)
        ffn_hidden = _int(round(ratio * d_model, 6)) if isinstance(ratio, int | float) else ratio
    attn_type = str(attn.get("attn_type", "multihead_attention"))
    kv_heads = None
    if attn_type == "multiquery_attention":
        kv_heads = 1
    elif attn_type == "grouped_query_attention":
        kv_heads = attn.get("kv_n_heads", heads)
    if attn.get("alibi", False):
        position = "alibi"
    elif attn.get("rope", False):
        position = "rope"
    elif c.get("learned_pos_emb", True):
        position = "learned"
    else:
        position = "none"
    ffn_type = str(ffn.get("ffn_type", "mptmlp"))
    if ffn_type == "mptgeglu":
        mlp = "geglu"
    elif ffn_type == "mptglu":
        mlp = _gated_mlp(ffn.get("ffn_act_fn", {}).get("name", "silu")
                         if isinstance(ffn.get("ffn_act_fn"), Mapping) else "silu")
    else:
        mlp = "gelu"
    norm_type = str(c.get("norm_type", "low_precision_layernorm"))
    return {
        "layers": c.req("n_layers"),
        "hidden": d_model,
        "heads": heads,
        "kv_heads": kv_heads,
        "ffn_hidden": ffn_hidden,
        "vocab": c.req("vocab_size"),
        "max_seq_len": c.get("max_seq_len", 2048),
        "tied_embeddings": bool(c.get("tie_word_embeddings", True)),
        "mlp": mlp,
        "norm": "rmsnorm" if "rmsnorm" in norm_type else "layernorm",
        "bias": not bool(c.get("no_bias", False)),
        "position": position,
    }


def _gemma_act(c: _Config) -> str:
    # Gemma 1 configs carry hidden_act "gelu" and hidden_activation (null or gelu_pytorch_tanh).
    return c.get("hidden_activation") or c.get("hidden_act") or "gelu_pytorch_tanh"


def _gemma(c: _Config) -> dict[str, Any]:
    c.defaults = {"head_dim": 256, **c.defaults}
    f = _rope_decoder(c, tie_default=True, max_seq_default=8192)
    f["mlp"] = _gated_mlp(_gemma_act(c))
    return f


def _gemma2(c: _Config) -> dict[str, Any]:
    c.defaults = {"head_dim": 256, "sliding_window": 4096, **c.defaults}
    f = _gemma(c)
    window = c.get("sliding_window")
    n = _layer_types_sliding(c)
    if n is None:
        n = (f["layers"] + 1) // 2 if isinstance(f["layers"], int) else 0  # even layers are local
    if window and n:
        f["sliding_window"] = window
        f["sliding_window_layers"] = n
    return f


_GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "max_position_embeddings": 131072, "sliding_window": 4096, "sliding_window_pattern": 6,
}


def _gemma3_text(c: _Config) -> dict[str, Any]:
    c.defaults = dict(_GEMMA3_TEXT_DEFAULTS)
    f = _gemma(c)
    f["qk_norm"] = True
    window = c.get("sliding_window")
    n = _layer_types_sliding(c)
    if n is None and isinstance(f["layers"], int):
        pattern = int(c.get("sliding_window_pattern", 6))
        n = sum(1 for i in range(f["layers"]) if (i + 1) % pattern) if pattern > 1 else 0
    if window and n:
        f["sliding_window"] = window
        f["sliding_window_layers"] = n
    return f


def _gemma3(c: _Config) -> dict[str, Any]:
    text = c.data.get("text_config")
    if not isinstance(text, Mapping):
        raise SpecError("text_config", text, f"a JSON object in a gemma3 config.json ({c.where})")
    return _gemma3_text(_Config(text, "gemma3_text", c.where))


def _deepseek_v3(c: _Config) -> dict[str, Any]:
    f = _rope_decoder(c, tie_default=False, max_seq_default=4096)
    f["kv_heads"] = None  # MLA: every head has its own key/value (num_key_value_heads == heads)
    f["head_dim"] = None
    f.update(
        attention="mla",
        q_lora_rank=c.get("q_lora_rank", 0) or 0,
        kv_lora_rank=c.req("kv_lora_rank"),
        qk_rope_head_dim=c.req("qk_rope_head_dim"),
        qk_nope_head_dim=c.req("qk_nope_head_dim"),
        v_head_dim=c.req("v_head_dim"),
    )
    experts = c.get("n_routed_experts", 0) or 0
    if experts:
        layers = f["layers"]
        first = int(c.get("first_k_dense_replace", 0))
        freq = int(c.get("moe_layer_freq", 1)) or 1
        moe = sum(1 for i in range(layers) if i >= first and i % freq == 0) if isinstance(layers, int) else 0
        f.update(
            moe_experts=experts,
            moe_topk=c.req("num_experts_per_tok"),
            moe_expert_ffn=c.req("moe_intermediate_size"),
            moe_shared_experts=c.get("n_shared_experts", 0) or 0,
            moe_dense_layers=layers - moe if isinstance(layers, int) else first,
        )
        if freq != 1:
            f["extra"] = {"notes": f"moe_layer_freq={freq}: dense layers counted as leading dense layers"}
    return f


_READERS: dict[str, Callable[[_Config], dict[str, Any]]] = {
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "mpt": _mpt,
    "gemma": _gemma,
    "gemma2": _gemma2,
    "gemma3_text": _gemma3_text,
    "gemma3": _gemma3,
    "deepseek_v3": _deepseek_v3,
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_READERS)
"""``model_type`` values :func:`model_from_hf_config` understands."""


def _load(path_or_dict: Any) -> tuple[dict[str, Any], str | None]:
    """The config dict and the path it came from (``None`` for a dict)."""
    if isinstance(path_or_dict, Mapping):
        return dict(path_or_dict), None
    if not isinstance(path_or_dict, str | PathLike):
        raise SpecError("hf_config", path_or_dict, "a path to config.json, a directory holding one, or a dict")
    path = Path(path_or_dict).expanduser()
    if path.is_dir():
        path = path / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such Hugging Face config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc.__class__.__name__
        raise InputFileError(f"{path}: cannot read Hugging Face config: {reason}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(
            f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise InputFileError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data, str(path)


def model_from_hf_config(path_or_dict: Any) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face ``config.json``.

    ``path_or_dict`` is a path to the file, a directory containing ``config.json``, or the
    already-parsed dict. ``name`` is ``_name_or_path`` when present, else the ``model_type``;
    ``source`` is the file path (or ``_name_or_path`` / ``"hf_config dict"`` for a dict).

    Raises ``InputFileError`` for an unreadable or malformed file, ``SpecError`` for an
    unsupported or missing ``model_type``, a missing required key, or invalid values.
    """
    data, path = _load(path_or_dict)
    model_type = data.get("model_type")
    reader = _READERS.get(model_type) if isinstance(model_type, str) else None
    if reader is None:
        raise SpecError("model_type", model_type, f"one of {', '.join(SUPPORTED_MODEL_TYPES)}")
    where = path or "dict"
    fields = reader(_Config(data, model_type, where))
    name = data.get("_name_or_path") or model_type
    source = path or data.get("_name_or_path") or "hf_config dict"
    fields = {k: _int(v) for k, v in fields.items()}
    return ModelSpec(name=str(name), source=str(source), **fields)
