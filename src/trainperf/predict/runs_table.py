"""A runs table (the packaged ``data/published_runs.csv`` or any CSV with its columns) as
workloads the predictor can run.

The packaged CSV (169 rows from 30 public tables; its columns: docs/PUBLISHED_RUNS.md) keeps
each measurement as published; tables other people write with the same columns spell things as
they please. :func:`load_table_runs` maps every row either to a :class:`TableRun` with a
:class:`~trainperf.specs.workload.Workload` and a step time, or to an exclusion whose one-line
reason says what is missing. Nothing is dropped silently: every row comes back, read or not.

How a row is read:

* cells through :mod:`trainperf.predict.runs_cells` ("1,024", "8k", "2x8", "tp=8", "850 ms",
  "4M tokens", "n/a", "not stated", "BF16 mixed", "FP8 (Float8 rowwise)"...);
* the framework cell names the software stack (:func:`~trainperf.predict.runs_cells.read_framework`);
* the hardware cell is resolved to a catalog id by one documented rule
  (:func:`trainperf.specs.device_names.read_device`); how, is kept per row (``hardware_read``);
  a multi-node row's ``interconnect`` cell, when it states a NIC rate other than the catalog's,
  sets the device's inter-node link (:func:`~trainperf.predict.runs_cells.read_interconnect`);
* a value the row does not state is the stack's documented default (the ``[defaults]`` table of
  its profile, :mod:`trainperf.predict.stack_defaults`), and the row's ``assumptions`` say so,
  with the default's source. Blank parallel degrees (pp, vpp, cp, ep) mean "not used" (1);
* torchtitan's "local batch size" (its ``micro_batch_column`` default ``local_batch``) is the
  batch per data-parallel rank: global = local x dp_replicate x dp_shard; without pipeline
  parallelism it runs in one forward/backward, under pipeline parallelism it is split into
  micro-batches of ``pipeline_parallel_microbatch_size`` (default 1).

Step times: the published ``step_time_s`` (seconds, or with a unit: "850 ms"); else
``global_batch * seq_len / tokens_per_s`` (global, or per device times the devices); else from
the published TFLOP/s per device under the FLOP count the source used (Megatron-LM SC21: the
paper's formula with recomputation, Narayanan et al. 2021 eq. 3; MaxText: 6N plus non-causal
attention, i.e. the ``palm`` convention; otherwise the stack's default convention).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from trainperf.accounting.conventions import hardware_flops_per_token, model_flops_per_token
from trainperf.errors import InputFileError, SpecError, TrainperfError, UnknownNameError
from trainperf.predict.runs_cells import (
    CellError,
    read_count,
    read_flag,
    read_framework,
    read_global_batch,
    read_number,
    read_precision,
    read_rate,
    read_seconds,
    unstated,
)
from trainperf.predict.step import check_plan
from trainperf.specs.checkpointing import MAXTEXT_NAMES, POLICIES, RECOMPUTE_MODULES, get_policy
from trainperf.specs.datafiles import read_user_text
from trainperf.specs.hardware import get_hardware
from trainperf.specs.model import MLP_KINDS, ModelSpec

PACKAGED = "published_runs.csv"

REQUIRED_COLUMNS: tuple[str, ...] = (
    "row_id", "table_id", "source", "model", "arch_type", "layers", "hidden", "heads", "kv_heads",
    "ffn_hidden", "vocab", "moe_experts", "moe_topk", "moe_expert_ffn", "seq_len", "global_batch_seqs",
    "micro_batch", "hardware", "num_gpus", "gpus_per_node", "dp", "fsdp_zero", "tp", "pp", "vpp", "cp",
    "sp", "ep", "act_ckpt", "precision", "framework", "step_time_s", "tokens_per_s_global",
    "tflops_per_gpu", "mfu_pct", "mfu_basis",
)
"""Columns a runs file must have (``--data FILE.csv``); others are kept as they are (an optional
``tokens_per_s_per_gpu`` is read when the global figure is missing, an optional ``etp`` -- the
experts' tensor-parallel degree, blank for tp -- when a MoE row folds its experts)."""

EXCLUDE_KINDS: dict[str, str] = {
    "time": "no step time, tokens/s or TFLOP/s that trainperf can read",
    "devices": "device count not stated",
    "batch": "sequence length or global batch not stated",
    "hardware": "hardware not resolved to a catalog device",
    "precision": "precision not readable",
    "model": "model shape not given or invalid",
    "plan": "parallel plan not readable or invalid",
    "checkpointing": "activation checkpointing not readable",
    "cell": "a cell states a range or an unreadable value",
}
"""Short categories of exclusion reasons (``TableRun.exclude_kind``), for counting."""


_UNSTATED_PREFIXES = (
    ("activation checkpointing", "ac"), ("micro batch", "micro_batch"), ("vpp ", "vpp"),
    ("pipeline schedule", "vpp"), ("sequence parallelism", "sp"), ("tensor-parallel degree", "tp"),
    ("pp (", "pp"), ("cp (", "cp"), ("data-parallel sharding", "sharding"),
)
"""Assumption-note prefixes (written by :func:`_default` and :func:`_plan`) -> the plan field left
unstated."""


@dataclass(frozen=True)
class TableRun:
    """One row of a runs table, mapped (or not) to a workload."""

    row_id: str
    """The row's ``row_id``."""
    table_id: str
    """The published table or scaling sweep it belongs to (held out as a whole)."""
    source: str
    """Where it was published (repository@commit:path, paper or page) and which table."""
    framework: str
    """The ``framework`` cell as published."""
    stack: str
    """Software-stack profile name (:mod:`trainperf.predict.stacks`) the framework maps to."""
    model: str
    """The ``model`` cell."""
    hardware: str
    """The ``hardware`` cell."""
    precision: str
    """Normalised precision (bf16, fp16, fp8...), or the cell when it cannot be read."""
    workload: Any = None
    """The mapped workload; ``None`` for an excluded row."""
    step_time_s: float | None = None
    """Published or derived seconds per optimizer step."""
    step_time_from: str = ""
    """``step_time_s``, or the published figure the step time was derived from."""
    claimed_mfu_pct: float | None = None
    """MFU as published (its basis in ``mfu_basis``)."""
    mfu_basis: str = ""
    exclude_reason: str = ""
    """Why the row cannot be predicted (empty for a predicted row)."""
    assumptions: tuple[str, ...] = ()
    """What the mapping assumed that the row does not state (defaults taken, with their source)."""
    cells: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    """The raw CSV row."""
    device_id: str = ""
    """The catalog id the hardware cell resolved to (``""`` when it did not)."""
    hardware_read: str = ""
    """How the hardware cell was read: the rule steps that picked ``device_id``, or why none was."""
    exclude_kind: str = ""
    """Category of ``exclude_reason`` (a key of :data:`EXCLUDE_KINDS`); empty for a predicted row."""
    states_essentials: bool = False
    """The row states a model shape (layers, hidden), a batch, a device count and a time (step
    time, tokens/s or TFLOP/s): the rows a reader should be able to predict."""

    @property
    def included(self) -> bool:
        return self.workload is not None and not self.exclude_reason

    @property
    def unstated_plan_fields(self) -> frozenset[str]:
        """The plan choices this row leaves unstated, which the mapping filled with the stack's
        defaults (read off :attr:`assumptions`): names among ``ac``, ``micro_batch``, ``vpp``,
        ``sp``, ``tp``, ``pp``, ``cp`` and ``sharding`` (how the data-parallel ranks split into
        replicas and shards). A judge of the experts' plan should hold them free."""
        out = set()
        for a in self.assumptions:
            for prefix, name in _UNSTATED_PREFIXES:
                if a.startswith(prefix) and ("not stated" in a or "assumed" in a):
                    out.add(name)
        return frozenset(out)

    @property
    def release(self) -> str:
        """The stack's release the run was on, as text :meth:`Capabilities.as_of
        <trainperf.predict.stack_capabilities.Capabilities.as_of>` reads: the framework cell (``NeMo
        24.09``), then the source, which dates a snapshot of a product without releases
        (``github.com/pytorch/torchtitan @ 3faaa1a0 (2024-08)``)."""
        return f"{self.framework} | {self.source}"

    def to_run_record(self) -> Any:
        """The row as a published :class:`~trainperf.records.RunRecord` named ``row:<row_id>``
        (mapped rows only)."""
        from trainperf.records.run_record import RunRecord, StepRecord

        if not self.included:
            raise SpecError(f"published row {self.row_id}", self.row_id, f"a predictable row ({self.exclude_reason})")
        w = self.workload
        assert self.step_time_s is not None  # _row sets it with the workload of every included row
        step = StepRecord(step=0, step_time_s=float(self.step_time_s), tokens=w.tokens_per_step,
                          claimed_mfu_pct=self.claimed_mfu_pct)
        meta = {"name": f"row:{self.row_id}", "citation": self.source, "table": self.table_id,
                "framework": self.framework, "stack": self.stack, "derived_from": self.step_time_from,
                "assumptions": "; ".join(self.assumptions), "mfu_basis": self.mfu_basis}
        return RunRecord(source="published", steps=[step], workload=w, meta=meta)

    @property
    def generation(self) -> str:
        from trainperf.predict.stacks import generation_of

        return generation_of(self.workload.hardware) if self.workload is not None else ""


class _Skip(Exception):
    """A row that cannot be mapped; the message is its one-line reason, ``kind`` its category."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _cell(r: Mapping[str, str], col: str) -> str:
    return (r.get(col) or "").strip()


def _count(r: Mapping[str, str], col: str, key: str = "") -> int | None:
    """The count a cell states; a negative one, or 0 where only a positive count means anything
    (every column but the MoE ones, where 0 reads as dense), skips the row."""
    try:
        v = read_count(_cell(r, col), key)
    except CellError as e:
        raise _Skip("cell", f"{col}: {e}") from None
    if v is not None and (v < 0 or (v == 0 and not col.startswith("moe_"))):
        raise _Skip("cell", f"{col}: {_cell(r, col)[:40]!r} is not a positive count")
    return v


def _default(d: Any, key: str, what: str, notes: list[str], params_B: float | None = None) -> Any:
    """The stack default for ``key``, noted in the row's assumptions."""
    got = d.get(key, params_B)
    notes.append(got.note(what))
    return got.value


# ------------------------------------------------------------------------------------ policies
def _megatron_method(low: str, cell: str, notes: list[str]) -> str | None:
    """Megatron's full recomputation by method: ``block`` N (the first N layers of each model
    chunk: ``full:N``), ``uniform`` (every layer: ``full``), or ``recompute_num_layers`` N without
    a method (block taken, noted); None when the cell names none."""
    m = re.search(r"\bblock\W{0,3}(?:recompute_num_layers\W{0,3})?(\d+)", low)
    if m:
        return f"full:{m.group(1)}"
    if re.search(r"(?<![a-z-])uniform\b", low):  # not "non-uniform"
        return "full"
    m = re.search(r"recompute[ _-]num[ _-]layers\W{0,3}(\d+)", cell.lower())
    if m:
        notes.append(f"activation checkpointing {cell[:40]!r}: recompute method not stated; block taken (the first "
                     f"{m.group(1)} layers of each model chunk fully recomputed; uniform would recompute every layer)")
        return f"full:{m.group(1)}"
    return None


def _first_known(*names: str) -> str:
    """The first of ``names`` that is a policy of the workload schema (the last one otherwise)."""
    for n in names:
        try:
            get_policy(n)
            return n
        except TrainperfError:
            continue
    return names[-1]


def _policy(cell: str, stack: str, d: Any, precision: str, params_B: float, notes: list[str]) -> str:
    """The activation-checkpointing policy of a cell (policy names of the workload schema); a
    cell that states nothing takes the stack's default for the model's size. The rules run in
    order: Megatron-Core's modules and methods, MaxText's policies (:func:`_policy_named`), then
    the words other frameworks use (:func:`_policy_words`)."""
    low = cell.lower()
    if unstated(cell):
        return _default(d, "activation_checkpointing", "activation checkpointing", notes, params_B)
    mods = _recompute_modules(re.sub(r"^(?:ac|activation[ _-]?checkpoint(?:ing)?|act[ _-]?ckpt)\W*", "", low))
    if mods:  # Megatron-Core --recompute-modules (selective granularity)
        return _first_known(mods, "selective")
    # "AC: full", "activation checkpointing = selective", "recompute: block 4": the value after the name
    low = re.sub(r"^sac(?![a-z])", "selective", low)  # SAC: selective activation checkpointing
    rest = re.sub(r"^(?:ac|activation[ _-]?checkpoint(?:ing)?|act[ _-]?ckpt|recompute(?:[ _-]granularity)?|"
                  r"checkpointing)(?![a-z])\s*[:=(]?\s*", "", low)
    if rest and rest != low and not re.match(r"(?:true|yes|on|false|no|off|none|null)\b", rest):
        low = rest
    if unstated(low):
        return _default(d, "activation_checkpointing", "activation checkpointing", notes, params_B)
    megatron = _megatron_method(low, cell, notes)
    if megatron:
        return megatron
    if re.match(r"(?:all|every)\s*(?:the\s*)?(?:layers?|blocks?)\b|all$", low):  # "recompute all layers"
        return "full"
    got = _policy_named(low, cell, precision, notes) or _policy_words(low, cell, d, notes)
    if got:
        return got
    raise _Skip("checkpointing", f"activation checkpointing {cell[:60]!r} not readable "
                                 "(none, selective, selective op/layer, full, or a policy name)")


def _policy_named(low: str, cell: str, precision: str, notes: list[str]) -> str | None:
    """A MaxText policy the cell names: ``custom`` with its per-tensor choices, a policy name
    anywhere in the cell, ``remat_policy=custom`` without choices (a named policy keeping about
    as much stands in, noted), ``remat_policy=NAME``; None when the cell names none."""
    custom = _maxtext_custom(low)
    if custom:
        return custom
    named = [n for n in POLICIES if "_" in n and re.search(rf"(?<![a-z_]){n}(?![a-z_])", low)]
    if named:  # a MaxText policy named anywhere ("custom (save_dot_except_mlpwi-like)")
        got = max(named, key=len)
        if not re.match(rf"(?:remat_policy\W*)?{got}\W*$", low):
            notes.append(f"activation checkpointing {cell[:40]!r}: read as {got}")
        return got
    if "remat_policy=custom" in low or "custom remat" in low:
        # a custom policy names per-tensor choices the row does not give: a named policy that
        # keeps about as much stands in for it, and the row's assumptions say so
        got = (_first_known("save_dot_except_mlp", "selective") if precision == "fp8"
               else _first_known("save_dot_except_mlpwi", "selective"))
        notes.append(f"activation checkpointing {cell[:40]!r}: the custom policy's per-tensor choices are not "
                     f"stated; {got} assumed")
        return got
    m = re.search(r"remat_policy\s*[=:]\s*([a-z_]+)", low)
    if m and m.group(1) in POLICIES:
        return m.group(1)
    if "qkv_proj_offloaded" in low:
        return _first_known("qkv_proj_offloaded", "full")
    return None


def _policy_words(low: str, cell: str, d: Any, notes: list[str]) -> str | None:
    """A policy in words: a schema name first, torchtitan's selective op / every n-th layer, a
    bare "selective" (what it means in the stack, noted), LLM Foundry's boolean, full or none;
    None when no rule reads the cell."""
    word = re.match(r"[a-z_:0-9-]+", low)
    if word and word.group(0) in POLICIES and word.group(0) not in ("none", "full", "selective"):
        return word.group(0)
    if re.search(r"selective\W*(?:op|ops|per[- ]op)\b|\bop[- ]level|per[- ]op\b|selective_ac_option\W*op|^ops?$", low):
        return _first_known("selective-op", "selective")
    m = re.search(r"selective\W*layer|every\s*(\d+)(?:nd|rd|th|st)?\s*layers?|ac[_ ]freq\D{0,3}(\d+)", low)
    if m:  # torchtitan: every n-th layer fully checkpointed (selective_ac_option = "2")
        n = next((int(g) for g in m.groups() if g), 2)
        return f"full-every:{n}" if n > 1 else "full"
    if low.startswith("selective"):
        got = d.get("selective")
        if got.value != "selective":
            notes.append(f"activation checkpointing {cell[:40]!r}: {got.value}, what a bare 'selective' means in "
                         f"{got.stack} ({got.source})")
        return got.value
    m = re.match(r"(?:fsdp_config\.)?activation[_ ]checkpointing\W*(true|yes|on|false|no|off|none|null)\b", low)
    if m:  # LLM Foundry / Composer yaml: fsdp_config.activation_checkpointing: true (whole blocks)
        return "full" if m.group(1) in ("true", "yes", "on") else "none"
    if re.match(r"(?:activation\W*)?offload", low):  # activations moved to the host, not recomputed
        notes.append(f"activation checkpointing {cell[:40]!r}: activation offloading read as no recomputation; the "
                     "host transfers and the device memory it frees are not modelled")
        return "none"
    # whole words: "on" is not "only attention", "off" not "offload", "no" not "non-uniform"
    if re.match(r"(?:full|yes|true|on|enabled|recompute|remat|activation checkpointing|checkpoint)(?![a-z])",
                low) or "remat_policy=full" in low:
        return "full"
    if re.match(r"(?:none|no|nothing|false|off|disabled|null)(?![a-z])", low):
        return "none"
    return None


_MAXTEXT_ALIASES: dict[str, str] = {
    **{n: n for n in MAXTEXT_NAMES}, "qkv": "qkv_proj", "query": "query_proj", "key": "key_proj",
    "value": "value_proj", "out": "out_proj", "layer input": "decoder_layer_input",
    "decoder layer input": "decoder_layer_input", "layer_input": "decoder_layer_input",
}
"""How a cell names MaxText's checkpoint names (its own names, or "qkv/out/mlpwo")."""
_MAXTEXT_NAME = re.compile(r"(?<![a-z_])(" + "|".join(re.escape(a) for a in sorted(_MAXTEXT_ALIASES, key=len,
                                                                                       reverse=True))
                           + r")(?![a-z_])")
_MAXTEXT_WHERE = re.compile(r"(?<![a-z])(on[ -]device|device|offload(?:ed)?|(?:pinned )?host|remat(?:erializ\w*)?"
                            r"|recomputed?)(?![a-z])")


def _maxtext_custom(low: str) -> str | None:
    """``custom:NAME=WHERE+...`` for a cell stating MaxText's custom policy with its per-tensor
    choices, as flags ("remat_policy=custom query_proj=device out_proj=offload") or in words
    ("custom: qkv/out on device; decoder layer input offloaded to host"): in each clause (split at
    ``;``), each name takes the place written after it (``=``/``:``), else the clause's one place
    word. None when the cell names no such choice."""
    if "custom" not in low:
        return None
    where: dict[str, str] = {}
    for clause in re.split(r"[;|]", low):
        names = [(m.start(), _MAXTEXT_ALIASES[m.group(1)]) for m in _MAXTEXT_NAME.finditer(clause)]
        places = [(m.start(), m.group(1)) for m in _MAXTEXT_WHERE.finditer(clause)]
        if not names or not places:
            continue
        for pos, name in names:
            after = [w for p, w in places if p > pos]
            word = after[0] if after else places[-1][1]
            where[name] = ("offload" if "offload" in word or "host" in word else
                           "remat" if word.startswith(("remat", "recomput")) else "device")
    if not where:
        return None
    return get_policy("custom:" + "+".join(f"{n}={w}" for n, w in where.items())).name


_MODULE_WORDS: tuple[tuple[str, str], ...] = (
    (r"(?<![a-z_])(?:rms|layer)[ -]?norms?(?![a-z_])", "layernorm"),
    (r"(?<![a-z_])mla[ -]?up[ -]?proj(?:ections?)?(?![a-z_])", "mla_up_proj"),
    (r"(?<![a-z_])core[ -]?attention(?![a-z_])", "core_attn"),
    (r"(?<![a-z_])moe[ -]?activations?(?![a-z_])", "moe_act"),
)
"""Module names as papers write them ("RMSNorm", "MLA up-projections", "core attention") -> the
Megatron-Core ``--recompute-modules`` names the policy takes (DeepSeek-V3's report, section 3.2.3,
recomputes "all RMSNorm operations and MLA up-projections")."""


def _recompute_modules(low: str) -> str | None:
    """``selective:M1+M2`` for a cell naming Megatron-Core's recompute modules ("recompute_modules:
    core_attn, moe_act", "selective (layernorm, mla_up_proj)"), else None. The plain words ``mlp``
    and ``moe`` count only after ``recompute_modules``, ``recompute-modules`` or ``selective``."""

    m = re.search(r"recompute[_ -]modules?\W*(.*)", low)
    named = m is not None
    m = m or re.search(r"^(?:selective|recompute[sd]?|recomputing)\b\W*(.*)", low)
    if not m:
        return None
    said = m.group(1)
    for pattern, mod in _MODULE_WORDS:
        said = re.sub(pattern, mod, said)
    found = [mod for mod in RECOMPUTE_MODULES if re.search(rf"(?<![a-z_]){mod}(?![a-z_])", said)]
    if not found or not (named or set(found) - {"mlp", "moe"}):
        return None
    return get_policy("selective:" + "+".join(found)).name


def _mlp(arch: str) -> str:
    low = arch.lower()
    if "swiglu" in low:
        return "swiglu"
    if "squared-relu" in low:
        return "relu2" if "relu2" in MLP_KINDS else "relu"
    if "relu" in low:
        return "relu"
    if "moe" in low:
        return "geglu" if "geglu" in MLP_KINDS else "swiglu"
    return "gelu"


# -------------------------------------------------------------------------------- the mapping
def _preset_named(name: str, notes: list[str] | None = None) -> Any:
    """The model preset a model cell names ("Llama 3.1 405B" -> llama3.1-405b), or ``None``
    (:func:`trainperf.specs.model_names.preset_for_name`); how a name that is not the preset id
    was read goes to ``notes``."""
    from trainperf.specs.model_names import preset_for_name
    from trainperf.specs.presets import get_model

    match = preset_for_name(name) if name else None
    if match is None:
        return None
    if match.how and notes is not None:
        notes.append(f"the model cell {name!r} read as the preset {match.preset}: {match.how}")
    return get_model(match.preset)


MLA_COLUMNS: tuple[str, ...] = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
"""Optional columns stating multi-head latent attention (DeepSeek-V2/V3, Kimi K2): the
:class:`~trainperf.specs.model.ModelSpec` fields of the same names."""

_MLA_WORDS: dict[str, str] = {
    "q_lora_rank": r"q[ _-]?lora[ _-]?rank", "kv_lora_rank": r"kv[ _-]?lora[ _-]?rank",
    "qk_rope_head_dim": r"(?:qk[ _-]?)?rope[ _-]?(?:head[ _-]?)?dim|(?<![a-z])rope(?![a-z])",
    "qk_nope_head_dim": r"(?:qk[ _-]?)?nope[ _-]?(?:head[ _-]?)?dim|(?<![a-z])nope(?![a-z])",
    "v_head_dim": r"v[ _-]?head[ _-]?dim",
}
"""How the MLA sizes are written in an ``arch_type`` or ``model`` cell ("MLA (kv_lora_rank 512,
q_lora_rank 1536, rope 64, nope 128, v_head_dim 128)")."""


def _mla_preset(r: Mapping[str, str]) -> Any:
    """The MLA preset the model cell names, or whose family it names ("DeepSeek-V3 proxy (16
    layers)", "DeepSeek-V2"): the first MLA preset whose id's letters start the cell's."""
    from trainperf.specs.presets import get_model, model_ids

    cell = re.sub(r"[^a-z0-9]", "", _cell(r, "model").lower())
    named = _preset_named(_cell(r, "model"))
    if named is not None and named.attention == "mla":
        return named
    for pid in model_ids():
        key = re.sub(r"[^a-z0-9]", "", pid)
        fam = re.sub(r"v?\d.*$", "", key)  # deepseekv3 -> deepseek
        if fam and cell.startswith(fam) and get_model(pid).attention == "mla":
            return get_model(pid)
    return None


def _mla(r: Mapping[str, str], heads: int, kv: int | None, notes: list[str]) -> dict[str, Any] | None:
    """The MLA fields of a row that states multi-head latent attention (in ``arch_type`` or
    ``model``, in the MLA columns, or by a ``kv_heads`` that is no head count of a model of an
    MLA family), else None. Sizes come from the MLA columns, then the cells' words, then
    ``kv_heads`` read as the KV latent rank (tables write it there), then the named MLA preset,
    then DeepSeek-V3's (its Hugging Face config); the row's assumptions say which."""
    from trainperf.specs.presets import get_model

    text = f"{_cell(r, 'arch_type')} {_cell(r, 'model')}".lower()
    stated = {c: _count(r, c) for c in MLA_COLUMNS if c in r and _count(r, c) is not None}
    for c, pat in _MLA_WORDS.items():
        m = re.search(rf"(?:{pat})\W{{0,3}}(\d+)", text)
        if c not in stated and m:
            stated[c] = int(m.group(1))
    family = _mla_preset(r)
    odd_kv = kv is not None and (kv > heads or heads % kv != 0)
    if not (stated or re.search(r"(?<![a-z])mla(?![a-z])|latent attention", text) or (odd_kv and family)):
        return None
    if odd_kv and "kv_lora_rank" not in stated:
        stated["kv_lora_rank"] = kv
        notes.append(f"kv_heads {kv} read as MLA's KV latent rank (kv_lora_rank): MLA keeps one latent per token, "
                     f"every one of the {heads} heads reads it")
    base = family if family is not None else get_model("deepseek-v3")
    missing = [c for c in MLA_COLUMNS if c not in stated]
    if missing:
        notes.append(f"MLA {', '.join(missing)} not stated: {base.name}'s taken "
                     f"({', '.join(f'{c}={getattr(base, c)}' for c in missing)}; {base.source})")
    return {"attention": "mla", "kv_heads": heads, "head_dim": None,
            **{c: stated.get(c, getattr(base, c)) for c in MLA_COLUMNS}}


_SHAPE_COLUMNS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "moe_experts", "moe_topk",
                  "moe_expert_ffn")
