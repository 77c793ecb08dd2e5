"""Curate the kernel measurements trainperf ships (a developer tool; needs the shared data folder).

Reads the collected measurements in ``../shared/kernels/*.csv`` (columns ``quantity, value, unit,
device, dtype, params, software, source, where, stated_or_read``; see that folder's SOURCES.md)
and writes the subset the predictor's kernel fit uses to ``tools/kernel_fitting/data/<class>.csv``:
the ten original columns, the source file and line the row came from, the silicon and catalog
SKU it was measured on, and the parameters parsed into typed columns. Every other row is
rejected with a reason; ``--rejected`` prints the rejections grouped by reason (docs/KERNELS.md
carries that table). Each selection rule below says why it keeps what it keeps.

    python tools/curate_kernels.py [--shared /work/shared/kernels] [--rejected]

After curating, regenerate the derived parameters:
``PYTHONPATH=src python -m tools.kernel_fitting.build``.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import defaultdict
from pathlib import Path

ORIGINAL = ["quantity", "value", "unit", "device", "dtype", "params", "software", "source", "where",
            "stated_or_read"]
OUT_DIR = Path(__file__).resolve().parent / "kernel_fitting" / "data"

Row = dict[str, str]


def _read(shared: Path, name: str) -> list[Row]:
    with open(shared / name, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for i, r in enumerate(rows):
        r["file"] = name
        r["line"] = str(i + 2)  # header is line 1
    return rows


def _num(text: str) -> float:
    return float(re.match(r"\s*([0-9.eE+-]+)", text).group(1))


def _size(text: str) -> int:
    """'32KiB' / '8GiB' / '65KB' / '1GB' / '268435456 B' -> bytes (KiB=1024, KB=1000)."""
    m = re.match(r"\s*([0-9.]+)\s*([KMG]i?B|B)\b", text)
    if not m:
        raise ValueError(text)
    mult = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[m.group(2)]
    return round(float(m.group(1)) * mult)


class Curation:
    """Kept rows per output file and rejected rows with a reason; every input row ends in one."""

    def __init__(self) -> None:
        self.kept: dict[str, list[Row]] = defaultdict(list)
        self.rejected: list[tuple[Row, str]] = []
        self.seen: set[tuple[str, str]] = set()

    def keep(self, out: str, row: Row, **fields: object) -> None:
        self._mark(row)
        self.kept[out].append({**{k: row[k] for k in ORIGINAL}, "file": row["file"], "line": row["line"],
                               **{k: _fmt(v) for k, v in fields.items()}})

    def reject(self, row: Row, reason: str) -> None:
        self._mark(row)
        self.rejected.append((row, reason))

    def _mark(self, row: Row) -> None:
        key = (row["file"], row["line"])
        if key in self.seen:
            raise AssertionError(f"row {key} curated twice")
        self.seen.add(key)

    def rest(self, rows: list[Row], reason: str) -> None:
        for r in rows:
            if (r["file"], r["line"]) not in self.seen:
                self.reject(r, reason)


def _fmt(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return "" if v is None else str(v)


# ------------------------------------------------------------------------------------- GEMM
# Catalog SKU of each measured part (None: not a catalog SKU -> rejected).
GEMM_SKU: list[tuple[str, str | None, str]] = [
    # (device substring, catalog id, silicon)
    ("Intel Gaudi 2", "gaudi2", "gaudi2"),
    ("Intel Gaudi 3", "gaudi3", "gaudi3"),
    ("A100 SXM4", "a100-sxm-80gb", "ampere"),
    ("A100 PCIe", "a100-pcie-80gb", "ampere"),
    ("GH200", None, "hopper"),
    ("H100 SXM5", "h100-sxm", "hopper"),
    ("H200 SXM", "h200-sxm", "hopper"),
    ("H200 141GB", "h200-sxm", "hopper"),
    ("H800", "h800", "hopper"),
    ("B300 SXM", "b300", "blackwell"),
    ("B200 SXM", "b200", "blackwell"),
    ("GB200", "gb200", "blackwell"),
    ("MI355X", "mi355x", "cdna4"),
    ("MI325X", "mi325x", "cdna3"),
    ("MI300X", "mi300x", "cdna3"),
    ("B200", "b200", "blackwell"),  # torchao's grouped-GEMM tables say just "B200" (after GB200 above)
]


def _sku(device: str, table: list[tuple[str, str | None, str]]) -> tuple[str | None, str]:
    """The catalog SKU and silicon named by ``device``; the text before the first parenthesis wins
    (Azure rows add notes such as "(8 GPUs; GB200 v6 VM = 4 GPUs)" to other parts)."""
    for text in (device.split("(")[0], device):
        for needle, sku, silicon in table:
            if needle in text:
                return sku, silicon
    raise KeyError(device)


def _dtype_key(dtype: str) -> str:
    d = dtype.lower()
    if "fp8" in d or "e4m3" in d:
        return "fp8"
    for k in ("bf16", "fp16", "tf32", "fp32"):
        if d.startswith(k):
            return k
    raise KeyError(dtype)


def curate_gemm(c: Curation, rows: list[Row]) -> None:
    """Dense and grouped GEMM throughput (``gemm.csv``); the fp8 recipe rows are left to curate_fp8."""
    for r in rows:
        if not (_gemm_peak(c, r) or _gemm_sweep(c, r) or _gemm_grouped(c, r) or _gemm_other(c, r)):
            raise AssertionError(f"gemm row not classified: {r['line']} {r['quantity']}")


def _gemm_keep_peak(c: Curation, r: Row, sku: str | None, silicon: str) -> None:
    """Keep a max-achievable (MAMF / MAF) figure as the peak of its SKU and dtype."""
    c.keep("gemm", r, silicon=silicon, sku=sku, dtype_key=_dtype_key(r["dtype"]), use="peak",
           sweep="", m="", n="", k="", tflops=_num(r["value"]))


def _gemm_peak(c: Curation, r: Row) -> bool:
    """The XLA table and the max-achievable tables (MAMF, AMD MAF); False for any other row."""
    q, dev = r["quantity"], r["device"]
    if "XLA perf table" in q:
        c.reject(r, "XLA matmul table: the generator computes M*N*K*b/ns (FMA/s) while bf16/tf32 "
                    "magnitudes read as FLOP/s, the sm_90 fp8 entries exceed the 1979 TFLOP/s spec, "
                    "and the SKU behind sm_90/gfx942/gfx950 is not stated")
    elif q.startswith("max achievable matmul TFLOPS (MAMF, mean)"):
        sku, silicon = _sku(dev, GEMM_SKU)
        if sku is None:
            c.reject(r, "the 900 W GH200 with 141 GiB HBM3e is not a catalog SKU (the catalog's gh200 "
                        "is the 96 GB HBM3 part; no catalog Hopper part sustains this module's clocks)")
        else:
            _gemm_keep_peak(c, r, sku, silicon)
    elif q.startswith("max achievable matmul TFLOPS (MAMF)"):
        c.reject(r, "superseded software: MI300X MAMF under ROCm 6.1 (450), the same source "
                    "measures 668 with ROCm 6.2+")
    elif q.startswith("max-achievable GEMM TFLOPS (AMD MAF)"):
        sku, silicon = _sku(dev, GEMM_SKU)
        _gemm_keep_peak(c, r, sku, silicon)
    elif q.startswith("MAF alternate footnote value"):
        c.reject(r, "duplicate: footnote restatement of an AMD MAF table value (the table value is used)")
    else:
        return False
    return True


def _gemm_sweep(c: Curation, r: Row) -> bool:
    """The 'GEMM achieved TFLOPS' shape sweeps: library paths keep, research kernels reject."""
    src, sw = r["source"], r["software"]
    if r["quantity"] != "GEMM achieved TFLOPS":
        return False
    if "AI-benchmarking-guide" in src:
        _gemm_azure(c, r)
    elif "HipKittens" in src:
        _gemm_hipkittens(c, r)
    elif "rocm-blogs" in src and "hipBLASLt" in sw:
        sku, silicon = _sku(r["device"], GEMM_SKU)
        d = int(re.search(r"M=N=K=(\d+)", r["params"]).group(1))
        c.keep("gemm", r, silicon=silicon, sku=sku, dtype_key="fp8", use="sweep",
               sweep="rocmblog-mi355x-fp8-hipBLASLt", m=d, n=d, k=d, tflops=_num(r["value"]))
    elif "rocm-blogs" in src:
        c.reject(r, "research kernel (hand-written HIP ping-pong kernel), not a library path")
    elif "tilelang" in src:
        c.reject(r, "research kernel compiler (TileLang K-sweep on H800), not the cuBLAS path stacks call; "
                    "its small-K points are bound by writing the 8192x8192 output, not by shape")
    else:
        return False
    return True


def _gemm_azure(c: Curation, r: Row) -> None:
    """Azure AI-benchmarking-guide cuBLASLt / hipBLASLt sweeps (its superseded ROCm run is rejected)."""
    sw = r["software"]
    if "ROCm 6.8.1" in sw:
        c.reject(r, "superseded software: the same Azure MI300X sweep under ROCm 6.8.1 "
                    "(the ROCm 6.8.5 sweep is used)")
        return
    sku, silicon = _sku(r["device"], GEMM_SKU)
    m, n, k = (int(x) for x in re.search(r"m=(\d+),n=(\d+),k=(\d+)", r["params"]).groups())
    lib = "hipBLASLt" if "hipBLASLt" in sw else "cuBLASLt"
    c.keep("gemm", r, silicon=silicon, sku=sku, dtype_key=_dtype_key(r["dtype"]), use="sweep",
           sweep=f"azure-{sku}-{_dtype_key(r['dtype'])}-{lib}", m=m, n=n, k=k,
           tflops=_num(r["value"]))


def _gemm_hipkittens(c: Curation, r: Row) -> None:
    """HipKittens' square sweeps: only the vendor-library columns (PyTorch, hipBLASLt) are kept."""
    lib = r["where"]
    vendor_lib = ("tflops_pytorch" in lib or "tflops_hipblaslt" in lib)
    if not vendor_lib:
        c.reject(r, "research kernel (HipKittens / ThunderKittens / AITER tgemm / earlier "
                    "comparison csv): not the hipBLASLt path PyTorch training stacks call")
        return
    sku, silicon = _sku(r["device"], GEMM_SKU)
    d = int(re.search(r"M=N=K=(\d+)", r["params"]).group(1))
    c.keep("gemm", r, silicon=silicon, sku=sku, dtype_key=_dtype_key(r["dtype"]), use="sweep",
           sweep=f"hipkittens-{sku}-{_dtype_key(r['dtype'])}-hipBLASLt", m=d, n=d, k=d,
           tflops=_num(r["value"]))


