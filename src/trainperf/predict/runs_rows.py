"""What the readers of one runs-table row share (:mod:`trainperf.predict.runs_table`,
:mod:`~trainperf.predict.runs_model`, :mod:`~trainperf.predict.runs_plan`,
:mod:`~trainperf.predict.runs_policy`): a cell of the row, a count it states, a stack default
taken and noted in the row's assumptions, and :class:`RowSkip`, the exception that leaves a row
unread with its one-line reason."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainperf.predict.runs_cells import CellError, read_count


class RowSkip(Exception):
    """A row that cannot be mapped; the message is its one-line reason, ``kind`` its category."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def row_cell(r: Mapping[str, str], col: str) -> str:
    """The row's cell ``col``, stripped ("" when the table has no such column or leaves it blank)."""
    return (r.get(col) or "").strip()


def row_count(r: Mapping[str, str], col: str, key: str = "") -> int | None:
    """The count a cell states; a negative one, or 0 where only a positive count means anything
    (every column but the MoE ones, where 0 reads as dense), skips the row."""
    try:
        v = read_count(row_cell(r, col), key)
    except CellError as e:
        raise RowSkip("cell", f"{col}: {e}") from None
    if v is not None and (v < 0 or (v == 0 and not col.startswith("moe_"))):
        raise RowSkip("cell", f"{col}: {row_cell(r, col)[:40]!r} is not a positive count")
    return v


def row_default(d: Any, key: str, what: str, notes: list[str], params_B: float | None = None) -> Any:
    """The stack default for ``key``, noted in the row's assumptions."""
    got = d.get(key, params_B)
    notes.append(got.note(what))
    return got.value

