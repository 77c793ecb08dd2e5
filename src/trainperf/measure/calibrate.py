"""Measure this machine's achievable matmul TFLOP/s per dtype and its memory bandwidth.

A CPU has no datasheet peak a training run can reach, so MFU on a CPU is computed against what
large square matmuls achieve here (``torch.matmul``, best of several timed repeats; a multiply-
add counts 2 FLOPs, so an n x n x n matmul is ``2 n^3`` FLOPs) with the threads a training
process uses. Memory bandwidth is a large-array copy, counting bytes read plus bytes written.
The result is stored with :func:`trainperf.specs.cpu_calibration.save_calibration`, keyed by
the CPU model and core count, where ``get_hardware("cpu")`` finds it.

On a CUDA device the same measurement (timed with CUDA synchronisation) is stored under the key
``"cuda: <device name>"``; the bench reports MFU against it beside the datasheet peak.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import torch

from trainperf.specs.cpu_calibration import CpuCalibration, cpu_model_name, save_calibration

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}


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

    @classmethod
    def quick(cls) -> CalibrationPlan:
        return cls(sizes=(1536,), repeats=3, min_time_s=0.1, bandwidth_MB=128)


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
                  min_time_s: float = 0.25, device: str = "cpu") -> float:
    """Best achieved TFLOP/s of ``n x n @ n x n`` matmuls in ``dtype`` (2 n^3 FLOPs each)."""
    best = 0.0
    for n in sizes:
        g = torch.Generator(device=device).manual_seed(0)
        a = torch.randn(n, n, generator=g, device=device).to(dtype)
        b = torch.randn(n, n, generator=g, device=device).to(dtype)
        out = torch.empty(n, n, dtype=dtype, device=device)
        best = max(best, _best_rate(lambda a=a, b=b, out=out: torch.matmul(a, b, out=out),
                                    2.0 * n**3, repeats, min_time_s, device))
    return best / 1e12


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
    for name, dtype in DTYPES.items():
        say(f"matmul {name} ({'x'.join(map(str, plan.sizes))}, best of {plan.repeats}) ...")
        peaks[name] = round(matmul_tflops(dtype, plan.sizes, plan.repeats, plan.min_time_s, device), 6)
    say(f"memory bandwidth (copy of {plan.bandwidth_MB} MB) ...")
    bw = round(memory_bandwidth_GB_per_s(plan.bandwidth_MB, plan.repeats, device), 3)
    key = cpu_model_name() if device == "cpu" else f"cuda: {torch.cuda.get_device_name()}"
    method = (f"torch {torch.__version__} matmul n={','.join(map(str, plan.sizes))}, best of {plan.repeats} "
              f"repeats >= {plan.min_time_s}s; copy {plan.bandwidth_MB} MB, read+write bytes")
    return CpuCalibration(cpu_model=key, threads=torch.get_num_threads(), peak_tflops=peaks,
                          memory_bandwidth_GB_per_s=bw, measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
                          method=method, extra={"device": device, "quick": plan == CalibrationPlan.quick()})


def calibrate_and_save(plan: CalibrationPlan | None = None, *, threads: int | None = None, device: str = "cpu",
                       progress: Callable[[str], None] | None = None) -> tuple[CpuCalibration, str]:
    """Measure and store in the calibration cache; returns the calibration and the cache path."""
    cal = calibrate(plan, threads=threads, device=device, progress=progress)
    return cal, str(save_calibration(cal))
