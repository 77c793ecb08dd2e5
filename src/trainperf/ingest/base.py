"""The parser interface every log format implements, and the per-parse state it writes to.

A parser turns one line at a time into at most one :class:`~trainperf.records.StepRecord`
(``parse_line``) and records run-level facts the log states (device count, batch, sequence
length, what the framework claimed for the whole run) in :class:`LogFacts`. Parsers never
raise on content: a line they cannot use returns ``None`` and, if it looked like a step line
but did not parse (truncated, garbled), is counted in ``state.malformed_lines``.

A step is a complete line: every number a step is made of must be followed by its delimiter
(``" |"`` in Megatron, ``","`` after MaxText's seconds, ``"ms"`` in nanoGPT, ``"it/s]"`` in a
tqdm bar, ...). A line cut mid-number, as when a job is killed mid-write, is counted with
:meth:`ParseState.cut` and named in the parse summary. Where a format's last field may end the
line, the end of the line counts as its delimiter unless the line is the file's last and has
no newline (``state.partial``). A physically impossible step time (below 1 us, not finite) still
gives a record, flagged (:func:`make_step`); the pipeline adds the rate check (:mod:`.flags`).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from trainperf.accounting.plausibility import check_step_time
from trainperf.ingest.templates import BlockField
from trainperf.records.run_record import StepRecord

if TYPE_CHECKING:
    import numpy as np

# Keys a parser may put in LogFacts that map onto workload-file fields.
WORKLOAD_FACTS: dict[str, str] = {
    "num_devices": "hardware.num_devices",
    "seq_len": "training.seq_len",
    "global_batch": "training.global_batch",
    "micro_batch": "training.micro_batch",
    "precision": "training.precision",
    "device": "hardware.device",
    "model": "model.preset",
    "tp": "parallel.tp",
    "pp": "parallel.pp",
    "cp": "parallel.cp",
    "ep": "parallel.ep",
    "fsdp": "parallel.fsdp",
    "dp": "parallel.dp",
    "sp": "parallel.sequence_parallel",
    "vpp": "parallel.vpp",
    "zero_stage": "parallel.zero_stage",
    "etp": "parallel.etp",
    "layers": "model.layers",
    "hidden": "model.hidden",
    "heads": "model.heads",
    "kv_heads": "model.kv_heads",
    "ffn_hidden": "model.ffn_hidden",
    "vocab": "model.vocab",
    "activation_checkpointing": "training.activation_checkpointing",
    "stack": "training.stack",
}


MEMORY_PEAK = "memory_peak_GiB"
"""The log-level fact of the largest peak of allocated device memory a log reports outside its
step lines (Megatron's ``report_memory``), over every rank that printed one."""
MEMORY_RESERVED_PEAK = "memory_reserved_peak_GiB"
"""The same for the allocator's reserved memory."""

QUOTE_CHARS = 100
"""The longest quote of a log line in a fact's origin."""


_LOG_PREFIX = re.compile(r"^.{0,120}?\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\b(?: -|:)\s+")
"""Python logging's prefix (``[titan] 2024-03-17 10:00:00,800 - root - INFO - ``), left out of a
quote so that the message shows."""


def quote(line: str, width: int = QUOTE_CHARS) -> str:
    """``line`` for a fact's origin: the logging prefix dropped, whitespace collapsed, cut at a
    word boundary with an ellipsis when longer than ``width`` (never mid-word)."""
    import textwrap

    text = " ".join(_LOG_PREFIX.sub("", line.strip(), count=1).split())
    if len(text) <= width:
        return text
    short = textwrap.shorten(text, width=width, placeholder=" …")
    return short if short != " …".strip() else text[: width - 1] + "…"


@dataclass
class LogFacts:
    """Run-level facts a log states, each with the line it came from.

    ``values`` keys are the workload keys of :data:`WORKLOAD_FACTS` plus free keys such as
    ``tokens_per_step``, ``device_name``, ``claimed_peak_tflops``, ``claimed_train_runtime_s``,
    ``mfu_convention`` (the FLOP convention of this log's own MFU where it is not the format's
    :attr:`LogParser.claimed_convention`).
    The first value seen wins; a later different value is kept in ``conflicts``.
    """

    values: dict[str, Any] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)
    """key -> ``"line N: <excerpt>"``."""
    conflicts: list[str] = field(default_factory=list)

    def set(self, key: str, value: Any, line_no: int, line: str, *, overwrite: bool = False) -> None:
        if value is None:
            return
        old = self.values.get(key)
        if old is not None and not overwrite:
            if old != value and len(self.conflicts) < 20:
                self.conflicts.append(f"{key}: {old!r} ({self.where.get(key)}) vs {value!r} (line {line_no})")
            return
        self.values[key] = value
        self.where[key] = f"line {line_no}: {quote(line)}"

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


