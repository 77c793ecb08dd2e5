"""What a software stack can run: the ``[capabilities]`` table of a stack profile, validated.

A stack profile (:mod:`trainperf.predict.stacks`) states, as facts with sources, which plans the
stack can execute and how it lays out memory::

    [capabilities]
    parallelisms = ["dp", "tp", "pp", "vpp", "cp", "ep"]   # degrees that may exceed 1
    hybrid_shard = false                                   # dp > 1 beside fsdp > 1 (HSDP)
    zero_stages = [0, 1]                                   # ZeRO stages over the dp group
    pipeline_zero_stages = [0, 1]                          # ZeRO stages (3 = fsdp) beside pp > 1
    sequence_parallel = "optional"                         # with tp > 1: optional | always | never
    pipeline_schedules = ["1f1b", "interleaved"]
    max_vpp = 0                                            # 0: up to layers / pp
    pipeline_slots = true                                  # Megatron's embedding / loss layer slots
    uneven_stages = true                                   # first / last stage layer counts
    checkpointing = ["none", "selective", "full", "full:K"]
    loss_bytes_per_logit = 6.0                             # live bytes per logit at the loss
    compiled_loss_bytes_per_logit = 2.0                    # the same when the model is compiled
    fp8_gemm_input_bytes = 1.0                             # kept bytes of an fp8 matmul's input
    frozen_weight_bytes = 2.0                              # bytes a frozen (LoRA base) weight is
                                                           # held in
    fsdp_grad_unit = "layer"                               # unsharded gradient before its
                                                           # reduce-scatter: a layer's | one tensor's
    expert_tp = ["tp", "1"]                                # routed experts split like the dense
                                                           # layers, or not at all (MoE folding)
    cp_shards_states = true                                # FSDP over the cp ranks even when the
                                                           # plan shards nothing else (torchtitan)
    moe_dispatchers = ["nccl", "deepep"]                   # MoE token dispatch kernels it can run
    moe_probs_in_activation = true                         # routed rows weighted inside the
                                                           # experts' activation (nothing kept for
                                                           # the probabilities' gradient)
    fused_loss_chunk_bytes = {gpu = 1073741824}            # alone on one device, the LM head and
                                                           # loss fused, chunked to this many bytes
                                                           # of fp32 logits (by device kind)
    [capabilities.sources]
    parallelisms = "Megatron-LM arguments.py ..."

``parallelisms`` names from :data:`PARALLELISMS` (``fsdp`` is ZeRO-3 / FSDP over its own group,
``dp`` plain replication, alone or beside fsdp as HSDP). ``checkpointing`` holds policy names of
:mod:`trainperf.specs.checkpointing`, ``full:K`` / ``full-every:N`` standing for every K / N.
A missing key means "anything" (the ``generic`` profile states everything explicitly).

:func:`plan_refusal` says in one line why a stack cannot run a workload's plan (``None`` when it
can); :func:`stacks_for` lists the published frameworks that can (:func:`compared_stacks`: the
planner compares those, not ``generic`` nor ``trainperf-bench``); :func:`apply_stack` rewrites
what the stack always does but a plan left unsaid (sequence parallelism under torchtitan's TP).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from trainperf import vec
from trainperf.errors import SpecError, TrainperfError, UnknownNameError
from trainperf.predict import stacks
from trainperf.specs.checkpointing import POLICY_NAMES
from trainperf.specs.hardware import KINDS as DEVICE_KINDS
from trainperf.specs.parallel import PipelineSchedule

PARALLELISMS: tuple[str, ...] = ("dp", "fsdp", "tp", "pp", "vpp", "cp", "ep")
SP_MODES: tuple[str, ...] = ("optional", "always", "never")
SCHEDULES: tuple[str, ...] = ("1f1b", "interleaved", "gpipe", "dualpipe", "dualpipev")
KEYS: tuple[str, ...] = ("parallelisms", "hybrid_shard", "zero_stages", "pipeline_zero_stages", "sequence_parallel",
                         "pipeline_schedules", "max_vpp",
                         "pipeline_slots", "uneven_stages", "checkpointing", "loss_bytes_per_logit",
                         "compiled_loss_bytes_per_logit", "fp8_gemm_input_bytes", "fsdp_grad_unit", "expert_tp",
                         "cp_shards_states", "moe_dispatchers", "fused_loss_chunk_bytes", "frozen_weight_bytes",
                         "moe_probs_in_activation")
GRAD_UNITS: tuple[str, ...] = ("layer", "tensor")
EXPERT_TP: tuple[str, ...] = ("tp", "1")
MOE_DISPATCHERS: tuple[str, ...] = ("nccl", "deepep", "hybrid-ep", "mori")
"""Token dispatch kernel families (:data:`trainperf.predict.kernels.expert_dispatch.FAMILIES`)."""
DEFAULT_LOSS_BYTES_PER_LOGIT = 6.0
"""bf16 logits plus the fp32 copy the loss upcasts to (PyTorch autocast runs cross-entropy in fp32)."""
DEFAULT_FROZEN_WEIGHT_BYTES = 2.0
"""A frozen weight in 16 bits: the base of a LoRA fine-tune, loaded in bf16 as PEFT's recipes do."""