def _gemm_grouped(c: Curation, r: Row) -> bool:
    """DeepGEMM, the fp8 recipe rows (skipped) and grouped GEMMs; False for any other row."""
    q, sw = r["quantity"], r["software"]
    if "DeepGEMM" in sw or "deepseek-ai/DeepGEMM" in r["source"]:
        c.reject(r, "custom block-scaled kernels of one stack (DeepGEMM), M=64/128 decode shapes and "
                    "grouped MoE layouts: no dense-GEMM class uses them (cited in docs for blockwise)")
    elif q.startswith(("Fprop GEMM time", "per-layer GEMM time")):
        return True  # fp8 recipe rows, curated by curate_fp8
    elif q.startswith(("grouped GEMM fwd+bwd time (bf16 torch._grouped_mm)", "grouped GEMM fwd+bwd time (MXFP8 scaled)")):
        # the routed-expert GEMM PyTorch-native MoE stacks (torchtitan) call: forward plus the
        # two backward GEMMs of M tokens x (K -> N) over G groups, 6*M*N*K FLOPs in all; in bf16
        # (torch._grouped_mm) or MXFP8 with its dynamic quantisation (torchao's scaled grouped mm)
        sku, silicon = _sku(r["device"], GEMM_SKU)
        m, n, k, g = (int(x) for x in re.search(r"M=(\d+),N=(\d+),K=(\d+),G=(\d+)", r["params"]).groups())
        tflops = 6.0 * m * n * k / (_num(r["value"]) * 1e-6) / 1e12
        c.keep("gemm", r, silicon=silicon, sku=sku, dtype_key="fp8" if "MXFP8" in q else "bf16", use="grouped",
               sweep=f"torch-grouped-mm-G{g}", m=m, n=n, k=k, tflops=f"{tflops:.1f}")
    elif "grouped" in q.lower() or "MoE layer" in q or "mxfp8 GEMM speedup" in q:
        c.reject(r, "grouped MoE GEMMs of single passes (forward, dA, dB apart) or claims: the grouped-GEMM "
                    "class holds forward-plus-backward times (torchao's bf16 and MXFP8 grouped-mm benchmarks)")
    else:
        return False
    return True


def _gemm_other(c: Curation, r: Row) -> bool:
    """The remaining GEMM rows, all rejected (incomplete shape, locked clocks, fp64, claims)."""
    q = r["quantity"]
    if q.startswith("SwiGLU MLP matmul TFLOPS"):
        c.reject(r, "shape incomplete: the token count (M) of the SwiGLU MLP benchmark is not stated")
    elif "GB300" in r["device"]:
        c.reject(r, "dtype not stated and SM clock locked; informs sustained_clock_fraction, not GEMM "
                    "efficiency (GB300 at 500 W: ~617 vs ~1600-2174 TFLOP/s at 1400 W)")
    elif q.startswith("CUTLASS"):
        c.reject(r, "approximate (~) values from an issue thread; the doc example's SKU is not stated")
    elif q.startswith("DGEMM"):
        c.reject(r, "fp64 (no fp64 GEMM class) and the MI250X GCD/card is not stated")
    elif "engine clock" in q or "software efficiency" in q:
        c.reject(r, "clock observation (cited in docs: MI300X MAF runs at ~1.2 GHz of 2.1 GHz boost)")
    else:
        return False
    return True


# -------------------------------------------------------------------------------- attention
ATTN_FAMILY = [
    ("FlashAttention-3", "fa3"), ("FlashAttention-2", "fa2"), ("cuDNN", "cudnn"),
    ("Triton (FA tutorial", "triton"), ("FlashAttention Triton", "triton"), ("xformers", "xformers"),
    ("PyTorch standard attention", "eager"), ("AITER", "aiter"),
]


def _family(software: str) -> str | None:
    for needle, fam in ATTN_FAMILY:
        if needle in software:
            return fam
    return None


def _seq(text: str) -> int:
    m = re.search(r"seqlen=(\d+)(k?)", text) or re.search(r"seqlen (\d+)(K?)", text)
    return int(m.group(1)) * (1024 if m.group(2) else 1)


def curate_attention(c: Curation, rows: list[Row]) -> None:
    """Attention kernel throughput (``attention.csv``): per-length curves, anchors, speedups and checks."""
    for r in rows:
        if not (_attn_curve(c, r) or _attn_other(c, r)):
            raise AssertionError(f"attention row not classified: {r['line']} {r['quantity']}")


def _attn_curve(c: Curation, r: Row) -> bool:
    """The fwd / bwd / fwd+bwd TFLOP/s curves on H100, A100 and MI355X; False for any other row."""
    q, dev, sw = r["quantity"], r["device"], r["software"]
    if q not in ("attention fwd+bwd TFLOPS", "attention fwd TFLOPS", "attention bwd TFLOPS") or \
            not ("H100 SXM5" in dev or "A100 SXM4" in dev or dev == "MI355X"):
        return False
    fam = _family(sw)
    if "fp8" in r["dtype"]:
        c.reject(r, "fp8 attention (third-party transcription): the API models 16-bit attention")
    elif "HipKittens;" in sw:
        c.reject(r, "research kernel (HipKittens), not a family training stacks ship")
    elif fam is None:
        c.reject(r, "FlashAttention v1: superseded, not a modelled family")
    elif dev == "MI355X":
        _attn_mi355x(c, r, fam)
    else:
        _attn_nvidia(c, r, fam)
    return True


