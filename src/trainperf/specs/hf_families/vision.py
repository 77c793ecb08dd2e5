"""Parameter counts of the vision towers and projectors of multimodal checkpoints.

* Gemma 3: ``SiglipVisionModel`` (``models/siglip/modeling_siglip.py``) and
  ``Gemma3MultiModalProjector`` (``models/gemma3/modeling_gemma3.py``).
* Llama 4: ``Llama4VisionModel`` and ``Llama4MultiModalProjector``
  (``models/llama4/modeling_llama4.py``).

Only parameter counts: trainperf's FLOPs are those of the text model.
"""

from __future__ import annotations

from trainperf.errors import SpecError
from trainperf.specs.hf_families.base import HEADS, LAYERS, Bound, HFConfig
from trainperf.specs.towers import Tower

_IMAGE = Bound(1, 1 << 16, "trainperf's bound on an image side in pixels (65,536)")
_CHANNELS = Bound(1, 64, "trainperf's bound on image channels (64)")

_SIGLIP_DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                    "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 16}


def _patch_grid(v: HFConfig) -> tuple[int, int]:
    image = v.integer("image_size", bound=_IMAGE)
    patch = v.integer("patch_size", bound=_IMAGE)
    if patch > image:
        raise SpecError(v.field("patch_size"), patch, f"at most image_size={image}")
    return image, patch


def _vit_layer(h: int, i: int) -> int:
    """One pre-LN ViT block with biases: q, k, v, o (h x h + h each), fc1/fc2, two LayerNorms."""
    return 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h


def siglip_vision(v: HFConfig) -> Tower:
    """``SiglipVisionModel``: Conv2d patch embedding (with bias), learned positions, encoder,
    post LayerNorm and, when ``vision_use_head`` (default true), the attention-pooling head."""
    v.defaults = {**_SIGLIP_DEFAULTS, **v.defaults}
    h, i = v.integer("hidden_size"), v.integer("intermediate_size")
    layers = v.integer("num_hidden_layers", bound=LAYERS)
    v.integer("num_attention_heads", bound=HEADS)
    c = v.integer("num_channels", bound=_CHANNELS)
    image, patch = _patch_grid(v)
    parts = [
        ("patch_embedding", c * patch * patch * h + h),
        ("position_embedding", (image // patch) ** 2 * h),
        ("encoder_layers", layers * _vit_layer(h, i)),
        ("post_layernorm", 2 * h),
    ]
    if v.flag("vision_use_head", True):
        # probe, nn.MultiheadAttention (in_proj 3h x h + 3h, out_proj h x h + h), LayerNorm, MLP
        parts.append(("head", h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (h * i + i) + (i * h + h)))
    return Tower(name="vision_tower", kind="vision", params=sum(p for _, p in parts),
                 architecture=f"SigLIP ViT {layers} x {h}, patch {patch}, image {image}",
                 source="transformers models/siglip/modeling_siglip.py (SiglipVisionModel)",
                 parts=tuple(parts))


def gemma3_projector(v: HFConfig, text_hidden: int) -> Tower:
    """``Gemma3MultiModalProjector``: ``mm_input_projection_weight`` (vision x text width) and
    ``mm_soft_emb_norm`` (Gemma RMSNorm over the vision width); the average pooling has none."""
    h = v.integer("hidden_size")
    parts = (("mm_input_projection_weight", h * text_hidden), ("mm_soft_emb_norm", h))
    return Tower(name="multi_modal_projector", kind="projector", params=sum(p for _, p in parts),
                 architecture=f"linear {h} -> {text_hidden} after RMSNorm",
                 source="transformers models/gemma3/modeling_gemma3.py (Gemma3MultiModalProjector)",
                 parts=parts)


_LLAMA4_VISION_DEFAULTS = {"hidden_size": 768, "num_hidden_layers": 34, "num_attention_heads": 16,
                           "num_channels": 3, "intermediate_size": 5632, "vision_output_dim": 7680,
                           "image_size": 448, "patch_size": 14, "projector_input_dim": 4096,
                           "projector_output_dim": 4096}


def llama4_vision(v: HFConfig) -> Tower:
    """``Llama4VisionModel``: unfold + linear patch embedding (no bias), class embedding,
    learned positions (patches + 1), pre/post LayerNorms, encoder layers with biases, and the
    pixel-shuffle adapter ``vision_adapter`` (fc1 ``intermediate_size -> projector_input_dim``,
    fc2 ``projector_output_dim`` square, no biases)."""
    v.defaults = {**_LLAMA4_VISION_DEFAULTS, **v.defaults}
    h, i = v.integer("hidden_size"), v.integer("intermediate_size")
    layers = v.integer("num_hidden_layers", bound=LAYERS)
    v.integer("num_attention_heads", bound=HEADS)
    c = v.integer("num_channels", bound=_CHANNELS)
    image, patch = _patch_grid(v)
    p_in, p_out = v.integer("projector_input_dim"), v.integer("projector_output_dim")
    parts = (
        ("patch_embedding", c * patch * patch * h),
        ("class_embedding", h),
        ("positional_embedding_vlm", ((image // patch) ** 2 + 1) * h),
        ("layernorm_pre_post", 2 * 2 * h),
        ("encoder_layers", layers * _vit_layer(h, i)),
        ("vision_adapter", i * p_in + p_out * p_out),
    )
    return Tower(name="vision_model", kind="vision", params=sum(p for _, p in parts),
                 architecture=f"ViT {layers} x {h}, patch {patch}, image {image}, pixel-shuffle adapter",
                 source="transformers models/llama4/modeling_llama4.py (Llama4VisionModel)", parts=parts)


def llama4_projector(v: HFConfig, text_hidden: int) -> Tower:
    """``Llama4MultiModalProjector``: one linear ``vision_output_dim -> text hidden``, no bias."""
    v.defaults = {**_LLAMA4_VISION_DEFAULTS, **v.defaults}
    out = v.integer("vision_output_dim")
    if v.flag("multi_modal_projector_bias", False):
        raise SpecError(v.field("multi_modal_projector_bias"), True,
                        "false (transformers' Llama4MultiModalProjector has no bias)")
    return Tower(name="multi_modal_projector", kind="projector", params=out * text_hidden,
                 architecture=f"linear {out} -> {text_hidden}",
                 source="transformers models/llama4/modeling_llama4.py (Llama4MultiModalProjector)",
                 parts=(("linear_1", out * text_hidden),))
