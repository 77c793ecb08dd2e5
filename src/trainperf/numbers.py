"""Numbers for humans, shared by the CLI tables and the reports (no dependencies)."""

from __future__ import annotations

import math
from typing import Any


def fmt(x: Any, digits: int = 4, missing: str = "-") -> str:
    """``digits`` significant figures with thousands separators; ``missing`` for None or NaN/inf;
    scientific notation outside 1e-3..1e15; booleans as yes/no; integers exact."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return missing
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if x == 0:
            return "0"
        if abs(x) >= 1e15 or abs(x) < 1e-3:
            return f"{x:.{digits - 1}e}"
        decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
        return f"{x:,.{decimals}f}"
    return str(x)
