"""Parameter counts of the non-text towers of a multimodal checkpoint.

A multimodal checkpoint (Gemma 3, Llama 4) holds a vision encoder and a projector besides the
text model. trainperf trains and counts FLOPs for the text model only; the towers are carried as
counts so that ``checkpoint_params`` matches the whole checkpoint and the output can say what was
left out of the FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tower:
    """One non-text part of a checkpoint, as a parameter count."""

    name: str
    """Module name in the checkpoint (``vision_tower``, ``multi_modal_projector``)."""
    kind: str
    """``vision`` (image encoder) or ``projector`` (maps image features into the text width)."""
    params: int
    """Parameters (weights and biases), a count, not bytes."""
    architecture: str = ""
    """What it is, e.g. ``SigLIP ViT 27 x 1152`` (free text, for display)."""
    source: str = ""
    """The transformers modelling file whose module structure the count follows."""
    parts: tuple[tuple[str, int], ...] = ()
    """Breakdown ``(part, params)`` (patch embedding, encoder layers, ...); sums to ``params``."""
