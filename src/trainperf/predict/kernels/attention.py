"""Fused-attention efficiency per silicon and kernel family against sequence length.

``efficiency`` returns the forward and backward fractions of the 16-bit dense peak that one
attention kernel sustains with queries = keys = ``seq_len``, in the FLOP convention of the
FlashAttention benchmarks: forward ``4 * seq^2 * head_dim * heads`` per sequence, half of it with
a causal mask (only the unmasked pairs count), backward 2.5 times the forward. Measured curves
(FlashAttention-2/3 and cuDNN on H100, the FA2 paper's A100 figure, AITER on MI355X, ...) are
interpolated linearly in log2(seq_len), made non-decreasing (isotonic), interpolated in
log2(head_dim) between the measured head dims, and held flat beyond the measured range: below
512 and above 32k tokens (Hopper FA2/FA3/cuDNN reach 32k by a measured 32k/16k ratio; the
families derived from them and FA4 with them; the others end at 16k) the nearest measured value
is used, so long context up to 1M tokens and beyond is accepted, at the last measured
efficiency (docs/KERNELS.md, "Long context", says why flat). Hopper FA2, FA3 and cuDNN stand at
the level of MagiAttention's later H100 figures (GQA, hd128, 16k), the older figures giving their
shape. Families a silicon cannot run are first mapped by :func:`resolve_family`. Not modelled:
the GQA group size (the shapes are MHA measurements, the Hopper level a GQA one), sliding
windows, variable-length packing, dropout, fp8 attention. Data and fallbacks: docs/KERNELS.md.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from trainperf.errors import SpecError, UnknownNameError
from trainperf.predict.kernels._params import check_silicon, params
from trainperf.vec import is_nonbool_number

if TYPE_CHECKING:
    import numpy as np

FAMILIES = ("fa2", "fa3", "fa4", "cudnn", "aiter", "ck", "triton", "xformers", "eager", "xla")
"""Kernel families: FlashAttention-2/3/4, cuDNN fused attention, AMD AITER and Composable Kernel,
Triton (FA tutorial / AOTriton), xformers' cutlass memory-efficient kernel (PyTorch SDPA's
'efficient' backend), eager (unfused PyTorch: matmul, softmax, matmul) and XLA (TPU)."""
REQUESTS = (*FAMILIES, "sdpa")
"""What a stack profile may name: a family, or ``sdpa`` (PyTorch scaled_dot_product_attention)."""

_NVIDIA = ("ampere", "ada", "hopper", "blackwell")
_AMD = ("cdna2", "cdna3", "cdna4")
_NEEDS_SM80 = "FlashAttention, cuDNN fused attention and Triton's flash kernels need sm80 (Ampere) or newer"


def resolve_family(silicon: str, family: str) -> tuple[str, str]:
    """The family actually used on ``silicon`` when a stack asks for ``family``, and why.

    ``sdpa`` resolves to the backend PyTorch's scaled_dot_product_attention picks for 16-bit
    inputs on that vendor; a kernel the silicon cannot run resolves to what runs instead.
    """
    check_silicon(silicon)
    fam = str(family).strip().lower()
    if fam not in REQUESTS:
        raise UnknownNameError("attention family", family, REQUESTS)
    if silicon in _NVIDIA:
        return _nvidia(silicon, fam)
    if silicon == "volta":
        if fam in ("eager", "xformers"):
            return fam, "runs on Volta"
        return "xformers", (f"{_NEEDS_SM80}; on Volta PyTorch SDPA and xformers run the cutlass memory-efficient "
                            "kernel")
    if silicon in _AMD:
        return _amd(silicon, fam)
    if silicon.startswith("tpu"):
        if fam == "eager":
            return fam, "unfused attention, compiled by XLA"
        return "xla", "attention on TPU is XLA-fused (or Pallas splash) attention; CUDA/ROCm kernels do not run"
    if silicon == "cpu":
        return "eager", "no fused GPU attention kernels run on a CPU"
    if fam == "eager":
        return fam, "unfused attention"
    return "fa2", ("Intel Gaudi runs attention through Habana's FusedSDPA, a flash-style kernel; filed under fa2, "
                   "which on Gaudi is the vendor default (no measurement)")


def _nvidia(silicon: str, fam: str) -> tuple[str, str]:
    if fam == "sdpa":
        return "fa2", ("PyTorch SDPA on CUDA picks its flash backend (FlashAttention-2 kernels) for 16-bit inputs "
                       "(priority flash > efficient > math); a stack that selects cuDNN should name 'cudnn'")
    if fam == "fa3" and silicon != "hopper":
        return "fa2", "FlashAttention-3 needs Hopper (sm90 TMA and WGMMA); the FA2 kernels run instead"
    if fam == "fa4":
        if silicon == "blackwell":
            return "fa4", "runs on Blackwell"
        if silicon == "hopper":
            return "fa3", "FlashAttention-4 has no Hopper measurement; taken as FlashAttention-3"
        return "fa2", "FlashAttention-4 needs sm90 or newer; the FA2 kernels run instead"
    if fam in ("aiter", "ck"):
        return "fa2", f"{fam} is AMD-only; a CUDA build of the stack runs FlashAttention-2"
    if fam == "xla":
        return "cudnn", "XLA:GPU lowers fused attention to cuDNN's flash attention"
    return fam, f"runs on {silicon}"


def _amd(silicon: str, fam: str) -> tuple[str, str]:
    if fam == "sdpa":
        return "triton", "PyTorch SDPA on ROCm runs AOTriton's flash-attention kernel"
    if fam in ("fa2", "xformers"):
        return "ck", f"{fam} on ROCm is the Composable Kernel (CK) flash-attention backend"
    if fam in ("fa3", "fa4", "cudnn"):
        return "ck", f"{fam} is CUDA-only; the ROCm FlashAttention build (CK backend) runs instead"
    if fam == "xla":
        return "ck", "XLA on ROCm lowers fused attention to CK-based flash attention"
    if fam == "aiter" and silicon == "cdna2":
        return "ck", "AITER supports gfx942/gfx950 (CDNA3/4) only; CK runs on CDNA2"
    return fam, f"runs on {silicon}"


Curve = tuple[list[float], list[float], list[float]]  # log2 seq knots, fwd, bwd


@cache
def _curves(silicon: str, family: str) -> tuple[tuple[int, ...], tuple[dict[bool, Curve], ...]]:
    """(head dims, per head dim {causal: curve}) of an entry, following ``curves_of`` references."""
    entry = params()["attention"][silicon][family]
    while "curves_of" in entry:
        s2, f2 = entry["curves_of"].split("/")
        entry = params()["attention"][s2][f2]
    hds = sorted(entry["curves"], key=int)
    out = []
    for hd in hds:
        d = entry["curves"][hd]
        out.append({c: _curve(d["causal" if c else "full"]) for c in (False, True)})
    return tuple(int(h) for h in hds), tuple(out)


def _curve(knots_fwd_bwd: Sequence[Sequence[float]]) -> Curve:
    xs, fw, bw = knots_fwd_bwd
    return list(xs), list(fw), list(bw)


@cache
def _table(silicon: str, family: str) -> tuple[tuple[int, ...], tuple[dict[bool, Curve], ...]]:
    """Curves of the family ``family`` resolves to on ``silicon`` (errors are raised, not cached)."""
    return _curves(silicon, resolve_family(silicon, family)[0])


def _at(curve: Curve, x: float) -> tuple[float, float]:
    xs, fw, bw = curve
    if x <= xs[0]:
        return fw[0], bw[0]
    if x >= xs[-1]:
        return fw[-1], bw[-1]
    i = bisect_right(xs, x)
    t = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return fw[i - 1] + t * (fw[i] - fw[i - 1]), bw[i - 1] + t * (bw[i] - bw[i - 1])


def _at_array(curve: Curve, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    xs, fw, bw = curve
    return np.interp(x, xs, fw), np.interp(x, xs, bw)


def efficiency(silicon: str, family: str, seq_len: Any, head_dim: int, causal: bool) -> tuple[Any, Any]:
    """Fraction of the 16-bit dense peak a fused attention kernel sustains (forward, backward) at this
    sequence length (queries = keys = ``seq_len``; may be a numpy array), head dim and mask.

    FLOP convention of the FlashAttention benchmarks (causal counts half the pairs; backward = 2.5x
    forward FLOPs). Interpolated in log(seq_len), held flat beyond the measured range (long context
    up to 262k tokens and more gets the longest measured length's efficiency). ``family`` may be
    any of :data:`REQUESTS`; it is first resolved by :func:`resolve_family`.
    """
    return efficiency_from(_table(silicon, family), seq_len, head_dim, causal)


def efficiency_from(table: tuple[tuple[int, ...], tuple[dict[bool, Curve], ...]], seq_len: Any, head_dim: int,
                    causal: bool) -> tuple[Any, Any]:
    """:func:`efficiency` on given curves: (head dims, per head dim {causal: (log2 lengths,
    forward, backward)}), e.g. this CPU's measured ones (:mod:`trainperf.predict.kernels.cpu`)."""
    hds, curves = table
    if not is_nonbool_number(head_dim) or head_dim <= 0:
        raise SpecError("head_dim", head_dim, "a positive number such as 128")
    causal = bool(causal)
    # head dims: the measured one, else the nearest two, linear in log2(head_dim), flat outside
    if head_dim in hds:
        pairs = [(curves[hds.index(head_dim)][causal], 1.0)]
    elif head_dim <= hds[0]:
        pairs = [(curves[0][causal], 1.0)]
    elif head_dim >= hds[-1]:
        pairs = [(curves[-1][causal], 1.0)]
    else:
        j = bisect_right(hds, head_dim)
        t = math.log2(head_dim / hds[j - 1]) / math.log2(hds[j] / hds[j - 1])
        pairs = [(curves[j - 1][causal], 1.0 - t), (curves[j][causal], t)]
    if is_nonbool_number(seq_len):
        if seq_len <= 0:
            raise SpecError("seq_len", seq_len, "a positive number of tokens")
        x = math.log2(seq_len)
        f = b = 0.0
        for curve, w in pairs:
            cf, cb = _at(curve, x)
            f += w * cf
            b += w * cb
        return f, b
    import numpy as np

    s = np.asarray(seq_len, float)
    if (s <= 0).any():
        raise SpecError("seq_len", "array", "positive numbers of tokens")
    x = np.log2(s)
    fa: float | np.ndarray = 0.0
    ba: float | np.ndarray = 0.0
    for curve, w in pairs:
        cfa, cba = _at_array(curve, x)
        fa = fa + w * cfa
        ba = ba + w * cba
    return fa, ba
