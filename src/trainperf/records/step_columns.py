"""Steps stored as columns: a :class:`~collections.abc.Sequence` of StepRecords made on demand.

A million-step log parsed one :class:`StepRecord` per line spends more time building Python
objects than reading the log. The ingest speed path (:mod:`trainperf.ingest.pipeline`) keeps
the kept rank's steps as parallel lists instead (one per field) and hands them on as a
:class:`StepColumns`: every consumer still sees a sequence of StepRecords (``len``, indexing,
slicing, iteration, equality with a list), made all at once, and cached, the first time one is
asked for. While nothing has asked (:attr:`StepColumns.lazy`), the summary code reads the columns
directly (:meth:`StepColumns.column`), so ``trainperf parse`` never builds the objects.

A lazy store never holds a flagged step: the speed path sends every step outside the plausible
range to the per-line parser, and flagging (:mod:`trainperf.ingest.flags`) materializes the
records before it sets a flag. So a lazy store's flags are all ``None``.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from typing import Any, overload

from trainperf.records.run_record import StepRecord

COLUMNS = ("step", "step_time_s", "tokens", "loss", "grad_norm", "claimed_tflops_per_device",
           "claimed_tokens_per_s_per_device")
"""The fields a :class:`StepColumns` stores; every other StepRecord field is ``None`` (``extra`` empty)."""

_new = object.__new__


class StepColumns(Sequence[StepRecord]):
    """Steps of one rank as parallel columns (see module doc). ``cols[name]`` is a list of
    ``len(self)`` values, or ``None`` for a field that is ``None`` in every step."""

    __slots__ = ("_cols", "_n", "_rank", "_records")

    def __init__(self, cols: dict[str, list[Any] | None], rank: int | None) -> None:
        self._cols = {k: cols.get(k) for k in COLUMNS}
        self._n = len(self._cols["step"] or ())
        self._rank = rank
        self._records: list[StepRecord] | None = None

    @property
    def lazy(self) -> bool:
        """No StepRecord has been made yet: the columns are the whole truth."""
        return self._records is None

    def column(self, name: str) -> list[Any]:
        """The values of field ``name`` in step order (a list to read, not to change)."""
        if self._records is not None:
            return [getattr(r, name) for r in self._records]
        col = self._cols.get(name)
        if col is None:
            return [self._rank] * self._n if name == "rank" else [None] * self._n
        return col

    def has_values(self, name: str) -> bool:
        """Whether field ``name`` may be non-``None`` in some step (lazy store: a stored column)."""
        if self._records is not None:
            return any(getattr(r, name) is not None for r in self._records)
        return (name == "rank" and self._rank is not None) or self._cols.get(name) is not None

    def records(self) -> list[StepRecord]:
        """The steps as StepRecords (made once, then cached: changes to them are kept)."""
        if self._records is None:
            c = self._cols
            n = self._n
            none = [None] * n
            cols = [c[k] if c[k] is not None else none for k in COLUMNS]
            rank = self._rank
            recs: list[StepRecord] = []
            append = recs.append
            gc_was_enabled = gc.isenabled()
            gc.disable()  # a million new objects and no cycle: spare the collector's rescans
            try:
                self._make(cols, rank, append)
            finally:
                if gc_was_enabled:
                    gc.enable()
            self._records = recs
            self._cols = {}
        return self._records

    @staticmethod
    def _make(cols: list[list[Any]], rank: int | None, append: Any) -> None:
        for step, t, tokens, loss, gn, tf, tps in zip(*cols, strict=True):
            rec = _new(StepRecord)
            rec.__dict__ = {"step": step, "step_time_s": t, "tokens": tokens, "loss": loss, "grad_norm": gn,
                            "claimed_tokens_per_s_per_device": tps, "claimed_tflops_per_device": tf,
                            "rank": rank, "extra": {}}
            append(rec)

    def __len__(self) -> int:
        return self._n if self._records is None else len(self._records)

    @overload
    def __getitem__(self, i: int) -> StepRecord: ...

    @overload
    def __getitem__(self, i: slice) -> list[StepRecord]: ...

    def __getitem__(self, i: int | slice) -> StepRecord | list[StepRecord]:
        return self.records()[i]

    def __iter__(self) -> Iterator[StepRecord]:
        return iter(self.records())

    def __reversed__(self) -> Iterator[StepRecord]:
        return reversed(self.records())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StepColumns):
            return self.records() == other.records()
        if isinstance(other, list):
            return self.records() == other
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: Sequence[StepRecord]) -> list[StepRecord]:
        return self.records() + list(other)

    def __radd__(self, other: Sequence[StepRecord]) -> list[StepRecord]:
        return list(other) + self.records()

    def __repr__(self) -> str:
        return f"StepColumns({len(self)} steps{', lazy' if self.lazy else ''})"
