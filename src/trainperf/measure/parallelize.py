"""Parallelize the reference model with torch.distributed's own building blocks only.

The order is torchtitan's (``torchtitan/models/llama3/infra/parallelize.py``):

1. tensor + sequence parallel: DTensor ``parallelize_module`` with the Megatron column/row
   split of attention and MLP (Shoeybi et al. 2019) and, with ``sequence_parallel``, norms
   sharded along the sequence (Korthikanti et al. 2022);
2. activation checkpointing: ``none``; ``selective`` recomputes the attention core (Q.K^T,
   softmax, x V), which is what :func:`trainperf.accounting.flops.recompute_flops` counts;
   ``full`` recomputes each whole block from its input (``torch.utils.checkpoint``);
3. optional ``torch.compile`` of each block (in place, so parameter names do not change);
4. FSDP2 ``fully_shard`` over the data-parallel ranks, each block then the root, with
   ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``: fp32 master weights and
   optimizer state, bf16 compute, fp32 gradient reduction. ``dp`` replicas with ``fsdp = 1``
   are HSDP with a shard group of one (plain data parallel).

Without data parallelism (one process, or tensor parallel only) there is nothing to shard:
the mixed-precision policy is then ``torch.autocast`` with the same dtypes (fp32 weights,
bf16 matmuls), applied by the trainer (see :func:`autocast_dtype`).

Pipeline parallelism (``pp > 1``) first cuts the model into stages
(:mod:`trainperf.measure.pipeline`); the steps above then apply to each stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from trainperf.errors import SpecError
from trainperf.specs.workload import Workload

COMPUTE_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class ParallelSetup:
    """What :func:`parallelize` did, for the trainer and the run's metadata."""

    mesh: object | None
    """The DeviceMesh (dims ``dp_replicate``, ``dp_shard``, ``tp``), or None for one process."""
    dp_rank: int
    """This rank's index among the data-parallel ranks (which slice of the batch it reads)."""
    dp_size: int
    """Data-parallel ranks (``dp * fsdp``)."""
    fsdp: bool
    """Whether FSDP2 wraps the model (mixed precision then comes from its policy)."""
    description: str
    """One line: what was applied, in order."""
    stages: list = field(default_factory=list)
    """(stage index, module) pairs this rank holds; ``[(0, model)]`` without pipeline parallel."""
    pp_rank: int = 0
    pp_size: int = 1
    pp_group: object | None = None
    """The pipeline-parallel process group (None without pipeline parallel)."""


def check_plan(workload: Workload) -> None:
    """Raise SpecError for a plan the bench cannot run (before any process starts)."""
    plan, m = workload.plan, workload.model
    if plan.pp > 1:
        if m.tied_embeddings:
            raise SpecError("parallel.pp", plan.pp, "1 for a model with tied embeddings (embedding and head "
                            "live on different stages)")
        accum = workload.grad_accum_steps
        if accum < plan.pp:
            raise SpecError("training.global_batch", workload.global_batch,
                            f"at least pp={plan.pp} micro-batches per data-parallel rank "
                            f"(global_batch >= micro_batch*dp*pp = {workload.micro_batch * plan.data_parallel * plan.pp})")
        if plan.vpp > 1 and accum % plan.pp:
            raise SpecError("training.global_batch", workload.global_batch,
                            f"a number of micro-batches per rank divisible by pp={plan.pp} for interleaved 1F1B")
    if plan.cp > 1:
        raise SpecError("parallel.cp", plan.cp, "1 (context parallel is not implemented in the bench)")
    if plan.ep > 1:
        raise SpecError("parallel.ep", plan.ep, "1 (the bench model is dense)")
    if plan.tp > 1:
        if m.kv_heads % plan.tp:  # type: ignore[operator]
            raise SpecError("parallel.tp", plan.tp,
                            f"a divisor of kv_heads={m.kv_heads} for the bench model (it does not replicate kv heads)")
        if m.tied_embeddings:
            raise SpecError("parallel.tp", plan.tp, "1 for a model with tied embeddings (not implemented under TP)")
        if m.vocab % plan.tp:
            raise SpecError("parallel.tp", plan.tp, f"a divisor of vocab={m.vocab}")
    if workload.precision not in COMPUTE_DTYPES:
        raise SpecError("training.precision", workload.precision,
                        f"one of {', '.join(COMPUTE_DTYPES)} for the bench (fp16 needs loss scaling, "
                        "fp8 needs torchao; neither is implemented)")
    if workload.precision == "tf32" and workload.hardware.kind == "cpu":
        raise SpecError("training.precision", "tf32", "fp32 or bf16 on a CPU")


def autocast_dtype(workload: Workload, setup: ParallelSetup) -> torch.dtype | None:
    """The autocast dtype when FSDP's policy does not provide mixed precision, else None."""
    dtype = COMPUTE_DTYPES[workload.precision]
    if dtype == torch.float32 or setup.fsdp:
        return None
    return dtype


