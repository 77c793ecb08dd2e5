"""Print the numbers trainperf.predict.kernels returns, one compact Markdown table per class, and
list every number the kernel model uses for a silicon with its source (:func:`describe`).

    PYTHONPATH=src python tools/kernels_table.py

A value measured on another silicon, dtype or family, or a vendor default, is marked with ``*``
(``measured=False`` in :func:`describe`). docs/KERNELS.md carries the output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainperf.predict.kernels import attention, collectives, gemm, memory_bound, silicons
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
        hds, curves = attention._curves(silicon, fam)
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




def _mark(value: str, measured: bool) -> str:
    return value if measured else value + "*"


def gemm_table() -> list[str]:
    out = ["| silicon | bf16 peak fraction | fp8 peak fraction | half_dim |", "|---|---:|---:|---:|"]
    g = params()["gemm"]
    for sil in silicons():
        cells = []
        for dt in ("bf16", "fp8"):
            e = g["peak_fraction"][sil].get(dt)
            cells.append("-" if e is None else _mark(f"{gemm.peak_fraction(sil, dt):.3f}", e["measured"]))
        h = g["half_dim"][sil]
        cells.append(_mark(f"{h['value']:g}", h["measured"]))
        out.append(f"| {sil} | " + " | ".join(cells) + " |")
    return out


def attention_table(seqs: tuple[int, ...] = (1024, 4096, 16384, 65536)) -> list[str]:
    head = " | ".join(f"{s // 1024}k fwd/bwd" for s in seqs)
    out = [f"| silicon | family | {head} |", "|---|---|" + "---:|" * len(seqs)]
    for sil in silicons():
        for fam, e in sorted(params()["attention"][sil].items()):
            cells = []
            for s in seqs:
                f, b = attention.efficiency(sil, fam, s, 128, True)
                cells.append(f"{f:.2f}/{b:.2f}")
            out.append(f"| {sil} | {_mark(fam, e['measured'])} | " + " | ".join(cells) + " |")
    return out


def collectives_table() -> list[str]:
    out = ["| silicon | level | all-reduce eff / half MB / lat us | all-gather eff | all-to-all eff / half MB | "
           "send-recv eff / half MB / lat us |", "|---|---|---|---:|---|---|"]
    for sil in silicons():
        for level in collectives.LEVELS:
            k = params()["collectives"][sil][level]["kinds"]

            def cell(kind: str, parts: tuple[str, ...], k=k, level=level, sil=sil) -> str:
                eff, half, lat = collectives.link_params(sil, level, kind)
                vals = {"eff": f"{eff:.3f}", "half": f"{half / 1e6:.1f}", "lat": f"{lat:.0f}"}
                return _mark(" / ".join(vals[p] for p in parts), k[kind]["eff_max"]["measured"])

            out.append(f"| {sil} | {level} | {cell('all-reduce', ('eff', 'half', 'lat'))} | "
                       f"{cell('all-gather', ('eff',))} | {cell('all-to-all', ('eff', 'half'))} | "
                       f"{cell('send-recv', ('eff', 'half', 'lat'))} |")
    return out


def dispatch_table() -> list[str]:
    """MoE dispatch / combine efficiency per family and level at the measured group sizes (the
    silicon that run MoE dispatch kernels; the rest take the NCCL all-to-all)."""
    out = ["| silicon | family | scale-up dispatch / combine (ranks) | scale-out dispatch / combine (ranks) | "
           "half MB up / out |", "|---|---|---|---|---|"]
    for sil in ("hopper", "blackwell", "cdna3", "cdna4"):
        for fam, levels in params()["expert_dispatch"][sil].items():
            cells = []
            for level in ("scale-up", "scale-out"):
                e = levels[level]
                pts = ", ".join(f"{d:.2f}/{c:.2f} ({r:g})" for r, d, c in
                                zip(e["dispatch"]["ranks"], e["dispatch"]["effs"], e["combine"]["effs"], strict=True))
                cells.append(_mark(pts, e["dispatch"]["measured"]))
            halves = " / ".join(f"{levels[lv]['half_bytes']['value'] / 1e6:.1f}" for lv in ("scale-up", "scale-out"))
            out.append(f"| {sil} | {fam} | " + " | ".join(cells) + f" | {halves} |")
    return out


def memory_table() -> list[str]:
    out = ["| silicon | HBM (STREAM) | eager | fused | compiled |", "|---|---:|---:|---:|---:|"]
    m = params()["memory"]
    for sil in silicons():
        cells = [_mark(f"{memory_bound.hbm_fraction(sil):.3f}", m["hbm"][sil]["measured"])]
        for impl in memory_bound.IMPLEMENTATIONS:
            cells.append(_mark(f"{memory_bound.elementwise_fraction(sil, impl):.3f}",
                               m["elementwise"][sil][impl]["measured"]))
        out.append(f"| {sil} | " + " | ".join(cells) + " |")
    return out


def fp8_table() -> list[str]:
    out = ["| silicon | tensorwise | rowwise | delayed | blockwise | mxfp8 |", "|---|---:|---:|---:|---:|---:|"]
    for sil, d in params()["fp8"].items():
        cells = []
        for r in ("tensorwise", "rowwise", "delayed", "blockwise", "mxfp8"):
            e = d["recipes"].get(r)
            cells.append("-" if e is None else _mark(f"{e['value']:.3f}", e["measured"]))
        out.append(f"| {sil} | " + " | ".join(cells) + " |")
    return out


def main() -> int:
    for title, lines in (("GEMM", gemm_table()), ("Attention (hd128, causal)", attention_table()),
                         ("Collectives (reference groups: 8 GPUs / 4 nodes x 8)", collectives_table()),
                         ("MoE dispatch / combine (fraction of the level's per-device link)", dispatch_table()),
                         ("Memory-bound", memory_table()), ("fp8 recipe GEMM factors", fp8_table())):
        print(f"### {title}\n")
        print("\n".join(lines) + "\n")
    counts = {s: sum(f.measured for f in describe(s)) for s in silicons()}
    print("Measured facts per silicon: " + ", ".join(f"{s} {n}" for s, n in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
