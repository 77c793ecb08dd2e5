"""The :class:`~trainperf.predict.step_model.layout.KernelPhysics` of a workload: which kernels its
software stack runs on its silicon (:mod:`trainperf.predict.stack_kernels`) and how fast the
silicon runs them (:mod:`trainperf.predict.kernels`)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from trainperf.predict import stack_capabilities, stack_kernels
from trainperf.predict.kernels import collectives as k_collectives
from trainperf.predict.kernels import cpu as k_cpu
from trainperf.predict.kernels import expert_dispatch as k_dispatch
from trainperf.predict.kernels import fp8 as k_fp8
from trainperf.predict.kernels import gemm as k_gemm
from trainperf.predict.kernels import memory_bound as k_memory
from trainperf.predict.step_model import context_parallel
from trainperf.predict.step_model.compute import EAGER_LOSS_BYTES_PER_LOGIT, LOSS_BYTES_PER_LOGIT
from trainperf.predict.step_model.data_parallel import GRAD_REDUCE_BYTES
from trainperf.predict.step_model.layout import ATTENTION_PEAK_PRECISION, HEAD_16BIT_UNDER_FP8, KernelPhysics


def gemm_dtype(precision: str) -> str:
    """The dtype whose GEMM measurements apply: fp4 runs are priced as fp8 (no fp4 GEMM data)."""
    return "fp8" if precision == "fp4" else precision


def head_dtype(hw: Any, precision: str) -> str:
    """The LM head's GEMM dtype: 16-bit under an fp8/fp4 run (:data:`HEAD_16BIT_UNDER_FP8`)."""
    gdt = gemm_dtype(precision)
    if gdt == "fp8" and HEAD_16BIT_UNDER_FP8:
        alt = ATTENTION_PEAK_PRECISION[precision]
        return alt if hw.supports(alt) else gdt
    return gdt


def kernels_of(w: Any) -> KernelPhysics:
    """Kernel physics of a :class:`~trainperf.specs.workload.Workload` under its stack (cached per
    device, precision, stack profile and software settings: a prediction costs microseconds)."""
    from trainperf.predict.stacks import profile_cache_key

    stack, mtime = profile_cache_key(getattr(w, "stack", None))
    k = _kernels(w.hardware, w.precision, stack, mtime, bool(w.compile), w.fp8_recipe, w.model.norm, w.model.mlp,
                 getattr(w, "moe_dispatcher", None))
    return measured_cpu(k, w) if w.hardware.kind == "cpu" else k


def measured_cpu(k: KernelPhysics, w: Any) -> KernelPhysics:
    """``k`` with what the bench measured on this CPU for workload ``w`` (:mod:`trainperf.predict.kernels.cpu`): the
    attention curves, the GEMMs at the shapes runs timed, the eager elementwise rate (its extra
    passes included: one pass each), the
    operators a layer runs, the optimizer step's rate, gloo's collectives; operators' host cost
    adds to their compute."""
    phys = k_cpu.physics(w)
    if phys is None:
        return dataclasses.replace(k, host_bound=True)
    changes: dict[str, Any] = {"host_bound": True}
    if phys.attention is not None:
        changes["attn_table"] = phys.attention
    if phys.elementwise_bytes_per_s is not None:
        changes.update(elementwise_fraction=phys.elementwise_bytes_per_s / (w.hardware.hbm_bandwidth_GB_per_s * 1e9),
                       norm_passes=1.0, rope_passes=1.0, act_passes=1.0, ops_per_layer_fwd=phys.ops_per_layer_fwd,
                       fsdp_module_s=phys.fsdp_module_s, tp_module_s=phys.tp_module_s, tp_element_s=phys.tp_element_s,
                       moe_ops_per_layer_fwd=phys.moe_ops_per_layer_fwd,
                       optimizer_bytes_per_s=phys.optimizer_bytes_per_s)
    if phys.gemms:
        # the measured rates carry the whole efficiency: the shape law's best fraction stands down
        peak = w.hardware.sustained_peak_flops(gemm_dtype(w.precision))
        changes.update(gemm_table=tuple((m, n, kk, rate / peak) for m, n, kk, rate in phys.gemms),
                       grouped_table=tuple((m, n, kk, rate / peak) for m, n, kk, rate in phys.grouped_gemms),
                       gemm_peak_fraction=1.0, head_gemm_peak_fraction=1.0, grouped_fraction=1.0)
    if phys.link is not None:
        changes.update(link_up=phys.link, link_measured_here=True)
    return dataclasses.replace(k, **changes)