def _attn_mi355x(c: Curation, r: Row, fam: str) -> None:
    """MI355X (AITER) curves: the MHA sweep, without the suspect non-causal backward."""
    q, p = r["quantity"], r["params"]
    if "GQA" in p:
        c.reject(r, "GQA variant: the MHA sweep of the same kernel is used (GQA fwd is within "
                    "~10% of MHA; the GQA bwd 'ref' runs 3x slower, a fallback path)")
        return
    if "bwd" in q and "causal=False" in p:
        c.reject(r, "suspect: AITER non-causal backward (300-389 TFLOP/s) is below its causal "
                    "backward (389-1109) although causal does half the work; the JSON 'ref' "
                    "of this file is likely another kernel")
        return
    seq = int(re.search(r"seqlen=(\d+)", p).group(1))
    hd = int(re.search(r"D=(\d+)", p).group(1))
    causal = "causal=True" in p
    direction = "bwd" if "bwd" in q else "fwd"
    c.keep("attention", r, silicon="cdna4", sku="mi355x", family=fam, direction=direction,
           seq_len=seq, head_dim=hd, causal=causal, tflops=_num(r["value"]), use="curve")


def _attn_nvidia(c: Curation, r: Row, fam: str) -> None:
    """H100 / A100 curves (FlashAttention papers, cuDNN, Triton, xformers, eager)."""
    q, dev, p = r["quantity"], r["device"], r["params"]
    sku, silicon = ("h100-sxm", "hopper") if "H100" in dev else ("a100-sxm-80gb", "ampere")
    hd = int(re.search(r"head_dim=(\d+)", p).group(1))
    if "causal=True" in p:
        causal = True
    elif "causal=False" in p:
        causal = False
    elif "bwd" in q:
        causal = False  # FA3 paper bwd figure; non-causal per the cross-check in docs/KERNELS.md
    else:
        raise AssertionError(r["line"])
    direction = {"attention fwd+bwd TFLOPS": "fwdbwd", "attention fwd TFLOPS": "fwd",
                 "attention bwd TFLOPS": "bwd"}[q]
    # the H100 fwd+bwd figure is an older FA2 release; the FA3 paper's fwd/bwd figures make the curves
    use = "check" if direction == "fwdbwd" and silicon == "hopper" else "curve"
    c.keep("attention", r, silicon=silicon, sku=sku, family=fam, direction=direction,
           seq_len=_seq(p), head_dim=hd, causal=causal, tflops=_num(r["value"]), use=use)


def _attn_other(c: Curation, r: Row) -> bool:
    """Anchors, the FA4 speedup, in-step checks and the rejected rows; False for any other row."""
    q, dev, src, sw, p = r["quantity"], r["device"], r["source"], r["software"], r["params"]
    if q.startswith("attention TFLOPS (") and "AI-benchmarking-guide" in src:
        sku, silicon = _sku(dev, GEMM_SKU)
        hd = int(re.search(r"head_dim=(\d+)", p).group(1))
        family = "eager" if "Standard" in q else ("ck" if silicon.startswith("cdna") else "fa2")
        c.keep("attention", r, silicon=silicon, sku=sku, family=family, direction="fwdbwd",
               seq_len=8192, head_dim=hd, causal=False, tflops=_num(r["value"]), use="anchor")
    elif q.startswith("FA speedup B200(FA4) vs H200(FA3)"):
        seq = int(re.search(r"seqlen (\d+)K", p).group(1)) * 1024
        c.keep("attention", r, silicon="blackwell", sku="b200", family="fa4", direction="fwdbwd",
               seq_len=seq, head_dim=128, causal=True, tflops="", use="speedup")
    elif q.startswith("in-step attention (FlashAttention kernels)"):
        sku, silicon = ("h200-sxm", "hopper") if "H200" in dev else ("b200", "blackwell")
        c.keep("attention", r, silicon=silicon, sku=sku, family="fa3" if silicon == "hopper" else "fa4",
               direction="fwdbwd", seq_len=8192, head_dim=128, causal=True, tflops=_num(r["value"]),
               use="check")
    elif "tritonbench" in sw:
        c.reject(r, "GPU not named (presumably H100); the FA3 paper figure covers the same kernels")
    elif "TPU v5e" in dev:
        c.reject(r, "a user's Pallas kernel vs XLA timing without a FLOP count; not splash attention")
    elif "model not stated" in dev:
        c.reject(r, "GPU not stated in this TE JAX output (context-parallel ring/all-gather speedups "
                    "2.22x/2.36x at CP=4 are cited in docs for the step model)")
    else:
        return False
    return True


# ----------------------------------------------------------------------------- long context
MAGI_FAMILY = {"FA2 (flash-attn 2)": "fa2", "FA3 (flash-attn 3)": "fa3", "cuDNN fused attention": "cudnn"}
"""MagiAttention's kernel figures: the families the step model prices (the others are rejected)."""


def curate_long_context(c: Curation, rows: list[Row]) -> None:
    """``long_context.csv``: MagiAttention's H100 kernel figures at 16k and 32k keep, for FA2, FA3 and
    cuDNN, the 32k/16k ratio that extends the curves to 32k (``use = extend``: one benchmark at both
    lengths, so its version and GQA shape cancel in the ratio); zhuzilin/ring-flash-attention's CP-8
    efficiencies are cited for the load-balancing rule, not fitted."""
    for r in rows:
        q, src = r["quantity"], r["source"]
        if "MagiAttention" in src:
            fam = next((f for needle, f in MAGI_FAMILY.items() if f"({needle})" in q), None)
            if fam is None:
                c.reject(r, "kernel outside the modelled families (FlexAttention, Baidu FlashMask, MagiAttention "
                            "FFA) or a PyTorch SDPA whose backend the blog does not state")
                continue
            p = r["params"]
            c.keep("attention", r, silicon="hopper", sku="h100-sxm", family=fam,
                   direction="bwd" if "bwd" in q else "fwd", seq_len=int(re.search(r"seqlen=(\d+)", p).group(1)),
                   head_dim=128, causal="causal mask" in p, tflops=_num(r["value"]), use="extend")
        elif "ring-flash-attention" in src:
            c.reject(r, "context-parallel ring efficiency at 1,024 tokens per GPU and 5 heads (kernels starved of "
                        "parallelism, far from training shapes): cited in docs/KERNELS.md for the load-balancing "
                        "rule (zigzag vs ring), not fitted")
        else:
            raise AssertionError(f"long_context row not classified: {r['line']} {q}")


# ------------------------------------------------------------------------------ collectives
COLL_KIND = {"all_reduce": "all-reduce", "all-reduce": "all-reduce", "all_gather": "all-gather",
             "all-gather": "all-gather", "reduce_scatter": "reduce-scatter",
             "reduce-scatter": "reduce-scatter", "all-to-all": "all-to-all"}


def _kind(q: str) -> str:
    for needle, kind in COLL_KIND.items():
        if q.lower().startswith(needle):
            return kind
    raise KeyError(q)


def curate_collectives(c: Curation, rows: list[Row]) -> None:
    """Collective bandwidth (``collectives.csv``): nccl-tests sweeps, vendor guides and issue reports."""
    for r in rows:
        if "xla" in r["source"].lower():
            c.reject(r, "XLA collective table subset: the bulk table (collectives_xla_perf_table.csv) is "
                        "curated instead")
        elif not (_coll_stas00(c, r) or _coll_guides(c, r) or _coll_issues(c, r)):
            raise AssertionError(f"collectives row not classified: {r['line']} {r['quantity']} {r['device']}")


def _coll_stas00(c: Curation, r: Row) -> bool:
    """Stas Bekman's ml-engineering measurements; False for rows from elsewhere or not used here."""
    return "ml-engineering" in r["source"] and (
        _coll_stas00_a100_h200(c, r) or _coll_stas00_b200_h200_nodes(c, r) or _coll_stas00_mi300x_p2p(c, r))


