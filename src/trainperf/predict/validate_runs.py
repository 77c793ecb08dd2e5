"""Validate the predictor on the published-runs table: in-sample and held out two ways.

In-sample: every mapped row predicted with the packaged profiles (its own stack's, or the one
``stack`` names). Held out (:mod:`trainperf.predict.holdout`, cached on disk since each refits
every profile once per table or group): leave-one-table-out (the row's whole table out of the
fit) and leave-one-(stack, silicon)-out (every table of the row's software stack on the row's
silicon generation out of the fit: the error to expect for a stack on a GPU no table covers).
Reported overall, per group, per table and per stack: MAPE, mean signed error (positive =
predicted slower than measured) and the worst row. Excluded rows are listed with their reason
and kept out of every mean.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainperf.predict.fit_profiles import fitted_on, rows_from_table
from trainperf.predict.holdout import Prediction, by, cached_holdouts, group_key, summarize
from trainperf.predict.intervals import LEVEL, group_out_coverage, interval_for
from trainperf.predict.runs_table import TableRun, load_table_runs
from trainperf.predict.step import as_float, resolve_knobs
from trainperf.predict.step_model import layout_of, step_time_s


@dataclass(frozen=True)
class RowResult:
    """One row of the table with its predictions (``None`` for an excluded row)."""

    row_id: str
    table_id: str
    stack: str
    generation: str
    model: str
    hardware: str
    precision: str
    source: str
    included: bool
    exclude_reason: str
    measured_step_time_s: float | None
    step_time_from: str
    predicted_step_time_s: float | None
    signed_pct: float | None
    loto_predicted_step_time_s: float | None
    loto_signed_pct: float | None
    assumptions: tuple[str, ...]
    group_out_predicted_step_time_s: float | None = None
    """Predicted with every profile refitted without the row's (stack, silicon) group."""
    group_out_signed_pct: float | None = None
    interval_s: tuple[float, float] | None = None
    """The 80% range of the in-sample prediction (:mod:`trainperf.predict.intervals`)."""
    fitted: bool = False
    """The profile fit uses the row (:func:`~trainperf.predict.fit_profiles.fitted_on`): False for
    an excluded row and for a row of a framework no profile describes, which is held out already."""

    @property
    def group(self) -> str:
        return group_key(self.stack, self.generation)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["assumptions"] = list(self.assumptions)
        d["group"] = self.group
        # the names the seed-catalog validation used, for scripts that read them
        d["published_step_time_s"] = self.measured_step_time_s
        d["abs_pct_error"] = abs(self.signed_pct) if self.signed_pct is not None else None
        return d


@dataclass(frozen=True)
class RunsValidation:
    rows: tuple[RowResult, ...]
    in_sample: tuple[Prediction, ...]
    loto: tuple[Prediction, ...]
    stack_override: str | None = None
    group_out: tuple[Prediction, ...] = ()
    coverage: dict[str, Any] | None = None
    """Share of rows inside their 80% range under leave-one-(stack, silicon)-out, each group's
    range fitted without it (:func:`trainperf.predict.intervals.group_out_coverage`)."""
    moe_rows: frozenset[str] = frozenset()
    """Row ids of the mixture-of-experts rows (reported as their own group)."""

    def architecture_groups(self) -> dict[str, dict[str, Any]]:
        """MAPE, mean signed error and worst row of the MoE rows and of the dense rows, in-sample,
        leave-one-table-out and leave-one-(stack, silicon)-out."""
        out: dict[str, dict[str, Any]] = {}
        for name, keep in (("moe", lambda p: p.name in self.moe_rows), ("dense", lambda p: p.name not in self.moe_rows)):
            out[name] = {"in_sample": summarize([p for p in self.in_sample if keep(p)]),
                         "leave_one_table_out": summarize([p for p in self.loto if keep(p)]) if self.loto else None,
                         "leave_one_group_out": summarize([p for p in self.group_out if keep(p)])
                         if self.group_out else None}
        return out

    def _per(self, key: str) -> dict[str, Any]:
        """In-sample and held-out summaries per ``group``, ``table`` or ``stack``."""
        lo, go = by(self.loto, key), by(self.group_out, key)
        return {k: {"in_sample": v, "leave_one_table_out": lo.get(k), "leave_one_group_out": go.get(k)}
                for k, v in by(self.in_sample, key).items()}

    def to_dict(self) -> dict[str, Any]:
        s, lo, go = summarize(self.in_sample), summarize(self.loto), summarize(self.group_out)
        return {
            "rows_total": len(self.rows), "rows_predicted": s["rows"],
            "rows_excluded": sum(1 for r in self.rows if not r.included),
            "stack": self.stack_override,
            "mape_pct": s["mape_pct"], "mean_signed_pct": s["mean_signed_pct"],
            "max_abs_pct_error": abs(s["worst_pct"]) if s["rows"] else None,
            "worst_row": s["worst"], "worst_pct": s.get("worst_pct"),
            "leave_one_table_out_mape_pct": lo["mape_pct"] if self.loto else None,
            "leave_one_table_out_mean_signed_pct": lo["mean_signed_pct"] if self.loto else None,
            "leave_one_table_out_worst_row": lo["worst"] if self.loto else None,
            "leave_one_table_out_worst_pct": lo.get("worst_pct") if self.loto else None,
            "leave_one_group_out_mape_pct": go["mape_pct"] if self.group_out else None,
            "leave_one_group_out_mean_signed_pct": go["mean_signed_pct"] if self.group_out else None,
            "leave_one_group_out_worst_row": go["worst"] if self.group_out else None,
            "leave_one_group_out_worst_pct": go.get("worst_pct") if self.group_out else None,
            "leave_one_group_out_max_group_mape_pct": (
                max(v["mape_pct"] for v in by(self.group_out, "group").values()) if self.group_out else None),
            "interval_level_pct": 100.0 * LEVEL,
            "leave_one_group_out_interval_coverage_pct": (self.coverage or {}).get("coverage_pct"),
            "leave_one_group_out_interval_group_balanced_coverage_pct":
                (self.coverage or {}).get("group_balanced_coverage_pct"),
            "leave_one_group_out_quantile_coverage_pct": (self.coverage or {}).get("quantile_coverage_pct"),
            "leave_one_group_out_quantile_group_balanced_coverage_pct":
                (self.coverage or {}).get("quantile_group_balanced_coverage_pct"),
            "interval_coverage_per_group": (self.coverage or {}).get("per_group"),
            "per_architecture": self.architecture_groups(),
            "per_group": self._per("group"), "per_table": self._per("table"), "per_stack": self._per("stack"),
            "rows": [r.to_dict() for r in self.rows],
        }


