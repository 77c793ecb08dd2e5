"""Memory-bound kernels: achievable HBM bandwidth, and elementwise kernels by implementation.

``hbm_fraction`` is what a STREAM-like copy/triad sustains over the catalog HBM bandwidth.
``elementwise_fraction`` is what norms, activations, RoPE and the like sustain, counting only
the IDEAL bytes of each op (every input read once, every output written once, from the shapes
the benchmark states), so an eager RMSNorm that makes several passes shows up as a low fraction:

* ``eager``: unfused PyTorch ops (Hugging Face RMSNorm / RoPE, torch SwiGLU, PyTorch eager
  LayerNorm+dropout+residual);
* ``fused``: hand-written fused kernels (Liger-Kernel, Megatron fused ops, AITER, torchao Triton/CUDA);
* ``compiled``: torch.compile (or XLA) generated kernels.

Each is the median over the measured kernels of (forward + backward ideal bytes) / (their time)
at the largest benchmarked size. Not modelled: cache reuse between ops, overlap with GEMMs.
Data and fallbacks: docs/KERNELS.md.
"""

from __future__ import annotations

from functools import cache

from trainperf.errors import UnknownNameError
from trainperf.predict.kernels._params import check_silicon, params

IMPLEMENTATIONS = ("eager", "fused", "compiled")


@cache
def hbm_fraction(silicon: str) -> float:
    """STREAM-like copy/triad bandwidth over the catalog HBM bandwidth."""
    check_silicon(silicon)
    return params()["memory"]["hbm"][silicon]["value"]


@cache
def elementwise_fraction(silicon: str, implementation: str) -> float:
    """Achieved bandwidth over catalog bandwidth of memory-bound ops, counting only their ideal bytes.

    implementation: 'eager' (unfused PyTorch ops), 'fused' (Liger/TE/Megatron fused kernels) or
    'compiled' (torch.compile/XLA).
    """
    check_silicon(silicon)
    if implementation not in IMPLEMENTATIONS:
        raise UnknownNameError("implementation", implementation, IMPLEMENTATIONS)
    return params()["memory"]["elementwise"][silicon][implementation]["value"]


EAGER_OPS = ("rmsnorm", "rope", "swiglu", "layernorm", "gelu", "add")


def eager_penalty(op: str) -> float:
    """How many times its ideal bytes an op moves when unfused PyTorch code runs it (fused time /
    eager time of the same kernel, measured): ``rmsnorm`` (Python RMSNorm), ``rope`` (rotate-half),
    ``swiglu`` (silu then multiply); 1 for ops PyTorch runs as one native kernel (``layernorm``,
    ``gelu``, ``add``)."""
    if op not in EAGER_OPS:
        raise UnknownNameError("op", op, EAGER_OPS)
    return params()["memory"]["eager_penalty"][op]["value"]
