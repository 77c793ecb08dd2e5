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
* the model through :mod:`trainperf.predict.runs_model`, the parallel plan and batches through
  :mod:`trainperf.predict.runs_plan`, the activation-checkpointing cell through
  :mod:`trainperf.predict.runs_policy` (what they share with this module:
  :mod:`trainperf.predict.runs_rows`);
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
    read_framework,
    read_global_batch,
    read_number,
    read_precision,
    read_rate,
    read_seconds,
)
from trainperf.predict.runs_devices import read_num_devices
from trainperf.predict.runs_model import read_model
from trainperf.predict.runs_plan import read_batches, read_plan, sharded_to_fit, sharding_unstated
from trainperf.predict.runs_policy import read_policy
from trainperf.predict.runs_rows import RowSkip, row_cell, row_count, row_default
from trainperf.predict.stack_capabilities import apply_stack
from trainperf.predict.step import check_plan
from trainperf.specs.datafiles import read_user_text
from trainperf.specs.hardware import get_hardware
from trainperf.specs.model import ModelSpec

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
"""Assumption-note prefixes (written by :func:`row_default` and :func:`read_plan`) -> the plan field left
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


# -------------------------------------------------------------------------------- the mapping
def _flops_per_step(r: Mapping[str, str], w: Any, d: Any, notes: list[str]) -> tuple[float, str]:
    """FLOPs per step under the convention the row's TFLOP/s figure used (else the stack's)."""

    basis = row_cell(r, "mfu_basis").lower() + " " + row_cell(r, "framework").lower()
    m = w.model
    B, s, L, h, V = w.global_batch, w.seq_len, m.layers, m.hidden, m.vocab
    if "recomputation" in basis or "megatron-lm (20" in basis:
        # Narayanan et al. 2021 (SC21), eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh), with recompute
        f = 96.0 * B * s * L * h * h * (1 + s / (6.0 * h) + V / (16.0 * L * h))
        return f, "Megatron-LM SC21 eq. 3 (includes recomputation)"
    if "maxtext" in basis:
        return B * s * model_flops_per_token(m, s, "palm"), "palm convention (MaxText: 6N + non-causal attention)"
    conv = row_default(d, "tflops_convention", "TFLOP/s FLOP count", notes)
    if re.search(r"\bhfu\b|hardware[ _-]?(?:tera)?flop", row_cell(r, "tflops_per_gpu").lower()):
        # the cell counts what the devices computed: the recomputation too (HFU's numerator)
        chunks = w.plan.pp * w.plan.vpp
        per_token = hardware_flops_per_token(m, s, w.activation_checkpointing, conv, pipeline_chunks=chunks)
        return B * s * per_token, f"{conv} convention with recomputation (the cell counts hardware FLOPs)"
    return B * s * model_flops_per_token(m, s, conv), f"{conv} convention (stack default)"


def _devices_per_node(r: Mapping[str, str], n: int, hw: Any, notes: list[str]) -> int:
    """Devices per node: the cell, else the catalog's typical node. Several nodes must hold the
    same count, so a node size that does not divide the devices (72 of an NVL72 rack for 128
    GPUs) becomes their greatest common divisor, noted."""
    dpn = row_count(r, "gpus_per_node")
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

    cell = row_cell(r, "interconnect")
    link = read_interconnect(cell, dpn) if n > dpn else None
    if link is None or abs(link / hw.inter_node_link_GB_per_s - 1.0) <= 0.01:
        return {}
    notes.append(f"inter-node link from the interconnect cell {cell[:60]!r}: {link:g} GB/s per device per "
                 f"direction (the catalog's {hw.id}: {hw.inter_node_link_GB_per_s:g})")
    return {"inter_node_link_GB_per_s": link,
            "sources": {"inter_node_link_GB_per_s": f"the runs table's interconnect cell {cell[:80]!r}"}}


_FLOP_UNIT = re.compile(r"(peta|tera|giga|[pgt])\s*-?flop", re.IGNORECASE)
"""The prefix of a FLOP/s unit in a TFLOP/s cell ("0.41 PFLOP/s" is 410 TFLOP/s)."""
_SEQUENCES = re.compile(r"^\s*[~≈]?\s*[\d.,]+\s*[kKmM]?\s*(?:seq(?:uence)?s?|samples?)\b", re.IGNORECASE)
"""A rate whose first number counts sequences ("120 seq/s", "19.6 samples/sec"), not tokens."""


def _times(r: Mapping[str, str], notes: list[str]) -> tuple[float | None, float | None, float | None]:
    """(step seconds, global tokens/s, TFLOP/s per device) as published; rates per device are
    multiplied by the device count later."""
    try:
        step, note = read_seconds(row_cell(r, "step_time_s"))
        if note:
            notes.append(note)
        tps, per_device = read_rate(row_cell(r, "tokens_per_s_global"))
        tps_dev = None
        if per_device:
            tps, tps_dev = None, tps
        elif tps is None and "tokens_per_s_per_gpu" in r:
            tps_dev, _ = read_rate(row_cell(r, "tokens_per_s_per_gpu"))
        tflops = read_number(row_cell(r, "tflops_per_gpu"))
    except CellError as e:
        raise RowSkip("cell", f"time: {e}") from None
    # the step and tokens/s readers refuse what is not positive; a step that overflows to 0 or inf
    # is refused once the step is known (_mapped)
    if tflops is not None and not (math.isfinite(tflops) and tflops > 0):
        raise RowSkip("cell", f"time: tflops_per_gpu {row_cell(r, 'tflops_per_gpu')[:30]!r} is not a positive finite "
                              "figure")
    unit = _FLOP_UNIT.search(row_cell(r, "tflops_per_gpu"))
    if tflops is not None and unit and unit.group(1).lower()[0] in "pg":
        scale = 1e3 if unit.group(1).lower()[0] == "p" else 1e-3
        notes.append(f"tflops_per_gpu {row_cell(r, 'tflops_per_gpu')[:30]!r}: {unit.group(0)} read as {tflops * scale:g} "
                     "TFLOP/s")
        tflops *= scale
    if tps is None and tps_dev is not None:
        return step, -tps_dev, tflops  # negative: per device, scaled once the device count is known
    return step, tps, tflops


def _essentials(r: Mapping[str, str]) -> bool:
    """Whether the row states model shape (layers, hidden), a batch, devices and a time."""
    def has(col: str, reader: Any = read_number) -> bool:
        try:
            v = reader(row_cell(r, col))
        except CellError:
            return True  # a range still states the value
        return (v[0] if isinstance(v, tuple) else v) is not None

    shape = has("layers") and has("hidden")
    batch = has("global_batch_seqs") or has("micro_batch")
    best_case = row_cell(r, "tflops_per_gpu").lower().startswith("up to")  # a bound, not this run's figure
    time = (has("step_time_s", read_seconds) or has("tokens_per_s_global", read_rate)
            or has("tokens_per_s_per_gpu", read_rate) or (has("tflops_per_gpu") and not best_case)
            or has("mfu_pct"))
    return shape and batch and has("num_gpus") and time


def _row(r: Mapping[str, str]) -> TableRun:
    """One row of a runs table: its workload and step time, or why it is excluded."""
    from trainperf.predict.stack_defaults import stack_defaults
    from trainperf.specs.device_names import read_device

    stack = read_framework(r.get("framework"))
    reading = read_device(row_cell(r, "hardware"))
    try:
        prec, prec_error = read_precision(row_cell(r, "precision")), ""
    except CellError as e:
        prec, prec_error = None, str(e)
    base: dict[str, Any] = {
        "row_id": row_cell(r, "row_id"), "table_id": row_cell(r, "table_id"),
        "source": f"{row_cell(r, 'source')} ({row_cell(r, 'source_table')})",
        "framework": row_cell(r, "framework"), "stack": stack,
        "model": row_cell(r, "model"), "hardware": row_cell(r, "hardware"),
        "precision": prec.precision if prec else row_cell(r, "precision"),
        "claimed_mfu_pct": _claimed_mfu(r), "mfu_basis": row_cell(r, "mfu_basis"), "cells": dict(r),
        "device_id": reading.device_id, "hardware_read": reading.how, "states_essentials": _essentials(r),
    }
    notes: list[str] = []
    try:
        _no_decimal_comma(r)
        if prec_error:
            _figures(r, reading, notes)  # a row that states no time says so before its precision
            raise RowSkip("precision", prec_error)
        w, step, src = _mapped(r, stack, stack_defaults(stack, row_cell(r, "framework")), reading, prec, notes)
        return TableRun(**base, workload=w, step_time_s=float(step), step_time_from=src, assumptions=tuple(notes))
    except RowSkip as e:
        return TableRun(**base, exclude_reason=str(e), exclude_kind=e.kind, assumptions=tuple(notes))
    except TrainperfError as e:  # a value no rule above bounds: this row is unread, the table is not
        return TableRun(**base, exclude_reason=f"a cell does not validate: {e}", exclude_kind="cell",
                        assumptions=tuple(notes))


def _figures(r: Mapping[str, str], reading: Any, notes: list[str]) -> tuple[Any, ...]:
    """(step time, tokens/s, TFLOP/s, devices, global batch, sequence) as the row states them;
    raises :class:`RowSkip` for a row that cannot be predicted (no time, devices, batch, device)."""
    step, tps, tflops = _times(r, notes)
    if row_cell(r, "tflops_per_gpu").lower().startswith("up to") and step is None and tps is None:
        raise RowSkip("time", "only a best-case 'up to' TFLOP/s figure published; no step time or tokens/s")
    if step is None and tps is None and tflops is None and not _claimed_mfu(r):
        raise RowSkip("time", "no step time, tokens/s, TFLOP/s or MFU published")
    n = read_num_devices(r, notes, reading)
    if not n:
        raise RowSkip("devices", "device count not stated for this figure")
    if tps is not None and tps < 0:
        tps = -tps * n
        if step is None:
            notes.append(f"tokens/s given per device: x {n} devices")
    seq = row_count(r, "seq_len")
    try:
        gbs, gbs_note = read_global_batch(row_cell(r, "global_batch_seqs"), seq)
    except CellError as e:
        raise RowSkip("batch", f"global_batch_seqs: {e}") from None
    if gbs is not None and gbs < 1:
        raise RowSkip("batch", f"global_batch_seqs: {row_cell(r, 'global_batch_seqs')[:40]!r} is not a positive batch")
    if gbs_note:
        notes.append(gbs_note)
    if not seq:
        raise RowSkip("batch", "sequence length or global batch not stated")
    said = [c for c in ("tokens_per_s_global", "tokens_per_s_per_gpu") if _SEQUENCES.match(row_cell(r, c))]
    if tps is not None and said:
        notes.append(f"{said[0]} {row_cell(r, said[0])[:30]!r} counts sequences: x {seq} tokens each")
        tps *= seq
    if not reading.resolved:
        raise RowSkip("hardware", f"hardware {row_cell(r, 'hardware')[:80]!r}: {reading.how}")
    return step, tps, tflops, n, gbs, seq


def _mapped(r: Mapping[str, str], stack: str, d: Any, reading: Any, prec: Any,
            notes: list[str]) -> tuple[Any, float, str]:
    """(workload, step seconds, where the step time came from) of a row that can be predicted."""
    from trainperf.specs.workload_file import workload_from_dict

    step, tps, tflops, n, gbs, seq = _figures(r, reading, notes)
    hw = get_hardware(reading.device_id)
    if prec is None:
        from trainperf.predict.runs_cells import Precision

        prec = Precision(row_default(d, "precision", f"precision ({row_cell(r, 'precision')[:30]!r})", notes))
    if prec.note:
        notes.append(prec.note)
    if step is None and tps is None and tflops is None:
        mfu = _claimed_mfu(r, notes) or 0.0
        if not 0.0 < mfu <= 100.0:
            raise RowSkip("cell", f"mfu_pct {row_cell(r, 'mfu_pct')[:30]!r} is not a percentage above 0 and at most 100")
        tflops = tflops_from_mfu(mfu, row_cell(r, "mfu_basis"), hw, prec.precision, notes)
    model = read_model(r, notes)
    dpn = _devices_per_node(r, n, hw, notes)
    plan = read_plan(r, n, dpn, d, notes, int(model["layers"]))
    gbs, mb, corrected = read_batches(r, gbs, row_cell(r, "global_batch_seqs"), plan, n, d, notes)
    policy = read_policy(row_cell(r, "act_ckpt"), stack, d, prec.precision, ModelSpec(**model).total_params / 1e9, notes)
    training = _training(r, stack, d, prec, plan["tp"], notes)
    training.update(seq_len=seq, global_batch=gbs, micro_batch=mb, activation_checkpointing=policy,
                    **_capacity_factor(r, model, notes))
    hw_cfg: dict[str, Any] = {"device": reading.device_id, "num_devices": n, "devices_per_node": dpn,
                              **_network(r, hw, n, dpn, notes)}
    try:
        w = workload_from_dict({"model": model, "hardware": hw_cfg, "parallel": plan, "training": training})
    except TrainperfError as e:
        raise RowSkip("plan", f"workload does not validate: {e}") from None
    w = dataclasses.replace(w, stack=stack)
    stated = len(w.notes)
    w = apply_stack(w)  # what ``predict`` makes explicit, so that a row is priced as predict prices it
    notes.extend(w.notes[stated:])
    try:
        check_plan(w)
    except TrainperfError as e:
        raise RowSkip("plan", f"plan does not validate: {e}") from None
    if sharding_unstated(r):
        w = sharded_to_fit(w, notes)
    step_s, src = _step_seconds(r, w, d, step, tps, tflops, n, corrected, notes)
    if not (math.isfinite(step_s) and step_s > 0):
        raise RowSkip("cell", f"time: the published figures give a step of {step_s:g} s ({src}), not a positive finite time")
    return w, step_s, src


def _step_seconds(r: Mapping[str, str], w: Any, d: Any, step: float | None, tps: float | None,
                  tflops: float | None, n: int, corrected: bool, notes: list[str]) -> tuple[float, str]:
    """(step seconds, where from): the published step time, else the tokens per step over the
    tokens/s, else the FLOPs per step (under the row's convention) over the TFLOP/s."""
    step_cell = row_cell(r, "step_time_s")
    if step is not None and not (corrected and tps is not None and "derived" in step_cell):
        return step, "step_time_s" + (" (derived)" if "derived" in step_cell else "")
    if tps is not None:
        return w.tokens_per_step / tps, f"tokens_per_s_global={tps:g}"
    assert tflops is not None  # the row was skipped when it states no time at all
    flops, how = _flops_per_step(r, w, d, notes)
    return flops / (float(tflops) * 1e12 * n), f"tflops_per_gpu={tflops:g} under {how}"


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


_COMPILED = re.compile(r"torch\.compile|\binductor\b|\bcompiled\b")
_COMPILE_WORD = re.compile(r"(?:torch\.)?compile|inductor")
_NOT_BEFORE = re.compile(r"(?:\bno|\bnot|\bwithout|w/o|\bun|\bnon)[\s-]*$")
_OFF_AFTER = re.compile(r"^\s*(?:[:=]\s*)?(?:off|false|disabled|no)\b")


def said_compiled(text: str, bare: bool = False) -> bool:
    """Whether free text says the run was compiled: "torch.compile", "inductor" or "compiled"
    (with ``bare``, as in a framework cell, any "compile"), not negated ("no torch.compile",
    "uncompiled", "torch.compile: off")."""
    low = text.lower()
    return any(not _NOT_BEFORE.search(low[max(0, m.start() - 12):m.start()]) and not _OFF_AFTER.match(low[m.end():])
               for m in (_COMPILE_WORD if bare else _COMPILED).finditer(low))


def _training(r: Mapping[str, str], stack: str, d: Any, prec: Any, tp: int, notes: list[str]) -> dict[str, Any]:
    """The ``[training]`` software fields of a row: precision, compilation, async TP, fp8 recipe
    (what the framework cell says, else the stack's defaults, each noted), an optimizer
    offloaded to the host where the sharding, framework or notes cell says so."""
    precision = prec.precision
    training: dict[str, Any] = {"precision": precision}
    fw = row_cell(r, "framework").lower()
    if said_compiled(fw, bare=True):
        training["compile"] = True
    elif said_compiled(row_cell(r, "notes")):
        training["compile"] = True
        notes.append("compiled: the notes say so")
    elif d.get("compile").value:  # generic's [defaults] states every true/false key
        training["compile"] = row_default(d, "compile", "compilation", notes)
    if tp > 1 and any("asynctp" in re.sub(r"[\s_-]", "", row_cell(r, c).lower()) for c in ("framework", "sp", "tp")):
        training["async_tp"] = True  # "async TP" in the framework, sequence-parallel or tp cell
    elif tp > 1 and d.get("async_tp").value:
        training["async_tp"] = row_default(d, "async_tp", "async tensor parallelism", notes)
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
        training["fp8_recipe"] = row_default(d, "fp8_recipe", "fp8 recipe", notes)
    said = read_offload(row_cell(r, "fsdp_zero"), fw, row_cell(r, "notes"))
    if said:
        training["offload_optimizer"] = True
        notes.append(f"optimizer offloaded to the host CPU (read from {said!r})")
    return training


_CAPACITY = re.compile(r"(?:capacity[ _-]?factor|\bcf)\s*(?:[=:]|of)?\s*(\d+(?:\.\d+)?)")


def _capacity_factor(r: Mapping[str, str], model: Mapping[str, Any], notes: list[str]) -> dict[str, float]:
    """An MoE row's stated expert capacity factor ("capacity factor 1.25", "CF=1") as the
    expert load of the busiest rank over the mean (``moe_imbalance``): tokens beyond an expert's
    capacity are dropped and, where the stack pads, every expert computes its full capacity, so
    the busiest expert computes at most (padded: exactly) the factor times the mean; noted."""
    if not model.get("moe_experts"):
        return {}
    text = " ".join(row_cell(r, c) for c in ("arch_type", "moe_experts", "notes", "framework")).lower()
    m = _CAPACITY.search(text)
    if not m or not 1.0 <= float(m.group(1)) <= 16.0:
        return {}
    notes.append(f"expert capacity factor {m.group(1)} (read from {m.group(0)!r}) taken as the busiest expert's "
                 "load over the mean: at most that with token dropping, exactly that where experts are padded")
    return {"moe_imbalance": float(m.group(1))}


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
        raise RowSkip("time", f"only an MFU published, and no {precision} peak of {hw.id} to read it against")
    notes.append(f"only an MFU published: {mfu_pct:g}% of {where} = {mfu_pct * peak / 100:.4g} TFLOP/s per device, "
                 "under the FLOP count the stack reports")
    return mfu_pct * peak / 100.0


def _claimed_mfu(r: Mapping[str, str], notes: list[str] | None = None) -> float | None:
    """The ``mfu_pct`` cell in percent; a value of at most 1 without a % sign is a fraction
    ("0.40" is 40%, noted in ``notes``): no training run publishes an MFU below 1%."""
    cell = row_cell(r, "mfu_pct")
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
    case-insensitively and with surrounding spaces ignored; the delimiter is the header's: a comma,
    or a semicolon or tab where a spreadsheet exported with one (:func:`_delimiter`)."""
    text = text.lstrip("\ufeff")
    reader = csv.DictReader(io.StringIO(text), delimiter=_delimiter(text))
    fields = reader.fieldnames or []
    rename = {f: f.strip().lower() for f in fields if f is not None}
    missing = [c for c in REQUIRED_COLUMNS if c not in rename.values()]
    if missing:
        raise InputFileError(f"runs file {where!r}: missing column(s) {', '.join(missing)}")
    rows = [{rename[k]: (v or "") for k, v in r.items() if k is not None} for r in reader]
    rows = [r for r in rows if any(v.strip() for v in r.values())]  # blank lines are not rows
    return tuple(_row(r) for r in rows)


_NUMBER_COLUMNS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "global_batch_seqs",
                   "micro_batch", "num_gpus", "step_time_s", "tokens_per_s_global", "tflops_per_gpu", "mfu_pct")
_COMMA_NUMBER = re.compile(r"^\s*\d+((?:,\d+)+)")


def _no_decimal_comma(r: Mapping[str, str]) -> None:
    """A spreadsheet whose locale writes "24,03" for 24.03 (its export separated by semicolons,
    or by commas with the cell quoted): a number whose comma is not followed by groups of three
    digits (a thousands separator, "524,288") leaves the row unread, naming the cell, rather than
    read as 24."""
    for col in _NUMBER_COLUMNS:
        v = r.get(col, "")
        m = _COMMA_NUMBER.match(v)
        if m and any(len(g) != 3 for g in m.group(1).split(",")[1:]):
            raise RowSkip("cell", f"{col} {v[:30]!r}: a comma not followed by groups of three digits is a decimal "
                                  "mark, not a thousands separator; write numbers with '.' decimals")


def _delimiter(text: str) -> str:
    """The header line's delimiter: a comma unless the header names the required columns only when
    split on a semicolon or a tab (spreadsheets in locales whose decimal mark is a comma export
    with semicolons)."""
    header = text.split("\n", 1)[0]
    for delim in (",", ";", "\t"):
        names = {c.strip().strip('"').lower() for c in header.split(delim)}
        if "row_id" in names and "model" in names:
            return delim
    return ","


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
