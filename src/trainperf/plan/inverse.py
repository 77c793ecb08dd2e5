"""The inverse question: the smallest device count that trains ``T`` tokens in ``D`` days.

Device counts are multiples of the node size. The search doubles from one node until the best
plan's predicted throughput reaches ``T / (D * 86400)`` tokens/s, then bisects between the
last count that failed and the first that succeeded. Throughput is not strictly monotone in
the device count (which plans exist depends on how the count and the global batch factor), so
the bisection finds *a* boundary, the smallest in the bracket as long as throughput is
monotone there; every count it evaluated is returned so the caller can show them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from trainperf.errors import SpecError
from trainperf.plan.search import SECONDS_PER_DAY, Objective, SearchResult, search
from trainperf.plan.space import SearchSpace

MAX_DOUBLINGS = 20
PER_STACK_RERANK = 5
"""With ``per_stack``: the best plans of each device count re-predicted with their stacks' profiles."""


@dataclass
class InverseResult:
    """Answer to "how many devices to train ``train_tokens`` in ``target_days``"."""

    target_days: float
    train_tokens: float
    required_tokens_per_s: float
    num_devices: int | None
    """Smallest count found (None when even the largest tried is too slow)."""
    result: SearchResult | None
    """The full search at ``num_devices`` (or at the fastest count tried when none suffices)."""
    tried: dict[int, float] = field(default_factory=dict)
    """Device count -> best predicted tokens/s (0 when no plan fits)."""

    def to_dict(self) -> dict[str, Any]:
        best = self.result.top[0].to_dict() if self.result and self.result.top else None
        return {"target_days": self.target_days, "train_tokens": self.train_tokens,
                "required_tokens_per_s": self.required_tokens_per_s, "num_devices": self.num_devices,
                "best_plan": best,
                "tried": [{"num_devices": n, "tokens_per_s": t,
                           "days": (self.train_tokens / t / SECONDS_PER_DAY) if t > 0 else None}
                          for n, t in sorted(self.tried.items())]}


def smallest_device_count(model: Any, hardware: Any, space: SearchSpace, *, target_days: float,
                          train_tokens: float, top_k: int = 5, calibration: Any = None,
                          max_devices: int = 1 << 20, convention: str | None = None,
                          per_stack: bool = False) -> InverseResult:
    """See the module docstring. ``space.num_devices`` is ignored (the count is the unknown);
    ``per_stack`` is :func:`~trainperf.plan.search.search`'s, for the search at the count found."""
    if not target_days > 0:
        raise SpecError("target_days", target_days, "a positive number of days")
    if not train_tokens > 0:
        raise SpecError("train_tokens", train_tokens, "a positive token count (--train-tokens)")
    need = train_tokens / (target_days * SECONDS_PER_DAY)
    unit = space.devices_per_node
    tried: dict[int, float] = {}

    def best_tps(n: int) -> float:
        if n not in tried:
            r = search(model, hardware, dataclasses.replace(space, num_devices=(n,)),
                       rerank=PER_STACK_RERANK if per_stack else 0, calibration=calibration, per_stack=per_stack)
            if per_stack and r.top:  # the figures the answer shows: each plan's fastest stack
                tried[n] = r.top[0].tokens_per_s
            else:
                tried[n] = float(r.tokens_per_s.max()) if r.feasible else 0.0
        return tried[n]

    n = unit
    lo = 0
    for _ in range(MAX_DOUBLINGS + 1):
        if n > max_devices or best_tps(n) >= need:
            break
        lo = n
        n *= 2
    else:
        n = max_devices + 1
    obj = Objective("time", train_tokens=train_tokens)
    if n > max_devices or best_tps(n) < need:
        fastest = max(tried, key=lambda k: tried[k]) if tried and max(tried.values()) > 0 else None
        res = (search(model, hardware, dataclasses.replace(space, num_devices=(fastest,)), obj, top_k=top_k,
                      calibration=calibration, convention=convention, per_stack=per_stack) if fastest else None)
        return InverseResult(target_days, train_tokens, need, None, res, tried)
    hi = n
    while hi - lo > unit:
        mid = (lo + hi) // 2 // unit * unit
        if mid <= lo or mid >= hi:
            break
        if best_tps(mid) >= need:
            hi = mid
        else:
            lo = mid
    res = search(model, hardware, dataclasses.replace(space, num_devices=(hi,)), obj, top_k=top_k,
                 calibration=calibration, convention=convention, per_stack=per_stack)
    if per_stack and res.top:  # the full search re-predicts more plans: its best is the count's figure
        tried[hi] = max(tried[hi], res.top[0].tokens_per_s)
    return InverseResult(target_days, train_tokens, need, hi, res, tried)