"""Shape columns of a runs table that must agree with a named preset for the preset to stand in."""


def _preset_values(preset: Any, column: str) -> tuple[Any, ...]:
    """The values of a shape ``column`` that agree with ``preset``: its field, the effective one
    where the field defaults (kv heads = heads; an expert as wide as the dense MLP), and for a MoE
    model whose every layer is MoE, ``ffn_hidden`` may name the experts' width."""
    if column == "kv_heads":  # an MLA model's table may write its KV latent rank as kv_heads
        return (preset.kv_heads or preset.heads, *((preset.kv_lora_rank,) if preset.attention == "mla" else ()))
    if column == "moe_expert_ffn":
        return (preset.moe_expert_ffn or preset.ffn_hidden,)
    if column == "ffn_hidden" and preset.is_moe and not preset.moe_dense_layers:
        return (preset.ffn_hidden, preset.moe_expert_ffn)
    return (getattr(preset, column),)


def _model(r: Mapping[str, str], notes: list[str]) -> dict[str, Any]:
    layers, hidden, ffn, vocab = (_count(r, c) for c in ("layers", "hidden", "ffn_hidden", "vocab"))
    read_as: list[str] = []
    preset = _preset_named(_cell(r, "model"), read_as)
    if preset is not None and (not layers or layers == preset.layers) and (not hidden or hidden == preset.hidden):
        missing = [c for c, v in (("layers", layers), ("hidden", hidden), ("ffn_hidden", ffn), ("vocab", vocab))
                   if not v]
        # every shape the row states agrees with the preset it names: the preset's architecture
        # (attention kind such as MLA, shared experts, dense layers of a MoE, norms, positions,
        # biases, tied embeddings) is what the row's model has, which the columns cannot say
        agrees = (all(not _count(r, c) or _count(r, c) in _preset_values(preset, c) for c in _SHAPE_COLUMNS)
                  and all(_count(r, c) in (None, getattr(preset, c)) for c in MLA_COLUMNS if c in r))
        if missing or agrees:
            notes.extend(read_as)
            notes.append(f"{', '.join(missing)} not stated: from the model preset {preset.name} "
                         f"(the model cell {_cell(r, 'model')!r})" if missing else
                         f"architecture from the model preset {preset.name}: every shape column agrees with it")
            fields: dict[str, Any] = {f.name: getattr(preset, f.name) for f in dataclasses.fields(ModelSpec)
                                      if f.name != "extra"}
            fields["max_seq_len"] = max(_count(r, "seq_len") or 2048, 2048, fields.get("max_seq_len") or 0)
            try:
                ModelSpec(**fields)
            except TrainperfError as e:
                raise _Skip("model", f"model does not validate: {e}") from None
            return fields
    if not layers or not hidden:
        raise _Skip("model", "model shape (layers, hidden) not given")
    if not ffn or not vocab:
        raise _Skip("model", "model shape (ffn_hidden, vocab) not given")
    heads = _count(r, "heads")
    if not heads:
        heads = hidden // 128
        notes.append(f"heads not stated: {heads} assumed (head_dim 128; MHA FLOPs and params do not "
                     "depend on the head count)")
    kv = _count(r, "kv_heads") or heads
    arch = _cell(r, "arch_type")
    low = arch.lower()
    fields = {
        "name": _cell(r, "model") or "custom", "layers": layers, "hidden": hidden, "heads": heads,
        "kv_heads": kv, "ffn_hidden": ffn, "vocab": vocab, "mlp": _mlp(arch),
        "max_seq_len": max(_count(r, "seq_len") or 2048, 2048),
    }
    if "alibi" in low:
        fields.update(position="alibi", norm="layernorm")
    elif "gpt" in low or "gelu" in low or "relu mlp" in low:
        fields.update(position="learned", norm="layernorm", bias=True)
    if "head_dim 128" in low:
        fields["head_dim"] = 128
    mla = _mla(r, heads, _count(r, "kv_heads"), notes)
    if mla:
        fields.update(mla)
    experts = _count(r, "moe_experts")
    if experts:
        fields.update(moe_experts=experts, moe_topk=_count(r, "moe_topk") or 1,
                      moe_expert_ffn=_count(r, "moe_expert_ffn") or ffn, **_moe_words(r, layers, notes))
    try:
        ModelSpec(**fields)  # validates here, so a bad shape reads as this row's reason
    except TrainperfError as e:
        raise _Skip("model", f"model shape does not validate: {e}") from None
    return fields


