"""Parse a log into a RunRecord: read (streaming), detect the format, parse line by line, keep one
rank's steps, resolve restarts, and attach the workload with the origin of every field.

Rank prefixes added by launchers are stripped before a parser sees a line: torchrun
``[rank3]:`` / ``[default3]:``, ``srun --label`` ``3: ``, Open MPI ``[1,3]<stdout>:``. When
several ranks print steps, the lowest rank's are kept.
Lines without a prefix count as one more stream that ranks after every numbered rank (a
single-process log has only that stream). A step number that does not increase starts a new segment (a restart from a checkpoint): the
steps it repeats are replaced by the new ones, and the first steps of each later segment are
dropped as that segment's warm-up (the same rule as the run's own warm-up).

Every line is read and every step line is parsed (no sampling, however long the log). Lines of
another format's steps in a mixed file are collected and parsed by that format's parser: each
such stream is reported (``meta["other_streams"]`` and a note); ``--format`` picks which stream
is the run. Once the workload is known, physically impossible steps are flagged (:mod:`.flags`):
kept, out of the medians.

Speed and memory: the reader hands over blocks of raw lines (:func:`~.reader.iter_log_blocks`).
For a format with a :attr:`~LogParser.block_re`, the canonical step lines of a block are found
and read by their shape (:mod:`.templates`: numpy over the bytes, no regex or object per line)
and converted a column at a time (:meth:`~LogParser.block_arrays`); every other line is decoded
and goes through ``parse_line``. Kept steps are stored as compact columns
(:class:`~trainperf.records.step_columns.StepColumns`, 8 bytes per step and field) whatever
path made them; StepRecords are made only when a consumer asks for them.
"""

from __future__ import annotations

import gc
import itertools
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainperf.accounting.summarize import default_warmup_steps
from trainperf.errors import InputFileError
from trainperf.ingest.base import (
    MEMORY_PEAK,
    LogParser,
    ParseState,
    deepspeed_max_memory_GiB,
    listed_gpu_name,
)
from trainperf.ingest.flags import FlagReport, flag_impossible
from trainperf.ingest.reader import (
    PARTIAL,
    LogLine,
    PartialLine,
    ReadStats,
    block_lines,
    iter_log_blocks,
)
from trainperf.ingest.registry import detect_format, get_parser
from trainperf.ingest.templates import DIGITS_TO_ZERO, RANK_RE, Templates, read_fields
from trainperf.records.run_record import MAX_TOKENS_PER_STEP, RunRecord, StepRecord, storable_step
from trainperf.records.step_columns import StepColumns, StepColumnsBuilder

if TYPE_CHECKING:
    from trainperf.ingest.workload_facts import WorkloadResolution

SAMPLE_LINES = 5_000
MAX_SAMPLE_LINES = 100_000
_LINE_END = 1 << 62  # the line number of a record that finish() gives without one: after every line
_UNPREFIXED = 1 << 40  # sorts after every real rank
_NO_STEPS_YET = 1 << 41


def strip_rank(line: str) -> tuple[str, int | None]:
    """``line`` without a launcher's rank prefix, and that rank (``None`` when there is none)."""
    c = line[:1]
    if c == "[" or c == " " or c.isdigit():
        m = RANK_RE.match(line)
        if m is not None:
            g = m.group(1) or m.group(2) or m.group(3)
            return line[m.end():], int(g)
    return line, None


def _storable(rec: StepRecord) -> bool:
    """:func:`~trainperf.records.run_record.storable_step` of a parsed step."""
    return storable_step(rec.step, rec.tokens)


def _columns_storable(cols: dict[str, Any]) -> bool:
    """:func:`_storable` for a block of step columns (the token column's ``None`` sentinel aside)."""
    import numpy as np

    from trainperf.records.step_columns import INT_NONE

    tokens = cols.get("tokens")
    if tokens is None or not isinstance(tokens, np.ndarray) or tokens.dtype.kind != "i":
        return True
    given = tokens[tokens != INT_NONE]
    return bool(((given >= 0) & (given <= MAX_TOKENS_PER_STEP)).all())


@dataclass
class Collected:
    """Steps of the kept rank, in log order, with restart bookkeeping."""

    steps: StepColumns = field(default_factory=lambda: StepColumns({}, None))
    rank: int | None = None
    ranks_with_steps: set[int] = field(default_factory=set)
    other_rank_steps: int = 0
    restarts: list[dict[str, Any]] = field(default_factory=list)
    superseded_steps: int = 0
    segment_starts: list[int] = field(default_factory=list)
    parsed: int = 0


