"""Expert-parallel token dispatch and combine: how fast each kernel family moves a rank's tokens
over one link level, per silicon.

An MoE layer sends each token to the ranks holding its top-k experts (dispatch) and brings the
expert outputs back (combine). Four kernel families do it:

* ``nccl``: an NCCL/RCCL all-to-all of the permuted tokens, ``topk`` copies each (Megatron-Core's
  ``alltoall`` dispatcher, torchtitan's ``all_to_all_single``, XLA's all-to-all);
* ``deepep``: DeepSeek's DeepEP normal kernels; ``hybrid-ep``: NVIDIA's Hybrid-EP; ``mori``: AMD's
  MORI-EP. These send a token once per destination rank within a scale-up domain and once per
  destination domain across domains (DeepEP forwards over NVLink what arrived over RDMA), so they
  move fewer bytes than ``topk`` copies (:func:`copies_per_token`).

One call of a family over ``n`` ranks, ``k`` of them per scale-up domain and ``N = n/k`` domains::

    time = max over levels of max(latency_us, level bytes / (eff(ranks) x link x S/(S + half_bytes)))

with ``S`` the level's buffer: within the domain the ``k`` members' exchange of ``S_call k/n``
(``S_call`` = the rank's tokens x destinations x hidden x bytes per element), across domains the
bytes that leave the rank's NIC.

``link`` is the catalog's per-device bandwidth of the level (``intra_node_link_GB_per_s`` within
the domain, ``inter_node_link_GB_per_s`` across), ``eff(ranks)`` the measured efficiency of the
family's dispatch or combine at that group size (interpolated in log2(ranks) between measured
groups, held flat outside them; on an xGMI mesh a smaller group than measured keeps (ranks-1)/7 of
it, as the collectives' rule). An efficiency above 1 means the family's own byte count (which
this module charges the same way) exceeds what crossed the wire. Data, fitting and fallbacks:
docs/KERNELS.md; the fit is ``tools/kernel_fitting/moe.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from trainperf import vec
from trainperf.errors import UnknownNameError
from trainperf.predict.kernels._params import check_silicon, params

FAMILIES = ("nccl", "deepep", "hybrid-ep", "mori")
OPS = ("dispatch", "combine")
LEVELS = ("scale-up", "scale-out")
DEDUP_FAMILIES = frozenset({"deepep", "hybrid-ep", "mori"})
"""Families that send a token once per destination rank (and once per destination domain across
domains) rather than once per expert: DeepEP's README ("normal kernels ... NVLink and RDMA
forwarding": a token crosses RDMA once per node and is forwarded over NVLink), Hybrid-EP (the same
hierarchy), MORI-EP (its tuning files' bandwidth counts tokens x distinct destination ranks)."""


@dataclass(frozen=True, slots=True)
class LevelDispatch:
    """One family's behaviour on one link level of a silicon."""

    ranks: tuple[float, ...]
    """Group sizes measured (ascending)."""
    dispatch: tuple[float, ...]
    """Efficiency of the dispatch at each measured group size (fraction of the level's link)."""
    combine: tuple[float, ...]
    half_bytes: float
    """Rank's bytes per call at which the size law halves the efficiency."""
    latency_us: float
    """The smallest call."""

    def efficiency(self, op: str, ranks: Any) -> Any:
        """The op's efficiency at a group of ``ranks`` (a number or an array): interpolated in
        log2(ranks), flat outside the measured groups."""
        ys = self.dispatch if op == "dispatch" else self.combine
        return _interp(self.ranks, ys, ranks)


@dataclass(frozen=True, slots=True)
class DispatchModel:
    """A family's dispatch/combine on a silicon, both levels (what the step model reads)."""

    family: str
    dedup: bool
    """Sends a token once per destination rank / domain (:data:`DEDUP_FAMILIES`)."""
    up: LevelDispatch
    out: LevelDispatch
    mesh: bool
    """xGMI mesh (CDNA): a group smaller than measured within a node uses fewer links."""


def _interp(xs: tuple[float, ...], ys: tuple[float, ...], x: Any) -> Any:
    if len(xs) == 1:
        return ys[0] + 0.0 * x
    if vec.is_nonbool_number(x):
        if x <= xs[0]:
            return ys[0]
        for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:], strict=False):
            if x <= x1:
                t = (math.log2(x) - math.log2(x0)) / (math.log2(x1) - math.log2(x0))
                return y0 + t * (y1 - y0)
        return ys[-1]
    import numpy as np

    xa = np.log2(np.maximum(np.asarray(x, float), 1.0))
    return np.interp(xa, np.log2(np.asarray(xs)), np.asarray(ys))


