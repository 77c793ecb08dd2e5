"""Per-step series of one run, on the same basis as its summary.

Each step's rates use that step's own tokens and wall time; TFLOP/s per device and MFU use
the summary's model FLOPs per token (the named convention) and peak, so the curve and the
summary's median agree. A run without a workload keeps what its log claimed (``claimed_*``),
labelled as such.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from trainperf.records.run_record import RunRecord
from trainperf.records.summary import Summary


@dataclass
class RunSeries:
    """Aligned per-step values of one run; ``None`` where a step lacks the value."""

    x: list[int]
    """Step numbers as recorded, or record order when steps repeat (a restarted run)."""
    x_label: str
    warmup_steps: int
    """The first ``warmup_steps`` points are warm-up (excluded from the summary)."""
    step_time_s: list[float]
    tokens_per_s: list[float | None] = field(default_factory=list)
    tflops_per_device: list[float | None] = field(default_factory=list)
    mfu_pct: list[float | None] = field(default_factory=list)
    mfu_label: str = "MFU"
    """What the MFU curve is: recomputed under a convention and peak, or the log's own claim."""
    loss: list[float | None] = field(default_factory=list)
    memory_GiB: list[float | None] = field(default_factory=list)

    @staticmethod
    def has(values: list[float | None]) -> bool:
        return any(v is not None for v in values)


def run_series(run: RunRecord, summary: Summary) -> RunSeries:
    """Per-step series of ``run``; ``summary`` supplies warm-up, FLOPs per token and peak."""
    steps = run.steps
    nums = [s.step for s in steps]
    monotonic = all(b > a for a, b in itertools.pairwise(nums))
    x = nums if monotonic else list(range(1, len(steps) + 1))
    x_label = "step" if monotonic else "step (record order; the run restarted)"
    n_dev = summary.num_devices
    fpt = summary.model_flops_per_token
    peak = summary.peak_tflops
    tps: list[float | None] = []
    tflops: list[float | None] = []
    mfu: list[float | None] = []
    for s in steps:
        tok = run.tokens_per_step(s)
        rate = tok / s.step_time_s if tok else s.claimed_tokens_per_s
        tps.append(rate)
        if rate is not None and fpt and n_dev:
            tf = fpt * rate / n_dev / 1e12
            tflops.append(tf)
            mfu.append(100.0 * tf / peak if peak else None)
        else:
            tflops.append(s.claimed_tflops_per_device)
            mfu.append(None)
    label = f"MFU ({summary.convention})"
    if not any(v is not None for v in mfu) and any(s.claimed_mfu_pct is not None for s in steps):
        mfu = [s.claimed_mfu_pct for s in steps]
        label = "MFU (as the log claimed)"
    return RunSeries(
        x=x, x_label=x_label, warmup_steps=summary.warmup_steps,
        step_time_s=[s.step_time_s for s in steps], tokens_per_s=tps, tflops_per_device=tflops,
        mfu_pct=mfu, mfu_label=label, loss=[s.loss for s in steps],
        memory_GiB=[s.memory_GiB for s in steps],
    )


def warmup_text(s: RunSeries) -> str:
    """The warm-up as a person reads it: ``step 1``, ``steps 1-2``, or for a log that records
    every N-th step ``2 logged steps (steps 1-10)``: a record stands for the steps since the one
    before it."""
    k = min(s.warmup_steps, len(s.x))
    if k <= 0:
        return "none"
    first, last = s.x[0], s.x[k - 1]
    if k == 1 and first == 1:
        return f"step {first}"
    if last - first + 1 == k:
        return f"steps {first}–{last}"
    return f"{k} logged step{'s' if k != 1 else ''} (steps {first}–{last})"
