"""GEMM: best achievable fraction of the dense peak per (silicon, dtype), and the shape constant."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from .common import (
    NEIGHBOUR,
    Param,
    Row,
    borrowed,
    catalog,
    cite,
    param,
    peak,
    silicons,
    vendor_knob,
)

DTYPES = ("bf16", "fp16", "fp8", "tf32", "fp32")
DTYPE_FALLBACK = {"fp16": "bf16", "tf32": "bf16", "fp32": "bf16", "bf16": "fp16"}
"""A dtype without a measurement on a silicon -> the dtype whose fraction it takes (same
tensor/matrix-core pipeline; fp32 is a guess flagged as such)."""


def supported(silicon: str, dtype: str) -> bool:
    """Some catalog SKU of the silicon has a peak for ``dtype`` (silicons without peaks, the host
    CPU, accept every dtype)."""
    skus = [h for h in catalog().values() if h.silicon == silicon]
    return not skus or any(dtype in h.peak_tflops for h in skus)


def _measured_peaks(rows: list[Row]) -> dict[tuple[str, str], Param]:
    out: dict[tuple[str, str], Param] = {}
    by: dict[tuple[str, str], dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["use"] == "peak":
            by[(r["silicon"], r["dtype_key"])][r["sku"]].append(r)
    for (sil, dt), skus in sorted(by.items()):
        fracs, parts = [], []
        for sku, rs in sorted(skus.items()):
            p = peak(sku, dt)
            fs = [float(r["tflops"]) / p for r in rs]
            fracs.append(sum(fs) / len(fs))
            parts.append(f"{sku} " + " and ".join(f"{r['tflops']} ({cite(r)})" for r in rs)
                         + f" / {p:g} = {sum(fs) / len(fs):.3f}")
        out[(sil, dt)] = param(sum(fracs) / len(fracs), True,
                               "mean over SKUs of MAMF/MAF TFLOP/s / catalog dense peak: " + "; ".join(parts))
    best: dict[tuple[str, str], tuple[float, Row]] = {}
    for r in rows:
        if r["use"] == "sweep":
            f = float(r["tflops"]) / peak(r["sku"], r["dtype_key"])
            key = (r["silicon"], r["dtype_key"])
            if key not in best or f > best[key][0]:
                best[key] = (f, r)
    for key, (f, r) in sorted(best.items()):
        if key not in out:
            out[key] = param(f, True, f"no MAMF/MAF for this silicon and dtype: the best vendor-library sweep "
                             f"point, {r['tflops']} TFLOP/s at {r['m']}x{r['n']}x{r['k']} on {r['sku']} / "
                             f"{peak(r['sku'], r['dtype_key']):g} ({cite(r)})")
    return out


def peak_fractions(rows: list[Row]) -> dict[str, dict[str, Param]]:
    """Per silicon and supported dtype: MAMF/MAF fraction (mean over the silicon's measured SKUs of
    each SKU's mean), else the best sweep point, else the documented fallbacks."""
    measured = _measured_peaks(rows)
    out: dict[str, dict[str, Param]] = {}
    for sil, vendor in silicons().items():
        out[sil] = {dt: _fallback(sil, vendor, dt, measured) for dt in DTYPES if supported(sil, dt)}
    return out


def _fallback(sil: str, vendor: str, dt: str, measured: dict[tuple[str, str], Param]) -> Param:
    if (sil, dt) in measured:
        return measured[(sil, dt)]
    alt = DTYPE_FALLBACK.get(dt)
    if alt and (sil, alt) in measured:
        return borrowed(measured[(sil, alt)], f"no {dt} measurement on {sil}: the {alt} fraction of the same "
                        "silicon (ratio 1)")
    nb = NEIGHBOUR.get(sil)
    for d in (dt, alt):
        if nb and d and (nb, d) in measured:
            return borrowed(measured[(nb, d)], f"no {sil} measurement: the {nb} {d} fraction of peak (nearest "
                            "measured silicon of the vendor; ratio 1)")
    v, src = vendor_knob(vendor, "fp8_matmul_efficiency" if dt == "fp8" else "matmul_efficiency")
    return param(v, False, f"no {sil} GEMM measurement: {src}")


MIN_TIME_US = 50.0
"""Shapes measured faster than this are left out of the shape fit: their time is mostly fixed cost
(launch, synchronisation, the benchmark's own timing: ~30 us in the torch-level HipKittens sweeps),
which the step model charges separately as a per-kernel overhead."""


def fit_half_dim(sweeps: dict[str, list[Row]], t0_us: float) -> tuple[float, dict[str, float], float, int]:
    """Shared ``half_dim`` h of one silicon's sweeps.

    Model per shape: time = 2mnk / (P peak s(m) s(n) s(k)) + t0 with s(d) = d / (d + h), P the
    sweep's own best fraction (its software's plateau; the silicon's best is ``peak_fraction``) and
    t0 the vendor's per-kernel overhead (``op_overhead_us`` of efficiency.toml, which the step model
    charges per kernel). Least squares on log time over h in [0, 4096] (step 2), shapes measured
    under :data:`MIN_TIME_US` left out. Returns (h, {sweep: P}, rms log error, shapes used).
    """
    hs = np.arange(0.0, 4096.0 + 1e-9, 2.0)
    total = np.zeros_like(hs)
    plateau: dict[str, float] = {}
    count = 0
    for name, rs in sorted(sweeps.items()):
        pk = peak(rs[0]["sku"], rs[0]["dtype_key"])
        m, n, k, tf = (np.array([float(r[c]) for r in rs]) for c in ("m", "n", "k", "tflops"))
        t = 2 * m * n * k / (tf * 1e12) * 1e6
        plateau[name] = float(np.max(tf / pk))
        keep = t >= MIN_TIME_US
        m, n, k, t = m[keep], n[keep], k[keep], t[keep]
        s = (m / (m + hs[:, None])) * (n / (n + hs[:, None])) * (k / (k + hs[:, None]))
        tc = 2 * m * n * k / (plateau[name] * s * pk * 1e12) * 1e6 + t0_us
        total += ((np.log(t)[None, :] - np.log(tc)) ** 2).sum(axis=1)
        count += int(keep.sum())
    i = int(np.argmin(total))
    return float(hs[i]), plateau, math.sqrt(float(total[i]) / count), count


def half_dims(rows: list[Row]) -> dict[str, Param]:
    """Per silicon: the shared shape constant of its sweeps (all dtypes), else the fallbacks."""
    by: dict[str, dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["use"] == "sweep":
            by[r["silicon"]][r["sweep"]].append(r)
    measured: dict[str, Param] = {}
    for sil, sweeps in sorted(by.items()):
        t0, t0_src = vendor_knob(silicons()[sil], "op_overhead_us")
        h, plateau, rms, used = fit_half_dim(sweeps, t0)
        detail = "; ".join(f"{name} (plateau {p:.3f}; {cite(sweeps[name][0])})" for name, p in plateau.items())
        measured[sil] = param(h, True, f"least-squares fit of time = 2mnk/(P peak s(m)s(n)s(k)) + {t0:g} us "
                              f"(the {t0_src}) on {used} shapes measured >= {MIN_TIME_US:g} us, rms log error "
                              f"{rms:.3f}: {detail}")
    out: dict[str, Param] = {}
    for sil, vendor in silicons().items():
        nb = NEIGHBOUR.get(sil)
        if sil in measured:
            out[sil] = measured[sil]
        elif nb in measured:
            out[sil] = borrowed(measured[nb], f"no {sil} sweep: the {nb} half_dim (nearest measured silicon of "
                                "the vendor)")
        else:
            v, src = vendor_knob(vendor, "matmul_half_dim")
            out[sil] = param(v, False, f"no {sil} sweep: {src}")
    return out


def grouped(rows: list[Row], fractions: dict[str, dict[str, Param]], halves: dict[str, Param],
            recipe_factors: dict[str, dict[str, float]] | None = None) -> dict[str, dict[str, dict[str, Param]]]:
    """Per silicon, dtype and grouped-GEMM implementation measured: the grouped kernel's speed over
    the dense law's at the same shapes (each of the G groups M/G rows), mean over the measured
    shapes. An fp8 row's time includes its recipe's dynamic quantisation (torchao's MXFP8 scaled
    grouped mm quantises its inputs): its speed is taken back to the pre-quantised kernel's, as
    the dense fp8 law is, by the recipe's GEMM factor (``recipe_factors``: silicon -> recipe ->
    factor, :mod:`tools.kernel_fitting.fp8`), which the step model applies again to every fp8 GEMM
    of a run. Only measured entries are stored; elsewhere the expert GEMMs run at the dense law
    (:func:`trainperf.predict.kernels.gemm.grouped_fraction`)."""
    by: dict[tuple[str, str, str], list[tuple[float, str, Row]]] = defaultdict(list)
    for r in rows:
        if r["use"] != "grouped":
            continue
        sil, dt = r["silicon"], r["dtype_key"]
        impl, groups = r["sweep"].rsplit("-G", 1)  # curate_kernels names the sweep <impl>-G<groups>
        m, n, k = float(r["m"]) / int(groups), float(r["n"]), float(r["k"])
        h = halves[sil]["value"]
        dense = fractions[sil][dt]["value"] * (m / (m + h)) * (n / (n + h)) * (k / (k + h))
        quant = 1.0
        if dt == "fp8":
            recipe = "mxfp8" if "mxfp8" in r["dtype"].lower() else "tensorwise"
            quant = (recipe_factors or {}).get(sil, {}).get(recipe, 0.0)
            if not quant:
                continue  # no recipe factor to take the quantisation out with
        by[(sil, dt, impl)].append((float(r["tflops"]) * quant / peak(r["sku"], dt) / dense, groups, r))
    out: dict[str, dict[str, dict[str, Param]]] = {}
    for (sil, dt, impl), pts in sorted(by.items()):
        ratios = [x for x, _, _ in pts]
        detail = "; ".join(f"{r['m']}x{r['n']}x{r['k']} G={g}: {r['tflops']} TFLOP/s = {x:.3f} of the dense law"
                           for x, g, r in pts)
        quantised = " (its time times the recipe's GEMM factor: the pre-quantised kernel's speed)" if dt == "fp8" else ""
        out.setdefault(sil, {}).setdefault(dt, {})[impl] = param(
            sum(ratios) / len(ratios), True,
            f"mean over {len(pts)} shapes of the {impl} grouped GEMM's forward+backward TFLOP/s (6MNK / time){quantised} "
            f"over the dense law at M/G x N x K ({cite(pts[0][2])}): {detail}")
    return out


def params(rows: list[Row], recipe_factors: dict[str, dict[str, float]] | None = None) -> dict[str, dict]:
    fractions, halves = peak_fractions(rows), half_dims(rows)
    return {"peak_fraction": fractions, "half_dim": halves,
            "grouped": grouped(rows, fractions, halves, recipe_factors)}
