"""Fit a device's efficiency knobs to measured runs, and judge the fit on runs it did not see.

The fit minimises the mean squared log error of predicted vs measured step time,
``mean(log(pred/meas)^2)``, over the chosen knobs of one device, plus a weak pull towards the
starting values (so knobs the data cannot tell apart stay at their public defaults). Each knob
is searched in an unbounded transform of its allowed range (logit of the position between its
bounds), with scipy's Nelder-Mead (Nelder & Mead 1965; the adaptive coefficients of Gao & Han
2012).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainperf.errors import InputFileError, SpecError
from trainperf.predict.efficiency import KNOB_BOUNDS, KNOB_NAMES, Knobs, KnobValues, knob_logit
from trainperf.predict.step import as_float
from trainperf.predict.step_model import layout_of, step_time_s

DEFAULT_FIT_KNOBS: tuple[str, ...] = ("matmul_fraction", "op_overhead_us", "memory_bound_fraction")
"""Knobs fitted when none are named: the first one for one run, two for two runs, all three for
three or more (never more knobs than runs)."""


@dataclass(frozen=True)
class Observation:
    """A measured step time of a workload."""

    name: str
    workload: Any
    measured_step_time_s: float
    trainable_fraction: float = 1.0


@dataclass(frozen=True)
class FitResult:
    knobs: Knobs
    fitted: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]
    """name, measured, predicted, abs_pct_error for each fitting observation."""
    iterations: int
    loss: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def mape_pct(self) -> float:
        return statistics.fmean(r["abs_pct_error"] for r in self.rows) if self.rows else float("nan")


# ------------------------------------------------------------------------------ transforms
def _from_x(name: str, x: float) -> float:
    lo, hi = KNOB_BOUNDS[name]
    x = max(min(x, 40.0), -40.0)
    return lo + (hi - lo) / (1.0 + math.exp(-x))


def nelder_mead(fun: Callable[[list[float]], float], x0: Sequence[float], step: float = 0.5,
                max_iter: int = 400, tol: float = 1e-10) -> tuple[list[float], float, int]:
    """Minimise ``fun`` from ``x0`` with :func:`scipy.optimize.minimize`'s Nelder-Mead (adaptive
    coefficients), starting from a simplex of ``step`` along each axis; returns (x, f(x),
    iterations). scipy is imported here: it takes a second to import, which only a fit pays."""
    n = len(x0)
    if n == 0:
        return [], fun([]), 0
    from scipy.optimize import minimize

    start = [list(map(float, x0))] + [[float(v) + (step if j == i else 0.0) for j, v in enumerate(x0)]
                                      for i in range(n)]
    res = minimize(lambda x: fun(list(x)), start[0], method="Nelder-Mead",
                   options={"adaptive": True, "initial_simplex": start, "maxiter": max_iter, "xatol": 1e-8,
                            "fatol": tol})
    return [float(v) for v in res.x], float(res.fun), int(res.nit)


# ------------------------------------------------------------------------------------- fit
def predict_with(knobs: Knobs, observations: Sequence[Observation]) -> list[float]:
    """Predicted step times of the observations under ``knobs``."""
    kn = knobs.numbers()
    return [as_float(step_time_s(layout_of(o.workload, o.trainable_fraction), kn)) for o in observations]


def error_rows(knobs: Knobs, observations: Sequence[Observation]) -> tuple[dict[str, Any], ...]:
    preds = predict_with(knobs, observations)
    return tuple({
        "name": o.name, "measured_step_time_s": o.measured_step_time_s, "predicted_step_time_s": p,
        "abs_pct_error": 100.0 * abs(p - o.measured_step_time_s) / o.measured_step_time_s,
    } for o, p in zip(observations, preds, strict=True))


def fit_knobs(observations: Sequence[Observation], base: Knobs, free: Sequence[str] | None = None,
              prior_weight: float = 1e-3, max_iter: int = 600) -> FitResult:
    """Fit the ``free`` knobs of ``base`` to ``observations`` (all on one device)."""
    if not observations:
        raise SpecError("runs", 0, "at least one measured run to fit")
    if free is None:
        free = DEFAULT_FIT_KNOBS[:min(len(observations), len(DEFAULT_FIT_KNOBS))]
    for name in free:
        if name not in KNOB_NAMES:
            raise SpecError("knobs", name, f"one of {', '.join(KNOB_NAMES)}")
    free = tuple(dict.fromkeys(free))
    feats = [layout_of(o.workload, o.trainable_fraction) for o in observations]
    meas = [o.measured_step_time_s for o in observations]
    base_vals = base.values()
    x0 = [knob_logit(n, base_vals[n]) for n in free]

    def loss(x: list[float]) -> float:
        vals = dict(base_vals)
        for n, xi in zip(free, x, strict=True):
            vals[n] = _from_x(n, xi)
        err = 0.0
        kn = KnobValues(**vals)
        for f, m in zip(feats, meas, strict=True):
            p = as_float(step_time_s(f, kn))
            if not p > 0:
                return 1e9
            err += math.log(p / m) ** 2
        prior = sum((xi - x0i) ** 2 for xi, x0i in zip(x, x0, strict=True))
        return err / len(feats) + prior_weight * prior

    x, fx, it = nelder_mead(loss, x0, max_iter=max_iter)
    # restart once from the optimum (Nelder-Mead can stall on a degenerate simplex)
    x, fx, it2 = nelder_mead(loss, x, step=0.2, max_iter=max_iter)
    fitted = {n: _from_x(n, xi) for n, xi in zip(free, x, strict=True)}
    srcs = dict(base.sources)
    names = ", ".join(o.name for o in observations)
    for n in free:
        srcs[n] = f"fitted to {len(observations)} run(s): {names}"
    knobs = base.replace(**fitted, sources=srcs)
    return FitResult(knobs=knobs, fitted=free, rows=error_rows(knobs, observations),
                     iterations=it + it2, loss=fx)


# ----------------------------------------------------------------------------- run inputs
STATISTICS: tuple[str, ...] = ("median", "p10", "min")


def observation_from_run(run: Any, name: str | None = None, statistic: str = "median") -> Observation:
    """A steady-state step time of a RunRecord (warm-up excluded by the standard rule): the
    median, or on a shared machine whose load inflates most steps, the 10th percentile or the
    minimum (the least disturbed steps)."""
    from trainperf.accounting.summarize import summarize

    if run.workload is None:
        raise SpecError("run.workload", None, f"a workload (model, device, plan) for run {run.name!r}")
    if not run.steps:
        raise SpecError("run.steps", 0, f"at least one step in run {run.name!r}")
    if statistic not in STATISTICS:
        raise SpecError("statistic", statistic, f"one of {', '.join(STATISTICS)}")
    s = summarize(run)
    if s.step_time_median_s is None or s.step_time_p10_s is None:
        raise SpecError("run.steps", len(run.steps), f"a step after the warm-up that is not flagged in run {run.name!r}")
    if statistic == "median":
        value = s.step_time_median_s
    else:
        from trainperf.accounting.summarize import steady_steps

        times = [st.step_time_s for st in steady_steps(run)[0]]
        value = s.step_time_p10_s if statistic == "p10" else min(times)
    return Observation(name=name or run.name, workload=run.workload, measured_step_time_s=float(value),
                       trainable_fraction=float(run.meta.get("trainable_fraction", 1.0)))


def _table_runs(spec: str) -> list[Any]:
    """Rows of the packaged published-runs table as run records (``row:<row_id>`` or
    ``table:<table_id>``)."""
    from trainperf.predict.runs_table import packaged_runs, select_runs

    return [r.to_run_record() for r in select_runs(packaged_runs(), spec, "published-runs")]


def load_runs(spec: str) -> list[Any]:
    """Run records named by ``spec``: ``published:all`` or ``published:<row | table | device id |
    vendor>`` (rows of the packaged published-runs table,
    :func:`~trainperf.predict.runs_table.published_records`), ``row:<row_id>`` or
    ``table:<table_id>``, a JSONL run file, or a bench run directory (its steps.jsonl)."""
    if spec.startswith(("row:", "table:")):
        return _table_runs(spec)
    if spec.startswith("published:"):
        from trainperf.predict.runs_table import published_records

        return published_records(spec.split(":", 1)[1])
    from trainperf.records.jsonl import read_run

    p = Path(spec)
    if p.is_dir():
        p = p / "steps.jsonl"
    if not p.is_file():
        raise InputFileError(f"run {spec!r}: no such file (give a JSONL run, a bench run directory, "
                             "or published:<row|table|device|vendor|all>)")
    run = read_run(p)
    run.meta.setdefault("name", str(spec))
    return [run]
