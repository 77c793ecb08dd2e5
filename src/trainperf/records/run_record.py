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
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in d.items() if k in names}
        extra = {k: v for k, v in d.items() if k not in names and k != "type"}
        if extra:
            known.setdefault("extra", {}).update(extra)
        return cls(**known)


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