def _coll_stas00_a100_h200(c: Curation, r: Row) -> bool:
    """ml-engineering: the A100 8-GPU sweep and the H200 8-GPU and algorithm (NVLS / ring) sweeps."""
    q, dev, p = r["quantity"], r["device"], r["params"]
    if q == "all_reduce busbw" and "A100 SXM (8x" in dev:
        c.keep("collectives", r, silicon="ampere", sku="a100-sxm-80gb", level="scale-up",
               kind="all-reduce", algo="ring", ranks=8, nodes=1, size_bytes=_size(p[5:]),
               busbw_GBps=_num(r["value"]), time_us=_num(re.search(r"time=([0-9.]+)", p).group(1)),
               nic_GBps_per_device="", sweep="stas00-a100-8gpu")
    elif q.startswith("all_reduce latency"):
        c.reject(r, "duplicate: the time column of the A100 sweep rows (kept there)")
    elif q == "all_reduce busbw" and "H200 SXM (8x" in dev:
        size = _size(p[8:])
        c.keep("collectives", r, silicon="hopper", sku="h200-sxm", level="scale-up", kind="all-reduce",
               algo="default", ranks=8, nodes=1, size_bytes=size, busbw_GBps=_num(r["value"]),
               time_us="", nic_GBps_per_device="", sweep="stas00-h200-8gpu")
    elif "H200 SXM" in dev and "SHARP section" in r["where"]:
        kind = _kind(q)
        algo = "ring" if ("NVLS off" in q or "Ring" in p) else "nvls"
        ranks = int(re.search(r"(\d+) GPUs", p).group(1))
        size = _size(re.search(r"payload ([0-9.]+\s*[KMG]iB)", p).group(1))
        c.keep("collectives", r, silicon="hopper", sku="h200-sxm", level="scale-up", kind=kind,
               algo=algo, ranks=ranks, nodes=1, size_bytes=size, busbw_GBps=_num(r["value"]),
               time_us="", nic_GBps_per_device="", sweep="stas00-h200-algo")
    elif q.startswith("all_reduce busbw (NVLS disabled"):
        c.keep("collectives", r, silicon="hopper", sku="h200-sxm", level="scale-up", kind="all-reduce",
               algo="ring", ranks=8, nodes=1, size_bytes=16 * 2**30, busbw_GBps=_num(r["value"]),
               time_us="", nic_GBps_per_device="", sweep="stas00-h200-algo")
    else:
        return False
    return True


def _coll_stas00_b200_h200_nodes(c: Curation, r: Row) -> bool:
    """ml-engineering: the B200 algorithm, 1-node and 4-node sweeps and the H200 4-node (p5en) runs."""
    q, dev, p = r["quantity"], r["device"], r["params"]
    if "p6-b200.48xlarge" in dev:
        algo = "ring" if ("NVLS off" in q or "Ring" in p) else "nvls"
        ranks = int(re.search(r"(\d+) GPUs", p).group(1))
        c.keep("collectives", r, silicon="blackwell", sku="b200", level="scale-up", kind="all-reduce",
               algo=algo, ranks=ranks, nodes=1, size_bytes=8 * 2**30, busbw_GBps=_num(r["value"]),
               time_us="", nic_GBps_per_device="", sweep="stas00-b200-algo")
    elif "p6-b200, 1 node" in dev:
        c.keep("collectives", r, silicon="blackwell", sku="b200", level="scale-up", kind="all-reduce",
               algo="default", ranks=8, nodes=1, size_bytes=_size(p[8:]), busbw_GBps=_num(r["value"]),
               time_us="", nic_GBps_per_device="", sweep="stas00-b200-8gpu")
    elif "p6-b200, 4 nodes" in dev:
        # EFA v4: 8 x 400 Gb/s per node = 50 GB/s per GPU
        c.keep("collectives", r, silicon="blackwell", sku="b200", level="scale-out", kind="all-reduce",
               algo="default", ranks=32, nodes=4, size_bytes=_size(p[8:]), busbw_GBps=_num(r["value"]),
               time_us="", nic_GBps_per_device=50.0, sweep="stas00-b200-4node")
    elif "p5en.48xlarge, 4 nodes" in dev:
        # p5en: 16 x 200 Gb/s EFA per node = 50 GB/s per GPU
        algo = "nvlstree" if "NVLSTree" in q else "ring"
        c.keep("collectives", r, silicon="hopper", sku="h200-sxm", level="scale-out", kind="all-reduce",
               algo=algo, ranks=32, nodes=4, size_bytes=4 * 2**30, busbw_GBps=_num(r["value"]),
               time_us="", nic_GBps_per_device=50.0, sweep="stas00-h200-4node")
    else:
        return False
    return True


def _coll_stas00_mi300x_p2p(c: Curation, r: Row) -> bool:
    """ml-engineering: the MI300X rank sweep and the point-to-point (P2P, device copy) bandwidths."""
    q, dev, p = r["quantity"], r["device"], r["params"]
    if "MI300X" in dev:
        ranks = int(re.search(r"(\d+) GPUs", p).group(1))
        c.keep("collectives", r, silicon="cdna3", sku="mi300x", level="scale-up", kind="all-reduce",
               algo="ring", ranks=ranks, nodes=1, size_bytes=4 * 2**30, busbw_GBps=_num(r["value"]),
               time_us="", nic_GBps_per_device="", sweep="stas00-mi300x-ranks")
    elif q.startswith("P2P unidirectional"):
        sku, silicon = {"A100": ("a100-sxm-80gb", "ampere"), "H100": ("h100-sxm", "hopper"),
                        "GB200": ("gb200", "blackwell")}[dev.split()[0]]
        c.keep("collectives", r, silicon=silicon, sku=sku, level="scale-up", kind="send-recv",
               algo="p2p", ranks=2, nodes=1, size_bytes="", busbw_GBps=_num(r["value"]), time_us="",
               nic_GBps_per_device="", sweep="p2p")
    elif q == "device-to-device copy, unidirectional":
        c.keep("collectives", r, silicon="hopper", sku="h200-sxm", level="scale-up", kind="send-recv",
               algo="p2p", ranks=2, nodes=1, size_bytes="", busbw_GBps=_num(r["value"]), time_us="",
               nic_GBps_per_device="", sweep="p2p")
    else:
        return False
    return True


def _coll_guides(c: Curation, r: Row) -> bool:
    """Azure's AI-benchmarking-guide all-reduce and the HF ultrascale playbook; False otherwise."""
    q, dev, src, p = r["quantity"], r["device"], r["source"], r["params"]
    if "AI-benchmarking-guide" in src and q.startswith("all_reduce busbw"):
        sku, silicon = _sku(dev, GEMM_SKU)
        ranks = 4 if sku == "gb200" else 8  # ND GB200 v6 VMs hold 4 GPUs
        algo = "ring" if silicon in ("ampere", "cdna3") or "Ring" in p else "default"
        c.keep("collectives", r, silicon=silicon, sku=sku, level="scale-up", kind="all-reduce",
               algo=algo, ranks=ranks, nodes=1, size_bytes=_size(p[8:]), busbw_GBps=_num(r["value"]),
               time_us="", nic_GBps_per_device="", sweep=f"azure-{sku}")
    elif "nanotron-ultrascale" in src:
        _coll_hf_playbook(c, r)
    else:
        return False
    return True