def predict_row(run: TableRun, stack: Any = None) -> float:
    """Predicted step seconds of a mapped row with the packaged profiles (or ``stack``)."""

    w = run.workload
    k = resolve_knobs(w, stack=stack if stack is not None else run.stack)
    return as_float(step_time_s(layout_of(w), k.numbers()))


def validate_runs(data: str | Path | None = None, stack: str | None = None,
                  loto: bool = True, runs: Sequence[TableRun] | None = None) -> RunsValidation:
    """Predict every row of the packaged table (or ``data``), in-sample and held out."""
    runs = tuple(load_table_runs(data) if runs is None else runs)
    fit_rows = rows_from_table(runs)
    held = cached_holdouts(fit_rows) if loto and fit_rows else {"table": [], "group": []}
    loto_preds = {p.name: p for p in held["table"]}
    go_preds = {p.name: p for p in held["group"]}
    out: list[RowResult] = []
    ins: list[Prediction] = []
    for r in runs:
        pred = signed = lp = ls = gp = gs = band = None
        if r.included:
            assert r.step_time_s is not None  # every included row has one (runs_table._row)
            pred = predict_row(r, stack)
            iv = interval_for(pred, r.workload)
            band = (iv.low_s, iv.high_s) if iv is not None else None
            signed = 100.0 * (pred / r.step_time_s - 1.0)
            ins.append(Prediction(r.row_id, r.table_id, r.stack, float(r.step_time_s), pred, r.generation))
            if r.row_id in loto_preds:
                lp = loto_preds[r.row_id].predicted_step_time_s
                ls = loto_preds[r.row_id].signed_pct
            if r.row_id in go_preds:
                gp = go_preds[r.row_id].predicted_step_time_s
                gs = go_preds[r.row_id].signed_pct
        out.append(RowResult(
            row_id=r.row_id, table_id=r.table_id, stack=r.stack,
            generation=r.generation,
            model=r.model, hardware=r.hardware, precision=r.precision, source=r.source,
            included=r.included, exclude_reason=r.exclude_reason, measured_step_time_s=r.step_time_s,
            step_time_from=r.step_time_from, predicted_step_time_s=pred, signed_pct=signed,
            loto_predicted_step_time_s=lp, loto_signed_pct=ls, assumptions=r.assumptions,
            group_out_predicted_step_time_s=gp, group_out_signed_pct=gs, interval_s=band, fitted=fitted_on(r)))
    cov = group_out_coverage(fit_rows, held["group"], held["table"]) if held["group"] else None
    # a row no fit uses (fit_profiles.fitted_on) is held out already: its in-sample prediction is both
    never = tuple(p for p, o in zip(ins, (o for o in out if o.included), strict=True) if not o.fitted)
    if loto and never:
        held = {"table": [*held["table"], *never], "group": [*held["group"], *never]}
        out = [dataclasses.replace(o, loto_predicted_step_time_s=o.predicted_step_time_s, loto_signed_pct=o.signed_pct,
                                   group_out_predicted_step_time_s=o.predicted_step_time_s,
                                   group_out_signed_pct=o.signed_pct) if o.included and not o.fitted else o
               for o in out]
    moe = frozenset(r.row_id for r in runs if r.included and r.workload is not None and r.workload.model.is_moe)
    return RunsValidation(rows=tuple(out), in_sample=tuple(ins), loto=tuple(held["table"]),
                          stack_override=stack, group_out=tuple(held["group"]), coverage=cov, moe_rows=moe)