@dataclass(frozen=True)
class Capabilities:
    """A stack's runnable plan space and memory facts (see the module docstring)."""

    stack: str
    parallelisms: tuple[str, ...] = PARALLELISMS
    hybrid_shard: bool = True
    """Replicas of a sharded group (dp > 1 with fsdp > 1: HSDP / HYBRID_SHARD)."""
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    pipeline_zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    """ZeRO stages a plan with pp > 1 may use, 3 standing for fsdp (DeepSpeed's PipelineEngine
    refuses ZeRO-2 and -3)."""
    sequence_parallel: str = "optional"
    pipeline_schedules: tuple[str, ...] = SCHEDULES
    max_vpp: int = 0
    """Largest vpp; 0: layers / pp."""
    pipeline_slots: bool = True
    uneven_stages: bool = True
    checkpointing: tuple[str, ...] = ()
    """Policy names; empty: every policy."""
    loss_bytes_per_logit: float = DEFAULT_LOSS_BYTES_PER_LOGIT
    compiled_loss_bytes_per_logit: float = 0.0
    """Bytes per logit when the run is compiled (``training.compile``); 0: as uncompiled."""
    fp8_gemm_input_bytes: float = 0.0
    """Bytes per element an fp8 run keeps of a weight matmul's input for its backward
    (Transformer Engine: the fp8 cast, 1); 0: as the other activations."""
    frozen_weight_bytes: float = DEFAULT_FROZEN_WEIGHT_BYTES
    """Bytes per parameter a frozen weight (a LoRA fine-tune's base) is held in: 2 for a 16-bit
    base, 4 where the stack keeps every weight in fp32 and casts for the matmuls (the bench:
    autocast, or FSDP2's mixed-precision gather, over an fp32 model); an fp32 run holds 4 either way."""
    fsdp_grad_unit: str = "layer"
    """What FSDP / ZeRO-3 holds unsharded of the gradients before reduce-scattering them: a whole
    layer's (PyTorch FSDP units, DeepSpeed buckets) or one weight tensor's at a time (GSPMD)."""
    expert_tp: tuple[str, ...] = ("tp",)
    """How the routed experts may be split: ``tp`` (like the dense layers: ``etp = tp``) and/or
    ``1`` (not split; Megatron-Core's MoE parallel folding, ``--expert-tensor-parallel-size 1``)."""
    cp_shards_states: bool = False
    """Parameters, gradients and optimizer states are sharded over the cp ranks whenever cp > 1,
    even in a plan with no other sharding (torchtitan applies FSDP2 over its ``dp_shard_cp``
    mesh whenever context parallelism is on): :func:`apply_stack` makes that plan ZeRO-3 over
    the cp ranks."""
    moe_dispatchers: tuple[str, ...] = MOE_DISPATCHERS
    """MoE token dispatch kernels the stack can run (``training.moe_dispatcher``)."""
    moe_probs_in_activation: bool = False
    """The router probabilities weight the routed rows inside the experts' activation function
    (Megatron-Core's weighted SwiGLU), whose input the backward keeps anyway, so nothing more is
    kept for the probabilities' gradient; False: the weighting is a product of its own, before or
    after the experts, that keeps one hidden-wide 16-bit row per routed copy (the expert's input or
    output) for it."""
    fused_loss_chunk_bytes: tuple[tuple[str, float], ...] = ()
    """(device kind, bytes) pairs (kinds of :data:`trainperf.specs.hardware.KINDS`): the bytes of
    fp32 logits one chunk holds where the stack, on one device with nothing sharded, fuses the LM
    head into a chunked cross-entropy (Liger-Kernel's fused linear cross-entropy; trainperf's
    bench); no entry: the whole logits at the loss (``loss_bytes_per_logit``). The step model's
    ``memory.fused_loss_bytes`` prices what is live."""
    introduced: tuple[tuple[str, str, tuple[tuple[str, tuple[int, ...]], ...]], ...] = ()
    """``(key, value, ((product, release), ...))``: a value of a list-valued key the stack gained
    in a later release (``[capabilities.introduced]``, e.g. ``"expert_tp=1" = ["Megatron-Core
    0.10", "NeMo 24.12"]``); :meth:`as_of` leaves it out for a run on an older release."""
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)

    def as_of(self, framework: str) -> Capabilities:
        """These capabilities as the release named in ``framework`` had them (a framework cell as
        published, e.g. ``"NeMo 24.09 (Megatron-Core, TE)"``): every value introduced in a later
        release of a product the string names with a version is left out. A string naming no
        version of those products (or empty) means the current release: nothing changes."""
        drop: dict[str, set[str]] = {}
        for key, value, releases in self.introduced:
            for product, first in releases:
                have = release_named(framework, product)
                # a calendar release (NeMo 24.09) is not compared with a semantic one (NeMo 2.0),
                # nor a dated snapshot (torchtitan 2024-08) with either
                if have is not None and release_kind(have) == release_kind(first):
                    if have < first:
                        drop.setdefault(key, set()).add(value)
                    break
        if not drop:
            return self
        changes: dict[str, Any] = {k: tuple(v for v in getattr(self, k) if v not in gone)
                                   for k, gone in drop.items()}
        return dataclasses.replace(self, **changes)

    def allows_policy(self, policy: str) -> bool:
        """Whether the stack has checkpointing policy ``policy`` (``full:4`` matches ``full:K``,
        ``selective:core_attn+moe_act`` matches ``selective:MODULES``, ``custom:out_proj=device``
        matches ``custom:NAME=WHERE``)."""
        if not self.checkpointing:
            return True
        if policy in self.checkpointing:
            return True
        head, sep, _tail = policy.partition(":")
        token = {"full": "K", "full-every": "N", "selective": "MODULES", "custom": "NAME=WHERE"}.get(head)
        return bool(sep) and token is not None and f"{head}:{token}" in self.checkpointing

    def allows_expert_tp(self, etp: Any, tp: Any) -> Any:
        """Whether the stack splits routed experts ``etp`` ways beside tensor parallelism ``tp``
        (numbers, or arrays of them)."""
        return (vec.where(etp == tp, "tp" in self.expert_tp, False)
                | vec.where(etp == 1, "1" in self.expert_tp, False))

    def schedule_for(self, vpp: int) -> PipelineSchedule:
        """The schedule a plan with ``pp > 1`` and ``vpp`` layer chunks per rank runs under here:
        1F1B (interleaved when ``vpp > 1``) where the stack has it, since it holds fewer
        micro-batches than GPipe for the same bubble; else GPipe (circular when ``vpp > 1``)."""
        one_f_one_b: PipelineSchedule = "interleaved" if vpp > 1 else "1f1b"
        if one_f_one_b in self.pipeline_schedules or "gpipe" not in self.pipeline_schedules:
            return one_f_one_b
        return "gpipe"

    def runs_vpp(self) -> bool:
        """Whether a rank may hold several layer chunks (interleaved 1F1B or circular GPipe)."""
        return "vpp" in self.parallelisms and self.schedule_for(2) in self.pipeline_schedules

    def vpp_limit(self, layers: int, pp: Any) -> Any:
        """Largest vpp this stack runs with ``pp`` stages (a number or an array) of a
        ``layers``-layer model."""
        top = vec.maximum(1, (layers + 2) // vec.maximum(pp, 1))  # + the embedding and loss slots
        return vec.minimum(top, self.max_vpp) if self.max_vpp else top


LIST_KEYS: dict[str, tuple[str, ...]] = {"parallelisms": PARALLELISMS, "pipeline_schedules": SCHEDULES,
                                          "checkpointing": POLICY_NAMES, "expert_tp": EXPERT_TP,
                                          "moe_dispatchers": MOE_DISPATCHERS}
"""List-valued keys and the names each may hold (``expert_tp`` and ``moe_dispatchers`` not empty);
``[capabilities.introduced]`` may date their values."""


VERSION_RE = r"\d{4}-\d{1,2}(?:-\d{1,2})?|\d+(?:\.\d+)*"
"""A release: a version (``24.09``, ``0.12.1``) or a date (``2024-08``, ``2024-08-15``) for the
products that publish none (torchtitan was used from its main branch until 2025)."""


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.split(r"[.-]", text))


