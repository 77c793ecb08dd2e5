"""Dense GEMM efficiency per silicon and dtype: the best achievable fraction of the catalog peak
and how it falls for small dimensions.

``efficiency(m, n, k) = peak_fraction * s(m) * s(n) * s(k)`` with ``s(d) = d / (d + half_dim)``.

``peak_fraction`` is the MAMF/MAF-style best (Stas Bekman's maximum achievable matmul FLOPS,
AMD's MAF: the best of many large shapes with the vendor library), as a fraction of the dense peak
of the SKU that was measured, averaged over the silicon's measured SKUs, so it transfers to every
SKU of the silicon; a power-capped SKU's lower clock is the catalog's ``sustained_clock_fraction``,
applied by the caller to the peak. ``half_dim`` is fitted on the silicon's square and rectangular
sweeps with the vendor's per-kernel overhead charged separately: the caller adds that overhead
(``op_overhead_us``) per GEMM; this efficiency does not contain it. Grouped GEMMs (an MoE
layer's routed experts) run at :func:`grouped_fraction` of this law where measured. Not
modelled: wave quantisation (tile counts against SM counts), layouts/transposes, batched GEMMs,
K-bound output writes of very skinny GEMMs. Fitting, data and fallbacks: docs/KERNELS.md.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from trainperf.errors import SpecError, UnknownNameError
from trainperf.predict.kernels._params import check_silicon, params
from trainperf.vec import is_nonbool_number

DTYPES = ("bf16", "fp16", "fp8", "tf32", "fp32")


@lru_cache(maxsize=1)
def _tables() -> tuple[dict[tuple[str, str], float], dict[str, float]]:
    g = params()["gemm"]
    pf = {(sil, dt): p["value"] for sil, d in g["peak_fraction"].items() for dt, p in d.items()}
    hd = {sil: p["value"] for sil, p in g["half_dim"].items()}
    return pf, hd


def _fail(silicon: str, dtype: str) -> None:
    check_silicon(silicon)
    if dtype not in DTYPES:
        raise UnknownNameError("dtype", dtype, DTYPES)
    supported = sorted(d for (s, d) in _tables()[0] if s == silicon)
    raise SpecError("dtype", dtype, f"no catalog SKU of silicon {silicon!r} has a {dtype} peak; "
                                   f"supported: {', '.join(supported)}")


def peak_fraction(silicon: str, dtype: str) -> float:
    """Best achievable dense GEMM throughput (MAMF/MAF-style, large well-shaped problem) as a
    fraction of the catalog dense peak for ``dtype`` (bf16|fp16|fp8|tf32|fp32)."""
    try:
        return _tables()[0][(silicon, dtype)]
    except KeyError:
        _fail(silicon, dtype)
        raise


def half_dim(silicon: str, dtype: str) -> float:
    """Shape constant of s(d) = d / (d + half_dim): the fraction of peak_fraction a GEMM whose
    dimension is d keeps (fitted per silicon on square/rectangular sweeps; one value for all the
    silicon's dtypes, ``dtype`` is checked)."""
    if (silicon, dtype) not in _tables()[0]:
        _fail(silicon, dtype)
    return _tables()[1][silicon]


def efficiency(silicon: str, dtype: str, m: Any, n: Any, k: Any) -> Any:
    """peak_fraction * s(m) * s(n) * s(k) (m, n, k may be numpy arrays; a float for scalars).

    Dimensions must be positive.
    """
    try:
        pf = _tables()[0][(silicon, dtype)]
    except KeyError:
        _fail(silicon, dtype)
        raise
    h = _tables()[1][silicon]
    if is_nonbool_number(m) and is_nonbool_number(n) and is_nonbool_number(k):
        if m <= 0 or n <= 0 or k <= 0:
            raise SpecError("gemm shape", (m, n, k), "positive dimensions m, n, k")
        return pf * (m / (m + h)) * (n / (n + h)) * (k / (k + h))
    import numpy as np

    m, n, k = np.asarray(m, float), np.asarray(n, float), np.asarray(k, float)
    if (m <= 0).any() or (n <= 0).any() or (k <= 0).any():
        raise SpecError("gemm shape", "array", "positive dimensions m, n, k")
    return pf * (m / (m + h)) * (n / (n + h)) * (k / (k + h))


GROUPED_IMPLS = ("torch-grouped-mm", "te-grouped", "other")
"""Grouped-GEMM implementations the routed experts of an MoE layer may run: PyTorch's
``torch._grouped_mm`` (torchtitan), Transformer Engine's GroupedLinear (Megatron-Core
``--moe-grouped-gemm``), anything else."""


def grouped_fraction(silicon: str, dtype: str, impl: str) -> float:
    """Speed of the ``impl`` grouped GEMM over the dense GEMM law at the same shapes (each group its
    own M), measured on ``silicon`` in ``dtype``; 1.0 (the dense law) where nothing was measured.

    Measured: torch._grouped_mm in bf16 and torchao's MXFP8 scaled grouped mm on B200 (torchao's
    Llama 4 Scout and DeepSeek-V3 expert shapes, 1-8 groups, torch 2.10 nightly; the MXFP8 times
    taken back to the pre-quantised kernel by the recipe's GEMM factor, as the dense fp8 law is):
    about half the dense law in both. Unmeasured: every other silicon and implementation
    (docs/KERNELS.md)."""
    check_silicon(silicon)
    if impl not in GROUPED_IMPLS:
        raise UnknownNameError("grouped GEMM", impl, GROUPED_IMPLS)
    entry = params()["gemm"].get("grouped", {}).get(silicon, {}).get(dtype, {}).get(impl)
    return float(entry["value"]) if entry else 1.0
