"""Steps stored as compact columns: a :class:`~collections.abc.Sequence` of StepRecords made on demand.

A parsed log of millions of steps held as one :class:`StepRecord` per step costs about 400 bytes
a step (a dict, boxed floats); as lists of boxed values about 240. :class:`StepColumns` keeps
one numpy array per numeric field instead: 8 bytes per step and field, and nothing for a field
that is ``None`` in every step or equal in every step (a read-only broadcast view, no memory).
Every consumer still sees a sequence of StepRecords (``len``, indexing, slicing, iteration,
equality with a list), made all at once and cached the first time one is asked for. While
nothing has asked (:attr:`StepColumns.lazy`), the summary code reads the arrays directly
(:meth:`StepColumns.values`), so ``trainperf parse`` never builds the objects.

``None`` is stored as a sentinel: NaN in a float field, :data:`INT_NONE` in an integer one. A
value that would collide with a sentinel (a NaN loss, an integer beyond int64) and the rare
per-step fields (``flag``, ``breakdown``, ``extra``) are kept per step in a small dict of
overrides. ``step_time_s`` is never ``None``, so a NaN there is a real (flagged) value.
numpy is imported only when columns are built or read (light commands never import it).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

from trainperf.records.run_record import StepRecord

if TYPE_CHECKING:
    import numpy as np

INT_FIELDS = ("step", "tokens")
FLOAT_FIELDS = ("step_time_s", "loss", "grad_norm", "memory_GiB", "claimed_tokens_per_s",
                "claimed_tokens_per_s_per_device", "claimed_tflops_per_device", "claimed_mfu_pct")
COLUMNS = INT_FIELDS + FLOAT_FIELDS
"""The numeric fields a :class:`StepColumns` stores as arrays (``rank`` is one value for all steps)."""
SPARSE_FIELDS = ("breakdown", "flag", "extra")
"""Fields kept per step only where set (overrides)."""
INT_NONE = -(1 << 63)
"""The int64 sentinel for ``None`` (no parsed count is negative, let alone this)."""
_INT_MAX = (1 << 63) - 1
_new = object.__new__


def _np() -> Any:
    import numpy

    return numpy


def _is_int(name: str) -> bool:
    return name in INT_FIELDS


def _fits(name: str, v: Any) -> bool:
    """Whether value ``v`` of field ``name`` is stored exactly in its array (else an override)."""
    if v is None:
        return True
    if _is_int(name):
        return type(v) is int and INT_NONE < v <= _INT_MAX
    if type(v) is not float:
        return False
    return name == "step_time_s" or v == v  # a NaN would read back as None


def _to_array(name: str, values: Sequence[Any]) -> np.ndarray:
    np = _np()
    if _is_int(name):
        return np.array([INT_NONE if v is None else v for v in values], dtype=np.int64)
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64)


def _compact(a: np.ndarray) -> np.ndarray:
    """``a`` itself, or a zero-memory broadcast view when every element is bitwise equal."""
    np = _np()
    if len(a) > 1:
        bits = a.view(np.int64)
        if bits[0] == bits[-1] and (bits == bits[0]).all():
            return np.broadcast_to(a[:1].copy(), a.shape)
    return a


class StepColumns(Sequence[StepRecord]):
    """Steps of one rank as parallel arrays (see module doc).

    ``cols`` maps a field of :data:`COLUMNS` to a numpy array (sentinels for ``None``), a list
    of values (``None`` allowed; converted), or ``None`` for a field ``None`` in every step;
    ``overrides`` maps a step index to ``{field: value}`` pairs that replace the stored value."""

    __slots__ = ("_cols", "_n", "_over", "_rank", "_records", "_xcols")

    def __init__(self, cols: dict[str, Any], rank: int | None,
                 overrides: dict[int, dict[str, Any]] | None = None,
                 extra_cols: dict[str, np.ndarray] | None = None) -> None:
        over: dict[int, dict[str, Any]] = {i: dict(o) for i, o in (overrides or {}).items()}
        store: dict[str, Any] = {}
        for k in COLUMNS:
            v = cols.get(k)
            if v is None:
                store[k] = None
                continue
            if isinstance(v, list):
                for i, x in enumerate(v):
                    if not _fits(k, x):
                        over.setdefault(i, {})[k] = x
                v = _to_array(k, [x if _fits(k, x) else None for x in v])
            store[k] = v
        self._cols = store
        self._n = len(store["step"]) if store["step"] is not None else 0
        self._rank = rank
        self._over = over
        self._xcols = dict(extra_cols or {})
        self._records: list[StepRecord] | None = None

    @property
    def lazy(self) -> bool:
        """No StepRecord has been made yet: the arrays (and overrides) are the whole truth."""
        return self._records is None

    @property
    def rank(self) -> int | None:
        return self._rank

    def array(self, name: str) -> np.ndarray | None:
        """The stored array of field ``name`` (sentinels for ``None``; overrides not applied),
        or ``None`` when the field is ``None`` in every step. Read-only use."""
        return self._cols.get(name) if self._records is None else None

    def _mask(self, name: str, start: int, unflagged: bool) -> tuple[np.ndarray | None, list[tuple[int, Any]]]:
        np = _np()
        a = self._cols[name]
        extra = []
        drop = []
        for i, o in self._over.items():
            if i < start:
                continue
            if unflagged and o.get("flag") is not None:
                drop.append(i)
            elif name in o:
                drop.append(i)
                if o[name] is not None:
                    extra.append((i, o[name]))
        sl = a[start:]
        keep = (sl != INT_NONE) if _is_int(name) else ~np.isnan(sl) if name != "step_time_s" else None
        if drop:
            keep = np.ones(len(sl), bool) if keep is None else keep.copy()
            keep[np.array(drop, dtype=np.int64) - start] = False
        return keep, sorted(extra)

    def values(self, name: str, start: int = 0, *, unflagged: bool = False) -> np.ndarray | list[Any]:
        """The non-``None`` values of field ``name`` of the steps from index ``start`` on, in
        step order (flagged steps left out with ``unflagged``): a numpy array, or a list when
        some override (a NaN loss, a huge count) is not an array element. Read-only use."""
        if self._records is not None:
            recs = self._records[start:]
            return [v for r in recs if (v := getattr(r, name)) is not None and not (unflagged and r.flag)]
        if name in SPARSE_FIELDS or name == "rank":
            return [v for v in self.column(name)[start:] if v is not None]
        a = self._cols.get(name)
        if a is None:
            return [v for i, o in sorted(self._over.items()) if i >= start and o.get(name) is not None
                    and not (unflagged and o.get("flag") is not None) for v in (o[name],)]
        keep, extra = self._mask(name, start, unflagged)
        sl = a[start:]
        vals = sl if keep is None or keep.all() else sl[keep]
        if not extra:
            return vals
        np = _np()
        idx = np.arange(start, self._n) if keep is None else np.flatnonzero(keep) + start
        if not _is_int(name) and all(type(v) is float for _, v in extra):  # NaNs: merged as an array
            order = np.argsort(np.concatenate([idx, [i for i, _ in extra]]), kind="stable")
            return np.concatenate([vals, [v for _, v in extra]])[order]
        merged = sorted([*zip(idx.tolist(), vals.tolist(), strict=True), *extra])
        return [v for _, v in merged]

    def count_none(self, name: str, start: int = 0, *, unflagged: bool = False) -> int:
        """How many steps from ``start`` on (unflagged ones with ``unflagged``) have field ``name`` ``None``."""
        total = (self._n - start) - (sum(1 for i, o in self._over.items() if i >= start and o.get("flag") is not None)
                                     if unflagged else 0)
        return total - len(self.values(name, start, unflagged=unflagged))

    def flags(self) -> dict[int, str]:
        """Step index -> flag, for the flagged steps."""
        if self._records is not None:
            return {i: r.flag for i, r in enumerate(self._records) if r.flag is not None}
        return {i: o["flag"] for i, o in sorted(self._over.items()) if o.get("flag") is not None}

    def overridden(self) -> list[int]:
        """Indices of the steps with a value outside the arrays (a flag, a NaN loss, ...)."""
        return sorted(self._over) if self._records is None else []

    def record_at(self, i: int) -> StepRecord:
        """Step ``i`` as a new StepRecord (not cached: changing it changes nothing here)."""
        if self._records is not None:
            return self._records[i]
        d: dict[str, Any] = {}
        for k in COLUMNS:
            a = self._cols.get(k)
            v = None if a is None else a[i].item()
            if v is not None and k != "step_time_s" and (v == INT_NONE if _is_int(k) else v != v):
                v = None
            d[k] = v
        d.update({"breakdown": None, "rank": self._rank, "flag": None, "extra": self._extra_at(i)})
        d.update({k: v for k, v in self._over.get(i, {}).items() if k != "extra"})
        rec = _new(StepRecord)
        rec.__dict__ = d
        return rec

    def _extra_at(self, i: int) -> dict[str, Any]:
        x = {k: v for k, a in self._xcols.items() if (v := float(a[i])) == v}
        o = self._over.get(i)
        if o and o.get("extra"):
            x.update(o["extra"])
        return x

    def set_flag(self, i: int, reason: str) -> None:
        """Flag step ``i`` (kept, left out of the medians) unless it already is."""
        if self._records is not None:
            if self._records[i].flag is None:
                self._records[i].flag = reason
            return
        o = self._over.setdefault(int(i), {})
        if o.get("flag") is None:
            o["flag"] = reason

    def column(self, name: str) -> list[Any]:
        """The values of field ``name`` in step order, ``None`` where missing (a new list: for
        long runs read :meth:`values`)."""
        if self._records is not None:
            return [getattr(r, name) for r in self._records]
        n = self._n
        if name == "rank":
            return [self._rank] * n
        if name == "extra":
            return [self._extra_at(i) for i in range(n)]
        if name in SPARSE_FIELDS:
            out: list[Any] = [None] * n
        else:
            a = self._cols.get(name)
            if a is None:
                out = [None] * n
            else:
                out = a.tolist()
                sentinel = INT_NONE if _is_int(name) else None
                if name == "step_time_s":
                    pass
                elif sentinel is not None:
                    out = [None if v == sentinel else v for v in out]
                else:
                    out = [None if v != v else v for v in out]
        for i, o in self._over.items():
            if name in o:
                out[i] = o[name]
        return out

    def has_values(self, name: str) -> bool:
        """Whether field ``name`` may be non-``None`` in some step."""
        if self._records is not None:
            return any(getattr(r, name) is not None for r in self._records)
        if name == "rank":
            return self._rank is not None
        if name == "extra" and self._xcols:
            return True
        if any(o.get(name) is not None for o in self._over.values()):
            return True
        return self._cols.get(name) is not None

    def take(self, index: Iterable[int] | np.ndarray) -> StepColumns:
        """A new store of the steps at ``index`` (in that order); records stay unmade."""
        np = _np()
        idx = np.asarray(index, dtype=np.int64)
        if self._records is not None:
            recs = [self._records[i] for i in idx.tolist()]
            out = StepColumns({"step": []}, self._rank)
            out._records, out._cols, out._n = recs, {}, len(recs)
            return out
        pos = {int(i): j for j, i in enumerate(idx.tolist())} if self._over else {}
        over = {pos[i]: o for i, o in self._over.items() if i in pos}
        cols = {k: None if a is None else _compact(np.ascontiguousarray(a[idx])) for k, a in self._cols.items()}
        out = StepColumns(cols, self._rank, over, {k: a[idx] for k, a in self._xcols.items()})
        out._n = len(idx)
        return out

    def records(self) -> list[StepRecord]:
        """The steps as StepRecords (made once, then cached: changes to them are kept)."""
        if self._records is None:
            gc_was_enabled = gc.isenabled()
            gc.disable()  # millions of new objects and no cycle: spare the collector's rescans
            try:
                recs = self._make()
            finally:
                if gc_was_enabled:
                    gc.enable()
            self._records = recs
            self._cols = {}
            self._over = {}
            self._xcols = {}
        return self._records

    def _make(self) -> list[StepRecord]:
        n = self._n
        none = [None] * n
        cols = [self.column(k) if self._cols.get(k) is not None else none for k in COLUMNS]
        rank = self._rank
        recs: list[StepRecord] = []
        append = recs.append
        for step, tokens, t, loss, gn, mem, tps, tpsd, tf, mfu in zip(*cols, strict=True):
            rec = _new(StepRecord)
            rec.__dict__ = {"step": step, "step_time_s": t, "tokens": tokens, "loss": loss, "grad_norm": gn,
                            "memory_GiB": mem, "claimed_tokens_per_s": tps,
                            "claimed_tokens_per_s_per_device": tpsd, "claimed_tflops_per_device": tf,
                            "claimed_mfu_pct": mfu, "breakdown": None, "rank": rank, "flag": None, "extra": {}}
            append(rec)
        if self._xcols:
            for i, x in enumerate(self.column("extra")):
                recs[i].__dict__["extra"] = x
        for i, o in self._over.items():
            d = recs[i].__dict__
            for k, v in o.items():
                if k == "extra":
                    d[k] = {**d[k], **v}
                else:
                    d[k] = dict(v) if k == "breakdown" and isinstance(v, dict) else v
        return recs

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


class _GrowColumn:
    """One column being collected: nothing while every value is ``None``, one value while every
    value is bitwise the same, else an ``array.array`` grown in place (``realloc``: a large block
    is remapped, not copied, so growing never holds two copies, and the slack is small and
    untouched); handed over as a numpy view of it (no copy)."""

    __slots__ = ("_a", "_const", "_fill", "_is_int", "_n", "_small")

    def __init__(self, is_int: bool, small: bool = False) -> None:
        self._is_int = is_int
        self._small = small  # non-negative integers below 2**32 (line numbers): 4 bytes each while they fit
        self._fill = INT_NONE if is_int else math.nan
        self._n = 0
        self._const: Any = None  # one element array: the value of every step so far
        self._a: Any = None

    def append(self, block: Any, m: int) -> None:
        np = _np()
        n = self._n
        if self._a is None:
            if block is None and self._const is None:
                self._n = n + m
                return
            same = (self._const is None and n == 0) or (
                self._const is not None and block is not None
                and block[:1].view(np.int64)[0] == self._const.view(np.int64)[0])
            if block is not None and block.strides == (0,) and same:
                if self._const is None:
                    self._const = block[:1].copy()
                self._n = n + m
                return
            import array

            first = self._fill if self._const is None else self._const[0]
            self._a = array.array(self._code(), np.full(n, first, dtype=self._dtype()).tobytes() if n else b"")
            self._const = None
        if block is None:
            block = np.full(m, self._fill, dtype=np.int64 if self._is_int else np.float64)
        if self._small and (block.min() < 0 or block.max() >= 1 << 32):
            import array

            self._small = False  # widen what is kept so far
            self._a = array.array("q", np.frombuffer(self._a, dtype=np.uint32).astype(np.int64).tobytes())
        self._a.frombytes(memoryview(np.ascontiguousarray(block, dtype=self._dtype())).cast("B"))
        self._n = n + m

    def _code(self) -> str:
        return "I" if self._small else "q" if self._is_int else "d"

    def _dtype(self) -> Any:
        np = _np()
        return np.uint32 if self._small else np.int64 if self._is_int else np.float64

    def finish(self) -> Any:
        """The column (a view of the grown array), a zero-memory broadcast view, or ``None``."""
        np = _np()
        if self._a is None:
            return None if self._const is None else np.broadcast_to(self._const, (self._n,))
        a, self._a = self._a, None
        return np.frombuffer(a, dtype=self._dtype())


class StepColumnsBuilder:
    """Collects steps in log order, as blocks of arrays (the speed path) or one record at a time
    (the per-line path, buffered and converted a block at a time), each with its log line
    number; :meth:`build` hands them over as one :class:`StepColumns`. Memory: 8 bytes per step
    and field that varies (nothing for a field ``None`` or constant throughout), plus 8 for the
    line number."""

    _FLUSH = 4096

    def __init__(self) -> None:
        self._cols = {k: _GrowColumn(_is_int(k)) for k in COLUMNS}
        self._lines = _GrowColumn(True, small=True)
        self._xcols: dict[str, _GrowColumn] = {}
        self._over: dict[int, dict[str, Any]] = {}
        self._pending: list[tuple[int, StepRecord]] = []
        self._n = 0

    def __len__(self) -> int:
        return self._n + len(self._pending)

    def add_block(self, cols: dict[str, Any], lines: np.ndarray) -> None:
        """Steps as arrays (``cols``: field -> array with sentinels, or ``None`` for all-``None``)
        at log lines ``lines`` (int64 array)."""
        self._flush()
        self._add(cols, lines)

    def _add(self, cols: dict[str, Any], lines: np.ndarray, xcols: dict[str, Any] | None = None) -> None:
        m = len(lines)
        if not m:
            return
        for k in COLUMNS:
            a = cols.get(k)
            self._cols[k].append(None if a is None else _compact(a), m)
        xcols = xcols or {}
        for k in xcols.keys() - self._xcols.keys():
            self._xcols[k] = _GrowColumn(False)
            self._xcols[k].append(None, self._n)
        for k, c in self._xcols.items():
            a = xcols.get(k)
            c.append(None if a is None else _compact(a), m)
        self._lines.append(lines, m)
        self._n += m

    def add_record(self, rec: StepRecord, line_no: int) -> None:
        self._pending.append((line_no, rec))
        if len(self._pending) >= self._FLUSH:
            self._flush()

    def _flush(self) -> None:
        """Turn the buffered records into one block of arrays (the checks run on whole columns;
        only a column holding a value that does not fit is looked at value by value)."""
        pend = self._pending
        if not pend:
            return
        from operator import attrgetter

        np = _np()
        self._pending = []
        base = self._n
        recs = [r for _, r in pend]
        cols: dict[str, Any] = {}
        for k, vals in zip(COLUMNS, zip(*map(attrgetter(*COLUMNS), recs), strict=True), strict=True):
            types = set(map(type, vals))
            if types == {type(None)}:
                cols[k] = None
                continue
            ok = types <= ({int, type(None)} if _is_int(k) else {float, type(None)})
            if ok and not _is_int(k) and k != "step_time_s":
                ok = not any(v != v for v in vals if v is not None)  # a NaN would read back as None
            if ok and _is_int(k):
                ints = [v for v in vals if v is not None]
                ok = not ints or (min(ints) > INT_NONE and max(ints) <= _INT_MAX)
            if not ok:
                for j, v in enumerate(vals):
                    if not _fits(k, v):
                        self._over.setdefault(base + j, {})[k] = v
                vals = tuple(v if _fits(k, v) else None for v in vals)
            cols[k] = _to_array(k, vals)
        for j, r in enumerate(recs):
            if r.flag is not None or r.breakdown:
                o = self._over.setdefault(base + j, {})
                if r.flag is not None:
                    o["flag"] = r.flag
                if r.breakdown:
                    o["breakdown"] = r.breakdown
        self._add(cols, np.array([ln for ln, _ in pend], dtype=np.int64), self._extras(recs, base))

    def _extras(self, recs: list[StepRecord], base: int) -> dict[str, Any]:
        """The ``extra`` keys whose values are all floats (not NaN) as columns (a torchtitan
        step's ``memory_pct``); any other key is kept per step."""
        np = _np()
        exs = [r.extra for r in recs]
        have = [e for e in exs if e]
        if not have:
            return {}
        out = {}
        missing = object()
        for key in set().union(*have):
            vals = [e.get(key, missing) if e else missing for e in exs]
            if all(type(v) is float and v == v for v in vals if v is not missing):
                out[key] = np.array([math.nan if v is missing else v for v in vals])
                continue
            for j, v in enumerate(vals):
                if v is not missing:
                    self._over.setdefault(base + j, {}).setdefault("extra", {})[key] = v
        return out

    def build(self, rank: int | None) -> tuple[StepColumns, np.ndarray]:
        """The steps as one store (the builder is emptied) and their log line numbers."""
        self._flush()
        np = _np()
        cols = {k: c.finish() for k, c in self._cols.items()}
        lines = self._lines.finish()
        xcols = {k: c.finish() for k, c in self._xcols.items()}
        out = StepColumns(cols, rank, self._over, {k: a for k, a in xcols.items() if a is not None})
        out._n = self._n  # a store whose every field is constant still knows its length
        self.__init__()  # type: ignore[misc]
        return out, (np.zeros(0, np.int64) if lines is None else np.ascontiguousarray(lines))  # uint32 or int64