def _coll_hf_playbook(c: Curation, r: Row) -> None:
    """The HF ultrascale playbook's multi-node all-reduce (its other rows are rejected)."""
    kind = _kind(r["quantity"])
    nodes = int(re.search(r"(\d+) node", r["params"]).group(1))
    if kind != "all-reduce":
        c.reject(r, "definition unclear: the playbook's all-gather/reduce-scatter 'bandwidth' at one "
                    "node (250 GB/s) is neither the nccl-tests busbw (361) nor its algbw")
        return
    if nodes == 1:
        c.reject(r, "single node (NVLS): the hopper scale-up sweeps cover it")
        return
    # HF cluster: AWS p5, 32 x 100 Gb/s EFA per node = 50 GB/s per GPU
    c.keep("collectives", r, silicon="hopper", sku="h100-sxm", level="scale-out", kind="all-reduce",
           algo="default", ranks=8 * nodes, nodes=nodes, size_bytes=256 * 2**20,
           busbw_GBps=_num(r["value"]), time_us="", nic_GBps_per_device=50.0, sweep="hf-playbook-nodes")


def _coll_issues(c: Curation, r: Row) -> bool:
    """Figures from issue threads and vendor pages: a few anchors keep, the rest reject."""
    q, dev, src = r["quantity"], r["device"], r["source"]
    if "create-a3mega" in src:
        c.reject(r, "A3 Mega GPUDirect-TCPXO at 2 nodes: busbw exceeds the NICs' line rate (a tree, not "
                    "a ring) and TCPXO is not an RDMA fabric the catalog describes")
    elif "nccl/issues/812" in src and "192GB/s" in r["where"]:
        c.keep("collectives", r, silicon="ampere", sku="a100-sxm-80gb", level="scale-out",
               kind="all-reduce", algo="ring", ranks="", nodes="", size_bytes="",
               busbw_GBps=_num(r["value"]), time_us="", nic_GBps_per_device=25.0, sweep="dgx-a100-multinode")
    elif "nccl-tests/issues/2" in src and "NDR" in dev:
        c.keep("collectives", r, silicon="hopper", sku="h100-sxm", level="scale-out", kind="all-reduce",
               algo="ring", ranks="", nodes="", size_bytes="", busbw_GBps=_num(r["value"]) * 8,
               time_us="", nic_GBps_per_device=50.0, sweep="ndr-expected")
    elif "nccl-tests/issues/2" in src and "NVLS" in q:
        c.keep("collectives", r, silicon="hopper", sku="h100-sxm", level="scale-up", kind="all-reduce",
               algo="nvls", ranks=8, nodes=1, size_bytes="", busbw_GBps=_num(r["value"]), time_us="",
               nic_GBps_per_device="", sweep="h100-nvls-issue")
    elif "nccl-tests/issues/2" in src:
        c.reject(r, "misconfigured setup in a bug report (2 ranks over RoCE, user expected 200 GB/s)")
    elif "nccl/issues/837" in src:
        c.reject(r, "2 NICs for 8 GPUs (not a catalog node) and a config regression from NCCL 2.11 on")
    elif "nccl/issues/812" in src:
        c.reject(r, "user report the maintainer calls low (8x100 Gb/s NICs)")
    elif "rccl/issues/1210" in src:
        c.reject(r, "link-level protocol ceiling (48 of 64 GB/s per xGMI link); cited in docs")
    elif "habana" in src.lower():
        c.reject(r, "Gaudi generation not stated and 'NW bandwidth' (513 GB/s) exceeds the Gaudi 2 "
                    "scale-up rate: not comparable with nccl-tests busbw")
    elif "ib_write_bw" in q:
        # one RDMA write stream between two nodes at perftest's default 65,536-byte message: the
        # only point-to-point transfer across nodes measured, the anchor of send/recv's half size
        c.keep("collectives", r, silicon="hopper", sku="h200-sxm", level="scale-out", kind="send-recv",
               algo="rdma-write", ranks=2, nodes=2, size_bytes=65536, busbw_GBps=_num(r["value"]) / 8.0,
               time_us="", nic_GBps_per_device=25.0, sweep="ib-write-bw")
    elif "copy bandwidth" in q or "copy (PCIe" in q or "bidirectional" in q or "effective busbw" in q:
        c.reject(r, "host/PCIe copy or a latency demo: no collective class uses it")
    else:
        return False
    return True


XLA_COLL_SKU = [("sm_100_B200", "b200", "blackwell"), ("sm_90", "h100-sxm", "hopper"),
                ("GB200", "gb200", "blackwell"), ("gfx942", "mi300x", "cdna3"), ("sm_103", None, "blackwell")]


def curate_xla_collectives(c: Curation, rows: list[Row]) -> None:
    for r in rows:
        q, dev, p = r["quantity"], r["device"], r["params"]
        sku, silicon = _sku(dev, XLA_COLL_SKU)
        size = int(re.search(r"= (\d+) bytes", p).group(1))
        if 64 * 2**10 < size < 4 * 2**20:
            c.reject(r, "XLA table: messages between 64 KiB and 4 MiB are neither in the bandwidth fit (>= 4 MiB) "
                        "nor the latency floor (<= 64 KiB)")
            continue
        if q.startswith("collective-permute"):
            pairs = int(re.search(r"with (\d+) source-target pairs", p).group(1))
            if sku is None:
                c.reject(r, "XLA key sm_103 mixes B300 and GB300 (different NVLink domains)")
            elif pairs != 8:
                c.reject(r, "XLA collective-permute: the 8-pair (one per GPU of a node) rows are used")
            else:
                size = int(re.search(r"= (\d+) bytes", p).group(1))
                c.keep("collectives", r, silicon=silicon, sku=sku, level="scale-up", kind="send-recv",
                       algo="xla", ranks=pairs, nodes=1, size_bytes=size, busbw_GBps="", time_us="",
                       nic_GBps_per_device="", sweep=f"xla-{sku}-send-recv-{pairs}",
                       algbw_GBps=_num(r["value"]))
            continue
        groups, devs = (int(x) for x in re.search(r"(\d+) groups x (\d+) devices", p).groups())
        kind = _kind(q)
        if sku is None:
            c.reject(r, "XLA key sm_103 mixes B300 and GB300 (different NVLink domains)")
        elif kind in ("all-gather", "reduce-scatter"):
            c.reject(r, "XLA all-gather/reduce-scatter: tensor_size is the output for one and the per-device "
                        "shard for the other, so algbw is not comparable with nccl-tests")
        elif groups != 1:
            c.reject(r, "XLA table: several concurrent groups share the node's links; single-group rows used")
        elif kind == "all-reduce" and devs != 8 and sku != "gb200":
            c.reject(r, "XLA all-reduce: only 8-device groups are used")
        else:
            size = int(re.search(r"= (\d+) bytes", p).group(1))
            c.keep("collectives", r, silicon=silicon, sku=sku, level="scale-up", kind=kind, algo="xla",
                   ranks=devs, nodes=1, size_bytes=size, busbw_GBps="", time_us="", nic_GBps_per_device="",
                   sweep=f"xla-{sku}-{kind}-{devs}", algbw_GBps=_num(r["value"]))


