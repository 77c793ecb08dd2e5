"""Honest ranges around a predicted step time, from held-out residuals.

A prediction is a point; how far off it may be depends on how far the workload is from what the
profiles were fitted on. The range comes from the residuals ``log(measured / predicted)`` of the
**leave-one-(stack, silicon)-out** check (:mod:`trainperf.predict.holdout`), for every workload,
a fitted pair's included: in the published tables every (stack, silicon) pair's tables come from
one source and release (one repository at one commit), so leaving one table out keeps its
siblings in the fit, and the range it gives (about +-9%) held 72% of the group-out rows. A
user's run or a table from another release is a new source: what a held-out group is.

The quantiles are the hull of two views of those residuals (:func:`range_quantiles`): pooled
over rows (split-conformal), and balanced over groups (each group weighs one, however many rows
it has: 88 of the 162 rows are Megatron-Core on Hopper, and a new source is one draw of a group,
not of a row). Beyond the data the range widens by stated factors (:data:`WIDEN`): silicon with
no published run at all, a sequence length, device count or precision beyond what was fitted on
that silicon, a mixture-of-experts model where the fit has none.

Each row's residual is divided by the widening factor it had against the fit without its group,
so that on the held-out rows the nominal level is the real coverage; validate reports that
coverage by rows and by groups (``trainperf validate``), each group's range fitted without it.

Every range is then widened once more for novelty (:attr:`IntervalModel.novelty`): the shared
tables come from nine (stack, silicon) groups, and a user's table is one step further from
them than a held-out group is from the rest. How much one step of novelty widens the residuals
is measured in the same data: the group-out quantiles span 1.5x the table-out ones (a new table
of a fitted source -> a group never fitted). The published tables kept aside from this project
agreed: at the time their 80% ranges held 66% of their rows, their dense rows' MAPE 12.7%
against 8.5% group-out on the shared tables (1.5x; trainperf issue 29). Because misses
concentrate in whole groups with a common bias, the widening moves the shared groups' own
(nested) coverage little (81% -> 85%, balanced over groups): it is for the step beyond them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

LEVEL = 0.80
"""Nominal coverage of a range: the 10th to the 90th percentile of the held-out residuals."""

WIDEN: dict[str, float] = {
    "unseen_silicon": 3.0,
    "precision": 1.3,
    "moe": 1.2,
    "seq_per_doubling": 0.25,
    "devices_per_doubling": 0.1,
    "offload": 1.5,
}
"""Multipliers of a range's log-width beyond the fitted data. Judgement, not a fit (the shared
tables have too few such rows to fit them): 3x for silicon no published run covers (kernel
physics alone carries it; end-to-end runs outside the table, ``benchmarks/new_silicon.py``,
were predicted -38% on MI300X and -46% on a power-limited B200 with torchtitan, +2% on B200
with DeepSpeed: the 1.5x first chosen held none of the torchtitan ones), 1.3x for a precision
never fitted on the silicon, 1.2x for an MoE model when no MoE run was fitted on it, and +25%
per doubling of the sequence length / +10% per doubling of the device count beyond the largest
fitted on that silicon; 1.5x for an optimizer offloaded to the host, which no fitted run has (its
host rate comes from one published run: ``cpu_optimizer_params_per_s`` of the stack profiles)."""

PACKAGED = "intervals.json"

BASIS = "leave-one-(stack, silicon)-out"


@dataclass(frozen=True)
class Interval:
    """An ``level`` range of step seconds around a prediction."""

    low_s: float
    high_s: float
    level: float
    basis: str
    """Which held-out residuals set the range (:data:`BASIS`)."""
    widened_by: tuple[str, ...] = ()
    """Why the range is wider than its basis (each reason names the factor)."""

    def to_dict(self) -> dict[str, Any]:
        return {"low_s": self.low_s, "high_s": self.high_s, "level": self.level, "basis": self.basis,
                "widened_by": list(self.widened_by)}

    def contains(self, seconds: float) -> bool:
        return self.low_s <= seconds <= self.high_s


@dataclass(frozen=True)
class Domain:
    """What the profiles were fitted on, per silicon generation."""

    pairs: frozenset[str] = frozenset()
    """``stack@silicon`` groups with fitted tables."""
    silicon: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """silicon -> {max_seq_len, max_devices, precisions, moe}."""

    @classmethod
    def of(cls, rows: Sequence[Any]) -> Domain:
        sil: dict[str, dict[str, Any]] = {}
        for r in rows:
            w = r.workload
            d = sil.setdefault(r.generation, {"max_seq_len": 0, "max_devices": 0, "precisions": set(),
                                              "moe": False})
            d["max_seq_len"] = max(d["max_seq_len"], int(w.seq_len))
            d["max_devices"] = max(d["max_devices"], int(w.num_devices))
            d["precisions"].add("fp8" if w.precision in ("fp8", "fp4") else "16-bit")
            d["moe"] = d["moe"] or bool(w.model.is_moe)
        return cls(pairs=frozenset(f"{r.stack}@{r.generation}" for r in rows),
                   silicon={k: {**v, "precisions": sorted(v["precisions"])} for k, v in sil.items()})

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": sorted(self.pairs), "silicon": {k: dict(v) for k, v in self.silicon.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Domain:
        return cls(pairs=frozenset(d.get("pairs", ())), silicon=dict(d.get("silicon", {})))


def widening(domain: Domain, silicon: str, w: Any) -> tuple[float, tuple[str, ...]]:
    """(width multiplier, reasons) of workload ``w`` on ``silicon`` against the fitted ``domain``."""
    factor, why = 1.0, list[str]()
    if getattr(w, "offload_optimizer", False):
        factor *= WIDEN["offload"]
        why.append(f"optimizer offloaded to the host, which no fitted run does (x{WIDEN['offload']:g})")
    d = domain.silicon.get(silicon)
    if d is None:
        factor *= WIDEN["unseen_silicon"]
        why.append(f"no published run on {silicon} silicon: kernel physics only (x{WIDEN['unseen_silicon']:g})")
        return factor, tuple(why)
    prec = "fp8" if w.precision in ("fp8", "fp4") else "16-bit"
    if prec not in d["precisions"]:
        factor *= WIDEN["precision"]
        why.append(f"no {prec} run fitted on {silicon} (x{WIDEN['precision']:g})")
    if w.model.is_moe and not d["moe"]:
        factor *= WIDEN["moe"]
        why.append(f"no mixture-of-experts run fitted on {silicon} (x{WIDEN['moe']:g})")
    if d["max_seq_len"] and w.seq_len > 2 * d["max_seq_len"]:
        f = 1.0 + WIDEN["seq_per_doubling"] * math.log2(w.seq_len / d["max_seq_len"])
        factor *= f
        why.append(f"sequence {w.seq_len:,} beyond the {d['max_seq_len']:,} fitted on {silicon} (x{f:.2f})")
    if d["max_devices"] and w.num_devices > 2 * d["max_devices"]:
        f = 1.0 + WIDEN["devices_per_doubling"] * math.log2(w.num_devices / d["max_devices"])
        factor *= f
        why.append(f"{w.num_devices:,} devices beyond the {d['max_devices']:,} fitted on {silicon} (x{f:.2f})")
    return factor, tuple(why)


def _quantiles(values: Sequence[float]) -> tuple[float, float]:
    """The split-conformal ends of a ``LEVEL`` range with equal tails: of ``n`` held-out residuals,
    the ``floor((n+1) a)``-th and ``ceil((n+1) (1-a))``-th smallest, ``a = (1 - LEVEL) / 2``
    (Lei et al. 2018, "Distribution-free predictive inference for regression", section 2.2). A
    new residual exchangeable with these falls between them with probability at least
    ``LEVEL``; the plain 10th/90th percentiles are optimistic by about one order statistic,
    which held out whole groups showed (74.7% nested coverage for a nominal 80%)."""
    xs = sorted(values)
    if not xs:
        return (-math.log(1.5), math.log(1.5))
    n, a = len(xs), (1.0 - LEVEL) / 2.0
    # rounded first: (1 - 0.8) / 2 * 100 is 9.999999999999998 in floating point, not 10
    lo_k = max(1, math.floor(round((n + 1) * a, 9)))
    hi_k = min(n, math.ceil(round((n + 1) * (1.0 - a), 9)))
    return xs[lo_k - 1], xs[hi_k - 1]


def _balanced_quantiles(grouped: Sequence[tuple[str, float]]) -> tuple[float, float]:
    """The ``LEVEL`` range's ends of ``(group, residual)`` pairs with each group weighing one
    (each of its rows ``1/rows``): the smallest residual whose cumulative weight reaches
    ``a`` and ``1 - a`` of the total, ``a = (1 - LEVEL) / 2``. No finite-sample correction: over
    the ~9 groups of the tables it would take the extremes; the row-pooled view
    (:func:`_quantiles`) it is joined with carries one (:func:`range_quantiles`)."""
    sizes: dict[str, int] = {}
    for g, _ in grouped:
        sizes[g] = sizes.get(g, 0) + 1
    pairs = sorted((x, 1.0 / sizes[g]) for g, x in grouped)
    if not pairs:
        return _quantiles([])
    a, total = (1.0 - LEVEL) / 2.0, float(len(sizes))

    def at(q: float) -> float:
        c = 0.0
        for x, wt in pairs:
            c += wt
            if c >= q * total - 1e-12:
                return x
        return pairs[-1][0]
    return at(a), at(1.0 - a)


def range_quantiles(grouped: Sequence[tuple[str, float]]) -> tuple[float, float]:
    """The (low, high) log-ends of a range from ``(group, residual)`` pairs: the hull of the
    row-pooled split-conformal quantiles (:func:`_quantiles`) and the group-balanced ones
    (:func:`_balanced_quantiles`), so that neither a large group nor a small one sets it alone."""
    plo, phi = _quantiles([x for _, x in grouped])
    blo, bhi = _balanced_quantiles(grouped)
    return min(plo, blo), max(phi, bhi)


@dataclass(frozen=True)
class IntervalModel:
    """The log-ends of a range from held-out residuals, and the fitted domain."""

    group_out: tuple[float, float]
    """(low, high) of leave-one-(stack, silicon)-out ``log(measured/predicted)`` over each row's
    widening factor (:func:`range_quantiles`): every range's basis."""
    domain: Domain
    table_out: tuple[float, float] = (0.0, 0.0)
    """The same of leave-one-table-out residuals (how close a new table of a fitted source and
    release lands): with :attr:`group_out` it sets :attr:`novelty`."""
    rows: Mapping[str, int] = field(default_factory=dict)
    novelty: float = 1.0
    """Multiplier of every range's log-ends for a source no fitted table comes from:
    :func:`novelty_factor` of the group-out and table-out ends (1 when either is missing)."""

    def interval(self, predicted_s: float, w: Any, silicon: str) -> Interval:
        factor, why = widening(self.domain, silicon, w)
        if self.novelty > 1.0:
            factor *= self.novelty
            why = (*why, f"a source no fitted table comes from (x{self.novelty:.2f}: the spread of held-out "
                         "groups over that of held-out tables)")
        lo, hi = self.group_out
        return Interval(low_s=predicted_s * math.exp(lo * factor), high_s=predicted_s * math.exp(hi * factor),
                        level=LEVEL, basis=BASIS, widened_by=why)

    def to_dict(self) -> dict[str, Any]:
        return {"level": LEVEL, "group_out": list(self.group_out), "table_out": list(self.table_out),
                "domain": self.domain.to_dict(), "rows": dict(self.rows), "widen": dict(WIDEN),
                "novelty": self.novelty}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> IntervalModel:
        return cls(group_out=tuple(d["group_out"]), table_out=tuple(d.get("table_out", (0.0, 0.0))),
                   domain=Domain.from_dict(d["domain"]), rows=dict(d.get("rows", {})),
                   novelty=float(d.get("novelty", 1.0)))