_SHARED = re.compile(r"(\d+)\s*(?:x\s*)?shared(?:[ _-]?experts?)?\b")
_DENSE_FIRST = re.compile(r"(?:first|leading)\s*(\d+)\s*(?:layers?\s*)?(?:are\s*)?dense|(\d+)\s*dense\s*layers?")


def _moe_words(r: Mapping[str, str], layers: int, notes: list[str]) -> dict[str, int]:
    """What an MoE row's words state beyond its columns: shared experts ("64 routed + 2 shared",
    "2 shared experts") and leading dense layers ("first 3 layers dense"), from the MoE, arch and
    model cells, noted."""
    text = " ".join(_cell(r, c) for c in ("moe_experts", "arch_type", "model")).lower()
    out: dict[str, int] = {}
    m = _SHARED.search(text)
    if m and int(m.group(1)) > 0:
        out["moe_shared_experts"] = int(m.group(1))
        notes.append(f"{m.group(1)} shared expert(s) per MoE layer, read from {m.group(0)!r}")
    d = _DENSE_FIRST.search(text)
    if d and 0 < int(d.group(1) or d.group(2)) < layers:
        out["moe_dense_layers"] = int(d.group(1) or d.group(2))
        notes.append(f"the first {out['moe_dense_layers']} layers dense (no experts), read from {d.group(0)!r}")
    return out


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
_PLAN_CELLS = ("tp", "pp", "cp", "vpp", "ep", "etp", "dp", "fsdp_zero", "sp")
"""The cells of a row that state its parallel plan."""


