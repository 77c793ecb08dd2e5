"""Readers for the cells of a runs table as people write them.

A runs table with the packaged columns (:mod:`trainperf.predict.runs_table`) is written by
hand: ``"1,024"``, ``"8k"``, ``"2x8"``, ``"64 (FSDP degree)"``, ``"tp=8"``, ``"850 ms"``,
``"4M tokens"``, ``"n/a"``, ``"not stated"``, ``"-"``, ``"BF16 mixed"``, ``"FP8 (Float8
rowwise)"``, ``"Megatron-Bridge"``... Each reader here takes one cell and returns the value it
states, ``None`` when the cell states nothing (:func:`unstated`), or raises :class:`CellError`
with a one-line reason when the cell states something that is not one value (a range where a
count is needed, a precision no device runs). A reader never guesses a value the cell does not
hold; where it interprets (tokens vs sequences, a range's midpoint), it returns a note saying so.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = [
    "CellError", "Precision", "read_count", "read_flag", "read_framework", "read_global_batch",
    "read_number", "read_precision", "read_rate", "read_seconds", "unstated",
]


class CellError(ValueError):
    """A cell that states something, but not one readable value; the message is one line."""


_UNSTATED = re.compile(
    r"^(?:|-+|–|—|\?+|n/?a|na|none given|null|unknown|unstated|tbd|not (?:stated|given|reported|read|known|"
    r"available|published|re-read|specified|public)\b.*)$")


def unstated(cell: str | None) -> bool:
    """True for a cell that states nothing: blank, ``-``, ``—``, ``?``, ``n/a``, ``null``,
    ``unknown``, ``not stated``/``not given``/``not read`` (and anything after those words)."""
    if cell is None:
        return True
    return bool(_UNSTATED.match(cell.strip().lower()))


_POWER = re.compile(r"(?<![\w.])(\d{1,3})\s*(?:\^|\*\*)\s*(\d{1,2})(?![\d.])")


def _clean(cell: str) -> str:
    s = cell.strip().lower().replace("\u2212", "-").replace("\u00d7", "x")
    # a power written out ("2^13", "2**20") is read as its value, not as its base
    s = _POWER.sub(lambda m: str(int(m.group(1)) ** int(m.group(2))), s)
    # thousands separators: "1,024", "1_024", "1'024", thin spaces
    return re.sub(r"(?<=\d)[,_'\u2009\u202f](?=\d{3}(?!\d))", "", s)


_NUMBER = r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
_NUM = re.compile(rf"(?<![\w.])({_NUMBER})\s*([kmbg](?![a-z])|)")
_RANGE = re.compile(rf"^[~≈]?\s*({_NUMBER})\s*([kmb]?)\s*(?:-|–|—|to|\.\.)\s*({_NUMBER})\s*([kmb]?)(?![\w.])")
_PRODUCT = re.compile(r"^(\d+)\s*(?:nodes?|hosts?|servers?|pods?|slices?|trays?|racks?)?\s*x\s*(\d+)(?![\d.])"
                      r"(?:[^=]*=\s*(\d+))?")
_DECIMAL = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9}
_BINARY = {"": 1, "k": 1024, "m": 1024**2, "b": 1024**3, "g": 1024**3}


def read_number(cell: str | None, *, binary: bool = False) -> float | None:
    """The first number a cell states (``"~1,024 (inferred)"`` -> 1024; ``"1.2M"`` -> 1.2e6;
    ``"8k"`` -> 8000, or 8192 with ``binary``). ``None`` when the cell states none. A range
    (``"4-8"``) is a :class:`CellError`."""
    if unstated(cell):
        return None
    s = _clean(str(cell))
    if _RANGE.match(s) and not s.startswith("-"):
        raise CellError(f"{str(cell).strip()!r} is a range, not one value")
    m = _NUM.search(s)
    if not m:
        return None
    mult = (_BINARY if binary else _DECIMAL)[m.group(2)]
    v = float(m.group(1)) * mult
    if not math.isfinite(v):  # "9" * 400 reads as inf: no cell states that
        raise CellError(f"{str(cell).strip()[:40]!r} is not a finite number")
    return v


def read_count(cell: str | None, key: str = "") -> int | None:
    """A whole count: devices, a parallel degree, a batch (``"64 (FSDP degree)"``, ``"tp=8"``,
    ``"TP8"`` with ``key="tp"``, ``"2x8"`` = 16, ``"16 nodes x 8"`` = 128, ``"4 x 8 = 32"``,
    ``"1,024"``, ``"1k"`` = 1024). ``None`` when unstated; a range or a fraction is a
    :class:`CellError`."""
    if unstated(cell):
        return None
    s = _clean(str(cell))
    if key:
        m = re.search(rf"(?<![a-z]){re.escape(key)}\s*[=:]?\s*(\d+)(?![\d.])", s)
        if m:
            return int(m.group(1))
    m = _PRODUCT.match(s)
    if m:
        return int(m.group(3)) if m.group(3) else int(m.group(1)) * int(m.group(2))
    v = read_number(s, binary=True)
    if v is None:
        return None
    if not math.isfinite(v):  # a 400-digit count reads as inf
        raise CellError(f"{str(cell).strip()[:40]!r} is not a finite number")
    if v != round(v):
        raise CellError(f"{str(cell).strip()!r} is not a whole number")
    return round(v)


def read_global_batch(cell: str | None, seq_len: int | None) -> tuple[int | None, str]:
    """Sequences per optimizer step, and a note when the cell gave tokens.

    Tokens when the cell says so (``"4M tokens"``, ``"2,097,152 tok"``), when it has an M/B
    suffix (millions of sequences per step do not occur), or when the number exceeds 65,536
    and is a multiple of ``seq_len`` (no published run steps on more sequences than that).
    ``k``/``M`` token counts are read as powers of two when that divides by ``seq_len``
    (Llama's "4M tokens" is 4,194,304 = 1024 x 4096), else as powers of ten."""
    if unstated(cell):
        return None, ""
    s = _clean(str(cell))
    if _RANGE.match(s):
        raise CellError(f"{str(cell).strip()!r} is a range, not one value")
    m = _NUM.search(s)
    if not m:
        return None, ""
    value, suffix = float(m.group(1)), m.group(2)
    if not math.isfinite(value * _BINARY["b"]):  # a 400-digit batch (or 1e308k) reads as inf
        raise CellError(f"global batch {str(cell).strip()[:40]!r} is not a finite number")
    says_tokens = bool(re.match(r"\s*(?:tokens?|tok)\b", s[m.end():]))  # the number itself is in tokens
    if not says_tokens and suffix not in ("m", "b", "g"):
        seqs = value * _BINARY[suffix]
        if seqs > 65536 and seq_len and seqs % seq_len == 0:
            return int(seqs // seq_len), (f"global batch {str(cell).strip()!r} read as tokens "
                                          f"({int(seqs)} / seq_len {seq_len}): too many to be sequences")
        if seqs != round(seqs):
            raise CellError(f"global batch {str(cell).strip()!r} is not a whole number of sequences")
        return int(seqs), ""
    if not seq_len:
        raise CellError(f"global batch {str(cell).strip()!r} is in tokens and the sequence length is not stated")
    for table in (_BINARY, _DECIMAL):
        tokens = value * table[suffix]
        if tokens == round(tokens) and round(tokens) % seq_len == 0:
            return round(tokens) // seq_len, f"global batch {str(cell).strip()!r} read as {round(tokens)} tokens"
    seqs = max(1, round(value * _DECIMAL[suffix] / seq_len))
    return seqs, f"global batch {str(cell).strip()!r} in tokens: {seqs} sequences of {seq_len} (rounded)"


_TIME_UNITS = (("ms", 1e-3), ("msec", 1e-3), ("millisecond", 1e-3), ("us", 1e-6), ("µs", 1e-6),
               ("min", 60.0), ("minute", 60.0), ("h", 3600.0), ("hr", 3600.0), ("hour", 3600.0),
               ("s", 1.0), ("sec", 1.0), ("second", 1.0))


def read_seconds(cell: str | None) -> tuple[float | None, str]:
    """Seconds (``"7.0"``, ``"7.0 (derived)"``, ``"850 ms"``, ``"1.2 s"``, ``"2 min"``), and a
    note for a range, whose midpoint is taken (``"1.2-1.3 s"``), or for a rate (``"0.5 it/s"``,
    inverted)."""
    if unstated(cell):
        return None, ""
    s = _clean(str(cell))
    note = ""
    m = _RANGE.match(s)
    if m and not s.startswith("-"):
        lo, hi = float(m.group(1)), float(m.group(3))
        value, rest = (lo + hi) / 2.0, s[m.end():]
        note = f"step time given as a range {str(cell).strip()!r}: midpoint taken"
    else:
        m = re.search(rf"(?<![\w.])({_NUMBER})", s)
        if not m:
            return None, ""
        value, rest = float(m.group(1)), s[m.end():]
    if re.match(r"\s*(?:it|iters?|iterations?|steps?|batch(?:es)?)\s*/\s*s(?:ec(?:ond)?)?\b", rest):
        if value <= 0:
            raise CellError(f"step rate {str(cell).strip()!r} is not positive")
        # a rate ("0.5 it/s", tqdm's unit for fast loops): the step time is its inverse
        note = "; ".join(x for x in (note, f"step time given as a rate {str(cell).strip()!r}: inverted") if x)
        value, rest = 1.0 / value, ""
    unit = re.match(r"\s*([a-zµ]+)", rest)
    scale = 1.0
    if unit:
        word = unit.group(1).rstrip("s") if unit.group(1) not in ("s", "ms", "us", "µs") else unit.group(1)
        scale = next((f for u, f in _TIME_UNITS if word == u), 1.0)
    if value <= 0:
        raise CellError(f"step time {str(cell).strip()!r} is not positive")
    if not 1e-6 <= value * scale <= 1e7:  # below 1 us or above 4 months: not a step time (inf, 1e-320)
        raise CellError(f"step time {str(cell).strip()[:40]!r} is not between 1 us and 10,000,000 s")
    return value * scale, note


_PER_DEVICE = re.compile(r"(?:per|/)\s*(?:gpu|device|chip|gcd|accelerator|rank|core)\b")


def read_rate(cell: str | None) -> tuple[float | None, bool]:
    """Tokens per second (``"74,908.99"``, ``"1.2M"``, ``"3k"``), and whether the cell says it is
    per device (``"2,904 per GPU"``, ``"3k tok/s/gpu"``)."""
    v = read_number(cell)
    if v is None:
        return None, False
    if v <= 0:
        raise CellError(f"tokens/s {str(cell).strip()!r} is not positive")
    return v, bool(_PER_DEVICE.search(_clean(str(cell))))


_YES = re.compile(r"^(?:yes|y|true|on|enabled?|1|✓|✔|x|sp|sequence[ -]parallel(?:ism)?)(?![a-z0-9])")
_NO = re.compile(r"^(?:no|n|false|off|disabled?|0|✗|✘|none)(?![a-z0-9])")


_BITRATE = r"(\d+(?:\.\d+)?)\s*([GT])(?:b|bit)(?:ps|/s|its/s)?(?![A-Za-z])"
_NOT_NETWORK = re.compile(r"nvlink|intra|xgmi|infinity fabric|\bici\b|pcie", re.IGNORECASE)


def read_interconnect(cell: str | None, devices_per_node: int) -> float | None:
    """GB/s per device, one direction, of the network between nodes, from a free-text cell:
    ``"8x400 Gb/s InfiniBand"`` (NICs per node: 3,200 Gb/s shared by the node's devices),
    ``"400 Gb/s per GPU"``, ``"1600 Gbps node-node RoCE"`` (per node), ``"3.2 Tbps EFA"``
    (per node). Parts that name a scale-up link (NVLink, xGMI, ICI, PCIe, intra-node) are
    skipped; rates in bytes (``GB/s``) are not NIC rates and are ignored. None when the cell
    states no such rate (a fabric name alone, ``"not stated"``)."""
    if unstated(cell):
        return None
    for part in re.split(r"[;,]|\band\b", str(cell)):
        if _NOT_NETWORK.search(part):
            continue
        m = re.search(r"(\d+)\s*[x×]\s*" + _BITRATE, part)
        if m:
            gbit = int(m.group(1)) * float(m.group(2)) * (1000.0 if m.group(3) == "T" else 1.0)
            return gbit / 8.0 / max(devices_per_node, 1) if gbit > 0 else None
        m = re.search(_BITRATE + r"\s*(per|/|a|each)?\s*(gpu|device|accelerator|gcd|chip|node|host|server)?",
                      part, re.IGNORECASE)
        if m:
            gbit = float(m.group(1)) * (1000.0 if m.group(2) == "T" else 1.0)
            per_device = (m.group(4) or "").lower() in ("gpu", "device", "accelerator", "gcd", "chip")
            return gbit / 8.0 / (1 if per_device else max(devices_per_node, 1)) if gbit > 0 else None
    return None


def read_flag(cell: str | None) -> bool | None:
    """yes/true/on/enabled/✓ -> True; no/false/off/disabled/none/✗ -> False; unstated -> None.
    Anything else is a :class:`CellError`."""
    if unstated(cell):
        return None
    s = _clean(str(cell))
    if _YES.match(s):
        return True
    if _NO.match(s):
        return False
    raise CellError(f"{str(cell).strip()!r} is not yes or no")


@dataclass(frozen=True)
class Precision:
    """What a precision cell states."""

    precision: str
    """Matmul dtype: fp32, tf32, fp16, bf16, fp8 or fp4."""
    fp8_recipe: str | None = None
    """tensorwise, rowwise or delayed when the cell names the scaling; ``None`` when it does not."""
    note: str = ""
    """An interpretation worth telling (MXFP8 has no matching recipe, TE's default recipe...)."""


def read_precision(cell: str | None) -> Precision | None:
    """The matmul precision (and fp8 scaling recipe) of a free-text cell: ``"bf16"``,
    ``"BF16 mixed"``, ``"amp_bf16"``, ``"fp16 mixed"``, ``"FP8 (Float8 rowwise)"``, ``"float8 +
    bf16"``, ``"FP8 hybrid (TE)"`` (Transformer Engine's DelayedScaling, its default recipe),
    ``"fp8 current scaling"`` (tensorwise), ``"MXFP8"`` (per-32-element block scales, recipe
    ``mxfp8``), block-wise fp8 (recipe ``blockwise``), NVIDIA's abbreviations ``FP8-CS``
    (tensorwise), ``FP8-DS`` (delayed), ``FP8-MX`` (mxfp8), ``FP8-SS``/``FP8-BLK`` (blockwise), DeepSeek's
    "1x128 tiles" / "128x128 blocks" (blockwise), ``"NVFP4"``/``"MXFP4"`` (fp4). ``None`` when unstated; an
    unreadable precision is a :class:`CellError`."""
    if unstated(cell):
        return None
    s = _clean(str(cell))
    if re.search(r"(?<![a-z0-9])(?:nv|mx)?fp4\b|float4|e2m1", s):
        return Precision("fp4", note="fp4 (NVFP4/MXFP4): block-scaled, no fp8 recipe applies")
    if re.search(r"(?<![a-z0-9])mxfp8\b|(?<![a-z0-9])fp8[ _-]mx\b", s):
        return Precision("fp8", "mxfp8")
    # NVIDIA's performance tables abbreviate the recipe: FP8-CS (current scaling), FP8-DS
    # (delayed scaling), FP8-SS / FP8-BLK (sub-channel / block scaling)
    m = re.search(r"(?<![a-z0-9])fp8[ _-](cs|ds|ss|blk|bs)\b", s)
    if m:
        return Precision("fp8", {"cs": "tensorwise", "ds": "delayed"}.get(m.group(1), "blockwise"))
    if re.search(r"(?<![a-z0-9])fp8\b|float8|e4m3|\b8-bit float", s):
        if re.search(r"row[- ]?wise|per[- ]row|axiswise", s):
            return Precision("fp8", "rowwise")
        # delayed scaling is per-tensor too: "per-tensor, delayed" is the delayed recipe
        if re.search(r"delayed|amax[ _-]history", s):
            return Precision("fp8", "delayed")
        if re.search(r"tensor[- ]?wise|per[- ]tensor|current[- ]scaling|dynamic", s):
            return Precision("fp8", "tensorwise")
        if re.search(r"block[- ]?wise|blockwise|block scal|deepseek|tile[- ]?wise|\b1\s*x\s*128\b|\b128\s*x\s*128\b", s):
            # DeepSeek-V3's fine-grained scaling: 1x128 activation tiles, 128x128 weight blocks
            return Precision("fp8", "blockwise")
        if re.search(r"\bte\b|transformer[ _-]?engine|hybrid", s):
            return Precision("fp8", "delayed", "fp8 via Transformer Engine: its default recipe, DelayedScaling")
        return Precision("fp8")
    if re.search(r"bf16|bfloat16|brain ?float", s):
        return Precision("bf16")
    if re.search(r"fp16|float16|half", s):
        return Precision("fp16")
    if re.search(r"tf32|tensorfloat", s):
        return Precision("tf32")
    if re.search(r"fp32|float32|full precision|single", s):
        return Precision("fp32")
    if re.fullmatch(r"(?:amp|mixed|mixed precision|amp mixed|16-bit mixed)", s):
        return None  # says mixed precision without the dtype: the stack's default dtype
    raise CellError(f"precision {str(cell).strip()!r} not readable (bf16, fp16, fp8, fp4, fp32 or tf32)")


# Spellings of frameworks that trainperf.predict.stacks.stack_of_framework does not know, mapped
# onto words it does. Order matters: the first key found wins (Megatron-DeepSpeed is DeepSpeed's
# engine; NeMo and Megatron-Bridge run Megatron-Core).
_FRAMEWORK_WORDS: tuple[tuple[str, str], ...] = (
    (r"deep\s*speed", "deepspeed"),
    (r"torch\s*titan", "torchtitan"),
    # Megatron-LM before its 2022 features (sequence parallelism, distributed optimizer, selective
    # recomputation): a release year of 2019-2021 or a v1/v2 version beside the name
    (r"megatron[\s_-]*lm\W*(?:\(?\s*20(?:19|20|21)\b|v?[12](?:\.\d+)*\b)", "megatron-lm 2021"),
    (r"megatron|\bnemo\b|\bmcore\b|m-core|nvidia nemo", "megatron"),
    (r"max\s*text", "maxtext"),
    (r"\bpax(?:ml)?\b|praxis|\bsax(?:ml)?\b", "paxml"),
    (r"llm[\s_-]*foundry|composer|mosaic\s*ml|\bmosaic\b|databricks", "llm foundry"),
)


def read_framework(cell: str | None) -> str:
    """The stack profile of a framework written in free text ("Megatron-Bridge", "NeMo 2.0",
    "Megatron-LM", "torchtitan", "Composer", "LLM Foundry", "MosaicML", "MaxText", "Pax",
    "PaxML", "DeepSpeed", "Megatron-DeepSpeed"...); ``generic`` for anything else (JAX/T5X,
    HF Trainer, an unnamed stack)."""
    from trainperf.predict.stacks import stack_of_framework

    s = _clean(str(cell or ""))
    for pattern, word in _FRAMEWORK_WORDS:
        if re.search(pattern, s):
            return stack_of_framework(word)
    return stack_of_framework(s)
