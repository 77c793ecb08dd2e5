"""Which precision the bench trains in: bf16 where this device computes it natively, else fp32.

``--precision auto`` (the bench's default) resolves here, in the launching process, before any
worker starts:

* CUDA: bf16 when the GPU has bf16 tensor cores (compute capability >= 8.0, Ampere and later)
  or is a ROCm device (MI200 and later), else fp32.
* CPU: bf16 when the CPU flags list AMX-BF16, AVX512-BF16 (x86) or BF16 (ARMv8.6) *and* a short
  timing confirms that a bf16 matmul is not slower than an fp32 one; else fp32. Without those
  instructions PyTorch emulates bf16 through fp32 conversions, about 100 times slower than fp32
  on an AVX2-only EPYC, so a "bf16 by default" bench takes minutes instead of seconds.

``TRAINPERF_NATIVE_BF16=0`` forces "no native bf16" (auto picks fp32) and ``=1`` forces
"native" (auto picks bf16), with no detection or timing: the tests use it to exercise both
paths on any machine. An explicit ``--precision bf16`` on a device without native bf16 runs as
asked, after one warning that gives the measured slowdown.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from trainperf.specs.cpu_calibration import NATIVE_BF16_FLAGS, cpu_flags, isa_tag

NATIVE_BF16_ENV = "TRAINPERF_NATIVE_BF16"
"""``0``: behave as if this device had no native bf16; ``1``: as if it had; unset: detect."""

AUTO = "auto"
TIMING_SIZE = 384
"""n of the n x n x n matmuls timed to confirm (or measure the cost of) bf16; ~0.1 s at worst."""


@dataclass(frozen=True)
class NativeBf16:
    """Whether this device runs bf16 matmuls natively, and the evidence."""

    native: bool
    why: str
    """One phrase: the flags / capability / timing / override that decided."""
    bf16_over_fp32_time: float | None = None
    """Measured time of a bf16 matmul over the same fp32 matmul (> 1: bf16 is slower); None if not timed."""


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision a bench runs in and why (stored in the run header and ``summary.json``)."""

    precision: str
    """What runs: ``fp32``, ``bf16``..."""
    requested: str
    """What was asked: ``auto`` or an explicit precision."""
    reason: str
    """One line: why this precision (e.g. "auto: this CPU has no native bf16 (flags avx2 fma)")."""
    native_bf16: bool | None = None
    """The detection's verdict (None when it was not needed)."""
    bf16_over_fp32_time: float | None = None
    """Measured bf16 / fp32 matmul time, when timed."""
    warning: str | None = None
    """Shown once before the run: an explicit bf16 on a device that emulates it."""
    fp8_base: str | None = None
    """For fp8: the dtype of everything but the fp8 GEMMs (bf16; fp32 on a CPU without native bf16)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _env_override() -> bool | None:
    value = os.environ.get(NATIVE_BF16_ENV, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return None


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def matmul_time_ratio(device: str = "cpu", n: int = TIMING_SIZE, repeats: int = 5) -> float:
    """Best time of an ``n^3`` bf16 matmul over the best time of the same fp32 matmul.

    The two dtypes are timed in alternation, ``repeats`` rounds, so that a burst of load from
    other processes slows both rather than one (a loaded machine must not flip the choice)."""
    dtypes = (torch.float32, torch.bfloat16)
    ops = {}
    for dtype in dtypes:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        torch.matmul(a, b)  # warm-up
        ops[dtype] = (a, b)
    _sync(device)
    best = dict.fromkeys(dtypes, float("inf"))
    for _ in range(repeats):
        for dtype in dtypes:
            a, b = ops[dtype]
            t = time.perf_counter()
            torch.matmul(a, b)
            _sync(device)
            best[dtype] = min(best[dtype], time.perf_counter() - t)
    return max(best[torch.bfloat16], 1e-9) / max(best[torch.float32], 1e-9)


def detect_native_bf16(device_type: str = "cpu") -> NativeBf16:
    """Does this device compute bf16 matmuls natively? (see the module docstring)."""
    forced = _env_override()
    if forced is not None:
        return NativeBf16(forced, f"{NATIVE_BF16_ENV}={os.environ[NATIVE_BF16_ENV].strip()} "
                                  f"forces {'native' if forced else 'no native'} bf16")
    if device_type == "cuda":
        name = torch.cuda.get_device_name()
        if torch.version.hip:
            return NativeBf16(True, f"ROCm device {name} has bf16 matrix cores")
        major, minor = torch.cuda.get_device_capability()
        if (major, minor) >= (8, 0):
            return NativeBf16(True, f"{name} (compute capability {major}.{minor}) has bf16 tensor cores")
        return NativeBf16(False, f"{name} (compute capability {major}.{minor} < 8.0) has no bf16 tensor cores")
    flags = cpu_flags()
    have = [f for f in NATIVE_BF16_FLAGS if f in flags]
    if not have:
        return NativeBf16(False, f"this CPU has no AMX-BF16/AVX512-BF16 (ISA: {isa_tag(flags)})")
    ratio = matmul_time_ratio("cpu")
    if ratio > 1.0:
        return NativeBf16(False, f"this CPU lists {', '.join(have)} but a bf16 matmul took {ratio:.2f}x "
                                 "the fp32 time here", ratio)
    return NativeBf16(True, f"this CPU has {', '.join(have)} and a bf16 matmul took {ratio:.2f}x the fp32 time",
                      ratio)


def resolve_precision(requested: str | None, device_type: str = "cpu") -> PrecisionChoice:
    """The precision to run for ``requested`` (``None`` or ``"auto"``: the native choice)."""
    requested = (requested or AUTO).strip().lower()
    if requested == AUTO:
        nb = detect_native_bf16(device_type)
        prec = "bf16" if nb.native else "fp32"
        return PrecisionChoice(prec, AUTO, f"auto: {nb.why} -> {prec}", nb.native, nb.bf16_over_fp32_time)
    if requested == "fp8":
        return _fp8_choice(device_type)
    if requested != "bf16":
        return PrecisionChoice(requested, requested, f"{requested} as requested")
    nb = detect_native_bf16(device_type)
    if nb.native:
        return PrecisionChoice("bf16", "bf16", f"bf16 as requested ({nb.why})", True, nb.bf16_over_fp32_time)
    ratio = nb.bf16_over_fp32_time
    if ratio is None and _env_override() is None:
        ratio = matmul_time_ratio(device_type if device_type == "cpu" else "cuda")
    cost = f"a bf16 matmul measured {ratio:.1f}x the fp32 time here" if ratio is not None else "it is emulated"
    warning = (f"warning: --precision bf16 on a device without native bf16 ({nb.why}): {cost}; "
               "the run will be slow (--precision auto or fp32 runs fp32)")
    return PrecisionChoice("bf16", "bf16", f"bf16 as requested, not native ({nb.why})", False, ratio, warning)


def _fp8_choice(device_type: str) -> PrecisionChoice:
    """fp8 as requested: Float8 linears, the rest in bf16 where it is native, else fp32 (a CPU
    without bf16 instructions would emulate every bf16 op about 100 times slower)."""
    nb = detect_native_bf16(device_type)
    base = "bf16" if nb.native else "fp32"
    return PrecisionChoice("fp8", "fp8", f"fp8 as requested (Float8 linears; other ops in {base}: {nb.why})",
                           nb.native, nb.bf16_over_fp32_time, fp8_base=base)
