"""Model presets: the catalog in ``specs/data/models.toml``.

Every preset names its ``source`` (paper or official config.json); parameter counts are derived
from the shape by :class:`~trainperf.specs.model.ModelSpec`, never typed in. The catalog is read
lazily, once, on first use.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any

from trainperf.errors import SpecError, UnknownNameError
from trainperf.specs.datafiles import read_package_toml
from trainperf.specs.model import ModelSpec

_CATALOG = "models.toml"


def _read_catalog() -> dict[str, Any]:
    return read_package_toml("trainperf.specs", _CATALOG, "model catalog")


def _build(model_id: str, entry: Any) -> ModelSpec:
    where = f"models.toml[{model_id}]"
    if not isinstance(entry, dict):
        raise SpecError(where, entry, "a table of ModelSpec fields")
    data = dict(entry)
    source = data.pop("source", None)
    if not isinstance(source, str) or not source.strip():
        raise SpecError(f"{where}.source", source, "a non-empty string naming the paper or config.json")
    notes = data.pop("notes", None)
    if "name" in data or "extra" in data:
        key = "name" if "name" in data else "extra"
        raise SpecError(f"{where}.{key}", data[key], "not settable in the catalog (the id is the name)")
    spec = ModelSpec.from_dict({**data, "name": model_id, "source": source}, where=where)
    if notes:
        spec.extra["notes"] = str(notes)
    return spec


@lru_cache(maxsize=1)
def _catalog() -> dict[str, ModelSpec]:
    return {model_id.lower(): _build(model_id.lower(), entry) for model_id, entry in _read_catalog().items()}


def model_ids() -> list[str]:
    """Every preset id, sorted."""
    return sorted(_catalog())


def get_model(name: str) -> ModelSpec:
    """The preset with id ``name`` (case-insensitive, exact); unknown ids suggest close matches."""
    key = str(name).strip().lower()
    spec = _catalog().get(key)
    if spec is None:
        raise UnknownNameError("model", str(name), _catalog())
    return dataclasses.replace(spec, extra=dict(spec.extra))


def list_models() -> list[ModelSpec]:
    """Every preset, in id order."""
    return [get_model(model_id) for model_id in model_ids()]
