"""Many workloads through the step model at once.

Fitting profiles evaluates the step model over every published row hundreds of times. Rows
whose categorical fields agree (same GEMM structure, policy, precision kind, kernels, ...) are
stacked into one :class:`~trainperf.predict.step_model.layout.Layout` whose numeric fields are
numpy arrays (device counts, degrees, batch, layer counts, widths), the way the planner
evaluates many plans; knob values may differ per row too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainperf.predict.efficiency import KnobValues
from trainperf.predict.step_model import Layout, step_time_s
from trainperf.predict.step_model.layout import Matmul

_NUMERIC = (int, float, np.integer, np.floating)


def _is_number(v: Any) -> bool:
    return not isinstance(v, bool | np.bool_) and isinstance(v, _NUMERIC)


def _is_matmuls(v: Any) -> bool:
    return isinstance(v, tuple) and bool(v) and isinstance(v[0], Matmul)


def _signature(lay: Layout) -> tuple[Any, ...]:
    """The categorical fields of a layout (rows with equal signatures stack)."""
    sig: list[Any] = []
    for part in dataclasses.fields(lay):
        obj = getattr(lay, part.name)
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if _is_matmuls(v):
                sig.append((f.name, tuple(m.split for m in v)))
            elif not _is_number(v):
                sig.append((f.name, _frozen(v)))
    return tuple(sig)


def _frozen(v: Any) -> Any:
    """``v`` as a hashable key: lists and tuples as tuples, dicts as their sorted items (a CPU's
    measured attention table holds dicts of lists)."""
    if isinstance(v, dict):
        return ("dict", tuple(sorted((_frozen(k), _frozen(x)) for k, x in v.items())))
    if isinstance(v, list | tuple):
        return tuple(_frozen(x) for x in v)
    return v


def _stack_part(objs: Sequence[Any]) -> Any:
    """One part of a layout (a dataclass) with its numeric fields stacked over ``objs``."""
    first = objs[0]
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(first):
        vals = [getattr(o, f.name) for o in objs]
        if _is_matmuls(vals[0]):
            kw[f.name] = tuple(Matmul(np.array([float(v[j].in_features) for v in vals]),
                                      np.array([float(v[j].out_features) for v in vals]), m.split)
                               for j, m in enumerate(vals[0]))
        elif _is_number(vals[0]):
            kw[f.name] = np.array([float(v) for v in vals])
        else:
            kw[f.name] = vals[0]
    return type(first)(**kw)


def stack_layouts(layouts: Sequence[Layout]) -> Layout:
    """One layout of arrays from layouts with equal signatures (one row: that layout)."""
    if len(layouts) == 1:
        return layouts[0]
    return Layout(**{f.name: _stack_part([getattr(lay, f.name) for lay in layouts])
                     for f in dataclasses.fields(Layout)})


@dataclass(frozen=True)
class Group:
    """Rows sharing every categorical field: their indices and stacked layout."""

    index: np.ndarray
    layout: Layout


def group_layouts(layouts: Sequence[Layout]) -> list[Group]:
    """Stack layouts (:func:`~trainperf.predict.step_model.layout.layout_of`) into groups."""
    by_sig: dict[tuple[Any, ...], list[int]] = {}
    for i, lay in enumerate(layouts):
        by_sig.setdefault(_signature(lay), []).append(i)
    return [Group(np.array(idx), stack_layouts([layouts[i] for i in idx])) for idx in by_sig.values()]


def step_times(groups: Sequence[Group], knobs: Mapping[str, np.ndarray], n: int,
               only: Sequence[int] | None = None) -> np.ndarray:
    """Predicted step seconds of ``n`` rows; ``knobs``: knob name -> per-row values.

    ``only``: evaluate just these groups (others are left NaN)."""
    out = np.full(n, np.nan)
    for gi in (range(len(groups)) if only is None else only):
        g = groups[gi]
        one = len(g.index) == 1
        kn = KnobValues(**{name: (float(v[g.index[0]]) if one else v[g.index]) for name, v in knobs.items()})
        out[g.index] = np.asarray(step_time_s(g.layout, kn), dtype=float)
    return out
