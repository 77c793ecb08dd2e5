"""Plain-text tables, byte for byte what ``tabulate(rows, headers)`` prints in its "simple" format.

Why not call tabulate: importing it costs 40-100 ms per process (it asks
``importlib.metadata`` for its own version, which scans every installed distribution, and
pulls in ``wcwidth`` when present), more than every light command's own work. Measured again
for issue 28 (which asked for tabulate where it fits): ``trainperf predict`` printing through
tabulate took 203 ms cold (median of 11, CPU 196 ms) against 102 ms through this module, beyond
the 150 ms the light commands may take (``benchmarks/cold_start.py``). This module
renders the tables those commands print (single-line cells of narrow characters: no
newlines, ANSI escapes, control or East-Asian wide characters) and hands anything else to
tabulate unchanged, so output never depends on which path ran. The rules below are
tabulate 0.10's (0.9 read "1,234" as text), kept the same (``tests/test_text_table.py``
compares the two on generated tables):

* a column is int, float, bool or str: the least general type of its cells, where ``None``
  and ``""`` are neutral and, with ``numparse``, numeric strings (``"12"``, ``"1,234.5"``,
  ``"1e9"``, ``"nan"``) count as numbers;
* float columns are formatted with ``floatfmt`` (commas removed from numeric strings first),
  ints as they are; ``None`` becomes ``""``;
* numbers align on the decimal point (flush right), everything else flush left and
  stripped; a header is at least 2 characters narrower than its column and aligned like it;
* columns are joined by two spaces, trailing blanks removed; with headers, a dashed rule
  under them, without headers, dashed rules above and below.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["format_table"]

_MIN_PADDING = 2
_THOUSANDS = re.compile(r"^(([+-]?[0-9]{1,3})(?:,([0-9]{3}))*)?(?(1)\.[0-9]*|\.[0-9]+)?$")
_NONE = type(None)
# tabulate's order of generality: a column takes the most general type among its cells.
_GENERALITY: dict[type, int] = {_NONE: 0, bool: 1, int: 2, float: 3, bytes: 4, str: 5}
_BY_GENERALITY = {v: k for k, v in _GENERALITY.items()}


def format_table(rows: Iterable[Sequence[Any]], headers: Sequence[Any] = (), *,
                 floatfmt: str = "g", numparse: bool = True) -> str:
    """The table tabulate's "simple" format prints for ``rows`` under ``headers``.

    ``numparse=False`` is tabulate's ``disable_numparse=True``: numeric strings stay strings
    (left-aligned, unformatted). Rows of unequal length, headers wider than the rows, or a
    cell that is not a plain single-line narrow-character value go to tabulate itself.
    """
    rows = list(rows)
    if isinstance(headers, str | bytes) or not _plain(rows, headers):
        from tabulate import tabulate

        return str(tabulate(rows, headers=headers, floatfmt=floatfmt, disable_numparse=not numparse))
    header_cells = [str(h) for h in headers]
    ncols = len(rows[0]) if rows else len(header_cells)
    if header_cells and rows:
        header_cells = [""] * (ncols - len(header_cells)) + header_cells

    columns: list[list[str]] = []
    aligns: list[str] = []
    for j in range(ncols if rows else 0):
        values = [r[j] for r in rows]
        kind = _column_type(values, numparse)
        cells = [_format(v, kind, floatfmt) for v in values]
        align = "decimal" if kind in (int, float) else "left"
        minwidth = len(header_cells[j]) + _MIN_PADDING if header_cells else 0
        columns.append(_align_column(cells, align, minwidth))
        aligns.append(align)

    lines: list[str] = []
    if header_cells:
        if rows:
            widths = [max(len(header_cells[j]) + _MIN_PADDING, len(columns[j][0])) for j in range(ncols)]
        else:
            widths = [len(h) + _MIN_PADDING for h in header_cells]
            aligns = ["left"] * len(header_cells)
        head = [h.ljust(w) if a == "left" else h.rjust(w) for h, w, a in zip(header_cells, widths, aligns, strict=False)]
        lines.append("  ".join(head).rstrip())
        lines.append(_rule(widths))
        lines.extend("  ".join(c[i] for c in columns).rstrip() for i in range(len(rows)))
        return "\n".join(lines)
    if not rows:
        return ""
    widths = [len(c[0]) for c in columns]
    lines.append(_rule(widths))
    lines.extend("  ".join(c[i] for c in columns).rstrip() for i in range(len(rows)))
    lines.append(_rule(widths))
    return "\n".join(lines)


def _rule(widths: list[int]) -> str:
    return "  ".join("-" * w for w in widths).rstrip()


def _narrow(text: str) -> bool:
    """Every character is one terminal column wide and the text is one line."""
    if text.isascii():
        return text.isprintable()
    if not text.isprintable():
        return False
    import unicodedata

    return all(c.isascii() or (unicodedata.east_asian_width(c) in "NaH" and not unicodedata.combining(c)
                               and unicodedata.category(c) not in ("Mn", "Me", "Cf"))
               for c in text)


def _plain(rows: list[Any], headers: Sequence[Any]) -> bool:
    """Whether the fast path prints exactly what tabulate would (else tabulate is called)."""
    if not all(type(r) in (list, tuple) for r in rows):
        return False  # dicts, dataclasses, strings as rows: tabulate's own normalisation
    if rows and (len({len(r) for r in rows}) != 1 or not rows[0] or len(headers) > len(rows[0])):
        return False
    if not all(_narrow(str(h)) for h in headers):
        return False
    for r in rows:
        for v in r:
            if v is None or type(v) in (int, float, bool):
                continue
            if isinstance(v, bytes) or not _narrow(str(v)):
                return False
            if isinstance(v, str) and v.strip() == "\001":
                return False  # tabulate's SEPARATING_LINE marker
    return True


def _is_number(v: Any) -> bool:
    if type(v) in (float, int):
        return True
    try:
        f = float(v)
    except (ValueError, TypeError):
        return False
    return (not isinstance(v, str | bytes) or not (math.isinf(f) or math.isnan(f))
            or v.lower() in ("inf", "-inf", "nan"))


def _is_int(v: Any) -> bool:
    if type(v) is int:
        return True
    if (hasattr(v, "is_integer") or hasattr(v, "__array__")) and str(type(v)).startswith("<class 'numpy.int"):
        return True
    if isinstance(v, str | bytes):
        try:
            int(v)
        except (ValueError, TypeError):
            return False
        return True
    return False


def _cell_type(v: Any, numparse: bool) -> type:
    if v is None or (isinstance(v, str | bytes) and not v):
        return _NONE
    if hasattr(v, "isoformat"):
        return str
    if type(v) is bool or (isinstance(v, str) and v in ("True", "False")):
        return bool
    thousands = isinstance(v, str) and _THOUSANDS.match(v) is not None
    if numparse and (_is_int(v) or (thousands and "." not in v)):
        return int
    if numparse and (_is_number(v) or thousands):
        return float
    return bytes if isinstance(v, bytes) else str


def _column_type(values: list[Any], numparse: bool) -> type:
    rank = _GENERALITY[bool]
    for v in values:
        rank = max(rank, _GENERALITY.get(_cell_type(v, numparse), 5))
    return _BY_GENERALITY[rank]


def _format(v: Any, kind: type, floatfmt: str) -> str:
    if v is None or (isinstance(v, str | bytes) and not v):
        return ""
    if kind is int:
        return format(v, "")
    if kind is float:
        if isinstance(v, str) and "," in v:
            v = v.replace(",", "")
        try:
            return format(float(v), floatfmt)
        except (ValueError, TypeError):
            return f"{v}"
    return f"{v}"


def _after_point(s: str) -> int:
    """Characters after the decimal point (or exponent mark) of a number; -1 for none."""
    if not (_is_number(s) or _THOUSANDS.match(s)):
        return -1
    if _is_int(s):
        return -1
    pos = s.rfind(".")
    if pos < 0:
        pos = s.lower().rfind("e")
    return len(s) - pos - 1 if pos >= 0 else -1


def _align_column(cells: list[str], align: str, minwidth: int) -> list[str]:
    if align == "decimal":
        points = [_after_point(s) for s in cells]
        most = max(points)
        cells = [s + (most - p) * " " for s, p in zip(cells, points, strict=False)]
        width = max(max(map(len, cells)), minwidth)
        return [s.rjust(width) for s in cells]
    cells = [s.strip() for s in cells]
    width = max(max(map(len, cells)), minwidth)
    return [s.ljust(width) for s in cells]
