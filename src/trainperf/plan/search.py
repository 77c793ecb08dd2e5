"""Rank every valid plan by an objective: enumerate, evaluate vectorised, re-predict the best.

1. :func:`~trainperf.plan.space.enumerate_candidates` builds the executable plans as arrays;
2. :func:`~trainperf.plan.vectorized.evaluate` predicts step time and memory per device for all
   of them at once (the predictor's formulas on arrays);
3. plans that do not fit are rejected (counted as ``oom``); the rest are ranked by the
   objective — tokens/s (``throughput``), days to train ``train_tokens`` (``time``) or dollars
   to train them (``cost``) — ties broken by less memory per device;
4. the best ``rerank`` plans are predicted again with the scalar predictor
   (:func:`trainperf.predict.predict`), whose numbers, breakdown and bottleneck are what the
   output shows; the top ``top_k`` of that re-ranking are returned.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast, overload

import numpy as np

from trainperf.errors import SpecError
from trainperf.plan import scalar, vectorized
from trainperf.plan.space import (
    AC_POLICIES,
    REASONS,
    SCHEDULES_BY_CODE,
    SLOT_EMBEDDING,
    SLOT_LOSS,
    Candidates,
    SearchSpace,
    enumerate_candidates,
    slot_stages,
)
from trainperf.predict.stack_capabilities import capabilities_of, stacks_for
from trainperf.specs.hardware import PRECISIONS, Hardware
from trainperf.specs.model import ModelSpec
from trainperf.specs.parallel import ParallelPlan, PipelineSchedule
from trainperf.specs.workload import CPU_PRECISIONS, Workload

SECONDS_PER_DAY = 86_400.0
OBJECTIVES: tuple[str, ...] = ("throughput", "time", "cost")


@dataclass(frozen=True)
class Objective:
    """What to rank by. ``throughput``: tokens/s, highest first; ``time``: days to train
    ``train_tokens``, fewest first; ``cost``: ``usd_per_device_hour * devices * hours``, cheapest
    first. With one device count, time and throughput rank alike; across a range they differ."""

    name: str = "throughput"
    train_tokens: float | None = None
    usd_per_device_hour: float | None = None

    def __post_init__(self) -> None:
        if self.name not in OBJECTIVES:
            raise SpecError("objective", self.name, f"one of {', '.join(OBJECTIVES)}")
        if self.name in ("time", "cost") and not (self.train_tokens and self.train_tokens > 0):
            raise SpecError("train_tokens", self.train_tokens,
                            f"a positive token count with --objective {self.name} (--train-tokens)")
        if self.name == "cost" and not (self.usd_per_device_hour and self.usd_per_device_hour > 0):
            raise SpecError("usd_per_device_hour", self.usd_per_device_hour,
                            "a positive price with --objective cost (--usd-per-device-hour)")
        if self.train_tokens is not None and not self.train_tokens > 0:
            raise SpecError("train_tokens", self.train_tokens, "a positive token count")

    @overload
    def score(self, tokens_per_s: float, num_devices: float) -> float: ...
    @overload
    def score(self, tokens_per_s: np.ndarray, num_devices: np.ndarray) -> np.ndarray: ...

    def score(self, tokens_per_s: float | np.ndarray, num_devices: float | np.ndarray) -> float | np.ndarray:
        """Lower is better: ``-tokens/s``, days, or dollars (arrays or floats)."""
        if self.name == "throughput":
            return -tokens_per_s
        assert self.train_tokens is not None  # __post_init__ requires it for time and cost
        days = self.train_tokens / tokens_per_s / SECONDS_PER_DAY
        if self.name == "time":
            return days
        assert self.usd_per_device_hour is not None  # __post_init__ requires it for cost
        return days * 24.0 * num_devices * self.usd_per_device_hour


@dataclass
class RankedPlan:
    """One plan of the final ranking, with the scalar predictor's figures."""

    rank: int
    workload: Workload
    step_time_s: float
    tokens_per_s: float
    mfu_pct: float
    memory_GiB: float
    capacity_GiB: float
    fits: bool
    bottleneck: str
    breakdown_s: dict[str, float]
    memory_breakdown_GiB: dict[str, float]
    days_to_train: float | None = None
    cost_usd: float | None = None
    vector_step_time_s: float = float("nan")
    """The vectorised evaluator's step time for the same plan (equal to ``step_time_s``, except
    when :func:`search` re-predicted the plan with a stack's profile, ``per_stack``)."""
    stacks: tuple[str, ...] = ()
    """Packaged stacks whose ``[capabilities]`` can run this plan."""
    interval_s: tuple[float, float] | None = None
    """The scalar prediction's 80% range of step seconds (:mod:`trainperf.predict.intervals`)."""

    @property
    def label(self) -> str:
        return describe_plan(self.workload)

    def to_dict(self) -> dict[str, Any]:
        w = self.workload
        p = w.plan
        return {
            "rank": self.rank, "plan": self.label, "num_devices": w.num_devices,
            "dp": p.dp, "fsdp": p.fsdp, "zero_stage": p.zero_stage, "tp": p.tp,
            "sequence_parallel": p.sequence_parallel, "pp": p.pp, "vpp": p.vpp,
            "pp_schedule": p.pp_schedule if p.pp > 1 else None, "cp": p.cp,
            "ep": p.ep, "etp": p.expert_tp, "global_batch": w.global_batch, "micro_batch": w.micro_batch,
            "grad_accum_steps": w.grad_accum_steps, "activation_checkpointing": w.activation_checkpointing,
            "precision": w.precision, "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_device": self.tokens_per_s / w.num_devices, "mfu_pct": self.mfu_pct,
            "memory_per_device_GiB": self.memory_GiB, "capacity_GiB": self.capacity_GiB, "fits": self.fits,
            "bottleneck": self.bottleneck, "breakdown": dict(self.breakdown_s),
            "memory_breakdown_GiB": dict(self.memory_breakdown_GiB),
            "days_to_train": self.days_to_train, "cost_usd": self.cost_usd,
            "embedding_slot": p.account_for_embedding_in_pipeline_split,
            "loss_slot": p.account_for_loss_in_pipeline_split, "last_stage_layers": p.last_stage_layers,
            "first_stage_layers": p.first_stage_layers,
            "stacks": list(self.stacks),
            "step_time_interval_s": list(self.interval_s) if self.interval_s else None,
        }


