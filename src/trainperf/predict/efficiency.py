"""Efficiency knobs: the few named numbers that turn datasheet peaks into achieved rates.

A prediction multiplies datasheet figures (peak FLOP/s, HBM bandwidth, link bandwidths) by
these factors. Each hardware entry may set any of them in ``data/efficiency.toml``; what it does
not set comes from its vendor's defaults, then from :data:`BUILTIN`. Every value carries a
source (a public measurement, or "fitted to <rows>" after ``trainperf calibrate-model``).

The knobs (all dimensionless unless the name carries a unit):

``matmul_efficiency``
    Fraction of the dense peak a large, well-shaped GEMM sustains (cuBLAS/hipBLASLt on big
    square-ish bf16 problems: ~0.70-0.80 on H100 SXM, ~0.80-0.85 on A100).
``fp8_matmul_efficiency``
    The same for fp8/fp4 GEMMs, as a fraction of the fp8 peak (scaling and casts cost more).
``matmul_half_dim``
    Shape penalty: each GEMM dimension ``d`` multiplies efficiency by ``d / (d + half_dim)``,
    so skinny or small matmuls (tp-split widths, tiny micro-batches) run below peak.
``attention_efficiency``
    Fraction of the 16-bit peak that fused (flash) attention sustains, forward and backward.
``memory_efficiency``
    Fraction of HBM bandwidth that memory-bound ops (norms, activations, RoPE, loss, optimizer)
    achieve.
``link_efficiency``
    Fraction of the nominal per-direction link bandwidth a large collective achieves (NCCL/RCCL
    bus bandwidth over wire rate), intra- and inter-node.
``link_latency_us``
    Latency per ring step of a collective that crosses nodes (intra-node steps cost a quarter).
``overlap``
    Fraction of an overlappable collective (FSDP/ZeRO gathers and reduce-scatters, DP all-reduce,
    CP ring, PP send/recv) that can hide behind compute; the rest is always exposed (comm
    kernels steal SMs and memory bandwidth, and synchronise).
``op_overhead_us``
    Fixed cost per kernel (launch, dispatch); matters for small models and CPU runs.
``reserve_GiB``
    Device memory the framework keeps for itself (context, allocator fragmentation, workspaces).
``attention_half_kv``
    Sequence-length dependence of fused attention: efficiency times ``kv / (kv + attention_half_kv)``.
``compile_memory_bound_factor``, ``compile_overhead_factor``, ``async_tp_overlap``, ``fp8_*_matmul_factor``
    Software-feature factors (neutral by default) that apply only when the workload enables the
    feature (``compile``, ``async_tp``, ``fp8_recipe``); a stack profile sets them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from trainperf.errors import SpecError
from trainperf.specs.datafiles import read_package_toml

KNOB_NAMES: tuple[str, ...] = (
    "matmul_efficiency", "fp8_matmul_efficiency", "matmul_half_dim", "attention_efficiency",
    "memory_efficiency", "link_efficiency", "link_latency_us", "overlap", "op_overhead_us",
    "reserve_GiB", "attention_half_kv", "compile_memory_bound_factor", "compile_overhead_factor", "async_tp_overlap",
    "fp8_tensorwise_matmul_factor", "fp8_rowwise_matmul_factor", "fp8_delayed_matmul_factor",
)
# Bounds keep a fit physical: efficiencies are fractions, latencies and overheads non-negative.
KNOB_BOUNDS: dict[str, tuple[float, float]] = {
    "matmul_efficiency": (0.02, 1.0),
    "fp8_matmul_efficiency": (0.02, 1.0),
    "matmul_half_dim": (0.0, 4096.0),
    "attention_efficiency": (0.02, 1.0),
    "memory_efficiency": (0.05, 1.0),
    "link_efficiency": (0.05, 1.0),
    "link_latency_us": (0.0, 500.0),
    "overlap": (0.0, 1.0),
    "op_overhead_us": (0.0, 5000.0),
    "reserve_GiB": (0.0, 64.0),
    "attention_half_kv": (0.0, 65536.0),
    "compile_memory_bound_factor": (0.05, 2.0),
    "compile_overhead_factor": (0.05, 2.0),
    "async_tp_overlap": (0.0, 1.0),
    "fp8_tensorwise_matmul_factor": (0.05, 2.0),
    "fp8_rowwise_matmul_factor": (0.05, 2.0),
    "fp8_delayed_matmul_factor": (0.05, 2.0),
}


@dataclass(frozen=True)
class Knobs:
    """Efficiency knobs of one device (see the module docstring for each one's meaning)."""

    matmul_efficiency: float = 0.70
    fp8_matmul_efficiency: float = 0.55
    matmul_half_dim: float = 64.0
    attention_efficiency: float = 0.45
    memory_efficiency: float = 0.80
    link_efficiency: float = 0.80
    link_latency_us: float = 10.0
    overlap: float = 0.85
    op_overhead_us: float = 5.0
    reserve_GiB: float = 3.0
    attention_half_kv: float = 0.0
    """Attention efficiency falls as ``kv / (kv + attention_half_kv)`` with the mean keys per
    query ``kv`` (short sequences use the kernel's tiles less well); 0 = independent of length."""
    compile_memory_bound_factor: float = 1.0
    """With ``compile``: multiplies the time of memory-bound elementwise ops (fusion)."""
    compile_overhead_factor: float = 1.0
    """With ``compile``: multiplies the per-kernel overhead (fewer, fused kernels)."""
    async_tp_overlap: float = 0.0
    """With ``async_tp``: fraction of tensor-parallel collective time hidden behind GEMMs."""
    fp8_tensorwise_matmul_factor: float = 1.0
    """Multiplies ``fp8_matmul_efficiency`` for the tensorwise-scaled fp8 recipe."""
    fp8_rowwise_matmul_factor: float = 1.0
    """Multiplies ``fp8_matmul_efficiency`` for the rowwise-scaled fp8 recipe."""
    fp8_delayed_matmul_factor: float = 1.0
    """Multiplies ``fp8_matmul_efficiency`` for Transformer Engine's delayed-scaling recipe."""
    device: str = "builtin"
    """Hardware id (or vendor default) the values were taken for."""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    """Knob name -> where its value comes from."""

    def __post_init__(self) -> None:
        for name in KNOB_NAMES:
            v = getattr(self, name)
            lo, hi = KNOB_BOUNDS[name]
            if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
                raise SpecError(f"efficiency[{self.device}].{name}", v, f"a number in [{lo}, {hi}]")
            object.__setattr__(self, name, float(v))

    def replace(self, **changes: Any) -> Knobs:
        return dataclasses.replace(self, **changes)

    def values(self) -> dict[str, float]:
        return {n: getattr(self, n) for n in KNOB_NAMES}


BUILTIN = Knobs(sources={n: "trainperf built-in default (a typical GPU; no device data)" for n in KNOB_NAMES})


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return read_package_toml("trainperf.predict", "efficiency.toml", "efficiency table")


def _apply(base: Knobs, entry: Mapping[str, Any], label: str) -> Knobs:
    values = {k: v for k, v in entry.items() if k in KNOB_NAMES}
    unknown = sorted(set(entry) - set(KNOB_NAMES) - {"sources", "fitted", "notes"})
    if unknown:
        raise SpecError(f"efficiency[{label}]", unknown[0], f"a knob: {', '.join(KNOB_NAMES)}")
    srcs = dict(base.sources)
    given = dict(entry.get("sources", {}))
    for k in values:
        srcs[k] = str(given.get(k, f"efficiency.toml [{label}]"))
    return dataclasses.replace(base, **values, device=label, sources=srcs)


def knobs_for(hardware_id: str, vendor: str) -> Knobs:
    """Knobs of a device: its own entry over its vendor's defaults over :data:`BUILTIN`."""
    return _knobs_for(str(hardware_id), str(vendor))


@lru_cache(maxsize=256)
def _knobs_for(hardware_id: str, vendor: str) -> Knobs:
    table = _table()
    k = BUILTIN
    vend = table.get("vendors", {}).get(vendor)
    if vend:
        k = _apply(k, vend, f"vendor:{vendor}")
    dev = table.get("devices", {}).get(hardware_id)
    if dev:
        k = _apply(k, dev, hardware_id)
    return k


def fitted_knobs(hardware_id: str) -> tuple[str, ...]:
    """Names of the knobs whose values in efficiency.toml were fitted to published rows."""
    dev = _table().get("devices", {}).get(hardware_id, {})
    return tuple(dev.get("fitted", ()))


def device_entries() -> dict[str, dict[str, Any]]:
    """The per-device entries of efficiency.toml (for reports)."""
    return dict(_table().get("devices", {}))


def knobs_from_mapping(base: Knobs, values: Mapping[str, Any], label: str) -> Knobs:
    """``base`` with some knobs replaced (a calibration file's values)."""
    return _apply(base, values, label)