def release_kind(version: tuple[int, ...]) -> int:
    """0: semantic (``0.12``), 1: calendar (``24.09``), 2: a date (``2024-08``). Releases of
    different kinds are not compared."""
    return 0 if version[0] < 20 else (1 if version[0] < 1000 else 2)


def release_named(framework: str, product: str) -> tuple[int, ...] | None:
    """The version ``framework`` gives ``product`` (``"NeMo 24.09"`` -> (24, 9) for ``nemo``;
    ``v`` prefixes and ``core_r`` tags allowed), or the date of a snapshot of it
    (``"torchtitan 2024-08"``, ``"pytorch/torchtitan @ 3faaa1a0 (2024-08)"`` -> (2024, 8)), or
    None when it names neither."""
    name = rf"(?<![a-z]){re.escape(product.lower())}"
    text = framework.lower()
    m = (re.search(rf"{name}[\s:_-]*(?:core_r|v)?({VERSION_RE})", text)
         or re.search(rf"{name}\s*@\s*(?:[0-9a-f]{{6,40}}\s*)?\(?(\d{{4}}-\d{{1,2}}(?:-\d{{1,2}})?)\)?", text))
    if not m:
        return None
    v = _version(m.group(1))
    return v + (0,) * (4 - len(v))


def describe_release(version: tuple[int, ...]) -> str:
    """``(2024, 11, 0, 0)`` -> ``2024-11``; ``(24, 12, 0, 0)`` -> ``24.12``."""
    if release_kind(version) == 2:
        return f"{version[0]}-{version[1]:02d}"
    return f"{version[0]}.{version[1]}"


