"""``predict(workload)``: a :class:`Prediction` of step time, throughput and memory, explained.

The arithmetic lives in :mod:`trainperf.predict.step_model` (one module per cost component);
this module checks what a plan needs beyond the workload's own validation, picks the efficiency
knobs, and turns the step model's typed costs into a report: breakdown per component, each
collective with its bytes, link, algorithm and hidden fraction, memory by category, fit,
bottleneck, and the throughput figures of :func:`trainperf.accounting.throughput.throughput`
(MFU/HFU under a named convention and peak).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainperf.accounting.conventions import run_convention
from trainperf.accounting.throughput import throughput
from trainperf.errors import InputFileError, SpecError
from trainperf.predict.efficiency import KNOB_NAMES, Knobs, knobs_from_mapping
from trainperf.predict.stack_capabilities import apply_stack
from trainperf.predict.step_model import StepCosts, layout_of, step_costs
from trainperf.predict.step_model.collectives import CommCost, link_name
from trainperf.predict.step_model.layout import KernelPhysics
from trainperf.predict.step_model.memory import GiB, Memory
from trainperf.specs.datafiles import parse_user_data, read_user_text


@dataclass(frozen=True)
class Collective:
    """One kind of collective in the step."""

    name: str
    algorithm: str
    link: str
    group_size: int
    bytes_per_device: float
    """Bytes each device sends per step (ring bus volume)."""
    time_s: float
    exposed_s: float

    @property
    def hidden_fraction(self) -> float:
        return 0.0 if self.time_s <= 0 else max(0.0, 1.0 - self.exposed_s / self.time_s)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["hidden_fraction"] = self.hidden_fraction
        return d


@dataclass(frozen=True)
class Prediction:
    """Predicted step of one workload (times in seconds, memory in GiB = 2^30 bytes)."""

    workload: Any
    step_time_s: float
    breakdown: dict[str, float]
    """Seconds per component; they add up to ``step_time_s``."""
    compute_breakdown: dict[str, float]
    """Compute seconds per op class (matmul, attention, memory-bound, kernel overhead)."""
    collectives: tuple[Collective, ...]
    memory_breakdown_GiB: dict[str, float]
    memory_per_device_GiB: float
    memory_capacity_GiB: float
    tokens_per_s: float
    tokens_per_s_per_device: float
    tflops_per_device: float
    mfu_pct: float
    hfu_pct: float
    convention: str
    peak_tflops: float
    days_to_train: float
    train_tokens: float
    bottleneck: str
    knobs: Knobs
    notes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    interval: Any = None
    """An :class:`~trainperf.predict.intervals.Interval` of step seconds (80%), from held-out
    residuals and wider off the fitted data; ``None`` when no interval model is packaged."""

    @property
    def fits(self) -> bool:
        return self.memory_per_device_GiB <= self.memory_capacity_GiB

    @property
    def at_memory_edge(self) -> bool:
        """Over the device memory by no more than :data:`MEMORY_EDGE_SHARE` of it: the memory
        model's error on published peaks covers the excess, so the plan may run (a step time is
        still predicted, and says so)."""
        return not self.fits and self.memory_over_GiB <= MEMORY_EDGE_SHARE * self.memory_capacity_GiB

    @property
    def memory_over_GiB(self) -> float:
        """How far over the device memory (0 when it fits)."""
        return max(0.0, self.memory_per_device_GiB - self.memory_capacity_GiB)

    def to_run_record(self) -> Any:
        """The prediction as a one-step :class:`~trainperf.records.RunRecord` (``source="predicted"``),
        so reports can put it beside measured and published runs."""
        from trainperf.records.run_record import RunRecord, StepRecord

        step = StepRecord(step=0, step_time_s=self.step_time_s, tokens=self.workload.tokens_per_step,
                          memory_GiB=self.memory_per_device_GiB, breakdown=dict(self.breakdown),
                          claimed_mfu_pct=self.mfu_pct)
        meta = {"name": f"predicted: {self.workload.describe()}", "bottleneck": self.bottleneck,
                "fits": self.fits, "knobs": {"device": self.knobs.device, **self.knobs.values()},
                "memory_breakdown_GiB": dict(self.memory_breakdown_GiB)}
        return RunRecord(source="predicted", steps=[step], workload=self.workload, meta=meta)

    def to_dict(self) -> dict[str, Any]:
        w = self.workload
        return {
            "workload": w.describe(),
            "model": w.model.name, "device": w.hardware.id, "num_devices": w.num_devices,
            "plan": w.plan.describe(),
            "step_time_s": self.step_time_s,
            "step_time_interval_s": self.interval.to_dict() if self.interval is not None else None,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_device": self.tokens_per_s_per_device,
            "tflops_per_device": self.tflops_per_device,
            "mfu_pct": self.mfu_pct, "hfu_pct": self.hfu_pct, "convention": self.convention,
            "peak_tflops": self.peak_tflops,
            "days_to_train": self.days_to_train, "train_tokens": self.train_tokens,
            "memory_per_device_GiB": self.memory_per_device_GiB,
            "memory_capacity_GiB": self.memory_capacity_GiB,
            "fits": self.fits, "memory_over_GiB": self.memory_over_GiB, "at_memory_edge": self.at_memory_edge,
            "breakdown": dict(self.breakdown),
            "compute_breakdown": dict(self.compute_breakdown),
            "collectives": [c.to_dict() for c in self.collectives],
            "memory_breakdown_GiB": dict(self.memory_breakdown_GiB),
            "bottleneck": self.bottleneck,
            "knobs": {"device": self.knobs.device, **self.knobs.values()},
            "kernels": dict(self.extra.get("kernels", {})),
            "notes": list(self.notes),
        }


# ----------------------------------------------------------------------------------- checks
def check_plan(w: Any) -> None:
    """What the workload's own validation leaves to the predictor (each raises naming the field)."""
    p = w.plan
    m = w.model
    if p.tp > m.heads:
        raise SpecError("parallel.tp", p.tp, f"at most heads={m.heads}")
    if p.pp > m.layers:
        raise SpecError("parallel.pp", p.pp, f"at most layers={m.layers}")
    local = w.global_batch // p.data_parallel
    if w.global_batch % p.data_parallel or local % w.micro_batch:
        raise SpecError("training.micro_batch", w.micro_batch,
                        f"must divide the local batch global_batch/(dp*fsdp)={w.global_batch}/"
                        f"{p.data_parallel}")
    if w.precision in ("fp8", "fp4") and not w.hardware.supports(w.precision):
        have = ", ".join(w.hardware.precisions)
        raise SpecError("training.precision", w.precision, f"{w.hardware.id} supports {have}")
    if w.precision in ("fp8", "fp4"):
        from trainperf.predict.step_model.kernel_physics import kernels_of

        kernels_of(w)  # the fp8 recipe, stated or the stack's, is one the silicon has (cached)
    if p.ep > 1 and not m.is_moe:
        raise SpecError("parallel.ep", p.ep, "1 for a dense model")
    if getattr(w, "moe_dispatcher", None):
        from trainperf.predict.stack_capabilities import capabilities_of

        caps = capabilities_of(getattr(w, "stack", None))
        if w.moe_dispatcher not in caps.moe_dispatchers:
            raise SpecError("training.moe_dispatcher", w.moe_dispatcher,
                            f"one the stack {caps.stack} runs: {', '.join(caps.moe_dispatchers)}")


