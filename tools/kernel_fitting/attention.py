"""Attention: forward and backward fraction of the 16-bit peak against sequence length, per family.

Each (silicon, family) gets curves {head_dim: {"full"|"causal": [log2 seq, fwd, bwd]}}, made
non-decreasing in sequence length by isotonic regression, with the rows and rules they come from.
FLOP convention of the FlashAttention benchmarks: forward 4 * seq^2 * head_dim * heads per
sequence (half of it with a causal mask), backward 2.5 times the forward.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from .common import Row, cite, peak, sig, silicons, vendor_knob

BWD_FLOPS = 2.5
Key = tuple[int, bool]  # (head_dim, causal)


class Curve:
    """fwd and bwd fractions at knots x = log2(seq_len); flat outside the knots."""

    def __init__(self, x: np.ndarray, fwd: np.ndarray, bwd: np.ndarray) -> None:
        self.x, self.fwd, self.bwd = np.asarray(x, float), np.asarray(fwd, float), np.asarray(bwd, float)

    def at(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.interp(x, self.x, self.fwd), np.interp(x, self.x, self.bwd)

    def scaled(self, factor: float | Callable[[np.ndarray], np.ndarray], knots: np.ndarray | None = None) -> Curve:
        """The curve times ``factor`` (a number, or a function of log2 seq evaluated on the union of
        this curve's knots and ``knots``, the curve held flat beyond its own)."""
        x = self.x if knots is None else np.unique(np.concatenate([self.x, knots]))
        fwd, bwd = self.at(x)
        f = factor(x) if callable(factor) else factor
        return Curve(x, fwd * f, bwd * f)


Curves = dict[Key, Curve]


def pav(y: np.ndarray) -> np.ndarray:
    """Isotonic (non-decreasing) least-squares fit by pooling adjacent violators."""
    blocks: list[list[float]] = []
    for v in y:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2 = blocks.pop()
            v1, w1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2])
    return np.concatenate([np.full(int(w), v) for v, w in blocks])


def combine(f: np.ndarray, b: np.ndarray) -> np.ndarray:
    """fwd+bwd fraction of fwd fraction f and bwd fraction b (1 + 2.5 units of work)."""
    return (1.0 + BWD_FLOPS) / (1.0 / f + BWD_FLOPS / b)


