"""Is a measured or computed rate physically possible? One place that says so.

MFU is a fraction of a peak that is, by definition, an upper bound: a figure above 100% means
one of its ingredients is wrong (the step time, the batch/sequence, or the peak itself), never
that the run beat the hardware. Every command that computes MFU (``mfu``, ``bench``, ``parse``,
``compare``, ``report``, the callbacks) asks :func:`check_mfu` before showing a figure, so the
same wording and thresholds hold everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainperf.errors import SpecError

MAX_MFU_PCT = 100.0
"""MFU (or HFU) above this is impossible: the peak is an upper bound by definition."""

MIN_STEP_TIME_S = 1e-6
"""No training step of a real model completes in under a microsecond (a kernel launch alone
takes several); a shorter step is a parsing or unit error."""


@dataclass(frozen=True)
class Plausibility:
    """Verdict on one MFU figure.

    ``ok`` is False when the figure is impossible; ``reason`` is then one line naming the
    figure, the peak and the likely cause, fit to print as a warning or store in a record.
    """

    ok: bool
    mfu_pct: float
    reason: str = ""


def require_finite(field: str, value: float) -> float:
    """``value`` as a float, or a one-line :class:`SpecError` if it is NaN or infinite.

    A non-finite MFU, rate or step time comes from a degenerate input (a step time of 1e-320
    s, a zero peak); it is a usage error, never a number to print.
    """
    v = float(value)
    if not math.isfinite(v):
        raise SpecError(field, value, "a finite number (check the step time, batch and peak it was computed from)")
    return v


def check_mfu(mfu_pct: float, peak_tflops: float, peak_source: str = "", *, field: str = "mfu_pct") -> Plausibility:
    """Judge one MFU (or HFU) percentage against the peak it was computed with.

    Raises :class:`SpecError` for a non-finite figure. Returns ``ok=False`` with a one-line
    reason for a figure above :data:`MAX_MFU_PCT`; callers show the reason instead of (or
    beside, clearly marked) the figure and never present it as a valid MFU.
    """
    v = require_finite(field, mfu_pct)
    if v <= MAX_MFU_PCT:
        return Plausibility(True, v)
    peak = f"{peak_tflops:.6g} TFLOP/s" + (f" ({peak_source})" if peak_source else "")
    reason = (f"{field.split('_')[0].upper()} {v:.2f}% exceeds 100% of the peak {peak}: impossible; "
              "check the step time (too short?), the batch/sequence length (too large?) "
              "or the peak (too low for this device and dtype?)")
    return Plausibility(False, v, reason)


def check_step_time(step_time_s: float, field: str = "step_time_s") -> str | None:
    """A one-line reason if ``step_time_s`` is not a physically possible step time, else None."""
    try:
        v = float(step_time_s)
    except (TypeError, ValueError):
        return f"{field}={step_time_s!r} is not a number"
    if not math.isfinite(v):
        return f"{field}={step_time_s!r} is not finite"
    if v < MIN_STEP_TIME_S:
        return f"{field}={v:.3g} s is below {MIN_STEP_TIME_S:g} s: impossible for a training step"
    return None
