"""Bounds on the bench's own numbers, checked before any work (and before torch is imported).

Each refusal is one line naming the flag or field, the value and what would be valid, from the
:class:`~trainperf.specs.bounds.Bound` s at the end of :mod:`trainperf.specs.bounds`: a number
that would make a run start 1e11 micro-batches, a million processes or a model no memory here
holds is a typo, and a refusal costs nothing.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from trainperf.errors import SpecError
from trainperf.specs.bounds import (
    BENCH_MICRO_BATCHES,
    BENCH_MICRO_TOKENS,
    BENCH_SEQ_LEN,
    BENCH_STOP_GRACE_S,
    Bound,
)
from trainperf.specs.workload import Workload

if TYPE_CHECKING:
    from trainperf.measure.launch import LaunchSpec


def check_bound(field: str, value: object, bound: Bound) -> None:
    """Raise the one-line :class:`SpecError` unless ``value`` is an integer within ``bound``."""
    if isinstance(value, bool) or not isinstance(value, int) or not bound.lo <= value <= bound.hi:
        raise SpecError(field, value, bound.valid())


def check_stop_grace(seconds: object) -> None:
    """``--stop-grace``: finite seconds within :data:`~trainperf.specs.bounds.BENCH_STOP_GRACE_S`."""
    b = BENCH_STOP_GRACE_S
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) \
            or not b.lo <= seconds <= b.hi:
        raise SpecError("--stop-grace", seconds, f"seconds from {b.lo} to {b.hi:,} ({b.why})")


def physical_memory_bytes() -> int | None:
    """This machine's physical memory (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return None


def training_memory_floor_bytes(workload: Workload, launch: LaunchSpec) -> int:
    """A lower bound on the memory one node needs to train ``workload`` on the bench.

    Counted: the fp32 weights once (4 B per parameter, the bench keeps fp32 parameters), the
    gradients and AdamW's two moments of the trained parameters once (12 B each; none for a
    frozen LoRA base, its adapters left out), split over the nodes; and for each process one
    saved activation per layer of its pipeline stage, ``micro_batch x seq_len x hidden`` at 2 B
    (bf16), split by tensor and context parallelism. Left out: replicas (data parallel keeps one
    copy per rank), logits, attention workspaces, the framework itself -- a run needs more.
    """
    m, plan = workload.model, workload.plan
    params = m.total_params
    trained = 0 if workload.lora is not None else params
    state = (4 * params + 12 * trained) // launch.nnodes
    per_process = (workload.micro_batch * workload.seq_len * m.hidden * 2 * m.layers
                   // (plan.pp * plan.tp * plan.cp))
    return int(state + per_process * launch.nproc_per_node)


def check_work_bounds(workload: Workload, launch: LaunchSpec, *, local: bool = True) -> None:
    """Refuse, in one line and before any work, a run whose work no machine could do: the
    sequence length and micro-batches per step above their bounds (:mod:`trainperf.specs.bounds`),
    and on a CPU here, a model and batch whose training state cannot fit in physical memory
    (:func:`training_memory_floor_bytes`, a lower bound)."""
    check_bound("training.seq_len", workload.seq_len, BENCH_SEQ_LEN)
    tokens = workload.micro_batch * workload.seq_len
    if tokens > BENCH_MICRO_TOKENS.hi:
        raise SpecError("training.micro_batch", workload.micro_batch,
                        f"at most {BENCH_MICRO_TOKENS.hi // workload.seq_len:,} sequences of {workload.seq_len:,} "
                        f"tokens ({BENCH_MICRO_TOKENS.why})")
    if workload.grad_accum_steps > BENCH_MICRO_BATCHES.hi:
        most = workload.micro_batch * workload.plan.data_parallel * BENCH_MICRO_BATCHES.hi
        raise SpecError("training.global_batch", workload.global_batch,
                        f"at most {most:,} sequences: {workload.grad_accum_steps:,} micro-batches per rank per step "
                        f"is above {BENCH_MICRO_BATCHES.why}")
    ram = physical_memory_bytes() if local and workload.hardware.kind == "cpu" else None
    if ram:
        need = training_memory_floor_bytes(workload, launch)
        if need > ram:
            raise SpecError("model", workload.model.name,
                            f"a model and batch whose training fits in this machine's {ram / 2**30:,.1f} GiB of "
                            f"memory: at least {need / 2**30:,.1f} GiB needed ({workload.model.total_params / 1e9:,.3g}B "
                            "params: fp32 weights, gradients and AdamW moments, plus one activation per layer); "
                            "use a smaller model, batch or sequence")
