"""Gemma 1/2/3 (``models/gemma*/modeling_gemma*.py``): GeGLU, RMSNorm, tied, ``head_dim`` 256.

* ``gemma``: two norms per block.
* ``gemma2``: four norms per block (``input_layernorm``, ``post_attention_layernorm``,
  ``pre_feedforward_layernorm``, ``post_feedforward_layernorm``); local/global alternation (even
  layers local) unless ``layer_types`` says otherwise.
* ``gemma3_text``: as Gemma 2 plus per-head q/k RMSNorm; 5 local layers per global one
  (``sliding_window_pattern`` 6). Keys the official configs omit take ``Gemma3TextConfig``
  defaults (vocab 262208, 8 heads, 4 KV heads, head_dim 256, window 4096).
* ``gemma3`` (``Gemma3ForConditionalGeneration``): the text model from ``text_config``, plus the
  SigLIP vision tower and the projector as :class:`~trainperf.specs.towers.Tower` counts.
"""

from __future__ import annotations

from typing import Any

from trainperf.specs.hf_families.base import LAYERS, HFConfig, gated_mlp, layer_types, note, rope_decoder
from trainperf.specs.hf_families.vision import gemma3_projector, siglip_vision
from trainperf.specs.towers import Tower

_LOCAL_GLOBAL = ("full_attention", "sliding_attention")


def _act(c: HFConfig) -> str:
    # Gemma 1 configs carry hidden_act "gelu" and hidden_activation (null or gelu_pytorch_tanh).
    key = "hidden_activation" if c.has("hidden_activation") else "hidden_act"
    return gated_mlp(c, key, "gelu_pytorch_tanh")


def gemma(c: HFConfig) -> dict[str, Any]:
    c.defaults = {"head_dim": 256, **c.defaults}
    f = rope_decoder(c, tie_default=True, max_seq_default=8192, act_default="gelu_pytorch_tanh")
    f["mlp"] = _act(c)
    return f


def _windows(c: HFConfig, f: dict[str, Any], default_local: int) -> None:
    types = layer_types(c, f["layers"], _LOCAL_GLOBAL)
    n = types.count("sliding_attention") if types is not None else default_local
    window = c.opt_integer("sliding_window")
    if window and n:
        f["sliding_window"] = window
        f["sliding_window_layers"] = n


def gemma2(c: HFConfig) -> dict[str, Any]:
    c.defaults = {"head_dim": 256, "sliding_window": 4096, **c.defaults}
    f = gemma(c)
    f["norms_per_layer"] = 4
    _windows(c, f, (f["layers"] + 1) // 2)  # even-indexed layers are local
    return f


GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "max_position_embeddings": 131072, "sliding_window": 4096, "sliding_window_pattern": 6,
}
"""``Gemma3TextConfig`` defaults, used for the keys a config omits."""


def gemma3_text(c: HFConfig) -> dict[str, Any]:
    c.defaults = {**GEMMA3_TEXT_DEFAULTS, **c.defaults}
    f = gemma(c)
    f["qk_norm"] = True
    f["norms_per_layer"] = 4
    pattern = c.integer("sliding_window_pattern", 6, LAYERS)
    local = sum(1 for i in range(f["layers"]) if (i + 1) % pattern) if pattern > 1 else 0
    _windows(c, f, local)
    return f


def gemma3(c: HFConfig) -> dict[str, Any]:
    text = c.sub("text_config", "gemma3_text")
    assert text is not None
    f = gemma3_text(text)
    f["tied_embeddings"] = c.flag("tie_word_embeddings", f["tied_embeddings"])
    towers: list[Tower] = []
    vision = c.sub("vision_config", "siglip_vision_model", required=False)
    if vision is None:
        note(f, "no vision_config: counted as a text model")
    else:
        towers = [siglip_vision(vision), gemma3_projector(vision, f["hidden"])]
        note(f, "multimodal checkpoint: the text model is counted for FLOPs; the vision tower and "
                "projector are listed as towers and included in checkpoint_params")
    f["towers"] = tuple(towers)
    return f