# ------------------------------------------------------------------------------------ memory
def curate_memory(c: Curation, rows: list[Row]) -> None:
    for r in rows:
        q, dev, src, p, sw = r["quantity"], r["device"], r["source"], r["params"], r["software"]
        if q.startswith("elementwise op cost"):
            c.reject(r, "XLA op-profile clock cycles per element (compute cost of transcendental ops), "
                        "not bandwidth")
        elif q.startswith("HBM bandwidth, BabelStream-style"):
            if "@3de0" in src:
                c.reject(r, "superseded software: the same Azure MI300X BabelStream under ROCm 6.8.1")
                continue
            op = q.rsplit(" ", 1)[1].lower()
            if op not in ("copy", "triad"):
                c.reject(r, "BabelStream Mul/Add/Dot: hbm_fraction uses Copy and Triad (STREAM convention)")
                continue
            sku, silicon = _sku(dev, GEMM_SKU)
            c.keep("memory", r, silicon=silicon, sku=sku, use="stream", kernel=f"babelstream-{op}",
                   implementation="", direction="", shape="", ideal_bytes="",
                   GBps=_num(r["value"]) * 1000.0)
        elif q.startswith("torch.clone achieved bandwidth"):
            c.keep("memory", r, silicon="hopper", sku="h100-sxm", use="stream", kernel=f"clone-{r['dtype']}",
                   implementation="", direction="", shape="", ideal_bytes="", GBps=_num(r["value"]))
        elif q.startswith("achieved memory bandwidth, mxfp8 quantize"):
            impl = "compiled" if "torch.compile" in p else "fused"
            c.keep("memory", r, silicon="blackwell", sku="b200", use="elementwise",
                   kernel="mxfp8-quantize-" + re.search(r"\((\w+)\)", q).group(1), implementation=impl,
                   direction="fwd", shape="16384x16384", ideal_bytes="", GBps=_num(r["value"]))
        elif q.startswith("mxfp8 quantize kernel time"):
            c.reject(r, "duplicate: the same quantize kernels as the 16384x16384 bandwidth rows, stated as "
                        "'% of peak achievable BW' against an unstated ceiling")
        elif "quack" in src:
            c.reject(r, "microbenchmark of access patterns / Hadamard kernel; torch.clone rows are used")
        elif "HipKittens" in src:
            impl = ("eager" if "PyTorch eager" in sw else "compiled" if "torch.compile" in sw
                    else "fused" if "AITER" in sw else None)
            if impl is None:
                c.reject(r, "research kernel (HipKittens); AITER is the fused library used")
                continue
            if q.startswith("fused dropout+residual+LayerNorm"):
                n = int(re.search(r"N=(\d+)", p).group(1))
                kernel, shape = "dropout-residual-layernorm", f"B=16,N={n},D=2048"
            else:
                n = int(re.search(r"N=(\d+)", p).group(1))
                kernel, shape = "rope", f"B=16,H=16,N={n},D=128"
            c.keep("memory", r, silicon="cdna4", sku="mi355x", use="elementwise", kernel=kernel,
                   implementation=impl, direction="fwd", shape=shape, ideal_bytes="",
                   GBps="", time_ms=_num(r["value"]))
        elif "Liger-Kernel" in src:
            _curate_liger(c, r)
        else:
            raise AssertionError(f"memory row not classified: {r['line']} {q}")


LIGER_EAGER = {"huggingface", "torch", "megatron-unfused"}
LIGER_FUSED = {"liger", "megatron", "megatron-fused", "liger_fused_add_rms_norm"}


def _curate_liger(c: Curation, r: Row) -> None:
    q, p, sw = r["quantity"], r["params"], r["software"]
    name, mode = re.match(r"(\w+) (forward|backward|full) time", q).groups()
    provider = re.search(r"provider=([\w-]+)", sw).group(1)
    device = "a100-sxm-80gb" if "A100" in r["device"] else "h100-sxm"
    silicon = "ampere" if device.startswith("a100") else "hopper"
    if name in ("geglu", "swiglu", "fused_linear_cross_entropy", "fused_moe"):
        c.reject(r, "includes the MLP / LM-head / expert matmuls: not a memory-bound kernel")
        return
    if name == "embedding":
        c.reject(r, "embedding lookup (gather) in fp32: no elementwise class uses it")
        return
    if name in ("cross_entropy", "megatron_rms_norm", "megatron_cross_entropy"):
        c.reject(r, "dtype not stated in the benchmark config, so the ideal bytes are unknown")
        return
    if name == "llama4_rope":
        c.reject(r, "Llama-4 complex-valued RoPE (different layout); the Llama RoPE rows are used")
        return
    if name == "layer_norm" and provider == "huggingface":
        c.reject(r, "torch.nn.LayerNorm is one native fused kernel, not the unfused eager ops 'eager' stands for")
        return
    if mode == "full":
        c.reject(r, "'full' mode double-counts launch overheads on small sizes; forward and backward rows "
                    "are used separately")
        return
    if provider in LIGER_EAGER:
        impl = "eager"
    elif provider in LIGER_FUSED:
        impl = "fused"
    else:
        c.reject(r, f"provider {provider}: a variant of the fused kernel (liger_rms_norm inside the "
                    "add+norm benchmark, in-place SwiGLU)")
        return
    cfg = re.search(r"config (\{.*\})", p).group(1)
    x = int(re.search(r"=(\d+);", p).group(1))
    shape = f"x={x};{cfg}"
    c.keep("memory", r, silicon=silicon, sku=device, use="elementwise", kernel=name, implementation=impl,
           direction="fwd" if mode == "forward" else "bwd", shape=shape, ideal_bytes="", GBps="",
           time_ms=_num(r["value"]))


# ---------------------------------------------------------------------------- fp8 and e2e
def curate_fp8(c: Curation, gemm_rows: list[Row], e2e_rows: list[Row]) -> None:
    for r in gemm_rows:
        q = r["quantity"]
        if not q.startswith(("Fprop GEMM time", "per-layer GEMM time")):
            continue
        dev = r["device"]
        sku, silicon = ("b300", "blackwell") if "B300" in dev else ("h200-nvl", "hopper")
        d = r["dtype"].lower()
        recipe = ("bf16" if d == "bf16" else "tensorwise" if "current" in d else "delayed" if "delayed" in d
                  else "mxfp8" if "mxfp8" in d else "blockwise" if "block scaling" in d
                  else "nvfp4" if "nvfp4" in d else None)
        mode = "autocast" if "autocast" in q else "prequantized"
        if q.startswith("Fprop"):
            c.reject(r, "per-shape Fprop times: the per-layer totals of the same tables (12 GEMMs) are used")
            continue
        c.keep("fp8", r, silicon=silicon, sku=sku, use="recipe", recipe=recipe, mode=mode,
               value_num=_num(r["value"]))
    for r in e2e_rows:
        q, dev, src = r["quantity"], r["device"], r["source"]
        if q.startswith("training throughput, median tokens/s") and "pytorch/ao" in src:
            sku, silicon = (("h100-sxm", "hopper") if "H100" in dev else ("mi300x", "cdna3") if "MI300X" in dev
                            else ("b200", "blackwell"))
            label = re.search(r"\((.*)\)", q).group(1)
            recipe = ("bf16" if "bf16 baseline" in label else "tensorwise" if "tensorwise" in label
                      else "rowwise_gw_hp" if "gw_hp" in label else "rowwise" if "rowwise" in label
                      else "mxfp8" if label == "mxfp8_cublas" else "mxfp8_rceil")
            c.keep("fp8", r, silicon=silicon, sku=sku, use="e2e", recipe=recipe, mode="torchtitan-llama3-8b",
                   value_num=_num(r["value"]))
        else:
            c.reject(r, "end-to-end / layer-level result outside the torchao Llama3-8B float8 table "
                        "(different model, scale or stack; cited in docs as context)")


# --------------------------------------------------------------------------- MoE dispatch
MOE_SKU = [("H800", "h800", "hopper"), ("GB200", "gb200", "blackwell"), ("GB300", "gb300", "blackwell"),
           ("B300", "b300", "blackwell"), ("B200", "b200", "blackwell"), ("MI355X", "mi355x", "cdna4"),
           ("MI300X", "mi300x", "cdna3")]
MOE_NIC_GBPS = {"h800": 50.0, "mi300x": 50.0, "mi355x": 50.0, "gb200": 50.0, "b300": 100.0}
"""NIC bandwidth per GPU of the scale-out rows (GB/s, per direction): H800 and MI300X with one
ConnectX-7 400 Gb/s per GPU, MI355X with Pensando Pollara 400 Gb/s (all stated in the rows);
GB200 (ConnectX-7 400 Gb/s) and B300 (800 Gb/s) from the catalog, the OCI documents do not say."""
DEEPEP_SMS = "SMs=24"
"""The Hybrid-EP document sweeps DeepEP V1 over 16-48 SMs: the row at 24 SMs, the nearest to the 20
SMs Megatron-Core gives DeepEP by default (moe_deepep_num_sms), is used."""
HYBRID_SMS = "SMs=16"
"""Hybrid-EP's rows at 16 SMs (its design point: few SMs; 32 SMs were also measured)."""


