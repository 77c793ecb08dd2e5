"""The activation-checkpointing cell of a runs-table row, read as a checkpointing policy of
the workload schema (:mod:`trainperf.specs.checkpointing`): Megatron-Core's recompute modules
and methods, MaxText's remat policies (named, or custom with their per-tensor choices), then the
words other frameworks use; a cell that states nothing takes the stack's default, noted."""

from __future__ import annotations

import re
from typing import Any

from trainperf.errors import TrainperfError
from trainperf.predict.runs_cells import unstated
from trainperf.predict.runs_rows import RowSkip, row_default
from trainperf.specs.checkpointing import MAXTEXT_NAMES, POLICIES, RECOMPUTE_MODULES, get_policy


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


def read_policy(cell: str, stack: str, d: Any, precision: str, params_B: float, notes: list[str]) -> str:
    """The activation-checkpointing policy of a cell (policy names of the workload schema); a
    cell that states nothing takes the stack's default for the model's size. The rules run in
    order: Megatron-Core's modules and methods, MaxText's policies (:func:`_policy_named`), then
    the words other frameworks use (:func:`_policy_words`)."""
    low = re.sub(r"^-+", "", cell.lower().strip())  # a command-line flag: "--recompute-granularity full"
    if unstated(cell):
        return row_default(d, "activation_checkpointing", "activation checkpointing", notes, params_B)
    if re.match(r"recompute[_ -]activations\W*$", low):  # Megatron-LM's --recompute-activations: selective
        return _first_known("selective")
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
        return row_default(d, "activation_checkpointing", "activation checkpointing", notes, params_B)
    megatron = _megatron_method(low, cell, notes)
    if megatron:
        return megatron
    if re.match(r"(?:all|every)\s*(?:the\s*)?(?:layers?|blocks?)\b|all$", low):  # "recompute all layers"
        return "full"
    got = _policy_named(low, cell, precision, notes) or _policy_words(low, cell, d, notes)
    if got:
        return got
    raise RowSkip("checkpointing", f"activation checkpointing {cell[:60]!r} not readable "
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
    m = re.match(r"(?:fsdp_config\.)?(?:activation[_ ]checkpointing|gradient[_ ]checkpointing|checkpointing|ac|"
                 r"act[_ ]?ckpt)\W*(true|yes|on|false|no|off|none|null)\b", low)
    if m:  # LLM Foundry / Composer yaml: fsdp_config.activation_checkpointing: true (whole blocks); "AC: off"
        return "full" if m.group(1) in ("true", "yes", "on") else "none"
    if re.match(r"(?:activation\W*)?offload", low) or ("offload" in low and "activation" in low):
        # activations moved to the host, not recomputed
        notes.append(f"activation checkpointing {cell[:40]!r}: activation offloading read as no recomputation; the "
                     "host transfers and the device memory it frees are not modelled")
        return "none"
    # whole words: "on" is not "only attention", "off" not "offload", "no" not "non-uniform"
    if re.match(r"(?:full|yes|true|on|enabled|recompute|remat|activation checkpointing|gradient[_ ]checkpointing|"
                r"checkpoint|ckpt[_ -]?all)(?![a-z])", low) or "remat_policy=full" in low:
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
