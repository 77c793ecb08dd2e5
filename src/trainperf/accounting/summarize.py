"""Summarize a RunRecord: warm-up excluded by a stated rule, steady-state step-time statistics,
and throughput / MFU / HFU under a named convention and peak."""

from __future__ import annotations

import math
import statistics
from typing import Any

from trainperf.accounting.conventions import DEFAULT_CONVENTION
from trainperf.accounting.throughput import DEFAULT_TRAIN_TOKENS, throughput
from trainperf.errors import SpecError, TrainperfError
from trainperf.records.run_record import RunRecord, StepRecord
from trainperf.records.summary import Summary

WARMUP_RULE = "first 10% of steps (at least 1 when there are 2 or more, at most 10)"


def default_warmup_steps(n_steps: int) -> int:
    """Steps excluded as warm-up when none is given: see :data:`WARMUP_RULE`."""
    if n_steps < 2:
        return 0
    return min(10, max(1, math.ceil(0.1 * n_steps)))


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100), the numpy default method."""
    if not values:
        raise ValueError("percentile of nothing")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def steady_steps(run: RunRecord, warmup: int | None = None) -> tuple[list[StepRecord], int, str]:
    """Steps that count, the number excluded as warm-up, and the rule used. Flagged steps
    (:attr:`StepRecord.flag`: physically impossible) never count."""
    steps = run.steps
    if warmup is None:
        k, rule = default_warmup_steps(len(steps)), WARMUP_RULE
    else:
        if warmup < 0:
            raise SpecError("warmup", warmup, "an integer >= 0")
        k, rule = min(warmup, max(0, len(steps) - 1)), f"first {warmup} steps (given)"
    return [s for s in steps[k:] if s.flag is None], k, rule


def _median_or_none(values: list[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return statistics.median(vals) if vals else None


def summarize(
    run: RunRecord,
    *,
    convention: str = DEFAULT_CONVENTION,
    peak_tflops: float | None = None,
    warmup: int | None = None,
    train_tokens: float = DEFAULT_TRAIN_TOKENS,
    model_flops_per_seq: float | None = None,
) -> Summary:
    """Steady-state summary of ``run``. Rates need the workload (tokens per step, devices, model);
    without it only step-time statistics and the run's own claims are given."""
    steady, k, rule = steady_steps(run, warmup)
    times = [s.step_time_s for s in steady]
    med = statistics.median(times) if times else None
    claimed = {
        "tokens_per_s": _median_or_none([s.claimed_tokens_per_s for s in steady]),
        "tokens_per_s_per_device": _median_or_none([s.claimed_tokens_per_s_per_device for s in steady]),
        "tflops_per_device": _median_or_none([s.claimed_tflops_per_device for s in steady]),
        "mfu_pct": _median_or_none([s.claimed_mfu_pct for s in steady]),
    }
    claimed = {k2: v for k2, v in claimed.items() if v is not None}
    w = run.workload
    rates: dict[str, Any] = {}
    tokens_step = None
    if w is not None and med is not None:
        tokens_step = w.tokens_per_step
        step_tokens = [run.tokens_per_step(s) for s in steady]
        tok = statistics.median([t for t in step_tokens if t]) if any(step_tokens) else tokens_step
        tokens_step = int(tok)
        try:
            # Rates at the median step time, for the tokens a steady step actually carries (a
            # log's real batch may differ from the workload's).
            tp = throughput(w, tokens_per_s=tokens_step / med, convention=convention, peak_tflops=peak_tflops,
                            train_tokens=train_tokens, model_flops_per_seq=model_flops_per_seq)
            rates = dict(tokens_per_s=tp.tokens_per_s, tokens_per_s_per_device=tp.tokens_per_s_per_device,
                         tflops_per_device=tp.tflops_per_device, mfu_pct=tp.mfu_pct, hfu_pct=tp.hfu_pct,
                         model_flops_per_token=tp.model_flops_per_token, peak_tflops=tp.peak_tflops,
                         peak_source=tp.peak_source, days_to_train=tp.days_to_train)
        except TrainperfError as e:
            # No peak (e.g. uncalibrated CPU): throughput still stands, MFU is left out and says why.
            tps = tokens_step / med
            rates = dict(tokens_per_s=tps, tokens_per_s_per_device=tps / w.num_devices,
                         peak_source=f"no peak: {e}", days_to_train=train_tokens / tps / 86400.0)
    return Summary(
        name=run.name, source=run.source, steps_total=len(run.steps), steps_measured=len(steady),
        warmup_steps=k, warmup_rule=rule, step_time_median_s=med,
        step_time_p10_s=percentile(times, 10) if times else None,
        step_time_p90_s=percentile(times, 90) if times else None,
        step_time_mean_s=statistics.fmean(times) if times else None,
        tokens_per_step=tokens_step,
        tokens_per_s=rates.get("tokens_per_s"), tokens_per_s_per_device=rates.get("tokens_per_s_per_device"),
        tflops_per_device=rates.get("tflops_per_device"), mfu_pct=rates.get("mfu_pct"),
        hfu_pct=rates.get("hfu_pct"), convention=convention,
        model_flops_per_token=rates.get("model_flops_per_token"), peak_tflops=rates.get("peak_tflops"),
        peak_source=rates.get("peak_source"), precision=w.precision if w is not None else None,
        num_devices=w.num_devices if w is not None else None, interrupted=run.interrupted,
        train_tokens=train_tokens, days_to_train=rates.get("days_to_train"),
        loss_last=next((s.loss for s in reversed(run.steps) if s.loss is not None), None),
        memory_max_GiB=max((s.memory_GiB for s in run.steps if s.memory_GiB is not None), default=None),
        claimed=claimed,
    )
