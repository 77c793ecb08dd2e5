"""``predict(workload)``: a :class:`Prediction` of step time, throughput and memory, explained.

The arithmetic lives in :mod:`trainperf.predict.core` (pure functions of numbers); this module
checks what a plan needs beyond the workload's own validation, picks the efficiency knobs,
and turns the core's numbers into a report: breakdown per component, each collective with its
bytes, link, algorithm and hidden fraction, memory by category, fit, bottleneck, and the
throughput figures of :func:`trainperf.accounting.throughput.throughput` (MFU/HFU under a named
convention and peak).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainperf.accounting.conventions import DEFAULT_CONVENTION
from trainperf.accounting.throughput import throughput
from trainperf.errors import InputFileError, SpecError
from trainperf.predict import core
from trainperf.predict.efficiency import KNOB_NAMES, Knobs, knobs_from_mapping
from trainperf.predict.memory import GiB
from trainperf.specs.datafiles import parse_user_data, read_user_text

BREAKDOWN_KEYS: tuple[tuple[str, str], ...] = (
    ("forward", "forward_s"),
    ("backward", "backward_s"),
    ("recompute", "recompute_s"),
    ("tp comm", "tp_s"),
    ("ep all-to-all", "ep_s"),
    ("fsdp all-gather (exposed)", "fsdp_allgather_exposed_s"),
    ("fsdp reduce-scatter (exposed)", "fsdp_reducescatter_exposed_s"),
    ("dp grad sync (exposed)", "dp_grad_exposed_s"),
    ("zero param all-gather (exposed)", "zero_allgather_exposed_s"),
    ("cp ring (exposed)", "cp_exposed_s"),
    ("pp send/recv (exposed)", "pp_exposed_s"),
    ("pipeline bubble", "bubble_s"),
    ("optimizer", "optimizer_s"),
)
"""Components of the step, in display order; they sum to the step time."""

MEMORY_KEYS: tuple[tuple[str, str], ...] = (
    ("weights", "mem_weights"),
    ("gradients", "mem_grads"),
    ("optimizer states", "mem_optimizer"),
    ("gathered params (fsdp)", "mem_gathered"),
    ("activations", "mem_activations"),
    ("logits", "mem_logits"),
    ("comm buffers", "mem_buffers"),
    ("framework reserve", "mem_reserve"),
)


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
            "fits": self.fits, "memory_over_GiB": self.memory_over_GiB,
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
    if p.ep > 1 and not m.is_moe:
        raise SpecError("parallel.ep", p.ep, "1 for a dense model")


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
    k = stack_knobs(w.hardware, stack if stack is not None else getattr(w, "stack", None))
    if calibration:
        for key in (f"vendor:{w.hardware.vendor}", w.hardware.id):
            if key in calibration:
                k = knobs_from_mapping(k, calibration[key], f"calibration:{key}")
    return k


# --------------------------------------------------------------------------------- predict
def predict(w: Any, *, knobs: Knobs | None = None,
            calibration: Mapping[str, Mapping[str, float]] | None = None,
            convention: str = DEFAULT_CONVENTION, train_tokens: float = 1e12,
            trainable_fraction: float = 1.0, stack: Any = None) -> Prediction:
    """Predict one training step of workload ``w``.

    ``trainable_fraction`` < 1 models LoRA-style fine-tuning: frozen weights need no weight
    gradients, gradient buffers or optimizer states (compute of the activation gradients stays).
    """
    from trainperf.predict.stack_capabilities import apply_stack

    w = apply_stack(w)
    check_plan(w)
    if not 0.0 < trainable_fraction <= 1.0:
        raise SpecError("trainable_fraction", trainable_fraction, "a fraction in (0, 1]")
    k = resolve_knobs(w, calibration, knobs, stack)
    feats = core.workload_features(w, trainable_fraction)
    r = core.step_core(feats, k.values())
    p = assemble(w, r, k, convention=convention, train_tokens=train_tokens,
                 lora_fraction=trainable_fraction if trainable_fraction < 1 else 0.0)
    p.extra["kernels"] = {key: feats[key] for key in KERNEL_INFO}
    from trainperf.predict.intervals import interval_for

    st = stack if stack is not None else getattr(w, "stack", None)
    name = getattr(st, "name", st)
    return dataclasses.replace(p, interval=interval_for(p.step_time_s, w, str(name) if name else None))


KERNEL_INFO: tuple[str, ...] = ("silicon", "attn_family", "elementwise_impl", "gemm_peak_fraction", "fp8_recipe",
                                "tp_overlap_rule", "grouped_fraction")
"""Kernel facts of a prediction shown beside it (which kernels, at what measured speed)."""


def _f(x: Any) -> float:
    return core.as_float(x)


def assemble(w: Any, r: Mapping[str, Any], k: Knobs, *, convention: str = DEFAULT_CONVENTION,
             train_tokens: float = 1e12, lora_fraction: float = 0.0) -> Prediction:
    """Build a :class:`Prediction` from :func:`core.step_core`'s numbers (scalars)."""
    step = _f(r["step_time_s"])
    breakdown = {name: _f(r[key]) for name, key in BREAKDOWN_KEYS}
    breakdown = {n: v for n, v in breakdown.items() if v > 0 or n in ("forward", "backward")}
    comp = {"matmul": _f(r["matmul_s"]), "attention": _f(r["attention_s"]),
            "memory-bound ops": _f(r["memory_bound_s"]), "kernel overhead": _f(r["overhead_s"]),
            "optimizer": _f(r["optimizer_s"])}
    p = w.plan
    colls = []

    def add(name, algo, nodes_key, size, bytes_key, time_key, exp_key):
        t = _f(r[time_key])
        if t > 0:
            colls.append(Collective(name, algo, core.comms.link_name(_f(r[nodes_key]), w.hardware.kind), int(size),
                                    _f(r[bytes_key]), t, _f(r[exp_key])))

    tp_name = "tp all-gather/reduce-scatter" if p.sequence_parallel else "tp all-reduce"
    add(tp_name, "ring" + (" (async tp)" if w.async_tp else ""), "tp_nodes", p.tp, "tp_bytes",
        "tp_total_s", "tp_s")
    add("ep all-to-all", "pairwise", "ep_nodes", p.ep, "ep_bytes", "ep_s", "ep_s")
    fs_label = "fsdp" if p.fsdp > 1 else "zero-3"
    add(f"{fs_label} all-gather", "hierarchical ring", "fsdp_nodes", _f(r["fsdp_degree"]),
        "fsdp_allgather_bytes", "fsdp_allgather_s", "fsdp_allgather_exposed_s")
    add(f"{fs_label} reduce-scatter", "hierarchical ring", "fsdp_nodes", _f(r["fsdp_degree"]),
        "fsdp_reducescatter_bytes", "fsdp_reducescatter_s", "fsdp_reducescatter_exposed_s")
    dp_name = "zero reduce-scatter" if (p.zero_stage in (1, 2) and p.fsdp == 1) else "dp all-reduce"
    add(dp_name, "hierarchical ring", "dp_nodes", p.dp or 1, "dp_grad_bytes", "dp_grad_s", "dp_grad_exposed_s")
    add("zero param all-gather", "hierarchical ring", "dp_nodes", p.dp or 1, "dp_grad_bytes",
        "zero_allgather_s", "zero_allgather_exposed_s")
    add("cp ring exchange", "ring (send/recv)", "cp_nodes", p.cp, "cp_bytes", "cp_s", "cp_exposed_s")
    add("pp send/recv", "point-to-point", "pp_nodes", p.pp, "pp_bytes", "pp_s", "pp_exposed_s")

    mem = {name: _f(r[key]) / GiB for name, key in MEMORY_KEYS}
    mem_total = _f(r["mem_total"]) / GiB
    capacity = _f(r["mem_capacity"]) / GiB
    tp_ = throughput(w, step_time_s=step, convention=convention, train_tokens=train_tokens,
                     lora_fraction=lora_fraction)
    notes = list(w.notes)
    if p.ep > 1 and _f(r["ep_nodes"]) > 1:
        notes.append("the expert all-to-all crosses nodes: no all-to-all across nodes is measured, so it is "
                     "priced from all-reduce measurements, likely on the slow side (docs/KERNELS.md)")
    if mem_total > capacity:
        notes.append(f"does not fit: {mem_total:.1f} GiB needed per device, {capacity:.1f} GiB "
                     f"available ({mem_total - capacity:.1f} GiB over)")
    bottleneck = _bottleneck(step, breakdown, comp, colls, tp_.mfu_pct)
    return Prediction(
        workload=w, step_time_s=step, breakdown=breakdown, compute_breakdown=comp,
        collectives=tuple(colls), memory_breakdown_GiB=mem, memory_per_device_GiB=mem_total,
        memory_capacity_GiB=capacity, tokens_per_s=tp_.tokens_per_s,
        tokens_per_s_per_device=tp_.tokens_per_s_per_device, tflops_per_device=tp_.tflops_per_device,
        mfu_pct=tp_.mfu_pct, hfu_pct=tp_.hfu_pct, convention=tp_.convention,
        peak_tflops=tp_.peak_tflops, days_to_train=tp_.days_to_train, train_tokens=train_tokens,
        bottleneck=bottleneck, knobs=k, notes=tuple(notes),
        extra={"microbatch_s": _f(r["microbatch_s"]), "grad_accum_steps": w.grad_accum_steps},
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
    if comp.get("memory-bound ops", 0.0) > 0:
        cands.append((comp["memory-bound ops"], "memory-bound ops (norms, activations, RoPE, loss)"))
    if comp.get("kernel overhead", 0.0) > 0:
        cands.append((comp["kernel overhead"], "kernel launch overhead"))
    if comp.get("attention", 0.0) > 0:
        cands.append((comp["attention"], "attention kernels"))
    if not cands or step <= 0:
        return "compute-bound"
    t, what = max(cands)
    share = 100.0 * t / step
    if share < 5.0:
        return f"compute-bound: matmuls take {100.0 * comp.get('matmul', 0.0) / step:.0f}% of the step (MFU {mfu:.1f}%)"
    return f"{what}: {share:.0f}% of the step"
