"""Parse a log into a RunRecord: read (streaming), detect the format, parse line by line, keep one
rank's steps, resolve restarts, and attach the workload with the origin of every field.

Rank prefixes added by launchers are stripped before a parser sees a line: torchrun
``[rank3]:`` / ``[default3]:``, ``srun --label`` ``3: ``, Open MPI ``[1,3]<stdout>:``. When
several ranks print steps, the lowest rank's are kept.
Lines without a prefix count as one more stream that ranks after every numbered rank (a
single-process log has only that stream). A step number that does not increase starts a new segment (a restart from a checkpoint): the
steps it repeats are replaced by the new ones, and the first steps of each later segment are
dropped as that segment's warm-up (the same rule as the run's own warm-up).

Every step line is parsed (no sampling, however long the log). Lines of another format's steps
in a mixed file are collected and parsed by that format's parser: each such stream is reported
(``meta["other_streams"]`` and a note); ``--format`` picks which stream is the run. Once the
workload is known, physically impossible steps are flagged (:mod:`.flags`): kept, out of the medians.

Speed: a format with a :attr:`~LogParser.block_re` has its canonical step lines matched in blocks
of lines (one ``findall``) and, with :meth:`~LogParser.block_columns`, converted a column at a
time; the kept steps then stay columns (:class:`~trainperf.records.step_columns.StepColumns`,
StepRecords made only when asked for) unless the run restarts or mixes in steps of the per-line
path, which become a plain list as before.
"""

from __future__ import annotations

import gc
import itertools
import operator
import re
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

from trainperf.accounting.summarize import default_warmup_steps
from trainperf.errors import InputFileError
from trainperf.ingest.base import LogParser, ParseState
from trainperf.ingest.flags import flag_impossible
from trainperf.ingest.reader import PARTIAL, LogLine, PartialLine, ReadStats, iter_log
from trainperf.ingest.registry import detect_format, get_parser
from trainperf.records.run_record import RunRecord, StepRecord
from trainperf.records.step_columns import COLUMNS, StepColumns

SAMPLE_LINES = 5_000
MAX_SAMPLE_LINES = 100_000
_RANK_RE = re.compile(r"\s*(?:\[(?:rank|default)?(\d+)\]:|(\d{1,5}): |\[\d+,(\d+)\]<std(?:out|err)>:)\s?")
_INF = float("inf")
_UNPREFIXED = 1 << 40  # sorts after every real rank
_NO_STEPS_YET = 1 << 41
_PREFIX = itemgetter(0, 1)
_ONLY_STR = {str}


def strip_rank(line: str) -> tuple[str, int | None]:
    """``line`` without a launcher's rank prefix, and that rank (``None`` when there is none)."""
    c = line[:1]
    if c == "[" or c == " " or c.isdigit():
        m = _RANK_RE.match(line)
        if m is not None:
            g = m.group(1) or m.group(2) or m.group(3)
            return line[m.end():], int(g)
    return line, None


@dataclass
class Collected:
    """Steps of the kept rank, in log order, with restart bookkeeping."""

    steps: list[StepRecord] = field(default_factory=list)
    rank: int | None = None
    ranks_with_steps: set[int] = field(default_factory=set)
    other_rank_steps: int = 0
    restarts: list[dict[str, Any]] = field(default_factory=list)
    superseded_steps: int = 0
    segment_starts: list[int] = field(default_factory=list)
    parsed: int = 0


_NONE_FIELDS = ("memory_GiB", "claimed_tokens_per_s", "claimed_mfu_pct", "breakdown", "flag")


def _fits_columns(rec: StepRecord, rank: int | None) -> bool:
    """Whether a StepColumns of rank ``rank`` holds ``rec`` exactly (no field outside COLUMNS set)."""
    return rec.rank == rank and not rec.extra and all(getattr(rec, k) is None for k in _NONE_FIELDS)


