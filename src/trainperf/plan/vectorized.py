"""Step time and memory per device of many candidate plans at once, with the predictor's model.

The predictor's core, :func:`trainperf.predict.core.step_core`, is written on numbers that may
be numpy arrays. This module does for a whole candidate table what
:func:`trainperf.predict.core.workload_features` does for one :class:`Workload`: it builds the
feature dict with the plan-dependent entries as arrays (one element per candidate) and calls
``step_core`` once per (checkpointing policy, precision) group — the two features the core
branches on as Python values. Nothing of the step model is re-implemented here; only the
feature extraction is mirrored:

* the model, precision and hardware entries (``peak_flops``, ``attn_peak_flops``, ``fp8``,
  ``state_kind``, ``act_bytes``, bandwidths, capacity, and all of ``model_features``) are
  ``workload_features`` of one single-device workload of the group's precision, so they cannot
  drift;
* the plan entries of ``workload_features`` (``micro_batch``, ``grad_accum``, ``dp``, ``fsdp``,
  ``zero_stage``, ``tp``, ``sp``, ``pp``, ``vpp``, ``interleaved``, ``cp``, ``ep``, ``etp``,
  ``layers_first``/``layers_mid``/``layers_last``, ``num_devices``, ``devices_per_node``) and
  the shard counts of
  :class:`~trainperf.specs.parallel.ParallelPlan` (``shards_params``, ``shards_grads``,
  ``shards_optimizer``) are computed on arrays below (:func:`plan_features`).

``tests/test_plan_consistency.py`` checks that the result equals the scalar predictor's step
time and memory to 1e-6 relative on a random sample of plans across models and devices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainperf.plan.space import AC_POLICIES, Candidates, SoftwareFields, stage_layer_arrays
from trainperf.specs.hardware import Hardware
from trainperf.specs.model import ModelSpec

GiB = float(1 << 30)
CHUNK_ROWS = 1 << 14
"""Candidates per ``step_core`` call: large enough to amortise Python overhead (~1 ms per call),
small enough that step_core's ~100 intermediates stay near the CPU caches (2**14 rows measured
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
    parts: dict[str, np.ndarray] | None = None
    """Every array ``step_core`` returned (only when asked for with ``keep_parts``)."""


def plan_features(c: Candidates, idx: np.ndarray, devices_per_node: int, layers: int = 0,
                  scale_up_domain: int = 0, gpipe: tuple[bool, bool] = (False, False)) -> dict[str, Any]:
    """The plan-dependent entries of ``workload_features`` for candidate rows ``idx``, as arrays.

    Mirrors :func:`trainperf.predict.core.workload_features` and ParallelPlan's shard counts and
    stage split (:func:`~trainperf.plan.space.stage_layer_arrays`: ``ceil(layers / pp)`` per rank,
    or Megatron's embedding/loss slots). Experts are split like the dense layers (``etp = tp``) or
    not at all (``etp = 1``), as the candidate says.
    ``scale_up_domain``: devices per NVLink/xGMI domain (0: ``devices_per_node``).
    ``gpipe``: whether the stack pipelines with GPipe at (vpp = 1, vpp > 1)
    (:meth:`~trainperf.predict.stack_capabilities.Capabilities.schedule_for`).
    """
    f64 = np.float64
    n = c["num_devices"][idx].astype(f64)
    dp = c["dp"][idx].astype(f64)
    fsdp = c["fsdp"][idx].astype(f64)
    zero = c["zero"][idx].astype(f64)
    tp = c["tp"][idx].astype(f64)
    pp = c["pp"][idx].astype(f64)
    vpp = c["vpp"][idx].astype(f64)
    cp = c["cp"][idx].astype(f64)
    mbs = c["micro_batch"][idx].astype(f64)
    gbs = c["global_batch"][idx]
    ga = gbs // (c["micro_batch"][idx] * c["dp"][idx] * c["fsdp"][idx])
    return {
        "num_devices": n,
        "devices_per_node": np.minimum(float(devices_per_node), n),
        "scale_up_domain": np.minimum(float(scale_up_domain or devices_per_node), n),
        "micro_batch": mbs, "grad_accum": ga.astype(f64),
        "dp": dp, "fsdp": fsdp, "zero_stage": zero, "tp": tp, "sp": c["sp"][idx].astype(bool),
        "pp": pp, "vpp": vpp, "cp": cp,
        "interleaved": (vpp > 1) & (not gpipe[1]),
        "gpipe": (pp > 1) & np.where(vpp > 1, gpipe[1], gpipe[0]),
        "ep": c["ep"][idx].astype(f64),
        # ParallelPlan.shards_*: the sharded group spans cp as well
        "shards_params": np.where(fsdp > 1, fsdp * cp, np.where(zero >= 3, dp * cp, 1.0)),
        "shards_grads": np.where(fsdp > 1, fsdp * cp, 1.0) * np.where(zero >= 2, dp * np.where(fsdp > 1, 1.0, cp), 1.0),
        "shards_optimizer": np.where(fsdp > 1, fsdp * cp, 1.0) * np.where(zero >= 1, dp * np.where(fsdp > 1, 1.0, cp), 1.0),
        "etp": c["etp"][idx].astype(f64),
        **dict(zip(("layers_first", "layers_mid", "layers_last"),
                   stage_layer_arrays(layers, c["pp"][idx], c["vpp"][idx], c["slots"][idx]), strict=True)),
    }