def named_degree(r: Mapping[str, str], col: str, notes: list[str]) -> int | None:
    """A degree whose own cell is blank, named in another plan cell (``"TP2 PP4"`` in the tp cell
    states pp = 4; ``"DP 8 x TP 8"`` in the dp cell states tp = 8), noted; None when no cell
    names it."""
    pattern = re.compile(rf"(?<![a-z])(?:{_DEGREE_NAMES[col]})\s*[=:]?\s*(\d+)(?![\d.])")
    for other in _PLAN_CELLS:
        cell = _cell(r, other)
        m = pattern.search(cell.lower()) if other != col and cell else None
        if m and int(m.group(1)) > 0:
            notes.append(f"{col} {m.group(1)} read from the {other} cell {cell[:40]!r}")
            return int(m.group(1))
    return None


def _degree(r: Mapping[str, str], col: str, d: Any, notes: list[str]) -> int:
    """A parallel degree: the cell's value, else one another plan cell names (:func:`named_degree`);
    blank is "not used" (1); a cell that says it is not stated takes the stack default (noted)."""
    v = _count(r, col, col)
    if v is None and not _cell(r, col):
        v = named_degree(r, col, notes)
    if v is not None:
        return v
    cell = _cell(r, col)
    if not cell or col in ("ep",) or d.get(col) is None:
        return 1
    return _default(d, col, f"{col} ({cell[:40]!r})", notes)


