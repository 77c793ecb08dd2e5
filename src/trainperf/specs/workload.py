"""Workload: what is trained (ModelSpec), on what (Hardware x count), how (ParallelPlan, batch,
sequence, precision, activation checkpointing). The same type for every source: a bench run, a
parsed log, a published result and a prediction all carry one.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainperf.errors import SpecError
from trainperf.specs.bounds import BENCH_THREADS, DEVICES_PER_NODE, WORKLOAD_FIELD_BOUNDS
from trainperf.specs.checkpointing import framework_policy, get_policy
from trainperf.specs.hardware import PRECISIONS, Hardware
from trainperf.specs.model import ModelSpec
from trainperf.specs.parallel import ParallelPlan

if TYPE_CHECKING:  # imported where a workload has adapters (most have none)
    from trainperf.specs.lora import LoraSpec

FP8_RECIPES: tuple[str, ...] = ("tensorwise", "rowwise", "delayed", "blockwise", "mxfp8")
"""FP8 scaling recipes (torchtitan/torchao ``tensorwise`` and ``rowwise``; Transformer Engine ``delayed``)."""
# Dtypes a CPU can train in with PyTorch; the rest are accelerator formats.
CPU_PRECISIONS: frozenset[str] = frozenset({"fp32", "bf16", "fp16"})
# ...and fp8: torchao's Float8 linears run on a CPU through torch._scaled_mm's reference kernel
# (the bench's correctness runs); its peak is the calibrated _scaled_mm rate, never assumed.
CPU_TRAINABLE: frozenset[str] = CPU_PRECISIONS | {"fp8"}
MOE_DISPATCHERS: tuple[str, ...] = ("nccl", "deepep", "hybrid-ep", "mori")
"""Token dispatch/combine kernel families (:data:`trainperf.predict.kernels.expert_dispatch.FAMILIES`)."""
BENCH_STACK = "trainperf-bench"
"""The stack profile of ``trainperf bench`` (:mod:`trainperf.measure`), which a bench run's
``workload.toml`` names (:func:`trainperf.measure.parallelize.as_run`)."""


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
    threads_per_device: int = 0
    """A CPU run's intra-op threads per process (``trainperf bench --threads``): the predictor reads
    this CPU's measurements made with as many; 0 (the default) means the cores shared out among
    the node's processes, as the bench does without ``--threads``. Only on a CPU."""
    precision: str = "bf16"
    """Compute dtype of the matmuls (mixed precision keeps fp32 master weights)."""
    activation_checkpointing: str = "none"
    """Recomputation policy by name: none, selective (attention core, Korthikanti et al.), full,
    full:K (K layers per model chunk), full-every:N, selective-op (torchtitan per-op SAC),
    minimal, minimal_flash, minimal_offloaded, save_dot_with_context_except_mlp,
    save_dot_except_mlpwi, save_dot_except_mlp, save_qkv_proj, qkv_proj_offloaded, save_out_proj,
    custom:NAME=WHERE (MaxText remat policies), selective:MODULES (Megatron-Core recompute modules);
    see :mod:`trainperf.specs.checkpointing`."""
    stack: str = "generic"
    """Software stack the run uses: a profile name (``megatron-core``, ``megatron-lm-2021``,
    ``maxtext``, ``torchtitan``, ``llm-foundry``, ``deepspeed``, ``paxml``, ``trainperf-bench``:
    trainperf's own bench, ``generic``) or a profile file (``trainperf.predict.stacks``)."""
    compile: bool = False
    """The model is compiled (torch.compile / a fused graph): memory-bound ops run at the silicon's
    measured compiled bandwidth (kernel physics) and the profile's ``compile_overhead_factor``
    scales the per-kernel overhead."""
    async_tp: bool = False
    """Asynchronous tensor parallelism (torchtitan async TP, Megatron TP comm overlap): the
    profile's ``async_tp_overlap`` fraction of the TP collectives hides behind GEMMs. Needs tp > 1."""
    fp8_recipe: str | None = None
    """FP8 scaling recipe: ``tensorwise`` (dynamic per-tensor), ``rowwise`` (per-row scales) or
    ``delayed`` (amax history, Transformer Engine), ``blockwise`` or ``mxfp8``; ``None``: not
    stated (the stack's own recipe, ``[kernels] fp8_recipe`` of its profile). The recipe's
    quantisation cost on the silicon is kernel physics (:mod:`trainperf.predict.kernels.fp8`).
    Only with precision fp8 or fp4."""
    moe_dispatcher: str | None = None
    """How an MoE model's tokens reach their experts and come back: ``nccl`` (an all-to-all of
    ``topk`` copies per token: Megatron-Core's ``alltoall`` dispatcher, torchtitan), ``deepep``
    (DeepEP normal kernels: Megatron-Core's ``flex`` dispatcher), ``hybrid-ep`` (NVIDIA Hybrid-EP)
    or ``mori`` (AMD MORI-EP); ``None``: the stack's own (``[kernels] moe_dispatcher`` of its
    profile). Their measured speed is kernel physics (:mod:`trainperf.predict.kernels.expert_dispatch`)."""
    moe_imbalance: float = 1.0
    """Tokens the busiest expert-parallel rank receives over the mean (>= 1): the slowest rank's
    routed-expert GEMMs, permutations and all-to-all traffic scale by it. 1.0 (the default) takes
    the load as balanced, what an auxiliary loss or DeepSeek's bias balancing aims at; a measured
    value can be stated (the bench's ``moe_imbalance`` is max / mean per expert, an upper bound of
    the per-rank figure when a rank holds several experts)."""
    offload_optimizer: bool = False
    """The optimizer lives on the host: fp32 master weights and optimizer states in host memory,
    the optimizer step on the host CPU, gradients copied to the host and updated 16-bit weights
    back (DeepSpeed ZeRO-Offload ``offload_optimizer: {device: cpu}``, Megatron-Core
    ``--optimizer-cpu-offload``). The weights stay on the device (ZeRO-Infinity's parameter
    offload is not modelled). Needs a device other than a CPU, with its host link's bandwidth
    (``host_link_GB_per_s`` of the hardware)."""
    lora: LoraSpec | None = None
    """LoRA fine-tune: the base is frozen and only these adapters train; None: full training."""
    notes: tuple[str, ...] = field(default=(), compare=False)
    """Observations made while validating (e.g. how kv heads replicate under tp, a defaulted
    seq_len). Derived messages, not part of what is trained: left out of equality."""

    def __post_init__(self) -> None:
        for name in ("num_devices", "seq_len", "global_batch", "micro_batch"):  # before any work
            WORKLOAD_FIELD_BOUNDS[_field(name)].check(_field(name), getattr(self, name))
        dpn = self.devices_per_node
        if dpn is None:
            dpn = min(self.hardware.devices_per_node, self.num_devices)
            object.__setattr__(self, "devices_per_node", dpn)
            note = cpu_machines_note(self.hardware.kind, self.num_devices, dpn)
            if note:
                object.__setattr__(self, "notes", (*self.notes, note))
        DEVICES_PER_NODE.check("hardware.devices_per_node", dpn)
        if self.hardware.kind == "cpu":
            self._note_shared_cores(dpn)
        if self.num_devices > dpn and self.num_devices % dpn:
            raise SpecError("hardware.num_devices", self.num_devices,
                            f"a multiple of devices_per_node={dpn} when it spans several nodes")
        self._check_threads()
        if self.precision not in PRECISIONS:
            raise SpecError("training.precision", self.precision, f"one of {', '.join(PRECISIONS)}")
        if self.hardware.kind == "cpu":
            if self.precision not in CPU_TRAINABLE:
                raise SpecError("training.precision", self.precision,
                                f"one of {', '.join(sorted(CPU_TRAINABLE))} on a CPU")
        elif not self.hardware.supports(self.precision):
            have = ", ".join(p for p in PRECISIONS if self.hardware.supports(p))
            raise SpecError("training.precision", self.precision,
                            f"{self.hardware.id} supports {have}")
        # a framework's own name written out (torchtitan:selective); a stack's plain names
        # (selective under torchtitan) are read where the user gives both, workload_from_dict
        ac, mapping = framework_policy(self.activation_checkpointing)
        pol = get_policy(ac)  # raises SpecError naming the valid policies
        if pol.name != self.activation_checkpointing:  # one spelling: a framework's own name, module order
            object.__setattr__(self, "activation_checkpointing", pol.name)
        if mapping:
            object.__setattr__(self, "notes", (*self.notes, f"activation checkpointing: {mapping}"))
        for name in ("compile", "async_tp", "offload_optimizer"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"training.{name}", getattr(self, name), "true or false")
        self._check_offload()
        if self.fp8_recipe is not None:
            if self.fp8_recipe not in FP8_RECIPES:
                raise SpecError("training.fp8_recipe", self.fp8_recipe, f"one of {', '.join(FP8_RECIPES)}")
            if self.precision not in ("fp8", "fp4"):
                raise SpecError("training.fp8_recipe", self.fp8_recipe,
                                f"only with precision fp8 or fp4 (precision is {self.precision})")
        self._check_moe()
        if self.lora is not None:
            self.lora.matrices(self.model)  # raises for targets this model does not have
        plan = self.plan.resolve(self.num_devices)
        object.__setattr__(self, "plan", plan)
        object.__setattr__(self, "notes", tuple(self.notes) + tuple(self._check_plan(plan)))

    def _note_shared_cores(self, per_node: int) -> None:
        """On this machine's CPU, more processes x threads than cores: noted (predict does not model
        their taking turns)."""
        from trainperf.specs.cpu_calibration import shared_cores_note, threads_per_process

        threads = self.threads_per_device or threads_per_process(per_node)
        note = shared_cores_note(per_node, threads)
        if note:
            object.__setattr__(self, "notes", (*self.notes, note))

    def _check_threads(self) -> None:
        """``threads_per_device`` is 0 or a thread count within the bench's bound, on a CPU only."""
        n = self.threads_per_device
        if n == 0 and not isinstance(n, bool):
            return
        BENCH_THREADS.check("hardware.threads_per_device", n)
        if self.hardware.kind != "cpu":
            raise SpecError("hardware.threads_per_device", n,
                            f"0 or absent on {self.hardware.id} (threads per process are a CPU run's)")

    def _check_offload(self) -> None:
        check_offload(self.hardware, self.offload_optimizer)

    def _check_moe(self) -> None:
        """``moe_dispatcher`` is a known family, ``moe_imbalance`` a finite factor >= 1 (at most the
        experts a token could crowd onto one rank: all of them)."""
        if self.moe_dispatcher is not None and self.moe_dispatcher not in MOE_DISPATCHERS:
            raise SpecError("training.moe_dispatcher", self.moe_dispatcher, f"one of {', '.join(MOE_DISPATCHERS)}")
        f = self.moe_imbalance
        if isinstance(f, bool) or not isinstance(f, int | float) or not math.isfinite(f) or not 1.0 <= f <= 1e3:
            raise SpecError("training.moe_imbalance", f, "a number from 1 (balanced) to 1000")
        object.__setattr__(self, "moe_imbalance", float(f))

    def _check_plan(self, plan: ParallelPlan) -> list[str]:
        """The resolved plan fits the model, devices and batch; notes on what it costs."""
        notes = self._check_tp(plan) + self._check_pp(plan)
        if plan.cp > 1 and self.seq_len % plan.cp:
            raise SpecError("parallel.cp", plan.cp, f"must divide seq_len={self.seq_len}")
        self._check_expert_grid(plan)
        if self.async_tp and plan.tp == 1:
            raise SpecError("training.async_tp", True, "requires tp > 1")
        if plan.pp > 1:
            plan.stage_layers(self.model.layers)  # raises when the uneven split does not add up
        per_step = self.micro_batch * plan.data_parallel
        if self.global_batch % per_step:
            raise SpecError(
                "training.global_batch", self.global_batch,
                f"a multiple of micro_batch*dp*fsdp={self.micro_batch}*{plan.data_parallel}={per_step}"
                f" (e.g. {per_step * max(1, round(self.global_batch / per_step))})",
            )
        if plan.pp > 1 and plan.pp_schedule in ("dualpipe", "dualpipev") and self.grad_accum_steps < 2 * plan.pp:
            raise SpecError("parallel.pp_schedule", plan.pp_schedule,
                            f"at least 2*pp={2 * plan.pp} micro-batches a step (DualPipe's num_chunks >= 2 * "
                            f"num_ranks; DualPipeV's, one per stage); global_batch / (micro_batch*dp*fsdp) gives "
                            f"{self.grad_accum_steps}")
        if plan.pp > 1 and self.grad_accum_steps < plan.pp:
            notes.append(f"only {self.grad_accum_steps} micro-batches for pp={plan.pp}: the pipeline "
                         "bubble dominates")
        return notes

    def _check_tp(self, plan: ParallelPlan) -> list[str]:
        """``tp`` divides the heads and MLP width; notes on replicated kv heads and a tp wider
        than the scale-up domain."""
        m, notes = self.model, []
        if plan.tp > 1:
            if m.heads % plan.tp:
                raise SpecError("parallel.tp", plan.tp, f"must divide heads={m.heads}")
            assert m.kv_heads is not None  # ModelSpec.__post_init__ fills it from heads
            if m.kv_heads % plan.tp:
                if plan.tp % m.kv_heads:
                    raise SpecError("parallel.tp", plan.tp,
                                    f"must divide kv_heads={m.kv_heads} or be a multiple of it")
                notes.append(f"tp={plan.tp} > kv_heads={m.kv_heads}: each kv head is replicated on "
                             f"{plan.tp // m.kv_heads} tp ranks")
            if m.ffn_hidden % plan.tp:
                raise SpecError("parallel.tp", plan.tp, f"must divide ffn_hidden={m.ffn_hidden}")
            if m.mamba_layers and m.mamba_groups % plan.tp:
                raise SpecError("parallel.tp", plan.tp, f"must divide mamba_groups={m.mamba_groups} "
                                "(Megatron-Core splits the Mamba-2 B and C projections by group)")
            domain = self.hardware.scale_up_domain or self.devices_per_node
            if plan.tp > domain:  # type: ignore[operator]
                notes.append(f"tp={plan.tp} spans nodes beyond its NVLink/xGMI domain ({domain} devices): "
                             "tp traffic crosses the inter-node network")
        return notes

    def _check_pp(self, plan: ParallelPlan) -> list[str]:
        """``pp * vpp`` model chunks fit in the layers; a note when they split unevenly."""
        m, notes = self.model, []
        if plan.pp > 1:
            # Megatron's embedding and loss may each take a layer slot of a model chunk
            slots = int(plan.account_for_embedding_in_pipeline_split) + int(plan.account_for_loss_in_pipeline_split)
            if plan.pp * plan.vpp > m.layers + slots:
                what = f"layers={m.layers}" + (f" + {slots} embedding/loss slot(s)" if slots else "")
                raise SpecError("parallel.pp", plan.pp, f"pp*vpp={plan.pp * plan.vpp} must be at most {what}")
            uneven = (plan.first_stage_layers is not None or plan.last_stage_layers is not None
                      or plan.account_for_embedding_in_pipeline_split or plan.account_for_loss_in_pipeline_split)
            if m.layers % (plan.pp * plan.vpp) and not uneven:
                notes.append(f"layers={m.layers} do not split evenly into pp*vpp={plan.pp * plan.vpp} "
                             "chunks: the largest stage sets the pace")
        return notes

    def _check_expert_grid(self, plan: ParallelPlan) -> None:
        """``ep`` and ``etp`` only for an MoE model, dividing its experts and expert width, and the
        expert grid fits the dense one."""
        m = self.model
        if plan.ep > 1:
            if not m.is_moe:
                raise SpecError("parallel.ep", plan.ep, "1 for a dense model (ep applies to MoE layers)")
            if m.moe_experts % plan.ep:
                raise SpecError("parallel.ep", plan.ep, f"must divide moe_experts={m.moe_experts}")
        if plan.etp is not None and plan.etp != plan.tp:
            if not m.is_moe:
                raise SpecError("parallel.etp", plan.etp, "omitted (or equal to tp) for a dense model")
            if m.moe_expert_ffn % plan.etp:  # type: ignore[operator]
                raise SpecError("parallel.etp", plan.etp, f"must divide moe_expert_ffn={m.moe_expert_ffn}")
        # MoE parallel folding (Megatron-Core): the expert grid etp x ep x edp covers the same
        # devices as tp x cp x dp x fsdp; with etp = tp this is "ep divides dp*fsdp*cp".
        dense_grid = plan.tp * plan.cp * plan.data_parallel
        if dense_grid % (plan.ep * plan.expert_tp):
            raise SpecError("parallel.ep", plan.ep,
                            f"ep*etp={plan.ep}*{plan.expert_tp} must divide tp*cp*dp*fsdp={dense_grid}")

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


