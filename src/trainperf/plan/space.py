"""The search space of ``trainperf plan``: every parallel plan for a model on N devices, as arrays.

A candidate is one choice of
``(num_devices, dp, fsdp, tp, pp, cp, global_batch, micro_batch, vpp, ep, sequence_parallel,
zero_stage, activation_checkpointing, precision)``. The mesh ``dp x fsdp x tp x pp x cp`` must
multiply to the device count (ParallelPlan's convention; ``ep`` is carved out of
``dp * fsdp * cp`` and does not multiply it).

Candidates are built stage by stage (mesh, then global batch, micro batch, virtual stages,
expert parallelism, sequence parallelism, ZeRO stage, checkpointing, precision), each stage a
numpy expansion followed by vectorised validity masks, so that no Python loop runs per plan.
Every plan that a stage rejects is counted under a named reason, weighted by the number of
plans its rejected prefix stands for, so ``considered == valid + sum(rejected)`` exactly.

Options that do not apply to a mesh are not plans and are not counted: sequence parallelism
only exists with ``tp > 1``, a ZeRO stage over the replicas only with ``dp > 1``, virtual
stages only with ``pp > 1``, expert parallelism only for MoE models. ZeRO-3 over a plain dp
group is the same plan as ``fsdp = dp``, so it is enumerated once, as fsdp.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np

from trainperf import vec
from trainperf.errors import SpecError
from trainperf.predict.stack_capabilities import (
    PlanFacts,
    capabilities_of,
    capability_rules,
    packaged_capabilities,
)
from trainperf.specs.bounds import MEMORY_MARGIN
from trainperf.specs.checkpointing import get_policy, policy_for_model
from trainperf.specs.hardware import Hardware
from trainperf.specs.model import ModelSpec

AC_POLICIES: tuple[str, ...] = (
    "none", "minimal_flash", "selective", "selective:core_attn+layernorm", "selective:core_attn+moe_act+layernorm",
    "selective:core_attn+moe_act+layernorm+mla_up_proj", "minimal", "selective-op",
    "save_dot_with_context_except_mlp", "save_dot_except_mlpwi", "save_dot_except_mlp",
    "selective:core_attn+layernorm+moe", "save_qkv_proj", "qkv_proj_offloaded", "save_out_proj", "full",
)
"""Activation-checkpointing policies the planner can try, in code order (``ac`` column value =
index), from least to most recomputation (Llama-2-7B at 4,096 tokens: 0, elementwise only, 1.07, 1.07 +
norms, ..., 1.07 + elementwise, 5.0, 5.8, 6.9, 6.9, ..., 7.9, 7.9, 10.1, 14.0 GFLOP per token; MaxText's
policies never re-run the MLP down projection, whose output the backward does not read); see
:mod:`trainperf.specs.checkpointing`. MaxText's offloading policies other than ``qkv_proj_offloaded``
(``minimal_offloaded``, ``custom:...``) are not searched: the host transfer they cost is not modelled.
Megatron-Core's recompute modules are tried as two sets (:func:`searched_policies`): every cheap
output-discarding module the model has a part for (``layernorm``, ``moe_act``, ``mla_up_proj``),
and the whole MoE block (``moe``); on a model without MoE layers or MLA the first is
``selective:core_attn+layernorm`` (:func:`~trainperf.specs.checkpointing.policy_for_model`). The parametrised
``full:K`` / ``full-every:N`` are not searched."""
DEFAULT_CHECKPOINTING: tuple[str, ...] = ("none", "selective", "full")
"""Policies tried unless the user names others."""


class SoftwareFields(TypedDict):
    """The ``[training]`` software fields of a plan (keyword arguments of a Workload)."""

    compile: bool
    async_tp: bool
    fp8_recipe: str | None
    stack: str
    moe_dispatcher: str | None
    moe_imbalance: float
    offload_optimizer: bool

# Column names of a candidate table, in a fixed order.
COLUMNS: tuple[str, ...] = (
    "num_devices", "dp", "fsdp", "tp", "pp", "cp", "global_batch", "micro_batch", "vpp", "slots", "sched", "ep",
    "etp", "sp", "zero", "ac", "precision", "layout",
)
"""``layout`` numbers the plans that differ only in ZeRO stage, checkpointing and precision (one
id per row before those columns are expanded), so collapsing ZeRO variants is a 1-D unique."""
SLOT_EMBEDDING, SLOT_LOSS = 1, 2
"""Bits of the ``slots`` column: Megatron's embedding / loss take a layer slot of the first / last
pipeline chunk (``account_for_embedding/loss_in_pipeline_split``)."""
SLOT_LIGHTER_SHIFT = 2
"""``(slots >> 2) & 63`` = ``d`` > 0: an uneven split whose last stage holds ``d`` layers fewer
than the others (Megatron's ``num_layers_in_last_pipeline_stage``), so the LM head and loss it
also runs do not set the pace; never combined with the embedding/loss slots (Megatron allows one
or the other)."""
SLOT_LIGHTER_MASK = 63
SLOT_FIRST_SHIFT = 8
"""``slots >> 8`` = ``d`` > 0: an uneven split whose first stage holds ``d`` layers fewer than the
others (Megatron's ``num_layers_in_first_pipeline_stage``): the first rank holds the most
micro-batches in flight, so a lighter one can let a plan fit that the even split does not;
never combined with the slots or a lighter last stage."""
SCHEDULES_BY_CODE: tuple[str, ...] = ("", "dualpipe", "dualpipev")
"""What the ``sched`` column codes: 0 the schedule the stack runs a plan of its ``vpp`` under
(:meth:`~trainperf.predict.stack_capabilities.Capabilities.schedule_for`: 1F1B, interleaved or
GPipe), 1 DeepSeek-V3's DualPipe (even pp, vpp 1), 2 PyTorch's DualPipeV (vpp 2, two stages a rank
in a V); the last two only where the stack lists them (``pipeline_schedules``)."""
SCHED_DUALPIPE, SCHED_DUALPIPEV = 1, 2


def lighter_last_options(layers: int, pp: int, vpp: int, max_d: int) -> list[int]:
    """The ``d`` (up to ``max_d``) a ``pp``-stage pipeline of ``layers`` layers with ``vpp``
    chunks per rank can take its last stage lighter by: the other ranks hold ``(layers + d) / pp``
    layers each, a multiple of ``vpp``, and the last stage ``d`` fewer, still a multiple of
    ``vpp`` (Megatron-Core builds the same number of layers in every chunk of a rank) and at
    least one per chunk. The same arithmetic gives a first stage ``d`` layers lighter."""
    out = []
    d = (-layers) % pp or pp
    while d <= max_d:
        per = (layers + d) // pp
        if per - d < vpp:
            break
        if per % vpp == 0 and d % vpp == 0:
            out.append(d)
        d += pp
    return out


def head_layers_bound(model: Any) -> int:
    """How many layers lighter a last stage is worth trying: twice the LM head's matmul work in
    layers (``vocab * hidden`` against a layer's parameters, per token), at least 1 (at most
    :data:`SLOT_LIGHTER_MASK`); a lighter stage than that idles longer than the head and loss it
    makes room for take."""
    layer = max(1, model.attention_params_per_layer + model.dense_mlp_params_per_layer)
    return min(SLOT_LIGHTER_MASK, max(1, math.ceil(2.0 * model.vocab * model.hidden / layer)))


def first_layers_bound(layers: int, pp: int) -> int:
    """How many layers lighter a first stage is worth trying (plain 1F1B): up to where the first
    rank stops being the memory peak. Its gain is memory only: under 1F1B rank 0 holds ``pp``
    micro-batches and rank 1 ``pp - 1``, so with ``c`` layers a stage the peak moves to rank 1
    once rank 0 sheds about ``c / pp`` (with ``pp = 2`` rank 1 is the last, holding one: ``c / 3``).
    Interleaving leaves rank 0 only ``2 / vpp`` micro-batches ahead of rank 1: not searched."""
    per = -(-layers // max(pp, 1))
    return max(1, -(-per // (3 if pp == 2 else max(pp, 1))))

# Rejection reasons (stable keys; the text is what --explain prints).
REASONS: dict[str, str] = {
    "stack": "not in the stack's plan space (its [capabilities]: parallelisms, ZeRO stages, schedules)",
    "no_stack": "no packaged stack runs it (a mix of features no one stack has; name one with --stack)",
    "tp_cross_node": "tp larger than the scale-up (NVLink/xGMI) domain (--allow-cross-node-tp)",
    "tp_heads": "tp does not divide the attention heads",
    "tp_kv_heads": "tp neither divides nor is a multiple of the kv heads",
    "tp_ffn": "tp does not divide ffn_hidden",
    "tp_mamba_groups": "tp does not divide the Mamba-2 groups (Megatron-Core splits B and C by group)",
    "pp_layers": "pp larger than the number of layers",
    "cp_seq": "cp does not divide seq_len",
    "batch_dp": "global batch not a multiple of the data-parallel degree dp*fsdp",
    "mbs_local": "micro batch does not divide the local batch (global batch / dp*fsdp)",
    "vpp_layers": "pp*vpp does not divide the layers (plus any embedding/loss slots) evenly",
    "vpp_microbatches": "interleaved schedule needs the micro-batches per step to be a multiple of pp",
    "dualpipe_microbatches": "DualPipe / DualPipeV need at least 2*pp micro-batches per step",
    "ep_ranks": "ep does not divide the ranks the experts fold over (dp*fsdp*cp, times tp when etp = 1)",
    "etp_ffn": "etp does not divide the expert FFN width",
    "fixed": "excluded by --fix (a degree the user fixed)",
    "oom": "does not fit device memory with the planner's margin (--memory-margin)",
}
FIXABLE: tuple[str, ...] = ("dp", "fsdp", "zero", "tp", "sp", "pp", "vpp", "cp", "ep", "etp", "micro_batch",
                            "slots")
"""Columns a user may pin to one value (``--fix tp=8,pp=1``)."""


DEFAULT_MEMORY_MARGIN = 0.10
"""The planner proposes a plan only if its predicted memory leaves 10% of the usable memory free.
The memory model under-predicted measured peaks by up to 7.2% (torchtitan Llama-3-8B peaks in
torchao's float8 training docs: H100 -7.2%, MI300X -6.9%; ``tests/test_memory_model.py``), three
measurements that bound its error from below only, and allocator fragmentation varies from run to
run on top; the published runs say how close practitioners go: 158 of the 162 expert plans of
trainperf's published-runs table leave at least 10% free by this model (of the rest, one is
predicted not to fit, Nemotron-4 340B fp8 on 128 H100 leaves 5%, and MaxText's 32B on TPU v5e
1-2%). ``predict`` still reports a plan that fits at all as fitting; ``plan --memory-margin 0``
proposes those too."""


@dataclass(frozen=True)
class SearchSpace:
    """What the planner may choose from, besides the fixed model and hardware."""

    num_devices: tuple[int, ...]
    """Device counts to search (each a separate mesh)."""
    devices_per_node: int
    """Devices per node (host): device counts fill whole nodes."""
    seq_len: int
    """Tokens per sequence."""
    global_batches: tuple[int, ...]
    """Acceptable global batches (sequences per optimizer step)."""
    precisions: tuple[str, ...] = ("bf16",)
    """Compute dtypes to try (each must be supported by the device)."""
    checkpointing: tuple[str, ...] = DEFAULT_CHECKPOINTING
    """Activation-checkpointing policies to try (names of :data:`AC_POLICIES`)."""
    max_micro_batch: int = 8
    """Largest micro batch tried (every integer from 1 up to it that divides the local batch)."""
    max_vpp: int = 0
    """Largest number of virtual pipeline stages per rank tried (interleaved 1F1B); 0: up to
    (layers + embedding/loss slots) / pp, or the stack's limit."""
    allow_cross_node_tp: bool = False
    """Let tp span nodes (its traffic then crosses the inter-node network)."""
    zero_stages: tuple[int, ...] = (0, 1, 2)
    """ZeRO stages over the replicated dp group tried when dp > 1."""
    sequence_parallel: tuple[bool, ...] = (False, True)
    """Sequence-parallel settings tried when tp > 1."""
    fixed: tuple[tuple[str, int], ...] = ()
    """``(column, value)`` pairs every plan must have (columns of :data:`FIXABLE`)."""
    compile: bool = False
    """Every plan runs a compiled model (``training.compile``)."""
    async_tp: bool = False
    """Plans with tp > 1 use asynchronous tensor parallelism (``training.async_tp``)."""
    fp8_recipe: str | None = None
    """FP8 scaling recipe of the fp8/fp4 plans (``training.fp8_recipe``)."""
    moe_dispatcher: str | None = None
    """MoE token dispatch kernels of every plan (``training.moe_dispatcher``; None: the stack's)."""
    moe_imbalance: float = 1.0
    """Load of the busiest expert-parallel rank over the mean (``training.moe_imbalance``)."""
    offload_optimizer: bool = False
    """Every plan keeps its optimizer on the host CPU (``training.offload_optimizer``): not
    searched, since the offloaded step costs seconds a device-resident one does not; stated, it
    frees the optimizer states' memory for the plans."""
    stack: str = "generic"
    """Software-stack profile every plan is predicted with (``training.stack``: a name or file);
    its ``[capabilities]`` bound the space (:mod:`trainperf.predict.stack_capabilities`)."""
    release: str = ""
    """The stack's release the plans are for, as a framework name with its version (``"NeMo
    24.09"``, ``"Megatron-Core 0.9"``): what the stack gained in later releases
    (``[capabilities.introduced]``) is not searched. Empty: the current release."""
    pipeline_slots: bool = True
    """Also try Megatron's embedding/loss pipeline slots where the stack has them."""
    uneven_stages: bool = True
    """Also try a lighter last pipeline stage (it runs the LM head and loss too) where the stack
    can set stage sizes (``num_layers_in_last_pipeline_stage``)."""
    require_stack: bool = True
    """With the ``generic`` stack: keep only plans that at least one packaged stack can run."""
    memory_margin: float = DEFAULT_MEMORY_MARGIN
    """Fraction of the device's usable memory a plan must leave free to be proposed
    (:data:`DEFAULT_MEMORY_MARGIN`); 0 proposes every plan the predictor says fits."""

    def memory_limit_GiB(self, capacity_GiB: float) -> float:
        """The most memory per device a proposed plan may need."""
        return capacity_GiB * (1.0 - self.memory_margin)

    def software(self, precision: str, tp: int) -> SoftwareFields:
        """The ``[training]`` software fields of a plan of this ``precision`` and ``tp``."""
        return {"compile": self.compile, "async_tp": self.async_tp and tp > 1,
                "fp8_recipe": self.fp8_recipe if precision in ("fp8", "fp4") else None, "stack": self.stack,
                "moe_dispatcher": self.moe_dispatcher, "moe_imbalance": self.moe_imbalance,
                "offload_optimizer": self.offload_optimizer}

    def __post_init__(self) -> None:
        for name, values, what in (("hardware.num_devices", self.num_devices, "device count"),
                                   ("training.global_batch", self.global_batches, "global batch")):
            if not values:
                raise SpecError(name, "", f"at least one {what}")
            for v in values:
                if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v < 2**31:
                    raise SpecError(name, v, "a positive integer below 2**31")
        if self.seq_len < 1:
            raise SpecError("training.seq_len", self.seq_len, "a positive integer")
        if self.devices_per_node < 1:
            raise SpecError("hardware.devices_per_node", self.devices_per_node, "a positive integer")

        canon = []
        for p in self.checkpointing:
            name = get_policy(p).name if isinstance(p, str) and p.startswith("selective:") else p
            if name not in AC_POLICIES:
                raise SpecError("training.activation_checkpointing", p, f"one of {', '.join(AC_POLICIES)}")
            canon.append(name)
        object.__setattr__(self, "checkpointing", tuple(canon))  # Megatron modules in canonical order
        if self.max_micro_batch < 1:
            raise SpecError("max_micro_batch", self.max_micro_batch, "a positive integer")

        MEMORY_MARGIN.check("memory_margin", self.memory_margin)
        if isinstance(self.max_vpp, bool) or not isinstance(self.max_vpp, int) or self.max_vpp < 0:
            raise SpecError("max_vpp", self.max_vpp, "a positive integer, or 0 for up to layers / pp")
        if self.fp8_recipe is not None:
            from trainperf.specs.workload import FP8_RECIPES

            if self.fp8_recipe not in FP8_RECIPES:
                raise SpecError("training.fp8_recipe", self.fp8_recipe, f"one of {', '.join(FP8_RECIPES)}")
        for key, value in self.fixed:
            if key not in FIXABLE:
                raise SpecError("fix", key, f"one of {', '.join(FIXABLE)}")
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(f"fix.{key}", value, "a non-negative integer")


_GROUPED = ("ac", "precision")
COLUMN_DTYPE = np.int32
"""Column dtype: every value is a small count (devices, batch, degrees); 32 bits halve the
copies the enumeration makes. Products that can exceed 2**31 (tokens) are taken in floats."""


@dataclass
class Candidates:
    """A table of candidate plans: one numpy integer array (:data:`COLUMN_DTYPE`) per column of
    :data:`COLUMNS`.

    ``ac`` indexes :data:`AC_POLICIES`; ``precision`` indexes ``precisions``; ``sp`` is 0/1.

    Stored as a product, since every layout is tried with every (checkpointing, precision)
    pair: ``cols`` holds the layout columns (``B`` rows) and ``groups`` the ``G`` pairs; row
    ``g * B + b`` is layout ``b`` with pair ``g``. ``sel`` picks rows of that product (a ranked
    or filtered table); columns are materialised on first access. With ``groups=None`` the table
    is flat: ``cols`` holds every column, ``ac`` and ``precision`` included.
    """

    cols: dict[str, np.ndarray]
    precisions: tuple[str, ...]
    considered: int = 0
    """Plans enumerated in all (valid + rejected)."""
    rejected: Counter = field(default_factory=Counter)
    """Reason key (see :data:`REASONS`) -> number of plans rejected for it."""
    groups: np.ndarray | None = None
    """``(G, 2)`` int64: the (ac code, precision index) pairs of a product table; None: flat."""
    sel: np.ndarray | None = None
    """Row ids of the product (or flat table) this table holds, in order; None: all of them."""
    _cache: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_layouts(self) -> int:
        """``B``: rows of ``cols``."""
        return int(self.cols["dp"].shape[0])

    def _total(self) -> int:
        return self.n_layouts * (1 if self.groups is None else int(self.groups.shape[0]))

    def __len__(self) -> int:
        return self._total() if self.sel is None else int(self.sel.shape[0])

    def __getitem__(self, name: str) -> np.ndarray:
        hit = self._cache.get(name)
        if hit is not None:
            return hit
        if self.groups is None:
            v = self.cols[name] if self.sel is None else self.cols[name][self.sel]
        else:
            B = self.n_layouts
            rows = np.arange(self._total()) if self.sel is None else self.sel
            if name in _GROUPED:
                v = self.groups[rows // B, _GROUPED.index(name)]
            else:
                v = self.cols[name] if self.sel is None and self.groups.shape[0] == 1 else self.cols[name][rows % B]
        self._cache[name] = v
        return v

    def column_names(self) -> tuple[str, ...]:
        return tuple(self.cols) + (_GROUPED if self.groups is not None else ())

    def take(self, idx: np.ndarray) -> Candidates:
        """The rows ``idx`` (a boolean mask or index array); counts are carried over."""
        rows = np.arange(self._total()) if self.sel is None else self.sel
        return Candidates(self.cols, self.precisions, self.considered, Counter(self.rejected), self.groups,
                          rows[idx])

    def row(self, i: int) -> dict[str, int | str | bool]:
        """Row ``i`` as plain Python values (ac and precision as names)."""
        r: dict[str, int | str | bool] = {k: int(self[k][i]) for k in self.column_names()}
        r["ac"] = AC_POLICIES[int(r["ac"])]
        r["precision"] = self.precisions[int(r["precision"])]
        r["sp"] = bool(r["sp"])
        return r


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in increasing order."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def mesh_count(n: int) -> int:
    """How many ordered ``(dp, fsdp, tp, pp, cp)`` multiply to ``n``: for each prime power p^e of
    ``n``, C(e + 4, 4) ways to spread e over five degrees; counted from the factorisation, before
    any table is built."""
    count, m, p = 1, n, 2
    while p * p <= m:
        e = 0
        while m % p == 0:
            m //= p
            e += 1
        if e:
            count *= math.comb(e + 4, 4)
        p += 1
    return count * (5 if m > 1 else 1)


def _mesh(n: int) -> dict[str, np.ndarray]:
    """Every ``(dp, fsdp, tp, pp, cp)`` whose product is ``n``.

    Built one degree at a time, keeping only partial products that divide ``n``, so the work
    is proportional to the number of valid meshes, not to ``divisors(n) ** 4``.
    """
    _check_rows(mesh_count(n), f"ways {n:,} devices factor into dp x fsdp x tp x pp x cp")
    d = np.asarray(divisors(n), dtype=np.int64)  # partial products reach n**2 before the check
    cols: dict[str, np.ndarray] = {"tp": d.copy()}
    prod = d.copy()
    for name in ("pp", "cp", "fsdp"):
        rows = prod.shape[0]
        nxt = np.repeat(prod, d.size) * np.tile(d, rows)
        keep = n % nxt == 0
        cols = {k: np.repeat(v, d.size)[keep] for k, v in cols.items()}
        cols[name] = np.tile(d, rows)[keep]
        prod = nxt[keep]
    dp = n // prod
    out = {"num_devices": np.full(dp.shape, n), "dp": dp, "fsdp": cols["fsdp"], "tp": cols["tp"],
           "pp": cols["pp"], "cp": cols["cp"]}
    return {k: v.astype(COLUMN_DTYPE) for k, v in out.items()}


MAX_LAYOUT_ROWS = 1_000_000
"""trainperf's bound on the plans one search lays out as rows (~1 s and ~200 MB on one core;
Llama-3.1-405B on 16,384 GPUs needs ~140,000): the count grows with the number of ways a device
count factors into dp x fsdp x tp x pp x cp, so a count with many divisors (1,441,440 has 288)
could otherwise take minutes and gigabytes."""


def _check_rows(rows: int, what: str) -> None:
    if rows > MAX_LAYOUT_ROWS:
        raise SpecError("plan search", f"{rows:,} plans ({what})",
                        f"at most {MAX_LAYOUT_ROWS:,} (trainperf's bound on one search): pin degrees with "
                        "--fix (e.g. tp=8,pp=4), narrow --max-micro-batch or --max-vpp, or search a device "
                        "count with fewer divisors")


def _expand(cols: dict[str, np.ndarray], name: str, values: np.ndarray) -> dict[str, np.ndarray]:
    """Cartesian product of the table with one new column taking ``values``."""
    rows = cols["dp"].shape[0]
    k = values.shape[0]
    _check_rows(rows * k, f"layouts x {name}")
    out = {c: np.repeat(v, k) for c, v in cols.items()}
    out[name] = np.tile(values.astype(COLUMN_DTYPE), rows)
    return out


def _filter(cols: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    return {c: v[keep] for c, v in cols.items()}


class _Counter:
    """Counts rejected plans, each prefix weighted by the plans it would have expanded into."""

    def __init__(self, weight_fn) -> None:
        self.weight_fn = weight_fn
        self.rejected: Counter = Counter()

    def reject(self, cols: dict[str, np.ndarray], stage: int,
               checks: list[tuple[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Apply ``checks`` in order; each row is counted under the first reason it fails."""
        alive = np.ones(cols["dp"].shape[0], dtype=bool)
        weights = self.weight_fn(cols, stage)
        for reason, ok in checks:
            bad = alive & ~ok
            if bad.any():
                self.rejected[reason] += int(weights[bad].sum())
            alive &= ok
        return _filter(cols, alive)


def vpp_slot_pairs(layers: int, pp: int, max_vpp: int, slot_options: tuple[int, ...],
                   lighter_last: int = 0, lighter_first: int = 0) -> np.ndarray:
    """Every ``(vpp, slots)`` a ``pp``-stage pipeline of ``layers`` layers can run, as rows.

    ``vpp = 1`` without slots always runs (an uneven split puts ``ceil(layers / pp)`` on the
    busiest rank); otherwise the ``layers`` plus the slots taken (embedding, loss) must split
    evenly over ``pp * vpp`` chunks, leaving every rank's first and last chunk at least one layer.
    With ``lighter_last`` > 0, also every last stage lighter by ``d <= lighter_last``
    (:func:`lighter_last_options`, coded ``d << SLOT_LIGHTER_SHIFT``); with ``lighter_first`` > 0,
    for plain 1F1B (``vpp = 1``), a first stage lighter by the largest such ``d <= lighter_first``
    (the same arithmetic, coded ``d << SLOT_FIRST_SHIFT``): nearest the split where the first rank
    stops being the memory peak, the one split a lighter first stage is for.
    """
    out = [(1, 0)]
    if pp <= 1:
        return np.asarray(out, dtype=np.int64)
    # a stage one layer lighter is the split Megatron's loss (embedding) slot gives: listed once, as the slot
    loss_slot = any(o & SLOT_LOSS for o in slot_options)
    emb_slot = any(o & SLOT_EMBEDDING for o in slot_options)
    for v in range(1, max_vpp + 1):
        if lighter_last:
            out.extend((v, d << SLOT_LIGHTER_SHIFT) for d in lighter_last_options(layers, pp, v, lighter_last)
                       if not (d == 1 and loss_slot))
        if lighter_first and v == 1:
            # the largest within the bound: nearest the split where rank 0 stops being the peak
            out.extend((v, d << SLOT_FIRST_SHIFT) for d in lighter_last_options(layers, pp, v, lighter_first)[-1:]
                       if not (d == 1 and emb_slot))
        for slots in slot_options:
            if v == 1 and slots == 0:
                continue
            e, lo = slots & SLOT_EMBEDDING, (slots & SLOT_LOSS) >> 1
            total = layers + e + lo
            if total % (pp * v):
                continue
            per_rank = total // pp
            if slots and (per_rank - e < 1 or per_rank - lo < 1):
                continue
            out.append((v, slots))
    return np.asarray(out, dtype=np.int64)


def bidirectional_pairs(schedules: tuple[str, ...], layers: int, pp: int) -> np.ndarray:
    """The ``(vpp, slots, sched)`` rows of DualPipe and DualPipeV a ``pp``-stage pipeline of
    ``layers`` layers can run where the stack lists them (``schedules``): DualPipe with an even pp
    (rank i pairs with rank pp-1-i; DeepSeek-V3 report, arXiv 2412.19437, section 3.2.1), DualPipeV
    with two stages a rank, so at least ``2 * pp`` layers. Neither takes slots or uneven stages."""
    out = []
    if pp > 1 and pp % 2 == 0 and "dualpipe" in schedules:
        out.append((1, 0, SCHED_DUALPIPE))
    if pp > 1 and 2 * pp <= layers and "dualpipev" in schedules:
        out.append((2, 0, SCHED_DUALPIPEV))
    return np.asarray(out, dtype=np.int64).reshape(-1, 3)


def slot_stages(layers: Any, pp: Any, slots: Any) -> tuple[Any, Any, Any, Any]:
    """What a ``slots`` code stands for, as :func:`~trainperf.specs.parallel.stage_layer_split`'s
    ``(emb, loss, first, last)``: Megatron's embedding and loss slots (bits), a last stage ``d``
    layers lighter (``(slots >> 2) & 63``), a first stage ``d`` layers lighter (``slots >> 8``);
    the other ranks hold ``(layers + d) / pp`` layers, and ``first`` / ``last`` are -1 where
    not set. Numbers or numpy arrays (one element per plan)."""
    emb = slots & SLOT_EMBEDDING
    loss = (slots & SLOT_LOSS) >> 1
    d_last = (slots >> SLOT_LIGHTER_SHIFT) & SLOT_LIGHTER_MASK
    d_first = slots >> SLOT_FIRST_SHIFT
    per_rank = (layers + d_last + d_first) // pp
    return (emb, loss, vec.where(d_first > 0, per_rank - d_first, -1),
            vec.where(d_last > 0, per_rank - d_last, -1))


def plan_facts(caps: Any, cols: Mapping[str, np.ndarray]) -> Any:
    """The :class:`~trainperf.predict.stack_capabilities.PlanFacts` of candidate rows: the
    columns the table has so far (``None`` for the others). Experts split like the dense layers
    (``etp = tp``) count as not set apart; a row's schedule is the one its ``sched`` code names
    (:data:`SCHEDULES_BY_CODE`), else the one the stack runs it under
    (:meth:`~trainperf.predict.stack_capabilities.Capabilities.schedule_for`)."""

    def col(name: str) -> Any:
        return cols.get(name)

    vpp, slots, code = col("vpp"), col("slots"), col("sched")
    has = {sched: sched in caps.pipeline_schedules for sched in (caps.schedule_for(1), caps.schedule_for(2))}
    ok = None if vpp is None else np.where(vpp > 1, has[caps.schedule_for(2)], has[caps.schedule_for(1)])
    if ok is not None and code is not None:
        named = np.asarray([False] + [s in caps.pipeline_schedules for s in SCHEDULES_BY_CODE[1:]])
        ok = np.where(code > 0, named[code], ok)
    return PlanFacts(
        dp=col("dp"), fsdp=col("fsdp"), tp=col("tp"), pp=col("pp"), vpp=vpp, cp=col("cp"), ep=col("ep"),
        zero_stage=col("zero"), sp=None if "sp" not in cols else cols["sp"] == 1, etp=col("etp"),
        etp_given=None if "etp" not in cols else cols["etp"] != cols["tp"],
        schedule_ok=ok,
        slots=None if slots is None else (slots & (SLOT_EMBEDDING | SLOT_LOSS)) != 0,
        uneven=None if slots is None else (slots >> SLOT_LIGHTER_SHIFT) != 0)


def stack_allows(caps: Any, cols: Mapping[str, np.ndarray], layers: int, skip: set[int] | None = None) -> np.ndarray:
    """Rows of a candidate table that pass the stack's capability rules whose columns the table
    has (:func:`~trainperf.predict.stack_capabilities.capability_rules`, the rules
    :func:`~trainperf.predict.stack_capabilities.plan_refusal` applies to one plan); ``skip``:
    indices of rules already applied, to which the ones applied here are added."""

    facts = plan_facts(caps, cols)
    n = cols["dp"].shape[0]
    ok = np.ones(n, dtype=bool)
    for i, (reads, passes, _why) in enumerate(capability_rules(caps, layers)):
        if (skip is not None and i in skip) or any(getattr(facts, r) is None for r in reads):
            continue
        ok &= np.broadcast_to(np.asarray(passes(facts), dtype=bool), (n,))
        if skip is not None:
            skip.add(i)
    return ok


def runnable(caps: Any, cols: Mapping[str, np.ndarray], layers: int) -> np.ndarray:
    """Rows of a candidate table that the stack of ``caps``
    (:class:`~trainperf.predict.stack_capabilities.Capabilities`) can run: every capability rule,
    and, with an ``ac`` column, the checkpointing policy (:meth:`Capabilities.allows_policy`)."""
    ok = stack_allows(caps, cols, layers)
    if "ac" in cols:
        allowed = [i for i, p in enumerate(AC_POLICIES) if caps.allows_policy(p)]
        ok &= np.isin(cols["ac"], allowed)
    return ok


def _for_model(model: ModelSpec, policy: str) -> str:
    """``policy`` as it acts on ``model`` (:func:`~trainperf.specs.checkpointing.policy_for_model`)."""

    return policy_for_model(policy, moe=model.is_moe, mla=model.attention == "mla",
                            shared_experts=bool(model.moe_shared_experts), dense_layers=model.dense_layers > 0)


def _distinct_policies(model: ModelSpec, policies: list[str]) -> list[str]:
    """``policies`` less those that do the same to ``model`` as an earlier one (Megatron-Core
    modules the model has no part for), in order."""
    seen: set[str] = set()
    out: list[str] = []
    for p in policies:
        eff = _for_model(model, p)
        if eff not in seen:
            seen.add(eff)
            out.append(p)
    return out


def searched_policies(model: ModelSpec, caps: Any) -> tuple[str, ...]:
    """The checkpointing policies a search tries by default under a stack's capabilities
    ``caps``: every policy of :data:`AC_POLICIES` the stack runs, each distinct one for ``model``
    once; of Megatron-Core's module sets only two: every output-discarding module the model has a
    part for (``layernorm``, and ``moe_act`` / ``mla_up_proj`` where it has MoE / MLA), which
    re-runs memory-bound ops and the up-projections only, and that set's ``moe`` variant. A
    smaller output-discarding set saves less memory for about the same time, and each policy
    tried costs a full evaluation of the layouts (a user may still name any of them)."""

    lean = ({"layernorm"} | ({"moe_act"} if model.is_moe else set())
            | ({"mla_up_proj"} if model.attention == "mla" else set()))
    keep = []
    for p in _distinct_policies(model, [p for p in AC_POLICIES if caps.allows_policy(p)]):
        mods = set(get_policy(_for_model(model, p)).modules)
        if not mods or mods == lean or "moe" in mods:
            keep.append(p)
    return tuple(keep)


def enumerate_candidates(model: ModelSpec, hardware: Hardware, space: SearchSpace) -> Candidates:
    """All plans of ``space`` for ``model`` that the stack can execute, with rejection counts.

    Checks here are the ones :class:`~trainperf.specs.workload.Workload` makes (tp divides
    heads / kv heads or is a multiple of them / ffn_hidden, pp <= layers, cp divides the
    sequence, ep divides the experts and the data-parallel ranks, the micro batch divides the
    local batch), the stack's (:func:`stack_allows`: which degrees it has, its ZeRO stages,
    sequence parallelism, schedules, vpp limit, pipeline slots, checkpointing), and the planner's
    own: tp within a scale-up domain unless allowed, and an interleaved schedule only when the
    layers (plus Megatron's embedding/loss slots) split evenly into pp*vpp chunks and the
    micro-batches per step are a multiple of pp (Megatron-LM's requirement for its interleaved
    1F1B schedule); DualPipe and DualPipeV where the stack lists them, with at least 2*pp
    micro-batches per step. Plain 1F1B may split the layers unevenly, as Workload allows. Memory
    is checked later, by the evaluator.

    ``--fix`` values are applied first at each stage, so every other rejection is counted among
    plans that have the fixed values (what :func:`trainperf.plan.feasibility.fixed_refusal` reads).
    """
    return _Enumeration(model, hardware, space).table()


class _Enumeration:
    """One search space laid out stage by stage: 0 mesh, 1 global batch, 2 micro batch, 3 vpp
    and slots, 4 ep and etp, 5 sp, 6 ZeRO stage, 7 checkpointing and precision (the product
    groups). Every stage expands the table by its options, then rejects rows by named reasons,
    each weighted by the plans it would have expanded into."""

    def __init__(self, model: ModelSpec, hardware: Hardware, space: SearchSpace) -> None:
        self.model, self.space = model, space
        self.caps = caps = capabilities_of(space.stack).as_of(space.release)
        self.fixed = dict(space.fixed)
        self.n_prec = len(space.precisions)
        policies = _distinct_policies(model, [p for p in space.checkpointing if caps.allows_policy(p)])
        self.ac_codes = np.asarray([AC_POLICIES.index(p) for p in policies], dtype=np.int64)
        self.n_ac_all = len(space.checkpointing)
        self.ep_opts = np.asarray(divisors(model.moe_experts) if model.is_moe else [1], dtype=COLUMN_DTYPE)
        # experts split like the dense layers (etp = tp), and, where the stack folds its MoE grid,
        # not split at all (etp = 1): only for a MoE model whose expert FFN etp = tp could not split
        self.etp_one = model.is_moe and "1" in caps.expert_tp
        self.gbs_opts = np.asarray(sorted(set(space.global_batches)), dtype=COLUMN_DTYPE)
        self.mbs_opts = np.arange(1, space.max_micro_batch + 1, dtype=COLUMN_DTYPE)
        self.sp_opts = np.asarray(sorted({int(x) for x in space.sequence_parallel}) or [0], dtype=COLUMN_DTYPE)
        self.zero_opts = np.asarray(sorted(set(space.zero_stages)) or [0], dtype=COLUMN_DTYPE)
        self.slot_opts = (0, 1, 2, 3) if (caps.pipeline_slots and space.pipeline_slots) else (0,)
        self.uneven = caps.uneven_stages and space.uneven_stages
        self.lighter = head_layers_bound(model) if self.uneven else 0
        self.domain = hardware.scale_up_domain or space.devices_per_node  # as layout_of prices it
        self.pair_cache: dict[int, np.ndarray] = {}
        self.counter = _Counter(self.weight)

    # -------------------------------------------------------------------------- options
    def vmax_of(self, pp: int) -> int:
        vmax = self.caps.vpp_limit(self.model.layers, pp) if self.caps.runs_vpp() else 1
        return min(vmax, self.space.max_vpp) if self.space.max_vpp else vmax

    def pairs(self, pp: int) -> np.ndarray:
        """The (vpp, slots, sched) options of a ``pp``-stage pipeline: the stack's default
        schedules' (:func:`vpp_slot_pairs`) and DualPipe's and DualPipeV's where it lists them
        (:func:`bidirectional_pairs`)."""
        if pp not in self.pair_cache:
            L = self.model.layers
            pairs = vpp_slot_pairs(L, pp, self.vmax_of(pp), self.slot_opts, self.lighter,
                                   first_layers_bound(L, pp) if self.uneven else 0)
            default = np.column_stack([pairs, np.zeros(pairs.shape[0], dtype=np.int64)])
            self.pair_cache[pp] = np.concatenate([default, bidirectional_pairs(self.caps.pipeline_schedules, L, pp)])
        return self.pair_cache[pp]

    def n_vpp_options(self, pp: int) -> int:
        if pp <= 1:
            return 1
        # the lighter first/last and bidirectional options are generated valid: they count only as what they are
        t = self.pairs(pp)
        n_extra = int(((t[:, 1] >> SLOT_LIGHTER_SHIFT > 0) | (t[:, 2] > 0)).sum())
        return self.vmax_of(pp) * len(self.slot_opts) + n_extra

    def n_options(self, cols: dict[str, np.ndarray], stage: int) -> np.ndarray:
        """Options each row has at ``stage``."""
        tp, pp, dp = cols["tp"], cols["pp"], cols["dp"]
        one = np.ones_like(tp)
        if stage == 1:
            return one * len(self.gbs_opts)
        if stage == 2:
            return one * len(self.mbs_opts)
        if stage == 3:
            uniq, inv = np.unique(pp, return_inverse=True)
            return np.asarray([self.n_vpp_options(int(u)) for u in uniq], dtype=np.int64)[inv]
        if stage == 4:
            return one * len(self.ep_opts) * np.where(tp > 1, 2 if self.etp_one else 1, 1)
        if stage == 5:
            return np.where(tp > 1, len(self.sp_opts), 1)
        if stage == 6:
            return np.where(dp > 1, len(self.zero_opts), 1)
        return one * (self.n_ac_all * self.n_prec)

    def weight(self, cols: dict[str, np.ndarray], stage: int) -> np.ndarray:
        """Plans each row of ``stage`` stands for (the product of the later stages' options)."""
        w = np.ones(cols["dp"].shape[0], dtype=np.int64)
        for st in range(stage + 1, 8):
            w = w * self.n_options(cols, st)
        return w

    def fix(self, cols: dict[str, np.ndarray], *names: str) -> tuple[str, np.ndarray]:
        """Rows with the values ``--fix`` pins for ``names``."""
        ok = np.ones(cols["dp"].shape[0], dtype=bool)
        for name in names:
            if name in self.fixed:
                ok &= cols[name] == self.fixed[name]
        return ("fixed", ok)

    def stack(self, cols: dict[str, np.ndarray], applied: set[int]) -> tuple[str, np.ndarray]:
        """Rows that pass the stack's rules their columns allow checking now."""
        return ("stack", stack_allows(self.caps, cols, self.model.layers, applied))

    # --------------------------------------------------------------------------- stages
    def mesh(self, n: int, applied: set[int]) -> dict[str, np.ndarray]:
        """Stage 0: every (dp, fsdp, tp, pp, cp) of ``n`` devices the model and stack allow."""
        m, c = self.model, _mesh(n)
        tp, pp, cp = c["tp"], c["pp"], c["cp"]
        kv = m.kv_heads or m.heads
        return self.counter.reject(c, 0, [
            self.fix(c, "dp", "fsdp", "tp", "pp", "cp"), self.stack(c, applied),
            ("tp_cross_node", (tp <= self.domain) | self.space.allow_cross_node_tp),
            ("tp_heads", m.heads % tp == 0), ("tp_kv_heads", (kv % tp == 0) | (tp % kv == 0)),
            ("tp_ffn", m.ffn_hidden % tp == 0), ("pp_layers", pp <= m.layers),
            ("tp_mamba_groups", (not m.mamba_layers) | (m.mamba_groups % tp == 0)),
            ("cp_seq", self.space.seq_len % cp == 0)])

    def batches(self, c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Stages 1 and 2: global batches the data-parallel degree divides, micro batches that
        divide the local batch."""
        c = _expand(c, "global_batch", self.gbs_opts)
        c = self.counter.reject(c, 1, [("batch_dp", c["global_batch"] % (c["dp"] * c["fsdp"]) == 0)])
        c = _expand(c, "micro_batch", self.mbs_opts)
        local = c["global_batch"] // (c["dp"] * c["fsdp"])
        return self.counter.reject(c, 2, [self.fix(c, "micro_batch"),
                                          ("mbs_local", local % c["micro_batch"] == 0)])

    def pipeline(self, c: dict[str, np.ndarray], applied: set[int]) -> dict[str, np.ndarray]:
        """Stage 3: the (vpp, slots, sched) options each pp can run; interleaving needs the
        micro-batches per step to be a multiple of pp, DualPipe and DualPipeV at least ``2 * pp``
        of them (DualPipe's ``num_chunks >= num_ranks * 2``)."""
        c = self.expand_vpp(c)
        accum = c["global_batch"] // (c["dp"] * c["fsdp"] * c["micro_batch"])
        default = c["sched"] == 0
        return self.counter.reject(c, 3, [
            self.fix(c, "vpp", "slots"), self.stack(c, applied),
            ("vpp_microbatches", (c["vpp"] == 1) | ~default | (accum % c["pp"] == 0)),
            ("dualpipe_microbatches", default | (accum >= 2 * c["pp"]))])

    def experts(self, c: dict[str, np.ndarray], applied: set[int]) -> dict[str, np.ndarray]:
        """Stage 4: expert parallelism over the ranks the experts fold over (ep x etp covers
        tp x cp x dp x fsdp), experts split like the dense layers or, where the stack folds, not."""
        m = self.model
        c = _expand(c, "ep", self.ep_opts)
        c["etp"] = c["tp"].copy()
        if self.etp_one:  # a second copy of every tp > 1 row with unsplit experts
            alt = {k: v[c["tp"] > 1] for k, v in c.items()}
            alt["etp"] = np.ones_like(alt["tp"])
            c = {k: np.concatenate([c[k], alt[k]]) for k in c}
        grid = np.where(c["etp"] == c["tp"], 1, c["tp"])
        return self.counter.reject(c, 4, [
            self.fix(c, "ep", "etp"),
            ("fixed", np.full(c["ep"].shape, m.is_moe or "etp" not in self.fixed)),  # etp of a dense model
            self.stack(c, applied),
            ("ep_ranks", (c["dp"] * c["fsdp"] * c["cp"] * grid) % c["ep"] == 0),
            ("etp_ffn", (not m.is_moe) | ((m.moe_expert_ffn or 1) % c["etp"] == 0))])

    def sequence_and_zero(self, c: dict[str, np.ndarray], applied: set[int], layout_base: int) -> dict[str, np.ndarray]:
        """Stages 5 and 6: sequence parallelism where tp > 1, ZeRO stages where dp > 1; the
        ``layout`` column numbers the rows before the ZeRO stages are expanded."""
        c = _expand(c, "sp", self.sp_opts)
        c = _filter(c, (c["tp"] > 1) | (c["sp"] == self.sp_opts[0]))
        c["sp"] = np.where(c["tp"] > 1, c["sp"], 0)
        c = self.counter.reject(c, 5, [self.fix(c, "sp"), self.stack(c, applied)])
        c["layout"] = layout_base + np.arange(c["dp"].shape[0], dtype=COLUMN_DTYPE)
        c = _expand(c, "zero", self.zero_opts)
        c = _filter(c, (c["dp"] > 1) | (c["zero"] == self.zero_opts[0]))
        c["zero"] = np.where(c["dp"] > 1, c["zero"], 0)
        return self.counter.reject(c, 6, [self.fix(c, "zero"), self.stack(c, applied)])

    def layouts(self, n: int, layout_base: int) -> dict[str, np.ndarray]:
        """Every layout of ``n`` devices (stages 0 to 6)."""
        applied: set[int] = set()
        c = self.batches(self.mesh(n, applied))
        c = self.experts(self.pipeline(c, applied), applied)
        c = self.sequence_and_zero(c, applied, layout_base)
        if len(self.ac_codes) < self.n_ac_all:  # policies the stack does not have
            self.counter.rejected["stack"] += int(c["dp"].shape[0]) * (self.n_ac_all - len(self.ac_codes)) * self.n_prec
        return c

    def expand_vpp(self, c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Expand every row by the ``(vpp, slots, sched)`` options its pp can run; the ones it cannot
        are counted as ``vpp_layers`` (weighted by the plans each would have expanded into)."""
        pp = c["pp"]
        uniq, inv = np.unique(pp, return_inverse=True)
        tables = [self.pairs(int(u)) for u in uniq]
        cnt_u = np.asarray([t.shape[0] for t in tables], dtype=np.int64)
        opts_u = np.asarray([self.n_vpp_options(int(u)) for u in uniq], dtype=np.int64)
        cnt = cnt_u[inv]
        if cnt.size:
            later = self.weight(c, 3)  # plans one (vpp, slots) option expands into
            bad = (opts_u[inv] - cnt) * later
            if bad.sum():
                self.counter.rejected["vpp_layers"] += int(bad.sum())
        _check_rows(int(cnt.sum()), "layouts x virtual pipeline stages")
        flat = np.concatenate(tables) if tables else np.zeros((0, 3), dtype=np.int64)
        start_u = np.concatenate([[0], np.cumsum(cnt_u)[:-1]]).astype(np.int64)
        rows = np.repeat(np.arange(pp.shape[0]), cnt)
        offset = np.arange(rows.shape[0]) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        sel = start_u[inv][rows] + offset
        out = {k: v[rows] for k, v in c.items()}
        out["vpp"] = flat[sel, 0].astype(COLUMN_DTYPE)
        out["slots"] = flat[sel, 1].astype(COLUMN_DTYPE)
        out["sched"] = flat[sel, 2].astype(COLUMN_DTYPE)
        return out

    # ---------------------------------------------------------------------------- table
    def table(self) -> Candidates:
        """The candidates of every device count, as a product with the (policy, precision)
        groups; with the ``generic`` stack, only the plans some packaged stack runs."""
        parts, base = [], 0
        for n in sorted(set(self.space.num_devices)):
            parts.append(self.layouts(n, base))
            base += parts[-1]["dp"].shape[0]
        cols = {k: np.concatenate([p[k] for p in parts]) for k in COLUMNS if k not in _GROUPED}
        groups = np.asarray([(a, p) for a in self.ac_codes for p in range(self.n_prec)], dtype=np.int64).reshape(-1, 2)
        rejected = self.counter.rejected
        if self.caps.stack == "generic" and self.space.stack == "generic" and self.space.require_stack:
            keep = self._some_stack_runs(cols, groups)
            rejected["no_stack"] += int((~keep).sum())
            return Candidates(cols, tuple(self.space.precisions), int(keep.sum()) + sum(rejected.values()),
                              rejected, groups, None if keep.all() else np.flatnonzero(keep))
        valid = int(cols["dp"].shape[0]) * int(groups.shape[0])
        return Candidates(cols, tuple(self.space.precisions), valid + sum(rejected.values()), rejected, groups)

    def _some_stack_runs(self, cols: dict[str, np.ndarray], groups: np.ndarray) -> np.ndarray:
        """Rows of the product table (group-major) that at least one packaged stack can run."""

        others = packaged_capabilities()
        layout_ok = [runnable(other, cols, self.model.layers) for other in others]
        keep_by_group = []
        for a, _p in groups:
            keep = np.zeros(cols["dp"].shape[0], dtype=bool)
            for other, ok in zip(others, layout_ok, strict=True):
                if other.allows_policy(AC_POLICIES[int(a)]):
                    keep |= ok
            keep_by_group.append(keep)
        return np.concatenate(keep_by_group) if keep_by_group else np.zeros(0, dtype=bool)