# ----------------------------------------------------------------------------- calibration
def load_calibration(path: str | Path) -> dict[str, dict[str, float]]:
    """Read a calibration file written by ``trainperf calibrate-model``: device id -> knob values."""
    p = Path(path)
    data = parse_user_data(read_user_text(p, "calibration file"), p, "calibration file", toml=False)
    devices = data.get("devices") if isinstance(data, dict) else None
    if not isinstance(devices, dict):
        raise InputFileError(f"calibration file {str(p)!r}: expected an object with 'devices'")
    for dev, knobs in devices.items():
        if not isinstance(knobs, dict):
            raise InputFileError(f"calibration file {str(p)!r}: devices.{dev} must be an object")
        for name in knobs:
            if name not in KNOB_NAMES:
                raise SpecError(f"calibration.devices.{dev}.{name}", name, f"one of {', '.join(KNOB_NAMES)}")
    return devices


def resolve_knobs(w: Any, calibration: Mapping[str, Mapping[str, float]] | None = None,
                  knobs: Knobs | None = None, stack: Any = None) -> Knobs:
    """Knobs for ``w``: explicit ``knobs``, else the vendor defaults under the ``generic`` profile
    under ``stack`` (a profile name, file or :class:`~trainperf.predict.stacks.Profile`; default
    the workload's ``stack``) for the device's generation, with a calibration's values for this
    device (or its vendor, keyed ``vendor:<name>``) applied on top."""
    from trainperf.predict.stacks import stack_knobs

    if knobs is not None:
        return knobs
    named = stack if stack is not None else getattr(w, "stack", None)
    k = stack_knobs(w.hardware, named)
    if w.hardware.kind == "cpu":
        from trainperf.predict.kernels.cpu import knobs_on_cpu
        from trainperf.predict.stacks import stated_for_generation

        k = knobs_on_cpu(k, w, keep=stated_for_generation(named, "cpu"))
    if calibration:
        for key in (f"vendor:{w.hardware.vendor}", w.hardware.id):
            if key in calibration:
                k = knobs_from_mapping(k, calibration[key], f"calibration:{key}")
    return k


