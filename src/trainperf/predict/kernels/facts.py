"""Every number the kernel model uses for a silicon, with its source (:func:`describe`).

For reports and docs (``docs/KERNELS.md``, ``tools/kernels_table.py``); the step model reads the
numbers through the kernel-class modules and never imports this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainperf.predict.kernels._params import check_silicon, params, source_text


@dataclass(frozen=True)
class KernelFact:
    """One number the kernel model uses for a silicon."""

    silicon: str
    """Catalog silicon (``Hardware.silicon``)."""
    kernel_class: str
    """gemm | attention | collectives | expert_dispatch | memory_bound | fp8."""
    quantity: str
    """What the number is, e.g. ``peak_fraction[bf16]`` or ``fwd[fa3 hd128 causal seq=4096]``."""
    value: float
    unit: str
    """``fraction of ...``, ``bytes``, ``us``, ``x`` (a ratio)."""
    source: str
    """Where it comes from: the measurements (repository@commit or URL, location, shared row), or
    the fallback rule followed by the source of what it was taken from (``<- [...]``)."""
    measured: bool
    """True when measured on this silicon (possibly completed by a stated rule); False for a fallback."""


def _fact(silicon: str, cls: str, quantity: str, entry: dict[str, Any], unit: str,
          value: float | None = None, measured: bool | None = None) -> KernelFact:
    return KernelFact(silicon, cls, quantity, float(entry["value"] if value is None else value), unit,
                      source_text(entry), bool(entry["measured"] if measured is None else measured))


def describe(silicon: str) -> list[KernelFact]:
    """Every number the kernel model uses for ``silicon``, with its source and whether it was measured."""
    check_silicon(silicon)
    p = params()
    facts: list[KernelFact] = []
    g = p["gemm"]
    for dt, e in g["peak_fraction"][silicon].items():
        facts.append(_fact(silicon, "gemm", f"peak_fraction[{dt}]", e, f"fraction of the dense {dt} peak"))
    facts.append(_fact(silicon, "gemm", "half_dim", g["half_dim"][silicon], "elements (s(d) = d/(d+half_dim))"))
    for dt, impls in g.get("grouped", {}).get(silicon, {}).items():
        for impl, e in impls.items():
            facts.append(_fact(silicon, "gemm", f"grouped_fraction[{dt} {impl}]", e, "fraction of the dense GEMM law"))
    for fam, e in sorted(p["attention"][silicon].items()):
        from trainperf.predict.kernels.attention import _curves

        hds, curves = _curves(silicon, fam)
        for hd, by_mask in zip(hds, curves, strict=True):
            for causal, (xs, fw, bw) in sorted(by_mask.items()):
                mask = "causal" if causal else "full"
                for x, f, b in zip(xs, fw, bw, strict=True):
                    seq = round(2.0**x)
                    for direction, v in (("fwd", f), ("bwd", b)):
                        facts.append(_fact(silicon, "attention", f"{direction}[{fam} hd{hd} {mask} seq={seq}]", e,
                                           "fraction of the 16-bit dense peak", value=v))
    for level, lvl in p["collectives"][silicon].items():
        for kind, d in lvl["kinds"].items():
            for name, unit in (("eff_max", "fraction of the level's link bandwidth"), ("half_bytes", "bytes"),
                               ("latency_us", "us")):
                facts.append(_fact(silicon, "collectives", f"{name}[{level} {kind}]", d[name], unit))
        if lvl.get("ring_all_reduce"):
            for name, unit in (("eff_max", "fraction of the level's link bandwidth"), ("half_bytes", "bytes")):
                facts.append(_fact(silicon, "collectives", f"{name}[{level} all-reduce ring]",
                                   lvl["ring_all_reduce"][name], unit))
        facts.append(_fact(silicon, "collectives", f"half_bytes_exponent[{level}]", lvl["half_bytes_exponent"],
                           "exponent of (ranks-1)/(ref-1)"))
    for fam, levels in p.get("expert_dispatch", {}).get(silicon, {}).items():
        for level, e in levels.items():
            for op in ("dispatch", "combine"):
                for ranks, eff in zip(e[op]["ranks"], e[op]["effs"], strict=True):
                    facts.append(_fact(silicon, "expert_dispatch", f"{op}[{fam} {level} ranks={ranks:g}]", e[op],
                                       "fraction of the level's per-device link bandwidth", value=eff))
            facts.append(_fact(silicon, "expert_dispatch", f"half_bytes[{fam} {level}]", e["half_bytes"], "bytes"))
            facts.append(_fact(silicon, "expert_dispatch", f"latency_us[{fam} {level}]", e["latency_us"], "us"))
    m = p["memory"]
    facts.append(_fact(silicon, "memory_bound", "hbm_fraction", m["hbm"][silicon], "fraction of catalog HBM bandwidth"))
    for impl, e in m["elementwise"][silicon].items():
        facts.append(_fact(silicon, "memory_bound", f"elementwise_fraction[{impl}]", e,
                           "fraction of catalog HBM bandwidth (ideal bytes)"))
    fp = p["fp8"].get(silicon)
    if fp:
        for recipe, e in fp["recipes"].items():
            facts.append(_fact(silicon, "fp8", f"recipe_gemm_factor[{recipe}]", e, "x (time over pre-quantised fp8)"))
        for c in fp["e2e_checks"]:
            facts.append(KernelFact(silicon, "fp8", f"e2e_speedup[{c['recipe']}]", float(c["speedup"]),
                                    "x (tokens/s over bf16)", source_text(c), True))
    return facts
