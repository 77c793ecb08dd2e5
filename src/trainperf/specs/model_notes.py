"""Plain-text notes about a model that commands print besides their tables: a defaulted
``seq_len``, a sequence beyond the position table, the towers of a multimodal checkpoint, and
checkpoint buffers that are not trainable.

Policy for ``seq_len`` (documented in ``trainperf flops --help``): when neither ``--seq-len`` nor
``[training] seq_len`` is given, ``flops`` and ``models`` count at the model's position table
(``max_position_embeddings``) and say so on its own line, because attention FLOPs per token grow
with it (Llama-3.1-8B at 131,072 tokens: 2.9x its FLOPs per token at 8,192). A training workload
(``predict``, ``plan``, ``mfu``, ``bench``) takes the table capped at
:data:`TRAINING_SEQ_DEFAULT` tokens, also said on its own line: a long table is a
long-context extension (RoPE scaling, a last stage of training), not the length most steps run at.
"""

from __future__ import annotations

from typing import Any

from trainperf.numbers import fmt
from trainperf.specs.model import ModelSpec

SEQ_DEFAULT = "default"
"""Where the sequence length comes from when it is the model's position table (the other
sources: ``flag``, ``workload file``)."""


TRAINING_SEQ_DEFAULT = 8192
"""The longest default sequence of a training workload (the pretraining length of Llama 3 and
Llama 3.1, whose position tables hold 8,192 and 131,072 tokens)."""


def default_training_seq_len(model: ModelSpec) -> int:
    """A training workload's sequence length when none is given: the model's position table,
    at most :data:`TRAINING_SEQ_DEFAULT`."""
    return min(model.max_seq_len, TRAINING_SEQ_DEFAULT)


def seq_len_line(model: ModelSpec, seq_len: int, source: str) -> str | None:
    """The line that states a defaulted sequence length, or ``None`` when the user gave one."""
    if source != SEQ_DEFAULT:
        return None
    if seq_len < model.max_seq_len:
        return (f"seq_len: {seq_len:,} (default: the model's position table holds {model.max_seq_len:,} "
                f"tokens, a long-context extension most training steps do not run at, so the default stops at "
                f"{TRAINING_SEQ_DEFAULT:,}; pass --seq-len N for your training length)")
    return (f"seq_len: {seq_len:,} (default: the model's position table, max_seq_len; "
            "attention FLOPs per token grow with it; pass --seq-len N for your training length)")


def position_warning(model: ModelSpec, seq_len: int) -> str | None:
    """A warning when ``seq_len`` is beyond the model's position table, else ``None``."""
    if seq_len <= model.max_seq_len or model.position == "none":
        return None
    what = {
        "learned": "the learned position table has only {n:,} rows: the model cannot run this length "
                   "without new position embeddings",
        "rope": "RoPE was trained up to {n:,} positions: beyond it the model needs a longer context "
                "(rope scaling, continued pretraining)",
        "alibi": "ALiBi was trained up to {n:,} tokens: beyond it quality is unverified",
    }[model.position].format(n=model.max_seq_len)
    return f"warning: seq_len {seq_len:,} is beyond the model's position table ({model.max_seq_len:,}); {what}"


def tower_lines(model: ModelSpec) -> list[str]:
    """What a multimodal checkpoint holds besides the text model (empty for a text model)."""
    if not model.towers:
        return []
    lines = [f"multimodal checkpoint: {fmt(model.checkpoint_params)} parameters = text model "
             f"{fmt(model.total_params)} + " + " + ".join(f"{t.name} {fmt(t.params)}" for t in model.towers),
             "FLOPs are the text model's (training the language model on text tokens); the towers "
             "are counted, not in the FLOPs"]
    lines += [f"  {t.name} ({t.kind}): {fmt(t.params)} -- {t.architecture}; {t.source}" for t in model.towers]
    return lines


def buffer_line(model: ModelSpec) -> str | None:
    """A line for checkpoint tensors that are not trainable (router correction bias)."""
    if not model.buffer_params:
        return None
    return (f"buffers: {fmt(model.buffer_params)} router e_score_correction_bias values (in total_params, "
            f"not trainable: trainable_params {fmt(model.trainable_params)})")


def counts(model: ModelSpec) -> dict[str, int]:
    """Every parameter count of a model, for tables and JSON."""
    return {"total_params": model.total_params, "active_params": model.active_params,
            "trainable_params": model.trainable_params, "buffer_params": model.buffer_params,
            "embedding_params": model.embedding_params, "matmul_params": model.matmul_params,
            "tower_params": model.tower_params, "checkpoint_params": model.checkpoint_params}


def towers_json(model: ModelSpec) -> list[dict[str, Any]]:
    return [{"name": t.name, "kind": t.kind, "params": t.params, "architecture": t.architecture,
             "source": t.source, "parts": dict(t.parts)} for t in model.towers]