_SHARD_DEGREE = re.compile(r"(?:fsdp|dp_shard|shard(?:ing)?)(?:[ _](?:degree|group|size))?\s*(?:[=:]\s*|\s+)(\d+)")


_SHARDING_WORDS = re.compile(r"\bhsdp\b|\bfsdp\d?\b|hybrid[_ ]shard|full[_ ]shard|zero[- _]?(?:stage[- _]?)?[123]\b"
                             r"|distributed optimi[sz]er|dist[_ ]?opt")
"""Words of a framework cell that state how the data-parallel ranks shard."""


def _sharding(r: Mapping[str, str], data: int, dpn: int, d: Any, notes: list[str]) -> dict[str, Any]:
    """How the ``data`` data-parallel ranks shard (fsdp, dp, zero_stage): the ``fsdp_zero`` cell,
    else what the framework cell names ("PyTorch FSDP", "DeepSpeed ZeRO-3", "torchtitan (FSDP2
    1D)": the run's sharding, said in the row), else the stack's default."""
    shard = _cell(r, "fsdp_zero")
    dp_cell = _cell(r, "dp").lower()
    fw = _cell(r, "framework")
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
        how = _default(d, "data_parallel_sharding", "data-parallel sharding", notes)
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
            raise _Skip("plan", f"FSDP degree {fsdp} does not divide the {data} data-parallel ranks")
        return {"fsdp": fsdp, "dp": data // fsdp}
    return {"dp": data}


_INTERLEAVED = re.compile(r"interleav|virtual[ _-]?(?:pipeline|stage)|\bvpp\b|\bv-?pp\b")
_VPP_IN_PP = re.compile(rf"(?<![a-z])(?:{_DEGREE_NAMES['vpp']})\s*[=:]?\s*(\d+)(?![\d.])|\bv\s*[=:]\s*(\d+)")
"""A virtual-stage count written in the pp cell: the names :func:`named_degree` reads, or "v=5"."""


def _vpp(r: Mapping[str, str], pp: int, layers: int, notes: list[str]) -> int:
    """Virtual pipeline stages per rank: the vpp cell's count ("5", "VP=5", "5 (interleaved)"), or
    one written in the pp cell ("PP4 (interleaved, vpp=5)", "4 (interleaved, v=5)"). A row that says its schedule is
    interleaved without a count ("interleaved", "yes", "not stated (paper uses interleaved
    schedule)") is interleaved: with one layer per virtual stage, ``layers // pp`` chunks, the
    most the layer count allows (NVIDIA's NeMo 24.09/24.11 recipes for GPT-3 175B, Nemotron-4
    340B and Grok-1 run one layer per virtual stage, Llama 3.1 405B two and Llama 3 70B four: the
    published-runs table's stated vpp). The row's assumptions say so."""
    cell, pp_cell = _cell(r, "vpp"), _cell(r, "pp").lower()
    try:  # "interleaved 1F1B" names the schedule, not a count
        vpp = read_count(re.sub(r"(?<![a-z0-9])1f1b(?![a-z0-9])", "", cell.lower()), "vpp")
    except CellError as e:
        raise _Skip("cell", f"vpp: {e}") from None
    if vpp is not None and vpp < 1:
        raise _Skip("cell", f"vpp: {cell[:40]!r} is not a positive count")
    if vpp is None:
        m = _VPP_IN_PP.search(pp_cell)
        vpp = int(m.group(1) or m.group(2)) if m else None
    if vpp is None and not cell:
        vpp = named_degree(r, "vpp", notes)
    if vpp is not None:
        return vpp
    low = cell.lower()
    says = bool(_INTERLEAVED.search(low) or _INTERLEAVED.search(pp_cell)) or (
        not unstated(cell) and _flag_or_none(cell) is True)
    if not says:
        if cell:
            notes.append(f"vpp {cell[:40]!r}: non-interleaved 1F1B assumed")
        return 1
    what = f"vpp {(cell or _cell(r, 'pp'))[:40]!r}"
    if pp < 2 or layers // pp < 2:
        notes.append(f"{what}: interleaving stated, but {layers} layers over pp={pp} leave one layer per rank; "
                     "non-interleaved 1F1B assumed")
        return 1
    v = layers // pp
    notes.append(f"{what}: interleaved 1F1B, vpp {v} assumed (one layer per virtual stage: {layers} layers // pp "
                 f"{pp}; the count is not stated, and one layer per stage is the most the layer count allows)")
    return v


def _flag_or_none(cell: str) -> bool | None:
    try:
        return read_flag(cell)
    except CellError:
        return None


def _plan(r: Mapping[str, str], n: int, dpn: int, d: Any, notes: list[str], layers: int) -> dict[str, Any]:
    tp = _count(r, "tp", "tp")
    if tp is None and not _cell(r, "tp"):
        tp = named_degree(r, "tp", notes)
    if tp is None:
        tp = _default(d, "tp", f"tensor-parallel degree ({_cell(r, 'tp')[:40]!r})", notes)
    pp = _degree(r, "pp", d, notes)
    cp = _degree(r, "cp", d, notes)
    ep = _degree(r, "ep", d, notes)
    vpp = _vpp(r, pp, layers, notes)
    try:
        sp = read_flag(_cell(r, "sp"))
    except CellError:
        sp = None
        notes.append(f"sp {_cell(r, 'sp')[:40]!r} not read as yes or no")
    if sp is None:
        sp = bool(_default(d, "sequence_parallel", "sequence parallelism", notes)) if tp > 1 else False
    sp = sp and tp > 1
    model_par = tp * pp * cp
    if model_par < 1 or min(tp, pp, cp) < 1 or n < 1:  # a degree of 0 or -1: not a plan
        raise _Skip("plan", f"tp={tp}, pp={pp}, cp={cp} on {n} devices: every degree must be at least 1")
    if n % model_par:
        raise _Skip("plan", f"{n} devices are not a multiple of tp*pp*cp={model_par}")
    data = n // model_par
    plan: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "sequence_parallel": sp}
    etp = _count(r, "etp", "etp") if "etp" in r else None
    if etp is None and not _cell(r, "etp"):
        etp = named_degree(r, "etp", notes)
    if etp is not None and ep > 1 and etp != tp:  # MoE parallel folding: experts split etp ways, not tp
        plan["etp"] = etp
    elif etp is None and ep > 1 and tp > 1 and (tp * cp * data) % (ep * tp) and (tp * cp * data) % ep == 0:
        # the experts' grid etp x ep x edp covers the tp x cp x dp ranks: with etp = tp (Megatron-Core's
        # default) the stated ep does not fit, so the experts were not split over tp
        plan["etp"] = 1
        notes.append(f"etp not stated: 1 taken (ep={ep} x tp={tp} does not divide the tp*cp*dp={tp * cp * data} "
                     "ranks the experts fold over; ep alone does: Megatron-Core's expert_tensor_parallel_size=1)")
    words = (_cell(r, "pp") + _cell(r, "vpp")).lower()
    dual = re.search(r"dual[ -]?pipe([ -]?v)?", words) if pp > 1 else None
    if vpp > 1 and not (dual and dual[1]):
        plan.update(vpp=vpp, pp_schedule="interleaved")
    elif pp > 1:
        sched = "gpipe" if "gpipe" in words else ("dualpipev" if dual[1] else "dualpipe") if dual else None
        if sched is None and d.get("pp_schedule").value != "1f1b":
            sched = _default(d, "pp_schedule", "pipeline schedule", notes)
        if sched:
            plan["pp_schedule"] = sched
    plan.update(_sharding(r, data, dpn, d, notes))
    return plan


_LOCAL = re.compile(r"\blocal\b|per[ -]dp[ -]rank|per data[- ]parallel")
_MICRO = re.compile(r"micro[- _]?batch(?:[ _]size)?|\bmbs\b|pp[ _]microbatch")