# --------------------------------------------------------------------------------- predict
def predict(w: Any, *, knobs: Knobs | None = None,
            calibration: Mapping[str, Mapping[str, float]] | None = None,
            convention: str | None = None, train_tokens: float = 1e12,
            trainable_fraction: float | None = None, stack: Any = None) -> Prediction:
    """Predict one training step of workload ``w``.

    ``convention`` names the FLOP count of the MFU and model TFLOP/s; None: ``lora`` for a
    workload with LoRA adapters or a ``trainable_fraction`` below 1, else megatron, as the bench
    counts its runs
    (:func:`~trainperf.accounting.conventions.run_convention`).

    ``trainable_fraction`` < 1 models LoRA-style fine-tuning: frozen weights need no weight
    gradients, gradient buffers or optimizer states (compute of the activation gradients stays).
    None: the workload's own LoRA adapters' share of the parameters (``[lora]``), else 1.
    """
    lora = getattr(w, "lora", None)
    # the workload's own adapters are counted per matmul (throughput); a given fraction by its share
    given_fraction = trainable_fraction is not None
    if trainable_fraction is None:
        trainable_fraction = lora.trainable_fraction(w.model) if lora is not None else 1.0
    w = apply_stack(w)
    check_plan(w)
    if not 0.0 < trainable_fraction <= 1.0:
        raise SpecError("trainable_fraction", trainable_fraction, "a fraction in (0, 1]")
    k = resolve_knobs(w, calibration, knobs, stack)
    lay = layout_of(w, trainable_fraction)
    convention = run_convention(convention, lora is not None or trainable_fraction < 1.0)
    p = assemble(w, step_costs(lay, k.numbers()), k, convention=convention, train_tokens=train_tokens,
                 lora_fraction=trainable_fraction if given_fraction and trainable_fraction < 1 else 0.0,
                 cp_flavour=lay.kernels.cp_flavour)
    p.extra["kernels"] = kernel_info(lay.kernels)
    if w.offload_optimizer:
        p = dataclasses.replace(p, notes=(*p.notes, offload_note(w, lay, p.breakdown.get("optimizer", 0.0))))
    from trainperf.predict.intervals import interval_for

    return dataclasses.replace(p, interval=interval_for(p.step_time_s, w))


