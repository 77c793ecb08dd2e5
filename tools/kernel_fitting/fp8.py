"""fp8 recipes: time of an fp8 GEMM including its scaling and quantisation over the pre-quantised
fp8 kernel, from Transformer Engine's GEMM profiling (per-layer totals of the 12 GEMMs of a 5B
layer, autocast vs --pre-quantize), and torchao's end-to-end Llama3-8B ratios as checks and for
the recipes TE does not profile (rowwise)."""

from __future__ import annotations

from collections import defaultdict

from .common import Param, Row, borrowed, cite, param, silicons

RECIPES = ("tensorwise", "rowwise", "delayed", "blockwise", "mxfp8")
MX_SILICONS = ("blackwell", "cdna4")
"""Silicons with MX-format (block-32 scaled) tensor/matrix cores."""
FP8_SILICONS = ("hopper", "blackwell", "ada", "cdna3", "cdna4", "gaudi2", "gaudi3")
"""Silicons whose catalog SKUs have an fp8 peak."""


def _te(rows: list[Row]) -> dict[str, dict[tuple[str, str], Row]]:
    out: dict[str, dict[tuple[str, str], Row]] = defaultdict(dict)
    for r in rows:
        if r["use"] == "recipe":
            out[r["silicon"]][(r["recipe"], r["mode"])] = r
    return out


def _e2e(rows: list[Row]) -> dict[str, dict[str, Row]]:
    out: dict[str, dict[str, Row]] = defaultdict(dict)
    for r in rows:
        if r["use"] == "e2e":
            out[r["silicon"]][r["recipe"]] = r
    return out


def params(rows: list[Row], peak_fraction: dict[str, dict[str, Param]]) -> dict[str, dict]:
    """Per fp8 silicon: each recipe's factor over the pre-quantised fp8 GEMM time, and the end-to-end checks."""
    te, e2e = _te(rows), _e2e(rows)
    measured: dict[str, dict[str, Param]] = defaultdict(dict)
    ratio_r: dict[str, tuple[float, str]] = {}
    for sil, t in te.items():
        ratio_r[sil] = _prequantized_ratio(t)
        for recipe, factor in _te_factors(t).items():
            measured[sil][recipe] = factor
    checks = _e2e_checks(e2e, measured, ratio_r, peak_fraction)
    out: dict[str, dict] = {}
    for sil in silicons():
        if sil not in FP8_SILICONS:
            continue
        out[sil] = {"recipes": _recipes(sil, measured), "e2e_checks": checks.get(sil, [])}
    return out


def _prequantized_ratio(t: dict[tuple[str, str], Row]) -> tuple[float, str]:
    """r = pre-quantised fp8 / bf16 per-layer GEMM time of one silicon's TE profile, and its source."""
    pre = t[("tensorwise", "prequantized")]
    bf = t[("bf16", "prequantized")]
    return (float(pre["value_num"]) / float(bf["value_num"]),
            f"pre-quantised fp8 / bf16 per-layer GEMM time {pre['value_num']}/{bf['value_num']} ms "
            f"({cite(pre)})")


def _te_factors(t: dict[tuple[str, str], Row]) -> dict[str, Param]:
    """The recipe factors (autocast over pre-quantised time) one silicon's TE profile measures."""
    out: dict[str, Param] = {}
    pre = t[("tensorwise", "prequantized")]
    for recipe in ("tensorwise", "delayed", "mxfp8"):
        if (recipe, "autocast") in t and (recipe, "prequantized") in t:
            a, p = t[(recipe, "autocast")], t[(recipe, "prequantized")]
            v = float(a["value_num"]) / float(p["value_num"])
            note = "" if v >= 1 else f" (measured {v:.3f} < 1, within the table's noise: held at 1)"
            out[recipe] = param(max(v, 1.0), True, f"TE per-layer GEMM time with quantisation "
                                f"(autocast) / pre-quantised, {a['value_num']}/{p['value_num']} ms on "
                                f"{a['sku']}{note} ({cite(a)}; {cite(p)})")
    if ("blockwise", "autocast") in t:
        a = t[("blockwise", "autocast")]
        v = float(a["value_num"]) / float(pre["value_num"])
        out["blockwise"] = param(v, False, f"derived: TE Float8BlockScaling autocast {a['value_num']} ms over the "
                                 f"pre-quantised per-tensor kernels {pre['value_num']} ms (no pre-quantised "
                                 "block row; block-scaled kernels run as fast as per-tensor ones: DeepGEMM "
                                 "1550 vs TileLang 1541 TFLOP/s on H800) "
                                 f"({cite(a)}; {cite(pre)})")
    return out