def build_mesh(workload: Workload, device_type: str):
    """``init_device_mesh`` of shape (dp, fsdp, tp); None in a single process."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return None
    from torch.distributed.device_mesh import init_device_mesh

    plan = workload.plan
    return init_device_mesh(device_type, (plan.pp, plan.dp or 1, plan.fsdp, plan.tp),
                            mesh_dim_names=("pp", "dp_replicate", "dp_shard", "tp"))


def apply_tp(model: nn.Module, tp_mesh, sequence_parallel: bool) -> None:
    """Megatron-style tensor parallel (+ sequence parallel) with DTensor, torchtitan's plan."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    from trainperf.measure.lora import lora_tp_plan

    sp = sequence_parallel
    top: dict = {}
    if model.tok_embeddings is not None:  # a pipeline stage may not hold it
        top["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(),
                                                output_layouts=Shard(1) if sp else Replicate())
    if model.output is not None:
        if sp:
            top["norm"] = SequenceParallel()
        top["output"] = ColwiseParallel(input_layouts=Shard(1) if sp else Replicate(),
                                        output_layouts=Replicate(), use_local_output=True)
    if top:
        parallelize_module(model, tp_mesh, top)
    act = Shard(1) if sp else Replicate()
    for block in model.layers:
        plan = {
            "attention": PrepareModuleInput(input_layouts=(act, None, None),
                                            desired_input_layouts=(Replicate(), None, None)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=act),
            "feed_forward": PrepareModuleInput(input_layouts=(act,), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=act),
        }
        if block.feed_forward.w3 is not None:
            plan["feed_forward.w3"] = ColwiseParallel()
        if sp:
            plan["attention_norm"] = SequenceParallel()
            plan["ffn_norm"] = SequenceParallel()
        parallelize_module(block, tp_mesh, lora_tp_plan(block, plan))  # LoRA wrappers: see measure.lora


def apply_ac(model: nn.Module, policy: str) -> None:
    """Set the checkpointing flags of the blocks (see the module docstring).

    The reference model implements ``none``, ``selective`` and ``full``; the other named
    policies of :mod:`trainperf.accounting.recompute` exist for prediction only."""
    if policy not in ("none", "selective", "full"):
        from trainperf.errors import SpecError

        raise SpecError("training.activation_checkpointing", policy,
                        "none, selective or full for a measured run (other policies are prediction-only)")
    for block in model.layers:
        block.checkpoint = policy == "full"
        block.attention.recompute_core = policy == "selective"


def apply_compile(model: nn.Module) -> None:
    """Compile each block in place (torchtitan compiles per block: repeated structure, one graph)."""
    for block in model.layers:
        block.compile()


def apply_fsdp(model: nn.Module, dp_mesh, precision: str, pipeline: bool = False) -> None:
    """FSDP2 per block, then the root; bf16 params / fp32 reduce for bf16 runs.

    Under pipeline parallel nothing is resharded after the forward (torchtitan's choice: the
    micro-batches' backwards come later and would all-gather again).
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dtype = COMPUTE_DTYPES[precision]
    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for block in model.layers:
        # The last block's parameters are needed right away by the backward: keep them gathered.
        fully_shard(block, mesh=dp_mesh, mp_policy=mp,
                    reshard_after_forward=not pipeline and block is not model.layers[-1])
    fully_shard(model, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=False)


def parallelize(model: nn.Module, workload: Workload, *, device_type: str = "cpu",
                compile: bool = False) -> ParallelSetup:
    """Split into pipeline stages (if pp > 1), then apply TP/SP, activation checkpointing,
    compile and FSDP2 to each stage in that order."""
    check_plan(workload)
    plan = workload.plan
    mesh = build_mesh(workload, device_type)
    done: list[str] = []
    stages: list = [(0, model)]
    pp_rank, pp_group = 0, None
    if mesh is not None and plan.pp > 1:
        from trainperf.measure.pipeline import split_stages

        pp_rank = mesh["pp"].get_local_rank()
        pp_group = mesh["pp"].get_group()
        stages = split_stages(model, pp_rank, plan.pp, plan.vpp)
        done.append(f"PP={plan.pp}" + (f" x vpp={plan.vpp}" if plan.vpp > 1 else "")
                    + f" ({plan.pp_schedule}, stages {', '.join(str(sid) for sid, _ in stages)} here)")
    for _, module in stages:
        if mesh is not None and plan.tp > 1:
            apply_tp(module, mesh["tp"], plan.sequence_parallel)
        if workload.activation_checkpointing != "none":
            apply_ac(module, workload.activation_checkpointing)
        if compile:
            apply_compile(module)
    if mesh is not None and plan.tp > 1:
        done.append(f"TP={plan.tp}" + (" +SP" if plan.sequence_parallel else ""))
    if workload.activation_checkpointing != "none":
        done.append(f"AC {workload.activation_checkpointing}")
    if compile:
        done.append("torch.compile per block and loss")
    dp_size = plan.data_parallel
    fsdp = False
    dp_rank = 0
    if mesh is not None and dp_size > 1:
        dp_mesh = mesh["dp_replicate", "dp_shard"] if (plan.dp or 1) > 1 else mesh["dp_shard"]
        for _, module in stages:
            apply_fsdp(module, dp_mesh, workload.precision, pipeline=plan.pp > 1)
        fsdp = True
        done.append(f"FSDP2 over {dp_size} ranks" + (f" (HSDP dp={plan.dp} x fsdp={plan.fsdp})"
                                                     if (plan.dp or 1) > 1 else "")
                    + f", params {workload.precision} / reduce fp32")
        rep = mesh["dp_replicate"].get_local_rank()
        shard = mesh["dp_shard"].get_local_rank()
        dp_rank = rep * plan.fsdp + shard
    if not fsdp and COMPUTE_DTYPES[workload.precision] != torch.float32:
        done.append(f"autocast {workload.precision} (fp32 master weights)")
    return ParallelSetup(mesh=mesh, dp_rank=dp_rank, dp_size=dp_size, fsdp=fsdp,
                         description=", ".join(done) or "single device, fp32", stages=stages,
                         pp_rank=pp_rank, pp_size=plan.pp, pp_group=pp_group)
