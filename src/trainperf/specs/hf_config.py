"""Read a Hugging Face ``config.json`` into a :class:`~trainperf.specs.model.ModelSpec`.

Only the :mod:`json` module is used (transformers is never imported). The per-family readers
live in :mod:`trainperf.specs.hf_families` (one module per family group, each citing the
transformers modelling file its counts follow); this module loads the file, dispatches on
``model_type`` and builds the spec.

Values are validated as transformers 5.x validates them (``int`` fields must be JSON integers,
``bool`` fields JSON booleans, per-layer lists one entry per layer) and sizes are bounded (a
vocabulary of 1e30 is rejected naming the limit); every problem is a one-line
:class:`~trainperf.errors.SpecError` naming the key. Where a key is absent or null, the default
of the matching transformers config class applies.

Counts are those of the checkpoint: every weight, bias and norm, Gemma 2/3's four norms per
block, Qwen2-MoE's shared-expert gate, DeepSeek-V3's router correction bias (a buffer: counted,
not trainable). A multimodal checkpoint (``gemma3``, ``llama4``) is counted whole: the text model
is the ModelSpec (its FLOPs are the training FLOPs), the vision tower and projector travel in
``ModelSpec.towers`` and in ``checkpoint_params``.

Supported ``model_type`` values: see :data:`SUPPORTED_MODEL_TYPES`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from trainperf.errors import InputFileError, SpecError
from trainperf.specs.datafiles import MAX_NESTING, read_user_text, too_deep
from trainperf.specs.hf_families import READERS
from trainperf.specs.hf_families.base import HFConfig
from trainperf.specs.model import ModelSpec

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(READERS)
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
    if not path.exists():
        raise InputFileError(f"{path}: no such Hugging Face config file")
    text = read_user_text(path, "Hugging Face config")  # size-capped before it is read
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(
            f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:  # an integer of > 4300 digits, nesting too deep
        raise InputFileError(f"{path}: unreadable JSON: {str(exc).splitlines()[0][:120]}") from None
    if too_deep(data):
        raise InputFileError(f"{path}: nests objects or arrays more than {MAX_NESTING} levels deep; not a "
                             "Hugging Face config")
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
    if not isinstance(model_type, str) or model_type not in READERS:
        raise SpecError("model_type", model_type, f"one of {', '.join(SUPPORTED_MODEL_TYPES)}")
    reader = READERS[model_type]
    where = path or "dict"
    fields = reader(HFConfig(data, model_type, where))
    given = data.get("_name_or_path")
    name = given if isinstance(given, str) and given.strip() else model_type
    source = path or (name if name != model_type else "hf_config dict")
    try:
        return ModelSpec(name=name, source=source, **fields)
    except SpecError as exc:  # a shape that reads well but does not hold together (heads vs hidden...)
        raise SpecError(exc.field, exc.value,
                        f"{exc.valid} (ModelSpec field read from the {model_type} config.json, {where})") from None