@dataclass
class SearchResult:
    """Everything one search found."""

    model: ModelSpec
    hardware: Hardware
    space: SearchSpace
    objective: Objective
    considered: int
    rejected: Counter
    ranked: Candidates
    """Plans that fit, best first (vectorised figures in ``step_time_s`` etc.)."""
    step_time_s: np.ndarray
    memory_GiB: np.ndarray
    tokens_per_s: np.ndarray
    top: list[RankedPlan] = field(default_factory=list)
    """The re-predicted plans that fit, best first (the output shows the first ``top_k``)."""
    top_k: int = 5
    closest: dict[str, Any] | None = None
    """When nothing fits: the plan that needs the least memory per device, and its figures."""
    elapsed_s: float = 0.0
    all_cands: Candidates | None = None
    """Every executable candidate (fitting or not), for explanations."""
    all_eval: Any = None
    """The vectorised evaluation of ``all_cands``."""
    collapsed: int = 0
    """Plans that fit but are not listed: they differ from a better-ranked plan only in ZeRO stage."""

    @property
    def feasible(self) -> int:
        """Plans that fit (listed ones plus the collapsed ZeRO-stage variants)."""
        return len(self.ranked) + self.collapsed

    def reasons(self) -> list[tuple[str, str, int]]:
        """(key, text, count) of every rejection reason, most frequent first."""
        return [(k, REASONS.get(k, k), n) for k, n in self.rejected.most_common()]

    def rank_of(self, num_devices: int | None = None, **want: Any) -> int | None:
        """1-based rank (in the vectorised ranking) of the best plan matching ``want``.

        Keys are candidate columns (``dp fsdp zero tp sp pp vpp cp ep micro_batch global_batch``)
        plus ``ac`` (a policy name) and ``precision`` (a dtype); unspecified columns are free.
        """
        c = self.ranked
        mask = np.ones(len(c), dtype=bool)
        if num_devices is not None:
            mask &= c["num_devices"] == num_devices
        for k, v in want.items():
            if k == "ac":
                v = AC_POLICIES.index(v)
            elif k == "precision":
                v = c.precisions.index(v) if v in c.precisions else -1
            mask &= c[k] == int(v)
        idx = np.flatnonzero(mask)
        return int(idx[0]) + 1 if idx.size else None


def describe_plan(w: Workload) -> str:
    """Short label: parallel degrees, micro batch, checkpointing, and the dtype unless bf16
    (``fsdp=16 tp=8 sp mbs=2 AC=full``)."""
    p = w.plan
    parts = [p.describe() if p.describe() != "single device" else "dp=1"]
    parts.append(f"mbs={w.micro_batch}")
    parts.append(f"AC={w.activation_checkpointing}")
    if w.precision != "bf16":
        parts.append(w.precision)
    return " ".join(parts)


