"""Pipeline parallel with ``torch.distributed.pipelining``: split the model into stages and
build the schedule (1F1B, interleaved 1F1B, GPipe, DualPipeV), as torchtitan's
``pipeline_llama`` does.

The model is cut by layers into ``pp * vpp`` stages of (nearly) equal layer counts; stage 0
keeps the embedding, the last stage the final norm and LM head. Pipeline rank ``r`` holds
stages ``r, r + pp, r + 2 pp, ...`` (the looped placement interleaved 1F1B expects; Narayanan
et al. 2021), or under DualPipeV stages ``r`` and ``2 pp - 1 - r`` (a V: the first and the last
stage on rank 0). Each stage is then parallelized like a whole model (TP, AC, compile, FSDP).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from trainperf.errors import SpecError


def stage_layer_ranges(layers: int, num_stages: int) -> list[tuple[int, int]]:
    """[lo, hi) layer indices of each stage; earlier stages take the remainder."""
    base, extra = divmod(layers, num_stages)
    out, lo = [], 0
    for s in range(num_stages):
        hi = lo + base + (1 if s < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def stage_ids(pp_rank: int, pp: int, vpp: int, v_shape: bool = False) -> list[int]:
    """Stages pipeline rank ``pp_rank`` holds: looped (``r, r + pp, ...``) or, for DualPipeV, the
    V's ``r`` and ``2 pp - 1 - r`` (torch's ``generate_rank_to_stage_mapping(style="v")``)."""
    if v_shape:
        return [pp_rank, 2 * pp - 1 - pp_rank]
    return [pp_rank + k * pp for k in range(vpp)]


def split_stages(model: nn.Module, pp_rank: int, pp: int, vpp: int,
                 v_shape: bool = False) -> list[tuple[int, nn.Module]]:
    """(stage index, stage module) pairs held by pipeline rank ``pp_rank`` (:func:`stage_ids`)."""
    num_stages = pp * vpp
    ranges = stage_layer_ranges(len(model.layers), num_stages)
    stages = []
    for sid in stage_ids(pp_rank, pp, vpp, v_shape):
        lo, hi = ranges[sid]
        m = copy.deepcopy(model)
        m.layers = nn.ModuleList(list(m.layers)[lo:hi])
        if sid > 0:
            m.tok_embeddings = None
        if sid < num_stages - 1:
            m.norm = None
            m.output = None
        stages.append((sid, m))
    return stages


def build_schedule(stage_modules: list[tuple[int, nn.Module]], num_stages: int, device: torch.device,
                   pp_group, schedule_name: str, n_microbatches: int,
                   loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
    """The pipeline schedule over this rank's stages; ``step(x, target=y, losses=[...])`` runs it."""
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import (
        Schedule1F1B,
        ScheduleDualPipeV,
        ScheduleGPipe,
        ScheduleInterleaved1F1B,
    )

    stages = [PipelineStage(m, sid, num_stages, device, group=pp_group) for sid, m in stage_modules]
    if schedule_name == "dualpipev":
        return ScheduleDualPipeV(stages, n_microbatches=n_microbatches, loss_fn=loss_fn), stages
    if len(stages) > 1:
        return ScheduleInterleaved1F1B(stages, n_microbatches=n_microbatches, loss_fn=loss_fn), stages
    if schedule_name == "interleaved":
        raise SpecError("parallel.vpp", 1, "> 1 for the interleaved schedule (stages per pipeline rank)")
    cls = ScheduleGPipe if schedule_name == "gpipe" else Schedule1F1B
    return cls(stages[0], n_microbatches=n_microbatches, loss_fn=loss_fn), stages