class _Collector:
    """Keeps the lowest rank's steps, every one of them (no sampling), as columns: records of
    the per-line path and blocks of arrays of the speed path alike."""

    def __init__(self) -> None:
        self.best: int | None = None
        self.ranks: set[int] = set()
        self.other = 0
        self.cols = StepColumnsBuilder()

    def _keep(self, rank: int | None, n: int) -> bool:
        """The rank rule: keep the lowest rank seen; a lower one drops what was kept so far and
        counts it as other ranks' steps; ``n`` steps of a higher rank are counted, not kept."""
        r = _UNPREFIXED if rank is None else rank
        self.ranks.add(r)
        if self.best is None or r < self.best:
            self.other += len(self.cols)
            self.cols = StepColumnsBuilder()
            self.best = r
        elif r > self.best:
            self.other += n
            return False
        return True

    def add(self, rec: StepRecord, line_no: int) -> None:
        if self._keep(rec.rank, 1):
            self.cols.add_record(rec, line_no)

    def add_columns(self, rank: int | None, cols: dict[str, Any], lines: Any) -> None:
        """Steps of rank ``rank`` as arrays (see :meth:`StepColumnsBuilder.add_block`) at log
        lines ``lines``; the same rank rule as :meth:`add`."""
        if self._keep(rank, len(lines)):
            self.cols.add_block(cols, lines)

    def result(self) -> Collected:
        import numpy as np

        rank = None if self.best in (None, _UNPREFIXED) else self.best
        steps, lines = self.cols.build(rank)
        out = Collected(rank=rank, ranks_with_steps={r for r in self.ranks if r != _UNPREFIXED},
                        other_rank_steps=self.other, parsed=len(steps))
        n = len(steps)
        if n > 1 and (lines[1:] < lines[:-1]).any():  # finish() records go back to their log line
            order = np.argsort(lines, kind="stable")
            steps, lines = steps.take(order), lines[order]
        step = steps.array("step")
        if n < 2 or step is None:
            out.steps = steps
            return out
        restarts = np.flatnonzero(step[1:] <= step[:-1]) + 1
        if not len(restarts):
            out.steps = steps
            return out
        # A restart at row i drops the kept steps numbered >= step[i] (the stack of the per-line
        # rule); the kept rows are ranges of rows, each strictly increasing in step.
        kept: list[list[int]] = []
        n_kept = 0
        prev = 0
        for i in restarts.tolist():
            kept.append([prev, i])
            n_kept += i - prev
            to = int(step[i])
            ln = int(lines[i])
            out.restarts.append({"line": None if ln >= _LINE_END else ln, "from_step": int(step[i - 1]),
                                 "to_step": to})
            while kept:
                a, b = kept[-1]
                k = a + int(np.searchsorted(step[a:b], to, side="left"))
                out.superseded_steps += b - k
                n_kept -= b - k
                if k > a:
                    kept[-1][1] = k
                    break
                kept.pop()
            out.segment_starts = [s for s in out.segment_starts if s < n_kept]
            out.segment_starts.append(n_kept)
            prev = i
        kept.append([prev, n])
        out.steps = steps.take(np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in kept]))
        return out


@dataclass
class LineCounts:
    lines_total: int = 0
    lines_used: int = 0
    other_rank_lines: int = 0
    step_lines_sampled_out: int = 0
    """Always 0: every step line is parsed (kept for the report's key set)."""
    other_format_lines: dict[str, list[tuple[int, int | None, str]]] = field(default_factory=dict)
    """Format name -> unused lines carrying that format's step marker ``(line no, rank, text)``:
    another stream in a mixed file."""


MAX_OTHER_FORMAT_LINES = 200_000


def _other_markers(parser: LogParser) -> list[tuple[str, str]]:
    from trainperf.ingest.registry import FORMATS

    out = []
    for name in FORMATS:
        other = get_parser(name)
        if other.name != parser.name and other.step_marker:
            out.append((other.step_marker, other.name))
    return out


