"""Honest ranges around a predicted step time, from held-out residuals.

A prediction is a point; how far off it may be depends on how far the workload is from what the
profiles were fitted on. The range comes from the residuals ``log(measured / predicted)`` of the
hold-out checks (:mod:`trainperf.predict.holdout`):

* a workload whose (software stack, silicon) pair has published tables in the fit is like a new
  table of a known pair: the **leave-one-table-out** residuals set its range;
* a pair the fit has no table of is like a held-out group: the **leave-one-(stack, silicon)-out**
  residuals set it;
* beyond the data the range widens by stated factors (:data:`WIDEN`): silicon with no published
  run at all, a sequence length, device count or precision beyond what was fitted on that
  silicon, a mixture-of-experts model where the fit has none.

Each class's quantiles are taken of the residuals *divided by the widening factor each held-out
row had*, so that on the held-out rows the nominal level is the real coverage; validate reports
that coverage (``trainperf validate``), computed with each group's quantiles fitted without it.
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
}
"""Multipliers of a range's log-width beyond the fitted data. Judgement, not a fit (the shared
tables have too few such rows to fit them): 3x for silicon no published run covers (kernel
physics alone carries it; end-to-end runs outside the table, ``benchmarks/new_silicon.py``,
were predicted -38% on MI300X and -46% on a power-limited B200 with torchtitan, +2% on B200
with DeepSpeed: the 1.5x first chosen held none of the torchtitan ones), 1.3x for a precision
never fitted on the silicon, 1.2x for an MoE model when no MoE run was fitted on it, and +25%
per doubling of the sequence length / +10% per doubling of the device count beyond the largest
fitted on that silicon."""

PACKAGED = "intervals.json"


@dataclass(frozen=True)
class Interval:
    """An ``level`` range of step seconds around a prediction."""

    low_s: float
    high_s: float
    level: float
    basis: str
    """Which held-out residuals set the range (``leave-one-table-out`` / ``leave-one-(stack,
    silicon)-out``)."""
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


def widening(domain: Domain, stack: str, silicon: str, w: Any) -> tuple[bool, float, tuple[str, ...]]:
    """(pair seen?, width multiplier, reasons) of workload ``w`` run by ``stack`` on ``silicon``
    against the fitted ``domain``."""
    seen = f"{stack}@{silicon}" in domain.pairs
    d = domain.silicon.get(silicon)
    factor = 1.0
    why: list[str] = []
    if d is None:
        factor *= WIDEN["unseen_silicon"]
        why.append(f"no published run on {silicon} silicon: kernel physics only (x{WIDEN['unseen_silicon']:g})")
        return seen, factor, tuple(why)
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
    return seen, factor, tuple(why)


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


@dataclass(frozen=True)
class IntervalModel:
    """Quantiles of normalised held-out residuals per class, and the fitted domain."""

    seen: tuple[float, float]
    """(low, high) quantiles of leave-one-table-out ``log(measured/predicted)``."""
    unseen: tuple[float, float]
    """The same of leave-one-(stack, silicon)-out residuals over each row's widening factor."""
    domain: Domain
    rows: Mapping[str, int] = field(default_factory=dict)

    def interval(self, predicted_s: float, w: Any, stack: str, silicon: str) -> Interval:
        seen, factor, why = widening(self.domain, stack, silicon, w)
        lo, hi = self.seen if seen else self.unseen
        basis = "leave-one-table-out" if seen else "leave-one-(stack, silicon)-out"
        return Interval(low_s=predicted_s * math.exp(lo * factor), high_s=predicted_s * math.exp(hi * factor),
                        level=LEVEL, basis=basis, widened_by=why)

    def to_dict(self) -> dict[str, Any]:
        return {"level": LEVEL, "seen": list(self.seen), "unseen": list(self.unseen),
                "domain": self.domain.to_dict(), "rows": dict(self.rows), "widen": dict(WIDEN)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> IntervalModel:
        return cls(seen=tuple(d["seen"]), unseen=tuple(d["unseen"]),
                   domain=Domain.from_dict(d["domain"]), rows=dict(d.get("rows", {})))


def _log_residual(p: Any) -> float:
    return math.log(p.measured_step_time_s / p.predicted_step_time_s)


def fit_interval_model(rows: Sequence[Any], table_out: Sequence[Any], group_out: Sequence[Any]) -> IntervalModel:
    """Quantiles from hold-out predictions of ``rows`` (``FitRow`` s): leave-one-table-out for
    known pairs; leave-one-group-out, each residual divided by the widening factor its row had
    against the fit without its group, for unknown pairs."""
    by_name = {r.name: r for r in rows}
    seen_res = [_log_residual(p) for p in table_out]
    unseen_res = _normalised_group_residuals(rows, group_out, by_name)
    return IntervalModel(seen=_quantiles(seen_res), unseen=_quantiles([r for _, r in unseen_res]),
                         domain=Domain.of(rows), rows={"seen": len(seen_res), "unseen": len(unseen_res)})


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
        _, factor, _ = widening(domains[g], r.stack, r.generation, r.workload)
        out.append((g, _log_residual(p) / factor))
    return out


def group_out_coverage(rows: Sequence[Any], group_out: Sequence[Any]) -> dict[str, Any]:
    """How many held-out rows fall inside their range, each group's range fitted without it
    (nested: the group's own residuals never set its quantiles). Per group and overall."""
    by_name = {r.name: r for r in rows}
    norm = _normalised_group_residuals(rows, group_out, by_name)
    inside: dict[str, list[bool]] = {}
    for (g, res) in norm:
        lo, hi = _quantiles([x for h, x in norm if h != g])
        inside.setdefault(g, []).append(lo <= res <= hi)
    total = [x for v in inside.values() for x in v]
    return {"level": LEVEL, "rows": len(total),
            "coverage_pct": 100.0 * sum(total) / len(total) if total else float("nan"),
            "per_group": {g: {"rows": len(v), "coverage_pct": 100.0 * sum(v) / len(v)} for g, v in inside.items()}}


@lru_cache(maxsize=1)
def packaged_model() -> IntervalModel | None:
    """The interval model written with the packaged profiles (``None`` when missing)."""
    path = Path(__file__).parent / "data" / PACKAGED
    try:
        return IntervalModel.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def interval_for(predicted_s: float, w: Any, stack: str | None = None) -> Interval | None:
    """The packaged range around ``predicted_s`` for workload ``w`` (its own stack unless
    ``stack`` names one); ``None`` when no interval model is packaged."""
    from trainperf.predict.stacks import DEFAULT_STACK, generation_of

    model = packaged_model()
    if model is None or not math.isfinite(predicted_s):
        return None
    st = str(stack or getattr(w, "stack", None) or DEFAULT_STACK)
    return model.interval(predicted_s, w, st, generation_of(w.hardware))