def offload_note(w: Any, lay: Any, optimizer_s: float) -> str:
    """What the offloaded optimizer step is made of, and where its rate comes from."""
    rate = as_float(lay.kernels.cpu_optimizer_params_per_s)
    return (f"optimizer offloaded to the host CPU: {optimizer_s:.3g} s per step, the host stepping the shards of "
            f"its {w.devices_per_node} device(s) at {rate:.3g} parameters/s (the stack's [kernels] "
            f"cpu_optimizer_params_per_s) and each device copying its weights back over its "
            f"{w.hardware.host_link_GB_per_s:g} GB/s host link; master weights and optimizer states live in host "
            "memory, not counted per device")


def kernel_info(k: KernelPhysics) -> dict[str, Any]:
    """Kernel facts of a prediction shown beside it (which kernels, at what measured speed)."""
    shapes = len(k.gemm_table) + len(k.grouped_table)
    return {"silicon": k.silicon, "attn_family": k.attn_family, "elementwise_impl": k.elementwise_impl,
            "gemm_peak_fraction": k.gemm_peak_fraction, "fp8_recipe": k.fp8_recipe,
            "tp_overlap_rule": k.tp_overlap_rule, "grouped_fraction": k.grouped_fraction,
            "grouped_gemm": k.grouped_impl, "moe_dispatcher": k.dispatch.family, "experts_16bit": k.experts_16bit,
            "norm_passes": k.norm_passes, "rope_passes": k.rope_passes, "activation_passes": k.act_passes,
            **({"collectives_measured_here": k.link_measured_here} if k.host_bound else {}),
            **({"measured_gemm_shapes": shapes} if shapes else {})}


def as_float(x: Any) -> float:
    """A scalar result as a Python float (0-d arrays and numpy scalars included); NaN for an
    infinite one."""
    v = x if type(x) is float else float(x)
    return v if math.isfinite(v) else float("nan")


def breakdown(s: StepCosts) -> dict[str, float]:
    """Seconds per component of the step, in display order; they add up to the step time.
    Components that cost nothing are left out (forward and backward always shown)."""
    dp = s.dp
    parts = {
        "forward": s.forward_s, "backward": s.backward_s, "recompute": s.recompute_s,
        "tp comm": s.tp.comm.exposed_s, "ep dispatch": s.ep.dispatch.comm.exposed_s,
        "ep combine": s.ep.combine.comm.exposed_s,
        "fsdp all-gather (exposed)": dp.fsdp_allgather.exposed_s,
        "fsdp reduce-scatter (exposed)": dp.fsdp_reducescatter.exposed_s,
        "dp grad sync (exposed)": dp.grad_sync.exposed_s,
        "zero param all-gather (exposed)": dp.zero_allgather.exposed_s,
        "cp ring (exposed)": s.cp.exposed_s, "pp send/recv (exposed)": s.pp.sends.exposed_s,
        "pipeline bubble": s.pp.bubble_s, "optimizer": s.optimizer_s,
    }
    out = {name: as_float(v) for name, v in parts.items()}
    return {n: v for n, v in out.items() if v > 0 or n in ("forward", "backward")}


def compute_breakdown(s: StepCosts) -> dict[str, float]:
    """Compute seconds per op class; an MoE model's routed experts' grouped GEMMs and its router
    and permutations apart."""
    out = {"matmul": as_float(s.matmul_s), "attention": as_float(s.attention_s),
           "memory-bound ops": as_float(s.memory_bound_s), "kernel overhead": as_float(s.overhead_s),
           "optimizer": as_float(s.optimizer_s)}
    if s.stage.moe_frac != 0.0 or s.compute.layer.expert_fwd != 0.0:
        out["grouped GEMMs (routed experts)"] = as_float(s.grouped_gemm_s)
        out["router + permute/unpermute"] = as_float(s.routing_s)
    return out


