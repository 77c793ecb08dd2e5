"""Comparisons: the user's runs beside published results of the same model class.

Every run, published or not, is summarised under ONE convention and its own device's peak, so
TFLOP/s per device and MFU are comparable across sources (the published figures' own claims
are shown beside, since publications count FLOPs differently).

Two models are of the same class when they are the same preset, or when their active
parameter counts are within :data:`CLASS_TOLERANCE` of each other (e.g. Llama-2-70B and
Llama-3-70B), so a run is compared with results for models of its size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainperf.records.summary import Summary

CLASS_TOLERANCE = 0.25
"""Relative difference of active parameters within which two models count as one class."""


def params_label(n: float) -> str:
    """``6.74e9`` -> ``"6.7B"``."""
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.0f}"


def same_class(a: Any, b: Any) -> bool:
    """True when ModelSpecs ``a`` and ``b`` are the same preset or of about the same active size."""
    if a.name == b.name and a.name not in ("custom", ""):
        return True
    pa, pb = a.active_params, b.active_params
    return abs(pa - pb) <= CLASS_TOLERANCE * max(pa, pb)


@dataclass
class ComparisonRow:
    name: str
    source: str
    device: str
    num_devices: int
    seq_len: int
    tokens_per_s_per_device: float | None
    tflops_per_device: float | None
    mfu_pct: float | None
    claimed_mfu_pct: float | None
    claimed_tflops_per_device: float | None
    citation: str | None = None
    mine: bool = False
    """A run of this report (as opposed to one taken from the published catalog)."""


@dataclass
class Comparison:
    """One user run and the published results of its model class, on one convention."""

    title: str
    model_class: str
    convention: str
    rows: list[ComparisonRow] = field(default_factory=list)


def _row(run: Any, s: Summary, mine: bool) -> ComparisonRow:
    w = run.workload
    cite = run.meta.get("citation") or run.meta.get("source")
    return ComparisonRow(
        name=s.name, source=run.source, device=w.hardware.id, num_devices=w.num_devices, seq_len=w.seq_len,
        tokens_per_s_per_device=s.tokens_per_s_per_device, tflops_per_device=s.tflops_per_device,
        mfu_pct=s.mfu_pct, claimed_mfu_pct=s.claimed.get("mfu_pct"),
        claimed_tflops_per_device=s.claimed.get("tflops_per_device"),
        citation=str(cite) if cite else None, mine=mine)


def find_comparisons(mine: list[tuple[Any, Summary]], published: list[tuple[Any, Summary]]) -> list[Comparison]:
    """For each model class among ``mine``, its runs beside the published runs of that class.

    Runs without a workload cannot be classed and are left out; classes without a published
    result give no comparison.
    """
    out: list[Comparison] = []
    done: set[int] = set()
    # catalog runs the user chose as runs are shown once, among "your runs"
    given_published = {s.name for r, s in mine if r.source == "published"}
    for i, (run, s) in enumerate(mine):
        if i in done or run.workload is None or s.step_time_median_s is None:
            continue
        model = run.workload.model
        group = []
        for j, (r, x) in enumerate(mine):
            if j not in done and r.workload is not None and x.step_time_median_s is not None \
                    and same_class(model, r.workload.model):
                group.append((r, x))
                done.add(j)
        pubs = [(r, x) for r, x in published
                if r.workload is not None and same_class(model, r.workload.model)
                and x.step_time_median_s is not None and r.name not in given_published]
        if not pubs:
            continue
        label = f"{model.name} class (~{params_label(model.active_params)} active parameters)"
        rows = [_row(r, x, True) for r, x in group] + [_row(r, x, False) for r, x in pubs]
        out.append(Comparison(title=f"{label}: these runs vs published results", model_class=label,
                              convention=s.convention, rows=rows))
    return out
