"""Scalar-or-array helpers: numpy semantics for arrays, plain Python speed for scalars.

The step model (:mod:`trainperf.predict.step_model`) and the plan rules it reads
(:mod:`trainperf.specs.parallel`) are written once for both uses: one prediction (Python floats,
where a numpy call on a scalar costs ~1 us each) and the planner's vectorised search (numpy
arrays). numpy is
imported only when an array (or a numpy scalar) is met, so one prediction never loads it (its
import is most of a cold ``trainperf predict``).
"""

from __future__ import annotations

import math
import sys
from typing import Any

_PY_NUMBERS = (bool, int, float)
# The helpers below test ``type(x) in _PY_NUMBERS`` (a Python scalar) and ``type(x) is _ndarray``
# (an array) inline before calling is_number: one prediction makes hundreds of these calls and a
# planner search thousands, and a function call would be most of their cost.

_np: Any = None
"""numpy, bound at the first array (or numpy scalar) met; a module global, not an ``import``
statement per call, because the planner makes thousands of these calls per search."""
_NP_SCALARS: tuple[type, ...] = ()
"""numpy's bool, integer and floating scalar types, once numpy is bound."""


class _Unbound:
    """Stands for ``numpy.ndarray`` until numpy is bound (no value has this type)."""


_ndarray: type = _Unbound
"""``numpy.ndarray`` once numpy is bound: an array's fast path is one type comparison."""


def _numpy() -> Any:
    global _np, _NP_SCALARS, _ndarray
    if _np is None:
        import numpy

        _NP_SCALARS = (numpy.bool_, numpy.integer, numpy.floating)
        _ndarray = numpy.ndarray
        _np = numpy
    return _np


def is_number(x: Any) -> bool:
    """Whether ``x`` is one number: a Python or numpy bool, integer or float (not an array, not a
    0-d array). Never imports numpy: with numpy not loaded, nothing can be a numpy scalar."""
    if type(x) in _PY_NUMBERS or isinstance(x, _PY_NUMBERS):
        return True
    if _np is None:
        if "numpy" not in sys.modules:
            return False
        _numpy()
    return isinstance(x, _NP_SCALARS)


def is_nonbool_number(x: Any) -> bool:
    """Whether ``x`` is one integer or float, Python or numpy, and not a bool (Python or numpy):
    the kernel curves' sizes and dimensions. Never imports numpy."""
    if type(x) is float or type(x) is int:
        return True
    if isinstance(x, bool):
        return False
    if isinstance(x, int | float):
        return True
    if _np is None:
        if "numpy" not in sys.modules:
            return False
        _numpy()
    return isinstance(x, _NP_SCALARS[1:])


def where(cond: Any, a: Any, b: Any) -> Any:
    """``np.where`` that stays a Python scalar when ``cond`` is a scalar."""
    if type(cond) in _PY_NUMBERS or (type(cond) is not _ndarray and is_number(cond)):
        return a if cond else b
    return (_np or _numpy()).where(cond, a, b)


def maximum(a: Any, b: Any) -> Any:
    if (type(a) in _PY_NUMBERS or (type(a) is not _ndarray and is_number(a))) and \
            (type(b) in _PY_NUMBERS or (type(b) is not _ndarray and is_number(b))):
        return a if a >= b else b
    return (_np or _numpy()).maximum(a, b)


def minimum(a: Any, b: Any) -> Any:
    if (type(a) in _PY_NUMBERS or (type(a) is not _ndarray and is_number(a))) and \
            (type(b) in _PY_NUMBERS or (type(b) is not _ndarray and is_number(b))):
        return a if a <= b else b
    return (_np or _numpy()).minimum(a, b)


def ceil(a: Any) -> Any:
    if type(a) in _PY_NUMBERS or is_number(a):
        return float(math.ceil(a))
    return (_np or _numpy()).ceil(a)


def floor(a: Any) -> Any:
    if type(a) in _PY_NUMBERS or is_number(a):
        return float(math.floor(a))
    return (_np or _numpy()).floor(a)


def log2(a: Any) -> Any:
    if type(a) in _PY_NUMBERS or is_number(a):
        return math.log2(a)
    return (_np or _numpy()).log2(a)


def equals(a: Any, value: Any) -> Any:
    """Elementwise ``a == value`` (a scalar bool for a scalar ``a``)."""
    if isinstance(a, str) or type(a) in _PY_NUMBERS or is_number(a):
        return a == value
    return (_np or _numpy()).asarray(a) == value


def isin(a: Any, values: Any) -> Any:
    """Elementwise ``a in values`` (a scalar bool for a scalar ``a``; for an array, one
    comparison per value: faster than ``numpy.isin`` for the handful of values this is for)."""
    if type(a) in _PY_NUMBERS or is_number(a):
        return a in values
    np = _np or _numpy()
    out = np.zeros(np.shape(a), dtype=bool)
    for v in values:
        out |= a == v
    return out
