"""Kernel physics: what each silicon achieves per kernel class, measured by others.

One module per kernel class, each a few pure functions of a silicon (``Hardware.silicon``:
ampere, hopper, blackwell, cdna3, ...) returning efficiencies as fractions of the catalog figure
of the silicon's SKUs (dense peak, HBM bandwidth, link bandwidth), so they apply to every SKU of
the silicon:

* :mod:`.gemm` -- dense GEMM: best fraction of peak per dtype and the shape law;
* :mod:`.attention` -- fused attention forward/backward per kernel family against sequence length;
* :mod:`.collectives` -- bus bandwidth against message size per link level and kind;
* :mod:`.expert_dispatch` -- MoE token dispatch/combine per kernel family (NCCL, DeepEP, Hybrid-EP,
  MORI-EP), link level and expert-parallel group size;
* :mod:`.memory_bound` -- STREAM-like HBM bandwidth and elementwise kernels (eager/fused/compiled);
* :mod:`.fp8` -- what fp8 scaling recipes add to a GEMM.

The numbers come from ``data/params.json``, which the kernel fit (``tools/kernel_fitting/``, a
developer tool) derives from curated measurements, each with its source; they are read once, at
first use. Where a silicon has no measurement of a class the value follows a documented rule
(the nearest measured silicon of the vendor, or a vendor fallback) and is flagged
``measured=False``; :func:`describe` lists every number with its source. docs/KERNELS.md says
which data were used, which were rejected and why.

:class:`KernelFact` and :func:`describe` live in :mod:`.facts` and are loaded on first use (PEP
562): the step model imports the kernel-class modules, never this list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainperf.predict.kernels._params import params

if TYPE_CHECKING:
    from trainperf.predict.kernels.facts import KernelFact, describe

__all__ = ["KernelFact", "describe", "silicons"]


def silicons() -> tuple[str, ...]:
    """Every silicon with kernel parameters (the catalog's ``Hardware.silicon`` values and ``cpu``)."""
    return tuple(params()["silicons"])


def __getattr__(name: str) -> Any:
    if name in ("KernelFact", "describe"):
        from trainperf.predict.kernels import facts

        return getattr(facts, name)
    raise AttributeError(f"module 'trainperf.predict.kernels' has no attribute {name!r}")