def _level(entry: dict[str, Any]) -> LevelDispatch:
    d, c = entry["dispatch"], entry["combine"]
    return LevelDispatch(tuple(float(r) for r in d["ranks"]), tuple(float(e) for e in d["effs"]),
                         tuple(float(e) for e in c["effs"]), float(entry["half_bytes"]["value"]),
                         float(entry["latency_us"]["value"]))


@lru_cache(maxsize=256)
def dispatch_model(silicon: str, family: str) -> DispatchModel:
    """The :class:`DispatchModel` of ``family`` on ``silicon`` (measured, or the documented
    fallback: see ``describe`` in ``tools/kernels_table.py``)."""
    check_silicon(silicon)
    if family not in FAMILIES:
        raise UnknownNameError("MoE dispatcher", family, FAMILIES)
    e = params()["expert_dispatch"][silicon][family]
    mesh = bool(params()["collectives"][silicon]["scale-up"].get("mesh"))
    return DispatchModel(family, family in DEDUP_FAMILIES, _level(e["scale-up"]), _level(e["scale-out"]), mesh)


def efficiency(silicon: str, family: str, op: str, level: str, ranks: Any) -> Any:
    """Fraction of the level's per-device link bandwidth ``family``'s ``op`` (dispatch or combine)
    reaches for large calls at a group of ``ranks`` (a number or an array)."""
    if op not in OPS:
        raise UnknownNameError("MoE dispatch op", op, OPS)
    if level not in LEVELS:
        raise UnknownNameError("level", level, LEVELS)
    m = dispatch_model(silicon, family)
    lvl = m.up if level == "scale-up" else m.out
    eff = lvl.efficiency(op, ranks)
    if m.mesh and level == "scale-up":
        eff = eff * vec.minimum((ranks - 1.0) / 7.0, 1.0)
    return eff


def distinct(n: Any, topk: Any) -> Any:
    """Expected distinct destinations among ``topk`` drawn uniformly from ``n``:
    ``n (1 - (1 - 1/n)^topk)`` (arrays welcome)."""
    return n * (1.0 - (1.0 - 1.0 / n) ** topk)


def copies_per_token(dedup: bool, n: Any, k: Any, nodes: Any, topk: Any) -> tuple[Any, Any, Any]:
    """(copies the rank's call holds, copies to other ranks of its domain, copies to other domains)
    per token it dispatches over a group of ``n`` ranks, ``k`` per domain, ``nodes`` domains, each
    token to ``topk`` experts spread uniformly over the ranks.

    ``topk`` copies (NCCL: one per expert): ``topk (k-1)/n`` within the domain, ``topk (N-1)/N``
    across. A deduplicating family: one per distinct destination rank, :func:`distinct`\\ (n, topk),
    of which ``(k-1)/n`` stay in the domain; across domains one per distinct remote domain,
    ``distinct(N, topk) (N-1)/N``."""
    if dedup:
        ranks = distinct(n, topk)
        return ranks, ranks * (k - 1.0) / n, distinct(nodes, topk) * (nodes - 1.0) / nodes
    return topk + 0.0 * n, topk * (k - 1.0) / n, topk * (nodes - 1.0) / nodes