class _Feeder:
    """Feeds the lines to the parser: strip the rank prefix, skip ranks above the kept one,
    parse, collect; blocks of a format with templates take the speed path (:meth:`feed_block`)."""

    def __init__(self, parser: LogParser, state: ParseState, counts: LineCounts, watch_other_formats: bool) -> None:
        self.parser, self.state, self.counts = parser, state, counts
        self.col = _Collector()
        self.default_rank: int | None = None
        self.total = self.used = self.other = 0
        self.best = _NO_STEPS_YET
        self.last_prefix = "\x00"  # a prefix no line starts with
        self.last_rank: int | None = None
        self.others = _other_markers(parser) if watch_other_formats else []
        self.n_other = 0
        fields = parser.block_fields
        self.templates = Templates(parser.block_re, fields) if parser.block_re is not None and fields else None

    def marker(self, item: LogLine | PartialLine) -> None:
        if item is PARTIAL:
            self.state.partial = True
        else:
            self.default_rank = item.rank

    def rank_of(self, line: str) -> tuple[str, int | None]:
        """``line`` without its launcher prefix, and the rank (the file's default without one)."""
        rank = self.default_rank
        c = line[:1]
        if c.isdigit():
            if line.startswith(self.last_prefix):  # the same srun --label prefix as the line before
                return line[len(self.last_prefix):], self.last_rank
            j = line.find(": ", 1, 8)
            if j > 0 and line[:j].isdigit():  # srun --label
                self.last_rank = int(line[:j])
                self.last_prefix = line[:j + 2]
                return line[j + 2:], self.last_rank
        elif c == "[" or c == " ":
            m = RANK_RE.match(line)
            if m is not None:
                return line[m.end():], int(m.group(1) or m.group(2) or m.group(3))
        return line, rank

    def feed(self, raw: str) -> None:
        self.total += 1
        line, rank = self.rank_of(raw)
        r = _UNPREFIXED if rank is None else rank
        if r > self.best:
            self.other += 1
            return
        state = self.state
        state.line_no = self.total
        state.rank = rank
        state.used = False
        try:
            rec = self.parser.parse_line(line, state)
        except Exception:  # a parser bug must not lose the rest of the run; counted, not hidden
            state.malformed_lines += 1
            return
        finally:
            state.partial = False
        if rec is not None and not _storable(rec):  # a 27-digit step index, 1e26 tokens: a damaged line
            state.malformed_lines += 1
            return
        if rec is not None:
            self.used += 1
            self.col.add(rec, self.total)
            self.best = r
        elif state.used:
            self.used += 1
        elif "device_name" not in state.facts.values and (gpu := listed_gpu_name(line)) is not None:
            state.fact("device_name", gpu, line)  # any format's log may carry a gpustat / nvidia-smi listing
            self.used += 1
        elif (peak := deepspeed_max_memory_GiB(line)) is not None:
            state.peak_memory(MEMORY_PEAK, peak, line)  # a DeepSpeed engine under any trainer (HF, Megatron-DS)
            self.used += 1
        elif self.others and self.n_other < MAX_OTHER_FORMAT_LINES:
            for marker, name in self.others:
                if marker in line:
                    self.counts.other_format_lines.setdefault(name, []).append((self.total, rank, line))
                    self.n_other += 1
                    break

    def feed_block(self, block: bytes) -> None:
        """The lines of ``block`` (whole lines, see :func:`~.reader.iter_blocks`) in order, each
        with its own line number. Lines of a template (canonical step lines whose numbers read
        exactly and pass :meth:`~LogParser.block_valid`) are read as arrays (:mod:`.templates`);
        each run of them, with the inert lines among them (:meth:`~LogParser.block_inert`), is
        handled by :meth:`_feed_run`; every other line goes through :meth:`feed`."""
        import numpy as np

        assert self.templates is not None
        shapes = block.translate(DIGITS_TO_ZERO).split(b"\n")
        shapes.pop()
        n = len(shapes)
        lens = np.fromiter(map(len, shapes), dtype=np.int64, count=n)
        tid = self.templates.lookup(shapes, lens)
        if not n or tid.max() < 0:
            for line in block_lines(block):
                self.feed(line)
            return
        ends = np.cumsum(lens + 1)
        starts = np.concatenate([[0], ends[:-1]])
        vals, ranks, prefix = self._read_template_lines(block, starts, tid)
        is_t = tid >= 0
        text, barriers = self._other_lines(block, starts, ends, is_t)
        base = self.total
        a = 0
        for stop in [*barriers, n]:
            if stop > a:
                rows = np.arange(a, stop)
                t_rows = rows[is_t[a:stop]]
                if len(t_rows):
                    self._feed_run(block, starts, ends, prefix, ranks, vals, t_rows, a, stop, text, base)
                else:
                    for i in range(a, stop):
                        self.total = base + i
                        self.feed(text[i])
            if stop < n:
                self.total = base + stop
                self.feed(text[stop])
            a = stop + 1
        self.total = base + n

    def _read_template_lines(self, block: bytes, starts: Any,
                             tid: Any) -> tuple[dict[str, Any], Any, Any]:
        """The fields (by name), rank and prefix length of each template line of ``block``, as
        arrays by row; a line whose numbers do not read exactly or that fails
        :meth:`~LogParser.block_valid` gets template id -1 in ``tid`` (read line by line)."""
        import numpy as np

        assert self.templates is not None
        n = len(tid)
        buf = np.frombuffer(block, dtype=np.uint8)
        fields = self.parser.block_fields
        vals = {f.name: np.empty(n, dtype=np.int64 if f.kind == "int" else np.float64) for f in fields}
        default = _UNPREFIXED if self.default_rank is None else self.default_rank
        ranks = np.full(n, default, dtype=np.int64)
        prefix = np.zeros(n, dtype=np.int64)
        tlist = self.templates.list
        for t in np.unique(tid[tid >= 0]).tolist():
            rows = np.flatnonzero(tid == t)
            tmpl = tlist[t]
            got, rank, ok = read_fields(tmpl, buf, block, starts[rows], fields)
            valid = self.parser.block_valid(got)
            if valid is not None:
                ok &= valid
            for k, v in got.items():
                vals[k][rows] = v
            if rank is not None:
                ranks[rows] = rank
            prefix[rows] = tmpl.prefix_end
            if not ok.all():
                tid[rows[~ok]] = -1
        return vals, ranks, prefix

    def _other_lines(self, block: bytes, starts: Any, ends: Any,
                     is_t: Any) -> tuple[dict[int, str], list[int]]:
        """Every line of ``block`` that is not a template line, decoded, by row; and the rows of
        those that are not inert (:meth:`~LogParser.block_inert`), in order."""
        import numpy as np

        # An inert line cannot change what a step line gives, so it may sit inside a run of
        # template lines; any other one ends the run.
        other_rows = np.flatnonzero(~is_t).tolist()
        text = {i: block[s:e - 1].decode("utf-8", errors="replace") for i, s, e in
                zip(other_rows, starts[other_rows].tolist(), ends[other_rows].tolist(), strict=True)}
        inert = self.parser.block_inert
        barriers = [i for i in other_rows if not inert(text[i])]
        return text, barriers

    def _feed_run(self, block: bytes, starts: Any, ends: Any, prefix: Any, ranks: Any, vals: dict[str, Any],
                  t_rows: Any, a: int, b: int, text: dict[int, str], base: int) -> None:
        """Lines ``a:b`` of a block (log lines ``base + a + 1`` to ``base + b``): template lines
        ``t_rows`` and inert lines (``text``). The per-line rank rule on arrays (a line of a rank
        above the lowest seen so far is counted, not parsed; a lower rank restarts the
        collection), then each stretch of one rank's template lines becomes one block of columns
        via :meth:`~LogParser.block_arrays`, and its inert lines go through :meth:`feed`: those
        before its first template line first (judged against the rank kept before it, as line
        by line), the others after (the rank is the stretch's either way)."""
        import numpy as np

        r = ranks[t_rows]
        best0 = self.best
        cm = np.minimum.accumulate(np.minimum(r, best0))
        kept = r == cm
        prev = np.concatenate([[best0], cm[:-1]])
        cuts = np.flatnonzero(kept & (r < prev)).tolist()
        segs = [0, *[c for c in cuts if c > 0], len(t_rows)]
        feed = self.feed
        for s0, s1 in itertools.pairwise(segs):
            lo = a if s0 == 0 else int(t_rows[s0])  # the lines of this stretch: lo .. hi - 1
            hi = b if s1 == len(t_rows) else int(t_rows[s1])
            first = int(t_rows[s0])
            idx = t_rows[s0:s1][kept[s0:s1]]
            self.other += (s1 - s0) - len(idx)
            cols = None
            if len(idx):
                last = int(idx[-1])
                rank = int(ranks[idx[0]])
                state = self.state
                state.line_no = base + last + 1
                state.rank = None if rank == _UNPREFIXED else rank
                line = block[int(starts[last]) + int(prefix[last]):int(ends[last]) - 1].decode("utf-8", errors="replace")
                cols = self.parser.block_arrays({f: v[idx] for f, v in vals.items()}, line, state)
                if cols is not None and not _columns_storable(cols):
                    cols = None  # a token count no step has: line by line, where it is counted malformed
                if cols is None:  # the parser declines (e.g. a count beyond int64): these lines one by one
                    self.other -= (s1 - s0) - len(idx)
                    for i in range(lo, b):
                        self.total = base + i
                        feed(text[i] if i in text else block[int(starts[i]):int(ends[i]) - 1].decode(
                            "utf-8", errors="replace"))
                    return
            for i in range(lo, first):  # inert lines before the stretch's first template line
                self.total = base + i
                feed(text[i])
            if cols is not None:
                self.used += len(idx)
                self.col.add_columns(None if rank == _UNPREFIXED else rank, cols, idx + (base + 1))
                self.best = rank
            for i in range(first + 1, hi):
                if i in text:
                    self.total = base + i
                    feed(text[i])


