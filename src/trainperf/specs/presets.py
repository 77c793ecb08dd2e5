"""Model presets: the catalog in ``specs/data/models.toml``.

Every preset names its ``source`` (paper or official config.json); parameter counts are derived
from the shape by :class:`~trainperf.specs.model.ModelSpec`, never typed in. The catalog is read
lazily, once, on first use.
"""

from __future__ import annotations

import dataclasses
from functools import cache, lru_cache
from typing import Any

from trainperf.errors import SpecError, UnknownNameError
from trainperf.specs.catalog_cache import read_catalog
from trainperf.specs.model import ModelSpec

_CATALOG = "models.toml"


def _read_catalog() -> dict[str, Any]:
    return read_catalog("trainperf.specs", _CATALOG, "model catalog")


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
def _entries() -> dict[str, Any]:
    """The catalog's raw tables by lower-case id."""
    return {model_id.lower(): entry for model_id, entry in _read_catalog().items()}


@cache
def _preset(model_id: str) -> ModelSpec:
    """One preset, built and validated on first use (a command needs one, not all 30)."""
    return _build(model_id, _entries()[model_id])


def model_ids() -> list[str]:
    """Every preset id, sorted."""
    return sorted(_entries())


def get_model(name: str) -> ModelSpec:
    """The preset with id ``name`` (case-insensitive, exact); unknown ids suggest close matches."""
    key = str(name).strip().lower()
    if key not in _entries():
        from trainperf.specs.model_names import preset_for_name

        match = preset_for_name(str(name))
        hint = f"did you mean {match.preset} ({match.how})?" if match is not None else None
        raise UnknownNameError("model", str(name), _entries(), hint)
    spec = _preset(key)
    return dataclasses.replace(spec, extra=dict(spec.extra))


def list_models() -> list[ModelSpec]:
    """Every preset, in id order."""
    return [get_model(model_id) for model_id in model_ids()]
