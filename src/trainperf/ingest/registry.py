"""The registry of log formats: name -> parser class, and auto-detection over a sample of lines."""

from __future__ import annotations

import importlib

from trainperf.errors import UnknownNameError
from trainperf.ingest.base import LogParser

# name -> (module, class). Order breaks detection ties (more specific formats first).
FORMATS: dict[str, tuple[str, str]] = {
    "trainperf": ("trainperf.ingest.trainperf_jsonl", "TrainperfJsonlParser"),
    "maxtext": ("trainperf.ingest.maxtext", "MaxTextParser"),
    "torchtitan": ("trainperf.ingest.torchtitan", "TorchtitanParser"),
    "megatron": ("trainperf.ingest.megatron", "MegatronParser"),
    "nemo": ("trainperf.ingest.megatron", "NemoParser"),
    "composer": ("trainperf.ingest.composer", "ComposerParser"),
    "hf-trainer": ("trainperf.ingest.hf_trainer", "HfTrainerParser"),
    "nanogpt": ("trainperf.ingest.nanogpt", "NanoGptParser"),
}
ALIASES = {"llm-foundry": "composer", "llmfoundry": "composer", "hf": "hf-trainer",
           "transformers": "hf-trainer", "megatron-lm": "megatron", "jsonl": "trainperf",
           "nano-gpt": "nanogpt", "titan": "torchtitan"}


def format_names() -> list[str]:
    return list(FORMATS)


def get_parser(name: str) -> LogParser:
    """A fresh parser for format ``name`` (aliases such as ``llm-foundry`` accepted)."""
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in FORMATS:
        raise UnknownNameError("format", name, FORMATS)
    module, cls = FORMATS[key]
    return getattr(importlib.import_module(module), cls)()


def detect_format(sample_lines: list[str]) -> tuple[str | None, dict[str, float]]:
    """The best-scoring format for ``sample_lines`` (``None`` if none scores above 0) and all scores."""
    scores = {name: get_parser(name).detect(sample_lines) for name in FORMATS}
    best = max(scores, key=lambda n: scores[n])  # max keeps the first of equal scores
    return (best if scores[best] > 0 else None), scores
