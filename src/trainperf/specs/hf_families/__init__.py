"""Per-family readers of Hugging Face ``config.json`` files: ``model_type`` -> ModelSpec fields.

Each reader takes an :class:`~trainperf.specs.hf_families.base.HFConfig` and returns the keyword
arguments of :class:`~trainperf.specs.model.ModelSpec`; its module docstring cites the
transformers modelling file whose modules the counts follow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainperf.specs.hf_families import deepseek, gemma, gpt_like, llama4, llama_like, nemotron_h
from trainperf.specs.hf_families.base import HFConfig

Reader = Callable[[HFConfig], dict[str, Any]]

READERS: dict[str, Reader] = {
    "llama": llama_like.llama,
    "mistral": llama_like.mistral,
    "mixtral": llama_like.mixtral,
    "qwen2": llama_like.qwen2,
    "qwen2_moe": llama_like.qwen2_moe,
    "qwen3": llama_like.qwen3,
    "qwen3_moe": llama_like.qwen3_moe,
    "phi3": llama_like.phi3,
    "granite": llama_like.granite,
    "granitemoe": llama_like.granitemoe,
    "smollm3": llama_like.smollm3,
    "olmo2": llama_like.olmo2,
    "olmoe": llama_like.olmoe,
    "gpt_oss": llama_like.gpt_oss,
    "llama4": llama4.llama4,
    "llama4_text": llama4.llama4_text,
    "gpt2": gpt_like.gpt2,
    "gpt_neox": gpt_like.gpt_neox,
    "starcoder2": gpt_like.starcoder2,
    "mpt": gpt_like.mpt,
    "phi": gpt_like.phi,
    "phi-msft": gpt_like.phi_msft,
    "falcon": gpt_like.falcon,
    "RefinedWebModel": gpt_like.falcon,
    "RefinedWeb": gpt_like.refined_web,
    "gemma": gemma.gemma,
    "gemma2": gemma.gemma2,
    "gemma3_text": gemma.gemma3_text,
    "gemma3": gemma.gemma3,
    "deepseek_v2": deepseek.deepseek_v2,
    "deepseek_v3": deepseek.deepseek_v3,
    "kimi_k2": deepseek.deepseek_v3,
    "glm4_moe": deepseek.glm4_moe,
    "nemotron_h": nemotron_h.nemotron_h,
}
"""``model_type`` -> reader."""
