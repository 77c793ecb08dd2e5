"""Sweeps: runs of one workload at several device counts, and their scaling efficiency.

Runs form a sweep when they were given together (one directory of runs, as ``trainperf sweep``
writes; runs named one by one are not a sweep), share the model shape, device, precision,
sequence length and layout (tensor, pipeline, context and expert parallelism, and the kind of
data parallelism: plain, ZeRO or FSDP; a single-device run is the base of any of them) and
differ in device count. Each such group is its own sweep, so runs of different layouts are never
mixed and never dropped without a word: the report lists those in no sweep. The mode follows
from the batches: global batch equal in every run is
**strong** scaling, per-device batch (sequences per device per step) equal is **weak** scaling.
Efficiencies use :mod:`trainperf.accounting.scaling` with the published definitions, relative to
the run with the fewest devices:

* strong: E = T_base*N_base / (T_N*N)  (step time T, devices N);
* weak:   E = (X_N/X_base) / (N/N_base)  (global tokens/s X);
* otherwise (batches changed in some other way): the ratio of per-device tokens/s, labelled
  ``per-device``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from trainperf.accounting.scaling import (
    per_device_efficiency,
    strong_scaling_efficiency,
    weak_scaling_efficiency,
)
from trainperf.records.summary import Summary


@dataclass
class SweepPoint:
    """One run of a sweep, at its steady-state median."""

    name: str
    num_devices: int
    global_batch: int
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_device: float
    tflops_per_device: float | None
    mfu_pct: float | None
    efficiency_pct: float | None = None
    """Scaling efficiency relative to the sweep's base (fewest devices), in percent."""


@dataclass
class Sweep:
    """Runs of one workload at several device counts."""

    title: str
    mode: str
    """``strong`` (global batch fixed), ``weak`` (per-device batch fixed) or ``per-device``."""
    basis: str
    """The efficiency formula used, in words."""
    convention: str
    points: list[SweepPoint] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)
    """Runs left out because an earlier run has the same device count."""

    @property
    def base(self) -> SweepPoint:
        return self.points[0]

    def ideal_tokens_per_s(self, num_devices: int) -> float:
        """Linear scaling from the base run: X_base * N / N_base."""
        return self.base.tokens_per_s * num_devices / self.base.num_devices


def _sweep_key(w: Any) -> tuple[Any, ...]:
    m = w.model
    shape = (m.name, m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden, m.vocab, m.moe_experts)
    p = w.plan
    layout = (p.tp, p.sequence_parallel, p.pp, p.vpp, p.pp_schedule, p.cp, p.ep, p.etp)
    return (shape, w.hardware.id, w.precision, w.seq_len, layout)


def data_parallel_kind(w: Any) -> str:
    """How a run's data-parallel ranks split the model: ``fsdp``, ``dp`` (with its ZeRO stage),
    or ``""`` for a single data-parallel rank (which can be the base of either)."""
    p = w.plan
    dp = p.dp if p.dp is not None else w.num_devices // (p.fsdp * p.tp * p.pp * p.cp)
    if p.fsdp > 1:
        return "fsdp"
    if dp > 1:
        return f"dp zero{p.zero_stage}" if p.zero_stage else "dp"
    return ""


def _candidates(members: list[tuple[Any, Summary]]) -> list[tuple[str, list[tuple[Any, Summary]]]]:
    """The runs of one group split by their data-parallel kind, each with the single-rank runs."""
    kinds = sorted({data_parallel_kind(r.workload) for r, _ in members} - {""})
    base = [(r, s) for r, s in members if data_parallel_kind(r.workload) == ""]
    if not kinds:
        return [("", members)]
    return [(k, base + [(r, s) for r, s in members if data_parallel_kind(r.workload) == k]) for k in kinds]


def _mode(points: list[SweepPoint]) -> tuple[str, str]:
    if len({p.global_batch for p in points}) == 1:
        return "strong", "T_base*N_base / (T_N*N), global batch fixed"
    per_dev = {p.global_batch / p.num_devices for p in points}
    if len(per_dev) == 1:
        return "weak", "(X_N/X_base) / (N/N_base), per-device batch fixed"
    return "per-device", "per-device tokens/s relative to the base run (batches differ)"


