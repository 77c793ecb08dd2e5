"""One optimizer step on the slowest device, from its components.

    step = M x (compute + exposed TP + EP per micro-batch)     per micro-batch: compute.py,
         + pipeline bubble                                       tensor_parallel.py, expert_parallel.py
         + exposed FSDP / ZeRO / DP collectives                  data_parallel.py
         + exposed CP ring + exposed PP sends                    context_parallel.py, pipeline.py
         + TP's once-a-step collectives (a CPU's norm gradients) tensor_parallel.py
         + optimizer                                             optimizer.py

``M`` is the micro-batches per step; the bubble is ``(p-1)/v`` micro-batch times (DualPipe's:
pipeline.py). Memory per
device (memory.py) is priced alongside, from the same stage (stage.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainperf.predict.efficiency import KnobValues
from trainperf.predict.step_model.collectives import CommCost, OnCriticalPath, fabric_of
from trainperf.predict.step_model.compute import Compute, compute
from trainperf.predict.step_model.context_parallel import context_parallel
from trainperf.predict.step_model.data_parallel import DataParallel, data_parallel
from trainperf.predict.step_model.expert_parallel import ExpertParallel, expert_parallel
from trainperf.predict.step_model.layout import Layout, Num
from trainperf.predict.step_model.memory import Memory, memory
from trainperf.predict.step_model.optimizer import optimizer_s
from trainperf.predict.step_model.pipeline import Pipeline, pipeline
from trainperf.predict.step_model.stage import Stage, busiest_stage
from trainperf.predict.step_model.tensor_parallel import tensor_parallel


@dataclass(slots=True, eq=False)
class StepCosts:
    """A step's time by component, every collective, and memory per device."""

    step_time_s: Num
    compute: Compute
    tp: OnCriticalPath
    ep: ExpertParallel
    dp: DataParallel
    cp: CommCost
    pp: Pipeline
    optimizer_s: Num
    memory: Memory
    microbatch_s: Num
    """A micro-batch's critical path on one stage: compute with its TP and EP collectives."""
    stage: Stage
    grad_accum: Num
    trainable_fraction: Num

    @property
    def forward_s(self) -> Num:
        """Forward compute of every micro-batch on the slowest rank."""
        return self.grad_accum * self.compute.fwd_mb

    @property
    def backward_s(self) -> Num:
        """Backward compute of every micro-batch."""
        return self.grad_accum * self.compute.bwd_mb

    @property
    def recompute_s(self) -> Num:
        """Recomputation of every micro-batch."""
        return self.grad_accum * self.compute.rec_mb

    @property
    def matmul_s(self) -> Num:
        """Every GEMM but the routed experts': forward, backward (2x, less the frozen weights'
        gradients) and recomputed."""
        c, train = self.compute, self.trainable_fraction
        per_mb = (c.layers * ((c.layer.gemm_fwd - c.layer.expert_fwd) * (2.0 + train) + 3.0 * c.layer.adapter_fwd
                              + self.stage.rec_frac * (c.layer.gemm_rec - c.layer.expert_rec))
                  + (c.head_on * c.head.gemm + c.mtp_proj) * (2.0 + train))
        return self.grad_accum * per_mb

    @property
    def grouped_gemm_s(self) -> Num:
        """The routed experts' grouped GEMMs: forward, backward and recomputed."""
        c, train = self.compute, self.trainable_fraction
        return self.grad_accum * c.layers * (c.layer.expert_fwd * (2.0 + train)
                                             + self.stage.rec_frac * c.layer.expert_rec)

    @property
    def routing_s(self) -> Num:
        """An MoE block's router scores, permutation and unpermutation (memory-bound): forward,
        backward (2x the bytes) and recomputed."""
        c = self.compute
        return self.grad_accum * c.layers * (3.0 * c.layer.route_fwd + self.stage.rec_frac * c.layer.route_rec)

    @property
    def attention_s(self) -> Num:
        """The attention core forward, backward and recomputed."""
        c, st = self.compute, self.stage
        core = c.layer.attn_fwd + c.layer.attn_bwd + st.rec_frac * st.rc.attention_core * c.layer.attn_fwd
        return self.grad_accum * c.layers * core

    @property
    def memory_bound_s(self) -> Num:
        """Memory-bound ops but an MoE block's routing, forward and backward (3x the forward bytes),
        recomputed, and the loss."""
        c, st = self.compute, self.stage
        return self.grad_accum * (c.layers * (3.0 * (c.layer.mem_fwd - c.layer.route_fwd)
                                              + st.rec_frac * (c.layer.mem_rec - c.layer.route_rec))
                                  + c.head_on * c.head.loss)

    @property
    def overhead_s(self) -> Num:
        """Kernel launch time left exposed beside the device time."""
        c = self.compute
        return self.grad_accum * c.layers * (c.layer.launch_fwd + c.layer.launch_bwd
                                             + self.stage.rec_frac * c.layer.launch_rec)


def _microbatch_s(c: Compute, tp: OnCriticalPath, ep: ExpertParallel) -> Num:
    return c.mb_s + tp.exposed_mb_s + ep.exposed_mb_s


def step_costs(lay: Layout, kn: KnobValues) -> StepCosts:
    """The :class:`StepCosts` of a layout under knob values (see the module docstring)."""
    st = busiest_stage(lay)
    fab = fabric_of(lay, kn.link_fraction)
    c = compute(lay, st, kn)
    tp, ep = tensor_parallel(lay, st, kn, fab, c), expert_parallel(lay, st, fab, c, kn.overlap)
    dp = data_parallel(lay, st, kn, fab, c)
    mb = _microbatch_s(c, tp, ep)
    pp = pipeline(lay, kn, fab, c, dp, mb)
    cp = context_parallel(lay, st, kn, fab, c)
    opt = optimizer_s(lay, st, kn)
    exposed = (dp.fsdp_allgather.exposed_s + dp.fsdp_reducescatter.exposed_s + dp.grad_sync.exposed_s
               + dp.zero_allgather.exposed_s + cp.exposed_s + pp.sends.exposed_s + tp.exposed_step_s)
    step = lay.mesh.grad_accum * mb + pp.bubble_s + exposed + opt
    return StepCosts(step, c, tp, ep, dp, cp, pp, opt, memory(lay, st, kn), mb, st, lay.mesh.grad_accum,
                     lay.run.trainable_fraction)


def step_time_s(lay: Layout, kn: KnobValues) -> Num:
    """Seconds per optimizer step of a layout."""
    return step_costs(lay, kn).step_time_s


def memory_only(lay: Layout, kn: KnobValues) -> Memory:
    """Memory per device without the step time: what a planner checks first, pricing only the
    plans that fit."""
    return memory(lay, busiest_stage(lay), kn)