def run_parser(lines: Iterable[str | bytes | LogLine | PartialLine], parser: LogParser, state: ParseState,
               counts: LineCounts, *, watch_other_formats: bool = False) -> Collected:
    """Feed every line to ``parser``; never raises on content.

    ``lines`` holds lines (``str``), blocks of whole lines (``bytes``, see
    :func:`~.reader.iter_blocks`) and markers. Once a rank has produced a step, lines of higher
    ranks are not parsed at all (they would only give steps that are dropped): counted in
    ``counts.other_rank_lines``. Every step line of the kept rank is parsed (no sampling).
    Blocks of a parser with templates take the speed path (:meth:`_Feeder.feed_block`).
    With ``watch_other_formats``, lines the parser did not use that carry another format's step
    marker are kept (bounded) in ``counts.other_format_lines`` so that a mixed file's other
    streams can be reported.
    """
    f = _Feeder(parser, state, counts, watch_other_formats)
    feed, marker = f.feed, f.marker
    fast = f.templates is not None
    for item in lines:
        cls = item.__class__
        if cls is str:
            feed(item)  # type: ignore[arg-type]
        elif cls is bytes:
            if fast:
                f.feed_block(item)  # type: ignore[arg-type]
            else:
                for line in block_lines(item):  # type: ignore[arg-type]
                    feed(line)
        else:
            marker(item)  # type: ignore[arg-type]
    for rec in parser.finish(state):
        line_no = rec.extra.pop("line", None) if rec.extra else None
        f.col.add(rec, line_no if isinstance(line_no, int) else _LINE_END)
    counts.lines_total += f.total
    counts.lines_used += f.used
    counts.other_rank_lines += f.other
    return f.col.result()


