"""ThroughputMeter: step timing, tokens/s, TFLOP/s per device and MFU for any training loop.

Usage (a few lines in any PyTorch loop; the bench's trainer uses exactly this)::

    from trainperf.meter import ThroughputMeter

    meter = ThroughputMeter("runs/mine/steps.jsonl", flops_per_token=6 * n_params,
                            peak_tflops=989.0, total_steps=1000)
    for batch in loader:
        loss = train_step(batch)
        meter.step(tokens=batch["input_ids"].numel(), loss=loss)   # this process's tokens
    meter.close()

What one ``step()`` does:

1. synchronises the device (``torch.cuda.synchronize()`` for CUDA/ROCm; CPU ops are already
   synchronous), then reads ``time.perf_counter()``: the step time is the wall time since the
   previous ``step()`` (or since construction / :meth:`start`), minus time spent inside
   :meth:`paused` blocks (checkpoint saving, evaluation);
2. derives the rates: global tokens = ``tokens x data_parallel_size`` (default: the world size,
   i.e. every rank reads different data; pass the data-parallel degree under tensor/pipeline
   parallelism), per-device tokens/s = global / ``num_devices`` (default: world size), model
   TFLOP/s per device = ``flops_per_token x`` per-device tokens/s, MFU against
   ``peak_tflops`` (and HFU with ``hardware_flops_per_token``);
3. records peak memory: CUDA max allocated, else the process's RSS high-water mark;
4. on rank 0 only (unless ``all_ranks``), writes a :class:`~trainperf.records.StepRecord` line
   to the JSONL file through :class:`~trainperf.records.jsonl.JsonlWriter` (flushed every
   line, so a killed run keeps every finished step) and calls the sinks (console line,
   TensorBoard). The rates go into the record's ``claimed_*`` fields: they are what this run
   reported about itself.

MFU is never above 100%: a step whose model TFLOP/s exceeds the peak means the peak is not an
upper bound (or the FLOP count, tokens or timing is wrong). The meter then calls
``recalibrate(measured_tflops)`` once, if given (the bench re-measures the CPU peak and returns
the better one); if the step still exceeds the peak, its MFU (and HFU) is stored as ``None``
with the reason in ``extra["mfu_invalid"]`` (one line from
:func:`trainperf.accounting.plausibility.check_mfu`), and the reason is printed once.

No collective is issued: every rank times its own steps (training is synchronous, so they
agree to within the last collective's skew) and rank 0 reports. Warm-up steps (default: the
summariser's rule, first 10% of ``total_steps``, at least 1, at most 10; 1 if the run length
is unknown) are recorded but flagged ``extra.warmup`` and left out of :meth:`summary`.
"""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from trainperf.accounting.plausibility import check_mfu
from trainperf.accounting.summarize import default_warmup_steps, percentile
from trainperf.records import RunRecord, StepRecord
from trainperf.records.jsonl import JsonlWriter


class Sink(Protocol):
    """Receives every step the meter records (see :mod:`trainperf.measure.sinks`)."""

    def write(self, record: StepRecord, warmup: bool) -> None: ...

    def close(self) -> None: ...


def _dist_info() -> tuple[int, int]:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:  # pragma: no cover - torch is a dependency of measure
        pass
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else "cpu"


