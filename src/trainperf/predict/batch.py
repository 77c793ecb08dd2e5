"""Many workloads through :func:`~trainperf.predict.core.step_core` at once.

Fitting profiles evaluates the step model over every published row hundreds of times. Rows
whose non-numeric features agree (same GEMM shapes, policy, precision kind, ...) are stacked
into one call with numpy arrays for the numbers that differ (device counts, degrees, batch,
layer counts), the way the planner evaluates many plans; knob values may differ per row too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainperf.predict import core

_NUMERIC = (int, float, np.integer, np.floating)


_MATS = ("attn_mats", "mlp_mats", "expert_mats")
"""GEMM lists ``((in, out, split, tag), ...)``: rows group by (split, tag); the widths stack."""


def _signature(f: Mapping[str, Any]) -> tuple:
    sig: list[tuple[str, Any]] = []
    for k, v in sorted(f.items()):
        if k in _MATS:
            sig.append((k, tuple((m[2], m[3]) for m in v)))
        elif isinstance(v, bool) or not isinstance(v, _NUMERIC):
            sig.append((k, v))
    return tuple(sig)


def _stack_mats(mats: Sequence[tuple], n: int) -> tuple:
    if n == 1:
        return tuple(mats[0])
    return tuple((np.array([float(m[j][0]) for m in mats]), np.array([float(m[j][1]) for m in mats]),
                  mats[0][j][2], mats[0][j][3]) for j in range(len(mats[0])))


@dataclass(frozen=True)
class Group:
    """Rows sharing every non-numeric feature: their indices and stacked features."""

    index: np.ndarray
    features: dict[str, Any]


def group_features(features: Sequence[Mapping[str, Any]]) -> list[Group]:
    """Stack feature dicts (:func:`core.workload_features`) into groups."""
    by_sig: dict[tuple, list[int]] = {}
    for i, f in enumerate(features):
        by_sig.setdefault(_signature(f), []).append(i)
    groups = []
    for idx in by_sig.values():
        first = features[idx[0]]
        stacked: dict[str, Any] = {}
        for k, v in first.items():
            if k in _MATS:
                stacked[k] = _stack_mats([features[i][k] for i in idx], len(idx))
            elif isinstance(v, bool) or not isinstance(v, _NUMERIC):
                stacked[k] = v
            elif len(idx) == 1:
                stacked[k] = float(v)
            else:
                stacked[k] = np.array([float(features[i][k]) for i in idx])
        groups.append(Group(index=np.array(idx), features=stacked))
    return groups


def step_times(groups: Sequence[Group], knobs: Mapping[str, np.ndarray], n: int,
               only: Sequence[int] | None = None) -> np.ndarray:
    """Predicted step seconds of ``n`` rows; ``knobs``: knob name -> per-row values.

    ``only``: evaluate just these groups (others are left NaN)."""
    out = np.full(n, np.nan)
    for gi in (range(len(groups)) if only is None else only):
        g = groups[gi]
        k = {name: (v[g.index] if len(g.index) > 1 else float(v[g.index[0]])) for name, v in knobs.items()}
        out[g.index] = np.asarray(core.step_core(g.features, k)["step_time_s"], dtype=float)
    return out