def _gemm_ratio(sil: str, ratio_r: dict[str, tuple[float, str]],
                peak_fraction: dict[str, dict[str, Param]]) -> tuple[float, str]:
    """r of one silicon: TE's measured ratio, else bf16 / (2 x fp8) of the GEMM peak fractions."""
    if sil in ratio_r:
        return ratio_r[sil]
    pf = peak_fraction[sil]
    r = pf["bf16"]["value"] / (2 * pf["fp8"]["value"])
    r_src = (f"bf16 / (2 x fp8) peak fractions {pf['bf16']['value']}/(2 x {pf['fp8']['value']}) of "
             f"kernels.gemm on {sil}")
    return r, r_src


def _e2e_checks(e2e: dict[str, dict[str, Row]], measured: dict[str, dict[str, Param]],
                ratio_r: dict[str, tuple[float, str]],
                peak_fraction: dict[str, dict[str, Param]]) -> dict[str, list[dict]]:
    """The implied factor of each torchao end-to-end row per silicon; adds the rowwise factor to ``measured``."""
    # rowwise (and checks) from torchao's Llama3-8B end-to-end table: step = 1 - g + g r F with g the
    # bf16 step's GEMM share, r = pre-quantised fp8 / bf16 GEMM time, F the recipe factor; the
    # tensorwise row gives g, the other rows F.
    checks: dict[str, list[dict]] = defaultdict(list)
    for sil, d in e2e.items():
        if "bf16" not in d:
            continue
        base = float(d["bf16"]["value_num"])
        r, r_src = _gemm_ratio(sil, ratio_r, peak_fraction)
        ft = measured.get(sil, {}).get("tensorwise") or measured["hopper"]["tensorwise"]
        s_t = float(d["tensorwise"]["value_num"]) / base
        g = (1 - 1 / s_t) / (1 - r * ft["value"])
        for recipe, row in sorted(d.items()):
            if recipe == "bf16":
                continue
            s = float(row["value_num"]) / base
            f = (1 - (1 - 1 / s) / g) / r
            checks[sil].append({"recipe": recipe, "speedup": round(s, 4), "implied_factor": round(f, 4),
                                "source": f"torchao Llama3-8B tokens/s {row['value_num']} / {base:g} ({cite(row)})"})
            if recipe == "rowwise":
                own = sil in measured and "tensorwise" in measured[sil]
                measured[sil]["rowwise"] = param(
                    f, False, f"derived from torchao's Llama3-8B end-to-end speedups on {d['bf16']['sku']}: tensorwise "
                    f"{s_t:.3f}x gives the bf16 step's GEMM share g = {g:.3f} with the tensorwise factor "
                    f"{ft['value']} ({'measured on this silicon' if own else 'hopper, no measurement here'}) and "
                    f"r = {r:.3f} ({r_src}); rowwise {s:.3f}x then gives the factor ({cite(row)})")
    return checks


def _recipes(sil: str, measured: dict[str, dict[str, Param]]) -> dict[str, Param]:
    """One silicon's factor of every recipe it runs: measured, else borrowed from the nearest measurement."""
    recipes: dict[str, Param] = {}
    for recipe in RECIPES:
        if recipe == "mxfp8" and sil not in MX_SILICONS:
            continue
        if recipe in measured.get(sil, {}):
            recipes[recipe] = measured[sil][recipe]
        elif recipe == "mxfp8":
            recipes[recipe] = borrowed(measured["blackwell"]["mxfp8"], f"no {sil} MXFP8 measurement: blackwell's")
        elif sil == "cdna4" and recipe in measured.get("cdna3", {}):
            recipes[recipe] = borrowed(measured["cdna3"][recipe], "no cdna4 measurement: cdna3's (nearest measured "
                                 "silicon of the vendor)")
        else:
            recipes[recipe] = borrowed(measured["hopper"][recipe], f"no {sil} {recipe} measurement: hopper's (the "
                                 "quantisation pass is memory-bound on every silicon; cross-vendor where the "
                                 "vendor has no measurement)")
    return recipes
