"""The bench's training loop: one process of a (possibly distributed) run.

Run in-process for one device, or by ``torchrun`` for several (``python -m
trainperf.measure.trainer RUN_CONFIG.json``; see :mod:`trainperf.measure.launch`). The config
is a :class:`BenchConfig` resolved by the launching process (workload, peak, FLOPs per token),
so every rank measures against the same numbers.

Per optimizer step: ``grad_accum_steps`` micro-batches of forward (autocast or FSDP's mixed
precision), cross-entropy in fp32 (in one process, fused with the LM head and chunked over tokens:
:mod:`trainperf.measure.loss`), backward (under pipeline parallel the schedule runs the
micro-batches through the stages); gradient-norm clipping at 1.0; AdamW (fused kernel where
available, betas 0.9/0.95, weight decay 0.1); the learning rate is a pure function of the step
(linear warm-up, then constant), so a resumed run needs no scheduler state. The logged loss is
the mean over the global batch (all-reduced).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from trainperf.measure import checkpoint as ckpt
from trainperf.measure.data import Batches, TextDataset
from trainperf.measure.loss import linear_cross_entropy
from trainperf.measure.meter import ThroughputMeter
from trainperf.measure.model import build_model
from trainperf.measure.parallelize import autocast_dtype, parallelize
from trainperf.measure.sinks import ConsoleSink, TensorBoardSink

GRAD_CLIP = 1.0


@dataclass
class BenchConfig:
    """Everything one bench process needs; JSON-serialisable for torchrun workers."""

    workload: dict[str, Any]
    """The workload as :func:`trainperf.specs.workload_file.workload_to_dict` writes it."""
    steps: int = 20
    """Optimizer steps to run (in total, counting steps done before a resume)."""
    warmup: int | None = None
    """Warm-up steps excluded from the summary; None: the summariser's default rule."""
    seed: int = 0
    data: str | None = None
    """Text file or directory (byte-level tokens); None: synthetic tokens."""
    compile: bool = False
    lr: float = 1e-3
    lr_warmup_steps: int = 5
    out_dir: str = "runs/bench"
    device_type: str = "cpu"
    """``cpu`` (gloo) or ``cuda`` (nccl)."""
    threads: int | None = None
    """Intra-op threads per process (CPU); None: leave torch's default."""
    flops_per_token: float | None = None
    hardware_flops_per_token: float | None = None
    peak_tflops: float | None = None
    peak_source: str | None = None
    convention: str = "megatron"
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    resume: bool = False
    tensorboard: str | None = None
    quiet: bool = False
    """Console lines go to stderr (stdout is kept for ``--json``)."""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> BenchConfig:
        return cls(**json.loads(text))


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy, computed in fp32 on upcast logits (compiled with --compile,
    which fuses the upcast, log-softmax and gather instead of materialising fp32 logits)."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def fused_head_ok(model: torch.nn.Module, setup: Any, pp: int) -> bool:
    """Whether the LM head can be fused into the loss: a plain, unsharded ``nn.Linear`` head in a
    single process without pipeline stages (FSDP/TP shard the head's weight and gather it in the
    module's own forward, which the fused loss bypasses)."""
    return (pp == 1 and getattr(setup, "mesh", None) is None and hasattr(model, "features")
            and type(getattr(model, "output", None)) is torch.nn.Linear)


