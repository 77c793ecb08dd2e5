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

Stopping (:mod:`trainperf.measure.stop`): a stop signal during the loop lets the step in
progress finish; the ranks agree on the step to stop after (the stop request rides on the
loss's all-reduce, so no rank waits in a collective for one that left), rank 0 writes the
``end`` line with the signal, and the process exits with 128 + its number. Started by the
bench's launcher (:mod:`trainperf.measure.agent`), each rank's stdout and stderr go to
``rank<k>.log`` in the run directory; rank 0's progress lines also go to the launcher's terminal.
"""

from __future__ import annotations

import contextlib
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
from typing import Any, TextIO

import torch
import torch.nn.functional as F
from torch.distributed.elastic.multiprocessing.errors import record

from trainperf.errors import SpecError, one_line
from trainperf.measure import checkpoint as ckpt
from trainperf.measure.agent import LAUNCHER_PID_ENV
from trainperf.measure.data import Batches, TextDataset
from trainperf.measure.loss import linear_cross_entropy
from trainperf.measure.meter import ThroughputMeter
from trainperf.measure.model import build_model
from trainperf.measure.parallelize import autocast_dtype, parallelize
from trainperf.measure.sinks import ConsoleSink, TensorBoardSink
from trainperf.measure.stop import (
    DEFAULT_GRACE_S,
    STOP_SIGNALS,
    GracefulStop,
    RunStopped,
    signal_name,
    stop_signals_raise,
)

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
    stop_grace_s: float = DEFAULT_GRACE_S
    """Seconds the step in progress may take to finish after a stop signal."""
    meta: dict[str, Any] = field(default_factory=dict)
    fp8_base: str | None = None
    """The 16-bit (or fp32) dtype of an fp8 run's other work: ``bf16``, or ``fp32`` on a CPU
    without native bf16; None: bf16."""
    moe: dict[str, Any] | None = None
    """:class:`~trainperf.measure.moe.MoEOptions` as a dict (MoE models)."""

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


def _by_mesh(tensors: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """DTensors grouped by mesh, plain tensors apart: multi-tensor kernels and
    ``get_total_norm`` refuse a mix."""
    from torch.distributed.tensor import DTensor

    groups: dict[int, list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault(id(t.device_mesh) if isinstance(t, DTensor) else 0, []).append(t)
    return list(groups.values())


def _sum_squares(grads: list[torch.Tensor]) -> torch.Tensor:
    """Sum of squared gradient entries, each mesh's norm made whole over its mesh."""
    from torch.distributed.tensor import DTensor

    sq = torch.zeros((), dtype=torch.float32)
    for group in _by_mesh(grads):
        n = torch.nn.utils.get_total_norm(group, 2.0)
        n = n.full_tensor() if isinstance(n, DTensor) else n
        sq = sq + n.float().cpu() ** 2
    return sq


def reduce_partial_grads(params: list[torch.nn.Parameter]) -> int:
    """Make each gradient DTensor that is still a partial sum (a sequence-parallel norm's weight:
    every tensor-parallel rank summed over its share of the sequence) whole, in place, once;
    returns how many. Left partial, the gradient norm's computation and then the optimizer would
    each all-reduce it again, two all-reduces per norm and step where one is needed."""
    from torch.distributed.tensor import DTensor

    done = 0
    for p in params:
        g = p.grad
        if isinstance(g, DTensor) and any(pl.is_partial() for pl in g.placements):
            p.grad = g.redistribute(g.device_mesh, p.placements)
            done += 1
    return done


def clip_grad_norm(params: list[torch.nn.Parameter], max_norm: float, extra_group=None,
                   expert_params: list[torch.nn.Parameter] | None = None, ep_group=None) -> float:
    """Total L2 norm of the gradients, then scale them to at most ``max_norm``.

    ``torch.nn.utils.clip_grad_norm_`` refuses a mix of DTensor and plain gradients, which
    tensor parallel without sequence parallel produces (the norms stay plain, replicated
    tensors), and DTensors of different meshes (expert parallel's experts); each group is
    summed apart, each counted once. ``extra_group`` (the pipeline group) holds disjoint
    parameters whose squared norms are summed across it; ``expert_params`` are different on each
    rank of ``ep_group``, so theirs are summed across that group.
    """
    import torch.distributed as dist

    reduce_partial_grads(params)
    experts = {id(p) for p in expert_params or []}
    grads = [p.grad for p in params if p.grad is not None and id(p) not in experts]
    expert_grads = [p.grad for p in expert_params or [] if p.grad is not None]
    sq = _sum_squares(grads)
    if expert_grads:
        esq = _sum_squares(expert_grads)
        if ep_group is not None:
            dist.all_reduce(esq, group=ep_group)
        sq = sq + esq
    if extra_group is not None:
        dist.all_reduce(sq, group=extra_group)
    total = float(sq.sqrt())
    coef = max_norm / (total + 1e-6)
    if coef < 1.0 and math.isfinite(total):
        for group in _by_mesh(grads + expert_grads):
            torch._foreach_mul_(group, coef)
    return total


def make_optimizer(model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
    """AdamW with the fused kernel when this torch supports it for these parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    # The multi-tensor kernels refuse a mix of DTensor and plain tensors in one group (tensor
    # parallel without sequence parallel leaves the norms plain), and DTensors of different
    # meshes (expert parallel's experts): one group each.
    groups = [{"params": g} for g in _by_mesh(params)]
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


def _gather_int(value: int) -> list[int]:
    """``value`` of every rank, in rank order (``[value]`` in one process)."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return [int(v) for v in out]


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
        self.say = out = self._printer(say, sys.stderr if cfg.quiet else sys.stdout)
        allocator = self._tune_threads_and_allocator()
        self.workload = workload = workload_from_dict(cfg.workload)
        self._calibrate_collectives()
        self.device = torch.device(cfg.device_type, int(os.environ.get("LOCAL_RANK", "0"))) \
            if cfg.device_type == "cuda" else torch.device("cpu")
        # fp8 conversion, MoE options and LoRA adapters change the model's modules: all before
        # parallelize wraps them and the optimizer takes their parameters.
        self._build_model()
        self.moe_stats, self.moe_options = self._setup_moe(out)
        self._apply_lora()
        self._parallelize()
        self._find_experts()
        self.last_moe: Any = None
        """The last step's :class:`~trainperf.measure.moe.StepMoE` (MoE models)."""
        self.batches = self._make_batches()
        self.expert_tag = self._expert_tag()
        """This rank's experts' own names in checkpoints under expert parallel (``ep1of2``)."""
        self.start = self._resume_step()
        sinks, meta = self._sinks_and_meta(allocator)
        self._set_up_loss()
        self.accum = workload.grad_accum_steps
        self.stop: GracefulStop | None = None
        """The loop's stop request while :meth:`run` runs."""
        self.stop_votes: torch.Tensor | None = None
        """Ranks that asked to stop, summed over the ranks with the last step's loss."""
        self.tokens_local = workload.micro_batch * workload.seq_len * self.accum
        self.meter = self._make_meter(sinks, meta)

    def _printer(self, say: Callable[[str], None] | None, stream: TextIO) -> Callable[[str], None]:
        """What :attr:`say` calls: ``say`` (default: print to ``stream``), on rank 0 only."""

        def out(msg: str) -> None:
            if self.rank == 0:
                (say or (lambda m: print(m, file=stream, flush=True)))(msg)

        return out

    def _tune_threads_and_allocator(self) -> bool:
        """Set the intra-op threads (if given) and tune the CPU allocator; returns whether it was."""
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        return tune_cpu_allocator() if self.cfg.device_type == "cpu" else False

    def _calibrate_collectives(self) -> None:
        """Several CPU processes with threads given: time the collectives over the run's group
        (:func:`~trainperf.measure.kernel_calibration.calibrate_collectives`)."""
        cfg = self.cfg
        if cfg.device_type == "cpu" and self.world > 1 and cfg.threads:
            from trainperf.measure.kernel_calibration import calibrate_collectives

            calibrate_collectives(cfg.threads, self.workload, self.say)

    def _build_model(self) -> None:
        """Build the workload's model on :attr:`device` (converted to Float8 for an fp8 run)."""
        cfg, workload, out = self.cfg, self.workload, self.say
        m = workload.model
        active = f", {m.active_params / 1e6:.2f}M active" if m.is_moe else ""
        out(f"building {m.name} ({m.total_params / 1e6:.2f}M params{active}) ...")
        self.model = build_model(m, seq_len=workload.seq_len, seed=cfg.seed, device=self.device,
                                 exact_rope=workload.plan.cp > 1)
        if workload.precision == "fp8":
            from trainperf.measure.fp8 import DEFAULT_RECIPE, convert

            conv = convert(self.model, workload.fp8_recipe or DEFAULT_RECIPE, cfg.device_type)
            out(conv.describe())
            cfg.meta["fp8"] = conv.to_dict()

    def _apply_lora(self) -> None:
        """A LoRA workload: add its adapters and freeze the base, recorded in the run's metadata."""
        workload = self.workload
        if workload.lora is not None:
            from trainperf.measure.lora import apply_lora

            n = apply_lora(self.model, workload.lora)
            self.say(f"{workload.lora.describe()}: {n / 1e6:.3f}M trainable parameters, the base frozen")
            self.cfg.meta["lora"] = {**workload.lora.to_dict(), "trainable_params": n,
                                     **lora_flop_check(self, self.say)}

    def _parallelize(self) -> None:
        """Parallelize the model by the workload's plan; the trained modules, optimizer and
        autocast dtype follow from it."""
        cfg, workload = self.cfg, self.workload
        self.setup = parallelize(self.model, workload, device_type=cfg.device_type, compile=cfg.compile,
                                 fp8_base=cfg.fp8_base)
        self.say(f"parallelism: {self.setup.description}")
        plan = workload.plan
        self.pp = plan.pp
        # Under pipeline parallel this rank trains only its stages; the optimizer and checkpoints
        # see only them, named by stage index so that names are unique across ranks (a
        # checkpoint then resumes only under the same pp x vpp layout).
        self.trained = self.model if plan.pp == 1 else torch.nn.ModuleDict(
            {f"stage{sid}": m for sid, m in self.setup.stages})
        self.opt = make_optimizer(self.trained, cfg.lr)
        self.amp = autocast_dtype(workload, self.setup, cfg.fp8_base)

    def _find_experts(self) -> None:
        """The trained MoE layers and their expert parameters (none for a dense model)."""
        from trainperf.measure.moe import moe_layers

        self.moe_layers = moe_layers(self.trained)
        self.expert_params = [p for layer in self.moe_layers for p in layer.experts.parameters()]
        if self.moe_layers:
            # a DTensor's numel is its size over the FSDP mesh: this rank's experts, whole
            self.cfg.meta["moe"]["expert_params_per_rank"] = _gather_int(sum(p.numel() for p in self.expert_params))

    def _make_batches(self) -> Batches:
        """This data-parallel rank's batches: from ``cfg.data`` when given, else synthetic."""
        cfg, workload = self.cfg, self.workload
        dataset = TextDataset.from_path(cfg.data, workload.seq_len, workload.model.vocab) if cfg.data else None
        return Batches(vocab=workload.model.vocab, seq_len=workload.seq_len,
                       micro_batch=workload.micro_batch, global_batch=workload.global_batch,
                       dp_rank=self.setup.dp_rank, dp_size=self.setup.dp_size, seed=cfg.seed,
                       dataset=dataset)

    def _expert_tag(self) -> str | None:
        """This rank's experts' name in checkpoints under expert parallel; None without it."""
        if self.setup.ep_group is None:
            return None
        import torch.distributed as dist

        return f"ep{dist.get_rank(self.setup.ep_group)}of{self.setup.ep_size}"

    def _resume_step(self) -> int:
        """The first step to run: 1, or after the latest checkpoint when resuming (loaded here)."""
        cfg, out = self.cfg, self.say
        if cfg.resume and cfg.checkpoint_dir:
            k = ckpt.latest_step(cfg.checkpoint_dir)
            if k is not None:
                ckpt.load(cfg.checkpoint_dir, k, self.trained, self.opt, self.expert_tag)
                out(f"resumed from {cfg.checkpoint_dir}/step-{k}")
                return k + 1
            out(f"no checkpoint under {cfg.checkpoint_dir}: starting from step 1")
        return 1

    def _sinks_and_meta(self, allocator: bool) -> tuple[list[Any], dict[str, Any]]:
        """The meter's sinks (console; TensorBoard on rank 0) and the run's metadata."""
        cfg = self.cfg
        sinks: list[Any] = [ConsoleSink(printer=self.say)]
        if cfg.tensorboard and self.rank == 0:
            sinks.append(TensorBoardSink(cfg.tensorboard))
        meta = {**cfg.meta, "convention": cfg.convention, "parallelism": self.setup.description,
                "data": self.batches.kind, "seed": cfg.seed, "compile": cfg.compile, "world_size": self.world,
                "threads": torch.get_num_threads(), "torch": torch.__version__, "cpu_allocator_tuned": allocator,
                "resumed_from_step": self.start - 1 if self.start > 1 else None}
        return sinks, meta

    def _set_up_loss(self) -> None:
        """The trained parameters, the loss (compiled, or fused with the head) and, under
        pipeline parallel, the schedule that runs it."""
        cfg, plan = self.cfg, self.workload.plan
        self.params = [p for p in self.trained.parameters() if p.requires_grad]
        self.loss_fn = torch.compile(cross_entropy) if cfg.compile else cross_entropy
        self.fused_head = fused_head_ok(self.model, self.setup, plan.pp)
        """The head and the loss fused (:mod:`trainperf.measure.loss`): one process, unsharded head."""
        self.schedule = None
        if plan.pp > 1:
            from trainperf.measure.pipeline import build_schedule

            self.schedule, _ = build_schedule(self.setup.stages, plan.pp * plan.vpp, self.device,
                                              self.setup.pp_group, plan.pp_schedule,
                                              self.workload.grad_accum_steps, self.loss_fn)

    def _make_meter(self, sinks: list[Any], meta: dict[str, Any]) -> ThroughputMeter:
        """The meter writing ``steps.jsonl`` from :attr:`start` on (exclusive: one run per directory)."""
        cfg, workload = self.cfg, self.workload
        return ThroughputMeter(
            Path(cfg.out_dir) / "steps.jsonl", flops_per_token=cfg.flops_per_token,
            hardware_flops_per_token=cfg.hardware_flops_per_token, peak_tflops=cfg.peak_tflops,
            peak_source=cfg.peak_source, total_steps=max(1, cfg.steps - self.start + 1), warmup_steps=cfg.warmup,
            data_parallel_size=self.setup.dp_size, num_devices=workload.num_devices, device=cfg.device_type,
            sinks=sinks, workload=workload, meta=meta, source="bench", first_step=self.start,
            recalibrate=self._recalibrate, warn=self.say, exclusive=True,
        )

    def _setup_moe(self, out: Callable[[str], None]) -> tuple[Any, Any]:
        """Give the MoE layers their options, statistics and expert GEMM (grouped or a loop);
        (None, None) for a dense model."""
        from trainperf.measure.moe import MoEOptions, MoEStats, grouped_mm_runs, moe_layers
        from trainperf.measure.parallelize import compute_dtype

        layers = moe_layers(self.model)
        if not layers:
            return None, None
        w, cfg = self.workload, self.cfg
        opts = MoEOptions(**cfg.moe) if cfg.moe else MoEOptions.for_model(w.model)
        runs, why = grouped_mm_runs(self.device, compute_dtype(w.precision, cfg.fp8_base))
        grouped = opts.grouped_gemm == "grouped" or (opts.grouped_gemm == "auto" and runs)
        if opts.grouped_gemm == "grouped" and not runs:
            raise SpecError("--moe-grouped-gemm", "grouped", f"loop or auto here: {why}")
        how = "torch._grouped_mm (one grouped GEMM per projection)" if grouped else \
            f"a loop over the experts ({'asked' if opts.grouped_gemm == 'loop' else why})"
        stats = MoEStats()
        for layer in layers:
            layer.options, layer.stats, layer.aux_scale = opts, stats, 1.0 / w.grad_accum_steps
            layer.experts.use_grouped = grouped
        m = w.model
        out(f"MoE: {len(layers)} of {m.layers} layers, {m.moe_experts} experts top-{m.moe_topk}"
            + (f" + {m.moe_shared_experts} shared" if m.moe_shared_experts else "")
            + f"; experts computed by {how}; "
            + ("dropless" if opts.capacity_factor is None else f"capacity factor {opts.capacity_factor:g}")
            + f"; aux loss x{opts.aux_loss_coef:g}"
            + (f"; aux-loss-free bias rate {opts.bias_update_rate:g}" if opts.bias_update_rate else ""))
        cfg.meta["moe"] = {**opts.to_dict(), "experts_gemm": "grouped" if grouped else "loop",
                           "experts_gemm_note": how}
        return stats, opts

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
            loss_sum += self._forward_backward(x, y, amp)
        gnorm = clip_grad_norm(self.params, GRAD_CLIP, expert_params=self.expert_params,
                               ep_group=self.setup.ep_group)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if self.moe_layers:
            from trainperf.measure.moe import end_step

            self.last_moe = end_step(self.moe_layers, self.moe_stats, self.workload.model.layers, self.accum,
                                     self.moe_options, self.device)
        if dist.is_initialized() and self.world > 1:
            loss_sum = self._all_reduce_with_stop(loss_sum) / self.world
        return loss_sum, gnorm

    def _forward_backward(self, x: torch.Tensor, y: torch.Tensor, amp: torch.dtype | None) -> torch.Tensor:
        """One micro-batch's forward and backward; returns its loss (divided by the micro-batches).

        Under context parallel both run inside :func:`~trainperf.measure.context_parallel.sharded`
        (this rank's share of the sequence, ring attention), as torchtitan's train step does."""
        ctx: Any = contextlib.nullcontext()
        if self.setup.cp_mesh is not None:
            from trainperf.measure.context_parallel import sharded

            x, y = x.clone(), y.clone()  # sharded in place: not views of one row buffer
            ctx = sharded(self.setup.cp_mesh, x, y, [self.model.rope_cos, self.model.rope_sin])
        with ctx:
            with torch.autocast(self.device.type, dtype=amp or torch.float32, enabled=amp is not None):
                if self.fused_head:
                    h = self.model.features(x)
                else:
                    logits = self.model(x)
            if self.fused_head:
                loss = linear_cross_entropy(h, self.model.output.weight, y, compute_dtype=amp) / self.accum
            else:
                loss = self.loss_fn(logits, y) / self.accum
            loss.backward()
        return loss.detach()

    def step_extras(self) -> dict[str, Any]:
        """What the last step adds to its record: MoE figures (extra) and the all-to-all seconds
        (breakdown); empty for a dense model."""
        moe = self.last_moe
        if moe is None:
            return {}
        if self.setup.ep_size == 1:
            return moe.extra()
        return {**moe.extra(), "breakdown": {"moe_all_to_all": moe.all_to_all_s}}

    def _all_reduce_with_stop(self, loss: torch.Tensor) -> torch.Tensor:
        """Sum ``loss`` over all ranks, and with it the ranks' stop requests: every rank then
        sees the same count (:attr:`stop_votes`) and stops after the same step."""
        import torch.distributed as dist

        asked = 1.0 if self.stop is not None and self.stop.requested else 0.0
        both = torch.stack([loss.float().reshape(()), loss.new_full((), asked, dtype=torch.float32)])
        dist.all_reduce(both)
        self.stop_votes = both[1]
        return both[0]

    def stop_agreed(self) -> bool:
        """Whether the ranks stop after the step just finished (a rank asked, see
        :meth:`_all_reduce_with_stop`); in one process, whether a stop was asked."""
        if self.stop_votes is not None:
            return float(self.stop_votes) > 0
        return self.stop is not None and self.stop.requested

    def _pipeline_step(self, step: int, amp: torch.dtype | None) -> tuple[torch.Tensor, float]:
        """One step through the pipeline schedule: this rank's micro-batches, same sequences as
        without pipeline parallel; the loss lives on the last stage (rank 0's under DualPipeV) and
        is averaged to all."""

        assert self.schedule is not None  # train_step calls this only when pp > 1 built a schedule
        parts = [self.batches.get(step - 1, m, self.device) for m in range(self.accum)]
        x = torch.cat([p[0] for p in parts])
        y = torch.cat([p[1] for p in parts])
        # the first stage takes the inputs, the last the targets: rank 0 holds both under DualPipeV
        v_shape = self.workload.plan.pp_schedule == "dualpipev"
        first, last = self.setup.pp_rank == 0, self.setup.pp_rank == (0 if v_shape else self.pp - 1)
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
        return self._all_reduce_with_stop(loss) / (self.world // self.pp), gnorm

    def run(self, *, escalate: bool = False) -> ThroughputMeter:
        """The metered loop from the start (or resume) step to ``cfg.steps``; see :func:`train`.

        ``escalate``: a second stop signal stops at once (an interactive run; module docstring).
        """
        cfg, meter, out = self.cfg, self.meter, self.say
        measured_steps = cfg.steps - self.start + 1
        if measured_steps <= 0:
            meter.close()
            return meter
        out(f"training {measured_steps} steps (first {meter.warmup_steps} = warm-up); "
            f"{self.workload.global_batch} x {self.workload.seq_len} tokens per step, "
            f"{self.accum} micro-batch(es) per rank")
        recal = {"peaks": cfg.meta["peaks"]} if meter.recalibrated else {}
        self.stop = GracefulStop(cfg.stop_grace_s, escalate=escalate)
        try:
            with self.stop:
                meter.start()
                for step in range(self.start, cfg.steps + 1):
                    if step == self.start and self.rank == 0:
                        with _Heartbeat(out, "compiling and warming up" if cfg.compile else "first step (warm-up)"):
                            loss, gnorm = self.train_step(step)
                    else:
                        loss, gnorm = self.train_step(step)
                    meter.step(tokens=self.tokens_local, loss=loss, grad_norm=gnorm, **self.step_extras())
                    if cfg.checkpoint_dir and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                        with meter.paused():
                            ckpt.save(cfg.checkpoint_dir, step, self.trained, self.opt, self.expert_tag)
                    if step < cfg.steps and self.stop_agreed():
                        signum = self.stop.signum or signal.SIGTERM  # a peer's request: ours is on its way
                        recal = {"peaks": cfg.meta["peaks"]} if meter.recalibrated else {}
                        meter.close(interrupted=True, interrupted_at_step=meter.next_step,
                                    stop_signal=signal_name(signum), **recal)
                        out(f"stopped by {signal_name(signum)} after step {step}")
                        raise RunStopped(signum)
        except BaseException as e:
            recal = {"peaks": cfg.meta["peaks"]} if meter.recalibrated else {}
            why = (str(e) or "interrupted") if isinstance(e, KeyboardInterrupt) else f"{type(e).__name__}: {e}"
            meter.close(interrupted=True, interrupted_at_step=meter.next_step, reason=one_line(why)[:500], **recal)
            raise
        finally:
            self.stop = None
        meter.close(**({"peaks": cfg.meta["peaks"]} if meter.recalibrated else {}))
        return meter


def train(cfg: BenchConfig, *, say: Callable[[str], None] | None = None,
          interactive: bool = False) -> ThroughputMeter:
    """Run the bench loop described by ``cfg``; returns the closed meter (records in memory).

    A stop signal (SIGTERM, SIGINT, SIGHUP) ends the loop after the step in progress and raises
    :class:`~trainperf.measure.stop.RunStopped` (a KeyboardInterrupt) once the JSONL has its
    ``end`` line (interrupted, the next step, the signal); ``interactive``: a second signal
    stops at once. Any other exception also closes the JSONL as interrupted, then propagates.
    """
    return BenchRun(cfg, say).run(escalate=interactive)


class _RankLog:
    """This rank's output under the bench's launcher. torchrun's redirect
    (:class:`~trainperf.measure.agent.RunDirLogs`) points its stderr at ``OUT/rank<k>.log``; its
    stdout joins it there (one file, in order), and with ``console`` (rank 0) the inherited
    stdout, the launcher's terminal, keeps its progress lines: torchrun's ``--tee`` would copy the
    whole stream there, tracebacks included."""

    def __init__(self, console: bool) -> None:
        sys.stdout.flush()
        self.console = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8", errors="replace") \
            if console else None
        os.dup2(2, 1)

    def say(self, msg: str) -> None:
        print(msg, flush=True)
        if self.console is not None:
            try:
                print(msg, file=self.console, flush=True)
            except OSError:  # the launcher is gone: the log keeps the line
                self.console = None


def die_with_launcher() -> bool:
    """Ask the kernel for a SIGTERM when the launcher (torchrun's agent, this worker's parent)
    dies, on Linux; True if it is already gone. torchrun starts each worker in a session of its
    own and makes no such request, so a launcher killed by SIGKILL (or the out-of-memory killer)
    would leave its workers training; with it they stop after their step, as on any stop signal."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    return os.getppid() != int(os.environ[LAUNCHER_PID_ENV])


@record
def main(argv: list[str] | None = None) -> int:
    """torchrun entry point: ``python -m trainperf.measure.trainer CONFIG.json``.

    Exit codes: 0 done, 128 + N stopped by signal N after its step, 1 an error (recorded for
    torchrun by ``@record``, whose report names the rank and the exception).
    """
    try:
        with stop_signals_raise():  # until the loop: a stop signal has no step to finish
            return _main(sys.argv[1:] if argv is None else argv)
    finally:  # ending anyway: exit with this process's own status, not torchrun's closing signal
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)


def _main(argv: list[str]) -> int:
    try:
        cfg = BenchConfig.from_json(Path(argv[0]).read_text())
        log = None
        if os.environ.get(LAUNCHER_PID_ENV):  # a worker of the bench's torchrun
            log = _RankLog(console=os.environ.get("RANK") == "0")
            if die_with_launcher():
                return 128 + signal.SIGTERM  # the launcher died before we could ask to die with it
        import torch.distributed as dist

        try:
            train(cfg, say=log.say if log else None)
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
    except RunStopped as e:
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    return 0


def _exit(code: int | None) -> None:
    """Exit now, everything written: the run record is closed, the logs flushed. Skipping the
    interpreter's teardown matters after a stop: finalising torch.distributed's objects (the
    process groups FSDP's device mesh still references) takes seconds of CPU, which a stopped
    job on a shared node, or Slurm's KillWait, should not have to wait for."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code or 0)


def _run_worker() -> None:
    """``main`` as a torchrun worker: its exit code, or after an exception (recorded for torchrun
    by ``@record``) the traceback in the rank's log and exit code 1 -- in both cases without the
    interpreter's slow teardown (:func:`_exit`)."""
    try:
        code = main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    _exit(code)


if __name__ == "__main__":  # pragma: no cover
    _run_worker()
