"""Predicted vs measured: where a run's step time should go, and what the model leaves out.

For a run with a workload, :mod:`trainperf.predict` (when installed) predicts the step time as
a breakdown in seconds per component (compute, exposed communication by kind, bubble,
recompute, optimizer, other). The measured figure is the run's steady-state median step time.
The difference ``measured - predicted`` is the **unexplained remainder**: time the model does
not account for (positive) or over-predicts (negative). Nothing is rescaled to make the two
agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainperf.errors import TrainperfError

OTHER = "other (predicted, not itemised)"


@dataclass
class Explanation:
    """One run's predicted breakdown beside its measured median step time."""

    name: str
    measured_step_time_s: float
    predicted_step_time_s: float
    components: dict[str, float]
    """Predicted seconds per component; they sum to ``predicted_step_time_s``."""
    notes: list[str] = field(default_factory=list)
    memory_breakdown_GiB: dict[str, float] = field(default_factory=dict)
    """Predicted memory per device by category (GiB)."""
    predicted_memory_GiB: float | None = None
    measured_memory_GiB: float | None = None
    """Peak memory per device the run recorded (CUDA max allocated, or CPU RSS high-water)."""
    interval_s: tuple[float, float] | None = None
    """The prediction's 80% range (held-out residuals, wider off the fitted data)."""
    interval_basis: str = ""

    @property
    def within_range(self) -> bool | None:
        """Whether the measured step time falls in the predicted range (``None``: no range)."""
        if self.interval_s is None:
            return None
        return self.interval_s[0] <= self.measured_step_time_s <= self.interval_s[1]

    @property
    def unexplained_s(self) -> float:
        """Measured minus predicted step time (negative: the model over-predicts)."""
        return self.measured_step_time_s - self.predicted_step_time_s

    @property
    def error_pct(self) -> float:
        """(predicted - measured) / measured, in percent."""
        return 100.0 * (self.predicted_step_time_s - self.measured_step_time_s) / self.measured_step_time_s


def predictor() -> tuple[Any, str | None]:
    """The predictor's ``predict(workload, ...)``, or ``None`` and why it is unavailable."""
    try:
        from trainperf.predict import predict
    except ImportError as e:
        return None, f"trainperf.predict is not available ({e})"
    return predict, None


def _float_dict(d: Any) -> dict[str, float]:
    if not isinstance(d, dict):
        return {}
    out = {}
    for k, v in d.items():
        if isinstance(v, int | float) and not isinstance(v, bool):
            out[str(k)] = float(v)
    return out


def explain(name: str, workload: Any, measured_step_time_s: float, predict_fn: Any,
            measured_memory_GiB: float | None = None, **predict_kw: Any) -> Explanation:
    """Predict ``workload`` and set the breakdown beside the measured median step time.

    Components that are zero are dropped. If the breakdown sums to less than the predicted step
    time, the rest is shown as :data:`OTHER`; if it sums to more (components that overlap in
    time), they are scaled down proportionally to the step time and the note says so.
    """
    pred = predict_fn(workload, **predict_kw)
    step = float(pred.step_time_s)
    comps = {k: v for k, v in _float_dict(getattr(pred, "breakdown", None)).items() if v > 0}
    notes: list[str] = []
    total = sum(comps.values())
    if total < step * 0.999:
        comps[OTHER] = step - total
    elif total > step * 1.001:
        notes.append(f"the predicted components sum to {total:.4g} s, more than the predicted step "
                     f"{step:.4g} s (they overlap); shown scaled to the step time")
        comps = {k: v * step / total for k, v in comps.items()}
    mem = _float_dict(getattr(pred, "memory_breakdown_GiB", None))
    mem_total = getattr(pred, "memory_per_device_GiB", None)
    if not isinstance(mem_total, int | float):
        mem_total = sum(mem.values()) if mem else None
    iv = getattr(pred, "interval", None)
    band = (float(iv.low_s), float(iv.high_s)) if iv is not None else None
    if iv is not None and not iv.low_s <= measured_step_time_s <= iv.high_s:
        notes.append(f"measured {measured_step_time_s:.4g} s lies outside the predicted {100 * iv.level:.0f}% range "
                     f"{iv.low_s:.4g}-{iv.high_s:.4g} s")
    return Explanation(name=name, measured_step_time_s=measured_step_time_s, predicted_step_time_s=step,
                       components=comps, notes=notes, memory_breakdown_GiB=mem,
                       predicted_memory_GiB=mem_total, measured_memory_GiB=measured_memory_GiB,
                       interval_s=band, interval_basis=getattr(iv, "basis", "") if iv is not None else "")


def explain_runs(items: list[tuple[Any, Any]], *, calibration: Any = None,
                 convention: str | None = None) -> tuple[list[Explanation], list[str]]:
    """Explanations for the ``(run, summary)`` pairs that have a workload and a median step time,
    and a note for each run that could not be predicted. ``calibration`` (fitted efficiency
    knobs, see ``trainperf calibrate-model``) and ``convention`` go to the predictor."""
    fn, why = predictor()
    if fn is None:
        return [], [f"no predicted breakdown: {why}"]
    kw: dict[str, Any] = {}
    if calibration is not None:
        kw["calibration"] = calibration
    if convention is not None:
        kw["convention"] = convention
    out: list[Explanation] = []
    notes: list[str] = []
    for run, s in items:
        if run.workload is None or s.step_time_median_s is None:
            continue
        try:
            out.append(explain(s.name, run.workload, s.step_time_median_s, fn, s.memory_max_GiB, **kw))
        except TrainperfError as e:
            notes.append(f"{s.name}: no prediction ({e})")
        except Exception as e:  # a predictor bug must not take the rest of the report with it
            notes.append(f"{s.name}: the predictor failed ({type(e).__name__}: {e})")
    return out, notes
