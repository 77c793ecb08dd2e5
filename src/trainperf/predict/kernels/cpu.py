"""This machine's CPU as the step model prices it: the kernels the bench timed here.

A GPU's kernel physics comes from published microbenchmarks; a CPU's from the calibration cache
(:mod:`trainperf.specs.cpu_calibration`), where the bench keeps what it measured with the
threads each of its processes gets (:func:`~trainperf.specs.cpu_calibration.threads_per_process`
of the workload's ``devices_per_node``): SDPA's forward and backward efficiency at the lengths
runs used (:mod:`trainperf.measure.kernel_calibration`), the GEMMs of the runs' layers at their
shapes (forward and backward), the eager elementwise rate, the host
cost per operator with the operators a layer runs (those three measured at the width nearest the
model's), the optimizer step's rate, and gloo's latency and bus bandwidth per
collective kind between the run's processes (:mod:`trainperf.measure.collective_calibration`).

Differences from a GPU, each from what a CPU is:

* the operators' host cost adds to their compute: the cores that dispatch are the cores that
  compute, so nothing hides it (on a GPU the host runs ahead of the device);
* a collective takes the cores too (gloo copies and reduces on them), so none overlaps compute;
* the kernel speeds are this machine's own, so the stack shares fitted on published GPU runs do
  not apply (1).

Without a measurement (``trainperf predict --device cpu`` before any bench) the fallbacks of the
kernel tables stand, as for any silicon without data.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from trainperf.predict.kernels.collectives import KINDS, LevelModel, level_model
from trainperf.specs import cpu_calibration as cc


@dataclass(frozen=True)
class CpuPhysics:
    """What the bench measured on this CPU for one dtype and thread count."""

    attention: tuple[tuple[int, ...], tuple[dict[bool, Any], ...]] | None
    """Measured SDPA curves in the form of :func:`trainperf.predict.kernels.attention.efficiency_from`."""
    elementwise_bytes_per_s: float | None
    """Ideal bytes per second of the eager elementwise ops (their extra passes included)."""
    op_overhead_us: float | None
    ops_per_layer_fwd: float | None
    """Operators a dense layer runs forward: a third of those forward and backward (backward
    runs about twice the forward's)."""
    link: LevelModel | None
    """gloo between the run's processes, as a scale-up level."""
    source: str
    fsdp_module_s: float = 0.0
    """Host seconds FSDP2 adds per sharded module and step (0: not measured)."""
    tp_module_s: float = 0.0
    """Host seconds DTensor tensor parallelism adds per sharded module and step (0: not measured)."""
    moe_ops_per_layer_fwd: float = 0.0
    """Operators an MoE layer runs forward, a third of those forward and backward (0: not counted)."""
    optimizer_bytes_per_s: float = 0.0
    """The optimizer step's rate, bytes as the step model charges them (0: not measured)."""
    gemms: tuple[tuple[float, float, float, float], ...] = ()
    """The GEMM shapes the bench timed, forward and backward: ``(m, n, k, FLOP/s)`` (none: not measured)."""
    grouped_gemms: tuple[tuple[float, float, float, float], ...] = ()
    """The routed experts' grouped GEMMs the bench timed, as :attr:`gemms` (``m``: rows per expert)."""
    tp_element_s: float = 0.0
    """Host seconds DTensor tensor parallelism adds on top of :attr:`tp_module_s` per sharded
    module, step and element of a rank's micro-batch activation ``[tokens, hidden]`` (0: not
    measured)."""


def physics(w: Any) -> CpuPhysics | None:
    """The measured physics for workload ``w`` on this CPU (its ``threads_per_device``, else the
    cores shared out among its ``devices_per_node`` processes; its precision), or None when
    nothing is cached."""
    try:
        stamp = os.stat(cc.cache_path()).st_mtime_ns
    except OSError:
        return None
    precision = "fp32" if w.precision == "tf32" else w.precision
    threads = int(getattr(w, "threads_per_device", 0)) or cc.threads_per_process(int(w.devices_per_node))
    return _physics(threads, precision,
                    float(w.hardware.intra_node_link_GB_per_s), int(w.model.hidden), stamp)


@lru_cache(maxsize=32)
def _physics(threads: int, precision: str, link_GB_per_s: float, hidden: int, _stamp: int) -> CpuPhysics | None:
    """Cached per cache-file version (a bench run that measures more rewrites the file)."""
    cal = cc.load_calibration(threads=threads)
    if cal is None or not (cal.kernels.get(precision) or cal.collectives.get(precision)):
        return None
    k = cal.kernels.get(precision)
    source = f"measured by the bench on {cal.cpu_model}, {threads} thread(s) per process ({cal.measured_at[:10]})"
    if k is None:
        return CpuPhysics(None, None, None, None, _link(cal.collectives.get(precision, {}), link_GB_per_s), source)
    at = k.at_width(hidden)
    return CpuPhysics(_curves(k.attention), at.elementwise_GB_per_s * 1e9, at.op_overhead_us, at.ops_per_layer / 3.0,
                      _link(cal.collectives.get(precision, {}), link_GB_per_s), source,
                      (k.fsdp_module_us or 0.0) * 1e-6, (k.tp_module_us or 0.0) * 1e-6,
                      (at.moe_ops_per_layer or 0.0) / 3.0, (k.optimizer_GB_per_s or 0.0) * 1e9,
                      _gemms(k.gemms, grouped=False), _gemms(k.gemms, grouped=True),
                      (k.tp_module_ns_per_element or 0.0) * 1e-9)


def _gemms(measured: tuple[cc.MeasuredGemm, ...], grouped: bool) -> tuple[tuple[float, float, float, float], ...]:
    """``(m, n, k, FLOP/s)`` of the measured single (or grouped) GEMMs."""
    return tuple((float(g.m), float(g.n), float(g.k), g.tflops * 1e12) for g in measured if bool(g.groups) == grouped)


def _curves(points: tuple[cc.MeasuredAttention, ...]) -> tuple[tuple[int, ...], tuple[dict[bool, Any], ...]] | None:
    """Per head dim, the measured lengths as curves; a mask never measured takes the other's."""
    if not points:
        return None
    import math

    hds = tuple(sorted({p.head_dim for p in points}))
    curves = []
    for hd in hds:
        by_mask: dict[bool, Any] = {}
        for causal in (True, False):
            mine = sorted((p.seq, p.fwd_fraction, p.bwd_fraction) for p in points if p.head_dim == hd and p.causal == causal)
            if mine:
                by_mask[causal] = ([math.log2(s) for s, _, _ in mine], [f for _, f, _ in mine], [b for _, _, b in mine])
        curves.append({c: by_mask.get(c, by_mask.get(not c)) for c in (True, False)})
    return hds, tuple(curves)


def _link(measured: dict[str, cc.MeasuredCollective], link_GB_per_s: float) -> LevelModel | None:
    """gloo's measured kinds as a :class:`LevelModel` on the device's ``link_GB_per_s`` (the
    catalog's nominal ``cpu`` figure):
    ``eff_max = busbw / link`` and ``half_bytes = latency x busbw / bus factor``, so that the step
    model's ``bus_factor (S + half) / (link eff)`` is ``latency + bus_factor S / busbw``. The
    latency is the burst fit's plus the wait the ranks' drift adds to a call in a step
    (``sync_wait_us``, where measured): a step's collectives come after compute, not back to
    back. Kinds not measured keep the fallback's values."""
    if not measured:
        return None
    link = link_GB_per_s * 1e9
    base = level_model("cpu", "scale-up")
    kinds, ranks = [], 2
    for kind in KINDS:
        m = measured.get(kind)
        if m is None:
            kinds.append((kind, *base.by_kind[kind]))
            continue
        ranks = m.ranks
        factor = 1.0 if kind == "send-recv" else (2.0 if kind == "all-reduce" else 1.0) * (m.ranks - 1) / m.ranks
        busbw = m.busbw_GB_per_s * 1e9
        latency_us = m.latency_us + (m.sync_wait_us or 0.0)
        kinds.append((kind, busbw / link, latency_us * 1e-6 * busbw / factor, latency_us))
    return LevelModel(float(ranks), base.half_exponent, False, 0.0, None, tuple(kinds))


def knobs_on_cpu(base: Any, w: Any, keep: frozenset[str] = frozenset()) -> Any:
    """``base`` (:class:`~trainperf.predict.efficiency.Knobs`) for workload ``w`` on this CPU: the kernel
    speeds are this machine's own, so every share is 1; nothing overlaps compute (no core is
    free); the host cost per operator is the measured one where the bench measured it. The knobs
    in ``keep`` (those a stack profile states for the cpu generation itself: one fitted to CPU
    runs by ``trainperf calibrate-model``) stay ``base``'s, as that fit priced its runs."""
    phys = physics(w)
    values: dict[str, float] = {name: 1.0 for name in ("matmul_fraction", "fp8_matmul_fraction", "attention_fraction",
                                                       "memory_bound_fraction", "link_fraction")}
    values.update(overlap=0.0, async_tp_overlap=0.0)
    why = "CPU: kernel speeds measured on this machine (a share of 1); no core left to overlap"
    if phys is not None and phys.op_overhead_us is not None:
        values["op_overhead_us"] = phys.op_overhead_us
        why = f"{why}; {phys.source}"
    values = {name: v for name, v in values.items() if name not in keep}
    sources = {**base.sources, **{name: why for name in values}}
    suffix = MEASURED_SUFFIX if phys is not None and phys.attention is not None else "+cpu"
    return base.replace(**values, device=base.device + suffix, sources=sources)


MEASURED_SUFFIX = "+cpu-measured"
"""Ends the knobs' ``device`` label when the bench's measurements of this CPU stand behind them."""