def other_streams(counts: LineCounts, hints: dict[str, Any]) -> list[dict[str, Any]]:
    """Parse each other format's lines of a mixed file with its own parser: one summary each."""
    out = []
    for name, items in counts.other_format_lines.items():
        parser = get_parser(name)
        state = ParseState(hints=hints)
        lines: list[str | LogLine] = []
        for _, rank, text in items:
            lines.append(LogLine("", rank))
            lines.append(text)
        col = run_parser(lines, parser, state, LineCounts())
        times = sorted(s.step_time_s for s in col.steps if s.flag is None)
        if not col.steps:
            continue
        out.append({"format": name, "steps": len(col.steps), "first_line": items[0][0],
                    "step_time_median_s": statistics.median(times) if times else None,
                    "malformed_lines": state.malformed_lines})
    return out


def _sample(it: Iterator[bytes | str | LogLine | PartialLine], items: list[Any], texts: list[str | LogLine],
            n: int) -> bool:
    """Read from ``it`` into ``items`` (as read) until ``texts`` (its lines, decoded, and
    markers) holds at least ``n`` entries; False when ``it`` is exhausted first."""
    while len(texts) < n:
        item = next(it, None)
        if item is None:
            return False
        items.append(item)
        if item.__class__ is bytes:
            texts += block_lines(item)
        else:
            texts.append(item)  # type: ignore[arg-type]
    return True


def _texts(items: list[str | LogLine]) -> list[str]:
    return [strip_rank(x)[0] for x in items if isinstance(x, str)]