def workload_of(model: ModelSpec, hardware: Hardware, space: SearchSpace, cands: Candidates,
                i: int) -> Workload:
    """The validated :class:`Workload` of candidate row ``i``."""

    r = cands.row(i)
    slots = int(r["slots"])
    sched: PipelineSchedule = capabilities_of(space.stack).schedule_for(int(r["vpp"])) if int(r["pp"]) > 1 else "1f1b"
    if int(r["pp"]) > 1 and int(r["sched"]):
        sched = cast(PipelineSchedule, SCHEDULES_BY_CODE[int(r["sched"])])
    _emb, _loss, first_layers, last_layers = slot_stages(model.layers, int(r["pp"]), slots)
    first = int(first_layers) if first_layers >= 0 else None
    last = int(last_layers) if last_layers >= 0 else None
    plan = ParallelPlan(dp=int(r["dp"]), fsdp=int(r["fsdp"]), zero_stage=int(r["zero"]), tp=int(r["tp"]),
                        sequence_parallel=bool(r["sp"]), pp=int(r["pp"]), vpp=int(r["vpp"]),
                        cp=int(r["cp"]), ep=int(r["ep"]), pp_schedule=sched,
                        account_for_embedding_in_pipeline_split=bool(slots & SLOT_EMBEDDING),
                        account_for_loss_in_pipeline_split=bool(slots & SLOT_LOSS), last_stage_layers=last,
                        first_stage_layers=first,
                        etp=None if int(r["etp"]) == int(r["tp"]) else int(r["etp"]))
    return Workload(model=model, hardware=hardware, num_devices=int(r["num_devices"]),
                    seq_len=space.seq_len, global_batch=int(r["global_batch"]),
                    micro_batch=int(r["micro_batch"]), plan=plan,
                    devices_per_node=min(space.devices_per_node, int(r["num_devices"])),
                    precision=str(r["precision"]), activation_checkpointing=str(r["ac"]),
                    **space.software(str(r["precision"]), int(r["tp"])))


def _rank_order(score: np.ndarray, memory: np.ndarray) -> np.ndarray:
    """Indices by score, ties broken by less memory (a lexsort, done only on the tied runs)."""
    order = np.argsort(score, kind="stable")
    s = score[order]
    eq = s[1:] == s[:-1]
    if eq.any():
        tied = np.zeros(s.shape[0], dtype=bool)
        tied[1:] |= eq
        tied[:-1] |= eq
        pos = np.flatnonzero(tied)
        sub = order[pos]
        order[pos] = sub[np.lexsort((memory[sub], score[sub]))]
    return order