class _Collector:
    """Keeps the lowest rank's steps, every one of them (no sampling): StepRecords from the
    per-line path in ``items``, blocks of columns from the speed path in ``cols`` (made into
    records only when both kinds are kept, or on a restart)."""

    def __init__(self) -> None:
        self.best: int | None = None
        self.items: list[tuple[float, StepRecord]] = []
        self.ranks: set[int] = set()
        self.other = 0
        self.cols: dict[str, list[Any]] | None = None
        self.col_lines: list[int] = []
        self.col_rank: int | None = None

    def _keep(self, rank: int | None, n: int) -> bool:
        """The rank rule: keep the lowest rank seen; a lower one drops what was kept so far and
        counts it as other ranks' steps; ``n`` steps of a higher rank are counted, not kept."""
        r = _UNPREFIXED if rank is None else rank
        self.ranks.add(r)
        if self.best is None or r < self.best:
            self.other += len(self.items) + len(self.col_lines)
            self.items = []
            self.cols = None
            self.col_lines = []
            self.best = r
        elif r > self.best:
            self.other += n
            return False
        return True

    def add(self, rec: StepRecord, line_no: float) -> None:
        if self._keep(rec.rank, 1):
            self.items.append((line_no, rec))

    def add_columns(self, rank: int | None, cols: dict[str, list[Any] | None], lines: list[int]) -> None:
        """Steps of one rank from the speed path, as columns (``COLUMNS`` of step_columns), at
        log lines ``lines``; the same rank rule as :meth:`add`."""
        if not self._keep(rank, len(lines)):
            return
        n = len(lines)
        if self.cols is None:
            self.cols = {k: [] for k in COLUMNS}
            self.col_rank = rank
        have = self.cols
        if self.items and all(_fits_columns(rec, rank) and ln < lines[0] for ln, rec in self.items):
            for ln, rec in self.items:  # records of the per-line path before this block: into the columns
                for k in COLUMNS:
                    have[k].append(getattr(rec, k))
                self.col_lines.append(ln)  # type: ignore[arg-type]
            self.items = []
        for k in COLUMNS:
            v = cols.get(k)
            have[k].extend(v if v is not None else [None] * n)
        self.col_lines.extend(lines)

    def _column_records(self) -> list[tuple[float, StepRecord]]:
        if self.cols is None:
            return []
        recs = StepColumns(self.cols, self.col_rank).records()
        self.cols = None
        lines, self.col_lines = self.col_lines, []
        return list(zip(lines, recs, strict=True))

    def result(self) -> Collected:
        out = Collected(rank=None if self.best in (None, _UNPREFIXED) else self.best,
                        ranks_with_steps={r for r in self.ranks if r != _UNPREFIXED},
                        other_rank_steps=self.other, parsed=len(self.items) + len(self.col_lines))
        if self.cols is not None and not self.items:
            st = self.cols["step"]
            if all(map(operator.lt, st, itertools.islice(st, 1, None))):  # no restart: stay columns
                out.steps = StepColumns(self.cols, self.col_rank)  # type: ignore[assignment]
                return out
        if self.cols is not None:
            self.items += self._column_records()
        self.items.sort(key=itemgetter(0))  # finish() records go back to their log line
        steps = out.steps
        for line_no, rec in self.items:
            if steps and rec.step <= steps[-1].step:
                out.restarts.append({"line": None if line_no == _INF else int(line_no),
                                     "from_step": steps[-1].step, "to_step": rec.step})
                while steps and steps[-1].step >= rec.step:
                    steps.pop()
                    out.superseded_steps += 1
                out.segment_starts = [s for s in out.segment_starts if s < len(steps)]
                out.segment_starts.append(len(steps))
            steps.append(rec)
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
    """The per-line path: strip the rank prefix, skip ranks above the kept one, parse, collect."""

    def __init__(self, parser: LogParser, state: ParseState, counts: LineCounts, watch_other_formats: bool) -> None:
        self.parser, self.state, self.counts = parser, state, counts
        self.col = _Collector()
        self.default_rank: int | None = None
        self.total = self.used = self.other = 0
        self.best = _NO_STEPS_YET
        self.last_prefix, self.last_rank = "\x00", None  # a prefix no line starts with
        self.others = _other_markers(parser) if watch_other_formats else []
        self._skips: set[int] = set()
        self.n_other = 0

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
            m = _RANK_RE.match(line)
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
        if rec is not None:
            self.used += 1
            self.col.add(rec, self.total)
            self.best = r
        elif state.used:
            self.used += 1
        elif self.others and self.n_other < MAX_OTHER_FORMAT_LINES:
            for marker, name in self.others:
                if marker in line:
                    self.counts.other_format_lines.setdefault(name, []).append((self.total, rank, line))
                    self.n_other += 1
                    break

    def feed_block(self, batch: list[str], every_line_re: re.Pattern[str]) -> None:
        """A batch of lines through the format's :attr:`~LogParser.block_re`, extended with a
        catch-all alternative so that ``findall`` over the joined batch gives one group tuple per
        line, all in C: any other line (its step group empty) goes through :meth:`feed`. Every
        line is still seen, in order, with its own line number.

        When every canonical step line of the batch has the same rank prefix and the parser has
        :meth:`~LogParser.block_columns`, the step lines between two lines that are not inert
        (:meth:`~LogParser.block_inert`; usually the whole batch) become columns in one call
        (:meth:`_feed_region`, no StepRecord made); else each line becomes a record via
        ``block_record`` (:meth:`_feed_rows`)."""
        rows = every_line_re.findall("\n".join(batch))
        if len(rows) != len(batch):  # cannot happen for newline-free lines; stay exact if it does
            for line in batch:
                self.feed(line)
            return
        steps = [g for g in rows if g[2]]
        if not steps:
            self._feed_rows(rows, batch, 0, len(rows))
            return
        prefixes = set(map(_PREFIX, steps))
        if not self.parser.has_block_columns:
            self._feed_rows(rows, batch, 0, len(rows))
            return
        skips: set[int] = set()
        if len(prefixes) == 1:
            ((g0, g1),) = prefixes
            rank = int(g0) if g0 else int(g1) if g1 else self.default_rank
        else:  # several ranks: fine when all but one are above the kept rank (their lines are skipped)
            ranks = {p: int(p[0]) if p[0] else int(p[1]) if p[1] else self.default_rank for p in prefixes}
            low = [p for p, rk in ranks.items() if (_UNPREFIXED if rk is None else rk) <= self.best]
            if len(low) != 1 or self.best == _NO_STEPS_YET:
                self._feed_rows(rows, batch, 0, len(rows))
                return
            keep = low[0]
            (g0, g1), rank = keep, ranks[keep]
            skips = {i for i, g in enumerate(rows) if g[2] and g[:2] != keep}
        self._skips = skips
        n = len(rows)
        if len(steps) == n and not skips:
            self._feed_region(rows, batch, 0, n, [], rank, g0, self.total)
            return
        gaps = [i for i, g in enumerate(rows) if not g[2]]
        inert = self.parser.block_inert
        base = self.total
        start = 0
        inert_gaps: list[int] = []
        for gap in gaps:
            if inert(batch[gap]):
                inert_gaps.append(gap)
                continue
            # this line may change what the step lines after it give: a region ends before it
            if gap > start:
                self._feed_region(rows, batch, start, gap, inert_gaps, rank, g0, base)
            self.total = base + gap
            self.feed(batch[gap])
            start = gap + 1
            inert_gaps = []
        if start < n:
            self._feed_region(rows, batch, start, n, inert_gaps, rank, g0, base)

    def _feed_region(self, rows: list[tuple[str, ...]], batch: list[str], a: int, b: int, gaps: list[int],
                     rank: int | None, g0: str, base: int) -> None:
        """Rows ``a:b`` of a block (lines ``base + a + 1`` to ``base + b``): canonical step lines of
        rank ``rank`` except rows ``gaps``, lines the parser calls inert (:meth:`LogParser.block_inert`:
        they neither make a step nor change what a step line gives). The step lines become one
        block of columns, the inert lines go through :meth:`feed`: the same outcome as
        :meth:`_feed_rows`, which takes over when the parser declines the block."""
        skips = self._skips
        n_skip = 0
        if len(gaps) == b - a:  # no step line
            idx: list[int] | None = []
        elif gaps or skips:
            gap_set = set(gaps)
            idx = [i for i in range(a, b) if i not in gap_set and i not in skips]
            n_skip = (b - a) - len(gaps) - len(idx)
            self.other += n_skip  # step lines of a rank above the kept one, as _feed_rows counts them
            if not idx:
                idx = []
        else:
            idx = None
        r = _UNPREFIXED if rank is None else rank
        feed = self.feed
        if g0 and idx != []:
            self.last_rank, self.last_prefix = rank, f"{g0}: "
        if idx == []:
            pass
        elif r > self.best:
            self.other += len(idx) if idx is not None else b - a
        else:
            state = self.state
            last = idx[-1] if idx is not None else b - 1
            state.line_no = base + last + 1
            state.rank = rank
            cols = self.parser.block_columns([rows[i] for i in idx] if idx is not None else rows[a:b],
                                             batch[last], state)
            if cols is None:  # a step outside the fast path's range: line by line, as block_record does
                self.total = base + a
                self.other -= n_skip
                self._feed_rows(rows, batch, a, b)
                return
            lines = [base + i + 1 for i in idx] if idx is not None else list(range(base + a + 1, base + b + 1))
            if idx and gaps and gaps[0] < idx[0]:
                # inert lines before the region's first step are judged (kept rank or not) against
                # the rank kept so far, as the per-line path sees them: fed before the steps set it
                for i in [g for g in gaps if g < idx[0]]:
                    self.total = base + i
                    feed(batch[i])
                gaps = [g for g in gaps if g > idx[0]]
            self.used += len(lines)
            self.col.add_columns(rank, cols, lines)
            self.best = r
        for i in gaps:
            self.total = base + i
            feed(batch[i])
        self.total = base + b

    def _feed_rows(self, rows: list[tuple[str, ...]], batch: list[str], a: int, b: int) -> None:
        """Rows ``a:b`` of a block one by one: a canonical step line becomes a record via
        ``block_record``, any other line goes through :meth:`feed`; counters live in locals here
        and are synced around :meth:`feed`."""
        record = self.parser.block_record
        state = self.state
        col = self.col
        feed = self.feed
        total, best, used, other = self.total, self.best, self.used, self.other
        default_rank = self.default_rank
        items = col.items if col.best is not None else None
        for i in range(a, b):
            g = rows[i]
            if not g[2]:  # not a canonical step line
                self.total, self.best, self.used, self.other = total, best, used, other
                feed(batch[i])
                total, best, used, other = self.total, self.best, self.used, self.other
                items = col.items if col.best is not None else None  # feed() may have reset them
                continue
            total += 1
            g1 = g[0]
            if g1:
                rank: int | None = int(g1)
                self.last_rank, self.last_prefix = rank, f"{g1}: "
            elif g[1]:
                rank = int(g[1])
            else:
                rank = default_rank
            r = _UNPREFIXED if rank is None else rank
            if r > best:
                other += 1
                continue
            state.line_no = total
            state.rank = rank
            rec = record(g, batch[i], state)
            if rec is None:  # outside the fast path's range (e.g. an impossible time): the full parser
                self.total, self.best, self.used, self.other = total - 1, best, used, other
                feed(batch[i])
                total, best, used, other = self.total, self.best, self.used, self.other
                items = col.items if col.best is not None else None
                continue
            used += 1
            if r == best and items is not None:
                items.append((total, rec))  # the collector's add(), inlined for the kept rank
            else:
                col.add(rec, total)
                items = col.items
                best = r
        self.total, self.best, self.used, self.other = total, best, used, other