def _batches(r: Mapping[str, str], gbs: int | None, gbs_cell: str, plan: dict[str, Any], n: int, d: Any,
             notes: list[str]) -> tuple[int, int, bool]:
    """(global batch, micro batch, whether the global batch was corrected) of a row.

    The micro_batch column holds the micro batch, or -- when the cell says "local" or the
    stack's ``micro_batch_column`` is ``local_batch`` (torchtitan) -- the batch per
    data-parallel rank: global = local x dp x fsdp; under pipeline parallelism the local batch
    is split into micro-batches of ``pipeline_microbatch_size`` (stated in the cell as
    "microbatch N", else the stack default), else it runs whole."""
    cell = _cell(r, "micro_batch")
    low = cell.lower()
    data = plan["dp"] * plan.get("fsdp", 1)
    value = _count(r, "micro_batch")
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
            raise _Skip("batch", "sequence length or global batch not stated")
    if gbs % data:
        raise _Skip("plan", f"global batch {gbs} does not split over the {data} data-parallel ranks")
    local = gbs // data
    if value is None:
        mb = _default(d, "micro_batch", "micro batch", notes)
        value = local if mb == "local" else mb
    if local % value:
        notes.append(f"micro batch {value} does not divide the local batch {local}: {math.gcd(local, value)} taken")
        value = math.gcd(local, value)
    return gbs, value, False


def _flops_per_step(r: Mapping[str, str], w: Any, d: Any, notes: list[str]) -> tuple[float, str]:
    """FLOPs per step under the convention the row's TFLOP/s figure used (else the stack's)."""

    basis = _cell(r, "mfu_basis").lower() + " " + _cell(r, "framework").lower()
    m = w.model
    B, s, L, h, V = w.global_batch, w.seq_len, m.layers, m.hidden, m.vocab
    if "recomputation" in basis or "megatron-lm (20" in basis:
        # Narayanan et al. 2021 (SC21), eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh), with recompute
        f = 96.0 * B * s * L * h * h * (1 + s / (6.0 * h) + V / (16.0 * L * h))
        return f, "Megatron-LM SC21 eq. 3 (includes recomputation)"
    if "maxtext" in basis:
        return B * s * model_flops_per_token(m, s, "palm"), "palm convention (MaxText: 6N + non-causal attention)"
    conv = _default(d, "tflops_convention", "TFLOP/s FLOP count", notes)
    if re.search(r"\bhfu\b|hardware[ _-]?(?:tera)?flop", _cell(r, "tflops_per_gpu").lower()):
        # the cell counts what the devices computed: the recomputation too (HFU's numerator)
        chunks = w.plan.pp * w.plan.vpp
        per_token = hardware_flops_per_token(m, s, w.activation_checkpointing, conv, pipeline_chunks=chunks)
        return B * s * per_token, f"{conv} convention with recomputation (the cell counts hardware FLOPs)"
    return B * s * model_flops_per_token(m, s, conv), f"{conv} convention (stack default)"


def _devices_per_node(r: Mapping[str, str], n: int, hw: Any, notes: list[str]) -> int:
    """Devices per node: the cell, else the catalog's typical node. Several nodes must hold the
    same count, so a node size that does not divide the devices (72 of an NVL72 rack for 128
    GPUs) becomes their greatest common divisor, noted."""
    dpn = _count(r, "gpus_per_node")
    if dpn is None:
        dpn = hw.devices_per_node
        notes.append(f"devices per node not stated: {math.gcd(n, dpn) if n > dpn else dpn} taken "
                     f"({hw.id}'s typical node in the device catalog)")
    if n > dpn and n % dpn:
        notes.append(f"{dpn} devices per node do not divide the {n} devices: nodes of {math.gcd(n, dpn)} taken")
        dpn = math.gcd(n, dpn)
    return min(dpn, n)


def _network(r: Mapping[str, str], hw: Any, n: int, dpn: int, notes: list[str]) -> dict[str, Any]:
    """The network between nodes as the row's ``interconnect`` cell states it, when the run spans
    nodes and the rate differs from the catalog's (a cloud's 4x100 Gb/s EFA for 8 A100s is a
    quarter of a DGX A100's NICs): ``[hardware]`` overrides, noted."""
    from trainperf.predict.runs_cells import read_interconnect

    cell = _cell(r, "interconnect")
    link = read_interconnect(cell, dpn) if n > dpn else None
    if link is None or abs(link / hw.inter_node_link_GB_per_s - 1.0) <= 0.01:
        return {}
    notes.append(f"inter-node link from the interconnect cell {cell[:60]!r}: {link:g} GB/s per device per "
                 f"direction (the catalog's {hw.id}: {hw.inter_node_link_GB_per_s:g})")
    return {"inter_node_link_GB_per_s": link,
            "sources": {"inter_node_link_GB_per_s": f"the runs table's interconnect cell {cell[:80]!r}"}}


def _num_devices(r: Mapping[str, str], notes: list[str], reading: Any = None) -> int | None:
    """The device count; "16 nodes" (or "2 x DGX H100") alone is nodes times the stated devices
    per node, else the catalog's typical node of the row's device (noted)."""
    cell = _cell(r, "num_gpus")
    m = re.match(r"^\s*(\d+)\s*(?:x\s*)?(?:nodes?|hosts?|servers?|dgx|hgx)\b(?!.*\d.*(?:gpu|device|chip))",
                 cell.lower())
    per = _count(r, "gpus_per_node")
    where = "devices per node"
    if m and not per and reading is not None and reading.resolved:
        per, where = get_hardware(reading.device_id).devices_per_node, "devices per node (the catalog's typical node)"
    if m and per:
        notes.append(f"num_gpus {cell[:30]!r}: {m.group(1)} nodes x {per} {where}")
        return int(m.group(1)) * per
    return _count(r, "num_gpus")


_FLOP_UNIT = re.compile(r"(peta|tera|giga|[pgt])\s*-?flop", re.IGNORECASE)
"""The prefix of a FLOP/s unit in a TFLOP/s cell ("0.41 PFLOP/s" is 410 TFLOP/s)."""
_SEQUENCES = re.compile(r"^\s*[~≈]?\s*[\d.,]+\s*[kKmM]?\s*(?:seq(?:uence)?s?|samples?)\b", re.IGNORECASE)
"""A rate whose first number counts sequences ("120 seq/s", "19.6 samples/sec"), not tokens."""


def _times(r: Mapping[str, str], notes: list[str]) -> tuple[float | None, float | None, float | None]:
    """(step seconds, global tokens/s, TFLOP/s per device) as published; rates per device are
    multiplied by the device count later."""
    try:
        step, note = read_seconds(_cell(r, "step_time_s"))
        if note:
            notes.append(note)
        tps, per_device = read_rate(_cell(r, "tokens_per_s_global"))
        tps_dev = None
        if per_device:
            tps, tps_dev = None, tps
        elif tps is None and "tokens_per_s_per_gpu" in r:
            tps_dev, _ = read_rate(_cell(r, "tokens_per_s_per_gpu"))
        tflops = read_number(_cell(r, "tflops_per_gpu"))
    except CellError as e:
        raise _Skip("cell", f"time: {e}") from None
    unit = _FLOP_UNIT.search(_cell(r, "tflops_per_gpu"))
    if tflops is not None and unit and unit.group(1).lower()[0] in "pg":
        scale = 1e3 if unit.group(1).lower()[0] == "p" else 1e-3
        notes.append(f"tflops_per_gpu {_cell(r, 'tflops_per_gpu')[:30]!r}: {unit.group(0)} read as {tflops * scale:g} "
                     "TFLOP/s")
        tflops *= scale
    if tps is None and tps_dev is not None:
        return step, -tps_dev, tflops  # negative: per device, scaled once the device count is known
    return step, tps, tflops


def _essentials(r: Mapping[str, str]) -> bool:
    """Whether the row states model shape (layers, hidden), a batch, devices and a time."""
    def has(col: str, reader: Any = read_number) -> bool:
        try:
            v = reader(_cell(r, col))
        except CellError:
            return True  # a range still states the value
        return (v[0] if isinstance(v, tuple) else v) is not None

    shape = has("layers") and has("hidden")
    batch = has("global_batch_seqs") or has("micro_batch")
    best_case = _cell(r, "tflops_per_gpu").lower().startswith("up to")  # a bound, not this run's figure
    time = (has("step_time_s", read_seconds) or has("tokens_per_s_global", read_rate)
            or has("tokens_per_s_per_gpu", read_rate) or (has("tflops_per_gpu") and not best_case)
            or has("mfu_pct"))
    return shape and batch and has("num_gpus") and time