def memory_breakdown_GiB(m: Memory) -> dict[str, float]:
    """Memory per device by category, GiB."""
    parts = {"weights": m.weights_bytes, "gradients": m.grads_bytes, "optimizer states": m.optimizer_bytes,
             "gathered params (fsdp)": m.gathered_bytes, "activations": m.activations_bytes,
             "logits": m.logits_bytes, "comm buffers": m.buffers_bytes, "framework reserve": m.reserve_bytes}
    return {name: as_float(v) / GiB for name, v in parts.items()}


MEMORY_EDGE_SHARE = 0.05
"""Share of the device memory a plan may exceed and still be called at the edge rather than out
of memory: the memory model's error on the published peaks it is checked against is a few percent
(tests/test_memory_model.py: torchtitan's Llama 3 8B on H100 and MI300X within 1.1% and 3.3%
of the logged reserved peak, a NeMo Llama 3 8B log on B200 3.4% above its reserved peak), and
NVIDIA ran Nemotron-4 340B on 128 H100 where it predicts 2.8% over (packaged row 73)."""

DISPATCHER_NAMES = {"nccl": "all-to-all (NCCL)", "deepep": "DeepEP", "hybrid-ep": "Hybrid-EP", "mori": "MORI-EP"}


def _dispatcher(w: Any) -> str:
    """The algorithm label of a workload's MoE dispatch and combine."""
    from trainperf.predict import stack_kernels
    from trainperf.predict.stacks import generation_of

    fam = w.moe_dispatcher or stack_kernels.for_stack(getattr(w, "stack", None), generation_of(w.hardware)).moe_dispatcher
    if fam == "nccl" and w.hardware.kind == "cpu":  # the same all_to_all_single call runs on gloo there
        return "all-to-all (gloo)"
    return DISPATCHER_NAMES[fam]


def cp_algorithm(fl: Any) -> str:
    """How a :class:`~trainperf.predict.step_model.context_parallel.Flavour` exchanges K/V, in words."""
    how = {"send-recv": "send/recv", "all-gather": "K/V all-gather", "all-to-all": "all-to-all by heads"}
    return f"{fl.name} ({how[fl.kv_exchange]}{', load-balanced' if fl.load_balance else ''})"


def collectives(w: Any, s: StepCosts, lay_cp: Any) -> list[Collective]:
    """Each kind of collective the step runs (those that take time), with its group and link;
    ``lay_cp``: the stack's context-parallel flavour (the layout's ``kernels.cp_flavour``)."""
    p, dp = w.plan, s.dp
    fs_label = "fsdp" if p.fsdp > 1 else "zero-3"
    rows: list[tuple[str, str, CommCost]] = [
        ("tp all-gather/reduce-scatter" if p.sequence_parallel else "tp all-reduce",
         "ring" + (" (async tp)" if w.async_tp else ""), s.tp.comm),
        ("ep dispatch", _dispatcher(w), s.ep.dispatch.comm),
        ("ep combine", _dispatcher(w), s.ep.combine.comm),
        (f"{fs_label} all-gather", "hierarchical ring", dp.fsdp_allgather),
        (f"{fs_label} reduce-scatter", "hierarchical ring", dp.fsdp_reducescatter),
        ("zero reduce-scatter" if (p.zero_stage in (1, 2) and p.fsdp == 1) else "dp all-reduce", "hierarchical ring",
         dp.grad_sync),
        ("zero param all-gather", "hierarchical ring", dp.zero_allgather),
        ("cp ring exchange" if lay_cp.ring else f"cp {lay_cp.kv_exchange}", cp_algorithm(lay_cp), s.cp),
        ("pp send/recv", "point-to-point", s.pp.sends),
    ]
    out = []
    for name, algo, c in rows:
        t = as_float(c.time_s)
        if t > 0:
            out.append(Collective(name, algo, link_name(as_float(c.group.nodes), w.hardware.kind),
                                  int(as_float(c.group.size)), as_float(c.bytes_per_device), t, as_float(c.exposed_s)))
    return out


