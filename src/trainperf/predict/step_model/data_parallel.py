"""Data-parallel communication: FSDP / ZeRO-3 parameter gathers and gradient reduce-scatters,
the replicated group's gradient all-reduce (DDP) or ZeRO-1/2 reduce-scatter and parameter
all-gather; and how much of each hides behind compute.

* FSDP / ZeRO-3 (Rajbhandari et al. 2020; PyTorch FSDP, Zhao et al. 2023) all-gathers every
  layer's parameters forward and again backward (they are resharded after the forward) and
  reduce-scatters its gradients, every micro-batch, one call per layer. They overlap the
  micro-batches' compute; the first layer's gather and the last layer's reduce-scatter of a
  micro-batch cannot hide.
* The replicated group reduces the gradients once per step, in buckets (DDP / Megatron: ~25-40
  MB, a handful per stage), behind the last micro-batch's backward; ZeRO-1/2 reduce-scatter them
  instead and all-gather the updated parameters, behind the first forward.

The cp ranks of a group hold the same parameters but see different tokens, so every gradient
reduction and every sharding spans them too: FSDP shards over ``fsdp x cp`` (torchtitan's
``dp_shard_cp`` mesh), ZeRO over ``dp x cp`` and DDP all-reduces over ``dp x cp`` (Megatron-Core's
data-parallel group "with context parallel"; :attr:`~trainperf.specs.parallel.ParallelPlan.shards_params`
counts the same ranks). Under HSDP the replicas (dp) all-reduce the shards they hold. The
ranks of such a group are ``tp`` apart (the mesh is ``pp x dp x fsdp x cp x tp``, tp innermost).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainperf import vec
from trainperf.predict.efficiency import KnobValues
from trainperf.predict.step_model.collectives import CommCost, Fabric, Group, exposed_s, ring_bytes_per_device
from trainperf.predict.step_model.compute import Compute
from trainperf.predict.step_model.layout import Layout, Num
from trainperf.predict.step_model.stage import Stage

GRAD_REDUCE_BYTES = 4.0
"""Gradients are reduced in fp32 (torchtitan's default reduce dtype, Megatron-Core's fp32 grad
buffer, PyTorch DDP with fp32 master weights) unless the stack reduces an fp16 run's in fp16
(``[kernels] grad_reduce``: :attr:`~.layout.KernelPhysics.grad_reduce_bytes`)."""

PARAM_GATHER_BYTES = 2.0
"""Parameters are gathered in 16-bit (FSDP mixed precision param dtype); fp8 recipes gather fp8."""

DDP_BUCKETS = 8.0
"""Gradient all-reduce calls per stage at most (DDP / Megatron buckets of ~25-40 MB)."""


@dataclass(slots=True, eq=False)
class DataParallel:
    """The step's data-parallel collectives."""

    fsdp_allgather: CommCost
    fsdp_reducescatter: CommCost
    grad_sync: CommCost
    """DDP all-reduce, or the ZeRO-1/2 reduce-scatter, over the replicated group."""
    zero_allgather: CommCost
    """ZeRO-1/2 all-gather of the updated parameters."""


@dataclass(slots=True, eq=False)
class _Sharded:
    """One micro-batch's FSDP / ZeRO-3 traffic (0 without sharded parameters)."""

    group: Group
    allgather_s: Num
    """One pass of all-gathers over the stage's layers."""
    reducescatter_s: Num
    gather_bytes: Num
    """Bytes of the stage's gathered parameters."""
    grad_bytes: Num


def _sharded(lay: Layout, st: Stage, fab: Fabric) -> _Sharded:
    """The sharding group (fsdp x cp, else ZeRO-3 over dp x cp) and one micro-batch's traffic over it."""
    m = lay.mesh
    fs, dp = fab.group(m.fsdp * m.cp, m.tp), fab.group(m.dp * m.cp, m.tp)
    on_fsdp = m.fsdp > 1
    g = Group(vec.where(on_fsdp, m.fsdp, m.dp) * m.cp, vec.where(on_fsdp, fs.per_node, dp.per_node),
              vec.where(on_fsdp, fs.nodes, dp.nodes))
    gather_b = st.p_stage * PARAM_GATHER_BYTES * vec.where(lay.run.fp8, 0.5, 1.0)
    grad_b = st.p_stage * lay.run.trainable_fraction * lay.kernels.grad_reduce_bytes
    return _Sharded(g, fab.time_s("all-gather", gather_b, g, st.layers),
                    fab.time_s("reduce-scatter", grad_b, g, st.layers), gather_b, grad_b)


