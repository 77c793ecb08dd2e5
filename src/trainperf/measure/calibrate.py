"""Measure this machine's achievable matmul TFLOP/s per dtype and its memory bandwidth.

A CPU has no datasheet peak a training run can reach, so MFU on a CPU is computed against what
large square matmuls achieve here (``torch.matmul``, best of several timed repeats; a multiply-
add counts 2 FLOPs, so an n x n x n matmul is ``2 n^3`` FLOPs) with the threads a training
process uses. Memory bandwidth is a large-array copy, counting bytes read plus bytes written.
The result is stored with :func:`trainperf.specs.cpu_calibration.save_calibration`, keyed by
the CPU model, core count, ISA flags and thread count, where ``get_hardware("cpu")`` finds it.

A peak must be an upper bound of what a run achieves, or MFU exceeds 100%. Large square matmuls
are not always the fastest GEMMs (bf16 emulated on an AVX2 CPU runs small GEMMs faster than
1536^3 ones), so the bench calibrates the dtype it runs at several square sizes *and* at the
run's own GEMM shapes (:func:`model_gemm_shapes`), keeps the best, and never lowers a cached
peak (:func:`calibrate_and_save` merges by maximum).

On a CUDA device the same measurement (timed with CUDA synchronisation) is stored under the key
``"cuda: <device name>"``; the bench reports MFU against it beside the datasheet peak.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import torch

from trainperf.specs.cpu_calibration import CpuCalibration, cpu_model_name, save_calibration

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn}
"""The dtypes calibrated; ``fp8`` is timed as ``torch._scaled_mm`` of e4m3 operands (what torchao's
Float8 linears run), bf16 out on CUDA, fp32 out on a CPU (which has no fp8 units: its reference
kernel is what an fp8 run gets there)."""


@dataclass(frozen=True)
class CalibrationPlan:
    """How long and how big: ``quick`` takes a few seconds, the default about half a minute."""

    sizes: tuple[int, ...] = (2048, 4096)
    """Matmul sizes n (n x n times n x n); the best over sizes and repeats is kept."""
    repeats: int = 5
    """Timed repeats per size and dtype."""
    min_time_s: float = 0.25
    """Each repeat runs enough matmuls to last at least this long."""
    bandwidth_MB: int = 256
    """Array size for the bandwidth copy."""

    shapes: tuple[tuple[int, int, int], ...] = ()
    """Extra GEMM shapes (m, k, n): ``(m x k) @ (k x n)``, e.g. a run's own (:func:`model_gemm_shapes`)."""
    dtypes: tuple[str, ...] = ("fp32", "bf16")
    """Which dtypes to measure (keys of :data:`DTYPES`)."""

    @classmethod
    def quick(cls) -> CalibrationPlan:
        # Many short repeats rather than a few long ones: on a shared machine the best of many is
        # likelier to catch a quiet moment, and an under-estimated peak is what must be avoided.
        return cls(sizes=(512, 1536), repeats=6, min_time_s=0.05, bandwidth_MB=128)

    @property
    def is_quick(self) -> bool:
        return self.sizes == CalibrationPlan.quick().sizes and self.repeats == CalibrationPlan.quick().repeats


def model_gemm_shapes(model, tokens: int) -> tuple[tuple[int, int, int], ...]:
    """The (m, k, n) GEMMs of one forward pass of ``model`` (a ModelSpec) over ``tokens`` tokens.

    Projections q/o (h -> heads x head_dim), k/v (h -> kv_heads x head_dim), the MLP (h -> F,
    F -> h) and the LM head (h -> vocab), each as ``(tokens x k) @ (k x n)``, plus the weight
    gradient of the largest (``(k x tokens) @ (tokens x n)``); duplicates removed, largest first.
    """
    outs = projection_dims(model)
    shapes = {(tokens, k, n) for k, n in outs if k > 0 and n > 0}
    k, n = max(outs, key=lambda kn: kn[0] * kn[1])
    shapes.add((k, tokens, n))
    return tuple(sorted(shapes, key=lambda s: -s[0] * s[1] * s[2]))


