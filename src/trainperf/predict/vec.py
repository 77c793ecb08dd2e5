"""Scalar-or-array helpers: numpy semantics for arrays, plain Python speed for scalars.

The step model is written once for both uses: one prediction (Python floats, where a numpy
call on a scalar costs ~1 us each) and the planner's vectorised search (numpy arrays). numpy is
imported only when an array (or a numpy scalar) is met, so one prediction never loads it (its
import is most of a cold ``trainperf predict``).
"""

from __future__ import annotations

import functools
import math
import sys
from typing import Any

_PY_NUMBERS = (bool, int, float)
# The helpers below test ``type(x) in _PY_NUMBERS`` before calling is_number: one prediction
# makes hundreds of these calls, and the inline test is most of their cost.


def is_number(x: Any) -> bool:
    """Whether ``x`` is one number: a Python or numpy bool, integer or float (not an array, not a
    0-d array). Never imports numpy: with numpy not loaded, nothing can be a numpy scalar."""
    if type(x) in _PY_NUMBERS or isinstance(x, _PY_NUMBERS):
        return True
    return "numpy" in sys.modules and isinstance(x, _numpy_scalars())


def is_nonbool_number(x: Any) -> bool:
    """Whether ``x`` is one integer or float, Python or numpy, and not a bool (Python or numpy):
    the kernel curves' sizes and dimensions. Never imports numpy."""
    if type(x) is float or type(x) is int:
        return True
    if isinstance(x, bool):
        return False
    if isinstance(x, int | float):
        return True
    return "numpy" in sys.modules and isinstance(x, _numpy_scalars()[1:])


@functools.cache
def _numpy_scalars() -> tuple[type, ...]:
    """numpy's bool, integer and floating scalar types (called only once numpy is loaded)."""
    import numpy as np

    return (np.bool_, np.integer, np.floating)


def where(cond: Any, a: Any, b: Any) -> Any:
    """``np.where`` that stays a Python scalar when ``cond`` is a scalar."""
    if type(cond) in _PY_NUMBERS or is_number(cond):
        return a if cond else b
    import numpy as np

    return np.where(cond, a, b)


def maximum(a: Any, b: Any) -> Any:
    if (type(a) in _PY_NUMBERS or is_number(a)) and (type(b) in _PY_NUMBERS or is_number(b)):
        return a if a >= b else b
    import numpy as np

    return np.maximum(a, b)


def minimum(a: Any, b: Any) -> Any:
    if (type(a) in _PY_NUMBERS or is_number(a)) and (type(b) in _PY_NUMBERS or is_number(b)):
        return a if a <= b else b
    import numpy as np

    return np.minimum(a, b)


def ceil(a: Any) -> Any:
    if type(a) in _PY_NUMBERS or is_number(a):
        return float(math.ceil(a))
    import numpy as np

    return np.ceil(a)


def equals(a: Any, value: Any) -> Any:
    """Elementwise ``a == value`` (a scalar bool for a scalar ``a``)."""
    if isinstance(a, str) or type(a) in _PY_NUMBERS or is_number(a):
        return a == value
    import numpy as np

    return np.asarray(a) == value