def _first_of_each_layout(c: Candidates, rows: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``order`` (positions in ``rows`` of ``c``) without the plans that differ from a
    better-ranked one only in ZeRO stage."""
    r = rows[order]
    if c.groups is not None:  # product table: layout row and (checkpointing, precision) group
        prod = r if c.sel is None else c.sel[r]
        g, b = np.divmod(prod, c.n_layouts)
        keys = c.cols["layout"][b].astype(np.int64) * c.groups.shape[0] + g
    else:
        n_prec = max(len(c.precisions), 1)
        keys = (c["layout"][r].astype(np.int64) * len(AC_POLICIES) + c["ac"][r]) * n_prec + c["precision"][r]
    _, first = np.unique(keys, return_index=True)
    return order[np.sort(first)]


def search(model: ModelSpec, hardware: Hardware, space: SearchSpace, objective: Objective | None = None,
           *, top_k: int = 5, rerank: int = 20, calibration: Any = None,
           collapse_zero: bool = True, convention: str | None = None, per_stack: bool = False) -> SearchResult:
    """Search ``space`` for ``model`` on ``hardware``; see the module docstring for the steps.

    ``collapse_zero``: list each layout once, with its best ZeRO stage (the others are counted
    in ``collapsed``; they would otherwise fill the top of the list with near-ties).

    ``calibration`` is passed to the predictor (fitted efficiency knobs) for both the vectorised
    and the scalar evaluation; ``convention`` names the FLOP convention of the MFU shown.
    ``per_stack`` (with the generic profile only): re-predict each of the best ``rerank`` plans
    with the profile of every packaged stack that runs it and keep the fastest, so the figures
    and the ranking shown are those ``trainperf predict --stack NAME`` gives for that plan (the
    workload of each :class:`RankedPlan` then names its stack).
    Returns the result even when nothing fits (``top`` empty, ``closest`` set) so the caller
    can explain why.
    """
    t0 = time.perf_counter()
    objective = objective or Objective()
    for p in space.precisions:
        if not (hardware.supports(p) or (hardware.kind == "cpu" and p in CPU_PRECISIONS)):
            have = ", ".join(q for q in PRECISIONS if hardware.supports(q))
            raise SpecError("training.precision", p, f"{hardware.id} supports {have}")
    cands = enumerate_candidates(model, hardware, space)
    rejected = Counter(cands.rejected)
    ev = vectorized.evaluate(cands, model, hardware, space.seq_len, space.devices_per_node,
                             calibration=calibration, software=space.software,
                             scale_up_domain=hardware.scale_up_domain, fitting_only=True)
    # the planner proposes only plans that leave its margin free (SearchSpace.memory_margin)
    fits = ev.memory_GiB <= space.memory_limit_GiB(ev.capacity_GiB)
    n_oom = int((~fits).sum())
    if n_oom:
        rejected["oom"] += n_oom
    closest = None
    if len(cands) and not fits.any():
        j = int(np.argmin(ev.memory_GiB))
        closest = {"index": j, "workload": workload_of(model, hardware, space, cands, j),
                   "memory_GiB": float(ev.memory_GiB[j]), "capacity_GiB": float(ev.capacity_GiB),
                   "limit_GiB": space.memory_limit_GiB(float(ev.capacity_GiB)), "margin": space.memory_margin}
    fit_idx = np.flatnonzero(fits)
    st, mem = ev.step_time_s[fit_idx], ev.memory_GiB[fit_idx]
    tps = cands["global_batch"][fit_idx] * float(space.seq_len) / st
    order = _rank_order(objective.score(tps, cands["num_devices"][fit_idx]), mem)
    n_fit = order.size
    if collapse_zero:
        order = _first_of_each_layout(cands, fit_idx, order)
    ranked = cands.take(fit_idx[order])
    result = SearchResult(model, hardware, space, objective, cands.considered, rejected, ranked,
                          st[order], mem[order], tps[order], closest=closest, all_cands=cands, all_eval=ev,
                          collapsed=n_fit - order.size)
    if rerank > 0:
        result.top = rescore(result, rerank=max(rerank, top_k, 2), calibration=calibration,
                             convention=convention, per_stack=per_stack)
    result.top_k = top_k
    result.elapsed_s = time.perf_counter() - t0
    return result


def _interval(prediction: Any) -> tuple[float, float] | None:
    iv = getattr(prediction, "interval", None)
    return (float(iv.low_s), float(iv.high_s)) if iv is not None else None


def _stack_prediction(w: Workload, limit: Any, calibration: Any, convention: str | None) -> tuple[Workload, Any]:
    """``w`` predicted with the profile of each packaged stack that runs it: the fastest that
    fits under ``limit`` (a capacity -> GiB function), else the fastest (``w`` itself, generic,
    when no packaged stack runs it)."""
    preds = [(ws, scalar.predict(ws, calibration=calibration, convention=convention))
             for ws in (w.replace(stack=st) for st in stacks_for(w))]
    if not preds:
        return w, scalar.predict(w, calibration=calibration, convention=convention)
    fitting = [(ws, s) for ws, s in preds if s.fits and s.memory_GiB <= limit(s.capacity_GiB)]
    return min(fitting or preds, key=lambda pair: pair[1].step_time_s)


def rescore(result: SearchResult, *, rerank: int, calibration: Any = None,
            convention: str | None = None, per_stack: bool = False) -> list[RankedPlan]:
    """Predict the best ``rerank`` plans with the scalar predictor; return those that fit, ranked
    (``per_stack``: see :func:`search`)."""
    out: list[RankedPlan] = []
    obj = result.objective
    per_stack = per_stack and result.space.stack == "generic"
    for i in range(min(rerank, len(result.ranked))):
        w = workload_of(result.model, result.hardware, result.space, result.ranked, i)
        if per_stack:
            w, s = _stack_prediction(w, result.space.memory_limit_GiB, calibration, convention)
        else:
            s = scalar.predict(w, calibration=calibration, convention=convention)
        tps = w.tokens_per_step / s.step_time_s
        days = obj.train_tokens / tps / SECONDS_PER_DAY if obj.train_tokens else None
        cost = (days * 24.0 * w.num_devices * obj.usd_per_device_hour
                if days is not None and obj.usd_per_device_hour else None)
        out.append(RankedPlan(0, w, s.step_time_s, tps, s.mfu_pct, s.memory_GiB, s.capacity_GiB, s.fits,
                              s.bottleneck, s.breakdown_s, s.memory_breakdown_GiB, days, cost,
                              float(result.step_time_s[i]), stacks_for(w), _interval(s.raw)))
    limit = result.space.memory_limit_GiB
    out = [p for p in out if p.fits and p.memory_GiB <= limit(p.capacity_GiB)]
    out.sort(key=lambda p: (float(obj.score(p.tokens_per_s, p.workload.num_devices)), p.memory_GiB))
    for r, p in enumerate(out, 1):
        p.rank = r
    return out