def check_offload(hw: Any, on: Any) -> None:
    """``training.offload_optimizer`` is a bool, and an offloaded optimizer has a host apart from
    the device and a host link to copy over (:attr:`Workload.offload_optimizer`)."""
    if not isinstance(on, bool):
        raise SpecError("training.offload_optimizer", on, "true or false")
    if not on:
        return
    if hw.kind == "cpu":
        raise SpecError("training.offload_optimizer", True,
                        "false on a CPU device (its optimizer already runs in host memory)")
    if not hw.host_link_GB_per_s:
        raise SpecError("hardware.host_link_GB_per_s", 0,
                        f"the device-host copy bandwidth in GB/s, which offload_optimizer needs and the catalog "
                        f"does not state for {hw.id} (give it in [hardware], next to device = \"{hw.id}\")")


def cpu_machines_note(kind: str, num_devices: int, devices_per_node: int) -> str | None:
    """What ``num_devices`` CPU devices at the catalog's one per node mean, said when nobody
    stated the devices per node: a CPU device is one training process with its machine's cores
    (``[devices.cpu]``), so N of them are N machines, while ``bench --nproc N`` runs N processes
    on one machine, each with its share of the cores (and writes ``devices_per_node = N``)."""
    if kind != "cpu" or num_devices <= 1 or devices_per_node != 1:
        return None
    return (f"{num_devices} cpu devices at one per node: {num_devices} machines, each process with all of its "
            f"machine's cores; for {num_devices} processes on one machine, as `bench --nproc {num_devices}` runs "
            f"them (each with its share of the cores), give --devices-per-node {num_devices}")
