"""Step time and memory per device of many candidate plans at once, with the predictor's model.

The step model (:mod:`trainperf.predict.step_model`) is written on a
:class:`~trainperf.predict.step_model.layout.Layout` whose numbers may be numpy arrays. This
module builds, per (checkpointing policy, precision) group of a candidate table, the layout of a
single-device workload of that precision (model, device and kernel physics: the predictor's own
:func:`~trainperf.predict.step_model.layout_of`) and replaces its mesh with the candidates' plans
as arrays (:func:`mesh_arrays`), using the plan rules of :mod:`trainperf.specs.parallel` that
:class:`~trainperf.specs.parallel.ParallelPlan` itself uses. Nothing is re-implemented here.

``tests/test_plan_consistency.py`` checks that the result equals the scalar predictor's step
time and memory to 1e-6 relative on a random sample of plans across models and devices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainperf.plan import scalar
from trainperf.plan.space import (
    AC_POLICIES,
    SCHED_DUALPIPE,
    SCHED_DUALPIPEV,
    Candidates,
    SoftwareFields,
    slot_stages,
)
from trainperf.predict.stack_capabilities import capabilities_of
from trainperf.predict.step_model import memory_only, step_costs
from trainperf.predict.step_model.layout import Layout, Mesh
from trainperf.specs.hardware import Hardware
from trainperf.specs.model import ModelSpec
from trainperf.specs.parallel import shards_grads, shards_optimizer, shards_params, stage_layer_split

GiB = float(1 << 30)
CHUNK_ROWS = 1 << 14
"""Candidates per step-model call: large enough to amortise Python overhead (~1 ms per call),
small enough that the model's ~100 intermediates stay near the CPU caches (2**14 rows measured
~20% faster than 2**17 on the 405B table)."""


@dataclass
class Evaluation:
    """Vectorised figures of a candidate table (arrays aligned with its rows)."""

    step_time_s: np.ndarray
    memory_GiB: np.ndarray
    """Predicted memory per device, GiB (2**30 bytes), framework reserve included."""
    capacity_GiB: float
    """Device memory, GiB."""
    fits: np.ndarray
    """``memory <= capacity`` (the predictor's fit test)."""


def mesh_arrays(c: Candidates, idx: np.ndarray, layers: int, scale_up_domain: int,
                gpipe: tuple[bool, bool] = (False, False), cp_shards_states: bool = False) -> Mesh:
    """The :class:`~trainperf.predict.step_model.layout.Mesh` of candidate rows ``idx``, as arrays.

    Experts are split like the dense layers (``etp = tp``) or not at all (``etp = 1``), as the
    candidate says; DualPipe and DualPipeV where its ``sched`` code names them. ``scale_up_domain``:
    devices per NVLink/xGMI domain. ``gpipe``: whether the stack pipelines with GPipe at (vpp = 1, vpp > 1)
    (:meth:`~trainperf.predict.stack_capabilities.Capabilities.schedule_for`). ``cp_shards_states``:
    the stack shards the states over the cp ranks of a plan that shards nothing else, as
    :func:`~trainperf.predict.stack_capabilities.apply_stack` does for one workload.
    """
    f64 = np.float64
    col = {k: c[k][idx] for k in ("num_devices", "dp", "fsdp", "zero", "tp", "pp", "vpp", "cp", "micro_batch",
                                  "global_batch", "sp", "ep", "etp", "slots", "sched")}
    dp, fsdp, zero, cp = (col[k].astype(f64) for k in ("dp", "fsdp", "zero", "cp"))
    if cp_shards_states:
        zero = np.where((cp > 1) & (fsdp == 1) & (dp == 1) & (zero < 3), 3.0, zero)
    pp, vpp, sched = col["pp"].astype(f64), col["vpp"].astype(f64), col["sched"]
    default = sched == 0  # the stack's own schedule for the vpp, not DualPipe or DualPipeV
    first, mid, last = stage_layer_split(float(layers), pp, *slot_stages(layers, col["pp"], col["slots"]))
    return Mesh(
        micro_batch=col["micro_batch"].astype(f64),
        grad_accum=(col["global_batch"] // (col["micro_batch"] * col["dp"] * col["fsdp"])).astype(f64),
        dp=dp, fsdp=fsdp, zero_stage=zero, tp=col["tp"].astype(f64), sp=col["sp"].astype(bool), pp=pp, vpp=vpp,
        interleaved=(vpp > 1) & (not gpipe[1]) & default, gpipe=(pp > 1) & np.where(vpp > 1, gpipe[1], gpipe[0]) & default,
        dualpipe=(pp > 1) & (sched == SCHED_DUALPIPE), dualpipev=(pp > 1) & (sched == SCHED_DUALPIPEV), cp=cp,
        ep=col["ep"].astype(f64), etp=col["etp"].astype(f64), shards_params=shards_params(dp, fsdp, zero, cp),
        shards_grads=shards_grads(dp, fsdp, zero, cp), shards_optimizer=shards_optimizer(dp, fsdp, zero, cp),
        layers_first=first, layers_mid=mid, layers_last=last,
        scale_up_domain=np.minimum(float(scale_up_domain), col["num_devices"].astype(f64)))


def _group_layout(model: ModelSpec, hardware: Hardware, seq_len: int, precision: str, policy: str,
                  software: Callable[[str, int], SoftwareFields] | None) -> Layout:
    """The layout of a (policy, precision) group but its mesh: a single-device workload's, with
    the group's checkpointing and software settings (async TP counts for tp > 1 only: with tp = 1
    there is no TP collective to hide, so the flag is a no-op there)."""
    from trainperf.predict.step_model.kernel_physics import software_fields

    stack = software("bf16", 1).get("stack") if software is not None else None
    base = scalar.representative(model, hardware, seq_len, precision, stack)
    run = dataclasses.replace(base.run, policy=policy)
    if software is None:
        return dataclasses.replace(base, run=run)
    soft = software(precision, 2)
    kernels = dataclasses.replace(base.kernels, **software_fields(model.norm, model.mlp, base.kernels.silicon, stack, precision,
                                                                  bool(soft["compile"]), soft["fp8_recipe"],
                                                                  soft.get("moe_dispatcher")))
    run = dataclasses.replace(run, async_tp=bool(soft["async_tp"]), moe_imbalance=float(soft.get("moe_imbalance", 1.0)),
                              offload_optimizer=bool(soft.get("offload_optimizer", False)))
    return dataclasses.replace(base, run=run, kernels=kernels)


def _rows(base: Layout, lay: Candidates, lid: np.ndarray, model: ModelSpec, domain: int, devices_per_node: int,
          gpipe: tuple[bool, bool], cp_shards: bool) -> Layout:
    """The group's layout over the candidates ``lid`` of ``lay``: their meshes and, where the
    optimizer is offloaded, the devices of each plan that share a host."""
    rows = dataclasses.replace(base, mesh=mesh_arrays(lay, lid, model.layers, domain, gpipe, cp_shards))
    if not base.run.offload_optimizer:
        return rows
    per_host = np.minimum(float(devices_per_node), lay["num_devices"][lid].astype(np.float64))
    return dataclasses.replace(rows, device=dataclasses.replace(base.device, devices_per_host=per_host))


def evaluate(c: Candidates, model: ModelSpec, hardware: Hardware, seq_len: int, devices_per_node: int,
             *, calibration: Any = None, scale_up_domain: int = 0,
             software: Callable[[str, int], SoftwareFields] | None = None,
             fitting_only: bool = False) -> Evaluation:
    """Predicted step time, memory per device and fit of every candidate in ``c``.

    ``calibration``: what ``trainperf.predict`` accepts for its knobs (a calibration file path,
    a mapping of knob values, or None for the catalog's). ``software(precision, tp)`` gives the
    ``[training]`` software fields (compile, async_tp, fp8_recipe, stack) of a plan, as
    :meth:`~trainperf.plan.space.SearchSpace.software` does. ``fitting_only``: price only the
    plans whose memory fits the device (the memory is computed for every plan first); the others
    get an infinite step time. A search ranks only plans that fit, and most do not.
    """

    n = len(c)
    domain = scale_up_domain or hardware.scale_up_domain or devices_per_node  # as layout_of reads it
    step, mem = np.empty(n), np.empty(n)
    stack = software("bf16", 1).get("stack") if software is not None else None
    knobs = scalar.knob_values(hardware, calibration, stack=stack)
    caps = capabilities_of(stack)
    gpipe = (caps.schedule_for(1) == "gpipe", caps.schedule_for(2) == "gpipe")
    cp_shards = caps.cp_shards_states
    capacity = float(hardware.usable_memory_bytes)
    for a, p, pos, lay_idx, lay in _groups(c):
        base = _group_layout(model, hardware, seq_len, c.precisions[p], AC_POLICIES[a], software)
        # chunks bound the memory of the step model's ~100 intermediate arrays
        for start in range(0, pos.size, CHUNK_ROWS):
            idx, lid = pos[start:start + CHUNK_ROWS], lay_idx[start:start + CHUNK_ROWS]
            rows = _rows(base, lay, lid, model, domain, devices_per_node, gpipe, cp_shards)
            if fitting_only:
                mem_rows = _full(memory_only(rows, knobs).total_bytes, idx.size)
                mem[idx] = mem_rows
                ok = mem_rows <= capacity
                step[idx[~ok]] = np.inf
                if not ok.any():
                    continue
                if not ok.all():
                    idx, lid = idx[ok], lid[ok]
                    rows = _rows(base, lay, lid, model, domain, devices_per_node, gpipe, cp_shards)
            out = step_costs(rows, knobs)
            step[idx] = _full(out.step_time_s, idx.size)
            mem[idx] = _full(out.memory.total_bytes, idx.size)
    mem_gib, cap_gib = mem / GiB, capacity / GiB
    return Evaluation(step, mem_gib, cap_gib, mem_gib <= cap_gib)


def _groups(c: Candidates) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, Candidates]]:
    """``(ac code, precision index, table positions, layout rows, layout table)`` per group of
    rows sharing a checkpointing policy and a precision (what the step model branches on)."""
    if not len(c):
        return
    if c.groups is None:  # a flat table
        ac, prec = c["ac"], c["precision"]
        lay = c if c.sel is None else Candidates({k: c[k] for k in c.cols}, c.precisions)
        for a in np.unique(ac):
            for p in np.unique(prec[ac == a]):
                pos = np.flatnonzero((ac == a) & (prec == p))
                yield int(a), int(p), pos, pos, lay
        return
    B = c.n_layouts
    lay = Candidates(c.cols, c.precisions)
    if c.sel is None:
        for g, (a, p) in enumerate(c.groups):
            yield int(a), int(p), np.arange(g * B, (g + 1) * B), np.arange(B), lay
        return
    g_of, b_of = np.divmod(c.sel, B)
    for g, (a, p) in enumerate(c.groups):
        pos = np.flatnonzero(g_of == g)
        yield int(a), int(p), pos, b_of[pos], lay


def _full(v: Any, size: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(v, dtype=np.float64), (size,))