def find_sweeps(items: list[tuple[Any, Summary]], inputs: list[str] | None = None) -> list[Sweep]:
    """Sweeps among ``(run, summary)`` pairs: groups of >= 2 distinct device counts (see the
    module docstring). ``inputs[i]`` is what the user gave for run ``i`` (a directory of runs):
    runs given apart never form a sweep; ``None``: all given together.

    Only runs with a workload and a measured median step time take part; when a device count
    appears more than once, the first run given is used.
    """
    groups: dict[tuple[Any, ...], list[tuple[Any, Summary]]] = {}
    for i, (run, s) in enumerate(items):
        w = run.workload
        if w is None or s.step_time_median_s is None or not s.tokens_per_s:
            continue
        given = inputs[i] if inputs is not None else ""
        groups.setdefault((given, *_sweep_key(w)), []).append((run, s))
    sweeps: list[Sweep] = []
    for key, group in groups.items():
        for kind, members in _candidates(group):
            sweep = _sweep(key[1:], kind, members)
            if sweep is not None:
                sweeps.append(sweep)
    return sweeps


def _sweep(key: tuple[Any, ...], kind: str, members: list[tuple[Any, Summary]]) -> Sweep | None:
    """The sweep of ``members`` (one layout and data-parallel ``kind``), or ``None`` with fewer
    than two device counts."""
    by_n: dict[int, tuple[Any, Summary]] = {}
    unused: list[str] = []
    for run, s in members:
        if run.workload.num_devices in by_n:
            unused.append(s.name)
        else:
            by_n[run.workload.num_devices] = (run, s)
    if len(by_n) < 2:
        return None
    points = [_point(n, *by_n[n]) for n in sorted(by_n)]
    mode, basis = _mode(points)
    _efficiencies(points, mode)
    (model_name, *_), device, precision, seq, _layout = key
    layout = " ".join(x for x in (kind, _fixed_layout(members[0][0].workload)) if x)
    title = (f"{model_name} on {device}, {precision}, seq {seq}: {mode} scaling"
             + (f" ({layout})" if layout else ""))
    return Sweep(title=title, mode=mode, basis=basis, convention=members[0][1].convention, points=points,
                 unused=unused)


def _point(n: int, run: Any, s: Summary) -> SweepPoint:
    # the grouping kept only runs with these figures (a rate implies its per-device form)
    assert s.step_time_median_s is not None and s.tokens_per_s is not None
    assert s.tokens_per_s_per_device is not None
    return SweepPoint(name=s.name, num_devices=n, global_batch=run.workload.global_batch,
                      step_time_s=s.step_time_median_s, tokens_per_s=s.tokens_per_s,
                      tokens_per_s_per_device=s.tokens_per_s_per_device, tflops_per_device=s.tflops_per_device,
                      mfu_pct=s.mfu_pct)


def _efficiencies(points: list[SweepPoint], mode: str) -> None:
    """Each point's scaling efficiency relative to the first (fewest devices), in percent."""
    b = points[0]
    for p in points:
        if mode == "strong":
            e = strong_scaling_efficiency(b.num_devices, b.step_time_s, p.num_devices, p.step_time_s)
        elif mode == "weak":
            e = weak_scaling_efficiency(b.num_devices, b.tokens_per_s, p.num_devices, p.tokens_per_s)
        else:
            e = per_device_efficiency(b.tokens_per_s_per_device, p.tokens_per_s_per_device)
        p.efficiency_pct = 100.0 * e


def _fixed_layout(w: Any) -> str:
    """The degrees a sweep keeps fixed (tp, pp, cp, ep...), as the layout label writes them."""
    fixed = dataclasses.replace(w.plan, dp=1, fsdp=1, zero_stage=0).describe()
    return "" if fixed == "single device" else fixed
