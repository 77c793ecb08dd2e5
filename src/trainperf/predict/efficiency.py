"""Efficiency knobs: the few fitted numbers on top of device and kernel physics.

A prediction stands on three kinds of numbers, kept apart (docs/DESIGN.md, "Predict"):

* device physics: datasheet peaks, HBM and link bandwidths (:mod:`trainperf.specs.hardware`);
* kernel physics: what a silicon achieves per kernel class, measured by others -- GEMM efficiency
  against shape and dtype, attention efficiency against sequence length per kernel family,
  collective bandwidth against message size per link level, memory-bound bandwidth fused and
  unfused (:mod:`trainperf.predict.kernels`); the stack profile names which kernels a stack runs
  (:mod:`trainperf.predict.stack_kernels`);
* these knobs: how much of the kernels' measured speed a software stack keeps inside a real
  training step, and its fixed costs. They are fitted per stack on published runs (a stack
  profile, :mod:`trainperf.predict.stacks`) and say on which tables and with which held-out error.

The knobs (dimensionless unless the name carries a unit; a fraction of 1.0 means the stack runs
the kernel at its measured microbenchmark speed):

``matmul_fraction``, ``fp8_matmul_fraction``
    Share of the silicon's measured GEMM efficiency (MAMF-style, by shape) that the stack's 16-bit
    / fp8 GEMMs keep in a training step (clock drops under sustained load, cast and epilogue
    kernels the microbenchmark does not run, imperfect shapes).
``attention_fraction``
    Share of the measured fused-attention efficiency of the stack's kernel family (1 in the
    packaged profiles: not fitted, see :data:`trainperf.predict.fit_profiles.GENERIC_GLOBAL_KNOBS`;
    a user's calibration may move it).
``memory_bound_fraction``
    Share of the measured bandwidth of the stack's memory-bound implementation (eager, fused or
    compiled) that norms, activations, RoPE, the loss and the optimizer reach.
``link_fraction``
    Share of the measured collective bus bandwidth (nccl-tests / rccl-tests) the stack's
    collectives reach inside a step.
``overlap``
    Fraction of an overlappable collective (FSDP/ZeRO gathers and reduce-scatters, DP all-reduce,
    CP ring, PP send/recv) that can hide behind compute; the rest is always exposed (comm kernels
    take SMs and memory bandwidth, and synchronise).
``op_overhead_us``
    Fixed cost per kernel launched (launch, dispatch, host-side framework work that the device
    waits for); it carries the per-layer fixed costs of a stack.
``reserve_GiB``
    Device memory the framework keeps for itself (context, allocator fragmentation, workspaces).
``compile_overhead_factor``
    With a compiled step (``compile``, or a stack that always compiles): the share of the
    per-kernel cost that stays (fewer, fused kernels).
``async_tp_overlap``
    With async TP / TP communication overlap: the fraction of tensor-parallel collective time
    hidden behind GEMMs.

Fallback kernel physics for silicon no kernel was measured on (trainperf 0.1's absolute
efficiencies) live with the kernel fit, ``tools/kernel_fitting/fallbacks.toml``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from trainperf.errors import SpecError, UnknownNameError
from trainperf.specs.catalog_cache import read_catalog

KNOB_NAMES: tuple[str, ...] = (
    "matmul_fraction", "fp8_matmul_fraction", "attention_fraction", "memory_bound_fraction",
    "link_fraction", "overlap", "op_overhead_us", "reserve_GiB", "compile_overhead_factor",
    "async_tp_overlap",
)
# Bounds keep a fit physical: shares of a measured speed stay near 1 (a stack may beat a
# microbenchmark a little: better shapes, clocks), overheads non-negative.
KNOB_BOUNDS: dict[str, tuple[float, float]] = {
    "matmul_fraction": (0.2, 1.3),
    "fp8_matmul_fraction": (0.2, 1.3),
    "attention_fraction": (0.2, 1.5),
    "memory_bound_fraction": (0.1, 1.5),
    "link_fraction": (0.1, 1.5),
    "overlap": (0.0, 1.0),
    "op_overhead_us": (0.0, 5000.0),
    "reserve_GiB": (0.0, 64.0),
    "compile_overhead_factor": (0.05, 2.0),
    "async_tp_overlap": (0.0, 1.0),
}


def knob_logit(name: str, v: float) -> float:
    """``v`` in the unbounded logit space of knob ``name``'s range (:data:`KNOB_BOUNDS`), where the
    fits move the knobs (kept off the bounds themselves, where the logit is infinite)."""
    lo, hi = KNOB_BOUNDS[name]
    u = min(max((v - lo) / (hi - lo), 1e-6), 1 - 1e-6)
    return math.log(u / (1 - u))


RETIRED_KNOBS: dict[str, str] = {
    "matmul_efficiency": "matmul_fraction", "fp8_matmul_efficiency": "fp8_matmul_fraction",
    "attention_efficiency": "attention_fraction", "memory_efficiency": "memory_bound_fraction",
    "link_efficiency": "link_fraction", "link_latency_us": "link_fraction", "matmul_half_dim": "matmul_fraction",
    "attention_half_kv": "attention_fraction", "compile_memory_bound_factor": "memory_bound_fraction",
    "fp8_tensorwise_matmul_factor": "fp8_matmul_fraction", "fp8_rowwise_matmul_factor": "fp8_matmul_fraction",
    "fp8_delayed_matmul_factor": "fp8_matmul_fraction",
}
"""Knobs of trainperf 0.1 (absolute efficiencies) -> the share that replaced them (0.2 stands on
measured kernel physics); a file naming one gets a one-line error saying what to refit."""


def check_knob_name(name: str, where: str) -> None:
    """A one-line error for a name that is not a knob (a retired one says what replaced it)."""
    if name in KNOB_NAMES:
        return
    if name in RETIRED_KNOBS:
        raise SpecError(where, name, f"a knob of this version: {name!r} was an absolute efficiency; "
                        f"trainperf now fits {RETIRED_KNOBS[name]!r}, a share of the silicon's measured "
                        "kernel speed -- refit with `trainperf calibrate-model`")

    raise UnknownNameError(where, name, KNOB_NAMES)


@dataclass(frozen=True)
class Knobs:
    """Efficiency knobs of one stack on one device (see the module docstring for each one)."""

    matmul_fraction: float = 1.0
    fp8_matmul_fraction: float = 1.0
    attention_fraction: float = 1.0
    memory_bound_fraction: float = 1.0
    link_fraction: float = 1.0
    overlap: float = 0.85
    op_overhead_us: float = 5.0
    reserve_GiB: float = 3.0
    compile_overhead_factor: float = 1.0
    """With a compiled step: multiplies the per-kernel overhead (fewer, fused kernels)."""
    async_tp_overlap: float = 0.0
    """With async TP / TP comm overlap: fraction of tensor-parallel collective time hidden."""
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


    def numbers(self) -> KnobValues:
        """The values as the step model reads them (made once per Knobs)."""
        got: KnobValues | None = self.__dict__.get("_numbers")
        if got is None:
            got = KnobValues(*(getattr(self, n) for n in KNOB_NAMES))
            object.__setattr__(self, "_numbers", got)
        return got


@dataclass(frozen=True, slots=True)
class KnobValues:
    """The knobs' values as the step model reads them: floats, or numpy arrays with one value per
    row when many published rows are predicted at once (the profile fit). See :class:`Knobs` for
    what each one means; validated there, where a value enters."""

    matmul_fraction: Any
    fp8_matmul_fraction: Any
    attention_fraction: Any
    memory_bound_fraction: Any
    link_fraction: Any
    overlap: Any
    op_overhead_us: Any
    reserve_GiB: Any
    compile_overhead_factor: Any
    async_tp_overlap: Any


assert tuple(KnobValues.__dataclass_fields__) == KNOB_NAMES  # Knobs.numbers passes them in this order


BUILTIN = Knobs(sources={n: "trainperf built-in default (a typical GPU; no device data)" for n in KNOB_NAMES})


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return read_catalog("trainperf.predict", "efficiency.toml", "efficiency table")


def _apply(base: Knobs, entry: Mapping[str, Any], label: str) -> Knobs:
    values = {k: v for k, v in entry.items() if k in KNOB_NAMES}
    allowed = set(KNOB_NAMES) | {"sources"}
    for k in entry:
        if k not in allowed:
            check_knob_name(str(k), f"efficiency[{label}]")
    srcs = dict(base.sources)
    given = dict(entry.get("sources", {}))
    for k in values:
        srcs[k] = str(given.get(k, f"efficiency.toml [{label}]"))
    return dataclasses.replace(base, **values, device=label, sources=srcs)


@lru_cache(maxsize=64)
def vendor_knobs(vendor: str) -> Knobs:
    """Knobs of a vendor's devices: its ``[vendors.<vendor>]`` entry of efficiency.toml over
    :data:`BUILTIN` (stack profiles go on top: :func:`trainperf.predict.stacks.stack_knobs`)."""
    vend = _table().get("vendors", {}).get(str(vendor))
    return _apply(BUILTIN, vend, f"vendor:{vendor}") if vend else BUILTIN


def knobs_from_mapping(base: Knobs, values: Mapping[str, Any], label: str) -> Knobs:
    """``base`` with some knobs replaced (a calibration file's values)."""
    return _apply(base, values, label)


@dataclass(frozen=True)
class Silicon:
    """A silicon generation's place among the others (``[silicon.<name>]`` of efficiency.toml)."""

    kind: str
    """``gpu`` (GPUs and GPU-like matrix-engine accelerators), ``tpu`` or ``cpu``."""
    released: int | None
    """Year it was first released; None where not stated (a CPU)."""


_SILICON_KINDS = ("gpu", "tpu", "cpu")


@lru_cache(maxsize=64)
def silicon(name: str) -> Silicon | None:
    """The ``[silicon.<name>]`` entry of efficiency.toml, or None for a generation it does not
    list (a user's device naming a silicon of its own)."""
    entry = _table().get("silicon", {}).get(str(name))
    if not isinstance(entry, Mapping):
        return None
    kind, year = entry.get("kind"), entry.get("released")
    if kind not in _SILICON_KINDS:
        raise SpecError(f"efficiency[silicon.{name}].kind", kind, f"one of {', '.join(_SILICON_KINDS)}")
    if year is not None and (not isinstance(year, int) or isinstance(year, bool) or not 1990 <= year <= 2100):
        raise SpecError(f"efficiency[silicon.{name}].released", year, "a year between 1990 and 2100")
    return Silicon(kind=str(kind), released=year)
