"""Tensor- and sequence-parallel communication: on the critical path of every layer.

Per layer forward, attention and a dense MLP each all-reduce their output over the tp group
(Megatron-LM, Shoeybi et al. 2019), or, with sequence parallelism, all-gather their input and
reduce-scatter their output (Korthikanti et al. 2022): a ``[b, s/cp, h]`` activation each; the
same backward, and again per region when recomputation re-runs its input projection. Under fp8
the gathered inputs are fp8 (torchtitan, Transformer Engine). Nothing else runs while they do,
so they are exposed in full, less what async TP / TP comm overlap hides behind the GEMMs when the
stack does it for the plan (the profile's ``async_tp_overlap``). The embedding's output and the
head's input cost one more region's collectives. Where the host computes (a CPU), DTensor's own
host time per sharded module, its copies around the sequence-dimension collectives and the
norms' weight-gradient all-reduces add (measured: :mod:`trainperf.predict.kernels.cpu`).

A MoE block's routed experts are split over the etp group: Megatron-Core's alltoall dispatcher
all-gathers the tokens it received over that group (topk copies of every token) and
reduce-scatters the expert outputs back (token_dispatcher.py: gather_from_sequence_parallel_region
/ reduce_scatter_to_sequence_parallel_region), in 16 bits even under fp8; without sequence
parallelism the expert outputs are all-reduced over etp. With etp = 1 there is nothing to gather
(MoE parallel folding). Shared experts follow tp like a dense MLP.
"""

from __future__ import annotations

from trainperf import vec
from trainperf.predict.efficiency import KnobValues
from trainperf.predict.step_model.collectives import (
    CommCost,
    Fabric,
    Group,
    OnCriticalPath,
    ring_bytes_per_device,
)
from trainperf.predict.step_model.compute import Compute
from trainperf.predict.step_model.layout import Flag, Layout, Num, residual_width
from trainperf.predict.step_model.stage import Stage


def overlapped(rule: str, async_tp: Flag, sp: Flag) -> Flag:
    """Whether a stack whose ``[kernels] tp_overlap`` is ``rule``
    (:data:`~trainperf.predict.stack_kernels.TP_OVERLAP`) overlaps this plan's tensor-parallel
    collectives with GEMMs (``never`` and ``async-tp``: only with the run's async TP)."""
    if rule == "always":
        return True
    if rule == "sequence-parallel":
        return vec.where(sp, True, async_tp)
    return async_tp


def _block_s(lay: Layout, fab: Fabric, g: Group, buf: Num) -> Num:
    """Seconds of one block's collectives over ``g`` per pass, the mean of forward and backward:
    an all-reduce of the output forward and of the input's gradient backward, or with sequence
    parallelism an all-gather of the input (fp8 under fp8) and a reduce-scatter of the output
    forward, a reduce-scatter of the input's gradient and an all-gather of the output's backward.
    The input and its gradient are :func:`~trainperf.predict.step_model.layout.residual_width`
    times ``buf``."""
    wide, sp = residual_width(lay), lay.mesh.sp
    # one plan (a Python bool) prices only the collectives it runs; the planner's arrays both
    ar = 0.0 if sp is True else 0.5 * (fab.time_s("all-reduce", buf, g) + fab.time_s("all-reduce", buf * wide, g))
    if sp is False:
        return ar
    gather = vec.where(lay.run.fp8, 0.5, wide)
    agrs = 0.5 * (fab.time_s("all-gather", buf * gather, g) + fab.time_s("reduce-scatter", buf, g)
                  + fab.time_s("reduce-scatter", buf * wide, g) + fab.time_s("all-gather", buf * vec.where(
                      lay.run.fp8, 0.5, 1.0), g))
    return agrs if sp is True else vec.where(sp, agrs, ar)


def host_s(lay: Layout, layers: Num, elements: Num) -> Num:
    """Seconds per micro-batch that DTensor's host work adds where the host computes (a CPU; 0
    elsewhere, where it runs ahead of the device): the measured cost per tensor-parallel module,
    forward and backward, a fixed part (``tp_module_s``) and one per element of the rank's
    ``elements``-element activation (``tp_element_s``: copies and casts), for each layer's
    Linears (four of attention, two or three of the MLP) and, under sequence parallelism, its two
    norms; the embedding and the head once, and the final norm under sequence parallelism.
    Recomputed forwards are left out."""
    if not lay.kernels.host_bound:
        return 0.0
    m, k = lay.mesh, lay.kernels
    per_layer = 4.0 + (3.0 if lay.model.gated else 2.0) + vec.where(m.sp, 2.0, 0.0)
    modules = layers * per_layer + vec.where(m.sp, 3.0, 2.0)
    return vec.where(m.tp > 1, modules * (k.tp_module_s + k.tp_element_s * elements), 0.0)