def projection_dims(model, tp: int = 1, mlp: bool = True) -> list[tuple[int, int]]:
    """``(in, out)`` features of a dense block's weights and the LM head on one of ``tp``
    tensor-parallel ranks: q and o (h <-> heads x head_dim), k and v (h -> kv_heads x head_dim,
    replicated when there are fewer kv heads than ranks), the MLP's two shapes (``mlp``) and the
    head's vocabulary shard."""
    h, hd = model.hidden, model.head_dim
    q, kv, f = model.heads * hd // tp, max(model.kv_heads // tp, 1) * hd, model.ffn_hidden // tp
    return [(h, q), (q, h), (h, kv), *([(h, f), (f, h)] if mlp else []), (h, max(model.vocab // tp, 1))]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _best_rate(fn: Callable[[], None], work: float, repeats: int, min_time_s: float, device: str) -> float:
    """Best ``work / seconds`` over ``repeats`` timed batches of ``fn`` calls."""
    fn()
    _sync(device)
    t = time.perf_counter()
    fn()
    _sync(device)
    once = max(time.perf_counter() - t, 1e-6)
    n = max(1, int(min_time_s / once))
    best = 0.0
    for _ in range(repeats):
        _sync(device)
        t = time.perf_counter()
        for _ in range(n):
            fn()
        _sync(device)
        best = max(best, n * work / (time.perf_counter() - t))
    return best


def matmul_tflops(dtype: torch.dtype, sizes: Sequence[int] = (2048,), repeats: int = 5,
                  min_time_s: float = 0.25, device: str = "cpu",
                  shapes: Sequence[tuple[int, int, int]] = ()) -> float:
    """Best achieved TFLOP/s of ``n x n @ n x n`` matmuls (2 n^3 FLOPs each) and of the
    ``(m x k) @ (k x n)`` GEMMs in ``shapes`` (2 m k n FLOPs each), in ``dtype``."""
    best = 0.0
    for m, k, n in [(n, n, n) for n in sizes] + [tuple(s) for s in shapes]:
        g = torch.Generator(device=device).manual_seed(0)
        a = torch.randn(m, k, generator=g, device=device).to(dtype)
        b = torch.randn(k, n, generator=g, device=device).to(dtype)
        if dtype == torch.float8_e4m3fn:
            fn = _scaled_mm_call(a, b, device)
        else:
            fn = functools.partial(torch.matmul, a, b, out=torch.empty(m, n, dtype=dtype, device=device))
        best = max(best, _best_rate(fn, 2.0 * m * k * n, repeats, min_time_s, device))
    return best / 1e12


def _scaled_mm_call(a: torch.Tensor, b: torch.Tensor, device: str) -> Callable[[], torch.Tensor]:
    """An fp8 GEMM as torchao issues it: e4m3 operands, ``b`` column-major, per-tensor scales."""
    one = torch.ones((), dtype=torch.float32, device=device)
    out = torch.bfloat16 if device.startswith("cuda") else torch.float32
    b = b.t().contiguous().t()
    return functools.partial(torch._scaled_mm, a, b, scale_a=one, scale_b=one, out_dtype=out)


def memory_bandwidth_GB_per_s(size_MB: int = 256, repeats: int = 5, device: str = "cpu") -> float:
    """Best copy bandwidth (bytes read + bytes written per second) of a ``size_MB`` array, GB/s."""
    n = size_MB * 2**20 // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    return _best_rate(lambda: dst.copy_(src), 2.0 * n * 4, repeats, 0.1, device) / 1e9


def calibrate(plan: CalibrationPlan | None = None, *, threads: int | None = None, device: str = "cpu",
              progress: Callable[[str], None] | None = None) -> CpuCalibration:
    """Measure the peaks (not saved; see :func:`calibrate_and_save`)."""
    plan = plan or CalibrationPlan()
    if threads is not None:
        torch.set_num_threads(threads)
    say = progress or (lambda _m: None)
    peaks: dict[str, float] = {}
    extra = f" and {len(plan.shapes)} run GEMM shapes" if plan.shapes else ""
    for name in plan.dtypes:
        say(f"matmul {name} (n={','.join(map(str, plan.sizes))}{extra}, best of {plan.repeats}) ...")
        peaks[name] = round(matmul_tflops(DTYPES[name], plan.sizes, plan.repeats, plan.min_time_s, device,
                                          plan.shapes), 6)
    say(f"memory bandwidth (copy of {plan.bandwidth_MB} MB) ...")
    bw = round(memory_bandwidth_GB_per_s(plan.bandwidth_MB, plan.repeats, device), 3)
    key = device_key(device)
    shapes = f" + GEMMs {';'.join('x'.join(map(str, s)) for s in plan.shapes)}" if plan.shapes else ""
    method = (f"torch {torch.__version__} matmul n={','.join(map(str, plan.sizes))}{shapes}, best of "
              f"{plan.repeats} repeats >= {plan.min_time_s}s; copy {plan.bandwidth_MB} MB, read+write bytes")
    return CpuCalibration(cpu_model=key, threads=torch.get_num_threads(), peak_tflops=peaks,
                          memory_bandwidth_GB_per_s=bw, measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
                          method=method, extra={"device": device, "quick": plan.is_quick})


def device_key(device: str = "cpu") -> str:
    """The cache's name for this machine's ``device``: :func:`cpu_model_name`, or ``cuda: <name>``."""
    return cpu_model_name() if device == "cpu" else f"cuda: {torch.cuda.get_device_name()}"


def merge_best(old: CpuCalibration | None, new: CpuCalibration) -> CpuCalibration:
    """``new`` with, per dtype, the higher of its peak and ``old``'s (a peak is an upper bound:
    a re-measurement under load must not lower it); ``old``'s other dtypes are kept."""
    if old is None:
        return new
    peaks = dict(old.peak_tflops)
    for k, v in new.peak_tflops.items():
        peaks[k] = max(v, peaks.get(k, 0.0))
    kept = sorted(k for k in new.peak_tflops if peaks[k] > new.peak_tflops[k])
    method = new.method + (f"; kept the higher earlier {', '.join(kept)} peak" if kept else "")
    return dataclasses.replace(new, peak_tflops=peaks, method=method,
                               memory_bandwidth_GB_per_s=max(old.memory_bandwidth_GB_per_s,
                                                             new.memory_bandwidth_GB_per_s),
                               extra={**new.extra, "quick": bool(new.extra.get("quick")
                                                                 and old.extra.get("quick", True))})


def calibrate_and_save(plan: CalibrationPlan | None = None, *, threads: int | None = None, device: str = "cpu",
                       progress: Callable[[str], None] | None = None,
                       keep_best: bool = False) -> tuple[CpuCalibration, str]:
    """Measure and store in the calibration cache; returns the calibration and the cache path.

    ``keep_best``: merge with the cached entry of the same machine and thread count
    (:func:`merge_best`) instead of replacing it.
    """
    from trainperf.specs.cpu_calibration import load_calibration

    cal = calibrate(plan, threads=threads, device=device, progress=progress)
    if keep_best:
        cal = merge_best(load_calibration(cpu_model=cal.cpu_model, threads=cal.threads), cal)
    return cal, str(save_calibration(cal))