def split(combined: np.ndarray, ratio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """fwd and bwd fractions of a fwd+bwd fraction E given r = bwd/fwd:
    E = 3.5 / (1/f + 2.5/(r f))  =>  f = E (1 + 2.5/r) / 3.5,  b = r f."""
    f = combined * (1.0 + BWD_FLOPS / ratio) / (1.0 + BWD_FLOPS)
    return f, ratio * f


class Measured:
    """The curve rows of one silicon: (family, direction, head_dim, causal) -> (log2 seq, fraction)."""

    def __init__(self, rows: list[Row], silicon: str) -> None:
        self.series: dict[tuple[str, str, int, bool], tuple[np.ndarray, np.ndarray]] = {}
        self.cites: dict[str, list[str]] = defaultdict(list)
        groups: dict[tuple[str, str, int, bool], list[Row]] = defaultdict(list)
        for r in rows:
            if r["silicon"] == silicon and (r["use"] == "curve" or (r["use"] == "check" and r["direction"] == "fwdbwd"
                                            and r["causal"] == "true" and r["sku"] == "h100-sxm")):
                groups[(r["family"], r["direction"], int(r["head_dim"]), r["causal"] == "true")].append(r)
        for key, rs in sorted(groups.items()):
            rs.sort(key=lambda r: int(r["seq_len"]))
            pk = peak(rs[0]["sku"], "bf16")
            self.series[key] = (np.log2([float(r["seq_len"]) for r in rs]),
                                np.array([float(r["tflops"]) for r in rs]) / pk)
            c = f"{key[1]}: {cite(rs[0])} ({rs[0]['sku']}, / {pk:g})"
            if c not in self.cites[key[0]]:
                self.cites[key[0]].append(c)

    def get(self, fam: str, direction: str, key: Key) -> tuple[np.ndarray, np.ndarray] | None:
        return self.series.get((fam, direction, *key))

    def keys(self, fam: str, direction: str) -> list[Key]:
        return sorted((k[2], k[3]) for k in self.series if k[0] == fam and k[1] == direction)

    def source(self, fam: str, notes: list[str]) -> str:
        return "; ".join(self.cites[fam]) + (f" ({'; '.join(notes)})" if notes else "")


def _on(x: np.ndarray, s: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    return np.interp(x, s[0], s[1])


def _knots(*series: tuple[np.ndarray, np.ndarray] | Curve) -> np.ndarray:
    return np.unique(np.concatenate([s.x if isinstance(s, Curve) else s[0] for s in series]))


def measured_curves(m: Measured, fam: str, ratio_ref: Curves | None) -> tuple[Curves, list[str]]:
    """The family's curves on one silicon, completing what was not measured:

    * only fwd+bwd measured (the A100 figure): split with the bwd/fwd ratio of ``ratio_ref`` (the
      same head dim and mask measured on Hopper);
    * no bwd but fwd and fwd+bwd for a (head dim, mask) (FA2 and eager causal on H100, the fwd+bwd
      bars of the FA2 README): bwd = 2.5 / (3.5/E - 1/f);
    * otherwise no bwd: fwd x the bwd/fwd ratio of the nearest series with both (same head dim
      other mask first, then the nearest head dim), else of ``ratio_ref``.
    """
    notes: list[str] = []
    out: Curves = {}
    both = [k for k in m.keys(fam, "bwd") if m.get(fam, "fwd", k) is not None]
    for key in sorted(set(m.keys(fam, "fwd")) | set(m.keys(fam, "fwdbwd"))):
        fwd = m.get(fam, "fwd", key)
        if fwd is None:
            comb = m.get(fam, "fwdbwd", key)
            assert comb is not None  # keys without a fwd series are fwd+bwd keys
            ref = _ref(ratio_ref, fam, key)
            rf, rb = ref.at(comb[0])
            f, b = split(comb[1], rb / rf)
            out[key] = Curve(comb[0], f, b)
            _note(notes, "fwd and bwd split from the measured fwd+bwd with the bwd/fwd ratio measured on Hopper")
            continue
        bwd = m.get(fam, "bwd", key)
        if bwd is not None:
            x = _knots(fwd, bwd)
            out[key] = Curve(x, _on(x, fwd), _on(x, bwd))
            continue
        comb = m.get(fam, "fwdbwd", key)
        if comb is not None:  # fwd and fwd+bwd measured: bwd = 2.5 / (3.5/E - 1/f)
            x = _knots(fwd, comb)
            f, e = _on(x, fwd), _on(x, comb)
            out[key] = Curve(x, f, BWD_FLOPS / ((1.0 + BWD_FLOPS) / e - 1.0 / f))
            _note(notes, f"bwd for hd{key[0]} {'causal' if key[1] else 'full'} from the measured fwd+bwd and fwd")
        elif both:
            k2 = min(both, key=lambda k: (k[0] != key[0], abs(math.log2(k[0] / key[0])), k[1] != key[1]))
            b2, f2 = m.get(fam, "bwd", k2), m.get(fam, "fwd", k2)
            assert b2 is not None and f2 is not None  # k2 is one of ``both``
            x = _knots(fwd, b2, f2)
            out[key] = Curve(x, _on(x, fwd), _on(x, fwd) * _on(x, b2) / _on(x, f2))
            _note(notes, f"bwd for hd{key[0]} {'causal' if key[1] else 'full'} = its fwd x the bwd/fwd ratio of "
                         f"hd{k2[0]} {'causal' if k2[1] else 'full'}")
        else:
            ref = _ref(ratio_ref, fam, key)
            x = _knots(fwd, ref)
            rf, rb = ref.at(x)
            out[key] = Curve(x, _on(x, fwd), _on(x, fwd) * rb / rf)
            _note(notes, "bwd = fwd x the FlashAttention-2 bwd/fwd ratio on the same silicon")
    return out, notes


def extended(curves: Curves, rows: list[Row], fam: str) -> tuple[Curves, str]:
    """The curves with a knot at the longest ``extend`` length (32k): each curve's last value
    times the ratio of that length to the previous one measured in one benchmark, per direction
    and mask (same kernel, version and shape at both lengths, so they cancel in the ratio),
    applied to every head dim. Beyond it the curves stay flat (``_at``)."""
    pts: dict[tuple[str, bool], dict[int, float]] = defaultdict(dict)
    cited: list[Row] = []
    for r in rows:
        if r["use"] == "extend" and r["family"] == fam:
            pts[(r["direction"], r["causal"] == "true")][int(r["seq_len"])] = float(r["tflops"])
            cited.append(r)
    ratio: dict[tuple[str, bool], float] = {}
    for key, by_len in pts.items():
        lo, hi = sorted(by_len)[-2:]
        ratio[key] = by_len[hi] / by_len[lo]
    top = math.log2(max(int(r["seq_len"]) for r in cited))
    out: Curves = {}
    for (hd, causal), c in curves.items():
        if c.x[-1] >= top:
            out[(hd, causal)] = c
            continue
        out[(hd, causal)] = Curve(np.append(c.x, top), np.append(c.fwd, c.fwd[-1] * ratio[("fwd", causal)]),
                                  np.append(c.bwd, c.bwd[-1] * ratio[("bwd", causal)]))
    parts = ", ".join(f"{d} {'causal' if m else 'full'} x{ratio[(d, m)]:.3f}" for d, m in sorted(ratio))
    return out, (f"extended from 16k to {2 ** top / 1024:g}k by the 32k/16k ratio measured in one benchmark ({parts}: "
                 f"{cite(cited[0])}, read from its figures, +/-3 TFLOP/s)")


def leveled(curves: Curves, rows: list[Row], fam: str) -> tuple[Curves, str]:
    """The curves scaled, per direction and mask, to the level one later benchmark measured at a
    training shape (MagiAttention's H100 figures: GQA 64:8:8, head dim 128, b = 1), at the
    shortest length it measured (16k): factor = its figure / the curve's value there, applied to
    every head dim and length, so the older figures keep the shape (length, head dim, mask) and
    the later benchmark sets the level. Why: the FA3 paper's figures (2024) are a beta release with
    MHA; that benchmark's FA3 is 5-9% faster at the same length, its FA2 and cuDNN within 1-8%
    (forward faster, backward equal), and the whole-step rows at 32k-256k tokens
    (benchmarks/long_context.py) ran the later kernels."""
    pts: dict[tuple[str, bool], tuple[int, float, float]] = {}
    for r in rows:
        if r["use"] == "extend" and r["family"] == fam and int(r["head_dim"]) == 128:
            key, n = (r["direction"], r["causal"] == "true"), int(r["seq_len"])
            if key not in pts or n < pts[key][0]:
                pts[key] = (n, float(r["tflops"]) / peak(r["sku"], "bf16"), 0.0)
    factor: dict[tuple[str, bool], float] = {}
    for (direction, causal), (n, frac, _) in pts.items():
        c = curves[(128, causal)]
        f, b = Curve(c.x, pav(c.fwd), pav(c.bwd)).at(np.array([math.log2(n)]))  # as params.json keeps it
        factor[(direction, causal)] = frac / float((f if direction == "fwd" else b)[0])
    out = {(hd, causal): Curve(c.x, c.fwd * factor[("fwd", causal)], c.bwd * factor[("bwd", causal)])
           for (hd, causal), c in curves.items()}
    parts = ", ".join(f"{d} {'causal' if m else 'full'} x{factor[(d, m)]:.3f}" for d, m in sorted(factor))
    return out, f"level set by the same benchmark's hd128 GQA figures at 16k ({parts})"


def _ref(ratio_ref: Curves | None, fam: str, key: Key) -> Curve:
    if ratio_ref is None:
        raise ValueError(f"attention {fam} hd{key[0]}: no bwd measured and no reference bwd/fwd ratio given")
    return ratio_ref[key]


def _note(notes: list[str], text: str) -> None:
    if text not in notes:
        notes.append(text)


def _scale(curves: Curves, factor: float | Callable[[np.ndarray], np.ndarray],
           knots: np.ndarray | None = None) -> Curves:
    return {k: c.scaled(factor, knots) for k, c in curves.items()}


def fwdbwd_at(curves: Curves, key: Key, seq: float) -> float:
    f, b = curves[key].at(np.array([math.log2(seq)]))
    return float(combine(f, b)[0])


def _anchor(rows: list[Row], sku: str, family: str) -> tuple[float, Row]:
    for r in rows:
        if r["use"] == "anchor" and r["sku"] == sku and r["family"] == family:
            return float(r["tflops"]), r
    raise KeyError((sku, family))


Entry = tuple[Curves, bool, str, list[str]]
"""(curves, measured, source, the sources it was derived from)."""


Fams = dict[str, dict[str, Entry]]
"""silicon -> attention family -> its entry."""


def params(rows: list[Row]) -> dict[str, dict[str, dict]]:
    """Per silicon and family: {"measured", "source", "curves"} (see the module docstring)."""
    fams: Fams = defaultdict(dict)
    _hopper(rows, fams)
    _ampere(rows, fams)
    _blackwell_fa4(rows, fams)
    _blackwell_sm80(rows, fams)
    _amd(rows, fams)
    _fallbacks(fams)
    return _output(fams)


def _hopper(rows: list[Row], fams: Fams) -> None:
    """Adds the measured Hopper families (FA2, FA3, cuDNN, eager, Triton) to ``fams``."""
    hop = Measured(rows, "hopper")
    # hopper: FA2, FA3, cuDNN, eager measured forward and backward (bwd: third-party transcription
    # of the FA3 paper figure, non-causal); Triton forward only. FA2, FA3 and cuDNN go on to 32k by
    # the 32k/16k ratio of one benchmark that measured both lengths (MagiAttention's H100 figures)
    for fam in ("fa2", "fa3", "cudnn", "eager"):
        c, notes = measured_curves(hop, fam, None)
        if fam != "eager":
            c, note = extended(c, rows, fam)
            notes.append(note)
            c, note = leveled(c, rows, fam)
            notes.append(note)
        fams["hopper"][fam] = (c, True, hop.source(fam, notes), [])
    c, notes = measured_curves(hop, "triton", fams["hopper"]["fa2"][0])
    fams["hopper"]["triton"] = (c, True, hop.source("triton", notes), [])


def _ampere(rows: list[Row], fams: Fams) -> None:
    """Adds the measured Ampere families, and Hopper xformers scaled from Ampere's, to ``fams``."""
    amp = Measured(rows, "ampere")
    h_fa2, h_eager = fams["hopper"]["fa2"][0], fams["hopper"]["eager"][0]
    # ampere: fwd+bwd figures split with Hopper's bwd/fwd ratios (FA2's for xformers and Triton)
    for fam, ref in (("fa2", h_fa2), ("xformers", h_fa2), ("triton", h_fa2), ("eager", h_eager)):
        c, notes = measured_curves(amp, fam, ref)
        fams["ampere"][fam] = (c, True, amp.source(fam, notes), [])
    a_fa2 = fams["ampere"]["fa2"][0]
    r_x = fwdbwd_at(h_fa2, (128, False), 8192) / fwdbwd_at(a_fa2, (128, False), 8192)
    fams["hopper"]["xformers"] = (
        _scale(fams["ampere"]["xformers"][0], r_x), False,
        f"no Hopper xformers measurement: the ampere xformers curves x {r_x:.3f}, the Hopper/Ampere ratio of "
        "FA2 fwd+bwd fractions at 8k hd128 (both kernels run sm80 code)",
        [fams["ampere"]["xformers"][2], fams["hopper"]["fa2"][2], fams["ampere"]["fa2"][2]])


def _blackwell_fa4(rows: list[Row], fams: Fams) -> None:
    """Adds Blackwell FA4 and cuDNN (the Hopper curves x the measured FA4 speedup) to ``fams``."""
    # blackwell
    sp = sorted((int(r["seq_len"]), float(r["value"]), r) for r in rows if r["use"] == "speedup")
    sx, sv = np.log2([s for s, _, _ in sp]), np.array([v for _, v, _ in sp])
    conv = peak("h100-sxm", "bf16") / peak("b200", "bf16")
    speed = " and ".join(f"{v}x at {s // 1024}k ({cite(r)})" for s, v, r in sp)

    def fa4_speedup(x: np.ndarray) -> np.ndarray:
        return np.interp(x, sx, sv) * conv

    fams["blackwell"]["fa4"] = (
        _scale(fams["hopper"]["fa3"][0], fa4_speedup, sx), True,
        f"the Hopper FA3 curves x the measured B200 FA4 / H200 FA3 fwd+bwd speedup, {speed}, held flat outside, "
        f"x {conv:.4f} (H100 / B200 bf16 peaks)", [fams["hopper"]["fa3"][2]])
    fams["blackwell"]["cudnn"] = (
        _scale(fams["hopper"]["cudnn"][0], fa4_speedup, sx), False,
        "no Blackwell cuDNN measurement: the Hopper cuDNN curves x the B200 FA4 / H200 FA3 speedup (Blackwell-"
        f"native kernels assumed to gain as FA4 did) x {conv:.4f} (peaks)", [fams["hopper"]["cudnn"][2]])


def _blackwell_sm80(rows: list[Row], fams: Fams) -> None:
    """Adds Blackwell FA2, Triton, xformers (the GB200/H100 FA2 ratio) and eager to ``fams``."""
    gb, gb_row = _anchor(rows, "gb200", "fa2")
    h1, h1_row = _anchor(rows, "h100-sxm", "fa2")
    r_gb = gb / h1 * peak("h100-sxm", "bf16") / peak("gb200", "bf16")
    for fam in ("fa2", "triton", "xformers"):
        fams["blackwell"][fam] = (
            _scale(fams["hopper"][fam][0], r_gb), fam == "fa2",
            ("" if fam == "fa2" else f"no Blackwell {fam} measurement: FA2's ratio (sm80 code like FA2); ")
            + (f"the Hopper {fam} curves x {gb}/{h1} (Azure 'Flash Attention 2.0' on GB200 over H100, one benchmark: "
               f"{cite(gb_row)}; {cite(h1_row)}) x H100/GB200 peaks = x {r_gb:.4f}"),
            [fams["hopper"][fam][2]])
    fams["blackwell"]["eager"] = _eager_from_hopper(rows, fams["hopper"]["eager"], "gb200")


def _amd(rows: list[Row], fams: Fams) -> None:
    """Adds cdna3 CK and eager (anchored Hopper shapes) and the measured cdna4 AITER to ``fams``."""
    # cdna3: CK FA2 anchored on the one MI300X point, Hopper FA2 shape
    mi, mi_row = _anchor(rows, "mi300x", "ck")
    anchor = mi / peak("mi300x", "bf16")
    h_fa2 = fams["hopper"]["fa2"][0]
    ref_fb = fwdbwd_at(h_fa2, (64, False), 8192)
    fams["cdna3"]["ck"] = (
        _scale(h_fa2, anchor / ref_fb), True,
        f"anchored on {mi} TFLOP/s / {peak('mi300x', 'bf16'):g} = {anchor:.4f} (Azure 'Flash Attention 2.0' on "
        f"MI300X, read as fwd+bwd, non-causal, 8k, hd64 like the same benchmark's H100 and A100 rows: "
        f"{cite(mi_row)}), with the sequence-length, head-dim and mask shape of Hopper FA2 (x {anchor / ref_fb:.4f})",
        [fams["hopper"]["fa2"][2]])
    fams["cdna3"]["eager"] = _eager_from_hopper(rows, fams["hopper"]["eager"], "mi300x")

    # cdna4: AITER measured (MI355X)
    c4 = Measured(rows, "cdna4")
    c, notes = measured_curves(c4, "aiter", None)
    fams["cdna4"]["aiter"] = (c, True, c4.source("aiter", notes), [])


def _fallbacks(fams: Fams) -> None:
    """Adds the unmeasured (silicon, family) pairs that borrow measured curves to ``fams``."""
    # fallbacks: same family on the nearest measured silicon of the vendor (ratio 1), or another
    # family measured on the same silicon
    _borrow(fams, "cdna3", "aiter", "cdna4", "aiter", "same library, nearest measured silicon of the vendor")
    for fam in ("ck", "eager"):
        _borrow(fams, "cdna4", fam, "cdna3", fam, "nearest measured silicon of the vendor")
    for sil in ("cdna3", "cdna4"):
        _borrow(fams, sil, "triton", sil, "ck", "no Triton/AOTriton measurement on AMD: CK's")
    for fam in ("ck", "triton", "eager"):
        _borrow(fams, "cdna2", fam, "cdna3", fam, "nearest measured silicon of the vendor")
    _borrow(fams, "ampere", "cudnn", "ampere", "fa2", "no cuDNN attention measurement on ampere: FA2's")
    for fam in ("fa2", "xformers", "triton", "eager", "cudnn"):
        _borrow(fams, "ada", fam, "ampere", fam, "nearest measured silicon of the vendor")
    for fam in ("xformers", "eager"):
        _borrow(fams, "volta", fam, "ampere", fam, "nearest measured silicon of the vendor")


def _output(fams: Fams) -> dict[str, dict[str, dict]]:
    """The params.json entries of every catalog silicon: its families, else the vendor's flat default."""
    out: dict[str, dict[str, dict]] = {}
    for sil, vendor in silicons().items():
        out[sil] = {}
        for fam, (curves, meas, src, chain) in sorted(fams.get(sil, {}).items()):
            same = next((f"{s2}/{f2}" for s2, d in fams.items() for f2, e in d.items()
                         if e[0] is curves and e[1] and (s2, f2) != (sil, fam)), None)
            out[sil][fam] = {"measured": meas, "source": src, "from": chain,
                             **({"curves_of": same} if same and not meas else {"curves": _json(curves)})}
        if not out[sil]:
            out[sil] = _vendor_default(sil, vendor)
    return out


def _vendor_default(sil: str, vendor: str) -> dict[str, dict]:
    """Flat curves at the vendor's attention_efficiency for a silicon without any attention measurement."""
    v, src = vendor_knob(vendor, "attention_efficiency")
    flat = {"128": {mask: [[9.0], [sig(v)], [sig(v)]] for mask in ("full", "causal")}}
    fam_list = ("xla", "eager") if sil.startswith("tpu") else ("eager",) if sil == "cpu" else ("fa2", "eager")
    return {fam: {"measured": False, "curves": flat,
                  "source": f"no {sil} attention measurement: {src}, flat in sequence length, "
                            "head dim and mask"} for fam in fam_list}


def _eager_from_hopper(rows: list[Row], hopper: Entry, sku: str) -> Entry:
    """Eager (standard) attention on ``sku``: the Hopper curves x the ratio of Azure's standard-attention
    points on ``sku`` and on H100 (one benchmark), converted between the two peaks."""
    v, row = _anchor(rows, sku, "eager")
    h1, _ = _anchor(rows, "h100-sxm", "eager")
    r = v / h1 * peak("h100-sxm", "bf16") / peak(sku, "bf16")
    return (_scale(hopper[0], r), True, f"the Hopper eager curves x {v}/{h1} (Azure standard attention on {sku} over "
            f"H100: {cite(row)}) x H100/{sku} peaks = x {r:.4f}", [hopper[2]])


def _borrow(fams: dict[str, dict[str, Entry]], sil: str, fam: str, from_sil: str, from_fam: str, why: str) -> None:
    curves, _, src, chain = fams[from_sil][from_fam]
    label = f"{from_sil} {from_fam}" if from_sil != sil else from_fam
    fams[sil][fam] = (curves, False, f"no {sil} {fam} measurement: the {label} curves ({why}; ratio 1)", [src, *chain])


def _json(curves: Curves) -> dict[str, dict[str, list[list[float]]]]:
    out: dict[str, dict[str, list[list[float]]]] = {}
    for (hd, causal), c in sorted(curves.items()):
        out.setdefault(str(hd), {})["causal" if causal else "full"] = [
            [sig(v) for v in c.x], [sig(v) for v in pav(c.fwd)], [sig(v) for v in pav(c.bwd)]]
    return out