def lr_at(step: int, cfg: BenchConfig) -> float:
    """Linear warm-up over ``lr_warmup_steps`` then constant (step counted from 1)."""
    if cfg.lr_warmup_steps <= 0:
        return cfg.lr
    return cfg.lr * min(1.0, step / cfg.lr_warmup_steps)


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float, extra_group=None) -> float:
    """Total L2 norm of the gradients, then scale them to at most ``max_norm``.

    ``torch.nn.utils.clip_grad_norm_`` refuses a mix of DTensor and plain gradients, which
    tensor parallel without sequence parallel produces (the norms stay plain, replicated
    tensors); the two groups are summed here, each counted once. ``extra_group`` (the
    pipeline group) holds disjoint parameters whose squared norms are summed across it.
    """
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in params if p.grad is not None]
    dt = [g for g in grads if isinstance(g, DTensor)]
    plain = [g for g in grads if not isinstance(g, DTensor)]
    sq = torch.zeros((), dtype=torch.float32)
    if dt:
        n = torch.nn.utils.get_total_norm(dt, 2.0)
        sq = sq + n.full_tensor().float().cpu() ** 2
    if plain:
        sq = sq + torch.nn.utils.get_total_norm(plain, 2.0).float().cpu() ** 2
    if extra_group is not None:
        import torch.distributed as dist

        dist.all_reduce(sq, group=extra_group)
    total = float(sq.sqrt())
    coef = max_norm / (total + 1e-6)
    if coef < 1.0 and math.isfinite(total):
        for group in (dt, plain):
            if group:
                torch._foreach_mul_(group, coef)
    return total