def _copy_bytes(p_stage: Num, gathered: Num, trained: Num, n: Num) -> tuple[Num, Num]:
    """(all-gather pass, reduce-scatter pass) bytes of FSDP2's copies over ``n`` shards (PyTorch
    FSDP2 ``foreach_all_gather`` / ``foreach_reduce``, read): the gather's copy-in casts the fp32
    shard to the gathered dtype (read 4, write ``gathered`` per local element) and its copy-out
    splits the gathered buffer into the parameters (read and write ``gathered`` per element); the
    reduce-scatter's copy-in casts the gradients up to fp32 (read 2, write 4), the result is
    divided and added into the sharded fp32 gradient (read and write 4, twice, per local
    element)."""
    return p_stage * ((4.0 + gathered) / n + 2.0 * gathered), p_stage * trained * (6.0 + 16.0 / n)


def _copies_s(lay: Layout, kn: KnobValues, st: Stage, ag_b: Num, rs_b: Num, on: Num) -> tuple[Num, Num]:
    """Seconds of the two passes' bytes at the device's elementwise rate, each with a third of
    FSDP2's measured host time per module (its hooks; one module per layer and the root)."""
    bw = lay.device.hbm_bytes_per_s * lay.kernels.elementwise_fraction * kn.memory_bound_fraction
    hooks = (st.layers + 1.0) * lay.kernels.fsdp_module_s / 3.0
    return vec.where(on, ag_b / bw + hooks, 0.0), vec.where(on, rs_b / bw + hooks, 0.0)


def host_copies_s(lay: Layout, st: Stage, kn: KnobValues, s: _Sharded) -> tuple[Num, Num]:
    """(one all-gather pass, one reduce-scatter pass) of FSDP2's copies (:func:`_copy_bytes`), in
    seconds, where the host computes (a CPU): nothing runs them beside compute there. 0 on a GPU:
    there they are kernels on the collectives' streams, inside the overlap."""
    n = vec.maximum(s.group.size, 1.0)
    gathered = s.gather_bytes / vec.maximum(st.p_stage, 1.0)
    ag_b, rs_b = _copy_bytes(st.p_stage, gathered, lay.run.trainable_fraction, n)
    return _copies_s(lay, kn, st, ag_b, rs_b, st.zero3 & lay.kernels.host_bound)


def replica_copies_s(lay: Layout, st: Stage, kn: KnobValues) -> Num:
    """Seconds of FSDP2's copies per micro-batch where replicated data parallelism runs as FSDP2
    over replicas (one shard: :attr:`~.layout.KernelPhysics.dp_fsdp2_replicas`, trainperf's own bench,
    ``measure/parallelize.py``) and the host computes: the parameters cast forward and the
    gradients cast and accumulated backward as a sharded FSDP2 does (:func:`_copy_bytes`,
    ``n = 1``). 0 elsewhere (DDP, or a GPU, where they hide in the overlap)."""
    gathered = PARAM_GATHER_BYTES * vec.where(lay.run.fp8, 0.5, 1.0)
    ag_b, rs_b = _copy_bytes(st.p_stage, gathered, lay.run.trainable_fraction, 1.0)
    on = st.plain_dp & (lay.mesh.fsdp <= 1) & lay.kernels.dp_fsdp2_replicas & lay.kernels.host_bound
    ag, rs = _copies_s(lay, kn, st, ag_b, rs_b, on)
    return ag + rs


def _fsdp(lay: Layout, st: Stage, kn: KnobValues, s: _Sharded, c: Compute) -> tuple[CommCost, CommCost]:
    """(all-gathers, reduce-scatters) of FSDP / ZeRO-3 over the step. The forward gathers hide
    in the forward compute; the backward gathers and the reduce-scatters share the backward
    compute (each exposed in proportion); one gather and one reduce-scatter per micro-batch (of
    one layer each) never hide."""
    M, ovl = lay.mesh.grad_accum, kn.overlap
    copy_ag, copy_rs = host_copies_s(lay, st, kn, s) if lay.kernels.host_bound else (0.0, 0.0)
    s = _Sharded(s.group, s.allgather_s + copy_ag, s.reducescatter_s + copy_rs, s.gather_bytes, s.grad_bytes)
    ag = vec.where(st.zero3, 2.0 * M * s.allgather_s, 0.0)
    rs = vec.where(st.zero3, M * s.reducescatter_s, 0.0)
    both = s.allgather_s + s.reducescatter_s
    edge = vec.where(st.zero3, M * both / vec.maximum(st.layers, 1.0), 0.0)
    edge_ag = edge * s.allgather_s / vec.where(both > 0, both, 1.0)
    bwd_comm = 0.5 * ag + rs
    bwd_exp = exposed_s(bwd_comm, M * (c.bwd_mb + c.rec_mb), ovl)
    bwd_share = vec.where(bwd_comm > 0, bwd_exp / vec.where(bwd_comm > 0, bwd_comm, 1.0), 0.0)
    ag_exp = exposed_s(0.5 * ag, M * c.fwd_mb, ovl) + 0.5 * ag * bwd_share + edge_ag
    ag_bytes = vec.where(st.zero3, 2.0 * M * ring_bytes_per_device("all-gather", s.gather_bytes, s.group.size), 0.0)
    rs_bytes = vec.where(st.zero3, M * ring_bytes_per_device("reduce-scatter", s.grad_bytes, s.group.size), 0.0)
    return (CommCost(ag, vec.minimum(ag_exp, ag), ag_bytes, s.group),
            CommCost(rs, vec.minimum(rs * bwd_share + (edge - edge_ag), rs), rs_bytes, s.group))


