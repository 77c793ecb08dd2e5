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

Float8 training (``precision = "fp8"``) converts the linears to torchao's ``Float8Linear``
before all of this (:mod:`trainperf.measure.fp8`), as torchtitan's model converters do.

Expert parallelism (``ep > 1``, MoE models) follows torchtitan's layout: the ``ep`` ranks of an
expert group are consecutive data-parallel ranks, each holding ``experts / ep`` experts; the
routed experts are then sharded by FSDP2 over the ``dp * fsdp / ep`` ranks that hold the same
experts (their gradients divided by the whole data-parallel size, torchtitan's
``set_gradient_divide_factor``), everything else over all data-parallel ranks.

Context parallelism (``cp > 1``) shards each sequence over ``cp`` ranks
(:mod:`trainperf.measure.context_parallel`); parameters are sharded over ``dp x fsdp x cp``
(torchtitan's ``dp_shard_cp`` mesh), so the cp ranks' gradients are averaged too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from trainperf.errors import SpecError
from trainperf.specs.workload import BENCH_STACK, Workload

COMPUTE_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp8": torch.bfloat16}
"""The dtype of the non-fp8 work per precision; fp8 runs its other ops in bf16 (torchao's Float8
training is bf16 mixed precision plus fp8 linears), or fp32 on a CPU without native bf16."""


def compute_dtype(precision: str, fp8_base: str | None = None) -> torch.dtype:
    """The autocast / FSDP parameter dtype of a run; ``fp8_base`` overrides fp8's bf16."""
    if precision == "fp8" and fp8_base:
        return COMPUTE_DTYPES[fp8_base]
    return COMPUTE_DTYPES[precision]


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
    ep_group: object | None = None
    """The expert-parallel process group (None without expert parallel)."""
    ep_size: int = 1
    cp_mesh: object | None = None
    """The 1-D context-parallel DeviceMesh (None without context parallel)."""


def check_plan(workload: Workload) -> None:
    """Raise SpecError for a plan the bench cannot run (before any process starts)."""
    plan, m = workload.plan, workload.model
    if plan.pp > 1:
        _check_pipeline(workload)
    if plan.cp > 1:
        _check_context_parallel(workload)
    if plan.ep > 1 or m.is_moe:
        _check_experts(workload)
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
                        "which is not implemented)")
    if workload.precision == "tf32" and workload.hardware.kind == "cpu":
        raise SpecError("training.precision", "tf32", "fp32 or bf16 on a CPU")
    if workload.precision == "fp8":
        from trainperf.measure.fp8 import check_recipe

        check_recipe(workload.fp8_recipe)


def _check_pipeline(workload: Workload) -> None:
    plan, m = workload.plan, workload.model
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


def _check_context_parallel(workload: Workload) -> None:
    """Ring attention with causal load balancing cuts each sequence into ``2 cp`` chunks."""
    plan = workload.plan
    if workload.seq_len % (2 * plan.cp):
        raise SpecError("parallel.cp", plan.cp, f"a degree whose 2*cp divides seq_len={workload.seq_len} "
                        "(causal load balancing gives each rank two chunks of the sequence)")
    for name, degree in (("pp", plan.pp), ("tp", plan.tp), ("ep", plan.ep)):
        if degree > 1:
            raise SpecError(f"parallel.{name}", degree, f"1 with cp={plan.cp} (the bench combines context "
                            "parallel with FSDP2 / data parallel only)")
    if workload.lora is not None:
        raise SpecError("parallel.cp", plan.cp, "1 for a LoRA fine-tune (not combined in the bench)")


def _check_experts(workload: Workload) -> None:
    plan, m = workload.plan, workload.model
    if not m.is_moe:
        raise SpecError("parallel.ep", plan.ep, f"1 for {m.name}, a dense model (expert parallel needs an "
                        "MoE model, e.g. --model debug-moe)")
    if m.moe_experts % plan.ep:
        raise SpecError("parallel.ep", plan.ep, f"a divisor of moe_experts={m.moe_experts}")
    if plan.data_parallel % plan.ep:
        raise SpecError("parallel.ep", plan.ep, f"a divisor of the data-parallel ranks dp*fsdp="
                        f"{plan.data_parallel} (expert parallel is carved out of them)")
    for name, degree in (("tp", plan.tp), ("pp", plan.pp)):
        if degree > 1:
            raise SpecError(f"parallel.{name}", degree, "1 for an MoE model in the bench (expert parallel "
                            "combines with FSDP2 and data parallel; tensor/pipeline parallel MoE is not implemented)")
    if plan.etp is not None and plan.etp != 1:
        raise SpecError("parallel.etp", plan.etp, "1 or omitted (experts are not tensor-parallel in the bench)")
    if workload.lora is not None:
        raise SpecError("lora.rank", workload.lora.rank, "omitted for an MoE model (LoRA adapters on "
                        "experts are not implemented in the bench)")