def make_optimizer(model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    """AdamW with the fused kernel when this torch supports it for these parameters."""
    from torch.distributed.tensor import DTensor

    params = [p for p in model.parameters() if p.requires_grad]
    # The multi-tensor kernels refuse a mix of DTensor and plain tensors in one group (tensor
    # parallel without sequence parallel leaves the norms plain): one group each.
    groups = [{"params": g} for g in ([p for p in params if isinstance(p, DTensor)],
                                      [p for p in params if not isinstance(p, DTensor)]) if g]
    try:
        opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    except (RuntimeError, TypeError, ValueError):
        opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
    return opt


class _Heartbeat:
    """Prints 'still working' lines while the first (warm-up / compile) step runs."""

    def __init__(self, say: Callable[[str], None], what: str, every_s: float = 5.0) -> None:
        self._say, self._what, self._every = say, what, every_s
        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self._say(f"  ... {self._what}: {time.perf_counter() - self._t0:.0f} s")

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


def tune_cpu_allocator() -> bool:
    """Keep freed memory in the process instead of returning it to the OS (glibc only).

    A training step frees and reallocates the same large activation and gradient buffers every
    step; glibc serves blocks above its mmap threshold with fresh ``mmap`` calls, so each step
    page-faults and zero-fills them again (high system time). Raising the mmap and trim
    thresholds (``mallopt``, as ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_`` would)
    lets them be reused, the effect Intel's PyTorch CPU guide gets from jemalloc/tcmalloc.
    Returns whether it was applied.
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        # glibc caps the mmap threshold at 32 MiB on 64-bit (HEAP_MAX/2); larger values are refused.
        ok = libc.mallopt(m_mmap_threshold, 32 * 2**20) == 1
        ok = libc.mallopt(m_trim_threshold, 2**31 - 1) == 1 and ok
    except (OSError, AttributeError):
        return False
    return ok


def _init_distributed(cfg: BenchConfig) -> tuple[int, int]:
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        from datetime import timedelta

        if cfg.device_type == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if cfg.device_type == "cuda" else "gloo", timeout=timedelta(minutes=10))
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def lora_flop_check(run: BenchRun, say: Callable[[str], None]) -> dict[str, Any]:
    """torch's FlopCounterMode on this (LoRA) model's training step, next to the convention's
    count that MFU uses: both go into the run's metadata, the difference is printed."""
    from trainperf.measure.flop_count import count_flops_per_token

    counted = count_flops_per_token(run.model, run.workload.seq_len).training_flops_per_token
    used = run.cfg.flops_per_token
    if used:
        say(f"FLOPs per token: {used:.6g} ({run.cfg.convention} convention), {counted:.6g} by torch's "
            f"FlopCounterMode ({100 * (used / counted - 1):+.2f}%)")
    return {"flop_counter_flops_per_token": counted}


class BenchRun:
    """One process of a bench run, set up and ready to step (what :func:`train` loops over).

    ``__init__`` initialises torch.distributed (under torchrun), builds and parallelizes the
    model, the optimizer, the data and the meter (and resumes from a checkpoint); ``train_step``
    runs one optimizer step; ``run`` is the whole metered loop. ``benchmarks/bench_vs_hf.py``
    drives ``train_step`` directly to interleave with a baseline.
    """

    def __init__(self, cfg: BenchConfig, say: Callable[[str], None] | None = None) -> None:
        from trainperf.specs.workload_file import workload_from_dict

        self.cfg = cfg
        self.rank, self.world = _init_distributed(cfg)
        stream = sys.stderr if cfg.quiet else sys.stdout

        def out(msg: str) -> None:
            if self.rank == 0:
                (say or (lambda m: print(m, file=stream, flush=True)))(msg)

        self.say = out
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        allocator = tune_cpu_allocator() if cfg.device_type == "cpu" else False
        self.workload = workload = workload_from_dict(cfg.workload)
        self.device = torch.device(cfg.device_type, int(os.environ.get("LOCAL_RANK", "0"))) \
            if cfg.device_type == "cuda" else torch.device("cpu")
        out(f"building {workload.model.name} ({workload.model.total_params / 1e6:.2f}M params) ...")
        self.model = build_model(workload.model, seq_len=workload.seq_len, seed=cfg.seed, device=self.device)
        if workload.lora is not None:
            from trainperf.measure.lora import apply_lora

            n = apply_lora(self.model, workload.lora)
            out(f"{workload.lora.describe()}: {n / 1e6:.3f}M trainable parameters, the base frozen")
            cfg.meta["lora"] = {**workload.lora.to_dict(), "trainable_params": n, **lora_flop_check(self, out)}
        self.setup = parallelize(self.model, workload, device_type=cfg.device_type, compile=cfg.compile)
        out(f"parallelism: {self.setup.description}")
        plan = workload.plan
        self.pp = plan.pp
        # Under pipeline parallel this rank trains only its stages; the optimizer and checkpoints
        # see only them, named by stage index so that names are unique across ranks (a
        # checkpoint then resumes only under the same pp x vpp layout).
        self.trained = self.model if plan.pp == 1 else torch.nn.ModuleDict(
            {f"stage{sid}": m for sid, m in self.setup.stages})
        self.opt = make_optimizer(self.trained, cfg.lr)
        self.amp = autocast_dtype(workload, self.setup)
        dataset = TextDataset.from_path(cfg.data, workload.seq_len, workload.model.vocab) if cfg.data else None
        self.batches = Batches(vocab=workload.model.vocab, seq_len=workload.seq_len,
                               micro_batch=workload.micro_batch, global_batch=workload.global_batch,
                               dp_rank=self.setup.dp_rank, dp_size=self.setup.dp_size, seed=cfg.seed,
                               dataset=dataset)
        self.start = 1
        if cfg.resume and cfg.checkpoint_dir:
            k = ckpt.latest_step(cfg.checkpoint_dir)
            if k is not None:
                ckpt.load(cfg.checkpoint_dir, k, self.trained, self.opt)
                self.start = k + 1
                out(f"resumed from {cfg.checkpoint_dir}/step-{k}")
            else:
                out(f"no checkpoint under {cfg.checkpoint_dir}: starting from step 1")
        sinks: list[Any] = [ConsoleSink(printer=out)]
        if cfg.tensorboard and self.rank == 0:
            sinks.append(TensorBoardSink(cfg.tensorboard))
        meta = {**cfg.meta, "convention": cfg.convention, "parallelism": self.setup.description,
                "data": self.batches.kind, "seed": cfg.seed, "compile": cfg.compile, "world_size": self.world,
                "threads": torch.get_num_threads(), "torch": torch.__version__, "cpu_allocator_tuned": allocator,
                "resumed_from_step": self.start - 1 if self.start > 1 else None}
        self.params = [p for p in self.trained.parameters() if p.requires_grad]
        self.loss_fn = torch.compile(cross_entropy) if cfg.compile else cross_entropy
        self.fused_head = fused_head_ok(self.model, self.setup, plan.pp)
        """The head and the loss fused (:mod:`trainperf.measure.loss`): one process, unsharded head."""
        self.schedule = None
        if plan.pp > 1:
            from trainperf.measure.pipeline import build_schedule

            self.schedule, _ = build_schedule(self.setup.stages, plan.pp * plan.vpp, self.device,
                                              self.setup.pp_group, plan.pp_schedule, workload.grad_accum_steps,
                                              self.loss_fn)
        self.accum = workload.grad_accum_steps
        self.tokens_local = workload.micro_batch * workload.seq_len * self.accum
        self.meter = ThroughputMeter(
            Path(cfg.out_dir) / "steps.jsonl", flops_per_token=cfg.flops_per_token,
            hardware_flops_per_token=cfg.hardware_flops_per_token, peak_tflops=cfg.peak_tflops,
            peak_source=cfg.peak_source, total_steps=max(1, cfg.steps - self.start + 1), warmup_steps=cfg.warmup,
            data_parallel_size=self.setup.dp_size, num_devices=workload.num_devices, device=cfg.device_type,
            sinks=sinks, workload=workload, meta=meta, source="bench", first_step=self.start,
            recalibrate=self._recalibrate, warn=out,
        )

    def _recalibrate(self, measured_tflops: float) -> tuple[float, str] | None:
        """The meter's hook when a step beat the peak: re-measure a calibrated CPU peak once
        (the run's dtype, square and own GEMM shapes, best kept and cached); None otherwise."""
        peaks = list(self.cfg.meta.get("peaks") or [])
        if self.cfg.device_type != "cpu" or not peaks or peaks[0].get("kind") != "calibrated":
            return None
        from trainperf.measure.runner import calibrate_cpu_peak

        old = peaks[0]["tflops"]
        cal, _ = calibrate_cpu_peak(self.workload, torch.get_num_threads(), self.say,
                                    why=f"a step ran at {measured_tflops:.4g} TFLOP/s, above the calibrated "
                                        f"peak {old:.4g} TFLOP/s: recalibrating once")
        new = cal.peak_tflops[self.workload.precision]
        if new <= old:
            return None
        label = f"{peaks[0]['label']}; recalibrated during the run: {new:.4g} (was {old:.4g}) TFLOP/s"
        peaks[0] = {**peaks[0], "tflops": new, "label": label}
        self.cfg.meta["peaks"] = peaks
        return new, label

    def train_step(self, step: int) -> tuple[torch.Tensor, float]:
        """One optimizer step (all micro-batches); returns (mean loss over ranks, grad norm)."""
        import torch.distributed as dist

        for g in self.opt.param_groups:
            g["lr"] = lr_at(step, self.cfg)
        loss_sum = torch.zeros((), device=self.device)
        amp = self.amp
        if self.schedule is not None:
            return self._pipeline_step(step, amp)
        for micro in range(self.accum):
            x, y = self.batches.get(step - 1, micro, self.device)
            if self.fused_head:
                with torch.autocast(self.device.type, dtype=amp or torch.float32, enabled=amp is not None):
                    h = self.model.features(x)
                loss = linear_cross_entropy(h, self.model.output.weight, y, compute_dtype=amp) / self.accum
            else:
                with torch.autocast(self.device.type, dtype=amp or torch.float32, enabled=amp is not None):
                    logits = self.model(x)
                loss = self.loss_fn(logits, y) / self.accum
            loss.backward()
            loss_sum += loss.detach()
        gnorm = clip_grad_norm(self.params, GRAD_CLIP)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if dist.is_initialized() and self.world > 1:
            dist.all_reduce(loss_sum)
            loss_sum /= self.world
        return loss_sum, gnorm

    def _pipeline_step(self, step: int, amp: torch.dtype | None) -> tuple[torch.Tensor, float]:
        """One step through the pipeline schedule: this rank's micro-batches, same sequences as
        without pipeline parallel; the loss lives on the last stage and is averaged to all."""
        import torch.distributed as dist

        parts = [self.batches.get(step - 1, m, self.device) for m in range(self.accum)]
        x = torch.cat([p[0] for p in parts])
        y = torch.cat([p[1] for p in parts])
        first, last = self.setup.pp_rank == 0, self.setup.pp_rank == self.pp - 1
        losses: list[torch.Tensor] = []
        with torch.autocast(self.device.type, dtype=amp or torch.float32, enabled=amp is not None):
            args = (x,) if first else ()
            self.schedule.step(*args, target=y if last else None, losses=losses if last else None,
                               return_outputs=False)
        loss = torch.stack([t.detach().float() for t in losses]).mean() if losses \
            else torch.zeros((), device=self.device)
        gnorm = clip_grad_norm(self.params, GRAD_CLIP, extra_group=self.setup.pp_group)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        # Every rank of the last stage holds the loss: the sum over all ranks counts it world/pp times.
        dist.all_reduce(loss)
        return loss / (self.world // self.pp), gnorm

    def run(self) -> ThroughputMeter:
        """The metered loop from the start (or resume) step to ``cfg.steps``; see :func:`train`."""
        cfg, meter, out = self.cfg, self.meter, self.say
        measured_steps = cfg.steps - self.start + 1
        if measured_steps <= 0:
            meter.close()
            return meter
        out(f"training {measured_steps} steps (first {meter.warmup_steps} = warm-up); "
            f"{self.workload.global_batch} x {self.workload.seq_len} tokens per step, "
            f"{self.accum} micro-batch(es) per rank")
        main_thread = threading.current_thread() is threading.main_thread()
        prev = signal.getsignal(signal.SIGTERM)
        if main_thread:
            signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            meter.start()
            for step in range(self.start, cfg.steps + 1):
                if step == self.start and self.rank == 0:
                    with _Heartbeat(out, "compiling and warming up" if cfg.compile else "first step (warm-up)"):
                        loss, gnorm = self.train_step(step)
                else:
                    loss, gnorm = self.train_step(step)
                meter.step(tokens=self.tokens_local, loss=loss, grad_norm=gnorm)
                if cfg.checkpoint_dir and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                    with meter.paused():
                        ckpt.save(cfg.checkpoint_dir, step, self.trained, self.opt)
        except KeyboardInterrupt:
            meter.close(interrupted=True, interrupted_at_step=meter.next_step,
                        **({"peaks": cfg.meta["peaks"]} if meter.recalibrated else {}))
            raise
        finally:
            if main_thread:
                signal.signal(signal.SIGTERM, prev)
        meter.close(**({"peaks": cfg.meta["peaks"]} if meter.recalibrated else {}))
        return meter


def train(cfg: BenchConfig, *, say: Callable[[str], None] | None = None) -> ThroughputMeter:
    """Run the bench loop described by ``cfg``; returns the closed meter (records in memory).

    KeyboardInterrupt (Ctrl-C, or SIGTERM from torchrun when a peer rank died) closes the
    JSONL with ``interrupted`` and the next unfinished step, then propagates.
    """
    return BenchRun(cfg, say).run()


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    """torchrun entry point: ``python -m trainperf.measure.trainer CONFIG.json``."""
    argv = sys.argv[1:] if argv is None else argv
    cfg = BenchConfig.from_json(Path(argv[0]).read_text())
    import torch.distributed as dist

    try:
        train(cfg)
    except KeyboardInterrupt:
        return 130
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
