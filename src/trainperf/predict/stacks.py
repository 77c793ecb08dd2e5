"""Software-stack profiles: how well a framework turns a device's physics into throughput.

Device physics (peaks per dtype, HBM size and bandwidth, link bandwidths) lives in the device
catalog; SKUs of one silicon differ only there, and what a silicon's kernels achieve is kernel
physics (:mod:`trainperf.predict.kernels`). A *stack profile* holds the few software numbers on
top of them -- the knobs of :mod:`trainperf.predict.efficiency`: the share of the measured GEMM,
attention, memory-bound and collective speed the stack keeps, the overlap of its collectives, its
fixed per-kernel cost -- where a value depends on the GPU generation, per generation
(``ampere``, ``hopper``, ...), never per SKU; and the facts of what it runs (``[kernels]``,
``[capabilities]``, ``[defaults]``). Each fitted value carries its source: the published tables
it was fitted on, with the held-out error of that fit.

A profile is a TOML file (the packaged ones are ``data/stacks/<name>.toml``; a user's profile,
e.g. written by ``trainperf calibrate-model``, has the same format)::

    name = "megatron-core"
    description = "Megatron-LM, NeMo, Megatron-Bridge (Megatron-Core + Transformer Engine)"
    frameworks = ["megatron", "nemo"]      # substrings of a run's framework that select it
    [knobs]                                  # all generations
    overlap = 0.9
    [knobs.sources]
    overlap = "fitted on ..."
    [generations.hopper]                     # one generation
    matmul_fraction = 0.95
    [generations.hopper.sources]
    matmul_fraction = "fitted on tables ...: N rows, leave-one-table-out MAPE Z%"

Knobs resolve, later entries winning: built-in defaults, the device vendor's defaults
(``data/efficiency.toml``), ``generic`` (all generations, then the device's generation), the
named stack (all generations, then the device's generation).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from trainperf.errors import InputFileError, SpecError, UnknownNameError
from trainperf.predict.efficiency import Knobs, check_knob_name, silicon, vendor_knobs
from trainperf.specs.catalog_cache import read_catalog
from trainperf.specs.datafiles import parse_user_data, read_user_text
from trainperf.specs.workload import BENCH_STACK as _BENCH_STACK

DEFAULT_STACK = "generic"
STACKS: tuple[str, ...] = ("generic", "megatron-core", "megatron-lm-2021", "maxtext", "paxml", "torchtitan",
                           "llm-foundry", "deepspeed", "trainperf-bench", "hf-transformers")
"""Packaged profiles. ``generic`` is fitted on every table and is the default; ``trainperf-bench``
states what trainperf's own bench runs (the stack a bench run's ``workload.toml`` names), and
``hf-transformers`` what Hugging Face Transformers models trained eagerly run (Trainer,
Accelerate), each with no fitted knobs of its own: no published table."""
UNPUBLISHED_STACKS: tuple[str, ...] = ("trainperf-bench", "hf-transformers")
"""Packaged profiles no published table was fitted on (the planner does not compare them unless asked)."""
BENCH_STACK = _BENCH_STACK
"""The profile of ``trainperf bench`` (:mod:`trainperf.measure`): not a published framework, so
the planner does not offer it (:func:`trainperf.predict.stack_capabilities.stacks_for`)."""

_FRAMEWORK_KEYS: tuple[tuple[str, str], ...] = (
    ("trainperf bench", "trainperf-bench"), ("trainperf-bench", "trainperf-bench"),  # first: the bench, whatever it imitates
    ("deepspeed", "deepspeed"),  # Megatron-DeepSpeed: DeepSpeed's engine, not Megatron-Core
    ("megatron-lm 2021", "megatron-lm-2021"), ("megatron-lm-2021", "megatron-lm-2021"),
    ("megatron", "megatron-core"), ("nemo", "megatron-core"),
    ("maxtext", "maxtext"), ("paxml", "paxml"), ("pax", "paxml"),
    ("torchtitan", "torchtitan"),
    ("llm foundry", "llm-foundry"), ("llm-foundry", "llm-foundry"), ("composer", "llm-foundry"),
    ("hugging face", "hf-transformers"), ("huggingface", "hf-transformers"), ("hf trainer", "hf-transformers"),
    ("hf-transformers", "hf-transformers"), ("transformers", "hf-transformers"), ("accelerate", "hf-transformers"),
)

_GENERATIONS: tuple[tuple[str, str], ...] = (
    ("a100", "ampere"), ("a800", "ampere"), ("a10", "ampere"), ("a30", "ampere"),
    ("h100", "hopper"), ("h200", "hopper"), ("h800", "hopper"), ("h20", "hopper"), ("gh200", "hopper"),
    ("gb200", "blackwell"), ("b200", "blackwell"), ("b300", "blackwell"), ("gb300", "blackwell"),
    ("l40", "ada"), ("l4", "ada"),
    ("mi250", "cdna2"), ("mi210", "cdna2"), ("mi300", "cdna3"), ("mi325", "cdna3"), ("mi355", "cdna4"),
    ("tpu-v4", "tpu-v4"), ("tpu-v5e", "tpu-v5e"), ("tpu-v5p", "tpu-v5p"), ("tpu-v6e", "tpu-v6e"),
    ("gaudi2", "gaudi2"), ("gaudi3", "gaudi3"), ("cpu", "cpu"),
)


def stack_of_framework(framework: str) -> str:
    """The profile name of a framework as published (``"NeMo 24.09 (Megatron-Core, TE)"`` ->
    ``megatron-core``); ``generic`` when none matches."""
    low = framework.lower()
    for key, name in _FRAMEWORK_KEYS:
        if key in low:
            return name
    return DEFAULT_STACK


def generation_of(hardware: Any) -> str:
    """The silicon generation of a device: its catalog ``generation`` (or ``silicon``) field
    when it has one, else derived from its id (``h100-sxm-94gb`` -> ``hopper``)."""
    for attr in ("generation", "silicon"):
        v = getattr(hardware, attr, None)
        if isinstance(v, str) and v:
            return v
    hid = str(getattr(hardware, "id", hardware)).lower()
    for prefix, gen in _GENERATIONS:
        if hid.startswith(prefix):
            return gen
    return hid


@dataclass(frozen=True)
class Profile:
    """One software stack's knob values, stack-wide and per GPU generation, with sources."""

    name: str
    """Profile name (``megatron-core``, ...), or the file stem of a user profile."""
    description: str = ""
    frameworks: tuple[str, ...] = ()
    """Substrings of a framework name that select this profile."""
    knobs: Mapping[str, float] = field(default_factory=dict)
    """Knob values for every generation."""
    generations: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """Generation -> knob values."""
    sources: Mapping[str, str] = field(default_factory=dict)
    """``knob`` or ``generation.knob`` -> where the value comes from."""
    fit: Mapping[str, Any] = field(default_factory=dict)
    """What the fit reported (tables, rows, errors); informational."""
    path: str = ""
    """File it was read from (empty for a packaged profile)."""
    kernels: Mapping[str, Any] = field(default_factory=dict)
    """``[kernels]``: which kernels and features the stack uses (attention kernel family per
    silicon, fused elementwise ops, compile, fp8 recipe, overlap of each collective), stated as
    facts with sources (``[kernels.sources]``); read by the step model."""
    capabilities: Mapping[str, Any] = field(default_factory=dict)
    """``[capabilities]``: what the stack can run (parallelisms, ZeRO stages, pipeline schedules,
    checkpointing policies, vpp limits), with sources; read by the planner."""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """``[defaults]``: what the stack does when a run does not say (activation checkpointing,
    micro batch...), with sources; read when a runs table marks a value "not stated"."""

    def with_facts(self, name: str, table: str, facts: Mapping[str, Any], sources: Mapping[str, str]) -> Profile:
        """This profile named ``name`` with ``facts`` (and their ``sources``) over those of its
        ``table`` (``kernels``, ``capabilities`` or ``defaults``): a run's stack where it differs from
        the packaged one in a stated fact (write it with :meth:`to_toml` for ``--stack FILE``)."""
        old = dict(getattr(self, table))
        body: Mapping[str, Any] = {**old, **facts, "sources": {**old.get("sources", {}), **sources}}
        tables: dict[str, Any] = {table: body}
        return dataclasses.replace(self, name=name, path="", **tables)

    def values_for(self, generation: str) -> dict[str, float]:
        """This profile's knob values for ``generation`` (generation entries over stack-wide)."""
        return {**self.knobs, **self.generations.get(generation, {})}

    def source_of(self, knob: str, generation: str) -> str | None:
        if knob in self.generations.get(generation, {}):
            return self.sources.get(f"{generation}.{knob}", f"profile {self.name} [{generation}]")
        if knob in self.knobs:
            return self.sources.get(knob, f"profile {self.name}")
        return None

    def to_toml(self) -> str:
        """The profile as a TOML file :func:`load_profile` reads back (tomli-w; fitted numbers to
        6 significant digits)."""
        import tomli_w

        def six(v: float) -> float:
            return float(f"{v:.6g}")

        doc: dict[str, Any] = {
            "name": self.name, "description": self.description, "frameworks": list(self.frameworks),
            "knobs": {**{k: six(v) for k, v in self.knobs.items()},
                      "sources": {k: self.sources.get(k, "") for k in self.knobs}},
            "generations": {gen: {**{k: six(v) for k, v in vals.items()},
                                  "sources": {k: self.sources.get(f"{gen}.{k}", "") for k in vals}}
                            for gen, vals in self.generations.items()},
        }
        doc.update({name: dict(body) for name, body in (("kernels", self.kernels), ("capabilities", self.capabilities),
                                                         ("defaults", self.defaults)) if body})
        if self.fit:
            doc["fit"] = {k: (six(v) if isinstance(v, float) else v) for k, v in self.fit.items()}
        return tomli_w.dumps(doc)


