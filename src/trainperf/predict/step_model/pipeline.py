"""Pipeline parallelism: the bubble of 1F1B, interleaved and GPipe schedules (Narayanan et al.
2021, section 2.2; Huang et al. 2019) and the stages' point-to-point sends.

With ``p`` stages, ``m`` micro-batches and per-micro-batch stage time ``t``:

* GPipe and 1F1B: the pipeline runs ``(m + p - 1) * t``; the bubble is ``(p - 1) * t``, a
  fraction ``(p - 1) / (m + p - 1)`` of the step (``(p-1)/m`` of the ideal time).
* interleaved 1F1B (or circular GPipe) with ``v`` model chunks per device: bubble
  ``(p - 1) * t / v``, i.e. ``(p - 1) / (v * m)`` of the ideal time.
* DualPipe (DeepSeek-V3 report, arXiv 2412.19437, section 3.2.1 and Table 2): micro-batches
  enter at both ends of a pipeline whose rank ``i`` holds stage ``i`` of one copy of the model and
  stage ``p - 1 - i`` of another; a forward chunk runs beside a backward chunk, and backward
  passes split into input and weight gradients (zero-bubble style) fill the rest: bubble
  ``(p/2 - 1)(F&B + B - 3W)`` (:func:`dualpipe_bubble_s`). The expert-parallel all-to-alls hide
  behind the paired chunk's compute (:mod:`.expert_parallel`).
* DualPipeV (its "cut-in-half" variant, github.com/deepseek-ai/DualPipe; PyTorch's
  ``ScheduleDualPipeV``): ``2p`` half-stages in a V, rank ``i`` holding ``i`` and ``2p - 1 - i``;
  DualPipe's bubble over ``2p`` stages of half a rank's work each. PyTorch runs a paired forward
  and backward one after the other (unless a custom overlap is registered): nothing is hidden.

Each micro-batch sends its activations to the next stage forward and their gradient back,
once per model chunk: ``[b, s/cp, h]`` (``/tp`` with sequence parallelism; fp32 where the stack
runs 16-bit by autocast over unsharded weights, ``layout.residual_width``). The sends hide in
what the FSDP traffic leaves of the step's compute. The pp group is the mesh's outermost.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainperf import vec
from trainperf.predict.efficiency import KnobValues
from trainperf.predict.step_model.collectives import CommCost, Fabric, exposed_s
from trainperf.predict.step_model.compute import Compute
from trainperf.predict.step_model.data_parallel import DataParallel
from trainperf.predict.step_model.layout import Layout, Num, residual_width


def bubble_time_s(pp: Num, vpp: Num, microbatch_time_s: Num) -> Num:
    """Idle seconds per step: ``(p - 1) / v`` micro-batch times."""
    return (pp - 1.0) / vpp * microbatch_time_s


def dualpipe_bubble_s(pp: Num, pair_s: Num, backward_s: Num, wgrad_s: Num) -> Num:
    """DualPipe's idle seconds per step, ``(p/2 - 1)(F&B + B - 3W)`` (DeepSeek-V3 report, Table 2):
    ``F&B`` a forward and a backward chunk run together (``pair_s``: a micro-batch's critical
    path on one rank), ``B`` the backward for inputs (``backward_s - wgrad_s``), ``W`` the
    backward for weights (``wgrad_s``); at least 0."""
    return (0.5 * pp - 1.0) * vec.maximum(pair_s + backward_s - 4.0 * wgrad_s, 0.0)


def wgrad_s(c: Compute, trainable_fraction: Num) -> Num:
    """Seconds of one micro-batch's weight-gradient GEMMs on the slowest rank (``W`` of the
    zero-bubble schedules): one forward GEMM's time per trained matrix (the layers', the head's,
    the multi-token-prediction projections'; a frozen matrix none, its adapters theirs)."""
    dense = c.layers * c.layer.gemm_fwd + c.head_on * c.head.gemm + c.mtp_proj
    return trainable_fraction * dense + c.layers * c.layer.adapter_fwd


@dataclass(slots=True, eq=False)
class Pipeline:
    """The step's pipeline costs."""

    bubble_s: Num
    sends: CommCost
    """Point-to-point activation and gradient sends between stages."""


def pipeline(lay: Layout, kn: KnobValues, fab: Fabric, c: Compute, dp: DataParallel, microbatch_s: Num) -> Pipeline:
    """Bubble (``microbatch_s``: a micro-batch's critical path on one stage, its communication
    included) and stage-to-stage sends."""
    m = lay.mesh
    on, M = m.pp > 1, m.grad_accum
    pp = fab.group(m.pp, m.tp * m.cp * m.fsdp * m.dp)
    msg = (m.micro_batch * lay.model.seq_len / m.cp * lay.model.hidden * lay.run.act_bytes * residual_width(lay)
           / vec.where(m.sp, m.tp, 1.0))
    sends_mb = vec.where(on, 2.0 * m.vpp * fab.time_s("send-recv", msg, pp), 0.0)
    fsdp_s = dp.fsdp_allgather.time_s + dp.fsdp_reducescatter.time_s
    left = vec.maximum(0.0, M * c.fwd_mb + M * (c.bwd_mb + c.rec_mb) - kn.overlap * fsdp_s)
    sends = CommCost(M * sends_mb, exposed_s(M * sends_mb, left, kn.overlap), M * 2.0 * m.vpp * msg * on, pp)
    w = wgrad_s(c, lay.run.trainable_fraction)
    # DualPipeV: DualPipe's bubble over 2 pp half-stages, each half a rank's work per micro-batch
    bubble = vec.where(m.dualpipe, dualpipe_bubble_s(m.pp, microbatch_s, c.bwd_mb, w),
                       vec.where(m.dualpipev, dualpipe_bubble_s(2.0 * m.pp, 0.5 * microbatch_s, 0.5 * c.bwd_mb, 0.5 * w),
                                 bubble_time_s(m.pp, m.vpp, microbatch_s)))
    return Pipeline(vec.where(on, bubble, 0.0), sends)
