"""The parallel plan and batches of a runs-table row: the parallel degrees (tp, pp, cp, ep, etp,
vpp: in their own cells, or named in another plan cell), the pipeline schedule, how the
data-parallel ranks shard, and the global and micro batch (a local batch read per data-parallel
rank); what the row does not state is the stack's default, noted in its assumptions."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from trainperf.predict.runs_cells import CellError, read_count, read_flag, unstated
from trainperf.predict.runs_rows import RowSkip, row_cell, row_count, row_default

_DEGREE_NAMES: dict[str, str] = {
    "tp": r"tp|tensor[ _-]?(?:model[ _-]?)?parallel(?:ism)?(?:[ _-]?(?:size|degree))?",
    "pp": r"pp|pipeline[ _-]?(?:model[ _-]?)?parallel(?:ism)?(?:[ _-]?(?:size|degree))?",
    "cp": r"cp|context[ _-]?parallel(?:ism)?(?:[ _-]?(?:size|degree))?",
    "ep": r"ep|expert[ _-]?(?:model[ _-]?)?parallel(?:ism)?(?:[ _-]?(?:size|degree))?",
    "etp": r"etp|expert[ _-]?tensor[ _-]?parallel(?:ism)?(?:[ _-]?(?:size|degree))?",
    "vpp": r"vpp|vp|virtual[ _-]?pipeline(?:[ _-]?(?:model[ _-]?)?parallel(?:ism)?)?(?:[ _-]?(?:size|degree|stages?))?"
           r"|virtual[ _-]?stages?",
}
"""How a parallel degree is named where a cell writes several ("TP2 PP4 CP2 VP5", "DP 8 x TP 8")."""
_WAY_NAMES: dict[str, str] = {
    "tp": r"tensor(?:[ _-]?(?:model|slicing))?|model",
    "pp": r"pipeline(?:[ _-]?model)?",
    "cp": r"context|sequence|ulysses",
    "ep": r"expert",
}
"""How a paper names a degree after its number ("12-way model parallelism", "8-way tensor-slicing",
"35-way pipeline"): model parallelism alone is tensor (Mesh TensorFlow's and T5X's "model" axis),
read only where no pipeline degree above 1 is stated (Megatron's "model-parallel size" is tp x pp)."""
_PLAN_CELLS = ("tp", "pp", "cp", "vpp", "ep", "etp", "dp", "fsdp_zero", "sp")
"""The cells of a row that state its parallel plan."""


def named_degree(r: Mapping[str, str], col: str, notes: list[str]) -> int | None:
    """A degree whose own cell is blank, named in another plan cell (``"TP2 PP4"`` in the tp cell
    states pp = 4; ``"DP 8 x TP 8"`` in the dp cell states tp = 8), noted; None when no cell
    names it."""
    pattern = re.compile(rf"(?<![a-z])(?:{_DEGREE_NAMES[col]})\s*[=:]?\s*(\d+)(?![\d.])")
    for other in _PLAN_CELLS:
        cell = row_cell(r, other)
        m = pattern.search(cell.lower()) if other != col and cell else None
        if m and int(m.group(1)) > 0:
            notes.append(f"{col} {m.group(1)} read from the {other} cell {cell[:40]!r}")
            return int(m.group(1))
    return _way_degree(r, col, notes)


def _way_degree(r: Mapping[str, str], col: str, notes: list[str]) -> int | None:
    """A degree a plan cell names after its number ("12-way model x 256-way data"; :data:`_WAY_NAMES`),
    noted; None when none does."""
    if col not in _WAY_NAMES:
        return None
    pattern = re.compile(rf"(?<![\d.])(\d+)[ -]way\s+({_WAY_NAMES[col]})(?![a-z])")
    for other in _PLAN_CELLS:
        cell = row_cell(r, other)
        m = pattern.search(cell.lower()) if cell else None
        if not m or int(m.group(1)) < 1:
            continue
        if m.group(2) == "model" and _pipelined(r):
            continue
        notes.append(f"{col} {m.group(1)} read from the {other} cell {cell[:40]!r} ('{m.group(1)}-way {m.group(2)}')")
        return int(m.group(1))
    return None


def _pipelined(r: Mapping[str, str]) -> bool:
    """Whether the row states pipeline parallelism above 1 anywhere (its pp cell, or a plan cell
    naming it), so that "model parallel" may be tp x pp."""
    try:
        pp = read_count(row_cell(r, "pp")) if row_cell(r, "pp") else None
    except CellError:
        pp = None
    return bool(pp and pp > 1) or named_degree(r, "pp", []) not in (None, 1)


def _degree(r: Mapping[str, str], col: str, d: Any, notes: list[str]) -> int:
    """A parallel degree: the cell's value, else one another plan cell names (:func:`named_degree`);
    blank is "not used" (1); a cell that says it is not stated takes the stack default (noted)."""
    v = row_count(r, col, col)
    if v is None and not row_cell(r, col):
        v = named_degree(r, col, notes)
    if v is not None:
        return v
    cell = row_cell(r, col)
    if not cell or col in ("ep",) or d.get(col) is None:
        return 1
    return row_default(d, col, f"{col} ({cell[:40]!r})", notes)


_SHARD_DEGREE = re.compile(r"(?:fsdp|dp_shard|shard(?:ing)?)(?:[ _](?:degree|group|size))?\s*(?:[=:]\s*|\s+)(\d+)")


_SHARDING_WORDS = re.compile(r"\bhsdp\b|\bfsdp\d?\b|hybrid[_ ]shard|full[_ ]shard|zero[- _]?(?:stage[- _]?)?[123]\b"
                             r"|distributed optimi[sz]er|dist[_ ]?opt")
"""Words of a framework cell that state how the data-parallel ranks shard."""


def sharding_unstated(r: Mapping[str, str]) -> bool:
    """Whether the row leaves its data-parallel sharding to the stack's default (no sharding in its
    ``fsdp_zero`` cell or words for it in the framework cell, and no stated plain ``dp``)."""
    return (unstated(row_cell(r, "fsdp_zero")) and not _SHARDING_WORDS.search(row_cell(r, "framework").lower())
            and "(as stated" not in row_cell(r, "dp").lower())


_STATE_PARTS = ("weights", "gradients", "optimizer states")


def sharded_to_fit(w: Any, notes: list[str]) -> Any:
    """``w`` (a row whose sharding was the stack's default: none) with the least ZeRO stage the
    stack has under which its weights, gradients and optimizer states fit the device, when they do
    not fit unsharded: the published run ran, so it held them (noted; the stack's most sharded
    stage where none fits); ``w`` itself otherwise, or where the workload cannot be priced."""
    from trainperf.errors import TrainperfError
    from trainperf.predict import predict
    from trainperf.predict.stack_capabilities import capabilities_of

    def states_GiB(x: Any) -> tuple[float, float]:
        p = predict(x)
        return sum(p.memory_breakdown_GiB.get(k, 0.0) for k in _STATE_PARTS), p.memory_capacity_GiB

    plan = w.plan
    if plan.zero_stage or plan.fsdp > 1 or (plan.dp or 1) < 2:
        return w
    data = plan.dp
    try:
        need, cap = states_GiB(w)
        stages = [s for s in capabilities_of(w.stack).zero_stages if s > 0]
        if need <= cap or not stages:
            return w
        for stage in stages:
            trial = w.replace(plan=dataclasses.replace(plan, dp=1, fsdp=data, zero_stage=3) if stage == 3
                              else dataclasses.replace(plan, zero_stage=stage))
            got, _ = states_GiB(trial)
            if got <= cap:
                break
    except TrainperfError:
        return w
    how = "the least stage under which they fit" if got <= cap else f"the stack's most sharded; {got:.0f} GiB still"
    notes.append(f"data-parallel sharding not stated, and unsharded the weights, gradients and optimizer states need "
                 f"{need:.0f} GiB of the device's {cap:.0f}: the run held them, so ZeRO-{stage} over the {data} "
                 f"data-parallel ranks taken ({how})")
    return trial


def _sharding(r: Mapping[str, str], data: int, dpn: int, d: Any, notes: list[str]) -> dict[str, Any]:
    """How the ``data`` data-parallel ranks shard (fsdp, dp, zero_stage): the ``fsdp_zero`` cell,
    else what the framework cell names ("PyTorch FSDP", "DeepSpeed ZeRO-3", "torchtitan (FSDP2
    1D)": the run's sharding, said in the row), else the stack's default."""
    shard = row_cell(r, "fsdp_zero")
    dp_cell = row_cell(r, "dp").lower()
    fw = row_cell(r, "framework")
    if unstated(shard) and _SHARDING_WORDS.search(fw.lower()):
        shard = fw
        notes.append(f"data-parallel sharding from the framework cell {fw[:40]!r}")
    low = shard.lower()
    m = _SHARD_DEGREE.search(low)
    if m and not re.search(r"fsdp\s*=\s*-1", low):
        fsdp = int(m.group(1))
    elif re.search(r"fsdp\s*=\s*-1", low):  # all chips of a slice; slices are data parallel
        fsdp = data // max(read_count(dp_cell) or 1, 1)
    elif "fsdp degree" in dp_cell:
        fsdp = read_count(dp_cell) or data
    elif re.search(r"hsdp|hybrid[_ ]shard", low):
        fsdp = math.gcd(data, dpn)
        notes.append(f"{shard[:40]!r}: sharded within a node of {fsdp}, replicated across nodes")
    elif re.search(r"full_shard|fully[_ ]shard|fsdp|zero[- _]?(?:stage[- _]?)?3|stage[- _]?3", low):
        fsdp = data
    elif re.search(r"shard_grad_op|zero[- _]?(?:stage[- _]?)?2|stage[- _]?2", low):
        return {"dp": data, "zero_stage": 2}
    elif re.search(r"zero[- _]?(?:stage[- _]?)?1|stage[- _]?1|distributed optimi[sz]er|dist[_ ]?opt", low):
        return {"dp": data, "zero_stage": 1}
    elif unstated(shard) and "(as stated" not in dp_cell:
        how = row_default(d, "data_parallel_sharding", "data-parallel sharding", notes)
        if how == "fsdp":
            fsdp = data
        elif how == "zero-1":
            return {"dp": data, "zero_stage": 1}
        else:
            fsdp = 1
    else:
        fsdp = 1
    if fsdp > 1:
        if data % fsdp:
            raise RowSkip("plan", f"FSDP degree {fsdp} does not divide the {data} data-parallel ranks")
        return {"fsdp": fsdp, "dp": data // fsdp}
    return {"dp": data}


_INTERLEAVED = re.compile(r"interleav|virtual[ _-]?(?:pipeline|stage)|\bvpp\b|\bv-?pp\b")
_INTERLEAVED_SCHEDULE = re.compile(r"interleaved[ _-]?(?:1f1b|pipelin|schedul|zero[ _-]?bubble|zb)|\bvpp\b"
                                   r"|virtual[ _-]?(?:pipeline|stage)")
"""Interleaving named in a framework cell ("torchtitan (3D, Interleaved 1F1B)")."""
_VPP_IN_PP = re.compile(rf"(?<![a-z])(?:{_DEGREE_NAMES['vpp']})\s*[=:]?\s*(\d+)(?![\d.])|\bv\s*[=:]\s*(\d+)")
"""A virtual-stage count written in the pp cell: the names :func:`named_degree` reads, or "v=5"."""


def _vpp(r: Mapping[str, str], pp: int, layers: int, d: Any, notes: list[str]) -> int:
    """Virtual pipeline stages per rank: the vpp cell's count ("5", "VP=5", "5 (interleaved)"), or
    one written in the pp cell ("PP4 (interleaved, vpp=5)", "4 (interleaved, v=5)"). A row that says its schedule is
    interleaved without a count (the vpp cell: "interleaved", "yes", "not stated (paper uses
    interleaved schedule)"; the pp or framework cell: "Interleaved 1F1B") is interleaved, with the
    stack's ``interleaved_stages_per_rank`` default (:mod:`trainperf.predict.stack_defaults`):
    torchtitan's 2 stages per rank, else one layer per virtual stage, ``layers // pp`` chunks, the
    most the layer count allows (NVIDIA's NeMo recipes). The row's assumptions say so."""
    cell, pp_cell = row_cell(r, "vpp"), row_cell(r, "pp").lower()
    per_stage = _layers_per_virtual_stage(cell, pp, layers)
    if per_stage is not None:
        notes.append(f"vpp {cell[:40]!r}: {layers} layers // (pp {pp} x {per_stage}) = {layers // (pp * per_stage)} "
                     "virtual stages per rank")
        return layers // (pp * per_stage)
    try:  # "interleaved 1F1B" names the schedule, not a count
        vpp = read_count(re.sub(r"(?<![a-z0-9])1f1b(?![a-z0-9])", "", cell.lower()), "vpp")
    except CellError as e:
        raise RowSkip("cell", f"vpp: {e}") from None
    if vpp is not None and vpp < 1:
        raise RowSkip("cell", f"vpp: {cell[:40]!r} is not a positive count")
    if vpp is None:
        m = _VPP_IN_PP.search(pp_cell)
        vpp = int(m.group(1) or m.group(2)) if m else None
    if vpp is None and not cell:
        vpp = named_degree(r, "vpp", notes)
    if vpp is not None:
        return vpp
    low, fw = cell.lower(), row_cell(r, "framework").lower()
    says = bool(_INTERLEAVED.search(low) or _INTERLEAVED.search(pp_cell) or _INTERLEAVED_SCHEDULE.search(fw)) or (
        not unstated(cell) and _flag_or_none(cell) is True)
    if not says:
        if cell:
            notes.append(f"vpp {cell[:40]!r}: non-interleaved 1F1B assumed")
        return 1
    said = cell or (row_cell(r, "pp") if _INTERLEAVED.search(pp_cell) else row_cell(r, "framework"))
    what = f"vpp {said[:40]!r}"
    if pp < 2 or layers // pp < 2:
        notes.append(f"{what}: interleaving stated, but {layers} layers over pp={pp} leave one layer per rank; "
                     "non-interleaved 1F1B assumed")
        return 1
    per_rank = d.get("interleaved_stages_per_rank")
    if per_rank is None or per_rank.value == "layers":
        v = layers // pp
        notes.append(f"{what}: interleaved 1F1B, vpp {v} assumed (one layer per virtual stage: {layers} layers // "
                     f"pp {pp}; the count is not stated, and one layer per stage is the most the layer count allows"
                     + (f": {per_rank.stack} default, {per_rank.source}" if per_rank is not None else "") + ")")
        return v
    v = min(int(per_rank.value), layers // pp)
    notes.append(per_rank.note(f"{what}: interleaved, virtual stages per rank"))
    return v


_LAYERS_PER_VSTAGE = re.compile(
    r"(?:layers?[\s_-]*per[\s_-]*virtual[\s_-]*(?:pipeline[\s_-]*)?stage\D{0,3}(\d+))"
    r"|(?:(\d+)\s*layers?[\s_-]*per[\s_-]*virtual[\s_-]*(?:pipeline[\s_-]*)?stage)")


def _layers_per_virtual_stage(cell: str, pp: int, layers: int) -> int | None:
    """The layers of one virtual stage where the cell gives that instead of the stage count
    (Megatron-LM's ``--num-layers-per-virtual-pipeline-stage 2``, "2 layers per virtual stage");
    ``None`` where it does not. A count that does not divide the layers of a pipeline rank is a
    :class:`RowSkip`."""
    m = _LAYERS_PER_VSTAGE.search(cell.lower())
    if not m:
        return None
    n = int(m.group(1) or m.group(2))
    if n < 1 or pp < 1 or layers % pp or (layers // pp) % n:
        raise RowSkip("cell", f"vpp: {cell[:40]!r}: {n} layers per virtual stage do not divide the "
                              f"{layers} layers over pp={pp}")
    return n


def _count_or_none(cell: str) -> int | None:
    try:
        return read_count(cell)
    except CellError:
        return None


def _flag_or_none(cell: str) -> bool | None:
    try:
        return read_flag(cell)
    except CellError:
        return None


_SP_WORDS = re.compile(r"(?<![a-z])(?:(no|w/o|without|off)\s+)?(?:sp|sequence[ _-]?parallel(?:ism)?)(?![a-z])"
                       r"(\s*(?:=\s*)?(?:off|false|no|disabled)\b)?")


def _sp_beside_tp(r: Mapping[str, str], notes: list[str]) -> bool | None:
    """Sequence parallelism written in the tp cell ("4 (with SP)", "8 + sequence parallel", "4, no
    SP"), noted; None when the tp cell does not say. Only the tp cell: elsewhere "sequence
    parallel" may name context parallelism (DeepSpeed-Ulysses)."""
    cell = row_cell(r, "tp")
    m = _SP_WORDS.search(cell.lower())
    if not m:
        return None
    on = not (m.group(1) or m.group(2))
    notes.append(f"sequence parallelism {'on' if on else 'off'}, as the tp cell {cell[:40]!r} says")
    return on


def _sp_degree(r: Mapping[str, str], tp: int, notes: list[str]) -> int | None:
    """A sequence-parallel *degree* in the sp cell ("8", "Ulysses 8") other than tp's, with the cp
    cell blank: context parallelism (DeepSpeed-Ulysses' sequence-parallel size; Megatron's
    sequence parallelism has no degree of its own, it splits over the tp ranks), noted; None
    otherwise (a yes/no, or the tp degree itself: Megatron's sequence parallelism)."""
    cell = row_cell(r, "sp")
    if not cell or not unstated(row_cell(r, "cp")) or _flag_or_none(cell) is not None:
        return None
    try:
        n = read_count(re.sub(r"(?i)ulysses|sequence[ _-]?parallel(?:ism)?(?:[ _-]?(?:size|degree))?|\bsp\b", " ",
                              cell))
    except CellError:
        return None
    if n is None or n < 2 or n == tp:
        return None
    notes.append(f"cp {n} read from the sp cell {cell[:40]!r}: a sequence-parallel degree of its own is context "
                 "parallelism (DeepSpeed-Ulysses' sequence-parallel size; Megatron's splits over the tp ranks)")
    return n


def _unstated_sp(d: Any, notes: list[str]) -> bool:
    """Sequence parallelism of a tp > 1 row that does not state it: what the stack's tensor
    parallelism always or never does (its ``[capabilities] sequence_parallel``: MaxText and
    torchtitan always shard the sequence between regions), else the stack's default. As
    :func:`trainperf.predict.stack_capabilities.apply_stack` makes it explicit for ``predict``."""
    from trainperf.predict.stack_capabilities import capabilities_of

    caps = capabilities_of(d.stack)
    if caps.sequence_parallel in ("always", "never"):
        on = caps.sequence_parallel == "always"
        notes.append(f"sequence parallelism not stated: {str(on).lower()} taken ({caps.stack}'s tensor parallelism "
                     f"{caps.sequence_parallel} shards the sequence: {caps.sources.get('sequence_parallel', '')})")
        return on
    return bool(row_default(d, "sequence_parallel", "sequence parallelism", notes))


def read_plan(r: Mapping[str, str], n: int, dpn: int, d: Any, notes: list[str], layers: int) -> dict[str, Any]:
    tp = row_count(r, "tp", "tp")
    if tp is None and not row_cell(r, "tp"):
        tp = named_degree(r, "tp", notes)
    if tp is None:
        tp = row_default(d, "tp", f"tensor-parallel degree ({row_cell(r, 'tp')[:40]!r})", notes)
    pp = _degree(r, "pp", d, notes)
    sp_degree = _sp_degree(r, tp, notes)
    cp = _degree(r, "cp", d, notes) if sp_degree is None else sp_degree
    ep = _degree(r, "ep", d, notes)
    vpp = _vpp(r, pp, layers, d, notes)
    try:
        sp = False if sp_degree is not None else read_flag(row_cell(r, "sp"))
    except CellError:
        sp = True if tp > 1 and _count_or_none(row_cell(r, "sp")) == tp else None  # SP over the tp ranks
        if sp is None:
            notes.append(f"sp {row_cell(r, 'sp')[:40]!r} not read as yes or no")
    if sp is None and tp > 1:
        sp = _sp_beside_tp(r, notes)
    if sp is None:
        sp = _unstated_sp(d, notes) if tp > 1 else False
    sp = sp and tp > 1
    model_par = tp * pp * cp
    if model_par < 1 or min(tp, pp, cp) < 1 or n < 1:  # a degree of 0 or -1: not a plan
        raise RowSkip("plan", f"tp={tp}, pp={pp}, cp={cp} on {n} devices: every degree must be at least 1")
    if n % model_par:
        raise RowSkip("plan", f"{n} devices are not a multiple of tp*pp*cp={model_par}")
    data = n // model_par
    plan: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "sequence_parallel": sp}
    etp = row_count(r, "etp", "etp") if "etp" in r else None
    if etp is None and not row_cell(r, "etp"):
        etp = named_degree(r, "etp", notes)
    if etp is not None and ep > 1 and etp != tp:  # MoE parallel folding: experts split etp ways, not tp
        plan["etp"] = etp
    elif etp is None and ep > 1 and tp > 1 and (tp * cp * data) % (ep * tp) and (tp * cp * data) % ep == 0:
        # the experts' grid etp x ep x edp covers the tp x cp x dp ranks: with etp = tp (Megatron-Core's
        # default) the stated ep does not fit, so the experts were not split over tp
        plan["etp"] = 1
        notes.append(f"etp not stated: 1 taken (ep={ep} x tp={tp} does not divide the tp*cp*dp={tp * cp * data} "
                     "ranks the experts fold over; ep alone does: Megatron-Core's expert_tensor_parallel_size=1)")
    words = " ".join(row_cell(r, c) for c in ("pp", "vpp", "framework")).lower()
    dual = re.search(r"dual[ -]?pipe([ -]?v)?", words) if pp > 1 else None
    if vpp > 1 and not (dual and dual[1]):
        plan.update(vpp=vpp, pp_schedule="interleaved")
    elif pp > 1:
        sched = "gpipe" if "gpipe" in words else ("dualpipev" if dual[1] else "dualpipe") if dual else None
        if sched is None and d.get("pp_schedule").value != "1f1b":
            sched = row_default(d, "pp_schedule", "pipeline schedule", notes)
        if sched:
            plan["pp_schedule"] = sched
    plan.update(_sharding(r, data, dpn, d, notes))
    return plan


_LOCAL = re.compile(r"\blocal\b|per[ -]dp[ -]rank|per data[- ]parallel")
_MICRO = re.compile(r"micro[- _]?batch(?:[ _]size)?|\bmbs\b|pp[ _]microbatch")


def read_batches(r: Mapping[str, str], gbs: int | None, gbs_cell: str, plan: dict[str, Any], n: int, d: Any,
             notes: list[str]) -> tuple[int, int, bool]:
    """(global batch, micro batch, whether the global batch was corrected) of a row.

    The micro_batch column holds the micro batch, or -- when the cell says "local" or the
    stack's ``micro_batch_column`` is ``local_batch`` (torchtitan) -- the batch per
    data-parallel rank: global = local x dp x fsdp; under pipeline parallelism the local batch
    is split into micro-batches of ``pipeline_microbatch_size`` (stated in the cell as
    "microbatch N", else the stack default), else it runs whole."""
    cell = row_cell(r, "micro_batch")
    low = cell.lower()
    data = plan["dp"] * plan.get("fsdp", 1)
    value = row_count(r, "micro_batch")
    column = d.get("micro_batch_column").value
    says_micro = bool(_MICRO.search(low)) and not _LOCAL.search(low)
    local_semantics = bool(_LOCAL.search(low)) or (column == "local_batch" and not says_micro)
    if value is not None and local_semantics:
        local = value
        corrected = False
        if gbs is None:
            gbs = local * data
            notes.append(f"global batch not stated: local batch {local} x {data} data-parallel ranks = {gbs}")
        elif gbs != local * data and gbs == local * n and n != data:
            notes.append(f"global batch {gbs_cell[:30]!r} is local x all {n} devices; the local batch is per "
                         f"data-parallel rank, so global = {local} x {data} = {local * data}")
            gbs, corrected = local * data, True
        if plan["pp"] > 1:
            m = re.search(r"micro[- _]?batch(?:[ _]size)?\D{0,3}(\d+)", low)
            if m:
                micro = int(m.group(1))
            else:
                got = d.get("pipeline_microbatch_size")
                micro = got.value if got is not None else 1
                src = got.note("pipeline micro-batch size") if got is not None else \
                    "pipeline micro-batch size not stated: 1 taken"
                notes.append(f"{src}; the local batch of {local} runs as {max(local // micro, 1)} pipeline micro-batches")
        else:
            micro = local
        return gbs, micro, corrected
    if gbs is None:
        if value is not None and re.search(r"per[ -](?:chip|device|gpu|core)", low):
            gbs = value * n  # MaxText's per_device_batch_size: global = per device x devices
            notes.append(f"global batch not stated: {value} per device x {n} devices = {gbs}")
        else:
            raise RowSkip("batch", "sequence length or global batch not stated")
    if gbs % data:
        raise RowSkip("plan", f"global batch {gbs} does not split over the {data} data-parallel ranks")
    local = gbs // data
    if value is None:
        mb = row_default(d, "micro_batch", "micro batch", notes)
        value = local if mb == "local" else mb
    if local % value:
        notes.append(f"micro batch {value} does not divide the local batch {local}: {math.gcd(local, value)} taken")
        value = math.gcd(local, value)
    return gbs, value, False