def check_choice(where: str, v: Any, allowed: Collection[str]) -> str:
    """``v`` if ``allowed`` holds it (a value of a profile's fact tables), else a one-line error."""
    if v not in tuple(allowed):
        raise UnknownNameError(where, str(v), allowed)
    return str(v)


def check_flag(where: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise SpecError(where, v, "true or false")
    return v


def check_number(where: str, v: Any, high: float, unit: str = "") -> float:
    """``v`` as a float if it is a number in ``(0, high]``, else a one-line error."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= high:
        raise SpecError(where, v, f"a positive number{unit} (<= {high:g})")
    return float(v)


def _knob_table(body: Any, where: str) -> tuple[dict[str, float], dict[str, str]]:
    if not isinstance(body, Mapping):
        raise SpecError(where, body, "a table of knob = value")
    vals: dict[str, float] = {}
    for k, v in body.items():
        if k == "sources":
            continue
        check_knob_name(str(k), f"{where}.{k}")
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise SpecError(f"{where}.{k}", v, "a number")
        vals[k] = float(v)
    srcs = body.get("sources", {})
    if not isinstance(srcs, Mapping):
        raise SpecError(f"{where}.sources", srcs, "a table of knob = source")
    return vals, {str(k): str(v) for k, v in srcs.items()}


_TOP_KEYS = frozenset({"name", "description", "frameworks", "knobs", "generations", "fit", "kernels",
                       "capabilities", "defaults"})


def profile_from_dict(data: Mapping[str, Any], where: str, path: str = "") -> Profile:
    """Build a :class:`Profile` from a parsed profile file (unknown keys are errors)."""
    for k in data:
        if k not in _TOP_KEYS:
            raise UnknownNameError(f"{where}: key", k, _TOP_KEYS)
    knobs, srcs = _knob_table(data.get("knobs", {}), f"{where} [knobs]")
    gens: dict[str, dict[str, float]] = {}
    sources = dict(srcs)
    body = data.get("generations", {})
    if not isinstance(body, Mapping):
        raise SpecError(f"{where} [generations]", body, "a table of generation tables")
    for gen, tbl in body.items():
        vals, gsrc = _knob_table(tbl, f"{where} [generations.{gen}]")
        gens[str(gen)] = vals
        sources.update({f"{gen}.{k}": v for k, v in gsrc.items()})
    fws = data.get("frameworks", [])
    if not isinstance(fws, list) or not all(isinstance(f, str) for f in fws):
        raise SpecError(f"{where} frameworks", fws, "a list of strings")
    for key, kind, what in (("name", str, "a string"), ("description", str, "a string"),
                            ("fit", Mapping, "a table")):
        if key in data and not isinstance(data[key], kind):
            raise SpecError(f"{where} {key}", data[key], what)
    facts: dict[str, dict[str, Any]] = {}
    for table in ("kernels", "capabilities", "defaults"):
        body = data.get(table, {})
        if not isinstance(body, Mapping):
            raise SpecError(f"{where} [{table}]", body, "a table")
        facts[table] = dict(body)
    return Profile(name=str(data.get("name", Path(where).stem)), description=str(data.get("description", "")),
                   frameworks=tuple(str(f) for f in fws), knobs=knobs, generations=gens,
                   sources=sources, fit=dict(data.get("fit", {})), path=path, **facts)


@lru_cache(maxsize=32)
def packaged_profile(name: str) -> Profile:
    """A packaged profile by name (parsed once per content, then read from the JSON cache of
    :mod:`trainperf.specs.catalog_cache`: ``tomllib`` would be a large share of a cold ``predict``)."""
    if name not in STACKS:
        raise UnknownNameError("stack", name, STACKS)
    try:
        data = read_catalog("trainperf.predict", f"stacks/{name}.toml", f"packaged stack profile {name!r}")
    except InputFileError as e:
        if isinstance(e.__cause__, FileNotFoundError):
            return Profile(name=name)
        raise
    return profile_from_dict(data, f"stacks/{name}.toml")


def read_profile_file(path: str | Path) -> Profile:
    """A user profile file (same format as the packaged ones)."""
    p = Path(path)
    data = parse_user_data(read_user_text(p, "stack profile"), p, "stack profile", toml=True)
    return profile_from_dict(data, str(p), path=str(p))


def load_profile(name_or_file: str | None) -> Profile:
    """A packaged profile by name, or a profile file by path (``*.toml``)."""
    if not name_or_file:
        return packaged_profile(DEFAULT_STACK)
    s = str(name_or_file)
    if s in STACKS:
        return packaged_profile(s)
    if s.endswith(".toml") or Path(s).is_file():
        return read_profile_file(s)
    raise UnknownNameError("stack", s, STACKS)


def knobs_with_profiles(hardware: Any, profiles: tuple[Profile, ...] | list[Profile]) -> Knobs:
    """Vendor defaults, then each profile's values for the device's generation, in order; a
    profile with no entry for it takes its entry for the stand-in generation
    (:func:`stand_in_generation`) where it has one."""
    gen, stand = _generation_and_stand_in(profiles, hardware)
    k = vendor_knobs(str(getattr(hardware, "vendor", "")))
    vals = k.values()
    srcs = dict(k.sources)
    for prof in profiles:
        g = entry_generation(prof, gen, stand)
        for name, v in prof.values_for(g).items():
            vals[name] = v
            srcs[name] = prof.source_of(name, g) or prof.name
    label = gen if stand in (None, gen) else f"{gen} as {stand}"
    return dataclasses.replace(k, **vals, device=f"{'+'.join(p.name for p in profiles)}:{label}", sources=srcs)


def entry_generation(prof: Profile, generation: str, stand: str | None) -> str:
    """The generation whose entry of ``prof`` applies on ``generation``: its own where ``prof``
    has one, else the stand-in's (:func:`stand_in_generation`; None: the stack-wide values)."""
    return generation if stand is None or generation in prof.generations else stand


def resolved_values(profiles: tuple[Profile, ...] | list[Profile], hardware: Any) -> list[tuple[Profile, str]]:
    """Each profile of a chain with the generation whose entry it gives on ``hardware``, as
    :func:`knobs_with_profiles` reads them."""
    gen, stand = _generation_and_stand_in(profiles, hardware)
    return [(prof, entry_generation(prof, gen, stand)) for prof in profiles]


def _generation_and_stand_in(profiles: tuple[Profile, ...] | list[Profile], hardware: Any) -> tuple[str, str | None]:
    """The device's generation and its stand-in among the generations the published tables cover:
    those of the chain's ``generic`` (the packaged one where the chain has none)."""
    fitted = next((p.generations.keys() for p in profiles if p.name == DEFAULT_STACK),
                  packaged_profile(DEFAULT_STACK).generations.keys())
    gen = generation_of(hardware)
    return gen, stand_in_generation(gen, fitted, str(getattr(hardware, "vendor", "")))


_KIND_OF_VENDOR = {"google": "tpu", "cpu": "cpu"}


def stand_in_generation(generation: str, fitted: Collection[str], vendor: str = "") -> str | None:
    """The fitted generation whose stack shares a silicon no published table covers takes: of the
    fitted generations of its kind (GPU, TPU: efficiency.toml ``[silicon]``), the one released
    nearest to it, the newer on a tie (Blackwell and MI300X take Hopper's, TPU v6e takes v5e's);
    for a silicon the table does not list, the newest fitted one of the kind its vendor makes.
    ``generation`` itself where it is fitted; None where no generation of its kind is (a CPU,
    whose kernels are measured on it), when the stack-wide values apply.

    Why not the stack-wide values, the all-silicon centre of the fit: every GPU generation fitted
    sits below that centre (a TPU pulls it up), and each has kept less of its GEMM microbenchmark
    speed than the one before (Ampere -> Hopper); held out, a generation predicted from its
    nearest fitted neighbour is closer than from the centre (benchmarks/unseen_silicon.py)."""
    if generation in fitted:
        return generation
    me = silicon(generation)
    kind = me.kind if me is not None else _KIND_OF_VENDOR.get(vendor, "gpu")
    if kind == "cpu":
        return None
    known = [(g, s.released) for g in fitted
             if (s := silicon(g)) is not None and s.kind == kind and s.released is not None]
    if not known:
        return None
    if me is None or me.released is None:
        return max(known, key=lambda c: (c[1], c[0]))[0]
    year = me.released
    return min(known, key=lambda c: (abs(c[1] - year), -c[1], c[0]))[0]


def profile_cache_key(stack: str | None) -> tuple[str, float]:
    """``(name or path, file mtime)`` of a packaged profile or profile file: what a cache of
    anything derived from the profile keys on (an edited file reads anew; 0 for packaged ones,
    -1 for a path that does not exist, whose error comes when it is read)."""
    key = str(stack or DEFAULT_STACK)
    mtime = 0.0
    if key not in STACKS:
        try:
            mtime = Path(key).stat().st_mtime
        except OSError:
            mtime = -1.0
    return key, mtime


def stack_knobs(hardware: Any, stack: str | Profile | None = None) -> Knobs:
    """Knobs of ``stack`` (a name, file or :class:`Profile`) on ``hardware``, over ``generic``."""
    if not isinstance(stack, Profile):
        key, mtime = profile_cache_key(stack)
        return _cached_knobs(generation_of(hardware), str(getattr(hardware, "vendor", "")), key, mtime)
    return _chain_knobs(generation_of(hardware), str(getattr(hardware, "vendor", "")), stack)


def stated_for_generation(stack: str | Profile | None, generation: str) -> frozenset[str]:
    """Knob names ``stack`` (a name, file or :class:`Profile`) states for ``generation`` itself
    (its ``[generations.<generation>]`` table): on a CPU, whose kernel speeds are measured, only
    these override the measured physics (a profile ``trainperf calibrate-model`` fitted to CPU runs)."""
    if isinstance(stack, Profile):
        return frozenset(stack.generations.get(generation, {}))
    key, mtime = profile_cache_key(stack)
    return _cached_stated(generation, key, mtime)


@lru_cache(maxsize=64)
def _cached_stated(generation: str, stack: str, mtime: float) -> frozenset[str]:
    """:func:`stated_for_generation` per (generation, profile name or file and its mtime)."""
    return frozenset(load_profile(stack).generations.get(generation, {}))


@lru_cache(maxsize=256)
def _cached_knobs(generation: str, vendor: str, stack: str, mtime: float) -> Knobs:
    """Cached per (generation, vendor, profile name or file and its mtime): a prediction costs
    microseconds, re-reading profiles would not."""
    return _chain_knobs(generation, vendor, load_profile(stack))


def _chain_knobs(generation: str, vendor: str, prof: Profile) -> Knobs:
    chain = [packaged_profile(DEFAULT_STACK)]
    if prof.name != DEFAULT_STACK or prof.path:
        chain.append(prof)
    return knobs_with_profiles(_GenHardware(generation, vendor), chain)


class _GenHardware:
    """What :func:`knobs_with_profiles` reads of a device: its generation and vendor (a plain
    class: a dataclass costs ~0.5 ms to create at import, on every cold ``predict``)."""

    __slots__ = ("silicon", "vendor")

    def __init__(self, silicon: str, vendor: str) -> None:
        self.silicon = silicon
        self.vendor = vendor
