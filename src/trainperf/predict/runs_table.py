"""The published-runs table (``data/published_runs.csv``) as workloads the predictor can run.

The CSV (169 rows from 30 public tables, see ``../shared/published/README.md``) keeps each
measurement as published: free-text cells such as ``"64 (FSDP degree)"`` or ``"fp8 (TE hybrid,
fp8_params)"``. :func:`load_table_runs` maps every row either to a :class:`TableRun` with a
:class:`~trainperf.specs.workload.Workload` (model from the shape columns, device from
``hardware``, plan from the parallel columns, activation-checkpointing policy by name,
precision, software stack from ``framework``) and a step time, or to an exclusion whose
one-line reason says what is missing. Every assumption the mapping makes for a row is written
into the row's ``assumptions``.

Step times: the published ``step_time_s``; else ``global_batch * seq_len / tokens_per_s``;
else from the published TFLOP/s per device under the FLOP count the source used (Megatron-LM
SC21: the paper's formula with recomputation, Narayanan et al. 2021 eq. 3; MaxText: 6N plus
non-causal attention, i.e. the ``palm`` convention).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from trainperf.errors import InputFileError, SpecError, TrainperfError
from trainperf.specs.datafiles import read_user_text

PACKAGED = "published_runs.csv"

REQUIRED_COLUMNS: tuple[str, ...] = (
    "row_id", "table_id", "source", "model", "arch_type", "layers", "hidden", "heads", "kv_heads",
    "ffn_hidden", "vocab", "moe_experts", "moe_topk", "moe_expert_ffn", "seq_len", "global_batch_seqs",
    "micro_batch", "hardware", "num_gpus", "gpus_per_node", "dp", "fsdp_zero", "tp", "pp", "vpp", "cp",
    "sp", "ep", "act_ckpt", "precision", "framework", "step_time_s", "tokens_per_s_global",
    "tflops_per_gpu", "mfu_pct", "mfu_basis",
)
"""Columns a runs file must have (``--data FILE.csv``); others are kept as they are."""


@dataclass(frozen=True)
class TableRun:
    """One row of the published-runs table, mapped (or not) to a workload."""

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
    """Normalised precision (bf16, fp16, fp8), or the cell when it cannot be read."""
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
    """What the mapping assumed that the row does not state."""
    cells: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    """The raw CSV row."""

    @property
    def included(self) -> bool:
        return self.workload is not None and not self.exclude_reason

    def to_run_record(self) -> Any:
        """The row as a published :class:`~trainperf.records.RunRecord` named ``row:<row_id>``
        (mapped rows only)."""
        from trainperf.records.run_record import RunRecord, StepRecord

        if not self.included:
            raise SpecError(f"published row {self.row_id}", self.row_id, f"a predictable row ({self.exclude_reason})")
        w = self.workload
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


# ------------------------------------------------------------------------------ cell parsing
_NUM = re.compile(r"^\s*~?\s*(-?\d+(?:\.\d+)?)")


def num(cell: str | None) -> float | None:
    """The leading number of a cell (``"64 (FSDP degree)"`` -> 64), or ``None``."""
    if cell is None:
        return None
    m = _NUM.match(cell.replace(",", ""))
    return float(m.group(1)) if m else None


def _int(cell: str | None) -> int | None:
    v = num(cell)
    return round(v) if v is not None else None


class _Skip(Exception):
    """A row that cannot be mapped; the message is its one-line reason."""


# ----------------------------------------------------------------------------------- devices
_DEVICES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("h100 sxm 95gb", "h100-sxm-hbm2e", {}),
    ("h100 sxm", "h100-sxm", {}),
    ("a100 40gb", "a100-sxm-40gb", {}),
    ("a100", "a100-sxm-80gb", {}),
    ("tpu v5e", "tpu-v5e", {}),
    ("tpu v4", "tpu-v4", {}),
    ("mi250x", "mi250x-gcd", {}),
    ("mi250", "mi250", {}),
)


def _device(cell: str) -> tuple[str, dict[str, Any]]:
    low = cell.lower()
    for key, dev, extra in _DEVICES:
        if key in low:
            return dev, extra
    raise _Skip(f"hardware {cell!r} is not in the device catalog")


# ------------------------------------------------------------------------------------ policies
def _policy(cell: str, framework: str, precision: str, notes: list[str]) -> str:
    """The activation-checkpointing policy name of a cell (policies from the workload schema)."""
    from trainperf.specs.checkpointing import get_policy

    low = cell.lower()

    def first(*names: str) -> str:
        for n in names:
            try:
                get_policy(n)
                return n
            except TrainperfError:
                continue
        return names[-1]

    if "remat_policy=custom" in low or "custom remat" in low:
        if precision == "fp8":
            return first("save_dot_except_mlp", "selective")
        return first("save_dot_except_mlpwi", "selective")
    if "qkv_proj_offloaded" in low:
        return first("qkv_proj_offloaded", "full")
    if "selective op" in low:
        return first("selective-op", "selective")
    if "selective layer" in low:  # torchtitan: every 2nd layer fully checkpointed (ac_freq 2)
        return first("full-every:2", "full")
    if low.startswith("selective"):
        return "selective"
    if low.startswith("full") or "remat_policy=full" in low or low.startswith("yes"):
        return "full"
    if low.startswith("none"):
        return "none"
    # not stated: the framework's default for recipes this size
    fw = framework.lower()
    if "paxml" in fw:
        notes.append("activation checkpointing not stated: full rematerialisation assumed (PaxML default)")
        return "full"
    raise _Skip(f"activation checkpointing {cell or 'blank'!r} not stated and no framework default")


def _precision(cell: str) -> str:
    low = cell.lower()
    if "fp8" in low or "float8" in low:
        return "fp8"
    if low.startswith("fp16") and "bf16" in low:
        return "bf16"
    if "bf16" in low:
        return "bf16"
    if "fp16" in low:
        return "fp16"
    return cell


def _mlp(arch: str) -> str:
    from trainperf.specs.model import MLP_KINDS

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
def _model(r: Mapping[str, str], notes: list[str]) -> dict[str, Any]:
    from trainperf.specs.model import ModelSpec

    layers, hidden, ffn, vocab = (_int(r[c]) for c in ("layers", "hidden", "ffn_hidden", "vocab"))
    if not layers or not hidden:
        raise _Skip("model shape (layers, hidden) not given")
    if not ffn or not vocab:
        raise _Skip("model shape (ffn_hidden, vocab) not given")
    heads = _int(r["heads"])
    if not heads:
        heads = hidden // 128
        notes.append(f"heads not stated: {heads} assumed (head_dim 128; MHA FLOPs and params do not "
                     "depend on the head count)")
    kv = _int(r["kv_heads"]) or heads
    arch = r["arch_type"]
    low = arch.lower()
    fields: dict[str, Any] = {
        "name": r["model"].strip() or "custom", "layers": layers, "hidden": hidden, "heads": heads,
        "kv_heads": kv, "ffn_hidden": ffn, "vocab": vocab, "mlp": _mlp(arch),
        "max_seq_len": max(_int(r["seq_len"]) or 2048, 2048),
    }
    if "alibi" in low:
        fields.update(position="alibi", norm="layernorm")
    elif "gpt" in low or "gelu" in low or "relu mlp" in low:
        fields.update(position="learned", norm="layernorm", bias=True)
    if "head_dim 128" in low:
        fields["head_dim"] = 128
    experts = _int(r["moe_experts"])
    if experts:
        fields.update(moe_experts=experts, moe_topk=_int(r["moe_topk"]) or 1,
                      moe_expert_ffn=_int(r["moe_expert_ffn"]) or ffn)
    ModelSpec(**fields)  # validates here, so a bad shape reads as this row's reason
    return fields


def _plan(r: Mapping[str, str], n: int, notes: list[str]) -> dict[str, Any]:
    tp = _int(r["tp"])
    if tp is None:
        raise _Skip(f"tensor-parallel degree not stated ({r['tp'][:40]!r})")
    pp = _int(r["pp"]) or 1
    cp = _int(r["cp"]) or 1
    vpp = _int(r["vpp"])
    if vpp is None:
        vpp = 1
        if r["vpp"].strip():
            notes.append(f"vpp {r['vpp'][:40]!r}: non-interleaved 1F1B assumed")
    ep = _int(r["ep"]) or 1
    sp = r["sp"].strip().lower().startswith("yes")
    shard = r["fsdp_zero"]
    low = shard.lower()
    dp_cell = r["dp"]
    model_par = tp * pp * cp
    if n % model_par:
        raise _Skip(f"{n} devices are not a multiple of tp*pp*cp={model_par}")
    data = n // model_par
    plan: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "sequence_parallel": sp}
    if vpp > 1:
        plan.update(vpp=vpp, pp_schedule="interleaved")
    m = re.search(r"fsdp=(\d+)", low) or re.search(r"ici_fsdp (\d+)", low)
    if m:
        fsdp = int(m.group(1))
    elif "fsdp=-1" in low:  # all chips of a slice; slices are data parallel
        fsdp = data // max(_int(dp_cell) or 1, 1)
    elif "fsdp degree" in dp_cell.lower():
        fsdp = _int(dp_cell) or data
    elif "full_shard" in low or "fsdp" in low:
        fsdp = data
    else:
        fsdp = 1
    if fsdp > 1:
        if data % fsdp:
            raise _Skip(f"FSDP degree {fsdp} does not divide the {data} data-parallel ranks")
        plan.update(fsdp=fsdp, dp=data // fsdp)
    elif "zero-1" in low or "distributed optimizer" in low:
        plan.update(dp=data, zero_stage=1)
    else:
        plan["dp"] = data
    return plan


def _flops_per_step(r: Mapping[str, str], w: Any) -> tuple[float, str]:
    """FLOPs per step under the convention the row's TFLOP/s figure used."""
    basis = r["mfu_basis"].lower() + " " + r["framework"].lower()
    m = w.model
    B, s, L, h, V = w.global_batch, w.seq_len, m.layers, m.hidden, m.vocab
    if "recomputation" in basis or "megatron-lm" in basis:
        # Narayanan et al. 2021 (SC21), eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh), with recompute
        f = 96.0 * B * s * L * h * h * (1 + s / (6.0 * h) + V / (16.0 * L * h))
        return f, "Megatron-LM SC21 eq. 3 (includes recomputation)"
    if "maxtext" in basis:
        from trainperf.accounting.conventions import model_flops_per_token

        return B * s * model_flops_per_token(m, s, "palm"), "palm convention (MaxText: 6N + non-causal attention)"
    raise _Skip("no step time or tokens/s, and the TFLOP/s basis is not one trainperf can invert")