# Workload facts a rate needs, and the log keys that state each.
_COVERAGE: dict[str, tuple[str, ...]] = {
    "model": ("model", "model_flavor", "layers", "workload"),
    "device": ("device_name", "workload"),
    "num_devices": ("num_devices", "workload"),
    "seq_len": ("seq_len", "workload"),
    "global_batch": ("global_batch", "workload"),
    "tokens_per_step": ("tokens_per_step",),
    "precision": ("precision", "workload"),
}


def log_field_coverage(values: dict[str, Any], tokens_per_step: int | None) -> tuple[list[str], list[str]]:
    """Which workload facts the log itself states, and which it does not (tokens per step are
    stated by a log that states the global batch and the sequence length)."""
    found = [k for k, keys in _COVERAGE.items() if any(x in values for x in keys)
             or (k == "tokens_per_step" and (tokens_per_step or {"seq_len", "global_batch"} <= set(values)))]
    return found, [k for k in _COVERAGE if k not in found]


def _device_hint(overrides: dict[str, Any], base: dict[str, Any] | None, facts: dict[str, Any]) -> dict[str, Any]:
    """The device (id, precision, peak) as far as known without a full workload: flags first,
    then the workload passed in, then the log's own device name."""
    hw = (base or {}).get("hardware") or {}
    tr = (base or {}).get("training") or {}
    device = overrides.get("hardware.device") or hw.get("device")
    if device is None and facts.get("device_name"):
        from trainperf.ingest.workload_facts import device_id_from_name

        device = device_id_from_name(str(facts["device_name"]))
    return {"id": device, "precision": overrides.get("training.precision") or tr.get("precision")
            or facts.get("precision"), "peak_tflops": overrides.get("hardware.peak_tflops")}


def _restart_warmup(col: Collected, warmup: int | None) -> tuple[StepColumns, list[int]]:
    """The kept steps without the warm-up of each segment after a restart (the run's own rule),
    and the step numbers so dropped."""
    import numpy as np

    steps = col.steps
    if not col.segment_starts:
        return steps, []
    bounds = [0, *col.segment_starts, len(steps)]
    keep = np.ones(len(steps), dtype=bool)
    for a, b in itertools.pairwise(bounds[1:]):
        k = min(b - a, warmup if warmup is not None else default_warmup_steps(b - a))
        keep[a:a + k] = False
    idx = np.flatnonzero(~keep)
    dropped = [int(x) for x in np.asarray(steps.values("step"))[idx]] if len(idx) else []
    return steps.take(np.flatnonzero(keep)), dropped


