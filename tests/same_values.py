"""Structural equality for the ingest tests: NaN equals NaN (a flagged step may carry a NaN time)."""

from __future__ import annotations

import math
from typing import Any


def same(a: Any, b: Any, *, same_type: bool = False) -> bool:
    """``a == b`` through dicts, lists and tuples, NaN equal to NaN; ``same_type``: leaves must
    also have one type (an int 3 is then not the float 3.0)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], same_type=same_type) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y, same_type=same_type) for x, y in zip(a, b, strict=True))
    return a == b and (not same_type or type(a) is type(b))