MAX_CUT_LINES = 10


@dataclass
class ParseState:
    """Mutable state of one parse. ``scratch`` is private to the parser, one dict per rank."""

    facts: LogFacts = field(default_factory=LogFacts)
    line_no: int = 0
    rank: int | None = None
    used: bool = False
    """Set by a parser when the current line contributed a fact or part of a step."""
    malformed_lines: int = 0
    """Lines that carried a format's step marker but did not parse (cut lines included)."""
    cut_lines: list[tuple[int, str]] = field(default_factory=list)
    """Step lines cut mid-number (the number not followed by its delimiter, as when a job is
    killed mid-write): ``(line number, excerpt)``, the first :data:`MAX_CUT_LINES`."""
    cut_count: int = 0
    partial: bool = False
    """The current line is the last line of a file and has no newline: a number at its very end
    may be cut, so a parser whose step-time field can end a line must not trust it."""
    hints: dict[str, Any] = field(default_factory=dict)
    """Facts the user gave (tokens_per_step, num_devices) that a parser may need to finish a step."""
    notes: list[str] = field(default_factory=list)
    untimed: str = ""
    """Why step lines were left out for want of a step time, and what would time them (a parser
    that can finish steps from facts sets it; ``trainperf parse`` says it when no step is left)."""
    _scratch: dict[int | None, dict[str, Any]] = field(default_factory=dict)

    @property
    def scratch(self) -> dict[str, Any]:
        s = self._scratch.get(self.rank)
        if s is None:
            s = self._scratch[self.rank] = {}
        return s

    def all_scratch(self) -> dict[int | None, dict[str, Any]]:
        return self._scratch

    def fact(self, key: str, value: Any, line: str, *, overwrite: bool = False) -> None:
        self.facts.set(key, value, self.line_no, line, overwrite=overwrite)
        self.used = True

    def count_fact(self, key: str, text: str, line: str) -> int | None:
        """Record ``text`` as fact ``key`` when it reads as a positive integer (a size, a degree, a
        count); the integer, or ``None`` when it does not."""
        v = to_int(text)
        if v is None or v <= 0:
            return None
        self.fact(key, v, line)
        return v

    def peak_memory(self, key: str, GiB: float | None, line: str) -> None:
        """Keep the largest of the run-level memory peaks a log prints outside its step lines
        (``key``: :data:`MEMORY_PEAK` or :data:`MEMORY_RESERVED_PEAK`, in GiB), with the line it
        came from: the busiest rank's peak is the one that must fit."""
        if GiB is None or not math.isfinite(GiB) or GiB <= 0:
            return
        old = self.facts.values.get(key)
        if old is None or GiB > old:
            self.facts.set(key, GiB, self.line_no, line, overwrite=True)
        self.used = True

    def cut(self, line: str) -> None:
        """Count the current line as a step line cut mid-number (malformed) and remember it."""
        self.malformed_lines += 1
        self.cut_count += 1
        if len(self.cut_lines) < MAX_CUT_LINES:
            self.cut_lines.append((self.line_no, line.strip()[-80:]))

    def note(self, msg: str) -> None:
        if len(self.notes) < 50 and msg not in self.notes:
            self.notes.append(msg)


