"""Context-parallel exchange: the ring of K/V blocks around the cp group (Liu et al. 2023, ring
attention; Megatron-Core and torchtitan context parallelism).

Each layer runs ``cp - 1`` ring steps, each passing a K/V block to the next rank (forward; K, V
and their gradients backward: twice the bytes) while the current block's attention runs. A
step's transfer hides behind that step's share of the attention (up to the ``overlap`` knob);
what is longer is exposed. Recomputation that re-runs the attention core re-runs the forward
ring. The cp group's members are ``tp`` ranks apart.
"""

from __future__ import annotations

from trainperf import vec
from trainperf.predict.efficiency import KnobValues
from trainperf.predict.step_model.collectives import CommCost, Fabric
from trainperf.predict.step_model.compute import Compute
from trainperf.predict.step_model.layout import Layout
from trainperf.predict.step_model.stage import Stage


def context_parallel(lay: Layout, st: Stage, kn: KnobValues, fab: Fabric, c: Compute) -> CommCost:
    """The step's ring exchanges on the slowest rank (0 with cp = 1)."""
    m = lay.mesh
    cp = fab.group(m.cp, m.tp)
    block = m.micro_batch * lay.model.seq_len / m.cp * 2.0 * st.kv_local * lay.run.act_bytes  # one K and V block
    step_s = fab.time_s("send-recv", block, cp)
    steps = vec.maximum(m.cp - 1.0, 0.0)
    per_block = vec.maximum(m.cp, 1.0)
    fwd_exp = steps * vec.maximum(0.0, step_s - kn.overlap * c.layer.attn_fwd / per_block)
    bwd_exp = steps * vec.maximum(0.0, 2.0 * step_s - kn.overlap * c.layer.attn_bwd / per_block)
    fwd_passes = 1.0 + st.rec_frac * st.rc.attention_core
    on, M = m.cp > 1, m.grad_accum
    time_s = vec.where(on, M * (c.layers * steps * step_s * (fwd_passes + 2.0)), 0.0)
    exposed = vec.where(on, M * (c.layers * (fwd_passes * fwd_exp + bwd_exp)), 0.0)
    return CommCost(time_s, exposed, M * st.layers * 4.0 * (m.cp - 1.0) * block, cp)