def every_line_regex(block_re: re.Pattern[str]) -> re.Pattern[str]:
    """``block_re`` or a catch-all: ``findall`` then yields one tuple per line of a block, the
    step number (group 3) empty for a line that is not a canonical step line."""
    return re.compile(f"(?:{block_re.pattern})|^[^\\n]*$", re.M)


BLOCK_LINES = 4096


def run_parser(lines: Iterable[str | LogLine | PartialLine], parser: LogParser, state: ParseState,
               counts: LineCounts, *, watch_other_formats: bool = False) -> Collected:
    """Feed every line to ``parser``; never raises on content.

    Once a rank has produced a step, lines of higher ranks are not parsed at all (they would
    only give steps that are dropped): counted in ``counts.other_rank_lines``. Every step line
    of the kept rank is parsed (no sampling). A parser with a ``block_re`` gets its canonical
    step lines matched in blocks of :data:`BLOCK_LINES` lines (see :meth:`_Feeder.feed_block`).
    With ``watch_other_formats``, lines the parser did not use that carry another format's step
    marker are kept (bounded) in ``counts.other_format_lines`` so that a mixed file's other
    streams can be reported.
    """
    f = _Feeder(parser, state, counts, watch_other_formats)
    block_re = parser.block_re
    it = iter(lines)
    if block_re is None:
        feed, marker = f.feed, f.marker
        for item in it:
            if item.__class__ is str:
                feed(item)  # type: ignore[arg-type]
            else:
                marker(item)  # type: ignore[arg-type]
    else:
        every_re = every_line_regex(block_re)
        islice = itertools.islice
        while True:
            batch = list(islice(it, BLOCK_LINES))
            if not batch:
                break
            if set(map(type, batch)) == _ONLY_STR:  # no file or partial-line marker in the batch
                f.feed_block(batch, every_re)  # type: ignore[arg-type]
                continue
            for item in batch:
                if item.__class__ is str:
                    f.feed(item)  # type: ignore[arg-type]
                else:
                    f.marker(item)  # type: ignore[arg-type]
    for rec in parser.finish(state):
        line_no = rec.extra.pop("line", None) if rec.extra else None
        f.col.add(rec, line_no if isinstance(line_no, int) else _INF)
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