class LogParser:
    """Base class of the format parsers (one module per format, registered in :mod:`.registry`).

    Subclasses set ``name``, ``description``, ``markers`` (substrings of which a step or fact
    line contains at least one: the cheap pre-filter run before any regex) and implement
    :meth:`parse_line`; block formats also implement :meth:`finish`.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    markers: ClassVar[tuple[str, ...]] = ()
    step_marker: ClassVar[str | None] = None
    """A substring every step line of the format contains: lets the pipeline notice another
    format's step lines in a mixed file (see pipeline)."""
    block_re: ClassVar[re.Pattern[str] | None] = None
    """Optional speed path: a regex matching one whole step line in the format's canonical layout
    (every number followed by its delimiter), with a launcher rank prefix in group 1 (``srun
    --label`` ``3: ``) or group 2 (``[rank3]:``, ``[default3]:``): see :data:`RANK_PREFIX`. It must
    treat every ASCII digit alike (no literal digit, no back-reference; classes hold all digits or
    none), as :mod:`~trainperf.ingest.templates` reads lines by their shape. The groups named in
    :attr:`block_fields` are read as arrays and handed to :meth:`block_arrays`; lines it does not
    match go through :meth:`parse_line` as usual."""
    block_fields: ClassVar[tuple[BlockField, ...]] = ()
    """The values of a :attr:`block_re` line: name, group, kind (see :class:`~.templates.BlockField`)."""
    claimed_convention: ClassVar[str | None] = None
    """FLOP convention the framework's own TFLOP/s and MFU use, when documented."""
    claimed_scope: ClassVar[str] = ""
    """Whether the framework's tokens/s figure is per device or global, in words."""
    stack: ClassVar[str | None] = None
    """The software-stack profile (:mod:`trainperf.predict.stacks`) a log of this format comes
    from, when the format says which (a torchtitan log is torchtitan's); ``None``: not known."""

    def parse_line(self, line: str, state: ParseState) -> StepRecord | None:  # pragma: no cover
        raise NotImplementedError

    def block_valid(self, vals: dict[str, np.ndarray]) -> np.ndarray | None:
        """Which lines of :attr:`block_re` values ``vals`` (field -> array, one element per line)
        the speed path may take (a bool array; ``None``: all). The others go through
        :meth:`parse_line` (e.g. a step time outside the plausible range, which that flags)."""
        return None

    def block_arrays(self, vals: dict[str, np.ndarray], last_line: str, state: ParseState
                     ) -> dict[str, np.ndarray | None] | None:
        """The steps of consecutive valid :attr:`block_re` lines of one rank (values ``vals``;
        ``last_line`` is the last one's text after its rank prefix, ``state.line_no`` its number)
        as columns: a field of :data:`~trainperf.records.step_columns.COLUMNS` -> an array in
        that module's layout, ``None`` for a field ``None`` on every line. Exactly what
        :meth:`parse_line` gives line by line, with the same effect on the parser's state; or
        ``None`` (nothing changed) to send these lines to :meth:`parse_line`."""
        return None

    def block_inert(self, line: str) -> bool:
        """Whether :meth:`parse_line` on ``line`` (a line that is not a template's) can neither give
        a step nor change what :meth:`block_arrays` gives for the step lines around it, so that
        the pipeline may read those in one call and feed ``line`` after them (its facts and
        counts are the same in either order)."""
        return False

    def finish(self, state: ParseState) -> list[StepRecord]:
        """Records still pending at the end of the stream (block formats)."""
        return []

    def detect(self, sample_lines: list[str]) -> float:
        """Confidence (0 = no) that ``sample_lines`` come from this format: step lines that parse
        count 1 each, fact lines 0.05 each."""
        state = ParseState()
        score = 0.0
        for i, line in enumerate(sample_lines, 1):
            state.line_no = i
            state.used = False
            try:
                rec = self.parse_line(line, state)
            except Exception:  # detection must never fail; a raising parser simply scores less
                continue
            if rec is not None:
                score += 1.0
            elif state.used:
                score += 0.05
        try:
            score += len(self.finish(state))
        except Exception:  # same as above: a raising parser scores less, detection goes on
            score += 0.0
        return score


# --- helpers shared by the parsers ---------------------------------------------------------------

_NUM = r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


