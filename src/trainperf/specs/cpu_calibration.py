"""The CPU calibration cache: measured peak FLOP/s and memory bandwidth of this machine's CPU.

A CPU has no datasheet peak that a training run can reach, so ``trainperf calibrate`` (torch
layer) measures matmul TFLOP/s per dtype and memory bandwidth and stores them here with
:func:`save_calibration`. :func:`trainperf.specs.hardware.get_hardware` ("cpu") reads them back
with :func:`load_calibration`.

The cache is one JSON file, ``$TRAINPERF_CACHE_DIR/calibration.json`` (default
``~/.cache/trainperf/calibration.json``), holding one entry per CPU and thread count. The CPU
string (:func:`cpu_model_name`) is the model name, the number of cores this process may use and
the instruction-set extensions that decide matmul speed (AVX2, AVX-512, AVX512-BF16, AMX...), so
two machines that both call themselves "AMD EPYC" but differ in ISA, or a calibration measured
with 2 threads and a run with 16, never share a peak::

    {"version": 1, "entries": {"AMD EPYC 7B13 (2 cores, avx2 fma) [2 threads]": {"cpu_model": ..., "threads": 2,
      "peak_tflops": {"fp32": 0.21, "bf16": 0.05}, "memory_bandwidth_GB_per_s": 11.8,
      "measured_at": "2026-01-01T12:00:00+00:00", "method": "torch.matmul 2048^3, ..."}}}

Pure Python: no torch, no numpy.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from trainperf.errors import InputFileError, note, one_line
from trainperf.specs.bounds import MEMORY_BANDWIDTH_GB_PER_S, PEAK_TFLOPS, RealBound

CACHE_ENV = "TRAINPERF_CACHE_DIR"
CACHE_FILE = "calibration.json"
FORMAT_VERSION = 1

# Kept in sync with trainperf.specs.hardware.PRECISIONS (hardware imports this module, not the reverse).
_PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "fp4")


def cache_path() -> Path:
    """``$TRAINPERF_CACHE_DIR/calibration.json``, default ``~/.cache/trainperf/calibration.json``."""
    base = os.environ.get(CACHE_ENV)
    directory = Path(base).expanduser() if base else Path.home() / ".cache" / "trainperf"
    return directory / CACHE_FILE


def _cores_used() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _model_from_cpuinfo(path: Path = Path("/proc/cpuinfo")) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("model name", "Model", "cpu model") and value.strip():
            return " ".join(value.split())
    return ""


# ISA extensions that change matmul throughput, in the order they appear in the key. x86 names
# as /proc/cpuinfo "flags" spells them; ARM ones from "Features" (bf16, i8mm, sve, asimd).
MATMUL_ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
                    "asimd", "sve", "sve2", "bf16", "i8mm")

NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")
"""CPU flags that mean bf16 matmuls run natively (AMX-BF16, AVX512-BF16, ARMv8.6 BF16); without
one, bf16 is emulated in fp32 and is slower than fp32 itself."""


def cpu_flags(path: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's feature flags (x86 "flags", ARM "Features" of ``/proc/cpuinfo``); empty if unknown."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def isa_tag(flags: frozenset[str] | None = None) -> str:
    """The matmul-relevant ISA extensions of ``flags`` (default this CPU), e.g. ``"avx2 fma"``."""
    flags = cpu_flags() if flags is None else flags
    return " ".join(f for f in MATMUL_ISA_FLAGS if f in flags) or "no known matmul ISA flags"


def cpu_model_name() -> str:
    """This machine's CPU model, the number of cores this process may use and its matmul ISA.

    From ``/proc/cpuinfo`` "model name" (fallback :func:`platform.processor`, then
    :func:`platform.machine`), e.g. ``"AMD EPYC 7B13 (2 cores, avx2 fma)"``. The core count is
    part of the key because a calibration measured with 2 cores says nothing about 64; the ISA
    flags because a model name such as "AMD EPYC" covers CPUs with and without AVX512-BF16.
    """
    model = (
        _model_from_cpuinfo() or platform.processor().strip() or platform.machine().strip() or "unknown CPU"
    )
    cores = _cores_used()
    return f"{model} ({cores} core{'s' if cores != 1 else ''}, {isa_tag()})"


def entry_key(cpu_model: str, threads: int) -> str:
    """The cache key of one calibration: the CPU string and the thread count it was measured with."""
    return f"{cpu_model} [{threads} thread{'s' if threads != 1 else ''}]"


def threads_per_process(nproc_per_node: int) -> int:
    """Intra-op threads each of ``nproc_per_node`` processes gets: the cores this process may use,
    shared out (at least 1). The bench's default, and how the predictor finds the calibration a
    bench run's processes were measured with."""
    return max(1, _cores_used() // max(1, int(nproc_per_node)))


def shared_cores_note(processes: int, threads: int) -> str | None:
    """What ``processes`` of ``threads`` threads each on this machine do when they are more threads
    than its cores: take turns on the cores, which the predictor does not model (it prices each
    process with its threads' own measured speed); None when they fit."""
    cores = _cores_used()
    wanted = max(1, int(processes)) * max(1, int(threads))
    if wanted <= cores:
        return None
    return (f"{processes} process(es) x {threads} thread(s) on this machine's {cores} core(s): they take turns on "
            f"the cores, about {wanted / cores:.1f}x the step of processes with cores of their own (what predict "
            "prices)")


def _positive(owner: str, name: str, value: Any, most: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= most:
        raise ValueError(f"{owner}.{name}={value!r} must be a number in (0, {most:g}]")


def _non_negative(owner: str, name: str, value: Any, most: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= most:
        raise ValueError(f"{owner}.{name}={value!r} must be a number in [0, {most:g}]")


def _samples(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1 << 30:
        raise ValueError(f"{owner}.{name}={value!r} must be a whole number of measurements, at least 1")


@dataclass(frozen=True)
class MeasuredAttention:
    """The fused attention kernel (``scaled_dot_product_attention``) timed at one length, forward
    and backward, as a fraction of the dtype's calibrated matmul peak: FLOPs counted as the step
    model counts them (forward ``4 b s s_avg heads head_dim``, ``s_avg = (s+1)/2`` causal, backward
    2.5x the forward: :mod:`trainperf.predict.step_model.attention`)."""

    seq: int
    """Queries = keys per sequence."""
    head_dim: int
    causal: bool
    fwd_fraction: float
    bwd_fraction: float
    samples: int = 1
    """Runs whose measurements the fractions are the running mean of
    (:func:`trainperf.measure.kernel_calibration.running_mean`; 1 in caches written before 2026-11-29)."""

    def __post_init__(self) -> None:
        for name, most in (("seq", 1 << 24), ("head_dim", 4096), ("fwd_fraction", 100.0), ("bwd_fraction", 100.0)):
            _positive("attention", name, getattr(self, name), most)
        _samples("attention", "samples", self.samples)


@dataclass(frozen=True)
class MeasuredGemm:
    """One GEMM of a run's layers timed on this CPU as training runs it: the forward
    ``(m x k) @ (k x n)`` and its two backward GEMMs (the input's gradient ``(m x n) @ (n x k)``
    and the weight's ``(k x m) @ (m x n)``), ``6 m k n`` FLOPs in all, median of several timed
    batches (:func:`trainperf.measure.kernel_calibration.gemm_rates`). A CPU's GEMM speed
    depends on the shape far more than a GPU's shape law allows (at 2 threads here a
    ``128 x 256 x 256`` GEMM runs at 0.50 TFLOP/s, a ``2048 x 256 x 256`` one at 0.85): the
    predictor prices a run's GEMMs from the measured shapes nearest theirs."""

    m: int
    """Rows: the tokens of a micro-batch (a routed expert's share of them)."""
    k: int
    """The weight's input features."""
    n: int
    """The weight's output features."""
    tflops: float
    """Forward plus backward FLOPs over their seconds, TFLOP/s."""
    groups: int = 0
    """0: one weight's GEMMs. Else the routed experts' grouped GEMM as the bench runs it: ``groups``
    local experts of ``m`` rows each, through ``torch._grouped_mm`` (a loop of matmuls where it
    does not run) under autograd, the fp32 master weights cast to the run's dtype and their
    gradient cast back included (an expert's weights are large beside its share of the tokens)."""
    samples: int = 1
    """Runs whose measurements :attr:`tflops` is the running mean of."""

    def __post_init__(self) -> None:
        for name, most in (("m", 1 << 30), ("k", 1 << 24), ("n", 1 << 24), ("tflops", 1e4)):
            _positive("kernels.gemms", name, getattr(self, name), most)
        _samples("kernels.gemms", "samples", self.samples)
        if isinstance(self.groups, bool) or not isinstance(self.groups, int) or not 0 <= self.groups <= 1 << 20:
            raise ValueError(f"kernels.gemms.groups={self.groups!r} must be an integer in [0, 1048576]")


@dataclass(frozen=True)
class MeasuredWidth:
    """The per-layer figures of :class:`MeasuredKernels` measured on a model of one width: the
    host cost per operator at a few tokens and the elementwise rate both change with it (a
    block of width 768 at 8 tokens costs 33-40 us per operator here, one of width 256 9 us)."""

    hidden: int
    elementwise_GB_per_s: float
    op_overhead_us: float
    ops_per_layer: float
    moe_ops_per_layer: float | None = None
    """ATen operators an MoE block of this width runs forward and backward (an MoE model's runs
    count it: routing and permutation add about half as many again as a dense block runs); None:
    not counted."""
    samples: int = 1
    """Runs whose measurements the rate and the host cost are the running mean of."""

    def __post_init__(self) -> None:
        for name, most in (("hidden", 1 << 20), ("elementwise_GB_per_s", 1e5), ("op_overhead_us", 1e6),
                           ("ops_per_layer", 1e6)):
            _positive("kernels.widths", name, getattr(self, name), most)
        _samples("kernels.widths", "samples", self.samples)
        if self.moe_ops_per_layer is not None:
            _positive("kernels.widths", "moe_ops_per_layer", self.moe_ops_per_layer, 1e6)


@dataclass(frozen=True)
class MeasuredKernels:
    """What a training step runs, timed on this CPU in one dtype (the bench
    measures it: :mod:`trainperf.measure.calibrate`)."""

    elementwise_GB_per_s: float
    """Bytes per second of eager elementwise ops at an activation's size (norm, residual add,
    activation, RoPE's multiply-adds; bytes counted as the step model counts them: each input
    read and each output written once). On a CPU these are limited by the cores (conversions,
    ``exp``), not only by DRAM: the copy bandwidth overstates them."""
    op_overhead_us: float
    """Host time per eager operator of a transformer layer, forward and backward (dispatch,
    autograd, autocast casts): a layer timed at one sequence of a few tokens, divided by the
    operators it ran (:attr:`ops_per_layer`)."""
    ops_per_layer: float
    """ATen operators one dense Llama layer runs forward and backward (counted on the bench's
    block)."""
    attention: tuple[MeasuredAttention, ...] = ()
    """The lengths measured so far (a run measures its own)."""
    fsdp_module_us: float | None = None
    """Host time FSDP2 adds per sharded module and step (its forward and backward hooks and the
    bookkeeping around its collectives), measured with several processes
    (:func:`trainperf.measure.collective_calibration.fsdp_module_us`); None: not measured."""
    widths: tuple[MeasuredWidth, ...] = ()
    """The per-layer figures by model width (the top-level ones: their running mean over every
    width, for a width never measured)."""
    tp_module_us: float | None = None
    """Host time DTensor tensor parallelism adds per sharded module (a norm or a Linear) and step,
    its waits for the collectives left out, measured with several processes
    (:func:`trainperf.measure.collective_calibration.tp_host_cost`); None: not measured. The
    fixed part: :attr:`tp_module_ns_per_element` adds the part that grows with the activation."""
    tp_module_ns_per_element: float | None = None
    """Host nanoseconds per sharded module and step that DTensor tensor parallelism adds per
    element of a rank's micro-batch activation ``[tokens, hidden]`` (its copies around the
    sequence-dimension collectives, casts and layout changes), measured with
    :attr:`tp_module_us` at the run's micro-batch; a running mean over the same runs (counted by
    :attr:`tp_module_samples`, which also counts runs from before it was measured). None: not
    measured (caches written before 2026-11-29)."""
    optimizer_GB_per_s: float | None = None
    """Bytes per second of the bench's optimizer step (gradient clipping's norms and scaling, then
    fused AdamW) over as many parameters as a run's process steps, bytes counted as the step
    model charges them (``OPTIMIZER_BYTES_PER_PARAM`` per parameter): the rate carries what the
    kernels do beside moving bytes (:func:`trainperf.measure.kernel_calibration.optimizer_GB_per_s`);
    None: not measured (caches written before 2026-11-28)."""
    gemms: tuple[MeasuredGemm, ...] = ()
    """The GEMM shapes runs measured, forward and backward (the most recent ``_MAX_GEMMS``; none in
    caches written before 2026-11-29: the shape law prices them then)."""
    samples: int = 1
    """Runs whose measurements the elementwise rate, the host cost per operator and the optimizer's
    rate are the running mean of."""
    fsdp_module_samples: int = 1
    """Runs whose measurements :attr:`fsdp_module_us` is the running mean of."""
    tp_module_samples: int = 1
    """Runs whose measurements :attr:`tp_module_us` is the running mean of."""

    def __post_init__(self) -> None:
        _positive("kernels", "elementwise_GB_per_s", self.elementwise_GB_per_s, 1e5)
        for name in ("samples", "fsdp_module_samples", "tp_module_samples"):
            _samples("kernels", name, getattr(self, name))
        _positive("kernels", "op_overhead_us", self.op_overhead_us, 1e6)
        _positive("kernels", "ops_per_layer", self.ops_per_layer, 1e6)
        if self.optimizer_GB_per_s is not None:
            _positive("kernels", "optimizer_GB_per_s", self.optimizer_GB_per_s, 1e5)
        for name in ("fsdp_module_us", "tp_module_us"):
            if getattr(self, name) is not None:
                _positive("kernels", name, getattr(self, name), 1e7)
        if self.tp_module_ns_per_element is not None:
            _non_negative("kernels", "tp_module_ns_per_element", self.tp_module_ns_per_element, 1e6)
        object.__setattr__(self, "attention", tuple(
            a if isinstance(a, MeasuredAttention) else MeasuredAttention(**a) for a in self.attention))
        object.__setattr__(self, "widths", tuple(
            w if isinstance(w, MeasuredWidth) else MeasuredWidth(**w) for w in self.widths))
        object.__setattr__(self, "gemms", tuple(
            g if isinstance(g, MeasuredGemm) else MeasuredGemm(**g) for g in self.gemms))

    def at_width(self, hidden: float) -> MeasuredWidth:
        """The figures measured at the width nearest ``hidden`` (in log2), or the all-width means
        when none was."""
        import math

        if not self.widths:
            return MeasuredWidth(int(hidden), self.elementwise_GB_per_s, self.op_overhead_us, self.ops_per_layer)
        return min(self.widths, key=lambda w: abs(math.log2(w.hidden) - math.log2(max(hidden, 1.0))))


@dataclass(frozen=True)
class MeasuredCollective:
    """One collective kind between a run's processes on this machine (gloo), as the alpha-beta
    fit of two timed sizes (:mod:`trainperf.measure.collective_calibration`)."""

    ranks: int
    latency_us: float
    busbw_GB_per_s: float
    """Bus bandwidth (nccl-tests' convention) at large sizes."""
    averaged: bool = False
    """Fitted to the times of bursts of calls (what a step's sum of collectives pays); False: to
    single calls after a barrier each, as caches written before 2026-11-28 hold (a new
    measurement replaces them)."""
    sync_wait_us: float | None = None
    """Microseconds a call costs beyond the burst fit when the ranks come to it from compute, as
    in a step (their drift apart on a shared host: :func:`trainperf.measure.collective_calibration.sync_wait_s`),
    measured once and the same on every kind; None: not measured (caches written before
    2026-11-29)."""
    samples: int = 1
    """Runs whose measurements the latency, bandwidth and wait are the running mean of."""

    def __post_init__(self) -> None:
        _positive("collective", "ranks", self.ranks, 1 << 20)
        _samples("collective", "samples", self.samples)
        if not isinstance(self.averaged, bool):
            raise ValueError(f"collective averaged: {self.averaged!r} is not true or false")
        w = self.sync_wait_us
        if w is not None and (isinstance(w, bool) or not isinstance(w, int | float) or not 0 <= w <= 1e7):
            raise ValueError(f"collective.sync_wait_us={w!r} must be a number in [0, 1e+07]")
        _positive("collective", "latency_us", self.latency_us, 1e7)
        _positive("collective", "busbw_GB_per_s", self.busbw_GB_per_s, 1e5)


@dataclass(frozen=True)
class CpuCalibration:
    """Measured peaks of one CPU model, as written by ``trainperf calibrate``."""

    cpu_model: str
    """:func:`cpu_model_name` of the machine that was measured."""
    threads: int
    """Number of threads the matmul benchmark used."""
    peak_tflops: dict[str, float]
    """Best measured matmul TFLOP/s per dtype (keys from PRECISIONS, e.g. "fp32", "bf16")."""
    memory_bandwidth_GB_per_s: float
    """Measured memory bandwidth (large-array copy), GB/s."""
    measured_at: str
    """ISO-8601 timestamp of the measurement."""
    method: str = ""
    """Free text: how it was measured (sizes, repeats, torch version)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else the calibrator wants to keep (ignored by trainperf.specs)."""
    kernels: dict[str, MeasuredKernels] = field(default_factory=dict)
    """dtype -> the non-GEMM kernels measured in it (the predictor's CPU kernel physics)."""
    collectives: dict[str, dict[str, MeasuredCollective]] = field(default_factory=dict)
    """Run dtype -> collective kind (``all-reduce``, ``all-gather``, ``reduce-scatter``,
    ``all-to-all``, ``send-recv``) -> gloo between processes of this many threads each: gloo's
    time goes with elements more than bytes (a bf16 all-reduce moves a byte at half the fp32
    rate), so a run's collectives are measured in the dtypes it moves (gradients in fp32)."""

    def __post_init__(self) -> None:
        if not isinstance(self.cpu_model, str) or not self.cpu_model.strip():
            raise ValueError(f"cpu_model={self.cpu_model!r} must be a non-empty string")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads <= 0:
            raise ValueError(f"threads={self.threads!r} must be a positive integer")
        if not isinstance(self.peak_tflops, dict):
            raise ValueError(f"peak_tflops={self.peak_tflops!r} must be a table of dtype -> TFLOP/s")
        for dtype, value in self.peak_tflops.items():
            if dtype not in _PRECISIONS:
                raise ValueError(f"peak_tflops key {dtype!r} is not one of {', '.join(_PRECISIONS)}")
            if not _within(value, PEAK_TFLOPS):
                raise ValueError(f"peak_tflops.{dtype}={value!r} must be {PEAK_TFLOPS.valid()}")
        if not _within(self.memory_bandwidth_GB_per_s, MEMORY_BANDWIDTH_GB_PER_S):
            raise ValueError(f"memory_bandwidth_GB_per_s={self.memory_bandwidth_GB_per_s!r} must be "
                             f"{MEMORY_BANDWIDTH_GB_PER_S.valid()}")
        self._typed_tables()
        if self.threads > 1 << 20:
            raise ValueError(f"threads={self.threads!r} must be at most {1 << 20:,}")
        try:
            datetime.fromisoformat(self.measured_at)
        except (TypeError, ValueError):
            raise ValueError(f"measured_at={self.measured_at!r} must be an ISO-8601 timestamp") from None

    def _typed_tables(self) -> None:
        """Tables read back from JSON become the typed records (a bad value raises ValueError)."""
        def typed(name: str, table: Any, cls: type) -> dict[str, Any]:
            if not isinstance(table, dict):
                raise ValueError(f"{name}={table!r} must be a table")
            return {str(k): v if isinstance(v, cls) else cls(**v) for k, v in table.items()}

        object.__setattr__(self, "kernels", typed("kernels", self.kernels, MeasuredKernels))
        colls = self.collectives
        if not isinstance(colls, dict):
            raise ValueError(f"collectives={colls!r} must be a table")
        object.__setattr__(self, "collectives", {str(dt): typed(f"collectives.{dt}", t, MeasuredCollective)
                                                 for dt, t in colls.items()})

    @property
    def measured_date(self) -> str:
        """The date part of :attr:`measured_at` (YYYY-MM-DD)."""
        return datetime.fromisoformat(self.measured_at).date().isoformat()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CpuCalibration:
        known = {
            "cpu_model",
            "threads",
            "peak_tflops",
            "memory_bandwidth_GB_per_s",
            "measured_at",
            "method",
            "extra",
            "kernels",
            "collectives",
        }
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown keys {', '.join(unknown)}")
        peaks = d.get("peak_tflops", {})
        if isinstance(peaks, dict):
            peaks = {str(k).lower(): v for k, v in peaks.items()}
        return cls(
            cpu_model=d.get("cpu_model", ""),
            threads=d.get("threads", 0),
            peak_tflops=peaks,
            memory_bandwidth_GB_per_s=d.get("memory_bandwidth_GB_per_s", 0.0),
            measured_at=d.get("measured_at", ""),
            method=d.get("method", ""),
            extra=dict(d.get("extra") or {}),
            kernels=d.get("kernels") or {},
            collectives=d.get("collectives") or {},
        )


def _within(value: Any, bound: RealBound) -> bool:
    try:
        bound.check("value", value)
    except ValueError:
        return False
    return True


CACHE_MAX_BYTES = 8 << 20
"""Largest calibration cache read (8 MiB): one entry is ~400 bytes, so this holds ~20,000 CPU
and thread-count entries; a larger file is not a cache trainperf wrote."""


def _read_entries(path: Path) -> dict[str, dict[str, Any]]:
    """The file's entries keyed by cpu_model; raises InputFileError (the reason) if it cannot be
    read or is not a cache trainperf wrote."""
    from trainperf.specs.datafiles import read_user_bytes

    return _parse_entries(read_user_bytes(path, "calibration cache", max_bytes=CACHE_MAX_BYTES), path)


def _parse_entries(raw: bytes, path: Path) -> dict[str, dict[str, Any]]:
    """The entries of a cache file's bytes; one InputFileError line if it is not a cache."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, 4300-digit ints
        raise InputFileError(one_line(f"calibration cache {path} is not valid JSON ({str(exc)[:120]})")) from None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
        raise InputFileError(f"calibration cache {path} has no 'entries' table")
    version = data.get("version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise InputFileError(one_line(f"calibration cache {path} has version {version!r}, expected {FORMAT_VERSION}"))
    return data["entries"]


_NOTED: set[str] = set()
"""The notes already given in this process (a command may look up the calibration many times)."""


def _ignored(message: str) -> None:
    """Say once per process that a damaged cache, or entry, is ignored, and how it is rebuilt."""
    if message not in _NOTED:
        _NOTED.add(message)
        note(f"{message}; ignored (`trainperf calibrate` measures this machine again and rewrites it)")


def load_calibration(path: Path | None = None, cpu_model: str | None = None,
                     threads: int | None = None) -> CpuCalibration | None:
    """The cached calibration of this machine's CPU, or None if there is none.

    ``cpu_model`` defaults to :func:`cpu_model_name`. With ``threads``, only a calibration
    measured with exactly that many threads is returned; without, the one measured with as many
    threads as this process has cores, else the one with the most threads. None when the file
    does not exist or holds no such entry. A cache that fails validation -- not JSON, not
    trainperf's layout, too large, not a regular file, or an entry of this CPU with a value out
    of bounds (a peak of 1e300 TFLOP/s) -- is ignored like a missing one, with one line on stderr
    saying so; ``trainperf calibrate`` then replaces it.
    """
    path = Path(path) if path is not None else cache_path()
    if not os.path.lexists(path):
        return None
    try:
        entries = _read_entries(path)
    except InputFileError as e:
        _ignored(str(e))
        return None
    model = cpu_model if cpu_model is not None else cpu_model_name()
    found: list[CpuCalibration] = []
    for key, entry in entries.items():
        mine = key == model or key.startswith(f"{model} [")
        if not isinstance(entry, dict):
            if mine:
                _ignored(f"calibration cache {path}: entry {key!r} is not a table")
            continue
        if entry.get("cpu_model") != model:
            continue
        try:
            found.append(CpuCalibration.from_dict(entry))
        except (TypeError, ValueError) as exc:
            _ignored(one_line(f"calibration cache {path}: entry {key!r} is invalid ({exc})"))
    if threads is not None:
        return next((c for c in found if c.threads == threads), None)
    if not found:
        return None
    cores = _cores_used()
    return next((c for c in found if c.threads == cores), max(found, key=lambda c: c.threads))


def save_calibration(cal: CpuCalibration, path: Path | None = None) -> Path:
    """Write (or replace) ``cal``'s entry (its CPU and thread count) in the cache; others are kept.

    The update holds the cache's file lock from the read to the rename
    (:func:`trainperf.locked_update.update_file`), so concurrent calibrations (two processes,
    two thread counts) each keep their entry. A corrupt existing file is replaced rather than
    preserved. The write is atomic (temporary file, fsync, rename), so a killed calibration
    cannot leave a half-written cache. Returns the path.
    """
    from trainperf.locked_update import update_file

    path = Path(path) if path is not None else cache_path()

    def merge(old: bytes | None) -> str:
        entries: dict[str, Any] = {}
        if old is not None:
            try:
                entries = dict(_parse_entries(old, path))
            except InputFileError:
                entries = {}
        entries[entry_key(cal.cpu_model, cal.threads)] = cal.to_dict()
        return json.dumps({"version": FORMAT_VERSION, "entries": entries}, indent=2, sort_keys=True) + "\n"

    return update_file(path, merge, max_bytes=CACHE_MAX_BYTES, what="calibration cache")