def _median_tokens(steps: StepColumns) -> int | None:
    """The steps' own token count: the upper median of the non-zero counts (``None`` if none)."""
    import numpy as np

    vals = steps.values("tokens")
    arr = np.asarray(vals, dtype=object if isinstance(vals, list) else np.int64)
    nonzero = arr != 0
    if not nonzero.all():
        arr = arr[nonzero]
    del nonzero
    if not len(arr):
        return None
    if isinstance(vals, list):
        return int(sorted(arr.tolist())[len(arr) // 2])
    if arr[0] == arr[-1] and (arr == arr[0]).all():  # the common case: no sort of a million equal counts
        return int(arr[0])
    part = np.array(arr)  # one copy, partitioned in place
    part.partition(len(arr) // 2)
    return int(part[len(arr) // 2])


def _skipped_reasons(counts: LineCounts, state: ParseState, stats: ReadStats) -> dict[str, int]:
    """Lines read but not used, by reason (only reasons with a count), and files not read."""
    skipped = counts.lines_total - counts.lines_used - counts.other_rank_lines
    malformed = min(state.malformed_lines, skipped)
    out = {"malformed step lines (cut mid-number included)": malformed,
           "no step or fact of this format": skipped - malformed,
           "lines of a rank above the kept one (not parsed)": counts.other_rank_lines,
           "files not read (binary)": len(stats.skipped_files)}
    return {k: v for k, v in out.items() if v}


@dataclass
class ParsedLog:
    """The run record plus the parse bookkeeping the report shows."""

    run: RunRecord
    parser: LogParser
    facts: Any
    counts: LineCounts
    state: ParseState
    format: str = ""


@dataclass
class _Detection:
    """The parser a log is read with, how it was chosen, and each format's detection score."""

    parser: LogParser
    how: str
    scores: dict[str, float]


def _detect(source: str | Path, fmt: str | None, it: Iterator[bytes | str | LogLine | PartialLine],
            head: list[Any], stats: ReadStats) -> _Detection:
    """The format given with ``fmt``, else detected from the first lines read from ``it`` (kept
    in ``head`` to be parsed first); raises :class:`InputFileError` when none is found."""
    if fmt is not None:
        return _Detection(get_parser(fmt), "given with --format", {})
    # The first SAMPLE_LINES lines (markers count as lines), doubled until a format is found.
    texts: list[str | LogLine] = []
    more = _sample(it, head, texts, SAMPLE_LINES)
    sample = texts[:SAMPLE_LINES]
    name, scores = detect_format(_texts(sample))
    while name is None and len(sample) < MAX_SAMPLE_LINES and (more or len(texts) > len(sample)):
        more = _sample(it, head, texts, 2 * len(sample))
        sample = texts[:2 * len(sample)]
        name, scores = detect_format(_texts(sample))
    del texts
    if name is None:
        n = sum(1 for x in sample if isinstance(x, str))
        if n == 0 and not stats.skipped_files:
            raise InputFileError(f"log {str(source)!r} is empty")
        raise InputFileError(f"no known training-log format found in the first {n:,} lines of "
                             f"{str(source)!r}; give --format (one of {', '.join(scores)})")
    parser = get_parser(name)
    how = f"auto-detected (score {scores[name]:.3g} on the first {len(sample):,} lines)"
    return _Detection(parser, how, scores)


def _run_parser_gc_paused(lines: Iterable[str | bytes | LogLine | PartialLine], parser: LogParser,
                          state: ParseState, counts: LineCounts) -> Collected:
    """:func:`run_parser` (watching other formats) with the cyclic garbage collector paused."""
    # The cyclic GC would rescan the parser's objects again and again as more are allocated
    # (quadratic in the run's length); parsing creates no reference cycles, so pause it.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return run_parser(lines, parser, state, counts, watch_other_formats=True)
    finally:
        if gc_was_enabled:
            gc.enable()


def _input_meta(source: str | Path, det: _Detection, stats: ReadStats, counts: LineCounts,
                state: ParseState) -> dict[str, Any]:
    """The record's meta about its input: the log, its format, and what was read, used and
    skipped (lines and files)."""
    return {
        "name": Path(str(source)).name if str(source) != "-" else "stdin",
        "log": str(source),
        "format": det.parser.name,
        "format_detection": det.how,
        "format_scores": {k: round(v, 3) for k, v in det.scores.items() if v > 0},
        "files": stats.files,
        "skipped_files": stats.skipped_files,
        "lines_total": counts.lines_total,
        "lines_used": counts.lines_used,
        "skipped_lines": counts.lines_total - counts.lines_used - counts.other_rank_lines,
        "other_rank_lines": counts.other_rank_lines,
        "malformed_lines": state.malformed_lines,
        "overlong_lines": stats.overlong_lines,
        "damaged_lines": {"nul_lines": stats.nul_lines, "non_utf8_lines": stats.non_utf8_lines,
                          "overlong_lines": stats.overlong_lines},
        "skipped_reasons": _skipped_reasons(counts, state, stats),
        "truncated_input": stats.truncated,
        "cut_lines": state.cut_count,
        "cut_line_examples": [{"line": n, "text": t} for n, t in state.cut_lines],
    }


def _steps_meta(col: Collected, flags: FlagReport, streams: list[dict[str, Any]],
                dropped: list[int]) -> dict[str, Any]:
    """The record's meta about its steps: parsed, flagged, other streams, ranks and restarts."""
    return {
        "steps_parsed": col.parsed,
        "flagged_steps": flags.count,
        "flag_reasons": flags.reasons,
        "flag_peak": {"tflops": flags.peak_tflops, "source": flags.peak_source},
        "other_streams": streams,
        "step_lines_sampled_out": 0,
        "steps_sampling_stride": 1,
        "rank_used": col.rank,
        "ranks_with_steps": sorted(col.ranks_with_steps),
        "other_rank_steps": col.other_rank_steps,
        "restarts": col.restarts,
        "superseded_steps": col.superseded_steps,
        "restart_warmup_dropped": dropped,
    }


def _workload_meta(state: ParseState, parser: LogParser, res: WorkloadResolution, tokens_per_step: int | None,
                   found: list[str], not_found: list[str]) -> dict[str, Any]:
    """The record's meta about its workload: which facts the log states (``found``, ``not_found``)
    and where, where every workload field came from, the parser's claim conventions, the notes."""
    facts = state.facts
    return {
        "fields_in_log": found,
        "fields_not_in_log": not_found,
        "log_facts": {k: v for k, v in facts.values.items() if k not in ("workload", "gqa")},
        "log_fact_lines": {k: v for k, v in facts.where.items() if k != "workload"},
        "fact_conflicts": facts.conflicts,
        "workload_fields": res.fields,
        "workload_missing": res.missing,
        "workload_notes": res.notes,
        "tokens_per_step_in_log": tokens_per_step,
        "claimed_convention": facts.values.get("mfu_convention", parser.claimed_convention),
        "claimed_scope": parser.claimed_scope,
        "notes": state.notes,  # the same list: the notes added after this are in the record too
    }


def _add_notes(state: ParseState, parser: LogParser, flags: FlagReport, streams: list[dict[str, Any]],
               stats: ReadStats) -> None:
    """Note what the report must tell: cut step lines, impossible steps, the file's other
    streams, and an input that ended early."""
    if state.cut_count:
        where = ", ".join(f"line {n}" for n, _ in state.cut_lines)
        state.note(f"{state.cut_count} step line(s) cut mid-number (no delimiter after the number, as when a job is "
                   f"killed mid-write) counted malformed, not as steps: {where}")
    if flags.count:
        state.note(f"{flags.count} physically impossible step(s) kept in the record but left out of the medians: "
                   + "; ".join(flags.reasons[:3]))
    for o in streams:
        med = o["step_time_median_s"]
        state.note(f"this file also holds a {o['format']} stream (from line {o['first_line']}): {o['steps']} step(s)"
                   + (f", median step time {med:.4g} s" if med is not None else "")
                   + f"; only the {parser.name} stream is summarized (--format {o['format']} picks that one)")
    if stats.truncated:
        state.note("the input ended early (truncated gzip stream or read error); the steps read so far are kept")


def parse_log(source: str | Path, *, fmt: str | None = None, workload_path: str | None = None,
              overrides: dict[str, Any] | None = None, warmup: int | None = None,
              workload: Any = None) -> ParsedLog:
    """Parse the log at ``source`` (file, directory, ``.gz`` or ``-`` for stdin) into a RunRecord.

    ``fmt`` forces a format (else detected from the first lines); ``workload_path`` and
    ``overrides`` (``{"section.key": value}`` from flags) fill in what the log does not state.
    ``warmup`` is the run's warm-up rule, also applied after each restart. ``workload`` (a
    Workload) plays the part of a workload file, for callers that already have one.
    """
    from trainperf.ingest.workload_facts import resolve_workload, user_hints

    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    base: dict[str, Any] | None = None
    if workload is not None:
        from trainperf.specs.workload_file import workload_to_dict

        base = workload_to_dict(workload)
    hints = user_hints(workload_path, overrides, base)
    stats = ReadStats()
    it = iter_log_blocks(source, stats)
    head: list[Any] = []  # what detection read, fed to the parser first
    det = _detect(source, fmt, it, head, stats)
    parser = det.parser
    state = ParseState(hints=hints)
    counts = LineCounts()
    col = _run_parser_gc_paused(itertools.chain(head, it), parser, state, counts)
    del head
    if parser.stack and "stack" not in state.facts.values:
        state.facts.values["stack"] = parser.stack
        state.facts.where["stack"] = f"a {parser.name} log comes from the {parser.stack} stack"
    steps, dropped = _restart_warmup(col, warmup)
    tokens_per_step = _median_tokens(steps)
    if tokens_per_step is None:
        tokens_per_step = state.facts.get("tokens_per_step")
    res = resolve_workload(state.facts, workload_path, overrides, tokens_per_step, base=base)
    facts = state.facts
    found, not_found = log_field_coverage(facts.values, tokens_per_step)
    flags = flag_impossible(steps, res.workload, facts.values, _device_hint(overrides, base, facts.values))
    streams = other_streams(counts, hints)
    meta = {**_input_meta(source, det, stats, counts, state), **_steps_meta(col, flags, streams, dropped),
            **_workload_meta(state, parser, res, tokens_per_step, found, not_found)}
    _add_notes(state, parser, flags, streams, stats)
    run = RunRecord(source="ingest", steps=steps, workload=res.workload, meta=meta)  # type: ignore[arg-type]  # StepColumns is a Sequence[StepRecord]
    return ParsedLog(run=run, parser=parser, facts=facts, counts=counts, state=state, format=parser.name)