def json_object(text: str, state: ParseState) -> dict[str, Any] | None:
    """The JSON object on a line, or None; invalid JSON is counted as a malformed line."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        state.malformed_lines += 1
        return None
    return obj if isinstance(obj, dict) else None


def to_float(text: str | None) -> float | None:
    """A finite float from ``text`` (thousands separators allowed), else ``None``."""
    if text is None:
        return None
    try:
        v = float(text.replace(",", "")) if "," in text else float(text)
    except (ValueError, TypeError):
        return None
    return v if math.isfinite(v) else None


def to_int(text: str | None) -> int | None:
    v = to_float(text)
    if v is None or v != v or abs(v) > 1e18 or v != int(v):
        return None
    return int(v)


def positive(v: float | None) -> float | None:
    return v if v is not None and v > 0 else None


def to_time(text: str | None) -> float | None:
    """A float from ``text`` that may be ``nan`` or ``inf`` (a step time is kept, flagged), else None."""
    if text is None:
        return None
    try:
        return float(text.replace(",", "")) if "," in text else float(text)
    except (ValueError, TypeError):
        return None


MAX_STEP_TIME_S = 1e7
"""About 116 days: no optimizer step takes longer; a longer one is a unit or parsing error."""


def step_flag(step_time_s: float) -> str | None:
    """Why ``step_time_s`` is physically impossible (below 1 us, not finite, above
    :data:`MAX_STEP_TIME_S`), or None."""
    if 1e-6 <= step_time_s <= MAX_STEP_TIME_S:
        return None
    return check_step_time(step_time_s) or (
        f"step_time_s={step_time_s:.3g} s is above {MAX_STEP_TIME_S:g} s: impossible for a training step")


def make_step(step: int | None, step_time_s: float | None, state: ParseState, **fields: Any) -> StepRecord | None:
    """A StepRecord if ``step`` and a positive ``step_time_s`` are known; else count the line as
    malformed and return ``None``. An impossible step time (below 1 us, not finite, absurdly long)
    gives a record with :attr:`StepRecord.flag` set: kept, but left out of the medians."""
    if step is None or step_time_s is None or step < 0 or step_time_s <= 0:
        state.malformed_lines += 1
        return None
    clean = {k: v for k, v in fields.items() if v is not None}
    flag = step_flag(step_time_s)
    if flag is not None:
        clean["flag"] = flag
    return StepRecord(step=step, step_time_s=step_time_s, rank=state.rank, **clean)


RANK_PREFIX = r"^(?:(\d{1,5}): |[ \t]*\[(?:rank|default)?(\d+)\]:)?"
"""Start of a :attr:`LogParser.block_re`: the optional launcher rank prefix (groups 1 and 2)."""

_GPU_LISTING = re.compile(
    r"^\s*(?:\[\d+\]\s+((?:NVIDIA|AMD|Tesla)[^|]*?)\s*\|\s*\d+\s*°?C"  # gpustat: [0] NVIDIA B200 | 67°C, ...
    r"|\|\s+\d+\s+((?:NVIDIA|Tesla)\s[^|]*?)\s+(?:On|Off)\s+\|)")  # nvidia-smi: |   0  NVIDIA H100 80GB HBM3   On  |


def listed_gpu_name(line: str) -> str | None:
    """The GPU name of a line of a device listing a job printed (gpustat's ``[0] NVIDIA B200 |
    67°C, 100 % | ...``, nvidia-smi's ``|   0  NVIDIA H100 80GB HBM3   On  | ...``), else ``None``.
    It names the node's devices, not how many the job used."""
    if "NVIDIA" not in line and "AMD" not in line and "Tesla" not in line:
        return None
    m = _GPU_LISTING.match(line)
    return (m.group(1) or m.group(2)).strip() if m else None


_DS_MAX_MEM = re.compile(r"\bMaxMemAllocated=(\d+(?:\.\d+)?)GB\b")


def deepspeed_max_memory_GiB(line: str) -> float | None:
    """The peak allocated memory a DeepSpeed throughput line reports (``[Rank 0]
    epoch=0/micro_step=20/global_step=10, RunningAvgSamplesPerSec=..., MemAllocated=14.4GB,
    MaxMemAllocated=29.46GB``: ``torch.cuda.max_memory_allocated() / 1024**3``, GiB), else ``None``."""
    if "MaxMemAllocated=" not in line:
        return None
    m = _DS_MAX_MEM.search(line)
    return float(m.group(1)) if m else None


def strip_ansi(line: str) -> str:
    return _ANSI_RE.sub("", line) if "\x1b" in line else line


_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
