"""Print the numbers trainperf.predict.kernels returns, one compact Markdown table per class.

    PYTHONPATH=src python tools/kernels_table.py

A value measured on another silicon, dtype or family, or a vendor default, is marked with ``*``
(``measured=False`` in :func:`trainperf.predict.kernels.describe`). docs/KERNELS.md carries the output.
"""

from __future__ import annotations

from trainperf.predict.kernels import attention, collectives, describe, gemm, memory_bound, silicons
from trainperf.predict.kernels._params import params


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
