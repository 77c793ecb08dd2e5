"""Expert-parallel communication: the MoE token dispatch and combine, exposed in full.

Each MoE block all-to-alls its routed tokens to the experts' ranks (dispatch) and back
(combine), forward and again backward, and once more each way when recomputation re-runs the
block. Each device dispatches the tokens it alone holds: with sequence parallelism its s/tp
share (Megatron-Core's alltoall dispatcher routes the SP-split hidden states, then all-gathers
the received tokens over the expert-TP group); without it, tp ranks hold the same tokens and
etp/tp of them are dispatched per rank. The ep group's members are ``etp`` ranks apart.
"""

from __future__ import annotations

from trainperf import vec
from trainperf.predict.step_model.collectives import CommCost, Fabric, OnCriticalPath, ring_bytes_per_device
from trainperf.predict.step_model.compute import Compute
from trainperf.predict.step_model.layout import Layout
from trainperf.predict.step_model.stage import Stage


def expert_parallel(lay: Layout, st: Stage, fab: Fabric, c: Compute) -> OnCriticalPath:
    """The step's dispatch and combine all-to-alls on the slowest rank (exposed in full)."""
    m, ms = lay.mesh, lay.model
    ep = fab.group(m.ep, m.etp)
    buf = st.m_tok * vec.where(m.sp, 1.0, m.etp) / m.tp * ms.moe_topk * ms.hidden * lay.run.act_bytes
    passes = c.layers * st.moe_frac * (4.0 + 2.0 * st.rec_frac * st.rc.moe_region) * (m.ep > 1)
    mb_s = passes * fab.time_s("all-to-all", buf, ep)
    M = m.grad_accum
    return OnCriticalPath(CommCost(M * mb_s, M * mb_s, M * passes * ring_bytes_per_device("all-to-all", buf, ep.size),
                                   ep), mb_s)
