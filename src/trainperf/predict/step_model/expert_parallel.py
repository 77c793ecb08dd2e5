"""Expert-parallel communication: the MoE token dispatch and combine, on the critical path.

Each MoE block sends its routed tokens to the experts' ranks (dispatch) and brings the expert
outputs back (combine), forward, again backward (the gradient of the combine travels as a dispatch
and the reverse), and once more each way when recomputation re-runs the block. Each device
dispatches the tokens it alone holds: with sequence parallelism its s/tp share (Megatron-Core's
dispatchers route the SP-split hidden states, then all-gather the received tokens over the
expert-TP group); without it, tp ranks hold the same tokens and etp/tp of them are dispatched per
rank. The ep group's members are ``etp`` ranks apart, so it spans ``nodes`` scale-up domains with
``k`` members in each.

One call (:func:`call_s`) is priced by the dispatcher's kernel family on the silicon
(:mod:`trainperf.predict.kernels.expert_dispatch`): the bytes a rank sends to the other ranks of
its domain over NVLink/xGMI and to other domains over its NIC, each at the family's measured
efficiency of that level for the op (dispatch or combine) and the group size, under the size law
``S/(S + half_bytes)`` of the level's buffer; the slower level sets the time, no call is faster
than the family's floor.
NCCL's all-to-all carries ``topk`` copies of a token; DeepEP, Hybrid-EP and MORI one per
destination rank and, across domains, one per destination domain
(:func:`~trainperf.predict.kernels.expert_dispatch.copies_per_token`). The busiest rank receives
``moe_imbalance`` times the mean and so sets the pace. Nothing hides the calls, the layer waits for
its tokens, except under DualPipe (DeepSeek-V3 report, section 3.2.1), which runs a forward chunk
beside a backward chunk so that the all-to-alls of each hide behind the other's compute: there the
calls are exposed only where they are longer than the share ``overlap`` (the knob) of the
micro-batch's compute (:func:`~.context_parallel.behind`), the warm-up and cool-down chunks (which
run unpaired) taken as the rest. Not modelled: the SMs the dispatch
kernels take from the overlapped compute (DeepSeek gives 20 of an H800's 132 to them), and
Megatron-Core's EP all-to-all overlap (``--overlap-moe-expert-parallel-comm``).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainperf import vec
from trainperf.predict.kernels.expert_dispatch import LevelDispatch, copies_per_token
from trainperf.predict.step_model.collectives import CommCost, Fabric, Group, OnCriticalPath
from trainperf.predict.step_model.compute import Compute
from trainperf.predict.step_model.context_parallel import behind
from trainperf.predict.step_model.layout import Layout, Num
from trainperf.predict.step_model.stage import Stage


@dataclass(slots=True, eq=False)
class ExpertParallel:
    """The step's dispatch and combine on the slowest rank."""

    dispatch: OnCriticalPath
    combine: OnCriticalPath

    @property
    def exposed_mb_s(self) -> Num:
        """Exposed seconds per micro-batch, both."""
        return self.dispatch.exposed_mb_s + self.combine.exposed_mb_s

    @property
    def exposed_s(self) -> Num:
        return self.dispatch.comm.exposed_s + self.combine.comm.exposed_s


def _level_s(lvl: LevelDispatch, op: str, ranks: Num, level_bytes: Num, size_bytes: Num, link: Num,
             mesh_scale: Num) -> Num:
    """Seconds of one level of a call: ``level_bytes`` at the op's efficiency x ``link`` under the
    size law of the level's buffer, ``size_bytes``, no faster than the level's floor."""
    eff = lvl.efficiency(op, ranks) * vec.maximum(mesh_scale, 1e-9)  # a group of one is zeroed by the caller
    size = vec.maximum(size_bytes, 1.0)
    return vec.maximum(level_bytes * (size + lvl.half_bytes) / (size * eff * link), lvl.latency_us * 1e-6)


def call_s(lay: Layout, fab: Fabric, g: Group, op: str, tokens: Num) -> tuple[Num, Num]:
    """(seconds, bytes the busiest rank sends to other ranks) of one dispatch or combine of
    ``tokens`` tokens per rank over the expert-parallel group ``g`` (0 for a group of one).

    The size law reads each level's own buffer, as the collectives' do: within the domain the
    ``k`` members' all-to-all of ``S k / n`` each (``S`` the rank's call), across domains the bytes
    that leave through the rank's NIC."""
    ms, d = lay.model, lay.kernels.dispatch
    k, n, nodes = vec.maximum(g.per_node, 1.0), g.size, g.nodes
    if vec.is_number(n) and n <= 1:
        return 0.0, 0.0
    held, local, cross = copies_per_token(d.dedup, n, k, nodes, ms.moe_topk)
    mean_bytes = tokens * ms.hidden * lay.run.act_bytes  # a token's bytes, times the mean's tokens
    tok_bytes = mean_bytes * lay.run.moe_imbalance  # the busiest rank's
    mesh = vec.minimum((k - 1.0) / 7.0, 1.0) if d.mesh else 1.0  # an xGMI group of k uses k-1 of 7 links
    lf = fab.link_fraction
    t_up = vec.where(k > 1, _level_s(d.up, op, k, tok_bytes * local, mean_bytes * held * k / n,
                                     fab.intra_bytes_per_s * lf, mesh), 0.0)
    t_out = vec.where(nodes > 1, _level_s(d.out, op, n, tok_bytes * cross, mean_bytes * cross,
                                          fab.inter_bytes_per_s * lf, 1.0), 0.0)
    on = n > 1
    return vec.where(on, vec.maximum(t_up, t_out), 0.0), vec.where(on, tok_bytes * (local + cross), 0.0)


def expert_parallel(lay: Layout, st: Stage, fab: Fabric, c: Compute, overlap: Num = 0.0) -> ExpertParallel:
    """The step's dispatches and combines on the slowest rank: one of each per MoE block forward,
    backward and recomputation; exposed in full, or under DualPipe what the share ``overlap`` of
    the micro-batch's compute does not hide (split between the two in proportion)."""
    m = lay.mesh
    ep = fab.group(m.ep, m.etp)
    tokens = st.m_tok * vec.where(m.sp, 1.0, m.etp) / m.tp
    calls = c.layers * st.moe_frac * (2.0 + st.rec_frac * st.rc.moe_region) * (m.ep > 1)
    M = m.grad_accum
    timed = [call_s(lay, fab, ep, op, tokens) for op in ("dispatch", "combine")]
    both = calls * (timed[0][0] + timed[1][0])
    shown = vec.where(m.dualpipe, behind(both, c.mb_s, overlap) / vec.maximum(both, 1e-30), 1.0)
    out = []
    for t, b in timed:
        mb_s = calls * t
        out.append(OnCriticalPath(CommCost(M * mb_s, M * mb_s * shown, M * calls * b, ep), mb_s * shown))
    return ExpertParallel(out[0], out[1])
