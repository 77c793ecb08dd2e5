"""Memory-bound kernels: STREAM-like HBM bandwidth, and elementwise kernels eager / fused / compiled.

An elementwise kernel's fraction counts only its IDEAL bytes (each input read once, each output
written once, derived from the benchmark's stated shapes and dtype) over the catalog HBM
bandwidth, at the largest configuration of each sweep (where launch costs are a few percent), so
an eager RMSNorm that makes four passes shows up as a low fraction.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from statistics import median

from .common import (
    NEIGHBOUR,
    Param,
    Row,
    borrowed,
    catalog,
    cite,
    param,
    scf,
    silicons,
    vendor_knob,
)

IMPLEMENTATIONS = ("eager", "fused", "compiled")


def ideal_bytes(r: Row) -> tuple[float, str]:
    """Ideal bytes of one benchmark row and the formula used (M rows x N columns, s bytes/element)."""
    k, d, shape = r["kernel"], r["direction"], r["shape"]
    if r["silicon"] == "cdna4":  # HipKittens analysis benchmarks, bf16
        g = {a: int(b) for a, b in re.findall(r"(\w)=(\d+)", shape)}
        if k == "rope":  # one (B, H, N, D) tensor in and out, cos/sin (N, D)
            return 2 * 2 * g["B"] * g["H"] * g["N"] * g["D"] + 2 * 2 * g["N"] * g["D"], "2 s BHND + 2 s ND (cos, sin)"
        return 4 * 2 * g["B"] * g["N"] * g["D"], "4 s BND (read x, residual; write out, residual out)"
    mx = re.match(r"x=(\d+)", shape)
    if mx is None:
        raise ValueError(f"{k} row on {r['silicon']}: shape {shape!r} does not start with x=<elements>")
    x = int(mx.group(1))
    cfg = json.loads(shape.split(";", 1)[1])
    s = 4 if cfg.get("dtype") == "torch.float32" else 2
    if k == "rms_norm":
        m, n = cfg["M"], x
        return ((2 * m * n + n) * s, "s (2MN + N): read x, w; write y") if d == "fwd" else \
            ((3 * m * n + 2 * n) * s, "s (3MN + 2N): read dy, x, w; write dx, dw")
    if k == "layer_norm":
        m, n = cfg["M"], x
        return ((2 * m * n + 2 * n) * s, "s (2MN + 2N)") if d == "fwd" else ((3 * m * n + 4 * n) * s, "s (3MN + 4N)")
    if k == "fused_add_rms_norm":
        m, n = cfg["M"], x
        return (4 * m * n * s, "4 s MN: read x, residual; write y, residual out") if d == "fwd" else \
            (4 * m * n * s, "4 s MN: read dy, d(residual out), saved sum; write dx")
    if k == "rope":  # Liger benchmark: batch 1, q (seq, nq, hd), k (seq, nkv, hd), cos/sin (seq, hd)
        seq = cfg.get("seq_len", x)
        hidden = x if "seq_len" in cfg else cfg["hidden_size"]
        nq, nkv = cfg["num_q_heads"], cfg["num_kv_heads"]
        hd = hidden // nq
        return 2 * s * seq * hd * (nq + nkv) + 2 * s * seq * hd, "2 s seq hd (nq + nkv) + 2 s seq hd (cos, sin)"
    if k == "megatron_swiglu":  # T = S B tokens, input (T, 2F), output (T, F); bf16 (fp32 would beat HBM)
        t, f = cfg["S"] * cfg["B"], x
        return (3 * t * f * 2, "3 s TF: read (T, 2F), write (T, F)") if d == "fwd" else \
            (5 * t * f * 2, "5 s TF: read dy (T, F), x (T, 2F); write dx (T, 2F)")
    raise KeyError(k)


def _provider(r: Row) -> str:
    m = re.search(r"provider=([\w-]+)", r["software"])
    return m.group(1) if m else r["software"].split(";")[0]


def kernel_fractions(rows: list[Row]) -> dict[tuple[str, str], dict[str, tuple[float, str]]]:
    """(silicon, implementation) -> {kernel label: (fraction, source)}; fwd and bwd of one kernel are
    combined by their ideal bytes (time-weighted harmonic mean)."""
    sweeps: dict[tuple[str, str, str, str, str, str], list[Row]] = defaultdict(list)
    direct: dict[tuple[str, str], dict[str, tuple[float, str]]] = defaultdict(dict)
    for r in rows:
        if r["use"] != "elementwise":
            continue
        hbm = catalog()[r["sku"]].hbm_bandwidth_GB_per_s
        if r["GBps"]:  # bandwidth stated by the source (B200 mxfp8 quantize kernels)
            direct[(r["silicon"], r["implementation"])][r["kernel"]] = (
                float(r["GBps"]) / hbm, f"{r['kernel']}: {r['GBps']} GB/s / {hbm:g} ({cite(r)})")
            continue
        cfg = r["shape"].split(";", 1)[1] if ";" in r["shape"] else ""
        sweeps[(r["silicon"], r["implementation"], r["kernel"], _provider(r), r["direction"], cfg)].append(r)
    parts: dict[tuple[str, str, str, str], dict[str, tuple[float, float, str]]] = defaultdict(dict)
    for (sil, impl, kernel, prov, direction, _), rs in sweeps.items():
        sized = [(ideal_bytes(r), r) for r in rs]
        (b, formula), r = max(sized, key=lambda t: t[0][0])
        hbm = catalog()[r["sku"]].hbm_bandwidth_GB_per_s
        frac = b / (float(r["time_ms"]) * 1e-3) / 1e9 / hbm / scf(r["sku"])
        key = (sil, impl, kernel, prov)
        if direction not in parts[key] or b > parts[key][direction][1]:
            parts[key][direction] = (frac, b, f"{direction} {frac:.3f} = {formula} = {b / 1e6:.1f} MB in "
                                     f"{r['time_ms']} ms / {hbm:g} GB/s ({cite(r)})")
    out: dict[tuple[str, str], dict[str, tuple[float, str]]] = defaultdict(dict, {k: dict(v) for k, v in direct.items()})
    for (sil, impl, kernel, prov), dirs in sorted(parts.items()):
        if len(dirs) < 2 and any(len(d) == 2 for (s2, i2, _, _), d in parts.items() if (s2, i2) == (sil, impl)):
            continue  # training runs both passes: forward-only kernels only where no kernel has both
        total = sum(b for _, b, _ in dirs.values())
        frac = total / sum(b / f for f, b, _ in dirs.values())
        out[(sil, impl)][f"{kernel} ({prov})"] = (frac, "; ".join(src for _, _, src in sorted(dirs.values(),
                                                                                               key=lambda t: t[2])))
    return out


def hbm_params(rows: list[Row], kernels: dict[tuple[str, str], dict[str, tuple[float, str]]]) -> dict[str, Param]:
    by: dict[str, dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["use"] == "stream":
            by[r["silicon"]][r["sku"]].append(r)
    measured: dict[str, Param] = {}
    for sil, skus in sorted(by.items()):
        fracs, parts = [], []
        for sku, rs in sorted(skus.items()):
            hbm = catalog()[sku].hbm_bandwidth_GB_per_s
            f = [float(r["GBps"]) / hbm / scf(sku) for r in rs]
            fracs.append(sum(f) / len(f))
            parts.append(f"{sku} " + ", ".join(f"{r['kernel']} {float(r['GBps']):g} GB/s ({cite(r)})" for r in rs)
                         + f" / {hbm:g} = {sum(f) / len(f):.3f}")
        measured[sil] = param(sum(fracs) / len(fracs), True,
                              "mean over SKUs of STREAM-like copy/triad (and torch.clone) / catalog HBM bandwidth: "
                              + "; ".join(parts))
    out: dict[str, Param] = {}
    for sil, vendor in silicons().items():
        nb = NEIGHBOUR.get(sil)
        best = max((v for (s, _), d in kernels.items() if s == sil for v in d.values()), default=None)
        if sil in measured:
            out[sil] = measured[sil]
        elif best is not None and sil not in ("cdna4",):
            out[sil] = param(best[0], True, f"no STREAM measurement: the fastest measured memory-bound kernel, a "
                             f"lower bound ({best[1]})")
        elif nb in measured:
            out[sil] = borrowed(measured[nb], f"no {sil} STREAM measurement: {nb}'s fraction (nearest measured "
                                "silicon of the vendor; ratio 1)")
        else:
            v, src = vendor_knob(vendor, "memory_efficiency")
            out[sil] = param(v, False, f"no {sil} HBM measurement: {src}")
    return out


def _eager_vs_fused(kernels: dict[tuple[str, str], dict[str, tuple[float, str]]], *, exclude_megatron: bool
                    ) -> list[tuple[str, str, float, str, float, str]]:
    """Every eager kernel that was also measured fused or compiled on the same silicon, paired with its
    best such peer (same base name, i.e. the name before " ("): (silicon, base name, eager fraction,
    eager source, best peer fraction, best peer source). ``exclude_megatron`` drops peers whose name
    ends in "(megatron)", i.e. Megatron-LM's own implementation rather than the kernel benchmark's."""
    pairs = []
    for (sil, impl), d in kernels.items():
        if impl != "eager":
            continue
        best = {**kernels.get((sil, "compiled"), {}), **kernels.get((sil, "fused"), {})}
        for name, (f, f_src) in d.items():
            base = name.split(" (")[0]
            peers = [(g, g_src) for n2, (g, g_src) in best.items()
                     if n2.split(" (")[0] == base and not (exclude_megatron and "megatron)" in n2)]
            if peers:
                g, g_src = max(peers)
                pairs.append((sil, base, f, f_src, g, g_src))
    return pairs


def elementwise_params(kernels: dict[tuple[str, str], dict[str, tuple[float, str]]],
                       hbm: dict[str, Param]) -> dict[str, dict[str, Param]]:
    """Elementwise fractions that compare across silicon.

    The measured kernel sets differ by silicon (Ampere's eager set is Hugging Face RMSNorm and RoPE,
    Hopper's is add+RMSNorm and SwiGLU, CDNA4's is rotary and dropout+residual+LayerNorm), so a
    per-silicon median would carry the kernel mix, not the silicon. Instead every implementation
    is a silicon-independent share of the silicon's own STREAM bandwidth (``hbm_fraction``), each
    share the median over every measured kernel on every silicon:

    * fused = hbm_fraction x median(fused kernel / hbm_fraction);
    * compiled = fused (torch.compile/XLA emit fused kernels of the same op chains; measured
      compiled/fused 0.88 on Blackwell, 1.07 on CDNA4);
    * eager = fused x median(eager / fused) over the kernels measured both ways on one silicon
      (the extra passes of unfused PyTorch ops, a property of the code, not of the chip).
    """
    def h(sil: str) -> float:
        return float(hbm[sil]["value"])

    fused = sorted((f / h(sil), f"{sil} {name} {f:.3f}/{h(sil):.3f}") for (sil, impl), d in kernels.items()
                   if impl == "fused" for name, (f, _) in d.items())
    r_fused = median(v for v, _ in fused)
    ratios = sorted((f / g, f"{sil} {base} {f:.3f}/{g:.3f}")
                    for sil, base, f, _, g, _ in _eager_vs_fused(kernels, exclude_megatron=False))
    r_eager = median(v for v, _ in ratios)
    fused_src = (f"fused share of STREAM {r_fused:.3f} = median over {len(fused)} fused kernels on "
                 f"{len({s.split()[0] for _, s in fused})} silicons of ideal-byte bandwidth / the silicon's STREAM "
                 "fraction (" + "; ".join(s for _, s in fused) + ")")
    eager_src = (f"eager / fused {r_eager:.3f} = median over {len(ratios)} kernels measured both ways on one silicon "
                 "(" + "; ".join(s for _, s in ratios) + ")")
    out: dict[str, dict[str, Param]] = {}
    for sil, vendor in silicons().items():
        hp = hbm[sil]
        if not hp.get("measured") and (vendor in ("google", "intel", "cpu")):
            v, src = vendor_knob(vendor, "memory_efficiency")
            p = param(v, False, f"no {sil} elementwise measurement: {src}")
            out[sil] = {impl: p for impl in IMPLEMENTATIONS}
            continue
        fz = h(sil) * r_fused
        out[sil] = {
            "fused": param(fz, False, f"derived: {sil} STREAM fraction {h(sil):.3f} x {fused_src}"),
            "compiled": param(fz, False, f"derived: compiled = fused on {sil} (torch.compile/XLA fuse the same op "
                              f"chains; measured compiled/fused 0.88 on blackwell, 1.07 on cdna4); {fused_src}"),
            "eager": param(fz * r_eager, False, f"derived: {sil} fused {fz:.3f} x {eager_src}"),
        }
        for impl in IMPLEMENTATIONS:  # the silicon's own kernels, for reference and tests
            if (sil, impl) in kernels:
                out[sil][impl]["kernels"] = {n: round(f, 4) for n, (f, _) in sorted(kernels[(sil, impl)].items())}
    return out


EAGER_OPS: dict[str, tuple[str, ...]] = {
    "rmsnorm": ("rms_norm", "fused_add_rms_norm"),
    "rope": ("rope",),
    "swiglu": ("megatron_swiglu",),
}
"""Ops that unfused PyTorch code runs as several kernels (Python RMSNorm: cast, pow, mean, rsqrt,
two multiplies; rotate-half RoPE; silu then multiply) -> the benchmarked kernels that measure them."""
NATIVE_SOURCE = ("one native PyTorch kernel (torch.nn.functional.layer_norm, gelu, relu, add): a single pass "
                 "over its ideal bytes, as a fused kernel -- no eager penalty")


def eager_penalty_params(kernels: dict[tuple[str, str], dict[str, tuple[float, str]]]) -> dict[str, Param]:
    """Per op: fused / eager time of the same kernel on one silicon (geometric mean over silicons):
    how many times its ideal bytes unfused PyTorch code moves in an isolated benchmark (a training
    step pays its stack's share of the excess: ``eager_pass_share`` of
    :mod:`trainperf.predict.stack_kernels`). Ops PyTorch runs as one native kernel (LayerNorm,
    GELU, ReLU, residual adds) have none."""
    out: dict[str, Param] = {}
    for op, names in EAGER_OPS.items():
        found = [(g / f, f"{sil} {base}: {g:.3f} fused / {f:.3f} eager [fused: {g_src}] [eager: {f_src}]")
                 for sil, base, f, f_src, g, g_src in _eager_vs_fused(kernels, exclude_megatron=True)
                 if base in names]
        g = math.exp(sum(math.log(v) for v, _ in found) / len(found))
        out[op] = param(g, True, f"geometric mean over {len(found)} measurement(s) of fused / eager bandwidth of the "
                        "same kernel: " + "; ".join(src for _, src in found))
    for op in ("layernorm", "gelu", "add"):
        out[op] = param(1.0, False, NATIVE_SOURCE)
    return out


def params(rows: list[Row]) -> dict[str, dict]:
    kernels = kernel_fractions(rows)
    hbm = hbm_params(rows, kernels)
    return {"hbm": hbm, "elementwise": elementwise_params(kernels, hbm),
            "eager_penalty": eager_penalty_params(kernels)}
