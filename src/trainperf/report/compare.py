"""Comparisons: the user's runs beside published results of the same model class.

Every run, published or not, is summarised under ONE convention and its own device's peak, so
TFLOP/s per device and MFU are comparable across sources (the published figures' own claims
are shown beside, since publications count FLOPs differently).

Two models are of the same class when they are the same preset, or when both are dense or both
mixtures of experts and their active and total parameter counts are within
:data:`CLASS_TOLERANCE` of each other (e.g. Llama-2-70B and Llama-3-70B; not a 4-layer proxy of
Grok-1, whose active parameters match an 8B model's), so a run is compared with results for
models of its size and kind. A run is compared only with results in its own precision (bf16 with
bf16, fp8 with fp8); a result published twice (a document's figure and the same row of the runs
table) is shown once, and at most :data:`MAX_PUBLISHED` are shown: those on the run's device
first, then the nearest device counts.
"""

from __future__ import annotations

import math
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


MAX_PUBLISHED = 12
"""Published results shown beside a run of a class, at most."""


def same_class(a: Any, b: Any) -> bool:
    """True when ModelSpecs ``a`` and ``b`` are the same preset, or of one kind (dense or MoE)
    and about the same active and total size."""
    if a.name == b.name and a.name not in ("custom", ""):
        return True
    if a.is_moe != b.is_moe:
        return False
    return all(abs(x - y) <= CLASS_TOLERANCE * max(x, y)
               for x, y in ((a.active_params, b.active_params), (a.total_params, b.total_params)))


def published_label(run: Any) -> str:
    """A published run's name for a person: a catalog id as it is; a runs-table row
    (``row:23``) as its framework, model and precision (``NeMo 24.09 llama3-8b bf16, table row 23``)."""
    if not run.name.startswith("row:"):
        return run.name
    w = run.workload
    framework = str(run.meta.get("framework") or run.meta.get("stack") or "").split(" (")[0]
    return f"{framework} {w.model.name} {w.precision}, table row {run.name[4:]}".strip()


def _identity(run: Any) -> tuple[Any, ...]:
    """What two published results of one measurement share (their step times agree within 1%;
    the checkpointing is left out: two sources may name one policy differently)."""
    w = run.workload
    m = w.model
    return (m.layers, m.hidden, m.vocab, w.hardware.id, w.num_devices, w.seq_len, w.global_batch, w.precision,
            w.plan.describe())


def _distinct(pubs: list[tuple[Any, Summary]]) -> list[tuple[Any, Summary]]:
    """``pubs`` without a result seen before (the first kept: the documents' catalog comes first)."""
    seen: dict[tuple[Any, ...], list[float]] = {}
    out = []
    for r, s in pubs:
        times = seen.setdefault(_identity(r), [])
        t = float(s.step_time_median_s or 0.0)
        if not any(abs(t - u) <= 0.01 * max(t, u) for u in times):
            times.append(t)
            out.append((r, s))
    return out


def _nearest(run: Any, pubs: list[tuple[Any, Summary]]) -> list[tuple[Any, Summary]]:
    """At most :data:`MAX_PUBLISHED` of ``pubs``: the run's device first, then the nearest counts."""
    w = run.workload

    def distance(item: tuple[Any, Summary]) -> tuple[int, float]:
        pw = item[0].workload
        return (pw.hardware.id != w.hardware.id, abs(math.log(pw.num_devices / w.num_devices)))

    return sorted(pubs, key=distance)[:MAX_PUBLISHED]


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
    left_out: int = 0
    """Published results of the class and precision not shown (beyond :data:`MAX_PUBLISHED`)."""


def _row(run: Any, s: Summary, mine: bool) -> ComparisonRow:
    w = run.workload
    cite = run.meta.get("citation") or run.meta.get("source")
    return ComparisonRow(
        name=s.name if mine else published_label(run), source=run.source, device=w.hardware.id, num_devices=w.num_devices, seq_len=w.seq_len,
        tokens_per_s_per_device=s.tokens_per_s_per_device, tflops_per_device=s.tflops_per_device,
        mfu_pct=s.mfu_pct, claimed_mfu_pct=s.claimed.get("mfu_pct"),
        claimed_tflops_per_device=s.claimed.get("tflops_per_device"),
        citation=str(cite) if cite else None, mine=mine)


def find_comparisons(mine: list[tuple[Any, Summary]], published: list[tuple[Any, Summary]]) -> list[Comparison]:
    """For each model class and precision among ``mine``, its runs beside the published runs of
    that class and precision (see the module docstring).

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
        model, precision = run.workload.model, run.workload.precision
        group = []
        for j, (r, x) in enumerate(mine):
            if j not in done and r.workload is not None and x.step_time_median_s is not None \
                    and same_class(model, r.workload.model) and r.workload.precision == precision:
                group.append((r, x))
                done.add(j)
        pubs = _distinct([(r, x) for r, x in published
                          if r.workload is not None and same_class(model, r.workload.model)
                          and r.workload.precision == precision and x.step_time_median_s is not None
                          and r.name not in given_published])
        if not pubs:
            continue
        shown = _nearest(run, pubs)
        label = f"{model.name} class (~{params_label(model.active_params)} active parameters), {precision}"
        rows = [_row(r, x, True) for r, x in group] + [_row(r, x, False) for r, x in shown]
        out.append(Comparison(title=f"{label}: these runs vs published results", model_class=label,
                              convention=s.convention, rows=rows, left_out=len(pubs) - len(shown)))
    return out
