"""What each run was: the configuration panel of a report, and what differs between runs.

For every run with a workload: the model, the machine (the device, or for a CPU bench run the
CPU the run calibrated its peak on), the device count and nodes, the parallel layout
(dp/fsdp/tp/pp/cp/ep, as :meth:`~trainperf.specs.parallel.ParallelPlan.describe` writes it),
micro and global batch, sequence length, checkpointing, precision and software stack; the bench's
own description of its layout and its command line when the record has them. Then the fields
whose values differ between the runs (the diff a run page of TensorBoard or W&B shows), and
those every run shares.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

FIELDS: tuple[str, ...] = ("model", "machine", "devices", "layout", "micro batch", "global batch", "seq",
                           "checkpointing", "precision", "stack")
"""The configuration of a run, in the order the panel shows it."""

_PROGRAM = re.compile(r"^\S*?(?:trainperf/__main__\.py|trainperf)(?=\s|$)")
_CPU_PEAK = re.compile(r"calibrated matmul peak \((.+?), (\d+) thread\(s\)")


@dataclass
class RunConfig:
    """One run's configuration as text, field by field (:data:`FIELDS`)."""

    name: str
    values: dict[str, str] = field(default_factory=dict)
    described: str | None = None
    """The layout as the run itself described it (a bench run's ``parallelism`` line)."""
    command: str | None = None
    """The command line that made the run, when recorded."""


def machine(run: Any) -> str:
    """The machine a run ran on: the CPU a bench run calibrated its peak on (with the threads
    each process ran), else the device's catalog name."""
    w = run.workload
    if w.hardware.kind == "cpu":
        for p in run.meta.get("peaks") or []:
            m = _CPU_PEAK.search(str(p.get("label", "")) if isinstance(p, dict) else "")
            if m:
                return f"CPU: {m.group(1)}, {m.group(2)} thread(s) per process"
    return w.hardware.name


def run_config(name: str, run: Any) -> RunConfig | None:
    """The :class:`RunConfig` of ``run`` (``None`` without a workload)."""
    w = run.workload
    if w is None:
        return None
    nodes = -(-w.num_devices // max(1, w.devices_per_node or 1))
    extras = [x for x in (("compiled" if w.compile else ""), ("async TP" if w.async_tp else ""),
                          (f"fp8 {w.fp8_recipe}" if w.fp8_recipe else "")) if x]
    values = {
        "model": w.model.name, "machine": machine(run),
        "devices": f"{w.num_devices} ({nodes} node{'s' if nodes != 1 else ''})",
        "layout": w.plan.describe(), "micro batch": str(w.micro_batch), "global batch": str(w.global_batch),
        "seq": str(w.seq_len), "checkpointing": w.activation_checkpointing,
        "precision": w.precision + (f" ({', '.join(extras)})" if extras else ""), "stack": w.stack,
    }
    described = run.meta.get("parallelism")
    command = run.meta.get("command")
    if command:  # the bench records sys.argv: its first word is the interpreter's path to trainperf
        command = _PROGRAM.sub("trainperf", str(command), count=1)
    return RunConfig(name, values, str(described) if described else None, str(command) if command else None)


def differing(configs: list[RunConfig]) -> list[str]:
    """The fields whose value is not the same in every run (empty for fewer than two runs)."""
    if len(configs) < 2:
        return []
    return [f for f in FIELDS if len({c.values[f] for c in configs}) > 1]


def shared_text(configs: list[RunConfig]) -> str:
    """``model debug; machine ...; seq 256`` for the fields every run shares."""
    diff = set(differing(configs))
    if not configs:
        return ""
    return "; ".join(f"{f} {configs[0].values[f]}" for f in FIELDS if f not in diff)


def config_table(configs: list[RunConfig]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the panel: every field of every run."""
    return ["run", *FIELDS], [[c.name, *(c.values[f] for f in FIELDS)] for c in configs]


def diff_table(configs: list[RunConfig]) -> tuple[list[str], list[list[str]]] | None:
    """Headers and rows of the runs' differences: only the fields that differ (``None`` when none
    does, or for a single run)."""
    diff = differing(configs)
    if not diff:
        return None
    return ["run", *diff], [[c.name, *(c.values[f] for f in diff)] for c in configs]
