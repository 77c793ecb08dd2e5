"""Llama 4 (``models/llama4/modeling_llama4.py``): MoE with interleaved dense layers, chunked
attention, and (for ``llama4``) a vision tower.

* Text (``Llama4TextModel``): GQA with ``head_dim``; q/k L2 norm without weights; dense layers
  use ``intermediate_size_mlp``; MoE layers (``moe_layers``, default every
  ``interleave_moe_layer_step``-th layer) hold a router (``num_local_experts x hidden``, no bias),
  ``num_local_experts`` experts and one shared expert, both ``intermediate_size`` wide.
* Attention: ``layer_types`` (``chunked_attention`` / ``full_attention``), else ``no_rope_layers``
  (1 = RoPE layer = chunked), else a NoPE full-attention layer every ``no_rope_layer_interval``
  (4) layers; chunked layers attend within ``attention_chunk_size`` (8192) tokens.
* ``llama4`` (``Llama4ForConditionalGeneration``): the text model from ``text_config`` plus the
  vision model and projector as towers.
"""

from __future__ import annotations

from typing import Any

from trainperf.errors import SpecError
from trainperf.specs.hf_families.base import (
    EXPERTS,
    LAYERS,
    POSITIONS,
    Bound,
    HFConfig,
    layer_types,
    note,
    rope_decoder,
)
from trainperf.specs.hf_families.vision import llama4_projector, llama4_vision

LLAMA4_TEXT_DEFAULTS = {
    "vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
    "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
    "max_position_embeddings": 4096 * 32, "num_experts_per_tok": 1, "num_local_experts": 16,
    "interleave_moe_layer_step": 1, "no_rope_layer_interval": 4, "attention_chunk_size": 8192,
}
"""``Llama4TextConfig`` defaults, used for the keys a config omits."""


def llama4_text(c: HFConfig) -> dict[str, Any]:
    c.defaults = {**LLAMA4_TEXT_DEFAULTS, **c.defaults}
    f = rope_decoder(c, tie_default=False, max_seq_default=4096 * 32)
    layers = f["layers"]
    expert_ffn = f["ffn_hidden"]
    f["ffn_hidden"] = c.integer("intermediate_size_mlp")
    f["attn_bias"] = c.flag("attention_bias", False)
    moe_layers = c.integer_list("moe_layers", Bound(0, layers - 1, f"a layer index below {layers}"))
    if moe_layers is None:
        step = c.integer("interleave_moe_layer_step", bound=LAYERS)
        moe_layers = list(range(step - 1, layers, step))
    n_moe = len(set(moe_layers))
    if n_moe:
        f.update(moe_experts=c.integer("num_local_experts", bound=EXPERTS),
                 moe_topk=c.integer("num_experts_per_tok", bound=EXPERTS),
                 moe_expert_ffn=expert_ffn, moe_shared_experts=1, moe_dense_layers=layers - n_moe)
        if layers - n_moe:
            leading = set(moe_layers) == set(range(layers - n_moe, layers))
            f["moe_dense_interleaved"] = not leading
            note(f, f"{layers - n_moe} dense layers " + ("before the MoE layers" if leading
                                                          else "interleaved with the MoE layers"))
    types = layer_types(c, layers, ("full_attention", "chunked_attention"))
    if types is not None:
        chunked = types.count("chunked_attention")
    else:
        no_rope = c.items("no_rope_layers")
        if no_rope:  # transformers treats an empty list as absent
            if len(no_rope) != layers or any(v not in (0, 1) or isinstance(v, float) for v in no_rope):
                raise SpecError(c.field("no_rope_layers"), no_rope[:8],
                                f"a list of {layers} flags 0/1 (1 = RoPE, chunked attention)")
            chunked = sum(no_rope)
        else:
            interval = c.integer("no_rope_layer_interval", bound=LAYERS)
            chunked = sum(1 for i in range(layers) if (i + 1) % interval)
    chunk = c.opt_integer("attention_chunk_size", POSITIONS)
    if chunk and chunked:
        f["attention_chunk"] = chunk
        f["chunked_attention_layers"] = chunked
    return f


def llama4(c: HFConfig) -> dict[str, Any]:
    text = c.sub("text_config", "llama4_text")
    assert text is not None
    f = llama4_text(text)
    f["tied_embeddings"] = c.flag("tie_word_embeddings", f["tied_embeddings"])
    vision = c.sub("vision_config", "llama4_vision_model", required=False)
    if vision is None:
        note(f, "no vision_config: counted as a text model")
        return f
    f["towers"] = (llama4_vision(vision), llama4_projector(vision, f["hidden"]))
    note(f, "multimodal checkpoint: the text model is counted for FLOPs; the vision model and "
            "projector are listed as towers and included in checkpoint_params")
    return f
