"""Scalar-or-array helpers: numpy semantics for arrays, plain Python speed for scalars.

The step model is written once for both uses: one prediction (Python floats, where a numpy
call on a scalar costs ~1 us each) and the planner's vectorised search (numpy arrays).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)


def where(cond: Any, a: Any, b: Any) -> Any:
    """``np.where`` that stays a Python scalar when ``cond`` is a scalar."""
    if isinstance(cond, _SCALARS):
        return a if cond else b
    return np.where(cond, a, b)


def maximum(a: Any, b: Any) -> Any:
    if isinstance(a, _SCALARS) and isinstance(b, _SCALARS):
        return a if a >= b else b
    return np.maximum(a, b)


def minimum(a: Any, b: Any) -> Any:
    if isinstance(a, _SCALARS) and isinstance(b, _SCALARS):
        return a if a <= b else b
    return np.minimum(a, b)


def ceil(a: Any) -> Any:
    if isinstance(a, _SCALARS):
        return float(math.ceil(a))
    return np.ceil(a)


def equals(a: Any, value: Any) -> Any:
    """Elementwise ``a == value`` (a scalar bool for a scalar ``a``)."""
    if isinstance(a, (str, *_SCALARS)):
        return a == value
    return np.asarray(a) == value