def novelty_factor(group_out: tuple[float, float], table_out: tuple[float, float]) -> float:
    """How much one step of novelty widens held-out residuals: the span of the group-out ends
    over the span of the table-out ends (at least 1; 1 when the table-out span is empty)."""
    t = table_out[1] - table_out[0]
    return max(1.0, (group_out[1] - group_out[0]) / t) if t > 0 else 1.0


def _log_residual(p: Any) -> float:
    return math.log(p.measured_step_time_s / p.predicted_step_time_s)


def fit_interval_model(rows: Sequence[Any], table_out: Sequence[Any], group_out: Sequence[Any]) -> IntervalModel:
    """The ranges' log-ends from hold-out predictions of ``rows`` (``FitRow`` s): of the
    leave-one-group-out residuals, each divided by the widening factor its row had against the
    fit without its group (:func:`range_quantiles`); the leave-one-table-out ones reported."""
    grouped = _normalised_group_residuals(rows, group_out, {r.name: r for r in rows})
    table = [_log_residual(p) for p in table_out]
    go, to = range_quantiles(grouped), _quantiles(table)
    return IntervalModel(group_out=go, table_out=to, domain=Domain.of(rows),
                         rows={"group_out": len(grouped), "table_out": len(table)},
                         novelty=novelty_factor(go, to) if table else 1.0)


