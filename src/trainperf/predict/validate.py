"""Predict every published run and compare with its published step time.

The in-sample table uses the catalog's knobs (a few per device, fitted to that device's rows,
see ``data/efficiency.toml``). The held-out check (leave-one-out) refits a device's fitted
knobs on its OTHER rows, starting from the vendor defaults, and predicts the row left out: the
error a new run on a known device can expect. Rows marked ``validate = false`` in the catalog
are listed with their reason and kept out of every mean.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from trainperf.predict.calibrate import Observation, fit_knobs, predict_with
from trainperf.predict.efficiency import fitted_knobs, knobs_for
from trainperf.predict.published import PublishedRun, published_runs
from trainperf.predict.step import predict


@dataclass(frozen=True)
class ValidationRow:
    id: str
    source: str
    vendor: str
    device: str
    workload: str
    published_step_time_s: float
    predicted_step_time_s: float
    abs_pct_error: float
    derived_from: str | None
    included: bool
    exclude_reason: str = ""
    holdout_predicted_step_time_s: float | None = None
    holdout_abs_pct_error: float | None = None
    fits: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Validation:
    rows: tuple[ValidationRow, ...]
    knobs_per_device: dict[str, list[str]] = field(default_factory=dict)

    @property
    def included(self) -> list[ValidationRow]:
        return [r for r in self.rows if r.included]

    @property
    def mape_pct(self) -> float:
        inc = self.included
        return statistics.fmean(r.abs_pct_error for r in inc) if inc else float("nan")

    @property
    def worst(self) -> ValidationRow | None:
        inc = self.included
        return max(inc, key=lambda r: r.abs_pct_error) if inc else None

    @property
    def holdout_mape_pct(self) -> float | None:
        vals = [r.holdout_abs_pct_error for r in self.included if r.holdout_abs_pct_error is not None]
        return statistics.fmean(vals) if vals else None

    def by_vendor(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for vendor in dict.fromkeys(r.vendor for r in self.included):
            rows = [r for r in self.included if r.vendor == vendor]
            d = {"rows": float(len(rows)), "mape_pct": statistics.fmean(r.abs_pct_error for r in rows),
                 "max_abs_pct_error": max(r.abs_pct_error for r in rows)}
            ho = [r.holdout_abs_pct_error for r in rows if r.holdout_abs_pct_error is not None]
            if ho:
                d["holdout_mape_pct"] = statistics.fmean(ho)
            out[vendor] = d
        return out

    def to_dict(self) -> dict[str, Any]:
        worst = self.worst
        return {
            "mape_pct": self.mape_pct,
            "max_abs_pct_error": worst.abs_pct_error if worst else None,
            "worst_row": worst.id if worst else None,
            "holdout_mape_pct": self.holdout_mape_pct,
            "rows_included": len(self.included), "rows_total": len(self.rows),
            "by_vendor": self.by_vendor(),
            "knobs_per_device": self.knobs_per_device,
            "rows": [r.to_dict() for r in self.rows],
        }


def _holdout(run: PublishedRun, peers: Sequence[PublishedRun]) -> float:
    """Predicted step time of ``run`` with its device's fitted knobs refitted on ``peers``."""
    hw = run.workload.hardware
    base = knobs_for("", hw.vendor)  # vendor defaults: nothing learnt from this device's rows
    free = fitted_knobs(hw.id)
    obs = [Observation(p.id, p.workload, p.step_time_s, p.trainable_fraction) for p in peers]
    knobs = fit_knobs(obs, base, free).knobs if (obs and free) else base
    return predict_with(knobs, [Observation(run.id, run.workload, run.step_time_s,
                                            run.trainable_fraction)])[0]


def validate(runs: Sequence[PublishedRun] | None = None,
             calibration: Mapping[str, Mapping[str, float]] | None = None,
             holdout: bool = False) -> Validation:
    """Predict each published run; with ``holdout``, also leave-one-out per device."""
    runs = list(published_runs() if runs is None else runs)
    rows = []
    for r in runs:
        p = predict(r.workload, calibration=calibration, trainable_fraction=r.trainable_fraction)
        err = 100.0 * abs(p.step_time_s - r.step_time_s) / r.step_time_s
        ho = ho_err = None
        if holdout and r.validate:
            peers = [q for q in runs if q.validate and q.id != r.id
                     and q.workload.hardware.id == r.workload.hardware.id]
            ho = _holdout(r, peers)
            ho_err = 100.0 * abs(ho - r.step_time_s) / r.step_time_s
        rows.append(ValidationRow(
            id=r.id, source=r.source, vendor=r.vendor, device=r.workload.hardware.id,
            workload=r.workload.describe(), published_step_time_s=r.step_time_s,
            predicted_step_time_s=p.step_time_s, abs_pct_error=err, derived_from=r.derived_from,
            included=r.validate, exclude_reason=r.exclude_reason,
            holdout_predicted_step_time_s=ho, holdout_abs_pct_error=ho_err, fits=p.fits,
        ))
    devices = dict.fromkeys(r.workload.hardware.id for r in runs)
    return Validation(rows=tuple(rows), knobs_per_device={d: list(fitted_knobs(d)) for d in devices})