def peak_memory_GiB(device: str) -> float:
    """Peak memory of this process: CUDA max allocated on ``device``, else the RSS high-water mark."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.max_memory_allocated() / 2**30
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return rss / 2**30 if sys.platform == "darwin" else rss / 2**20


def _create_exclusive(path: Path) -> None:
    """Create ``path`` empty, failing with one line if anything exists there (O_EXCL: of two
    runs writing into one directory, exactly one gets the record)."""
    from trainperf.records.output_path import OutputPathError

    path.parent.mkdir(parents=True, exist_ok=True)  # as the JSONL writer does
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
    except FileExistsError:
        raise OutputPathError(f"run record {str(path)!r} already exists: another run writes into this "
                              "directory, or an earlier one did; give a new directory") from None


class ThroughputMeter:
    """Times training steps and reports tokens/s, TFLOP/s per device and MFU (module docstring).

    Args:
        out: JSONL run record to append to (``None``: keep records in memory only).
        flops_per_token: model FLOPs per token, forward + backward (e.g. ``6 * n_params``, or
            :func:`trainperf.accounting.conventions.model_flops_per_token`). ``None``: no
            TFLOP/s or MFU.
        peak_tflops: dense peak TFLOP/s of one device for the training dtype. ``None``: no MFU.
        peak_source: words saying where the peak comes from (kept in the run header).
        hardware_flops_per_token: model FLOPs plus recomputation, for HFU (optional).
        total_steps: planned run length, for the default warm-up rule.
        warmup_steps: steps to leave out of the summary (default: see the module docstring).
        data_parallel_size: ranks that read different data (default: world size).
        num_devices: devices taking part (default: world size).
        device: ``"cuda"`` or ``"cpu"``, what to synchronise (default: CUDA if initialised).
        sinks: extra outputs, each with ``write(record, warmup)`` and ``close()``.
        workload: the run's :class:`~trainperf.specs.workload.Workload`, written in the header.
        meta: free-form run metadata for the header (convention, command line...).
        source: record source, ``meter`` for a user's loop, ``bench`` for trainperf's own.
        first_step: index of the first step (a resumed run continues its numbering).
        all_ranks: write the file and call the sinks on every rank, not only rank 0.
        recalibrate: called at most once, with the measured model TFLOP/s per device, when a
            step's MFU exceeds 100%; returns ``(peak_tflops, peak_source)`` to use from then on,
            or None. Without it (or if it does not help) such MFU is marked invalid.
        warn: prints the one-line reason when MFU is marked invalid (default: stderr), once.
        exclusive: create ``out`` and refuse (:class:`~trainperf.records.output_path.OutputPathError`)
            if it already exists: one run per record (the bench's run records).
    """

    def __init__(
        self,
        out: str | Path | None = None,
        *,
        flops_per_token: float | None = None,
        peak_tflops: float | None = None,
        peak_source: str | None = None,
        hardware_flops_per_token: float | None = None,
        total_steps: int | None = None,
        warmup_steps: int | None = None,
        data_parallel_size: int | None = None,
        num_devices: int | None = None,
        device: str | None = None,
        sinks: Sequence[Sink] = (),
        workload: Any = None,
        meta: dict[str, Any] | None = None,
        source: str = "meter",
        first_step: int = 1,
        all_ranks: bool = False,
        recalibrate: Callable[[float], tuple[float, str] | None] | None = None,
        warn: Callable[[str], Any] | None = None,
        exclusive: bool = False,
    ) -> None:
        self.rank, world = _dist_info()
        self.data_parallel_size = data_parallel_size or world
        self.num_devices = num_devices or world
        self.flops_per_token = flops_per_token
        self.hardware_flops_per_token = hardware_flops_per_token
        self.peak_tflops = peak_tflops
        self.peak_source = peak_source
        if warmup_steps is None:
            warmup_steps = default_warmup_steps(total_steps) if total_steps else 1
        self.warmup_steps = warmup_steps
        self.device = device or _default_device()
        self._sync = self.device.startswith("cuda")
        self.records: list[StepRecord] = []
        self.next_step = first_step
        self._first_step = first_step
        self._reporting = all_ranks or self.rank == 0
        self._sinks = list(sinks) if self._reporting else []
        self._writer: JsonlWriter | None = None
        if out is not None and self._reporting:
            if exclusive:
                _create_exclusive(Path(out))
            self._writer = JsonlWriter(out)
            header_meta = dict(meta or {})
            header_meta.update(peak_tflops=peak_tflops, peak_source=peak_source, flops_per_token=flops_per_token,
                               warmup_steps=self.warmup_steps, planned_steps=total_steps, num_devices=self.num_devices,
                               data_parallel_size=self.data_parallel_size, first_step=first_step)
            self._writer.header(RunRecord(source=source, workload=workload, meta=header_meta))
        self._paused_s = 0.0
        self._closed = False
        self._recalibrate = recalibrate
        self._warn = warn or (lambda m: print(m, file=sys.stderr, flush=True))
        self.recalibrated = False
        """True once ``recalibrate`` has been called (it is called at most once)."""
        self.mfu_invalid: str | None = None
        """The reason of the first step whose MFU was marked invalid, else None."""
        self.start()

    # ---------------------------------------------------------------------------------------
    def start(self) -> None:
        """(Re)start the clock: the next step is timed from now."""
        self._synchronize()
        self._t0 = time.perf_counter()
        self._paused_s = 0.0

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside this block is not part of the current step (checkpoints, evals)."""
        self._synchronize()
        t = time.perf_counter()
        try:
            yield
        finally:
            self._synchronize()
            self._paused_s += time.perf_counter() - t

    def _synchronize(self) -> None:
        if self._sync:
            import torch

            torch.cuda.synchronize()

    def is_warmup(self, step: int) -> bool:
        return step - self._first_step < self.warmup_steps

    def step(self, tokens: int, loss: Any = None, grad_norm: Any = None,
             breakdown: dict[str, float] | None = None, **extra: Any) -> StepRecord:
        """Close the current step: ``tokens`` this process consumed, optional loss / grad norm.

        ``loss`` and ``grad_norm`` may be tensors (read with ``float()``, after the clock).
        ``breakdown``: seconds of named parts of the step (e.g. ``moe_all_to_all``), stored in
        the record's ``breakdown`` and, as ``<name>_pct`` of the step time, in ``extra``.
        Extra keyword values are stored in the record's ``extra``.
        """
        self._synchronize()
        now = time.perf_counter()
        dt = max(now - self._t0 - self._paused_s, 1e-9)
        self._t0, self._paused_s = now, 0.0
        step = self.next_step
        self.next_step += 1
        global_tokens = int(tokens) * self.data_parallel_size
        tps_dev = global_tokens / dt / self.num_devices
        tflops = mfu = None
        warm = self.is_warmup(step)
        ext = dict(extra)
        for name, seconds in (breakdown or {}).items():
            ext[f"{name}_pct"] = 100.0 * seconds / dt
        if warm:
            ext["warmup"] = True
        if self.flops_per_token is not None:
            tflops = self.flops_per_token * tps_dev / 1e12
            if self.peak_tflops:
                mfu = self._checked_mfu(tflops, ext)
        if self.hardware_flops_per_token is not None and self.peak_tflops and "mfu_invalid" not in ext:
            ext["hfu_pct"] = 100.0 * self.hardware_flops_per_token * tps_dev / 1e12 / self.peak_tflops
        rec = StepRecord(
            step=step, step_time_s=dt, tokens=global_tokens,
            loss=None if loss is None else float(loss),
            grad_norm=None if grad_norm is None else float(grad_norm),
            memory_GiB=peak_memory_GiB(self.device),
            claimed_tokens_per_s=global_tokens / dt, claimed_tokens_per_s_per_device=tps_dev,
            claimed_tflops_per_device=tflops, claimed_mfu_pct=mfu, breakdown=dict(breakdown) if breakdown else None,
            rank=self.rank, extra=ext,
        )
        self.records.append(rec)
        if self._writer is not None:
            self._writer.step(rec)
        for sink in self._sinks:
            sink.write(rec, warm)
        return rec

    def _checked_mfu(self, tflops: float, ext: dict[str, Any]) -> float | None:
        """MFU of a step at ``tflops``; recalibrates once, else marks it invalid (module docstring)."""
        assert self.peak_tflops
        verdict = check_mfu(100.0 * tflops / self.peak_tflops, self.peak_tflops, self.peak_source or "")
        if not verdict.ok and self._recalibrate is not None and not self.recalibrated and self._reporting:
            self.recalibrated = True
            with self.paused():
                better = self._recalibrate(tflops)
            if better is not None and better[0] > self.peak_tflops:
                self.peak_tflops, self.peak_source = better
                verdict = check_mfu(100.0 * tflops / self.peak_tflops, self.peak_tflops, self.peak_source or "")
        if verdict.ok:
            return verdict.mfu_pct
        ext["mfu_invalid"] = verdict.reason
        if self.mfu_invalid is None:
            self.mfu_invalid = verdict.reason
            if self._reporting:
                self._warn(f"warning: {verdict.reason}; MFU is marked invalid")
        return None

    # ---------------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """Steady-state figures of the steps so far (warm-up left out): medians and percentiles.

        A run stopped within its warm-up has no steady-state step: its figures are None, never
        those of a warm-up step.
        """
        steady = [r for r in self.records if not self.is_warmup(r.step)]
        if not steady:
            return {"steps": len(self.records), "steps_measured": 0, "warmup_steps": self.warmup_steps,
                    "step_time_median_s": None, "step_time_p10_s": None, "step_time_p90_s": None,
                    "tokens_per_s": None, "tokens_per_s_per_device": None, "tflops_per_device": None,
                    "mfu_pct": None, "peak_tflops": self.peak_tflops, "peak_source": self.peak_source}
        times = [r.step_time_s for r in steady]
        med = statistics.median(times)
        tokens = statistics.median([r.tokens or 0 for r in steady])
        tps_dev = tokens / med / self.num_devices
        out: dict[str, Any] = {
            "steps": len(self.records), "steps_measured": len(steady), "warmup_steps": self.warmup_steps,
            "step_time_median_s": med, "step_time_p10_s": percentile(times, 10),
            "step_time_p90_s": percentile(times, 90), "tokens_per_s": tokens / med,
            "tokens_per_s_per_device": tps_dev, "tflops_per_device": None, "mfu_pct": None,
            "peak_tflops": self.peak_tflops, "peak_source": self.peak_source,
        }
        if self.flops_per_token is not None:
            out["tflops_per_device"] = self.flops_per_token * tps_dev / 1e12
            if self.peak_tflops:
                verdict = check_mfu(100.0 * out["tflops_per_device"] / self.peak_tflops, self.peak_tflops,
                                    self.peak_source or "")
                out["mfu_pct"] = verdict.mfu_pct if verdict.ok else None
                if not verdict.ok:
                    out["mfu_invalid"] = verdict.reason
        return out

    def close(self, *, interrupted: bool = False, **fields: Any) -> None:
        """Write the ``end`` line (a run whose file has none reads back as interrupted)."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            last = self.records[-1].step if self.records else None
            self._writer.end(interrupted=interrupted, steps_completed=len(self.records), last_step=last, **fields)
            self._writer.close()
        for sink in self._sinks:
            sink.close()

    def __enter__(self) -> ThroughputMeter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(interrupted=exc_type is not None)