def _normalised_group_residuals(rows: Sequence[Any], group_out: Sequence[Any],
                                by_name: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(group, residual / widening) of each group-out prediction, the widening taken against the
    domain of the rows outside the prediction's group."""
    out = []
    domains: dict[str, Domain] = {}
    for p in group_out:
        r = by_name[p.name]
        g = f"{r.stack}@{r.generation}"
        if g not in domains:
            domains[g] = Domain.of([x for x in rows if f"{x.stack}@{x.generation}" != g])
        factor, _ = widening(domains[g], r.generation, r.workload)
        out.append((g, _log_residual(p) / factor))
    return out


def group_out_coverage(rows: Sequence[Any], group_out: Sequence[Any], table_out: Sequence[Any] = ()) -> dict[str, Any]:
    """How many held-out rows fall inside their range, each group's range fitted without it
    (nested: the group's own residuals never set its quantiles, nor, with ``table_out`` given,
    its :attr:`IntervalModel.novelty`): per group, over the rows, and over the groups (each
    group's coverage weighing one: what a new source can expect). ``quantile_*`` are the same of
    the ranges before the novelty widening."""
    by_name = {r.name: r for r in rows}
    norm = _normalised_group_residuals(rows, group_out, by_name)
    tables = [(f"{by_name[p.name].stack}@{by_name[p.name].generation}", _log_residual(p)) for p in table_out]
    inside: dict[str, list[tuple[bool, bool]]] = {}
    for (g, res) in norm:
        lo, hi = range_quantiles([(h, x) for h, x in norm if h != g])
        others = [x for h, x in tables if h != g]
        k = novelty_factor((lo, hi), _quantiles(others)) if others else 1.0
        inside.setdefault(g, []).append((lo * k <= res <= hi * k, lo <= res <= hi))
    out: dict[str, Any] = {"level": LEVEL, "rows": len(norm)}
    for key, i in (("", 0), ("quantile_", 1)):
        per = {g: 100.0 * sum(x[i] for x in v) / len(v) for g, v in inside.items()}
        out[f"{key}coverage_pct"] = (100.0 * sum(x[i] for v in inside.values() for x in v) / len(norm)
                                     if norm else float("nan"))
        out[f"{key}group_balanced_coverage_pct"] = sum(per.values()) / len(per) if per else float("nan")
        if not key:
            out["per_group"] = {g: {"rows": len(inside[g]), "coverage_pct": c} for g, c in per.items()}
    return out


@lru_cache(maxsize=1)
def packaged_model() -> IntervalModel | None:
    """The interval model written with the packaged profiles (``None`` when missing)."""
    path = Path(__file__).parent / "data" / PACKAGED
    try:
        return IntervalModel.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def interval_for(predicted_s: float, w: Any) -> Interval | None:
    """The packaged range around ``predicted_s`` for workload ``w``; ``None`` when no interval
    model is packaged. The same for every stack: the basis holds whole (stack, silicon) groups out."""
    from trainperf.predict.stacks import generation_of

    model = packaged_model()
    if model is None or not math.isfinite(predicted_s):
        return None
    return model.interval(predicted_s, w, generation_of(w.hardware))