def _replicated(lay: Layout, st: Stage, kn: KnobValues, fab: Fabric, c: Compute) -> tuple[CommCost, CommCost]:
    """(gradient sync, ZeRO-1/2 parameter all-gather) over the replicated group (dp x cp; the
    replicas dp under HSDP): a bucketed all-reduce of the gradients (of the fsdp shard under
    HSDP) behind the last backward, or with ZeRO-1/2 a reduce-scatter, and an all-gather of the
    updated parameters behind the first forward. Where the stack runs the replicas as FSDP2
    (``dp_fsdp2_replicas``), one all-reduce per block and the root behind every micro-batch's
    backward, and on a CPU FSDP2's copies (:func:`replica_copies_s`)."""
    m, ovl = lay.mesh, kn.overlap
    hsdp = m.fsdp > 1
    n = vec.where(hsdp, m.dp, m.dp * m.cp)
    g_hsdp, g_dp = fab.group(m.dp, m.tp * m.cp * m.fsdp), fab.group(m.dp * m.cp, m.tp)
    dp = Group(n, vec.where(hsdp, g_hsdp.per_node, g_dp.per_node), vec.where(hsdp, g_hsdp.nodes, g_dp.nodes))
    trained = st.p_stage * lay.run.trainable_fraction
    grad = trained * lay.kernels.grad_reduce_bytes / vec.where(hsdp, m.fsdp * m.cp, 1.0)
    zero12 = vec.where(st.plain_dp, vec.where(m.fsdp <= 1, m.zero_stage >= 1, False), False)
    # FSDP2 replicas all-reduce each wrapped block's gradients and the root's, every micro-batch
    # (nothing turns the sync off between them); DDP once a step, in buckets
    fsdp2 = lay.kernels.dp_fsdp2_replicas
    calls = vec.where(fsdp2, st.layers + 1.0, vec.minimum(st.layers, DDP_BUCKETS))
    times = vec.where(zero12, 1.0, vec.where(fsdp2 & (m.fsdp <= 1), m.grad_accum, 1.0))
    sync = vec.where(st.plain_dp, vec.where(zero12, fab.time_s("reduce-scatter", grad, dp),
                                            times * fab.time_s("all-reduce", grad, dp, calls)), 0.0)
    sync = sync + m.grad_accum * replica_copies_s(lay, st, kn)
    sync_bytes = vec.where(st.plain_dp, ring_bytes_per_device("all-reduce", grad, n) / vec.where(zero12, 2.0, 1.0),
                           0.0)
    gather = vec.where(zero12, fab.time_s("all-gather", trained * PARAM_GATHER_BYTES, dp), 0.0)
    gather_bytes = vec.where(zero12, ring_bytes_per_device("all-gather", trained * PARAM_GATHER_BYTES, n), 0.0)
    return (CommCost(sync, exposed_s(sync, times * c.bwd_mb, ovl), times * sync_bytes, dp),
            CommCost(gather, exposed_s(gather, c.fwd_mb, ovl), gather_bytes, dp))


def data_parallel(lay: Layout, st: Stage, kn: KnobValues, fab: Fabric, c: Compute) -> DataParallel:
    """The step's data-parallel collectives (see the module docstring)."""
    ag, rs = _fsdp(lay, st, kn, _sharded(lay, st, fab), c)
    sync, zero_ag = _replicated(lay, st, kn, fab, c)
    return DataParallel(ag, rs, sync, zero_ag)