def _row(r: Mapping[str, str]) -> TableRun:
    """One row of a runs table: its workload and step time, or why it is excluded."""
    from trainperf.predict.stack_defaults import stack_defaults
    from trainperf.specs.device_names import read_device

    stack = read_framework(r.get("framework"))
    reading = read_device(_cell(r, "hardware"))
    try:
        prec, prec_error = read_precision(_cell(r, "precision")), ""
    except CellError as e:
        prec, prec_error = None, str(e)
    base: dict[str, Any] = {
        "row_id": _cell(r, "row_id"), "table_id": _cell(r, "table_id"),
        "source": f"{_cell(r, 'source')} ({_cell(r, 'source_table')})",
        "framework": _cell(r, "framework"), "stack": stack,
        "model": _cell(r, "model"), "hardware": _cell(r, "hardware"),
        "precision": prec.precision if prec else _cell(r, "precision"),
        "claimed_mfu_pct": _claimed_mfu(r), "mfu_basis": _cell(r, "mfu_basis"), "cells": dict(r),
        "device_id": reading.device_id, "hardware_read": reading.how, "states_essentials": _essentials(r),
    }
    notes: list[str] = []
    try:
        if prec_error:
            _figures(r, reading, notes)  # a row that states no time says so before its precision
            raise _Skip("precision", prec_error)
        w, step, src = _mapped(r, stack, stack_defaults(stack, _cell(r, "framework")), reading, prec, notes)
        return TableRun(**base, workload=w, step_time_s=float(step), step_time_from=src, assumptions=tuple(notes))
    except _Skip as e:
        return TableRun(**base, exclude_reason=str(e), exclude_kind=e.kind, assumptions=tuple(notes))
    except TrainperfError as e:  # a value no rule above bounds: this row is unread, the table is not
        return TableRun(**base, exclude_reason=f"a cell does not validate: {e}", exclude_kind="cell",
                        assumptions=tuple(notes))


def _figures(r: Mapping[str, str], reading: Any, notes: list[str]) -> tuple[Any, ...]:
    """(step time, tokens/s, TFLOP/s, devices, global batch, sequence) as the row states them;
    raises :class:`_Skip` for a row that cannot be predicted (no time, devices, batch, device)."""
    step, tps, tflops = _times(r, notes)
    if _cell(r, "tflops_per_gpu").lower().startswith("up to") and step is None and tps is None:
        raise _Skip("time", "only a best-case 'up to' TFLOP/s figure published; no step time or tokens/s")
    if step is None and tps is None and tflops is None and not _claimed_mfu(r):
        raise _Skip("time", "no step time, tokens/s, TFLOP/s or MFU published")
    n = _num_devices(r, notes, reading)
    if not n:
        raise _Skip("devices", "device count not stated for this figure")
    if tps is not None and tps < 0:
        tps = -tps * n
        if step is None:
            notes.append(f"tokens/s given per device: x {n} devices")
    seq = _count(r, "seq_len")
    try:
        gbs, gbs_note = read_global_batch(_cell(r, "global_batch_seqs"), seq)
    except CellError as e:
        raise _Skip("batch", f"global_batch_seqs: {e}") from None
    if gbs is not None and gbs < 1:
        raise _Skip("batch", f"global_batch_seqs: {_cell(r, 'global_batch_seqs')[:40]!r} is not a positive batch")
    if gbs_note:
        notes.append(gbs_note)
    if not seq:
        raise _Skip("batch", "sequence length or global batch not stated")
    said = [c for c in ("tokens_per_s_global", "tokens_per_s_per_gpu") if _SEQUENCES.match(_cell(r, c))]
    if tps is not None and said:
        notes.append(f"{said[0]} {_cell(r, said[0])[:30]!r} counts sequences: x {seq} tokens each")
        tps *= seq
    if not reading.resolved:
        raise _Skip("hardware", f"hardware {_cell(r, 'hardware')[:80]!r}: {reading.how}")
    return step, tps, tflops, n, gbs, seq


def _mapped(r: Mapping[str, str], stack: str, d: Any, reading: Any, prec: Any,
            notes: list[str]) -> tuple[Any, float, str]:
    """(workload, step seconds, where the step time came from) of a row that can be predicted."""
    from trainperf.specs.workload_file import workload_from_dict

    step, tps, tflops, n, gbs, seq = _figures(r, reading, notes)
    hw = get_hardware(reading.device_id)
    if prec is None:
        from trainperf.predict.runs_cells import Precision

        prec = Precision(_default(d, "precision", f"precision ({_cell(r, 'precision')[:30]!r})", notes))
    if prec.note:
        notes.append(prec.note)
    if step is None and tps is None and tflops is None:
        mfu = _claimed_mfu(r, notes) or 0.0
        if not 0.0 < mfu <= 100.0:
            raise _Skip("cell", f"mfu_pct {_cell(r, 'mfu_pct')[:30]!r} is not a percentage above 0 and at most 100")
        tflops = tflops_from_mfu(mfu, _cell(r, "mfu_basis"), hw, prec.precision, notes)
    model = _model(r, notes)
    dpn = _devices_per_node(r, n, hw, notes)
    plan = _plan(r, n, dpn, d, notes, int(model["layers"]))
    gbs, mb, corrected = _batches(r, gbs, _cell(r, "global_batch_seqs"), plan, n, d, notes)
    policy = _policy(_cell(r, "act_ckpt"), stack, d, prec.precision, ModelSpec(**model).total_params / 1e9, notes)
    training = _training(r, stack, d, prec, plan["tp"], notes)
    training.update(seq_len=seq, global_batch=gbs, micro_batch=mb, activation_checkpointing=policy)
    hw_cfg: dict[str, Any] = {"device": reading.device_id, "num_devices": n, "devices_per_node": dpn,
                              **_network(r, hw, n, dpn, notes)}
    try:
        w = workload_from_dict({"model": model, "hardware": hw_cfg, "parallel": plan, "training": training})
    except TrainperfError as e:
        raise _Skip("plan", f"workload does not validate: {e}") from None
    w = dataclasses.replace(w, stack=stack)
    try:
        check_plan(w)
    except TrainperfError as e:
        raise _Skip("plan", f"plan does not validate: {e}") from None
    step_cell = _cell(r, "step_time_s")
    if step is not None and not (corrected and tps is not None and "derived" in step_cell):
        return w, step, "step_time_s" + (" (derived)" if "derived" in step_cell else "")
    if tps is not None:
        return w, w.tokens_per_step / tps, f"tokens_per_s_global={tps:g}"
    assert tflops is not None  # the row was skipped when it states no time at all
    flops, how = _flops_per_step(r, w, d, notes)
    return w, flops / (float(tflops) * 1e12 * n), f"tflops_per_gpu={tflops:g} under {how}"


_OFFLOAD = re.compile(r"\b(?:cpu[ _-]?offload(?:ing)?|offload[ _-]optimizer|optimizer[ _-](?:cpu[ _-])?offload(?:ing)?"
                      r"|optimizer[ _-]states?[ _-](?:cpu[ _-])?offload(?:ed|ing)?|zero[ _-]?offload)\b")
_OFFLOAD_DENIED = re.compile(r"(?:\bno|\bwithout|w/o|\bdisabled?)\s*$")
_OFFLOAD_OFF = re.compile(r"^\s*[:=]?\s*(?:none|off|false|disabled|no)\b")


def read_offload(*cells: str) -> str | None:
    """The words of ``cells`` that state the optimizer offloaded to the host CPU ("ZeRO-3 + CPU
    offload", "offload_optimizer", "ZeRO-Offload"), or None; a denial ("no CPU offload",
    "cpu_offload: none") states nothing. Parameter or activation offload alone is not this."""
    for cell in cells:
        low = cell.lower()
        for m in _OFFLOAD.finditer(low):
            if _OFFLOAD_DENIED.search(low[max(0, m.start() - 12):m.start()]) or _OFFLOAD_OFF.match(low[m.end():]):
                continue
            return cell[m.start():m.end()]
    return None