def autocast_dtype(workload: Workload, setup: ParallelSetup, fp8_base: str | None = None) -> torch.dtype | None:
    """The autocast dtype when FSDP's policy does not provide mixed precision, else None."""
    dtype = compute_dtype(workload.precision, fp8_base)
    if dtype == torch.float32 or setup.fsdp:
        return None
    return dtype


def build_mesh(workload: Workload, device_type: str):
    """``init_device_mesh`` of shape (pp, dp, fsdp, cp, tp); None in a single process."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return None
    from torch.distributed.device_mesh import init_device_mesh

    plan = workload.plan
    return init_device_mesh(device_type, (plan.pp, plan.dp or 1, plan.fsdp, plan.cp, plan.tp),
                            mesh_dim_names=("pp", "dp_replicate", "dp_shard", "cp", "tp"))


def expert_mesh(workload: Workload, device_type: str):
    """The experts' mesh (pp, edp, ep, tp) over the same ranks: an expert group is ``ep``
    consecutive data-parallel ranks, ``edp`` the ranks holding the same experts."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    plan = workload.plan
    ranks = torch.arange(dist.get_world_size()).view(plan.pp, plan.data_parallel // plan.ep, plan.ep, plan.tp)
    return DeviceMesh(device_type, ranks, mesh_dim_names=("pp", "edp", "ep", "tp"))


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


def apply_fsdp(model: nn.Module, dp_mesh, dtype: torch.dtype, pipeline: bool = False,
               experts_mesh=None, dp_size: int = 1) -> None:
    """FSDP2 per block, then the root; ``dtype`` params / fp32 reduce for 16-bit runs.

    Under pipeline parallel nothing is resharded after the forward (torchtitan's choice: the
    micro-batches' backwards come later and would all-gather again). With expert parallel
    (``experts_mesh``: the ranks holding the same experts) the routed experts are sharded
    there first, their gradients divided by the whole data-parallel size ``dp_size``.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    for block in model.layers:
        # The last block's parameters are needed right away by the backward: keep them gathered.
        reshard = not pipeline and block is not model.layers[-1]
        if experts_mesh is not None and block.moe is not None:
            fully_shard(block.moe.experts, mesh=experts_mesh, mp_policy=mp, reshard_after_forward=reshard)
            block.moe.experts.set_gradient_divide_factor(float(dp_size))
        fully_shard(block, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=reshard)
    fully_shard(model, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=False)


def _split_pipeline(model: nn.Module, workload: Workload, mesh, done: list[str]) -> tuple[list, int, object]:
    """(stages held here, pp rank, pp group): the whole model as stage 0 without pipeline parallel."""
    plan = workload.plan
    if mesh is None or plan.pp == 1:
        return [(0, model)], 0, None
    from trainperf.measure.pipeline import split_stages

    pp_rank = mesh["pp"].get_local_rank()
    stages = split_stages(model, pp_rank, plan.pp, plan.vpp, v_shape=plan.pp_schedule == "dualpipev")
    done.append(f"PP={plan.pp}" + (f" x vpp={plan.vpp}" if plan.vpp > 1 else "")
                + f" ({plan.pp_schedule}: {plan.pp * plan.vpp} stages, {len(stages)} per pipeline rank; "
                + f"pipeline rank {pp_rank} holds stage{'s' if len(stages) > 1 else ''} "
                + f"{', '.join(str(sid) for sid, _ in stages)})")
    return stages, pp_rank, mesh["pp"].get_group()


def _apply_ep(stages: list, workload: Workload, device_type: str, done: list[str]):
    """Keep this rank's experts; returns (experts' FSDP mesh, ep group) or (None, None)."""
    plan = workload.plan
    if plan.ep == 1:
        return None, None
    from trainperf.measure.moe import moe_layers

    emesh = expert_mesh(workload, device_type)
    group, rank = emesh["ep"].get_group(), emesh["ep"].get_local_rank()
    for _, module in stages:
        for layer in moe_layers(module):
            layer.shard_experts(group, plan.ep, rank)
    local = workload.model.moe_experts // plan.ep
    done.append(f"EP={plan.ep} (experts {rank * local}-{(rank + 1) * local - 1} of {workload.model.moe_experts} "
                f"on this rank, all-to-all dispatch/combine)")
    return emesh["edp"], group


def as_run(workload: Workload) -> Workload:
    """``workload`` as the bench runs it, as the predictor reads workloads (what the run's
    ``workload.toml`` states):

    * the stack is ``trainperf-bench`` (:data:`~trainperf.specs.workload.BENCH_STACK`: ring
      attention by all-gather, autocast without FSDP2, the bench's checkpointing policies),
      unless the workload names another than ``generic`` (a profile file from
      ``trainperf calibrate-model``, say);
    * context parallelism without an fsdp or dp degree still shards the parameters over the cp
      ranks (FSDP2 over ``dp_shard x cp``, as torchtitan does), which a plan states as ZeRO-3
      over ``dp x cp``; without it the workload file would say the gradients are all-reduced.
    """
    plan = workload.plan
    changes: dict[str, Any] = {}
    if workload.stack == "generic":
        changes["stack"] = BENCH_STACK
    if plan.cp > 1 and plan.fsdp == 1 and (plan.dp or 1) == 1 and plan.zero_stage != 3:
        changes["plan"] = dataclasses.replace(plan, zero_stage=3)
    return workload.replace(**changes) if changes else workload


def _fsdp_mesh(mesh, plan):
    """FSDP's mesh: the shard x cp ranks (flattened, torchtitan's ``dp_shard_cp``), with the
    replicas as a second dimension for HSDP."""
    shard = "dp_shard"
    if plan.cp > 1:
        mesh["dp_shard", "cp"]._flatten("dp_shard_cp")
        shard = "dp_shard_cp"
    return mesh["dp_replicate", shard] if (plan.dp or 1) > 1 else mesh[shard]


def _fsdp_label(plan, workload: Workload, dtype: torch.dtype) -> str:
    shard, reps = plan.fsdp * plan.cp, plan.dp or 1
    name = str(dtype).removeprefix("torch.").replace("bfloat16", "bf16").replace("float32", "fp32")
    if reps > 1 and shard == 1:
        what = f"data parallel over {reps} ranks (FSDP2 replicas: parameters and gradients all-reduced)"
    elif reps > 1:
        what = f"HSDP over {reps * shard} ranks ({reps} replicas x {shard}-way FSDP2 shards)"
    else:
        what = f"FSDP2 over {shard} ranks" + (f" (fsdp={plan.fsdp} x cp={plan.cp})" if plan.cp > 1 else "")
    return f"{what}, params {name} / reduce fp32"


def parallelize(model: nn.Module, workload: Workload, *, device_type: str = "cpu",
                compile: bool = False, fp8_base: str | None = None) -> ParallelSetup:
    """Split into pipeline stages (if pp > 1), then apply TP/SP, expert parallel, activation
    checkpointing, compile and FSDP2 to each stage in that order."""
    check_plan(workload)
    plan = workload.plan
    mesh = build_mesh(workload, device_type)
    done: list[str] = []
    stages, pp_rank, pp_group = _split_pipeline(model, workload, mesh, done)
    for _, module in stages:
        if mesh is not None and plan.tp > 1:
            apply_tp(module, mesh["tp"], plan.sequence_parallel)
    if mesh is not None and plan.tp > 1:
        done.append(f"TP={plan.tp}" + (" +SP" if plan.sequence_parallel else ""))
    experts_fsdp, ep_group = _apply_ep(stages, workload, device_type, done) if mesh is not None else (None, None)
    for _, module in stages:
        if workload.activation_checkpointing != "none":
            apply_ac(module, workload.activation_checkpointing)
        if compile:
            apply_compile(module)
    if workload.activation_checkpointing != "none":
        done.append(f"AC {workload.activation_checkpointing}")
    if compile:
        done.append("torch.compile per block and loss")
    cp_mesh = mesh["cp"] if mesh is not None and plan.cp > 1 else None
    if cp_mesh is not None:
        done.append(f"CP={plan.cp} (ring attention over SDPA, causal load balancing)")
    dp_size, dtype = plan.data_parallel, compute_dtype(workload.precision, fp8_base)
    fsdp = mesh is not None and dp_size * plan.cp > 1
    dp_rank = 0
    if fsdp:
        for _, module in stages:
            apply_fsdp(module, _fsdp_mesh(mesh, plan), dtype, pipeline=plan.pp > 1,
                       experts_mesh=experts_fsdp, dp_size=dp_size * plan.cp)
        done.append(_fsdp_label(plan, workload, dtype))
        dp_rank = mesh["dp_replicate"].get_local_rank() * plan.fsdp + mesh["dp_shard"].get_local_rank()
    if not fsdp and dtype != torch.float32:
        done.append(f"autocast {str(dtype).removeprefix('torch.').replace('bfloat16', 'bf16')} "
                    "(fp32 master weights)")
    return ParallelSetup(mesh=mesh, dp_rank=dp_rank, dp_size=dp_size, fsdp=fsdp,
                         description=", ".join(done) or "single device, fp32", stages=stages,
                         pp_rank=pp_rank, pp_size=plan.pp, pp_group=pp_group, ep_group=ep_group,
                         ep_size=plan.ep, cp_mesh=cp_mesh)
