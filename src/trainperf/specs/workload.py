"""Workload: what is trained (ModelSpec), on what (Hardware x count), how (ParallelPlan, batch,
sequence, precision, activation checkpointing). The same type for every source: a bench run, a
parsed log, a published result and a prediction all carry one.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from trainperf.errors import SpecError
from trainperf.specs.hardware import PRECISIONS, Hardware
from trainperf.specs.lora import LoraSpec
from trainperf.specs.model import ModelSpec
from trainperf.specs.parallel import ParallelPlan

Checkpointing = Literal["none", "selective", "full"]
CHECKPOINTING: tuple[str, ...] = ("none", "selective", "full")
# Dtypes a CPU can train in with PyTorch; the rest are accelerator formats.
CPU_PRECISIONS: frozenset[str] = frozenset({"fp32", "bf16", "fp16"})


@dataclass(frozen=True)
class Workload:
    """A training run's full description, validated as a whole at construction."""

    model: ModelSpec
    """The network being trained."""
    hardware: Hardware
    """Device variant (one catalog entry, or a custom one)."""
    num_devices: int
    """Devices (GPUs, GCDs, TPU chips, CPU processes) taking part."""
    seq_len: int
    """Tokens per sequence."""
    global_batch: int
    """Sequences per optimizer step, over all data-parallel ranks."""
    micro_batch: int = 1
    """Sequences per device per forward/backward pass."""
    plan: ParallelPlan = field(default_factory=ParallelPlan)
    """Parallel degrees; ``dp`` is derived when omitted."""
    devices_per_node: int | None = None
    """Devices per node; ``None`` means the hardware's typical node (capped at num_devices)."""
    precision: str = "bf16"
    """Compute dtype of the matmuls (mixed precision keeps fp32 master weights)."""
    activation_checkpointing: Checkpointing = "none"
    """Recomputation policy: none, selective (attention core, Korthikanti et al.) or full."""
    lora: LoraSpec | None = None
    """LoRA fine-tune: the base is frozen and only these adapters train; None: full training."""
    notes: tuple[str, ...] = ()
    """Observations made while validating (e.g. how kv heads replicate under tp)."""

    def __post_init__(self) -> None:
        for name in ("num_devices", "seq_len", "global_batch", "micro_batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise SpecError(_field(name), v, "a positive integer")
        dpn = self.devices_per_node
        if dpn is None:
            dpn = min(self.hardware.devices_per_node, self.num_devices)
            object.__setattr__(self, "devices_per_node", dpn)
        if isinstance(dpn, bool) or not isinstance(dpn, int) or dpn <= 0:
            raise SpecError("hardware.devices_per_node", dpn, "a positive integer")
        if self.num_devices > dpn and self.num_devices % dpn:
            raise SpecError("hardware.num_devices", self.num_devices,
                            f"a multiple of devices_per_node={dpn} when it spans several nodes")
        if self.precision not in PRECISIONS:
            raise SpecError("training.precision", self.precision, f"one of {', '.join(PRECISIONS)}")
        if self.hardware.kind == "cpu":
            if self.precision not in CPU_PRECISIONS:
                raise SpecError("training.precision", self.precision,
                                f"one of {', '.join(sorted(CPU_PRECISIONS))} on a CPU")
        elif not self.hardware.supports(self.precision):
            have = ", ".join(p for p in PRECISIONS if self.hardware.supports(p))
            raise SpecError("training.precision", self.precision,
                            f"{self.hardware.id} supports {have}")
        if self.activation_checkpointing not in CHECKPOINTING:
            raise SpecError("training.activation_checkpointing", self.activation_checkpointing,
                            f"one of {', '.join(CHECKPOINTING)}")
        if self.lora is not None:
            self.lora.matrices(self.model)  # raises for targets this model does not have
        plan = self.plan.resolve(self.num_devices)
        object.__setattr__(self, "plan", plan)
        object.__setattr__(self, "notes", tuple(self.notes) + tuple(self._check_plan(plan)))

    def _check_plan(self, plan: ParallelPlan) -> list[str]:
        m, notes = self.model, []
        if plan.tp > 1:
            if m.heads % plan.tp:
                raise SpecError("parallel.tp", plan.tp, f"must divide heads={m.heads}")
            if m.kv_heads % plan.tp:  # type: ignore[operator]
                if plan.tp % m.kv_heads:  # type: ignore[operator]
                    raise SpecError("parallel.tp", plan.tp,
                                    f"must divide kv_heads={m.kv_heads} or be a multiple of it")
                notes.append(f"tp={plan.tp} > kv_heads={m.kv_heads}: each kv head is replicated on "
                             f"{plan.tp // m.kv_heads} tp ranks")
            if m.ffn_hidden % plan.tp:
                raise SpecError("parallel.tp", plan.tp, f"must divide ffn_hidden={m.ffn_hidden}")
            if plan.tp > self.devices_per_node:  # type: ignore[operator]
                notes.append(f"tp={plan.tp} spans nodes (devices_per_node={self.devices_per_node}): "
                             "tp traffic crosses the inter-node network")
        if plan.pp > 1:
            if plan.pp * plan.vpp > m.layers:
                raise SpecError("parallel.pp", plan.pp,
                                f"pp*vpp={plan.pp * plan.vpp} must be at most layers={m.layers}")
            if m.layers % (plan.pp * plan.vpp):
                notes.append(f"layers={m.layers} do not split evenly into pp*vpp={plan.pp * plan.vpp} "
                             "chunks: the largest stage sets the pace")
        if plan.cp > 1 and self.seq_len % plan.cp:
            raise SpecError("parallel.cp", plan.cp, f"must divide seq_len={self.seq_len}")
        if plan.ep > 1:
            if not m.is_moe:
                raise SpecError("parallel.ep", plan.ep, "1 for a dense model (ep applies to MoE layers)")
            if m.moe_experts % plan.ep:
                raise SpecError("parallel.ep", plan.ep, f"must divide moe_experts={m.moe_experts}")
            if (plan.data_parallel * plan.cp) % plan.ep:
                raise SpecError("parallel.ep", plan.ep,
                                f"must divide the data-parallel ranks dp*fsdp*cp={plan.data_parallel * plan.cp}")
        per_step = self.micro_batch * plan.data_parallel
        if self.global_batch % per_step:
            raise SpecError(
                "training.global_batch", self.global_batch,
                f"a multiple of micro_batch*dp*fsdp={self.micro_batch}*{plan.data_parallel}={per_step}"
                f" (e.g. {per_step * max(1, round(self.global_batch / per_step))})",
            )
        if plan.pp > 1 and self.grad_accum_steps < plan.pp:
            notes.append(f"only {self.grad_accum_steps} micro-batches for pp={plan.pp}: the pipeline "
                         "bubble dominates")
        return notes

    # --- derived quantities -----------------------------------------------------------------------
    @property
    def grad_accum_steps(self) -> int:
        """Micro-batches per data-parallel rank per optimizer step."""
        return self.global_batch // (self.micro_batch * self.plan.data_parallel)

    @property
    def tokens_per_step(self) -> int:
        """Tokens processed per optimizer step, all ranks together."""
        return self.global_batch * self.seq_len

    @property
    def num_nodes(self) -> int:
        return math.ceil(self.num_devices / self.devices_per_node)  # type: ignore[operator]

    def replace(self, **changes: Any) -> Workload:
        """A validated copy with some fields changed (the plan's derived dp is recomputed)."""
        if "num_devices" in changes and "plan" not in changes and self.plan.dp is not None:
            changes["plan"] = dataclasses.replace(self.plan, dp=None)
        changes.setdefault("notes", ())
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        return (f"{self.model.name} on {self.num_devices}x {self.hardware.id} "
                f"({self.plan.describe()}), seq {self.seq_len}, global batch {self.global_batch}, "
                f"micro batch {self.micro_batch}, {self.precision}, AC {self.activation_checkpointing}"
                + (f", {self.lora.describe()}" if self.lora is not None else ""))


def _field(name: str) -> str:
    return {"num_devices": "hardware.num_devices"}.get(name, f"training.{name}")
