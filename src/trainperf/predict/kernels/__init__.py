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
``measured=False``; the developer tool ``tools/kernels_table.py`` lists every number with its
source (``describe``). docs/KERNELS.md says which data were used, which were rejected and why.
:func:`silicons`: every silicon with kernel parameters (the catalog's ``Hardware.silicon`` values
and ``cpu``).
"""

from trainperf.predict.kernels._params import silicons

__all__ = ["silicons"]