def _introduced(stack: str, v: Any, kw: Mapping[str, Any]) -> tuple[tuple[str, str, tuple[tuple[str, tuple[int, ...]], ...]], ...]:
    where = _where(stack, "introduced")
    if not isinstance(v, Mapping):
        raise SpecError(where, v, 'a table of "key=value" = ["Product X.Y", ...]')
    out = []
    for spec, releases in v.items():
        if spec == "sources":
            continue
        key, sep, value = str(spec).partition("=")
        if not sep or key not in LIST_KEYS:
            raise SpecError(f"{where}.{spec}", spec, f"'key=value' with key one of {', '.join(LIST_KEYS)}")
        if value not in kw.get(key, ()):
            raise SpecError(f"{where}.{spec}", value, f"a value [capabilities].{key} lists")
        if not isinstance(releases, list) or not releases:
            raise SpecError(f"{where}.{spec}", releases, 'a non-empty list of "Product X.Y"')
        parsed = []
        for r in releases:
            m = re.fullmatch(rf"\s*(.*?)\s+v?({VERSION_RE})\s*", str(r))
            if not m or not m.group(1):
                raise SpecError(f"{where}.{spec}", r, 'a product and its first release, e.g. "NeMo 24.12" '
                                                      'or "torchtitan 2024-11"')
            ver = _version(m.group(2))
            parsed.append((m.group(1).lower(), ver + (0,) * (4 - len(ver))))
        out.append((key, value, tuple(parsed)))
    return tuple(out)


def _where(stack: str, key: str) -> str:
    return f"stacks/{stack}.toml [capabilities].{key}"