def _ranks(p: str) -> int:
    m = re.search(r"(?:ranks=|EP=|kernel EP|EP)(\d+)", p)
    if m:
        return int(m.group(1))
    return int(re.search(r"(\d+) GPUs", p).group(1))


def _moe_keep(c: Curation, r: Row, *, family: str, op: str, level: str, ranks: int, nodes: int,
              tokens: int | str, topk: int | str, gbps: float, link: float, basis: str, use: str,
              sweep: str = "", time_us: float | str = "") -> None:
    sku, silicon = _sku(r["device"], MOE_SKU)
    c.keep("moe", r, silicon=silicon, sku=sku, family=family, op=op, level=level, ranks=ranks, nodes=nodes,
           tokens=tokens, topk=topk, GBps=gbps, link_GBps=link, basis=basis, use=use, sweep=sweep,
           time_us=time_us)


def _moe_op(q: str) -> str:
    return "dispatch" if "dispatch" in q.lower() else "combine"


def curate_moe(c: Curation, rows: list[Row]) -> None:
    """Token dispatch/combine kernels of expert parallelism (``moe.csv``).

    Every bandwidth is turned into the bytes one rank moves over one link level per second: the
    figures that count a rank's tokens to itself too (DeepEP's intranode test, the Hybrid-EP
    document's "algorithm bandwidth", MORI's tuning files and README) are scaled by the remote share
    (n-1)/n; RDMA figures (bytes on the NIC) are taken as they are; nccl-tests all-to-all busbw is
    algbw x (n-1)/n already, and across domains its cross-domain bytes are algbw x (d-1)/d for d
    domains of equal size. ``link_GBps`` is what the kernel fit divides by: the catalog's per-GPU
    NVLink/xGMI bandwidth (scale-up) or the NIC per GPU (scale-out)."""
    for r in rows:
        if _moe_deepep(c, r) or _moe_hybrid_ep(c, r) or _moe_mori_primus(c, r):
            continue
        if "alltoall" in r["quantity"]:
            _curate_nccl_alltoall(c, r)
        else:
            raise AssertionError(f"moe row not classified: {r['line']} {r['quantity']} {r['device']}")


def _moe_up(r: Row) -> float:
    """The catalog's per-GPU scale-up (NVLink / xGMI) bandwidth of the row's SKU, GB/s."""
    from trainperf.specs.hardware import get_hardware

    return get_hardware(_sku(r["device"], MOE_SKU)[0]).intra_node_link_GB_per_s


def _moe_deepep(c: Curation, r: Row) -> bool:
    """DeepEP's normal kernels (V1 intranode and internode); its other rows reject. False otherwise."""
    q, p, sw, v = r["quantity"], r["params"], r["software"], _num(r["value"])
    if "low-latency" in q.lower() or "low-latency" in sw.lower():
        c.reject(r, "low-latency (decode) kernels at 128 tokens: training dispatches with the normal kernels")
    elif sw.startswith("DeepEP V1 normal kernels (Feb 2025)") and "RDMA" in q:
        c.reject(r, "superseded: the same DeepEP internode kernels after Tencent's PR #130 (Apr 2025 README)")
    elif sw.startswith("DeepEP V1 normal kernels") and "NVLink" in q:
        _moe_keep(c, r, family="deepep", op=_moe_op(q), level="scale-up", ranks=8, nodes=1, tokens=4096,
                  topk=8, gbps=v * 7 / 8, link=_moe_up(r), basis="received bytes incl. the rank's own x 7/8",
                  use="plateau")
    elif sw.startswith("DeepEP V1 normal kernels after Tencent"):
        n = _ranks(p)
        _moe_keep(c, r, family="deepep", op=_moe_op(q), level="scale-out", ranks=n, nodes=n // 8, tokens=4096,
                  topk=8, gbps=v, link=MOE_NIC_GBPS["h800"], basis="RDMA bytes (bottleneck)", use="plateau")
    elif sw.startswith("DeepEP V2"):
        c.reject(r, "SKU not named (SM90 / SM100 class) and 'logical' bandwidth counting local-rank traffic "
                    "of the EP 8x2 topology: no per-link efficiency of a catalog part follows")
    elif "H100 Platform" in r["where"]:
        c.reject(r, "NIC not stated, and 'algorithm bandwidth' across nodes mixes NVLink and IB traffic: no "
                    "NIC efficiency follows (DeepEP's H800 RDMA figures stand for hopper)")
    elif sw.startswith("DeepEP PCIe"):
        c.reject(r, "DeepEP's PCIe mode (NVLink disabled, every token through the NIC) on H20: a layout no "
                    "training stack on NVLink nodes runs")
    else:
        return False
    return True


def _moe_hybrid_ep(c: Curation, r: Row) -> bool:
    """The Hybrid-EP document's torch-API bf16 rows (Hybrid-EP and DeepEP V1); False for other rows."""
    q, p, sw = r["quantity"], r["params"], r["software"]
    if not ("Hybrid-EP doc" in sw or "Hybrid-EP (DeepEP" in sw):
        return False
    family = "deepep" if sw.startswith("DeepEP") else "hybrid-ep"
    want = DEEPEP_SMS if family == "deepep" else HYBRID_SMS
    if "kernel only" in q:
        c.reject(r, "kernel-only timing: the torch-API rows (what a training stack calls) are used")
    elif not re.search(rf"{want}\b", p):
        c.reject(r, f"SM-count sweep: the {family} rows at {want.split('=')[1]} SMs are used "
                    "(Hybrid-EP: its design point; DeepEP: nearest Megatron-Core's default of 20)")
    elif r["dtype"] != "bf16":
        c.reject(r, "fp8 dispatch: the stacks modelled dispatch 16-bit tokens (Megatron-Core, "
                    "torchtitan); the bf16 rows are used")
    else:
        n = _ranks(p)
        _moe_keep(c, r, family=family, op=_moe_op(q), level="scale-up", ranks=n, nodes=1, tokens=4096,
                  topk=8, gbps=_num(r["value"]) * (n - 1) / n, link=_moe_up(r),
                  basis="algorithm bandwidth x (n-1)/n", use="plateau")
    return True


def _moe_mori_primus(c: Curation, r: Row) -> bool:
    """MORI-EP (README figures and tuning sweeps) and Primus-Turbo rows; False for other rows."""
    q, p, sw = r["quantity"], r["params"], r["software"]
    if sw == "MORI-EP" and "(XGMI)" in q and "kernel EP8" in p:
        c.reject(r, "duplicate: MORI's tuning files sweep the same intranode kernels over 128-4096 tokens "
                    "(bf16), which are used")
    elif sw == "MORI-EP" and "(XGMI)" in q:
        c.reject(r, "XGMI leg of an internode dispatch (the RDMA leg, its bottleneck, is used)")
    elif sw == "MORI-EP" and "stale" in p:
        c.reject(r, "the MORI README marks the MI300X EP32 value as stale (previous kernel version)")
    elif sw == "MORI-EP" and "(RDMA)" in q:
        n = _ranks(p)
        _moe_keep(c, r, family="mori", op=_moe_op(q), level="scale-out", ranks=n, nodes=n // 8, tokens=4096,
                  topk=8, gbps=_num(r["value"]), link=MOE_NIC_GBPS[_sku(r["device"], MOE_SKU)[0]],
                  basis="RDMA bytes", use="plateau")
    elif sw.startswith("MORI-EP tuning"):
        _curate_mori_sweep(c, r)
    elif sw.startswith("Primus-Turbo"):
        c.reject(r, "fused comm + grouped-GEMM kernels of one stack (Primus-Turbo Mega MoE): no modelled "
                    "stack runs them; cited in docs/KERNELS.md (comm leg ~0.69 of xGMI, 87-94% overlap)")
    else:
        return False
    return True


