"""ParallelPlan: how a training step is split across devices.

Degrees follow Megatron-LM / torchtitan naming. The device mesh is
``dp x fsdp x cp x pp x tp`` (replicate, shard, context, pipeline, tensor); expert parallelism
(``ep``) is carved out of the data-parallel ranks (``dp * fsdp * cp``), as Megatron-LM and
torchtitan do, so it does not multiply the device count; with an expert tensor-parallel degree
``etp`` different from ``tp`` (Megatron-Core MoE parallel folding) ``ep * etp`` is carved out of
``tp * cp * dp * fsdp``.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Literal

from trainperf import vec
from trainperf.errors import SpecError

PipelineSchedule = Literal["1f1b", "interleaved", "gpipe", "dualpipe", "dualpipev"]
PIPELINE_SCHEDULES: tuple[str, ...] = ("1f1b", "interleaved", "gpipe", "dualpipe", "dualpipev")


@dataclass(frozen=True)
class ParallelPlan:
    """Parallel degrees of a training run. Omitted degrees are 1; ``dp`` is derived when ``None``."""

    dp: int | None = None
    """Replicated data-parallel degree (plain DDP, or HSDP's replica groups). ``None``: derived as
    ``num_devices / (fsdp * tp * pp * cp)`` when the plan meets a device count."""
    fsdp: int = 1
    """Fully-sharded data-parallel degree (FSDP FULL_SHARD / ZeRO-3 group size)."""
    zero_stage: int = 0
    """ZeRO stage applied over the ``dp`` group (DeepSpeed / Megatron distributed optimizer):
    0 none, 1 optimizer states, 2 + gradients, 3 + parameters. ``fsdp > 1`` is stage 3 over
    the fsdp group regardless of this field."""
    tp: int = 1
    """Tensor-parallel degree (Megatron column/row split of attention heads and MLP)."""
    sequence_parallel: bool = False
    """Shard norms/dropout activations along the sequence over the tp group (Korthikanti et al.)."""
    pp: int = 1
    """Pipeline-parallel stages."""
    vpp: int = 1
    """Virtual pipeline stages per pp rank (interleaved 1F1B); 1 means plain 1F1B."""
    cp: int = 1
    """Context-parallel degree (sequence split for attention, ring exchange of K/V)."""
    ep: int = 1
    """Expert-parallel degree for MoE layers, within the data-parallel ranks."""
    pp_schedule: PipelineSchedule = "1f1b"
    """Pipeline schedule. ``vpp > 1`` implies ``interleaved`` (1F1B) unless ``gpipe`` is named:
    then it is the circular GPipe schedule of JAX stacks (MaxText ``num_pipeline_repeats``,
    Praxis ``circular_repeat``), where each rank holds ``vpp`` non-adjacent layer chunks.
    ``dualpipe``: DeepSeek-V3's bidirectional schedule (arXiv 2412.19437, section 3.2.1): rank
    ``i`` holds stage ``i`` of one copy of the model and stage ``pp - 1 - i`` of a second, half
    the micro-batches enter at each end, and each forward chunk runs beside a backward chunk so
    that the expert-parallel all-to-alls of one hide behind the other's compute; ``pp`` even,
    ``vpp = 1``, at least ``2 * pp`` micro-batches a step (DualPipe's ``num_chunks >=
    num_ranks * 2``). ``dualpipev``: its "cut-in-half" variant as PyTorch runs it
    (``torch.distributed.pipelining.ScheduleDualPipeV``): ``2 * pp`` stages, rank ``i`` holding
    stages ``i`` and ``2 * pp - 1 - i`` (a V: the first and the last on rank 0), one copy of the
    model, at least ``2 * pp`` micro-batches; ``vpp`` is 2 (set)."""
    etp: int | None = None
    """Expert tensor-parallel degree (Megatron-Core ``expert_tensor_parallel_size``): routed
    experts are split ``etp`` ways instead of ``tp``. ``None`` means ``tp`` (Megatron's default).
    With MoE parallel folding the experts live on their own grid ``etp x ep x edp`` over the same
    devices as ``tp x cp x dp x fsdp``, so ``ep * etp`` must divide ``tp * cp * dp * fsdp``."""
    first_stage_layers: int | None = None
    """Transformer layers on the first pipeline rank (Megatron ``decoder_first_pipeline_num_layers``);
    ``None``: an even share. The layers left are split evenly over the other ranks."""
    last_stage_layers: int | None = None
    """Transformer layers on the last pipeline rank (Megatron ``decoder_last_pipeline_num_layers``)."""
    account_for_embedding_in_pipeline_split: bool = False
    """Megatron: the input embedding takes one layer slot of the first (virtual) stage, so
    ``layers + 1`` (+1 more with the loss) slots split evenly over ``pp * vpp`` chunks."""
    account_for_loss_in_pipeline_split: bool = False
    """Megatron: the LM head and loss take one layer slot of the last (virtual) stage."""

    def __post_init__(self) -> None:
        for name in ("fsdp", "tp", "pp", "vpp", "cp", "ep"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SpecError(f"parallel.{name}", v, "an integer >= 1")
        if self.dp is not None and (isinstance(self.dp, bool) or not isinstance(self.dp, int) or self.dp < 1):
            raise SpecError("parallel.dp", self.dp, "an integer >= 1, or omitted to derive it")
        if self.zero_stage not in (0, 1, 2, 3):
            raise SpecError("parallel.zero_stage", self.zero_stage, "one of 0, 1, 2, 3")
        if not isinstance(self.sequence_parallel, bool):
            raise SpecError("parallel.sequence_parallel", self.sequence_parallel, "true or false")
        if self.sequence_parallel and self.tp == 1:
            raise SpecError("parallel.sequence_parallel", True, "requires tp > 1")
        if self.pp_schedule not in PIPELINE_SCHEDULES:
            raise SpecError("parallel.pp_schedule", self.pp_schedule, f"one of {', '.join(PIPELINE_SCHEDULES)}")
        if self.pp_schedule == "dualpipe" and (self.pp % 2 or self.vpp > 1):
            raise SpecError("parallel.pp_schedule", "dualpipe", f"an even pp with vpp = 1 (DualPipe pairs rank i "
                            f"with rank pp-1-i; got pp={self.pp}, vpp={self.vpp})")
        if self.pp_schedule == "dualpipev" and self.pp > 1:
            if self.vpp not in (1, 2):
                raise SpecError("parallel.vpp", self.vpp, "2 (or omitted) under dualpipev: two stages a rank, in a V")
            object.__setattr__(self, "vpp", 2)
        if self.vpp > 1:
            if self.pp == 1:
                raise SpecError("parallel.vpp", self.vpp, "requires pp > 1")
            if self.pp_schedule not in ("gpipe", "dualpipev"):
                object.__setattr__(self, "pp_schedule", "interleaved")
        if self.etp is not None and (isinstance(self.etp, bool) or not isinstance(self.etp, int) or self.etp < 1):
            raise SpecError("parallel.etp", self.etp, "an integer >= 1, or omitted for etp = tp")
        for name in ("first_stage_layers", "last_stage_layers"):
            v = getattr(self, name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise SpecError(f"parallel.{name}", v, "an integer >= 0, or omitted for an even split")
            if self.pp == 1:
                raise SpecError(f"parallel.{name}", v, "requires pp > 1")
        for name in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise SpecError(f"parallel.{name}", v, "true or false")
            if v and (self.first_stage_layers is not None or self.last_stage_layers is not None):
                raise SpecError(f"parallel.{name}", v,
                                "false when first_stage_layers / last_stage_layers are given (Megatron allows one or the other)")

    # ------------------------------------------------------------------------------------------
    @property
    def expert_tp(self) -> int:
        """Tensor-parallel degree of the routed experts: ``etp``, or ``tp`` when not set."""
        return self.tp if self.etp is None else self.etp

    def stage_layers(self, layers: int) -> tuple[int, int, int]:
        """Transformer layers on ``(the first, the busiest middle, the last)`` pipeline rank
        (:func:`stage_layer_split`). Raises :class:`SpecError` for a split that does not add up."""
        return _stage_layers(self, layers)

    def _stage_layers(self, layers: int) -> tuple[int, int, int]:
        pp = self.pp
        emb = int(self.account_for_embedding_in_pipeline_split)
        loss = int(self.account_for_loss_in_pipeline_split)
        first, last = self.first_stage_layers, self.last_stage_layers
        if pp > 1 and (emb or loss) and (layers + emb + loss) % (pp * self.vpp):
            raise SpecError("parallel.pp", pp, f"pp*vpp={pp * self.vpp} must divide layers + embedding/loss "
                            f"slots = {layers + emb + loss} (account_for_*_in_pipeline_split)")
        if pp > 1 and (first is not None or last is not None):
            rest = layers - (first or 0) - (last or 0)
            ranks = pp - (first is not None) - (last is not None)
            if rest < 0 or (ranks == 0 and rest) or (ranks > 0 and rest < ranks):
                raise SpecError("parallel.first_stage_layers", first,
                                f"first/last stage layers ({first}, {last}) must leave at least one layer per "
                                f"other rank and add up to layers={layers} over pp={pp}")
        split = stage_layer_split(layers, pp, emb, loss, -1 if first is None else first, -1 if last is None else last)
        a, b, c = (int(x) for x in split)
        return a, b, c

    @property
    def model_parallel(self) -> int:
        """Devices that hold one copy of the (sharded) model: ``tp * pp * cp``."""
        return self.tp * self.pp * self.cp

    @property
    def data_parallel(self) -> int:
        """Ranks that each see a different slice of the batch: ``dp * fsdp`` (dp must be set)."""
        return (self.dp or 1) * self.fsdp

    @property
    def num_devices(self) -> int:
        """Product of the mesh degrees (dp must be set)."""
        return (self.dp or 1) * self.fsdp * self.tp * self.pp * self.cp

    @property
    def shards_params(self) -> int:
        """How many ways parameters are sharded beyond tp/pp (:func:`shards_params`)."""
        return int(shards_params(self.dp or 1, self.fsdp, self.zero_stage, self.cp))

    @property
    def shards_grads(self) -> int:
        """Ways gradients are sharded (:func:`shards_grads`)."""
        return int(shards_grads(self.dp or 1, self.fsdp, self.zero_stage, self.cp))

    @property
    def shards_optimizer(self) -> int:
        """Ways optimizer states are sharded (:func:`shards_optimizer`)."""
        return int(shards_optimizer(self.dp or 1, self.fsdp, self.zero_stage, self.cp))

    def resolve(self, num_devices: int) -> ParallelPlan:
        """Fill in ``dp`` for ``num_devices`` and check that the degrees multiply to it."""
        rest = self.fsdp * self.tp * self.pp * self.cp
        if self.dp is None:
            if num_devices % rest:
                raise SpecError(
                    "parallel", f"fsdp*tp*pp*cp={rest}",
                    f"must divide num_devices={num_devices} (dp is derived as num_devices / that)",
                )
            return dataclasses.replace(self, dp=num_devices // rest)
        if self.num_devices != num_devices:
            raise SpecError(
                "parallel", f"dp*fsdp*tp*pp*cp={self.num_devices}",
                f"must equal num_devices={num_devices} (omit dp to derive it)",
            )
        return self

    def describe(self) -> str:
        """Compact label such as ``fsdp=64`` or ``dp=2 fsdp=8 tp=8 sp`` (``gpipe`` or ``dualpipe``
        after the pipeline degrees for those schedules; 1F1B, plain or interleaved, is the default)."""
        parts = []
        for name in ("dp", "fsdp", "tp", "pp", "vpp", "cp", "ep", "etp"):
            v = getattr(self, name)
            if (v and v > 1) or (name == "etp" and v is not None and v != self.tp):
                parts.append(f"{name}={v}")
            if name == "vpp" and self.pp > 1 and self.pp_schedule in ("gpipe", "dualpipe", "dualpipev"):
                parts.append(self.pp_schedule)
        if self.first_stage_layers is not None:
            parts.append(f"first-stage-layers={self.first_stage_layers}")
        if self.last_stage_layers is not None:
            parts.append(f"last-stage-layers={self.last_stage_layers}")
        if self.account_for_embedding_in_pipeline_split:
            parts.append("embedding-slot")
        if self.account_for_loss_in_pipeline_split:
            parts.append("loss-slot")
        if self.sequence_parallel:
            parts.append("sp")
        if self.zero_stage:
            parts.append(f"zero{self.zero_stage}")
        return " ".join(parts) or "single device"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ParallelPlan:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            from trainperf.errors import UnknownNameError

            raise UnknownNameError(f"parallel.{unknown[0]}", unknown[0], names)
        return cls(**data)


@functools.lru_cache(maxsize=4096)
def _stage_layers(plan: ParallelPlan, layers: int) -> tuple[int, int, int]:
    """:meth:`ParallelPlan.stage_layers`, cached (every prediction asks)."""
    return plan._stage_layers(layers)


# ----------------------------------------------------------------------------------------
# The plan's rules as functions of numbers: Python ints for one plan (ParallelPlan's properties
# above), numpy arrays for the planner's candidate table; one definition for both.
#
# Sharded states span the context-parallel ranks too: cp ranks hold the same parameters, and
# every stack that runs cp shards over them (Megatron-Core's distributed optimizer uses the
# data-parallel group *with* context parallelism, ``get_data_parallel_group(
# with_context_parallel=True)``; torchtitan's FSDP2 mesh is ``dp_shard_cp`` = dp_shard x cp;
# MaxText shards parameters over its ``context`` axis as over ``fsdp``).
def shards_params(dp: Any, fsdp: Any, zero_stage: Any, cp: Any) -> Any:
    """How many ways parameters are sharded beyond tp/pp: the fsdp group (or dp at ZeRO-3),
    times cp; 1 when parameters are replicated."""
    return vec.where(fsdp > 1, fsdp * cp, vec.where(zero_stage >= 3, dp * cp, 1))


def _shards_from(stage: int, dp: Any, fsdp: Any, zero_stage: Any, cp: Any) -> Any:
    """Ways a state is sharded that ZeRO shards over dp from ``stage`` on: fsdp (x dp at that
    stage) x cp; 1 when replicated."""
    at = zero_stage >= stage
    return vec.where(fsdp > 1, fsdp * cp * vec.where(at, dp, 1), vec.where(at, dp * cp, 1))


def shards_grads(dp: Any, fsdp: Any, zero_stage: Any, cp: Any) -> Any:
    """Ways gradients are sharded: fsdp (x dp at ZeRO >= 2) x cp; 1 when replicated."""
    return _shards_from(2, dp, fsdp, zero_stage, cp)


def shards_optimizer(dp: Any, fsdp: Any, zero_stage: Any, cp: Any) -> Any:
    """Ways optimizer states are sharded: fsdp (x dp at ZeRO >= 1) x cp; 1 when replicated."""
    return _shards_from(1, dp, fsdp, zero_stage, cp)


def stage_layer_split(layers: Any, pp: Any, emb: Any, loss: Any, first: Any, last: Any) -> tuple[Any, Any, Any]:
    """Transformer layers on ``(the first, the busiest middle, the last)`` pipeline rank, counting
    every virtual chunk of a rank.

    Even split: ``ceil(layers / pp)`` each. Megatron's ``account_for_embedding/loss_in_pipeline_
    split`` (``emb``, ``loss``: 0 or 1): ``layers + emb + loss`` slots split evenly, ``(layers +
    emb + loss) / pp`` a rank, the first one fewer layer (the embedding's slot), the last one fewer
    (the loss'). Explicit ``first`` / ``last`` stage layers (-1: not given): the rest split evenly
    (ceil) over the other ranks. Two ranks have no middle one: the busier of the two stands in.
    With ``pp = 1`` the one stage holds every layer. Arguments are numbers or numpy arrays; the
    split is assumed valid (:meth:`ParallelPlan.stage_layers` checks it).
    """
    even = vec.ceil(layers / pp)
    per_rank = (layers + emb + loss) / pp
    has_first, has_last = first >= 0, last >= 0
    rest = layers - vec.maximum(first, 0) - vec.maximum(last, 0)
    ranks = pp - vec.where(has_first, 1, 0) - vec.where(has_last, 1, 0)
    mid = vec.where(ranks > 0, vec.ceil(rest / vec.maximum(ranks, 1)), 0.0)
    explicit = vec.where(has_first, True, has_last)
    slots = vec.where(emb > 0, True, loss > 0)
    lead = vec.where(slots, per_rank - emb, vec.where(explicit, vec.where(has_first, first, mid), even))
    tail = vec.where(slots, per_rank - loss, vec.where(explicit, vec.where(has_last, last, mid), even))
    middle = vec.where(slots, vec.where(pp == 2, vec.maximum(lead, tail), per_rank),
                       vec.where(explicit, mid, even))
    one = pp <= 1
    return vec.where(one, layers, lead), vec.where(one, layers, middle), vec.where(one, layers, tail)