def _str_list(v: Any, stack: str, key: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise SpecError(_where(stack, key), v, "a list of strings")
    for x in v:
        stacks.check_choice(_where(stack, key), x, allowed)
    return tuple(v)


_MAX_BYTES = {"fp8_gemm_input_bytes": 4, "loss_bytes_per_logit": 64, "compiled_loss_bytes_per_logit": 64,
              "frozen_weight_bytes": 8}


def _value(stack: str, key: str, v: Any) -> Any:
    """A checked ``[capabilities]`` value (one-line errors naming the key and value)."""
    where = _where(stack, key)
    if key in LIST_KEYS:
        got = _str_list(v, stack, key, LIST_KEYS[key])
        if not got and key in ("expert_tp", "moe_dispatchers"):
            raise SpecError(where, v, f"a non-empty list of {', '.join(LIST_KEYS[key])}")
        return got
    if key in ("zero_stages", "pipeline_zero_stages"):
        if not isinstance(v, list) or not v or any(isinstance(x, bool) or x not in (0, 1, 2, 3) for x in v):
            raise SpecError(where, v, "a non-empty list of 0, 1, 2, 3")
        return tuple(sorted(set(v)))
    if key == "max_vpp":
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise SpecError(where, v, "an integer >= 0 (0: up to layers / pp)")
        return v
    if key in _MAX_BYTES:
        return stacks.check_number(where, v, _MAX_BYTES[key], " of bytes")
    if key == "fused_loss_chunk_bytes":
        if not isinstance(v, Mapping) or not v:
            raise SpecError(where, v, "a table of device kind = bytes, e.g. {gpu = 1073741824}")
        for kind, b in v.items():
            stacks.check_choice(f"{where}.{kind}", kind, DEVICE_KINDS)
            stacks.check_number(f"{where}.{kind}", b, 2.0**40, " of bytes")
        return tuple((str(k), float(b)) for k, b in v.items())
    if key in ("sequence_parallel", "fsdp_grad_unit"):
        return stacks.check_choice(where, v, SP_MODES if key == "sequence_parallel" else GRAD_UNITS)
    return stacks.check_flag(where, v)  # pipeline_slots, uneven_stages, hybrid_shard, cp_shards_states, moe_probs_in_activation


def capabilities_from_table(stack: str, table: Mapping[str, Any]) -> Capabilities:
    """Validate a ``[capabilities]`` table (one-line errors naming the key and value)."""
    kw: dict[str, Any] = {}
    for key, v in table.items():
        if key == "sources" and not isinstance(v, Mapping):
            raise SpecError(_where(stack, "sources"), v, "a table of key = source")
        if key in ("sources", "introduced"):
            continue  # introduced is read below, once the lists it dates are known
        if key not in KEYS:
            raise UnknownNameError(_where(stack, key), key, KEYS)
        kw[key] = _value(stack, key, v)
    if "introduced" in table:
        full = {k: kw.get(k, getattr(Capabilities, k, ())) for k in LIST_KEYS}
        kw["introduced"] = _introduced(stack, table["introduced"], full)
    sources = {str(k): str(s) for k, s in dict(table.get("sources", {})).items()}
    missing = [k for k in kw if not sources.get(k, "").strip()]
    if missing:
        raise SpecError(_where(stack, "sources"), sorted(sources), f"a source for every value; missing {', '.join(missing)}")
    return Capabilities(stack=stack, sources=sources, **kw)


def capabilities_of(stack: Any) -> Capabilities:
    """The capabilities of ``stack``: a profile name or file, a Profile, or None (``generic``)."""
    if isinstance(stack, stacks.Profile):
        return capabilities_from_table(stack.name, stack.capabilities)
    key = str(stack or "generic")
    if key in stacks.STACKS:
        return _packaged(key)
    prof = stacks.load_profile(key)
    return capabilities_from_table(prof.name, prof.capabilities)


@lru_cache(maxsize=16)
def _packaged(name: str) -> Capabilities:
    return capabilities_from_table(name, stacks.packaged_profile(name).capabilities)


def loss_bytes_per_logit(stack: Any, compiled: bool = False) -> float:
    """Live bytes per logit at the loss for ``stack`` (for the memory model), compiled or not; a
    stack that cannot be read falls back to :data:`DEFAULT_LOSS_BYTES_PER_LOGIT` (predict reports
    its own error)."""
    try:
        caps = capabilities_of(stack)
    except TrainperfError:
        return DEFAULT_LOSS_BYTES_PER_LOGIT
    if compiled and caps.compiled_loss_bytes_per_logit:
        return caps.compiled_loss_bytes_per_logit
    return caps.loss_bytes_per_logit


def frozen_weight_bytes(stack: Any) -> float:
    """Bytes per parameter ``stack`` holds a frozen weight in (:attr:`Capabilities.frozen_weight_bytes`);
    a stack that cannot be read falls back to :data:`DEFAULT_FROZEN_WEIGHT_BYTES` (predict
    reports its own error)."""
    try:
        return capabilities_of(stack).frozen_weight_bytes
    except TrainperfError:
        return DEFAULT_FROZEN_WEIGHT_BYTES


def fused_loss_chunk_bytes(stack: Any, device_kind: str) -> float:
    """Bytes of fp32 logits one chunk of ``stack``'s fused head-and-loss holds on a ``device_kind``
    device alone (:attr:`Capabilities.fused_loss_chunk_bytes`); 0 where it does not fuse (or the
    stack cannot be read: predict reports its own error)."""
    try:
        return float(dict(capabilities_of(stack).fused_loss_chunk_bytes).get(device_kind, 0.0))
    except TrainperfError:
        return 0.0


def fp8_gemm_input_bytes(stack: Any, precision: str) -> float | None:
    """Bytes per element ``stack`` keeps of a matmul input in an fp8/fp4 run, or None (as the
    other activations: bf16 runs, stacks that keep the high-precision input, unreadable stacks)."""
    if precision not in ("fp8", "fp4"):
        return None
    try:
        caps = capabilities_of(stack)
    except TrainperfError:
        return None
    return caps.fp8_gemm_input_bytes or None


def moe_probs_in_activation(stack: Any) -> bool:
    """Whether ``stack`` weights routed rows by the router probabilities inside the experts'
    activation (:attr:`Capabilities.moe_probs_in_activation`); False for an unreadable stack."""
    try:
        return capabilities_of(stack).moe_probs_in_activation
    except TrainperfError:
        return False


def fsdp_grad_per_tensor(stack: Any) -> bool:
    """Whether ``stack`` reduce-scatters each weight's gradient on its own (``fsdp_grad_unit =
    "tensor"``); False for an unreadable stack."""
    try:
        return capabilities_of(stack).fsdp_grad_unit == "tensor"
    except TrainperfError:
        return False


@dataclass(slots=True, eq=False)
class PlanFacts:
    """What a stack's capabilities are checked against: Python numbers and bools for one plan
    (:meth:`of`), numpy arrays with one element per candidate for the planner. Fields left
    ``None`` are not known yet (the planner checks a rule once its columns exist)."""

    dp: Any = None
    fsdp: Any = None
    tp: Any = None
    pp: Any = None
    vpp: Any = None
    cp: Any = None
    ep: Any = None
    zero_stage: Any = None
    sp: Any = None
    """Sequence parallelism is on."""
    etp: Any = None
    etp_given: Any = None
    """The experts' tp degree is set apart from tp (MoE parallel folding)."""
    schedule_ok: Any = None
    """The stack has the pipeline schedule the plan runs."""
    schedule: str = ""
    """That schedule's name (one plan only: for the message)."""
    slots: Any = None
    """Megatron's embedding or loss takes a pipeline layer slot."""
    uneven: Any = None
    """The first or last stage's layers are set apart (an uneven split)."""

    @classmethod
    def of(cls, caps: Capabilities, w: Any) -> PlanFacts:
        p = w.plan
        return cls(dp=p.dp or 1, fsdp=p.fsdp, tp=p.tp, pp=p.pp, vpp=p.vpp, cp=p.cp, ep=p.ep, zero_stage=p.zero_stage,
                   sp=p.sequence_parallel, etp=p.expert_tp, etp_given=p.etp is not None,
                   schedule_ok=p.pp_schedule in caps.pipeline_schedules, schedule=p.pp_schedule,
                   slots=p.account_for_embedding_in_pipeline_split or p.account_for_loss_in_pipeline_split,
                   uneven=p.first_stage_layers is not None or p.last_stage_layers is not None)


Rule = tuple[tuple[str, ...], Callable[[PlanFacts], Any], Callable[[PlanFacts], str]]
"""(the facts a rule reads, whether a plan passes it (a bool or an array), why not)."""


def _degree_rule(caps: Capabilities, name: str) -> Rule:
    """A degree above 1 needs the parallelism (ZeRO-3 over dp is FSDP; the planner, whose
    ZeRO stage is not known when it lays out the mesh, enumerates that plan as fsdp)."""
    fsdp_over_dp = name == "dp" and "fsdp" in caps.parallelisms

    def ok(f: PlanFacts) -> Any:
        return (getattr(f, name) <= 1) | (fsdp_over_dp and f.zero_stage is not None and f.zero_stage >= 3)

    return ((name,), ok, lambda f: f"{caps.stack} has no {name} (runs {', '.join(caps.parallelisms)})")


def _pipeline_stage(f: PlanFacts) -> Any:
    """The ZeRO stage beside the pipeline, fsdp counting as 3."""
    return vec.where(f.fsdp > 1, 3, vec.where(f.dp > 1, f.zero_stage, 0))


def _data_rules(caps: Capabilities) -> list[Rule]:
    """Replicas of a sharded group, ZeRO stages over dp, sequence parallelism."""
    fsdp_ok = "fsdp" in caps.parallelisms
    rules: list[Rule] = []
    if not caps.hybrid_shard:
        rules.append((("dp", "fsdp"), lambda f: (f.dp <= 1) | (f.fsdp <= 1),
                      lambda f: f"{caps.stack} shards over every data-parallel rank (no replicas of an fsdp group)"))
    if not set(caps.zero_stages) >= {0, 1, 2, 3}:
        rules.append((("dp", "fsdp", "zero_stage"),
                      lambda f: ((f.dp <= 1) | vec.isin(f.zero_stage, caps.zero_stages)
                                 | (fsdp_ok & (f.zero_stage == 3) & (f.fsdp == 1))),
                      lambda f: (f"{caps.stack} runs ZeRO stage {'/'.join(map(str, caps.zero_stages))} over dp, "
                                 f"not {f.zero_stage}")))
    if caps.sequence_parallel == "always":
        rules.append((("tp", "sp"), lambda f: (f.tp <= 1) | f.sp,
                      lambda f: f"{caps.stack}'s tensor parallelism always shards the sequence (sp)"))
    if caps.sequence_parallel == "never":
        rules.append((("sp",), lambda f: vec.where(f.sp, False, True),
                      lambda f: f"{caps.stack} has no Megatron-style sequence parallelism"))
    return rules


def _pipeline_rules(caps: Capabilities, layers: int) -> list[Rule]:
    """What a plan with pp > 1 needs: its ZeRO stage beside the pipeline, its schedule, its vpp,
    the embedding/loss slots and uneven stages it uses."""
    rules: list[Rule] = []
    if not set(caps.pipeline_zero_stages) >= {0, 1, 2, 3}:
        rules.append((("pp", "dp", "fsdp", "zero_stage"),
                      lambda f: (f.pp <= 1) | vec.isin(_pipeline_stage(f), caps.pipeline_zero_stages),
                      lambda f: (f"{caps.stack} runs no {'fsdp' if f.fsdp > 1 else f'ZeRO stage {_pipeline_stage(f)}'}"
                                 " with pipeline parallelism")))
    rules += [
        (("pp", "schedule_ok"), lambda f: (f.pp <= 1) | f.schedule_ok,
         lambda f: f"{caps.stack} has no {f.schedule} pipeline schedule"),
        (("pp", "vpp"), lambda f: (f.pp <= 1) | (f.vpp <= caps.vpp_limit(layers, f.pp)),
         lambda f: f"{caps.stack} runs vpp up to {caps.vpp_limit(layers, f.pp)} here"),
    ]
    if not caps.pipeline_slots:
        rules.append((("pp", "slots"), lambda f: vec.where(f.slots, f.pp <= 1, True),
                      lambda f: f"{caps.stack} has no embedding/loss pipeline slots"))
    if not caps.uneven_stages:
        rules.append((("pp", "uneven"), lambda f: vec.where(f.uneven, f.pp <= 1, True),
                      lambda f: f"{caps.stack} cannot set first/last stage layers"))
    return rules


@lru_cache(maxsize=256)
def capability_rules(caps: Capabilities, layers: int) -> tuple[Rule, ...]:
    """The rules a plan must pass for ``caps.stack`` to run it, in the order :func:`plan_refusal`
    reports them; the one definition the planner applies to its candidate arrays too
    (:func:`trainperf.plan.space.stack_allows`). A rule this stack cannot fail (a parallelism it
    has, every ZeRO stage) is left out. The checkpointing policy is checked apart
    (:meth:`Capabilities.allows_policy`): the planner tries policies as groups, not rows."""
    degrees = [_degree_rule(caps, n) for n in ("dp", "fsdp", "tp", "pp", "vpp", "cp", "ep") if n not in caps.parallelisms]
    experts: Rule = (("ep", "etp", "etp_given", "tp"),
                     lambda f: vec.where((f.ep > 1) | f.etp_given, caps.allows_expert_tp(f.etp, f.tp), True),
                     lambda f: f"{caps.stack} splits routed experts {' or '.join(caps.expert_tp)} ways, not etp={f.etp}")
    return (*degrees, *_data_rules(caps), *_pipeline_rules(caps, layers), experts)


def plan_refusal(caps: Capabilities, w: Any) -> str | None:
    """Why ``caps.stack`` cannot run workload ``w``'s plan (one phrase), or ``None``."""
    f = PlanFacts.of(caps, w)
    for _reads, ok, why in capability_rules(caps, w.model.layers):
        if not ok(f):
            return why(f)
    if not caps.allows_policy(w.activation_checkpointing):
        return f"{caps.stack} has no checkpointing policy {w.activation_checkpointing}"
    return None


def compared_stacks() -> tuple[str, ...]:
    """The packaged stacks the planner compares: the published frameworks, i.e. every packaged
    profile but ``generic`` (every table at once), ``trainperf-bench`` (trainperf's own bench,
    which a bench run's workload names; it is no framework a plan is carried out with) and the
    other profiles no published table was fitted on (``hf-transformers``: ``--stack`` names them)."""
    return tuple(s for s in stacks.STACKS if s != stacks.DEFAULT_STACK and s not in stacks.UNPUBLISHED_STACKS)


def packaged_capabilities() -> tuple[Capabilities, ...]:
    """The capabilities of every stack the planner compares (:func:`compared_stacks`)."""
    return tuple(_packaged(s) for s in compared_stacks())


def stacks_for(w: Any) -> tuple[str, ...]:
    """The published frameworks (:func:`compared_stacks`: not ``generic``, not ``trainperf-bench``)
    that can run workload ``w``'s plan."""
    return tuple(s for s in compared_stacks() if plan_refusal(_packaged(s), w) is None)


def apply_stack(w: Any) -> Any:
    """``w`` with what its stack always does made explicit, each with a note: sequence
    parallelism under tensor parallelism when the stack always shards the sequence (torchtitan,
    MaxText), the GPipe schedule of a stack whose pipeline has no 1F1B (MaxText, PaxML: a
    1F1B or interleaved plan, the default, is run as GPipe, circular when vpp > 1), and states
    sharded over the cp ranks of a plan that shards nothing else when the stack always does
    (torchtitan: ``cp_shards_states``; a plan with replicas, dp > 1, is left as written).
    Everything else is left as written: a plan the stack cannot run is predicted as given, with
    a note saying why the stack cannot run it (:func:`plan_refusal`)."""
    p = w.plan
    want_sp = p.tp > 1 and not p.sequence_parallel
    want_sched = p.pp > 1 and p.pp_schedule != "gpipe"
    want_cp = p.cp > 1 and p.fsdp == 1 and p.zero_stage < 3 and (p.dp or 1) == 1
    stack = getattr(w, "stack", None)
    if not (want_sp or want_sched or want_cp) and (stack is None or stack == "generic"):
        return w
    try:
        caps = capabilities_of(stack)
    except TrainperfError:  # the stack's own loader reports a bad profile
        return w
    notes = list(w.notes)
    if want_sp and caps.sequence_parallel == "always":
        p = dataclasses.replace(p, sequence_parallel=True)
        notes.append(f"{caps.stack}'s tensor parallelism always shards the sequence between its regions: "
                     "sequence parallel assumed")
    if want_sched and p.pp_schedule not in caps.pipeline_schedules and caps.schedule_for(p.vpp) == "gpipe":
        p = dataclasses.replace(p, pp_schedule="gpipe")
        notes.append(f"{caps.stack}'s pipeline runs every micro-batch's forward before the backward: "
                     f"GPipe schedule{' (circular)' if p.vpp > 1 else ''} assumed")
    if want_cp and caps.cp_shards_states:
        p = dataclasses.replace(p, zero_stage=3)
        notes.append(f"{caps.stack} shards parameters, gradients and optimizer states over the {p.cp} "
                     "context-parallel ranks (FSDP over its dp_shard x cp mesh whenever cp > 1): ZeRO-3 over "
                     "them assumed")
    out = w if p is w.plan else dataclasses.replace(w, plan=p, notes=tuple(notes))
    refusal = plan_refusal(caps, out)
    if refusal is None:
        return out
    return dataclasses.replace(out, notes=(*out.notes, f"{refusal}: predicted as written, but {caps.stack} "
                                           "cannot run this plan"))