def sequence_copies_s(lay: Layout, kn: KnobValues, region_passes: Num, buf: Num) -> Num:
    """Seconds per micro-batch of DTensor's copies around the sequence-parallel collectives where
    the host computes (a CPU): its activations are ``[b, s, h]``, sharded along the sequence
    (dim 1), so a reduce-scatter first concatenates its input's chunks in rank order and an
    all-gather of more than one sequence concatenates the gathered chunks along dim 1
    (``torch.distributed._functional_collectives`` ``reduce_scatter_single`` /
    ``all_gather_single``, torch 2.13, read): per region and pass the full buffers read and
    written once, at the elementwise rate. 0 where the host's cost per element was measured
    (``tp_element_s``, :func:`host_s`: these copies are in it) and elsewhere (on a GPU they are
    kernels the fitted stack shares carry; Megatron-Core's ``[s, b, h]`` gathers along dim 0 and
    copies nothing)."""
    if not lay.kernels.host_bound:
        return 0.0
    m = lay.mesh
    bw = lay.device.hbm_bytes_per_s * lay.kernels.elementwise_fraction * kn.memory_bound_fraction
    gathered = vec.where(m.micro_batch > 1, 1.0, 0.0)
    per_pass = 2.0 * buf * 0.5 * (residual_width(lay) + 1.0) * (1.0 + gathered)
    return vec.where(m.sp & (m.tp > 1) & (lay.kernels.tp_element_s <= 0.0), region_passes * per_pass / bw, 0.0)


def norm_grads_s(lay: Layout, fab: Fabric, g: Group, layers: Num) -> Num:
    """Seconds per step of the all-reduces of the sequence-parallel norms' weight gradients
    (each rank holds a partial sum over its share of the sequence, accumulated over the
    micro-batches; DTensor reduces each norm's on its own: two per layer and the final norm,
    the bench's ``reduce_partial_grads``) where the host computes (a CPU), so that nothing runs
    beside them; 0 elsewhere, where these few kilobytes go out asynchronously behind the
    backward."""
    if not lay.kernels.host_bound:
        return 0.0
    m = lay.mesh
    one = fab.time_s("all-reduce", lay.model.hidden * 4.0, g)
    return vec.where(m.sp & (m.tp > 1), (2.0 * layers + 1.0) * one, 0.0)


def _expert_block_s(lay: Layout, fab: Fabric, g: Group, buf: Num) -> Num:
    """Seconds of one MoE block's forward expert-tp collectives over the etp group ``g`` (the
    dispatcher's gather and scatter of ``topk`` copies, in 16 bits; 0 with etp = 1)."""
    m = lay.mesh
    if not lay.model.expert_mats:  # a dense model has no MoE block (speed)
        return 0.0
    moe_buf = buf * lay.model.moe_topk
    agrs = fab.time_s("all-gather", moe_buf, g) + fab.time_s("reduce-scatter", moe_buf, g)
    return vec.where(m.etp > 1, vec.where(m.sp, agrs, fab.time_s("all-reduce", buf, g)), 0.0)


def tensor_parallel(lay: Layout, st: Stage, kn: KnobValues, fab: Fabric, c: Compute) -> OnCriticalPath:
    """The step's TP collectives on the slowest rank: forward and backward per region (attention,
    dense MLP, shared experts, routed experts), again where recomputation re-runs the region's
    input projection; and at the model's ends the embedding's output (all-reduced, or
    reduce-scattered to the sequence shards) and the head's input (gathered from them, or its
    gradient all-reduced): one region's collectives forward and backward, half on each end
    stage under pipeline parallelism (Megatron-Core's VocabParallelEmbedding and column-parallel
    output layer; torchtitan's RowwiseParallel embedding and ColwiseParallel head)."""
    m, rc, r = lay.mesh, st.rc, st.rec_frac
    tp, etp = fab.group(m.tp, 1.0), fab.group(m.etp, 1.0)
    shared_on = st.moe_frac * vec.minimum(lay.model.moe_shared, 1.0)
    dense_passes = (2.0 + r * rc.attn_region + st.dense_frac * (2.0 + r * rc.mlp_region)
                    + shared_on * (2.0 + r * rc.shared_region))
    moe_passes = 2.0 + r * rc.moe_region
    ends = vec.where(m.pp > 1, 1.0, 2.0)  # passes of the end regions on the busiest stage
    regions = c.layers * dense_passes + ends
    linear_mb = regions * _block_s(lay, fab, tp, st.tp_buf)
    moe_mb = c.layers * st.moe_frac * _expert_block_s(lay, fab, etp, st.tp_buf) * moe_passes
    hidden = vec.where(overlapped(lay.kernels.tp_overlap_rule, lay.run.async_tp, m.sp), kn.async_tp_overlap, 0.0)
    host_mb = host_s(lay, c.layers, st.tp_buf / lay.run.act_bytes) + sequence_copies_s(lay, kn, regions, st.tp_buf)
    exposed_mb = linear_mb * (1.0 - hidden) + host_mb + moe_mb
    bytes_mb = (regions * ring_bytes_per_device("all-reduce", st.tp_buf, m.tp)
                + c.layers * st.moe_frac * moe_passes * (m.etp > 1)
                * ring_bytes_per_device("all-reduce", st.tp_buf * lay.model.moe_topk, m.etp))
    M = m.grad_accum
    norms = norm_grads_s(lay, fab, tp, c.layers)
    return OnCriticalPath(CommCost(M * (linear_mb + host_mb + moe_mb) + norms, M * exposed_mb + norms,
                                   M * bytes_mb, tp), exposed_mb, norms)