def assemble(w: Any, s: StepCosts, k: Knobs, *, convention: str, train_tokens: float, lora_fraction: float,
             cp_flavour: Any) -> Prediction:
    """Build a :class:`Prediction` from the step model's costs (scalars); ``cp_flavour``: the
    stack's context-parallel flavour, which names the cp exchange."""
    step = as_float(s.step_time_s)
    parts, comp, colls = breakdown(s), compute_breakdown(s), collectives(w, s, cp_flavour)
    mem = memory_breakdown_GiB(s.memory)
    mem_total, capacity = as_float(s.memory.total_bytes) / GiB, as_float(s.memory.capacity_bytes) / GiB
    tp_ = throughput(w, step_time_s=step, convention=convention, train_tokens=train_tokens,
                     lora_fraction=lora_fraction)
    notes = list(w.notes)
    if w.plan.ep > 1 and as_float(s.ep.dispatch.comm.group.nodes) > 1:
        notes.append("the expert dispatch crosses scale-up domains: priced at the dispatcher's measured NIC "
                     "efficiency where the kernel data has it, else the NIC's point-to-point figure (docs/KERNELS.md)")
    if w.plan.ep > 1 and w.moe_imbalance == 1.0:
        notes.append("expert load taken as balanced (moe_imbalance 1.0): the busiest expert-parallel rank's "
                     "share over the mean can be stated (training.moe_imbalance)")
    if mem_total > capacity * (1.0 + MEMORY_EDGE_SHARE):
        notes.append(f"does not fit: {mem_total:.1f} GiB needed per device, {capacity:.1f} GiB "
                     f"available ({mem_total - capacity:.1f} GiB over)")
    elif mem_total > capacity:
        notes.append(f"at the edge of memory: {mem_total:.1f} GiB predicted per device of {capacity:.1f} GiB "
                     f"({100 * (mem_total / capacity - 1):.1f}% over, within the memory model's error on published "
                     "peaks): the plan may not run; the step time assumes it does")
    return Prediction(
        workload=w, step_time_s=step, breakdown=parts, compute_breakdown=comp,
        collectives=tuple(colls), memory_breakdown_GiB=mem, memory_per_device_GiB=mem_total,
        memory_capacity_GiB=capacity, tokens_per_s=tp_.tokens_per_s,
        tokens_per_s_per_device=tp_.tokens_per_s_per_device, tflops_per_device=tp_.tflops_per_device,
        mfu_pct=tp_.mfu_pct, hfu_pct=tp_.hfu_pct, convention=tp_.convention,
        peak_tflops=tp_.peak_tflops, days_to_train=tp_.days_to_train, train_tokens=train_tokens,
        bottleneck=_bottleneck(step, parts, comp, colls, tp_.mfu_pct), knobs=k, notes=tuple(notes),
        extra={"microbatch_s": as_float(s.microbatch_s), "grad_accum_steps": w.grad_accum_steps},
    )


def _bottleneck(step: float, breakdown: Mapping[str, float], comp: Mapping[str, float],
                colls: list[Collective], mfu: float) -> str:
    """One sentence naming what costs the most beyond useful compute."""
    cands: list[tuple[float, str]] = []
    for c in colls:
        if c.exposed_s > 0:
            cands.append((c.exposed_s, f"exposed {c.link} {c.name}"))
    for name, label in (("pipeline bubble", "pipeline bubble"), ("optimizer", "optimizer step"),
                        ("recompute", "activation recomputation")):
        if breakdown.get(name, 0.0) > 0:
            cands.append((breakdown[name], label))
    for name, label in (("memory-bound ops", "memory-bound ops (norms, activations, RoPE, loss)"),
                        ("kernel overhead", "kernel launch overhead"), ("attention", "attention kernels")):
        if comp.get(name, 0.0) > 0:
            cands.append((comp[name], label))
    if not cands or step <= 0:
        return "compute-bound"
    t, what = max(cands)
    share = 100.0 * t / step
    if share < 5.0:
        return f"compute-bound: matmuls take {100.0 * comp.get('matmul', 0.0) / step:.0f}% of the step (MFU {mfu:.1f}%)"
    return f"{what}: {share:.0f}% of the step"