def _row(r: Mapping[str, str]) -> TableRun:
    from trainperf.predict.stacks import stack_of_framework
    from trainperf.specs.workload_file import workload_from_dict

    rid = r["row_id"].strip()
    precision = _precision(r["precision"])
    base = {
        "row_id": rid, "table_id": r["table_id"].strip(),
        "source": f"{r['source'].strip()} ({r.get('source_table', '').strip()})",
        "framework": r["framework"].strip(), "stack": stack_of_framework(r["framework"]),
        "model": r["model"].strip(), "hardware": r["hardware"].strip(), "precision": precision,
        "claimed_mfu_pct": num(r["mfu_pct"]), "mfu_basis": r["mfu_basis"].strip(), "cells": dict(r),
    }
    notes: list[str] = []
    try:
        step = num(r["step_time_s"])
        tps = num(r["tokens_per_s_global"])
        tflops = num(r["tflops_per_gpu"])
        if r["tflops_per_gpu"].strip().lower().startswith("up to") and step is None and tps is None:
            raise _Skip("only a best-case 'up to' TFLOP/s figure published; no step time or tokens/s")
        if step is None and tps is None and tflops is None:
            raise _Skip("no step time, tokens/s or TFLOP/s published")
        n = _int(r["num_gpus"])
        if not n:
            raise _Skip("device count not stated for this figure")
        seq, gbs = _int(r["seq_len"]), _int(r["global_batch_seqs"])
        if not seq or not gbs:
            raise _Skip("sequence length or global batch not stated")
        device, hw_extra = _device(r["hardware"])
        if precision not in ("bf16", "fp16", "fp8"):
            raise _Skip(f"precision {r['precision']!r} not readable")
        model = _model(r, notes)
        plan = _plan(r, n, notes)
        mb = _int(r["micro_batch"])
        if mb is None:
            mb = 1
            notes.append("micro batch not stated: 1 assumed")
        dpn = _int(r["gpus_per_node"]) or 8
        policy = _policy(r["act_ckpt"], r["framework"], precision, notes)
        hw = {"device": device, **hw_extra, "num_devices": n, "devices_per_node": min(dpn, n)}
        training = {"seq_len": seq, "global_batch": gbs, "micro_batch": mb, "precision": precision,
                    "activation_checkpointing": policy}
        fw = r["framework"].lower()
        if base["stack"] in ("maxtext", "paxml"):
            # a JAX program is compiled by XLA (fused elementwise ops), whose async collective
            # fusion overlaps tensor-parallel collectives with the matmuls
            training["compile"] = True
            if plan["tp"] > 1:
                training["async_tp"] = True
        if "asynctp" in fw.replace(" ", "").replace("-", ""):
            training["async_tp"] = True
        if precision == "fp8" and "torchtitan" in fw:
            training["fp8_recipe"] = "tensorwise"  # torchtitan's float8 of 2024: dynamic tensorwise scaling
        try:
            w = workload_from_dict({"model": model, "hardware": hw, "parallel": plan, "training": training})
        except TrainperfError as e:
            raise _Skip(f"workload does not validate: {e}") from None
        w = _with_stack(w, base["stack"])
        from trainperf.predict.step import check_plan

        try:
            check_plan(w)
        except TrainperfError as e:
            raise _Skip(f"plan does not validate: {e}") from None
        if step is not None:
            src = "step_time_s" + (" (derived)" if "derived" in r["step_time_s"] else "")
        elif tps is not None:
            step = w.tokens_per_step / tps
            src = f"tokens_per_s_global={tps:g}"
        else:
            flops, how = _flops_per_step(r, w)
            step = flops / (float(tflops) * 1e12 * n)
            src = f"tflops_per_gpu={tflops:g} under {how}"
        return TableRun(**base, workload=w, step_time_s=float(step), step_time_from=src,
                        assumptions=tuple(notes))
    except _Skip as e:
        return TableRun(**base, exclude_reason=str(e), assumptions=tuple(notes))


def _with_stack(w: Any, stack: str) -> Any:
    if any(f.name == "stack" for f in dataclasses.fields(w)):
        return dataclasses.replace(w, stack=stack)
    return w


def parse_runs(text: str, where: str = PACKAGED) -> tuple[TableRun, ...]:
    """Map every row of a runs CSV (the packaged table's columns)."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InputFileError(f"runs file {where!r}: missing column(s) {', '.join(missing)}")
    rows = [{k: (v or "") for k, v in r.items() if k is not None} for r in reader]
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


def table_run_records() -> list[Any]:
    """The mapped rows of the packaged table as published run records."""
    return [r.to_run_record() for r in packaged_runs() if r.included]


def get_table_run(row_id: str) -> TableRun:
    """One row of the packaged table by ``row_id`` (``row:`` prefix allowed)."""
    from trainperf.errors import UnknownNameError

    key = row_id.removeprefix("row:")
    runs = {r.row_id: r for r in packaged_runs()}
    if key not in runs:
        raise UnknownNameError("published row", key, runs)
    return runs[key]
