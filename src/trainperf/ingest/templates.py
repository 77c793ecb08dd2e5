"""Line templates: the speed path that reads a format's canonical step lines as bytes, a block of
lines at a time, with numpy, instead of one regex match per line.

A line's *shape* is the line with every ASCII digit replaced by ``0`` (one ``bytes.translate``
over a whole block). A format's :attr:`~trainperf.ingest.base.LogParser.block_re` treats all
digits alike (``\\d``, classes that hold every digit or none, no literal digit, no
back-reference), so two lines of the same shape either both match it or both do not, with
every group at the same offsets. So the regex runs once per distinct shape (a handful in a
real log), and each line of a matching shape (a *template*) has its numbers read from fixed
offsets: the digits of all its lines gathered into one array and combined with powers of ten.

Numbers are exact: an integer is its digits; a decimal ``d.ddd[E±xx]`` with at most 15
significant digits is its digits as an integer ``M`` (exact in a float64) times or divided by
a power of ten up to ``1e22`` (exact): one IEEE operation on exact operands, i.e. the correctly
rounded value, which is what Python's ``float()`` gives. A number outside those bounds, or a
field of another form, is converted by the field's own Python function, line by line.

A template is only made when the launcher rank prefix the regex sees is the one the pipeline's
prefix stripping sees (:func:`prefix_of`), and only from ASCII shapes. Lines of no template go
to the parser's ``parse_line`` as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainperf.records.step_columns import INT_NONE

if TYPE_CHECKING:
    import numpy as np

DIGITS_TO_ZERO = bytes(48 if 48 <= b <= 57 else b for b in range(256))
"""``bytes.translate`` table: every ASCII digit to ``0`` (the shape of a line)."""
RANK_RE = re.compile(r"\s*(?:\[(?:rank|default)?(\d+)\]:|(\d{1,5}): |\[\d+,(\d+)\]<std(?:out|err)>:)\s?")
"""A launcher's rank prefix: torchrun ``[rank3]:`` / ``[default3]:``, ``srun --label`` ``3: ``,
Open MPI ``[1,3]<stdout>:``."""
_POW10 = [float(10 ** k) for k in range(23)]
_FLOAT_SHAPE = re.compile(r"([+-]?)(0*)(?:\.(0*))?(?:[eE]([+-]?)(0{1,4}))?")
_INT_SHAPE = re.compile(r"([+-]?)(0{1,15})")
MAX_SHAPES = 20_000
"""Distinct shapes remembered (then forgotten and learnt again): bounded memory on any input."""


def prefix_of(line: str) -> tuple[int, tuple[int, int] | None]:
    """Where the text after a launcher's rank prefix starts in ``line``, and the span of the
    rank's digits (``None`` without a prefix): the pipeline's rule (``srun --label`` ``3: ``
    when the line starts with a digit; else the bracket forms after optional spaces)."""
    c = line[:1]
    if c.isdigit():
        j = line.find(": ", 1, 8)
        if j > 0 and line[:j].isdigit():
            return j + 2, (0, j)
    elif c == "[" or c == " ":
        m = RANK_RE.match(line)
        if m is not None:
            g = 1 if m.group(1) else 2 if m.group(2) else 3
            return m.end(), m.span(g)
    return 0, None


@dataclass(frozen=True)
class BlockField:
    """One value of a canonical step line: regex group ``group`` read as ``kind``: ``"int"``
    (``int()``), ``"float"`` (``float()``), ``"to_float"`` (:func:`~trainperf.ingest.base.to_float`:
    ``None`` unless finite) or ``"text"`` (a digit-free group, mapped by ``convert`` to a number)."""

    name: str
    group: int
    kind: str
    convert: Callable[[str], Any] | None = None


class _Plan:
    """How one field of one template is read (see module doc)."""

    __slots__ = ("const", "eoffs", "esign", "mode", "nfrac", "offs", "pyconv", "sign", "span")

    def __init__(self) -> None:
        self.mode = "const"
        self.const: Any = None
        self.offs: list[int] = []
        self.sign = 1
        self.nfrac = 0
        self.esign = 1
        self.eoffs: list[int] = []
        self.span = (0, 0)
        self.pyconv: Callable[[str], Any] | None = None


@dataclass
class Template:
    shape_len: int
    prefix_end: int
    rank: _Plan | None
    plans: dict[str, _Plan]
    _digits: Any = None

    def digits(self) -> tuple[Any, dict[str, tuple[int, int]]]:
        """Every digit the template reads, as offsets into a line, and where each number's
        digits are among them: ``(offsets, {number: (first, end)})`` (at most 15 digits each:
        exact in int64)."""
        if self._digits is None:
            import numpy as np

            offs: list[int] = []
            spans: dict[str, tuple[int, int]] = {}

            def add(name: str, g: list[int]) -> None:
                spans[name] = (len(offs), len(offs) + len(g))
                offs.extend(g)

            for name, p in self.plans.items():
                if p.mode in ("int", "dec"):
                    add(name, p.offs)
                    if p.eoffs:
                        add(name + "^", p.eoffs)
            if self.rank is not None:
                add("^rank", self.rank.offs)
            self._digits = (np.asarray(offs, dtype=np.int64), spans)
        return self._digits


def _py_converter(f: BlockField) -> Callable[[str], Any]:
    if f.kind == "int":
        return int
    if f.kind == "float":
        return float
    if f.kind == "to_float":
        from trainperf.ingest.base import to_float

        return to_float
    assert f.convert is not None
    return f.convert


def _plan(f: BlockField, text: str, start: int) -> _Plan:
    """The plan for field ``f`` whose text in the shape is ``text`` at offset ``start``."""
    p = _Plan()
    conv = _py_converter(f)
    p.pyconv = conv
    p.span = (start, start + len(text))
    if "0" not in text or f.kind == "text":  # the same text on every line of the template
        if "0" in text:
            p.mode = "py"
            return p
        try:
            p.const = conv(text) if text or f.kind == "text" else None
        except (ValueError, TypeError, OverflowError):
            p.mode = "bad"
        return p
    if f.kind == "int":
        m = _INT_SHAPE.fullmatch(text)
        if m is None or len(m.group(2)) > 18:  # more digits than int64 holds: read (and refused) line by line
            p.mode = "py"
            return p
        p.mode = "int"
        p.sign = -1 if m.group(1) == "-" else 1
        a = start + len(m.group(1))
        p.offs = list(range(a, a + len(m.group(2))))
        return p
    m = _FLOAT_SHAPE.fullmatch(text)
    if m is None or not (m.group(2) or m.group(3)) or len(m.group(2)) + len(m.group(3) or "") > 15:
        p.mode = "py"
        return p
    p.mode = "dec"
    p.sign = -1 if m.group(1) == "-" else 1
    a = start + m.start(2)
    p.offs = list(range(a, a + len(m.group(2))))
    if m.group(3) is not None:
        b = start + m.start(3)
        p.offs += list(range(b, b + len(m.group(3))))
    p.nfrac = len(m.group(3) or "")
    if m.group(5):
        p.esign = -1 if m.group(4) == "-" else 1
        e = start + m.start(5)
        p.eoffs = list(range(e, e + len(m.group(5))))
    return p


def make_template(shape: bytes, block_re: re.Pattern[str], fields: tuple[BlockField, ...]) -> Template | None:
    """The template of ``shape`` (a line with its digits as ``0``), or ``None`` when lines of
    this shape are not canonical step lines (they go to ``parse_line``)."""
    if not shape.isascii():
        return None
    s = shape.decode("ascii")
    m = block_re.match(s)
    if m is None or m.end() != len(s):
        return None
    prefix_end, rank_span = prefix_of(s)
    seen = next((m.span(g) for g in (1, 2) if m.group(g)), None)
    if seen != rank_span:  # the regex and the pipeline would disagree on the rank: per line
        return None
    rank = None
    if rank_span is not None:
        rank = _Plan()
        rank.mode = "int"
        rank.offs = list(range(*rank_span))
    plans = {}
    for f in fields:
        a, b = m.span(f.group)
        plans[f.name] = _plan(f, s[a:b] if a >= 0 else "", max(a, 0))
        if plans[f.name].mode == "bad":
            return None
    return Template(len(shape), prefix_end, rank, plans)


def read_fields(tmpl: Template, buf: np.ndarray, block: bytes, starts: np.ndarray, fields: tuple[BlockField, ...]
                ) -> tuple[dict[str, np.ndarray], np.ndarray | None, np.ndarray]:
    """The values of ``fields`` on the lines of template ``tmpl`` starting at ``starts`` in
    ``block`` (``buf`` its bytes as uint8): field -> int64 or float64 array (sentinels of
    :mod:`~trainperf.records.step_columns` for ``None``), the ranks (``None`` without a prefix),
    and a mask of the lines read exactly (False: a number out of the bounds above; such a line
    goes to ``parse_line``). All digits are gathered at once (:meth:`Template.digits`)."""
    import numpy as np

    m = len(starts)
    ok = np.ones(m, dtype=bool)
    offs, spans = tmpl.digits()
    digits = buf[starts[:, None] + offs].T.astype(np.int64) - 48 if len(offs) else None  # one row per digit

    def number(name: str) -> np.ndarray:  # Horner's rule over the number's digit rows
        a, b = spans[name]
        v = digits[a].copy()  # type: ignore[index]
        for j in range(a + 1, b):
            v *= 10
            v += digits[j]  # type: ignore[index]
        return v

    out: dict[str, np.ndarray] = {}
    for f in fields:
        p = tmpl.plans[f.name]
        is_int = f.kind == "int"
        if p.mode == "const":
            v = p.const
            out[f.name] = np.full(m, (INT_NONE if is_int else np.nan) if v is None else v,
                                  dtype=np.int64 if is_int else np.float64)
        elif p.mode == "int":
            v = number(f.name)
            out[f.name] = -v if p.sign < 0 else v
        elif p.mode == "dec":
            mant = number(f.name).astype(np.float64)
            if p.eoffs:
                e = number(f.name + "^") * p.esign - p.nfrac
                good = np.abs(e) <= 22
                pw = np.asarray(_POW10)[np.minimum(np.abs(e), 22)]
                v = np.where(e >= 0, mant * pw, mant / pw)
                if not good.all():
                    v[~good] = _slow(p, block, starts[~good], ok, np.flatnonzero(~good), is_int)
            else:
                v = mant / _POW10[p.nfrac] if p.nfrac else mant
            out[f.name] = -v if p.sign < 0 else v
        else:  # "py": the field's own converter, line by line
            out[f.name] = _slow(p, block, starts, ok, np.arange(m), is_int)
    rank = number("^rank") if tmpl.rank is not None else None
    return out, rank, ok


def _slow(p: _Plan, block: bytes, starts: np.ndarray, ok: np.ndarray, where: np.ndarray, is_int: bool) -> np.ndarray:
    """Field values read by the field's Python converter; a line whose value does not fit the
    column (an error, a NaN, an integer beyond int64) is marked not ``ok``."""
    import numpy as np

    a, b = p.span
    conv = p.pyconv
    assert conv is not None
    vals = []
    for j, s in zip(where.tolist(), starts.tolist(), strict=True):
        try:
            v = conv(block[s + a:s + b].decode("ascii"))
        except (ValueError, TypeError, OverflowError):
            v = None
            ok[j] = False
        if v is None:
            vals.append(INT_NONE if is_int else np.nan)
        elif is_int:
            if not (isinstance(v, int) and INT_NONE < v < (1 << 63)):
                ok[j] = False
                v = 0
            vals.append(v)
        else:
            if v != v:
                ok[j] = False
            vals.append(v)
    return np.array(vals, dtype=np.int64 if is_int else np.float64)


class Templates:
    """The shapes seen so far in one parse, each with its template (or ``None``)."""

    def __init__(self, block_re: re.Pattern[str], fields: tuple[BlockField, ...]) -> None:
        self.block_re, self.fields = block_re, fields
        self.ids: dict[bytes, int] = {}
        self.list: list[Template] = []
        self._rep: dict[int, bytes] = {}  # line length -> the shape last seen with that length
        self._rep_id: Any = None  # line length -> that shape's index

    def lookup(self, shapes: list[bytes], lens: np.ndarray) -> np.ndarray:
        """The template index of each shape (int64 array; ``lens``: their lengths, each at most
        :data:`~.reader.MAX_LINE_CHARS`), -1 for none. A line is first compared with the shape
        last seen with its length (one ``memcmp``, no hashing); only the others are looked up
        (and new shapes classified once)."""
        import operator

        import numpy as np

        if self._rep_id is None:
            from trainperf.ingest.reader import MAX_LINE_CHARS

            self._rep_id = np.full(MAX_LINE_CHARS + 1, -1, dtype=np.int64)
        n = len(shapes)
        if n and int(lens.max()) >= len(self._rep_id):  # a line longer than any block holds: hash them all
            return self._ids(shapes)
        rep = self._rep
        same = np.fromiter(map(operator.eq, shapes, map(rep.get, lens.tolist())), dtype=bool, count=n)
        tid = self._rep_id[lens]
        if same.all():
            return tid
        miss = np.flatnonzero(~same)
        others = [shapes[i] for i in miss.tolist()]
        got = self._ids(others)
        tid[miss] = got
        for s, i in zip(others, got.tolist(), strict=True):  # the last shape of each length becomes its reference
            rep[len(s)] = s
            self._rep_id[len(s)] = i
        return tid

    def _ids(self, shapes: list[bytes]) -> np.ndarray:
        import numpy as np

        ids = self.ids
        try:
            return np.fromiter(map(ids.__getitem__, shapes), dtype=np.int64, count=len(shapes))
        except KeyError:
            pass
        if len(ids) > MAX_SHAPES:
            ids.clear()
        for s in set(shapes).difference(ids):
            t = make_template(s, self.block_re, self.fields)
            if t is None:
                ids[s] = -1
            else:
                ids[s] = len(self.list)
                self.list.append(t)
                if len(self.list) > MAX_SHAPES:  # a pathological log: start afresh, bounded
                    self.list.clear()
                    ids.clear()
                    self._rep.clear()
                    self._rep_id[:] = -1
                    return self._ids(shapes)
        return np.fromiter(map(ids.__getitem__, shapes), dtype=np.int64, count=len(shapes))