def _training(r: Mapping[str, str], stack: str, d: Any, prec: Any, tp: int, notes: list[str]) -> dict[str, Any]:
    """The ``[training]`` software fields of a row: precision, compilation, async TP, fp8 recipe
    (what the framework cell says, else the stack's defaults, each noted), an optimizer
    offloaded to the host where the sharding, framework or notes cell says so."""
    precision = prec.precision
    training: dict[str, Any] = {"precision": precision}
    fw = _cell(r, "framework").lower()
    if re.search(r"compile|inductor", fw):
        training["compile"] = True
    elif d.get("compile").value:  # generic's [defaults] states every true/false key
        training["compile"] = _default(d, "compile", "compilation", notes)
    if tp > 1 and any("asynctp" in re.sub(r"[\s_-]", "", _cell(r, c).lower()) for c in ("framework", "sp", "tp")):
        training["async_tp"] = True  # "async TP" in the framework, sequence-parallel or tp cell
    elif tp > 1 and d.get("async_tp").value:
        training["async_tp"] = _default(d, "async_tp", "async tensor parallelism", notes)
    if (stack == "torchtitan" and not training.get("compile")
            and (precision == "fp8" or training.get("async_tp"))):
        # torchtitan's async TP is built on torch.compile's micro-pipelining, and its float8
        # recipes are meant to run compiled (the casts fuse into the neighbouring ops)
        training["compile"] = True
        notes.append("compile not stated: torch.compile assumed, as torchtitan's async TP requires it and its "
                     "float8 training is run compiled (torchtitan docs/float8.md, docs/async_tp.md; read from "
                     "memory of the repository, not verified against the current release)")
    if prec.fp8_recipe:
        training["fp8_recipe"] = prec.fp8_recipe
    elif precision == "fp8" and not prec.note and d.get("fp8_recipe") is not None:
        training["fp8_recipe"] = _default(d, "fp8_recipe", "fp8 recipe", notes)
    said = read_offload(_cell(r, "fsdp_zero"), fw, _cell(r, "notes"))
    if said:
        training["offload_optimizer"] = True
        notes.append(f"optimizer offloaded to the host CPU (read from {said!r})")
    return training


_PEAK_IN_BASIS = re.compile(r"(?:(bf16|fp16|fp8|fp4|tf32|fp32)\D{0,12}?)?(\d[\d,]*(?:\.\d+)?)\s*(?:tflop|tf\b)", re.I)


def tflops_from_mfu(mfu_pct: float, basis: str, hw: Any, precision: str, notes: list[str]) -> float:
    """TFLOP/s per device from an MFU alone: ``mfu_pct`` of the peak the ``basis`` cell states
    for the row's precision ("MFU vs v5e bf16 peak (197 TF)", "peak BF16 989 TF, FP8 1979 TF"),
    else of the catalog's dense peak of the precision; said in the notes."""
    found = [(m.group(1).lower() if m.group(1) else None, float(m.group(2).replace(",", "")))
             for m in _PEAK_IN_BASIS.finditer(basis)]
    mine = [v for dt, v in found if dt == precision] or ([found[0][1]] if len(found) == 1 else [])
    if mine:
        peak, where = mine[0], f"the {mine[0]:g} TFLOP/s peak its basis states"
    else:
        peak = float(hw.peak_tflops[precision]) if precision in hw.peak_tflops else 0.0
        where = f"the catalog's dense {precision} peak of {hw.id} ({peak:g} TFLOP/s)"
    if peak <= 0:
        raise _Skip("time", f"only an MFU published, and no {precision} peak of {hw.id} to read it against")
    notes.append(f"only an MFU published: {mfu_pct:g}% of {where} = {mfu_pct * peak / 100:.4g} TFLOP/s per device, "
                 "under the FLOP count the stack reports")
    return mfu_pct * peak / 100.0


def _claimed_mfu(r: Mapping[str, str], notes: list[str] | None = None) -> float | None:
    """The ``mfu_pct`` cell in percent; a value of at most 1 without a % sign is a fraction
    ("0.40" is 40%, noted in ``notes``): no training run publishes an MFU below 1%."""
    cell = _cell(r, "mfu_pct")
    try:
        v = read_number(cell)
    except CellError:
        return None
    if v is not None and 0 < v <= 1.0 and "%" not in cell:
        if notes is not None:
            notes.append(f"mfu_pct {cell.strip()[:20]!r} without a % sign: read as the fraction {v:g} = {100 * v:g}%")
        return 100.0 * v
    return v


def parse_runs(text: str, where: str = PACKAGED) -> tuple[TableRun, ...]:
    """Map every row of a runs CSV (the packaged table's columns); header names are matched
    case-insensitively and with surrounding spaces ignored."""
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    fields = reader.fieldnames or []
    rename = {f: f.strip().lower() for f in fields if f is not None}
    missing = [c for c in REQUIRED_COLUMNS if c not in rename.values()]
    if missing:
        raise InputFileError(f"runs file {where!r}: missing column(s) {', '.join(missing)}")
    rows = [{rename[k]: (v or "") for k, v in r.items() if k is not None} for r in reader]
    rows = [r for r in rows if any(v.strip() for v in r.values())]  # blank lines are not rows
    return tuple(_row(r) for r in rows)


@lru_cache(maxsize=1)
def packaged_runs() -> tuple[TableRun, ...]:
    """Every row of the packaged published-runs table, mapped or excluded."""
    text = resources.files("trainperf.predict").joinpath("data", PACKAGED).read_text(encoding="utf-8")
    return parse_runs(text)


def load_table_runs(path: str | Path | None = None) -> tuple[TableRun, ...]:
    """The packaged table, or a CSV file with the same columns."""
    if path is None:
        return packaged_runs()
    return parse_runs(read_user_text(path, "runs file"), str(path))


def included(runs: Sequence[TableRun]) -> list[TableRun]:
    return [r for r in runs if r.included]


def published_records(key: str = "") -> list[Any]:
    """Mapped rows of the packaged table as published run records (named ``row:<row_id>``): all
    of them, or those ``key`` names: a row (``12`` or ``row:12``), a table (``table:<id>`` or
    its id), a device id or vendor (``h100-sxm``, ``amd``), or a shell-style pattern over the
    records' names (``row:1?``). A key naming none is a one-line error listing the rows."""
    import fnmatch

    runs = included(packaged_runs())
    key = key.strip()
    if key and key != "all":
        bare = key.removeprefix("row:").removeprefix("table:")
        runs = ([r for r in runs if r.row_id == bare or r.table_id.strip() == bare]
                or [r for r in runs if key in (r.workload.hardware.id, r.workload.hardware.vendor)]
                or [r for r in runs if fnmatch.fnmatchcase(f"row:{r.row_id}", key)])
        if not runs:
            raise UnknownNameError("published row", key, [f"row:{r.row_id}" for r in included(packaged_runs())])
    return [r.to_run_record() for r in runs]


def select_runs(runs: Sequence[TableRun], spec: str, where: str = "published-runs") -> list[TableRun]:
    """The rows ``row:<row_id>`` or ``table:<table_id>`` names (an unknown id is a one-line
    error listing the nearest ones)."""

    kind, _, key = spec.partition(":")
    if kind not in ("row", "table"):
        raise SpecError("run", spec, "row:<row_id> or table:<table_id>")
    field_ = "row_id" if kind == "row" else "table_id"
    picked = [r for r in runs if getattr(r, field_).strip() == key.strip()]
    if not picked:
        raise UnknownNameError(f"{where} {kind}", key, sorted({getattr(r, field_) for r in runs}))
    return picked


# ------------------------------------------------------------------------------ reading report
def row_reading(run: TableRun) -> dict[str, Any]:
    """How one row was read: its hardware resolution, stack, whether it states the essentials,
    the defaults it took and, for an unread row, why."""
    return {"row_id": run.row_id, "hardware": run.hardware, "device": run.device_id or None,
            "hardware_read": run.hardware_read, "stack": run.stack, "states_essentials": run.states_essentials,
            "read": run.included, "unread_kind": run.exclude_kind or None, "unread_reason": run.exclude_reason or None,
            "defaults_taken": sum(1 for a in run.assumptions if " not stated: " in a)}


def reading_summary(runs: Sequence[TableRun]) -> dict[str, Any]:
    """What a reader got out of a runs table: rows read and unread (each unread row with its
    reason, counted by kind), and coverage of the rows that state model shape, batch, devices
    and a time."""
    unread = [r for r in runs if not r.included]
    kinds: dict[str, int] = {}
    for r in unread:
        kinds[r.exclude_kind or "other"] = kinds.get(r.exclude_kind or "other", 0) + 1
    stating = [r for r in runs if r.states_essentials]
    read_stating = sum(1 for r in stating if r.included)
    return {
        "rows_total": len(runs), "rows_read": len(runs) - len(unread), "rows_unread": len(unread),
        "rows_stating_essentials": len(stating), "rows_stating_essentials_read": read_stating,
        "coverage_of_stating_rows_pct": 100.0 * read_stating / len(stating) if stating else None,
        "unread_by_kind": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
        "unread": [{"row_id": r.row_id, "table_id": r.table_id, "kind": r.exclude_kind, "reason": r.exclude_reason,
                    "states_essentials": r.states_essentials} for r in unread],
    }
