"""Flag the parsed steps that are physically impossible: kept in the record, left out of the medians.

A parser already flags a step time below 1 us, not finite or absurdly long
(:func:`trainperf.ingest.base.step_flag`). Once the workload is resolved this module adds the
rate check: a step whose TFLOP/s per device is above 100% of the named peak cannot have
happened. The peak is the workload's (device and dtype, or ``--peak-tflops``); without a
device, the log's own stated peak; without either, the highest dense peak of any device in the
catalog (any dtype), so that e.g. a 0.002 s MaxText step claiming 917,442 TFLOP/s per device is
flagged even when the device is unknown. The TFLOP/s checked are the log's own claim and, when
the workload is known, trainperf's recomputation under the convention counting the fewest FLOPs
(so no convention choice can make a possible step look impossible).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainperf.records.run_record import StepRecord
from trainperf.records.step_columns import StepColumns

MAX_REASONS = 5


@dataclass
class FlagReport:
    """How many steps are flagged and why (the first :data:`MAX_REASONS` distinct reasons)."""

    count: int = 0
    reasons: list[str] = field(default_factory=list)
    peak_tflops: float | None = None
    peak_source: str = ""

    def add(self, step: StepRecord, reason: str) -> None:
        if step.flag is None:
            step.flag = reason
        self.count += 1
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append(f"step {step.step}: {step.flag}")


def named_peak(workload: Any, log_facts: dict[str, Any], device: dict[str, Any] | None = None
               ) -> tuple[float | None, str]:
    """The peak TFLOP/s per device to judge against, and where it comes from.

    ``device`` holds what is known without a full workload: ``peak_tflops`` (``--peak-tflops``),
    ``id`` (a catalog id from a flag, a workload file or the log's device name) and
    ``precision``; a device without a known precision is judged against its highest peak."""
    d = device or {}
    if isinstance(d.get("peak_tflops"), int | float) and d["peak_tflops"] > 0:
        return float(d["peak_tflops"]), "given by the user (--peak-tflops)"
    if workload is not None:
        try:
            from trainperf.accounting.throughput import resolve_peak

            p = resolve_peak(workload.hardware, workload.precision)
            return p.tflops, p.source
        except Exception:  # no peak for this dtype/device: fall through to the log's or the catalog's
            pass
    if workload is None and d.get("id"):
        try:
            from trainperf.specs.hardware import get_hardware, normalize_precision

            hw = get_hardware(str(d["id"]))
            prec = normalize_precision(str(d["precision"])) if d.get("precision") else None
            if prec is not None and prec in hw.peak_tflops:
                return hw.peak_tflops[prec], f"{hw.id} {prec} dense peak"
            if hw.peak_tflops:
                dt, v = max(hw.peak_tflops.items(), key=lambda kv: kv[1])
                return v, f"{hw.id} {dt} dense peak, its highest (the dtype is unknown)"
        except Exception:  # unknown device: the log's or the catalog's peak below
            pass
    claimed = log_facts.get("claimed_peak_tflops")
    if isinstance(claimed, int | float) and claimed > 0:
        return float(claimed), "the peak the log itself states"
    try:
        from trainperf.specs.hardware import list_hardware

        best = max(((v, f"{hw.id} {dt}") for hw in list_hardware() for dt, v in hw.peak_tflops.items()),
                   default=None)
    except Exception:  # catalog unreadable: no rate check, the step-time check still holds
        best = None
    if best is None:
        return None, ""
    return best[0], f"the highest dense peak of any device in the catalog ({best[1]}; the device is unknown)"


def _min_flops_per_token(workload: Any) -> float | None:
    from trainperf.accounting.conventions import CONVENTIONS, model_flops_per_token

    counts = []
    for name in CONVENTIONS:
        try:
            counts.append(model_flops_per_token(workload.model, workload.seq_len, name))
        except Exception:  # a convention that does not apply to this model is skipped
            continue
    counts = [c for c in counts if c > 0]
    return min(counts) if counts else None


def _candidates(steps: StepColumns, peak: float | None, fpt: float | None, n: Any, default_tokens: Any) -> list[int]:
    """Indices of the steps of the lazy ``steps`` that :func:`_reason` may flag, found on the
    arrays: a superset (the recomputed rate with a relative margin of 1e-9), in step order."""
    import numpy as np

    from trainperf.records.step_columns import INT_NONE

    m = len(steps)
    cand = np.zeros(m, dtype=bool)
    cand[list(steps.overridden())] = True  # flagged, or a value kept outside the arrays
    mfu = steps.array("claimed_mfu_pct")
    if mfu is not None:
        cand |= mfu > 100.0
    if peak:
        tf = steps.array("claimed_tflops_per_device")
        if tf is not None:
            cand |= tf > peak
        if fpt and n:
            tok = steps.array("tokens")
            dflt = float(default_tokens) if default_tokens else 0.0
            if tok is None:
                toks = np.full(m, dflt)
            else:
                toks = np.where((tok == INT_NONE) | (tok == 0), dflt, tok.astype(np.float64))
            st = steps.array("step_time_s")
            assert st is not None  # every step has a step time
            with np.errstate(all="ignore"):
                ours = fpt * toks / st / n / 1e12
            cand |= ours > peak * (1 - 1e-9)
    return np.flatnonzero(cand).tolist()


def _reason(s: StepRecord, peak: float | None, peak_txt: str, fpt: float | None, n: Any,
            default_tokens: Any) -> str | None:
    """Why step ``s`` is impossible (its own flag first), or ``None``."""
    if s.flag is not None:
        return s.flag
    mfu = s.claimed_mfu_pct
    if mfu is not None and mfu > 100.0:
        return f"the log's own MFU {mfu:.4g}% exceeds 100%: impossible"
    if not peak:
        return None
    tf = s.claimed_tflops_per_device
    if tf is not None and tf > peak:
        return f"the log's {tf:.6g} TFLOP/s per device exceeds the peak {peak_txt}: impossible"
    tokens = s.tokens or default_tokens
    if fpt and n and tokens:
        ours = fpt * tokens / s.step_time_s / n / 1e12
        if ours > peak:
            return (f"{s.step_time_s:.3g} s for {tokens:,} tokens is {ours:.6g} TFLOP/s per device, above "
                    f"the peak {peak_txt} under any FLOP convention: impossible")
    return None


def flag_impossible(steps: list[StepRecord] | StepColumns, workload: Any, log_facts: dict[str, Any],
                    device: dict[str, Any] | None = None) -> FlagReport:
    """Set :attr:`StepRecord.flag` on impossible steps (in place; on a lazy
    :class:`~trainperf.records.step_columns.StepColumns` without making its records) and report
    them (``device``: see :func:`named_peak`)."""
    rep = FlagReport()
    peak, source = named_peak(workload, log_facts, device)
    rep.peak_tflops, rep.peak_source = peak, source
    fpt = n = default_tokens = None
    if workload is not None:
        fpt = _min_flops_per_token(workload)
        n = workload.num_devices
        try:
            default_tokens = workload.tokens_per_step
        except Exception:  # no batch: recompute only steps that carry their own tokens
            default_tokens = None
    peak_txt = f"{peak:.6g} TFLOP/s ({source})" if peak else ""
    if isinstance(steps, StepColumns) and steps.lazy:
        for i in _candidates(steps, peak, fpt, n, default_tokens):
            s = steps.record_at(i)
            reason = _reason(s, peak, peak_txt, fpt, n, default_tokens)
            if reason is not None:
                rep.add(s, reason)
                steps.set_flag(i, reason)
        return rep
    for s in steps:
        reason = _reason(s, peak, peak_txt, fpt, n, default_tokens)
        if reason is not None:
            rep.add(s, reason)
    return rep