def _curate_mori_sweep(c: Curation, r: Row) -> None:
    """MORI's auto-tuner outputs: the intranode bf16 sweeps (dispatch with a stated top-k, combine)
    give the token-count curve and the smallest call's latency; internode, the average RDMA bandwidth
    of each rule (bf16 combine and fp8 dispatch: the bf16 dispatch rule has two sizes only)."""
    p, q = r["params"], r["quantity"]
    tokens = int(re.search(r"tokens/rank=(\d+)", p).group(1))
    lat = float(re.search(r"latency ([0-9.]+) us", p).group(1))
    topk_m = re.search(r"top-k (\d+)", p)
    op = _moe_op(q)
    if "InterNode" in p:
        rdma = float(re.search(r"avg RDMA bw ([0-9.]+) GB/s", p).group(1))
        wanted = (op == "combine" and r["dtype"] == "bf16") or (op == "dispatch" and "fp8" in r["dtype"])
        if not wanted:
            c.reject(r, "MORI internode sweep: the bf16 combine and fp8 dispatch rules (7 sizes each) give the "
                        "curve; the other rules have fewer sizes")
            return
        _moe_keep(c, r, family="mori", op=op, level="scale-out", ranks=16, nodes=2, tokens=tokens,
                  topk=topk_m.group(1) if topk_m else "", gbps=rdma, link=MOE_NIC_GBPS["mi355x"],
                  basis="average RDMA bandwidth of the rule", use="sweep", sweep=f"mori-mi355x-internode-{op}", time_us=lat)
        return
    if r["dtype"] != "bf16":
        c.reject(r, "fp8 dispatch: the stacks modelled dispatch 16-bit tokens; MORI's bf16 sweeps are used")
        return
    if op == "dispatch" and not topk_m:
        c.reject(r, "top-k not recorded in this dispatch rule: the bytes per token are unknown")
        return
    sku = _sku(r["device"], MOE_SKU)[0]
    from trainperf.specs.hardware import get_hardware

    # MORI's bandwidth counts each token once per destination rank, its own included (its tuning
    # files: bandwidth = tokens x distinct ranks x hidden x 2 B / latency); the remote share is 7/8
    _moe_keep(c, r, family="mori", op=op, level="scale-up", ranks=8, nodes=1, tokens=tokens,
              topk=topk_m.group(1) if topk_m else "", gbps=_num(r["value"]) * 7 / 8,
              link=get_hardware(sku).intra_node_link_GB_per_s, basis="bytes to distinct ranks x 7/8",
              use="sweep", sweep=f"mori-{sku}-intranode-{op}", time_us=lat)


def _curate_nccl_alltoall(c: Curation, r: Row) -> None:
    """nccl-tests / rccl-tests all-to-all at 4-16 GiB per rank (only the largest sizes are printed)."""
    p, dev = r["params"], r["device"]
    sku, _silicon = _sku(dev, MOE_SKU)
    n = int(re.search(r"(\d+) GPUs", p).group(1))
    algbw = float(re.search(r"algbw=([0-9.]+)", p).group(1))
    size = int(re.search(r"size=(\d+) B", p).group(1))
    time_us = float(re.search(r"time=([0-9.]+) us", p).group(1))
    racks = re.search(r"(\d+) racks", p)
    nodes = re.search(r"(\d+) nodes", p)
    domains = int(racks.group(1)) if racks else (int(nodes.group(1)) if nodes and sku not in ("gb200", "gb300")
                                                 else 1)
    if sku == "gb300" and domains > 1:
        c.reject(r, "GB300 across racks: 47.7 GB/s busbw is half the GB200 racks' 89.7 at twice the catalog NIC "
                    "rate; the document does not state the cross-rack fabric, so no NIC efficiency follows")
        return
    if domains == 1:
        _moe_keep(c, r, family="nccl", op="all-to-all", level="scale-up", ranks=n, nodes=1, tokens="", topk="",
                  gbps=_num(r["value"]), link=_moe_up(r), basis="nccl-tests busbw", use="plateau",
                  sweep=f"size={size}", time_us=time_us)
        return
    cross = algbw * (domains - 1) / domains
    _moe_keep(c, r, family="nccl", op="all-to-all", level="scale-out", ranks=n, nodes=domains, tokens="",
              topk="", gbps=cross, link=MOE_NIC_GBPS[sku], basis="algbw x (domains-1)/domains (cross-domain "
              "bytes per rank)", use="plateau", sweep=f"size={size}", time_us=time_us)


# -------------------------------------------------------------------------------------- main
WRITE_ORDER = {
    "gemm": ["silicon", "sku", "dtype_key", "use", "sweep", "m", "n", "k", "tflops"],
    "attention": ["silicon", "sku", "family", "direction", "seq_len", "head_dim", "causal", "tflops", "use"],
    "collectives": ["silicon", "sku", "level", "kind", "algo", "ranks", "nodes", "size_bytes", "busbw_GBps",
                    "algbw_GBps", "time_us", "nic_GBps_per_device", "sweep"],
    "memory": ["silicon", "sku", "use", "kernel", "implementation", "direction", "shape", "ideal_bytes",
               "GBps", "time_ms"],
    "fp8": ["silicon", "sku", "use", "recipe", "mode", "value_num"],
    "moe": ["silicon", "sku", "family", "op", "level", "ranks", "nodes", "tokens", "topk", "GBps", "link_GBps",
            "basis", "use", "sweep", "time_us"],
}


def curate(shared: Path) -> Curation:
    c = Curation()
    gemm = _read(shared, "gemm.csv")
    curate_gemm(c, gemm)
    curate_attention(c, _read(shared, "attention.csv"))
    curate_long_context(c, _read(shared, "long_context.csv"))
    curate_collectives(c, _read(shared, "collectives.csv"))
    curate_xla_collectives(c, _read(shared, "collectives_xla_perf_table.csv"))
    curate_memory(c, _read(shared, "memory.csv"))
    e2e = _read(shared, "e2e_fp8_compile.csv")
    curate_fp8(c, gemm, e2e)
    moe = _read(shared, "moe.csv")
    curate_moe(c, moe)
    xla_gemm = _read(shared, "gemm_xla_perf_table.csv")
    c.rest(xla_gemm, "XLA matmul table: the generator computes M*N*K*b/ns (FMA/s) while bf16/tf32 "
                     "magnitudes read as FLOP/s, the sm_90 fp8 entries exceed the 1979 TFLOP/s spec, "
                     "and the SKU behind sm_90/gfx942/gfx950 is not stated")
    for rows in (gemm, e2e, moe):
        missing = [r["line"] for r in rows if (r["file"], r["line"]) not in c.seen]
        if missing:
            raise AssertionError(f"{rows[0]['file']}: rows not curated: {missing[:10]}")
    return c


def write(c: Curation, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, extra in WRITE_ORDER.items():
        cols = ["file", "line", *extra, *ORIGINAL]
        with open(out_dir / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=cols, lineterminator="\n")
            w.writeheader()
            for row in c.kept[name]:
                w.writerow({k: row.get(k, "") for k in cols})


def rejected_table(c: Curation) -> str:
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for row, reason in c.rejected:
        groups[(row["file"], reason)].append(int(row["line"]))
    lines = ["| file | rows | lines | reason |", "|---|---:|---|---|"]
    for (file, reason), nums in sorted(groups.items()):
        lines.append(f"| {file} | {len(nums)} | {_ranges(nums)} | {reason} |")
    return "\n".join(lines)


def _ranges(nums: list[int]) -> str:
    nums = sorted(nums)
    out, start, prev = [], nums[0], nums[0]
    for n in [*nums[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    text = ", ".join(out)
    return text if len(text) < 80 else text[:77] + "..."


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default="/work/shared/kernels", help="folder of the collected CSVs")
    ap.add_argument("--rejected", action="store_true", help="print the rejections as a Markdown table")
    args = ap.parse_args(argv)
    c = curate(Path(args.shared))
    write(c, OUT_DIR)
    kept = {k: len(v) for k, v in c.kept.items()}
    print(f"kept {sum(kept.values())} rows {kept}; rejected {len(c.rejected)}", file=sys.stderr)
    if args.rejected:
        print(rejected_table(c))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
