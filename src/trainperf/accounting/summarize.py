"""Summarize a RunRecord: warm-up excluded by a stated rule, steady-state step-time statistics,
and throughput / MFU / HFU under a named convention and peak."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from trainperf.accounting.conventions import DEFAULT_CONVENTION
from trainperf.accounting.throughput import DEFAULT_TRAIN_TOKENS, throughput
from trainperf.errors import SpecError, TrainperfError
from trainperf.records.run_record import RunRecord, StepRecord
from trainperf.records.step_columns import StepColumns
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
    k, rule = _warmup(len(steps), warmup)
    return [s for s in steps[k:] if s.flag is None], k, rule


def _warmup(n_steps: int, warmup: int | None) -> tuple[int, str]:
    if warmup is None:
        return default_warmup_steps(n_steps), WARMUP_RULE
    if warmup < 0:
        raise SpecError("warmup", warmup, "an integer >= 0")
    return min(warmup, max(0, n_steps - 1)), f"first {warmup} steps (given)"


def steady_columns(run: RunRecord, warmup: int | None = None) -> tuple[dict[str, list[Any]], int, str] | None:
    """What :func:`steady_steps` gives, as columns (field name -> the non-``None`` values of the
    steps that count: a numpy array, or a list), read without making a StepRecord; ``None``
    unless ``run.steps`` is a lazy :class:`~trainperf.records.step_columns.StepColumns`."""
    steps = run.steps
    if not isinstance(steps, StepColumns) or not steps.lazy:
        return None
    k, rule = _warmup(len(steps), warmup)
    return _SteadyColumns(steps, k), k, rule


class _SteadyColumns(dict[str, Any]):
    """Columns of the steps after the warm-up, each sliced when first asked for."""

    def __init__(self, steps: StepColumns, k: int) -> None:
        super().__init__()
        self.steps, self.k = steps, k

    def __missing__(self, name: str) -> Any:
        col = self.steps.values(name, self.k, unflagged=True)
        self[name] = col
        return col

    def nones(self, name: str) -> int:
        """How many steps that count have field ``name`` ``None``."""
        return self.steps.count_none(name, self.k, unflagged=True)


def _median_or_none(values: Any) -> float | None:
    if not isinstance(values, list):  # an array of a StepColumns: no None in it
        return _float_median(values) if len(values) >= _BIG else (
            statistics.median(values.tolist()) if len(values) else None)
    vals = [v for v in values if v is not None]
    if len(vals) >= _BIG:
        return _float_median(vals)
    vals = [float(v) for v in vals]
    return statistics.median(vals) if vals else None


_BIG = 4096
"""From this many values, medians and percentiles come from a partial sort (numpy's partition,
linear time) instead of a full sort: the same order statistics, so the same figures."""


def _order_stats(values: list[Any], ks: list[int]) -> dict[int, float]:
    """The ``k``-th smallest of ``values`` (as floats) for each ``k`` in ``ks``: what
    ``sorted(map(float, values))[k]`` gives, without the full sort."""
    import numpy as np

    ks = sorted(set(ks))
    part = np.array(values, dtype=float)  # one copy, partitioned in place
    part.partition(ks)
    return {k: float(part[k]) for k in ks}


def _float_median(values: list[Any]) -> float:
    """``statistics.median`` of ``values`` as floats (non-empty, no NaN), by order statistics."""
    n = len(values)
    i = n // 2
    if n % 2:
        return _order_stats(values, [i])[i]
    o = _order_stats(values, [i - 1, i])
    return (o[i - 1] + o[i]) / 2


def _time_stats(times: list[float]) -> tuple[float, float, float]:
    """Median, p10 and p90 of ``times`` (non-empty, finite): ``statistics.median`` and
    :func:`percentile`, by order statistics when there are many."""
    n = len(times)
    if n < _BIG:
        xs = sorted(times)
        return statistics.median(xs), percentile(xs, 10), percentile(xs, 90)
    i = n // 2
    ks = [i - 1, i] if n % 2 == 0 else [i]
    bounds = {}
    for q in (10, 90):
        pos = (n - 1) * q / 100.0
        bounds[q] = (pos, math.floor(pos), math.ceil(pos))
        ks += [bounds[q][1], bounds[q][2]]
    o = _order_stats(times, ks)
    med = o[i] if n % 2 else (o[i - 1] + o[i]) / 2
    pct = {q: o[lo] + (o[hi] - o[lo]) * (pos - lo) for q, (pos, lo, hi) in bounds.items()}
    return med, pct[10], pct[90]


def _tokens_median(own: Any, default: int, n_default: int, fallback: Any) -> Any:
    """``statistics.median`` of the non-zero counts among ``own`` (the steps' own counts) and
    ``n_default`` copies of ``default`` (the steps without one), else ``fallback``; on arrays."""
    import numpy as np

    arr = np.asarray(own, dtype=object if isinstance(own, list) else np.int64)
    nonzero = arr != 0
    if not nonzero.all():
        arr = arr[nonzero]
    del nonzero
    if default and n_default:
        arr = np.concatenate([arr, np.full(n_default, default, dtype=arr.dtype)])
    n = len(arr)
    if not n:
        return fallback
    i = n // 2
    if arr.dtype == object:
        xs = sorted(arr.tolist())
        return xs[i] if n % 2 else (xs[i - 1] + xs[i]) / 2
    if arr[0] == arr[-1] and (arr == arr[0]).all():  # the usual case: one batch size throughout
        return int(arr[0])
    part = np.array(arr)  # one copy, partitioned in place
    part.partition([i - 1, i] if n % 2 == 0 else [i])
    return int(part[i]) if n % 2 else (int(part[i - 1]) + int(part[i])) / 2


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
    cols, k, rule = _steady_cols(run, warmup)
    times = cols["step_time_s"]
    if not isinstance(times, list) and len(times) < _BIG:
        times = times.tolist()
    n_steady = len(times)
    med, p10, p90 = _time_stats(times) if n_steady else (None, None, None)
    claimed = _claimed(cols)
    w = run.workload
    rates = _Rates()
    tokens_step: int | None = None
    if w is not None and med is not None:
        # Rates at the median step time, for the tokens a steady step actually carries (a
        # log's real batch may differ from the workload's).
        tokens_step = _steady_tokens_per_step(cols, w)
        rates = _rates(w, tokens_step / med, convention=convention, peak_tflops=peak_tflops,
                       train_tokens=train_tokens, model_flops_per_seq=model_flops_per_seq)
    return Summary(
        name=run.name, source=run.source, steps_total=len(run.steps), steps_measured=n_steady,
        warmup_steps=k, warmup_rule=rule, step_time_median_s=med,
        step_time_p10_s=p10, step_time_p90_s=p90,
        step_time_mean_s=statistics.fmean(times) if n_steady else None,
        tokens_per_step=tokens_step,
        tokens_per_s=rates.tokens_per_s, tokens_per_s_per_device=rates.tokens_per_s_per_device,
        tflops_per_device=rates.tflops_per_device, mfu_pct=rates.mfu_pct,
        hfu_pct=rates.hfu_pct, convention=convention,
        model_flops_per_token=rates.model_flops_per_token, peak_tflops=rates.peak_tflops,
        peak_source=rates.peak_source, precision=w.precision if w is not None else None,
        num_devices=w.num_devices if w is not None else None, interrupted=run.interrupted,
        train_tokens=train_tokens, days_to_train=rates.days_to_train,
        loss_last=_loss_last(run), memory_max_GiB=_memory_max(run),
        claimed=claimed,
    )


_EAGER_FIELDS = ("step_time_s", "claimed_tokens_per_s", "claimed_tokens_per_s_per_device",
                 "claimed_tflops_per_device", "claimed_mfu_pct", "tokens")


def _steady_cols(run: RunRecord, warmup: int | None) -> tuple[dict[str, Any], int, str]:
    """The steps that count as columns (lazy when the run's steps are, else read from the
    StepRecords), the number excluded as warm-up, and the rule used."""
    lazy = steady_columns(run, warmup)
    if lazy is not None:
        return lazy
    steady, k, rule = steady_steps(run, warmup)
    return {f: [getattr(s, f) for s in steady] for f in _EAGER_FIELDS}, k, rule


def _claimed(cols: dict[str, Any]) -> dict[str, float]:
    """The medians of the rates the run itself claims, leaving out those it never states."""
    claimed = {
        "tokens_per_s": _median_or_none(cols["claimed_tokens_per_s"]),
        "tokens_per_s_per_device": _median_or_none(cols["claimed_tokens_per_s_per_device"]),
        "tflops_per_device": _median_or_none(cols["claimed_tflops_per_device"]),
        "mfu_pct": _median_or_none(cols["claimed_mfu_pct"]),
    }
    return {k: v for k, v in claimed.items() if v is not None}


def _steady_tokens_per_step(cols: dict[str, Any], w: Any) -> int:
    """Median tokens of a steady step: each step's own non-zero count, else the workload's (what
    ``run.tokens_per_step`` gives); the workload's when no step has any."""
    fallback = w.tokens_per_step
    if isinstance(cols, _SteadyColumns):
        tok = _tokens_median(cols["tokens"], w.tokens_per_step, cols.nones("tokens"), fallback)
    else:
        step_tokens = cols["tokens"]
        if None in step_tokens:
            step_tokens = [w.tokens_per_step if t is None else t for t in step_tokens]
        tok = statistics.median([t for t in step_tokens if t]) if any(step_tokens) else fallback
    return int(tok)


@dataclass(frozen=True)
class _Rates:
    """The rates of a summary; ``None`` where they could not be given."""

    tokens_per_s: float | None = None
    tokens_per_s_per_device: float | None = None
    tflops_per_device: float | None = None
    mfu_pct: float | None = None
    hfu_pct: float | None = None
    model_flops_per_token: float | None = None
    peak_tflops: float | None = None
    peak_source: str | None = None
    days_to_train: float | None = None


def _rates(w: Any, tokens_per_s: float, *, convention: str, peak_tflops: float | None,
           train_tokens: float, model_flops_per_seq: float | None) -> _Rates:
    """Rates at ``tokens_per_s`` (a steady step's tokens / the median step time); without a
    peak, only the token rates and the time to train, and why MFU is missing."""
    try:
        tp = throughput(w, tokens_per_s=tokens_per_s, convention=convention, peak_tflops=peak_tflops,
                        train_tokens=train_tokens, model_flops_per_seq=model_flops_per_seq)
    except TrainperfError as e:
        # No peak (e.g. uncalibrated CPU): throughput still stands, MFU is left out and says why.
        return _Rates(tokens_per_s=tokens_per_s, tokens_per_s_per_device=tokens_per_s / w.num_devices,
                      peak_source=f"no peak: {e}", days_to_train=train_tokens / tokens_per_s / 86400.0)
    return _Rates(tokens_per_s=tp.tokens_per_s, tokens_per_s_per_device=tp.tokens_per_s_per_device,
                  tflops_per_device=tp.tflops_per_device, mfu_pct=tp.mfu_pct, hfu_pct=tp.hfu_pct,
                  model_flops_per_token=tp.model_flops_per_token, peak_tflops=tp.peak_tflops,
                  peak_source=tp.peak_source, days_to_train=tp.days_to_train)


def _loss_last(run: RunRecord) -> float | None:
    steps = run.steps
    if isinstance(steps, StepColumns) and steps.lazy:
        vals = steps.values("loss")
        return float(vals[-1]) if len(vals) else None
    return next((s.loss for s in reversed(steps) if s.loss is not None), None)


def _memory_max(run: RunRecord) -> float | None:
    """The largest memory a step reports, else the run-level peak a parsed log prints apart from
    its steps (Megatron's ``report_memory``: ``memory_peak_GiB`` among the record's log facts)."""
    steps = run.steps
    if isinstance(steps, StepColumns) and steps.lazy:
        vals = steps.values("memory_GiB")
        if len(vals):
            return float(max(vals))
    else:
        peak = max((s.memory_GiB for s in steps if s.memory_GiB is not None), default=None)
        if peak is not None:
            return peak
    logged = run.meta.get("log_facts", {}).get("memory_peak_GiB")
    return float(logged) if isinstance(logged, int | float) else None
