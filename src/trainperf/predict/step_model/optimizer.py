"""The optimizer step: AdamW over the device's shard of the trainable parameters, memory-bound,
on the device or, offloaded, on the host CPU."""

from __future__ import annotations

from trainperf import vec
from trainperf.predict.efficiency import KnobValues
from trainperf.predict.step_model.compute import host_s_per_kernel, memory_time_s
from trainperf.predict.step_model.layout import Layout, Num
from trainperf.predict.step_model.memory import STATE_BYTES
from trainperf.predict.step_model.stage import Stage

OPTIMIZER_BYTES_PER_PARAM = 34.0
"""AdamW step per local parameter: read fp32 master, m, v and grad (16), write master, m, v (12),
write the 16-bit working copy (2), read grads once more for clipping (4)."""

OPTIMIZER_KERNELS = 20.0
"""Kernel launches of one (foreach, multi-tensor) optimizer step, priced at the per-kernel cost."""


def optimizer_s(lay: Layout, st: Stage, kn: KnobValues) -> Num:
    """Seconds of the optimizer step: on the host CPU where the run offloads it
    (:func:`offloaded_optimizer_s`), else on the device: :data:`OPTIMIZER_BYTES_PER_PARAM` per
    local trainable parameter (sharded as the optimizer states are) at the silicon's STREAM-like
    bandwidth times the stack's memory-bound share (a CPU: at the rate its bench measured for
    clipping and fused AdamW, :attr:`~.layout.KernelPhysics.optimizer_bytes_per_s`), plus the
    launches (:data:`OPTIMIZER_KERNELS`, or the step's kernels outside the layers where the stack
    counted them, at :func:`host_s_per_kernel`). Left out: gradient clipping's all-reduce of the norm (one scalar)."""
    local = st.sharded(st.p_stage, lay.mesh.shards_optimizer) * lay.run.trainable_fraction
    measured = lay.kernels.optimizer_bytes_per_s
    bw = vec.where(measured > 0, measured, lay.device.hbm_bytes_per_s)
    eff = vec.where(measured > 0, 1.0, lay.kernels.hbm_fraction * kn.memory_bound_fraction)
    on_device = (memory_time_s(local * OPTIMIZER_BYTES_PER_PARAM, bw, eff)
                 + vec.where(lay.kernels.step_kernels > 0, lay.kernels.step_kernels, OPTIMIZER_KERNELS)
                 * host_s_per_kernel(lay, kn))
    return vec.where(lay.run.offload_optimizer, offloaded_optimizer_s(lay, st), on_device)


def offloaded_optimizer_s(lay: Layout, st: Stage) -> Num:
    """Seconds of an optimizer step offloaded to the host (ZeRO-Offload: Ren et al. 2021,
    "ZeRO-Offload: Democratizing Billion-Scale Model Training", USENIX ATC, section 4): the host
    steps the trainable parameters of every device of the run it serves (each device's shard of
    the optimizer states) at the stack's ``cpu_optimizer_params_per_s``, then each device copies
    its updated weights back over its host link. Left out: the gradients' copy to the host, which
    overlaps the backward (each bucket goes as soon as it is reduced); DeepSpeed's delayed
    parameter update, which overlaps the host step with the next step's compute and is off by
    default."""
    local = st.sharded(st.p_stage, lay.mesh.shards_optimizer) * lay.run.trainable_fraction
    dev = lay.device
    weight_bytes = STATE_BYTES[lay.run.state_kind][0]
    return (local * dev.devices_per_host / lay.kernels.cpu_optimizer_params_per_s
            + local * weight_bytes / vec.maximum(dev.host_link_bytes_per_s, 1.0))
