"""RunRecord and StepRecord: the one data shape for every measured, parsed, published or
predicted training run."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from trainperf.errors import SpecError

SOURCES = ("bench", "ingest", "published", "predicted", "meter")


@dataclass
class StepRecord:
    """One optimizer step as measured (or as a log reported it).

    Values the source did not report are ``None``; ``claimed_*`` fields keep what a log or a
    publication said about itself, so it can be compared with trainperf's recomputation.
    """

    step: int
    """Step index as the source numbered it (a restart may repeat indices)."""
    step_time_s: float
    """Wall seconds of the step (device synchronised before the clock is read, for the bench)."""
    tokens: int | None = None
    """Tokens processed in the step over all ranks; ``None`` if unknown (taken from the workload)."""
    loss: float | None = None
    grad_norm: float | None = None
    memory_GiB: float | None = None
    """Peak memory per device during the step (CUDA max allocated, or CPU RSS high-water)."""
    claimed_tokens_per_s: float | None = None
    """Global tokens/s the source itself reported."""
    claimed_tokens_per_s_per_device: float | None = None
    claimed_tflops_per_device: float | None = None
    claimed_mfu_pct: float | None = None
    breakdown: dict[str, float] | None = None
    """Seconds per component (predictions and profiled runs)."""
    rank: int | None = None
    """Rank that reported the step, when the source is per-rank."""
    flag: str | None = None
    """Why the step is physically impossible (a step time below 1 us or not finite, a rate above
    100% of the named peak), in one line; ``None`` for a normal step. A flagged step is kept in
    the record (and in JSONL, key ``flag``) but left out of the medians and rates. A flagged step
    may carry a non-finite ``step_time_s``; an unflagged one never does."""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.flag is not None and isinstance(self.step_time_s, (int, float)):
            return
        if not isinstance(self.step_time_s, (int, float)) or not math.isfinite(self.step_time_s) \
                or self.step_time_s <= 0:
            raise SpecError("step_time_s", self.step_time_s, "a positive, finite number of seconds")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        return {k: v for k, v in d.items() if v is not None and v != {}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepRecord:
        """A step from a record's line; every field type- and range-checked (:func:`check_step_fields`):
        a line with a field no step can have (``tokens`` of -5, ``true`` or 1e26, a step index of
        27 digits) is one :class:`SpecError`, which readers count as a skipped line."""
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in d.items() if k in names}
        extra = {k: v for k, v in d.items() if k not in names and k != "type"}
        if extra:
            if not isinstance(known.get("extra", {}), dict):
                raise SpecError("extra", known["extra"], "a table")
            known.setdefault("extra", {}).update(extra)
        return cls(**check_step_fields(known))


MAX_STEP_INDEX = (1 << 63) - 1
"""Largest step index (a signed 64-bit integer, what every framework counts steps in)."""
MAX_TOKENS_PER_STEP = 1 << 47
"""Largest token count of one step: trainperf's bounds on global batch (2**20 sequences) times
sequence length (2**27 tokens)."""
_RATE_FIELDS = ("memory_GiB", "claimed_tokens_per_s", "claimed_tokens_per_s_per_device",
                "claimed_tflops_per_device", "claimed_mfu_pct")


def storable_step(step: Any, tokens: Any) -> bool:
    """Whether a step index and token count are ones a step can have: the index within 64 bits,
    the tokens absent or from 0 to :data:`MAX_TOKENS_PER_STEP` (a parser's line with others is
    damaged: it would wrap around in the step columns, or outweigh every other step)."""
    return (isinstance(step, int) and not isinstance(step, bool) and abs(step) <= MAX_STEP_INDEX
            and (tokens is None or (isinstance(tokens, int) and not isinstance(tokens, bool)
                                    and 0 <= tokens <= MAX_TOKENS_PER_STEP)))


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def check_step_fields(f: dict[str, Any]) -> dict[str, Any]:
    """``f`` (a step's fields as read) if each has a type and range a step can have, else one
    :class:`SpecError` naming the field: ``step`` an integer within 64 bits; ``tokens`` absent or
    an integer from 0 to :data:`MAX_TOKENS_PER_STEP` (an integral float is taken as one);
    ``loss``/``grad_norm`` numbers (a diverged run's NaN included); memory and claimed rates
    finite, non-negative numbers; ``breakdown`` a table of numbers; ``rank`` a non-negative
    integer; ``flag`` text. ``step_time_s`` is checked by the record itself."""
    step = f.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or abs(step) > MAX_STEP_INDEX:
        raise SpecError("step", step, "an integer step index within 64 bits")
    if not _number(f.get("step_time_s")):
        raise SpecError("step_time_s", f.get("step_time_s"), "a number of seconds")
    tokens = f.get("tokens")
    if isinstance(tokens, float) and math.isfinite(tokens) and tokens.is_integer():
        f["tokens"] = tokens = int(tokens)
    if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool)
                               or not 0 <= tokens <= MAX_TOKENS_PER_STEP):
        raise SpecError("tokens", tokens, f"an integer from 0 to {MAX_TOKENS_PER_STEP:,} (tokens of one step)")
    for name in ("loss", "grad_norm"):
        if f.get(name) is not None and not _number(f[name]):
            raise SpecError(name, f[name], "a number")
    for name in _RATE_FIELDS:
        x = f.get(name)
        if x is not None and not (_number(x) and math.isfinite(x) and x >= 0):
            raise SpecError(name, x, "a finite number >= 0")
    bd = f.get("breakdown")
    if bd is not None and not (isinstance(bd, dict) and all(isinstance(k, str) and _number(v) for k, v in bd.items())):
        raise SpecError("breakdown", bd, "a table of component -> seconds")
    rank = f.get("rank")
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < 1 << 31):
        raise SpecError("rank", rank, "an integer >= 0")
    if f.get("flag") is not None and not isinstance(f["flag"], str):
        raise SpecError("flag", f["flag"], "text")
    if not isinstance(f.get("extra", {}), dict):
        raise SpecError("extra", f["extra"], "a table")
    return f


@dataclass
class RunRecord:
    """Everything known about one training run.

    ``workload`` is a :class:`trainperf.specs.workload.Workload` when the model, device and
    plan are known, else ``None`` (a parsed log whose device was not given); ``meta`` holds the
    rest: name, source detail, start time, whether it was interrupted, what the source claimed.
    """

    source: str
    """Where the data comes from: bench, ingest, published, predicted or meter."""
    steps: list[StepRecord] = field(default_factory=list)
    """The steps in order: a list, or (a parsed log's, see :mod:`trainperf.records.step_columns`)
    a :class:`~trainperf.records.step_columns.StepColumns` sequence that makes its StepRecords on
    first access: read it as a sequence (``len``, index, slice, iterate), not as a list to append to."""
    workload: Any = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise SpecError("source", self.source, f"one of {', '.join(SOURCES)}")

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or self.source)

    @property
    def interrupted(self) -> bool:
        return bool(self.meta.get("interrupted", False))

    def tokens_per_step(self, step: StepRecord) -> int | None:
        """Tokens in ``step``: the step's own count, else the workload's tokens per step."""
        if step.tokens is not None:
            return step.tokens
        return self.workload.tokens_per_step if self.workload is not None else None