def _sample(it: Iterator[str | LogLine], n: int) -> list[str | LogLine]:
    return list(itertools.islice(it, n))


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
    """Which workload facts the log itself states, and which it does not."""
    found = [k for k, keys in _COVERAGE.items() if any(x in values for x in keys)
             or (k == "tokens_per_step" and tokens_per_step)]
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


@dataclass
class ParsedLog:
    """The run record plus the parse bookkeeping the report shows."""

    run: RunRecord
    parser: LogParser
    facts: Any
    counts: LineCounts
    state: ParseState
    format: str = ""


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
    it = iter_log(source, stats)
    sample = _sample(it, SAMPLE_LINES)
    if fmt is not None:
        parser = get_parser(fmt)
        detection = "given with --format"
        scores: dict[str, float] = {}
    else:
        name, scores = detect_format(_texts(sample))
        while name is None and len(sample) < MAX_SAMPLE_LINES:
            more = _sample(it, len(sample))
            if not more:
                break
            sample += more
            name, scores = detect_format(_texts(sample))
        if name is None:
            n = sum(1 for x in sample if isinstance(x, str))
            if n == 0 and not stats.skipped_files:
                raise InputFileError(f"log {str(source)!r} is empty")
            raise InputFileError(f"no known training-log format found in the first {n:,} lines of "
                                 f"{str(source)!r}; give --format (one of {', '.join(scores)})")
        parser = get_parser(name)
        detection = f"auto-detected (score {scores[name]:.3g} on the first {len(sample):,} lines)"
    state = ParseState(hints=hints)
    counts = LineCounts()
    # The cyclic GC would rescan every kept StepRecord again and again as more are allocated
    # (quadratic in the run's length); parsing creates no reference cycles, so pause it.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        col = run_parser(itertools.chain(sample, it), parser, state, counts, watch_other_formats=True)
    finally:
        if gc_was_enabled:
            gc.enable()
    steps = col.steps
    dropped: list[int] = []
    if col.segment_starts:
        keep: list[StepRecord] = []
        bounds = [0, *col.segment_starts, len(steps)]
        for si in range(len(bounds) - 1):
            seg = steps[bounds[si]:bounds[si + 1]]
            if si > 0:
                k = min(len(seg), warmup if warmup is not None else default_warmup_steps(len(seg)))
                dropped += [s.step for s in seg[:k]]
                seg = seg[k:]
            keep += seg
        steps = keep
    tokens = [t for t in steps.column("tokens") if t] if isinstance(steps, StepColumns) \
        else [s.tokens for s in steps if s.tokens]
    if tokens and min(tokens) == max(tokens):  # the common case: no sort of a million equal counts
        tokens_per_step = tokens[0]
    else:
        tokens_per_step = sorted(tokens)[len(tokens) // 2] if tokens else state.facts.get("tokens_per_step")
    res = resolve_workload(state.facts, workload_path, overrides, tokens_per_step, base=base)
    facts = state.facts
    found, not_found = log_field_coverage(facts.values, tokens_per_step)
    flags = flag_impossible(steps, res.workload, facts.values, _device_hint(overrides, base, facts.values))
    streams = other_streams(counts, hints)
    meta: dict[str, Any] = {
        "name": Path(str(source)).name if str(source) != "-" else "stdin",
        "log": str(source),
        "format": parser.name,
        "format_detection": detection,
        "format_scores": {k: round(v, 3) for k, v in scores.items() if v > 0},
        "files": stats.files,
        "skipped_files": stats.skipped_files,
        "lines_total": counts.lines_total,
        "lines_used": counts.lines_used,
        "skipped_lines": counts.lines_total - counts.lines_used - counts.other_rank_lines,
        "other_rank_lines": counts.other_rank_lines,
        "malformed_lines": state.malformed_lines,
        "overlong_lines": stats.overlong_lines,
        "truncated_input": stats.truncated,
        "cut_lines": state.cut_count,
        "cut_line_examples": [{"line": n, "text": t} for n, t in state.cut_lines],
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
        "fields_in_log": found,
        "fields_not_in_log": not_found,
        "log_facts": {k: v for k, v in facts.values.items() if k not in ("workload", "gqa")},
        "log_fact_lines": {k: v for k, v in facts.where.items() if k != "workload"},
        "fact_conflicts": facts.conflicts,
        "workload_fields": res.fields,
        "workload_missing": res.missing,
        "workload_notes": res.notes,
        "tokens_per_step_in_log": tokens_per_step,
        "claimed_convention": parser.claimed_convention,
        "claimed_scope": parser.claimed_scope,
        "notes": state.notes,
    }
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
    run = RunRecord(source="ingest", steps=steps, workload=res.workload, meta=meta)
    return ParsedLog(run=run, parser=parser, facts=facts, counts=counts, state=state, format=parser.name)