def evaluate(c: Candidates, model: ModelSpec, hardware: Hardware, seq_len: int, devices_per_node: int,
             *, calibration: Any = None, keep_parts: bool = False, scale_up_domain: int = 0,
             software: Callable[[str, int], SoftwareFields] | None = None,
             fitting_only: bool = False) -> Evaluation:
    """Predicted step time, memory per device and fit of every candidate in ``c``.

    ``calibration``: what ``trainperf.predict`` accepts for its knobs (a calibration file path,
    a mapping of knob values, or None for the catalog's). See the module docstring for exactly
    which part is mirrored and which is the predictor's own code. ``software(precision, tp)``
    gives the ``[training]`` software fields (compile, async_tp, fp8_recipe) of a plan, as
    :meth:`~trainperf.plan.space.SearchSpace.software` does; async TP is applied only where tp > 1
    (with tp = 1 there is no TP collective to hide, so the flag is a no-op there).
    ``fitting_only``: price only the plans whose memory fits the device (the memory is computed
    for every plan first, :func:`~trainperf.predict.core.memory_core`); the others get an
    infinite step time. A search ranks only plans that fit, and most do not.
    """
    from trainperf.plan import scalar
    from trainperf.predict import core, stack_kernels
    from trainperf.predict.stack_capabilities import capabilities_of, loss_bytes_per_logit

    n = len(c)
    scale_up_domain = scale_up_domain or hardware.scale_up_domain  # as workload_features reads it
    step = np.empty(n)
    mem = np.empty(n)
    parts: dict[str, np.ndarray] = {}
    stack = software("bf16", 1).get("stack") if software is not None else None
    knobs = scalar.knob_values(hardware, calibration, stack=stack)
    caps = capabilities_of(stack)
    gpipe = (caps.schedule_for(1) == "gpipe", caps.schedule_for(2) == "gpipe")
    capacity = hardware.usable_memory_bytes
    for a, p, pos, lay_idx, lay in _groups(c):
        base = scalar.representative(model, hardware, seq_len, c.precisions[p], stack)
        # chunks bound the memory of step_core's ~100 intermediate arrays
        for start in range(0, pos.size, CHUNK_ROWS):
            idx, lid = pos[start:start + CHUNK_ROWS], lay_idx[start:start + CHUNK_ROWS]
            f = dict(base)
            f.update(plan_features(lay, lid, devices_per_node, model.layers, scale_up_domain, gpipe))
            f["policy"] = AC_POLICIES[a]
            if software is not None:
                soft = software(c.precisions[p], 2)
                f["compile"], f["async_tp"] = bool(soft["compile"]), bool(soft["async_tp"])
                f.update(core.software_features(model, base["silicon"], stack_kernels.for_stack(stack, base["silicon"]),
                                                c.precisions[p], bool(soft["compile"]), soft["fp8_recipe"]))
                f["loss_bytes_per_logit"] = loss_bytes_per_logit(stack, bool(soft["compile"]))
            if fitting_only:
                m = core.memory_core(f, knobs)
                capacity = float(np.asarray(m["mem_capacity"]).max())
                mem_rows = _full(m["mem_total"], idx.size)
                mem[idx] = mem_rows
                ok = mem_rows <= capacity
                step[idx[~ok]] = np.inf
                if not ok.any():
                    continue
                if not ok.all():
                    idx, lid = idx[ok], lid[ok]
                    f.update(plan_features(lay, lid, devices_per_node, model.layers, scale_up_domain, gpipe))
            out = core.step_core(f, knobs)
            step[idx] = _full(out["step_time_s"], idx.size)
            mem[idx] = _full(out["mem_total"], idx.size)
            capacity = float(np.asarray(out["mem_capacity"]).max())
            if keep_parts:
                for key, v in out.items():
                    arr = parts.setdefault(key, np.full(n, np.nan))
                    arr[idx] = _full(v, idx.size)
    mem_gib, cap_gib = mem / GiB, capacity / GiB
    return Evaluation(step, mem_gib, cap_gib, mem_gib <= cap_gib, parts if keep_parts else None)


def _groups(c: Candidates):
    """``(ac code, precision index, table positions, layout rows, layout table)`` per group of
    rows sharing a checkpointing policy and a precision (what step_core branches on)."""
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
