"""What a software stack does when a run does not say: the ``[defaults]`` table of its profile.

A runs table often leaves a cell "not stated" (activation checkpointing, micro batch, the fp8
recipe...). Such a value is taken as the stack's documented default, and the row says so in its
assumptions (:mod:`trainperf.predict.runs_table`). The defaults live in the ``[defaults]`` table
of each profile file (``data/stacks/<stack>.toml``; :class:`~trainperf.predict.stacks.Profile`
keeps the table raw), every value with its source in ``[defaults.sources]``::

    [defaults]
    micro_batch = "local"
    precision = "bf16"
    [defaults.activation_checkpointing]   # by model size: upper bound in billions of params
    20 = "selective-op"
    above = "full"
    [defaults.sources]
    activation_checkpointing = "torchtitan's llama3 train configs ..."

A stack's table may leave keys out: those come from ``generic`` (whose table has every key),
and the note names ``generic`` as where the value came from. :data:`DEFAULT_KEYS` lists the keys
and what each value may be; :func:`stack_defaults` reads and checks a profile's table (a wrong
key or value is a one-line error naming it).

A stack's defaults are what its *published recipes* do, which is not always what its
command line does when a flag is left out: Megatron-LM leaves sequence parallelism and the
distributed optimizer off unless asked, while every NeMo 2.0 and Megatron-Bridge recipe with
tensor parallelism turns both on. A profile keeps such recipe families apart in
``[defaults.recipes.<name>]`` tables: the words of a runs table's framework cell that select the
family (``frameworks``), the releases whose recipes were read (``release``), and the values
that differ from the stack's table, each with its source in ``[defaults.recipes.<name>.sources]``::

    [defaults.recipes.nemo]
    frameworks = ["nemo", "megatron-bridge"]
    release = "NeMo 24.09-25.04 recipes; Megatron-Bridge 0.1"
    sequence_parallel = true
    [defaults.recipes.nemo.sources]
    sequence_parallel = "nemo/collections/llm/recipes/llama3_70b.py: sequence_parallelism=True ..."

:func:`stack_defaults` (``stack_defaults("megatron-core", "NeMo 2.0")``) lays the family the
framework cell names over the stack's table, and a note says which recipe family and release a
value came from.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from trainperf.accounting.conventions import CONVENTIONS
from trainperf.errors import SpecError, UnknownNameError
from trainperf.predict import stacks
from trainperf.specs.checkpointing import get_policy
from trainperf.specs.hardware import PRECISIONS
from trainperf.specs.parallel import PIPELINE_SCHEDULES
from trainperf.specs.workload import FP8_RECIPES

DEFAULT_KEYS: dict[str, str] = {
    "activation_checkpointing": "checkpointing policy name (trainperf.specs.checkpointing), or a table "
                                "'<max params in billions>' = policy with 'above' for larger models",
    "selective": "the policy a bare 'selective' means in this stack",
    "micro_batch": "sequences per device per forward/backward: a positive integer, or 'local' for the whole "
                   "per-data-parallel-rank batch (global / data-parallel degree: no gradient accumulation)",
    "micro_batch_column": "what a runs table's micro_batch column holds for this stack: 'micro' (the micro "
                          "batch) or 'local_batch' (the per-data-parallel-rank batch, split into pipeline "
                          "micro-batches under pipeline parallelism)",
    "pipeline_microbatch_size": "sequences per pipeline micro-batch when the local batch is split (positive integer)",
    "precision": "matmul dtype (fp32, tf32, fp16, bf16, fp8, fp4)",
    "fp8_recipe": "fp8 scaling recipe when a row says fp8 without one (tensorwise, rowwise, delayed)",
    "sequence_parallel": "sequence parallelism with tensor parallelism (true/false)",
    "data_parallel_sharding": "how data-parallel ranks shard when the row does not say: 'fsdp' (over every "
                              "data-parallel rank), 'zero-1' (optimizer states) or 'none'",
    "tp": "tensor-parallel degree (positive integer)",
    "pp": "pipeline-parallel degree (positive integer)",
    "cp": "context-parallel degree (positive integer)",
    "pp_schedule": "pipeline schedule (1f1b, interleaved, gpipe)",
    "interleaved_stages_per_rank": "virtual pipeline stages per rank when a row says its schedule is interleaved "
                                   "without a count: a positive integer, or 'layers' (one layer per virtual stage: "
                                   "layers // pp)",
    "compile": "the model is compiled or fused (true/false)",
    "async_tp": "tensor-parallel collectives overlapped with GEMMs when tp > 1 (true/false)",
    "tflops_convention": "FLOP convention of a published TFLOP/s figure whose basis is not stated "
                         "(trainperf.accounting.conventions)",
}
"""Every key a ``[defaults]`` table may hold, and what its value may be."""

_SHARDING = ("fsdp", "zero-1", "none")
_COLUMN = ("micro", "local_batch")


@dataclass(frozen=True)
class Default:
    """One default value and where it comes from."""

    value: Any
    source: str
    stack: str
    """The profile whose table held it (``generic`` when the stack's own table leaves it out;
    ``megatron-core recipes 'nemo' (NeMo 24.09-25.04 ...)`` for a recipe family's value)."""

    def note(self, what: str) -> str:
        """``"<what> not stated: <value> taken (<stack> default: <source>)"``."""
        v = str(self.value).lower() if isinstance(self.value, bool) else self.value
        return f"{what} not stated: {v} taken ({self.stack} default: {self.source})"


@dataclass(frozen=True)
class Recipes:
    """One recipe family of a stack (``[defaults.recipes.<name>]``), checked."""

    name: str
    frameworks: tuple[str, ...]
    """Words of a framework cell that select the family (case, spaces, ``-`` and ``_`` aside)."""
    release: str
    """The releases whose recipes the values were read from."""
    values: Mapping[str, Any]
    sources: Mapping[str, str]

    def selected_by(self, framework: str) -> bool:
        """Whether a runs table's framework cell names this family: one of its words, as a word
        (``nemo`` in "NeMo 2.0" and "NeMo24.09", not in "Nemotron"), spaces, ``-`` and ``_``
        between its parts optional ("Megatron Bridge", "megatron_bridge")."""
        low = framework.lower()
        for w in self.frameworks:
            parts = [re.escape(p) for p in re.split(r"[\s_-]+", w.lower().strip()) if p]
            if re.search(r"(?<![a-z0-9])" + r"[\s_-]*".join(parts) + r"(?![a-z])", low):
                return True
        return False


@dataclass(frozen=True)
class StackDefaults:
    """A stack's ``[defaults]`` over generic's, checked."""

    stack: str
    values: Mapping[str, Any] = field(default_factory=dict)
    """Key -> value (size tables kept as ``((max_params_B, value), ...)``, ``inf`` for 'above')."""
    sources: Mapping[str, str] = field(default_factory=dict)
    owners: Mapping[str, str] = field(default_factory=dict)
    """Key -> the profile that gave it."""
    recipes: tuple[Recipes, ...] = ()
    """The stack's recipe families (``[defaults.recipes.*]``), not yet applied."""

    def for_framework(self, framework: str | None) -> StackDefaults:
        """These defaults with the recipe family the framework cell names laid over them (the first
        family whose words the cell holds); unchanged when it names none."""
        chosen = next((r for r in self.recipes if framework and r.selected_by(framework)), None)
        if chosen is None:
            return self
        owner = f"{self.stack} recipes {chosen.name!r} ({chosen.release})"
        return StackDefaults(stack=self.stack, values={**self.values, **chosen.values},
                             sources={**self.sources, **chosen.sources},
                             owners={**self.owners, **dict.fromkeys(chosen.values, owner)}, recipes=())

    def get(self, key: str, params_B: float | None = None) -> Default | None:
        """The default for ``key`` (for a model of ``params_B`` billion parameters where the value
        depends on size; ``None`` for the largest band); ``None`` when no table has it."""
        if key not in DEFAULT_KEYS:
            raise UnknownNameError("stack default", key, DEFAULT_KEYS)
        if key not in self.values:
            return None
        v = self.values[key]
        if isinstance(v, tuple):
            size = math.inf if params_B is None else params_B
            v = next(val for bound, val in v if size <= bound)
        return Default(v, self.sources.get(key, ""), self.owners.get(key, self.stack))


def _check_value(key: str, v: Any, where: str) -> Any:
    def pos_int(x: Any) -> int:
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise SpecError(where, x, "a positive integer")
        return x

    if key in ("activation_checkpointing", "selective"):
        if key == "activation_checkpointing" and isinstance(v, Mapping):
            return _size_table(v, where)
        if not isinstance(v, str):
            raise SpecError(where, v, "a checkpointing policy name")
        get_policy(v, where)
        return v
    if key == "micro_batch":
        return "local" if v == "local" else pos_int(v)
    if key == "interleaved_stages_per_rank":
        return "layers" if v == "layers" else pos_int(v)
    if key in ("pipeline_microbatch_size", "tp", "pp", "cp"):
        return pos_int(v)
    if key in ("sequence_parallel", "compile", "async_tp"):
        return stacks.check_flag(where, v)
    table = {"micro_batch_column": _COLUMN, "precision": PRECISIONS, "fp8_recipe": FP8_RECIPES,
             "data_parallel_sharding": _SHARDING, "pp_schedule": PIPELINE_SCHEDULES,
             "tflops_convention": CONVENTIONS}[key]
    return stacks.check_choice(where, v, table)


def _size_table(body: Mapping[str, Any], where: str) -> tuple[tuple[float, str], ...]:
    out: list[tuple[float, str]] = []
    for k, v in body.items():
        try:
            bound = math.inf if str(k) == "above" else float(k)
        except ValueError:
            raise SpecError(f"{where}.{k}", k, "an upper bound in billions of parameters, or 'above'") from None
        if not isinstance(v, str):
            raise SpecError(f"{where}.{k}", v, "a checkpointing policy name")
        get_policy(v, f"{where}.{k}")
        out.append((bound, v))
    out.sort(key=lambda t: t[0])
    if not out or out[-1][0] != math.inf:
        raise SpecError(where, dict(body), "a table of size bounds ending with 'above'")
    return tuple(out)


_RECIPE_FIELDS = ("frameworks", "release")


def read_recipes(body: Any, where: str) -> tuple[Recipes, ...]:
    """Check a ``[defaults.recipes]`` table: each family names the framework words that select it
    and the releases its values were read from, and states values as ``[defaults]`` does."""
    if not isinstance(body, Mapping):
        raise SpecError(where, body, "a table of recipe families")
    out: list[Recipes] = []
    for name, fam in body.items():
        at = f"{where}.{name}"
        if not isinstance(fam, Mapping):
            raise SpecError(at, fam, "a table")
        words = fam.get("frameworks")
        if not isinstance(words, list) or not words or not all(isinstance(w, str) and w.strip() for w in words):
            raise SpecError(f"{at}.frameworks", words, "a list of the framework words that select these recipes")
        release = fam.get("release")
        if not isinstance(release, str) or not release.strip():
            raise SpecError(f"{at}.release", release, "the releases whose recipes the values come from")
        values, sources = read_defaults_table({k: v for k, v in fam.items() if k not in _RECIPE_FIELDS}, at,
                                              recipes=False)
        out.append(Recipes(str(name), tuple(words), release, values, sources))
    return tuple(out)


def read_defaults_table(body: Mapping[str, Any], where: str,
                        recipes: bool = True) -> tuple[dict[str, Any], dict[str, str]]:
    """Check a ``[defaults]`` table: known keys, valid values, a source for every value (its
    ``recipes`` sub-table is checked by :func:`read_recipes`)."""
    if not isinstance(body, Mapping):
        raise SpecError(where, body, "a table")
    sources = body.get("sources", {})
    if not isinstance(sources, Mapping):
        raise SpecError(f"{where}.sources", sources, "a table of key = source")
    values: dict[str, Any] = {}
    for k, v in body.items():
        if k == "sources":
            continue
        if k == "recipes" and recipes:
            read_recipes(v, f"{where}.recipes")
            continue
        if k not in DEFAULT_KEYS:
            raise UnknownNameError(f"{where}.{k}", k, DEFAULT_KEYS)
        values[k] = _check_value(k, v, f"{where}.{k}")
        src = sources.get(k)
        if not isinstance(src, str) or not src.strip():
            raise SpecError(f"{where}.sources.{k}", src, "a source saying where the default comes from")
    for k in sources:
        if k not in values:
            raise UnknownNameError(f"{where}.sources.{k}", k, values)
    return values, {str(k): str(v) for k, v in sources.items()}


def defaults_of(profile: Any) -> StackDefaults:
    """The checked defaults of a :class:`~trainperf.predict.stacks.Profile` over generic's."""
    generic = stacks.packaged_profile(stacks.DEFAULT_STACK)
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    owners: dict[str, str] = {}
    recipes: tuple[Recipes, ...] = ()
    chain = [generic] if profile.name == stacks.DEFAULT_STACK and not profile.path else [generic, profile]
    for prof in chain:
        where = f"stack profile {prof.path or prof.name} [defaults]"
        vals, srcs = read_defaults_table(prof.defaults, where)
        values.update(vals)
        sources.update(srcs)
        owners.update({k: prof.name for k in vals})
        recipes = read_recipes(prof.defaults.get("recipes", {}), f"{where}.recipes")
    return StackDefaults(stack=profile.name, values=values, sources=sources, owners=owners, recipes=recipes)


@lru_cache(maxsize=64)
def stack_defaults(stack: str, framework: str | None = None) -> StackDefaults:
    """The defaults of a packaged stack (or a profile file) by name, over generic's, with the
    recipe family ``framework`` (a runs table's framework cell) names laid over them."""
    return defaults_of(stacks.load_profile(stack)).for_framework(framework)
