"""Lazy, once-only access to ``data/params.json`` (written by ``tools/kernel_fitting/build.py``),
and silicon checks."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from trainperf.errors import InputFileError, UnknownNameError
from trainperf.specs.datafiles import read_package_bytes


@lru_cache(maxsize=1)
def params() -> dict[str, Any]:
    """The parsed parameters file (read at first use)."""
    try:
        return json.loads(read_package_bytes("trainperf.predict.kernels", "data", "params.json"))
    except (OSError, ValueError) as exc:
        raise InputFileError(f"trainperf/predict/kernels/data/params.json: cannot read the kernel parameters: "
                             f"{exc}") from exc


@lru_cache(maxsize=1)
def silicons() -> tuple[str, ...]:
    return tuple(params()["silicons"])


def check_silicon(silicon: str) -> str:
    """``silicon`` if it is a catalog silicon (``Hardware.silicon``), else a one-line error."""
    if silicon not in params()["silicons"]:
        raise UnknownNameError("silicon", silicon, silicons())
    return silicon


def source_text(entry: dict[str, Any]) -> str:
    """The full source of a parameter: its own text, then the chain it was taken from."""
    texts = params()["sources"]
    own = texts[entry["source"]] if isinstance(entry.get("source"), int) else str(entry.get("source", ""))
    chain = [texts[i] for i in entry.get("from", ())]
    return own + "".join(f" <- [{t}]" for t in chain)
