"""The optimizer step: AdamW over the device's shard of the trainable parameters, memory-bound."""

from __future__ import annotations

from trainperf import vec
from trainperf.predict.efficiency import KnobValues
from trainperf.predict.step_model.compute import host_s_per_kernel, memory_time_s
from trainperf.predict.step_model.layout import Layout, Num
from trainperf.predict.step_model.stage import Stage

OPTIMIZER_BYTES_PER_PARAM = 34.0
"""AdamW step per local parameter: read fp32 master, m, v and grad (16), write master, m, v (12),
write the 16-bit working copy (2), read grads once more for clipping (4)."""

OPTIMIZER_KERNELS = 20.0
"""Kernel launches of one (foreach, multi-tensor) optimizer step, priced at the per-kernel cost."""


def optimizer_s(lay: Layout, st: Stage, kn: KnobValues) -> Num:
    """Seconds of the optimizer step: :data:`OPTIMIZER_BYTES_PER_PARAM` per local trainable
    parameter (sharded as the optimizer states are) at the silicon's STREAM-like bandwidth times
    the stack's memory-bound share, plus the launches (:data:`OPTIMIZER_KERNELS`, or the step's
    kernels outside the layers where the stack counted them, at :func:`host_s_per_kernel`). Left out: gradient clipping's all-reduce
    of the norm (one scalar)."""
    local = st.sharded(st.p_stage, lay.mesh.shards_optimizer) * lay.run.trainable_fraction
    eff = lay.kernels.hbm_fraction * kn.memory_bound_fraction
    return (memory_time_s(local * OPTIMIZER_BYTES_PER_PARAM, lay.device.hbm_bytes_per_s, eff)
            + vec.where(lay.kernels.step_kernels > 0, lay.kernels.step_kernels, OPTIMIZER_KERNELS)
            * host_s_per_kernel(lay, kn))