@functools.lru_cache(maxsize=512)
def _kernels(hw: Any, precision: str, stack: str, _mtime: float, compile_flag: bool, fp8_recipe: str | None,
             norm: str, mlp: str, moe_dispatcher: str | None = None) -> KernelPhysics:
    from trainperf.predict.stacks import generation_of

    sil = generation_of(hw)
    sk = stack_kernels.for_stack(stack, sil)
    gdt = gemm_dtype(precision)
    # the routed experts' dtype: 16-bit in an fp8 run whose stack leaves its grouped GEMM out of fp8
    experts_16 = gdt == "fp8" and not sk.fp8_grouped_gemm and hw.kind == "gpu"
    edt = head_dtype(hw, precision) if experts_16 else gdt
    return KernelPhysics(
        silicon=sil, attn_family=sk.attention,
        gemm_peak_fraction=float(k_gemm.peak_fraction(sil, gdt)), gemm_half_dim=float(k_gemm.half_dim(sil, gdt)),
        head_gemm_peak_fraction=float(k_gemm.peak_fraction(sil, head_dtype(hw, precision))),
        # routed experts run the stack's grouped GEMM: its speed over the dense law where measured
        grouped_fraction=float(k_gemm.grouped_fraction(sil, "bf16" if edt == "fp16" else edt, sk.grouped_gemm)),
        experts_16bit=experts_16,
        grouped_impl=sk.grouped_gemm, moe_host_sync=sk.moe_host_sync,
        hbm_fraction=float(k_memory.hbm_fraction(sil)), tp_overlap_rule=sk.tp_overlap,
        # a runtime that preallocates a share of a GPU's memory (JAX/XLA) leaves the rest unused
        memory_fraction=sk.gpu_memory_fraction if hw.kind == "gpu" else 1.0,
        link_up=k_collectives.level_model(sil, "scale-up"), link_out=k_collectives.level_model(sil, "scale-out"),
        fsdp_grad_per_tensor=stack_capabilities.fsdp_grad_per_tensor(stack),
        moe_probs_in_activation=stack_capabilities.moe_probs_in_activation(stack),
        fp8_gemm_input_bytes=stack_capabilities.fp8_gemm_input_bytes(stack, precision),
        cp_flavour=context_parallel.flavour(sk.context_parallel, sk.context_parallel_load_balance),
        autocast_unsharded=sk.autocast_unsharded,
        dp_fsdp2_replicas=sk.data_parallel == "fsdp2-replicas",
        # counted on a GPU's runs of the stack: a CPU's calibration counts and prices its own
        ops_per_layer_fwd=sk.kernels_per_layer if hw.kind == "gpu" else 0.0,
        moe_ops_per_layer_fwd=sk.moe_kernels_per_layer if hw.kind == "gpu" else 0.0,
        step_kernels=sk.kernels_per_step if hw.kind == "gpu" else 0.0,
        host_us_per_kernel=sk.host_us_per_kernel if hw.kind == "gpu" else 0.0,
        cpu_optimizer_params_per_s=sk.cpu_optimizer_params_per_s,
        fused_loss_chunk_bytes=stack_capabilities.fused_loss_chunk_bytes(stack, hw.kind),
        **software_fields(norm, mlp, sil, stack, precision, compile_flag, fp8_recipe, moe_dispatcher))


def software_fields(norm: str, mlp: str, silicon: str, stack: Any, precision: str, compile_flag: bool,
                    fp8_recipe: str | None, moe_dispatcher: str | None = None) -> dict[str, Any]:
    """The fields of :class:`KernelPhysics` a run's software settings (``compile``, ``fp8_recipe``,
    ``moe_dispatcher``) change (``norm``, ``mlp``: the model's kinds, whose unfused kernels differ): the memory-bound
    implementation with its bandwidth and per-op passes, the fp8 recipe with its GEMM cost, the
    loss' live bytes. The planner applies them to a representative
    workload's kernel physics (keyword arguments of :func:`dataclasses.replace`)."""
    sk = stack_kernels.for_stack(stack, silicon)
    fp8 = precision in ("fp8", "fp4")
    impl = sk.elementwise_impl(compile_flag)
    recipe = (fp8_recipe or sk.fp8_recipe) if fp8 else ""
    eager = impl == "eager"

    def passes(op: str) -> float:
        """Times unfused code moves the op's ideal bytes in a step: the stack's share of the extra
        passes the isolated kernels measured (fused vs eager)."""
        return 1.0 + sk.eager_pass_share * (float(k_memory.eager_penalty(op)) - 1.0) if eager else 1.0

    return {
        "compiled": bool(compile_flag) or sk.compiled, "elementwise_impl": impl, "fp8_recipe": recipe,
        "fp8_recipe_factor": float(k_fp8.recipe_gemm_factor(silicon, recipe)) if fp8 else 1.0,
        # memory-bound ops run at the fused bandwidth of the silicon; unfused code moves an op's
        # bytes several times (per-op penalties), native single kernels once
        "elementwise_fraction": float(k_memory.elementwise_fraction(silicon, "compiled" if impl == "compiled"
                                                                    else "fused")),
        "norm_passes": passes("rmsnorm" if norm == "rmsnorm" else "layernorm"), "rope_passes": passes("rope"),
        "act_passes": passes("swiglu" if mlp in ("swiglu", "geglu") else "gelu"),
        "loss_bytes_per_logit": stack_capabilities.loss_bytes_per_logit(stack, bool(compile_flag)),
        "frozen_weight_bytes": stack_capabilities.frozen_weight_bytes(stack),
        # separate PyTorch ops unless the stack fuses its cross-entropy or the step is compiled
        "loss_traffic_bytes": EAGER_LOSS_BYTES_PER_LOGIT if sk.cross_entropy == "eager" and impl != "compiled"
        else LOSS_BYTES_PER_LOGIT,
        "dispatch": k_dispatch.dispatch_model(silicon, moe_dispatcher or sk.moe_dispatcher),
        # an fp16 run of a stack that reduces in the training dtype moves 16-bit gradients
        "grad_reduce_bytes": _grad_reduce_bytes(sk.grad_reduce, precision),
    }


def _grad_reduce_bytes(grad_reduce: str, precision: str) -> float:
    """Bytes per gradient element the data-parallel reductions move, by the stack's ``[kernels]
    grad_reduce`` (:data:`trainperf.predict.stack_kernels.GRAD_REDUCE`) and the run's precision."""
    if grad_reduce == "fp16-native" and precision == "fp16":
        return 2.0
    if grad_reduce == "16-bit" and precision in ("fp16", "bf16", "fp8", "fp4"):
        return 2.0
    return GRAD_REDUCE_BYTES
