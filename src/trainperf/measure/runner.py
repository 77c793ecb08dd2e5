"""Prepare and run one bench: validate everything up front, then train in-process or via torchrun.

Every user mistake is found here, before any process starts, and raised as a one-line
:class:`~trainperf.errors.TrainperfError`: a plan the bench cannot run, a GPU-only precision on
a CPU, an unreadable or too-short data file, a process count that does not match the plan.

Peaks (for MFU):

* CPU: the calibrated matmul peak of this machine for the run's dtype and thread count
  (``trainperf calibrate``; with ``N`` processes per node each process gets ``cores / N``
  threads). With none cached, the bench measures it (quick: square matmuls and the run's own
  GEMM shapes, the dtype it runs only, a few seconds), keeps the best and saves it. Should a
  measured step still exceed it, the trainer recalibrates once (:mod:`trainperf.measure.meter`)
  and, failing that, marks MFU invalid instead of printing a figure above 100%.
* CUDA/ROCm: the catalog's datasheet dense peak of the device (``--device``, or mapped from
  ``torch.cuda.get_device_name``), and a calibrated one when ``trainperf calibrate`` has been run
  on that GPU; both are reported, each labelled.
* ``--peak-tflops X``: used as given, labelled as given.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainperf.accounting.conventions import (
    get_convention,
    hardware_flops_per_token,
    model_flops_per_token,
    run_convention,
)
from trainperf.errors import SpecError, TrainperfError
from trainperf.measure.launch import LaunchSpec, torchrun_args
from trainperf.measure.limits import check_bound, check_stop_grace, check_work_bounds
from trainperf.measure.parallelize import as_run, check_plan
from trainperf.measure.results import summary_text, write_summary
from trainperf.measure.stop import DEFAULT_GRACE_S, RunStopped, stop_signals_raise
from trainperf.measure.trainer import BenchConfig
from trainperf.specs.bounds import BENCH_STEPS, BENCH_THREADS
from trainperf.specs.cpu_calibration import shared_cores_note, threads_per_process
from trainperf.specs.workload import Workload


class RunFailedError(TrainperfError):
    """The run's processes failed before any step finished; one line naming the rank and its log."""

    exit_code = 1

# torch.cuda.get_device_name() substrings -> catalog id (first match wins; most specific first).
CUDA_NAME_TO_ID: tuple[tuple[str, str], ...] = (
    (r"GH200", "h100-sxm"),
    (r"H200 NVL", "h200-nvl"),
    (r"H200", "h200-sxm"),
    (r"H100 NVL", "h100-nvl"),
    (r"H100 PCIe", "h100-pcie"),
    (r"H100", "h100-sxm"),
    (r"H800", "h800"),
    (r"GB200", "gb200"),
    (r"B300", "b300"),
    (r"B200", "b200"),
    (r"A100.*PCIE.*80|A100 80GB PCIe", "a100-pcie-80gb"),
    (r"A100.*PCIE", "a100-pcie-40gb"),
    (r"A100.*80GB", "a100-sxm-80gb"),
    (r"A100", "a100-sxm-40gb"),
    (r"L40S", "l40s"),
    (r"\bL4\b", "l4"),
    (r"MI355", "mi355x"),
    (r"MI325", "mi325x"),
    (r"MI300X", "mi300x"),
    (r"MI250X", "mi250x-gcd"),
    (r"MI250", "mi250-gcd"),
)


def catalog_id_for_gpu(name: str) -> str | None:
    """The catalog id of a ``torch.cuda.get_device_name()`` string, or None if unknown."""
    for pattern, dev in CUDA_NAME_TO_ID:
        if re.search(pattern, name, flags=re.IGNORECASE):
            return dev
    return None


def local_device_type() -> str:
    """``cuda`` when a CUDA/ROCm device is visible, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device_here(device_id: str) -> None:
    """A GPU device asked for on a machine whose torch reaches none: one line (exit 2) before
    anything runs, naming what torch there is and what would work."""
    if device_id == "cpu":
        return
    import torch

    if torch.cuda.is_available():
        return
    if torch.version.cuda is None and torch.version.hip is None:
        why = f"this torch ({torch.__version__}) is a CPU-only build"
    else:
        why = f"torch {torch.__version__} sees no GPU here (driver, CUDA_VISIBLE_DEVICES)"
    raise SpecError("hardware.device", device_id, f"a device this machine has: {why}; leave --device out (or give "
                    "--device cpu) to run on the CPU, or install a CUDA/ROCm build of torch on a GPU machine")


def default_device_id() -> str:
    """The catalog id of this machine's accelerator (``cpu`` without one)."""
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    name = torch.cuda.get_device_name()
    dev = catalog_id_for_gpu(name)
    if dev is None:
        raise SpecError("hardware.device", name, "a catalog id (--device; see `trainperf hw`) for this GPU, "
                        "which trainperf cannot map by name")
    return dev


@dataclass(frozen=True)
class BenchOptions:
    """The bench's own options (the workload is separate)."""

    steps: int = 20
    warmup: int | None = None
    launch: LaunchSpec = dataclasses.field(default_factory=LaunchSpec)
    out_dir: str = ""
    data: str | None = None
    seed: int = 0
    compile: bool | None = False
    """torch.compile each block; None: on for fp8 on a GPU (torchtitan's Float8 setup), else off."""
    convention: str | None = None
    """FLOP convention of the run's MFU; None: ``lora`` for a LoRA fine-tune, else megatron
    (:func:`~trainperf.accounting.conventions.run_convention`)."""
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    resume: bool = False
    tensorboard: str | None = None
    lr: float = 1e-3
    quiet: bool = False
    threads: int | None = None
    """Intra-op threads per process on a CPU; None: cores / processes per node."""
    peak_tflops_given: bool = False
    """True when the workload's peak came from ``--peak-tflops`` / the file."""
    precision: dict[str, Any] | None = None
    """How the precision was chosen (:class:`trainperf.measure.precision.PrecisionChoice` as a dict)."""
    stop_grace_s: float = DEFAULT_GRACE_S
    """Seconds the step in progress may take to finish after a stop signal (``--stop-grace``)."""
    force: bool = False
    """Replace the run record of an earlier run in ``out_dir`` (``--force``)."""
    moe: dict[str, Any] | None = None
    """MoE router options given (:class:`~trainperf.measure.moe.MoEOptions` fields); None: defaults."""

    def __post_init__(self) -> None:
        check_bound("--steps", self.steps, BENCH_STEPS)
        if self.warmup is not None and (self.warmup < 0 or self.warmup >= self.steps):
            raise SpecError("--warmup", self.warmup, f"between 0 and steps-1={self.steps - 1}")
        if self.checkpoint_every < 0:
            raise SpecError("--checkpoint-every", self.checkpoint_every, "an integer >= 0")
        if (self.checkpoint_every or self.resume) and not self.checkpoint_dir:
            raise SpecError("--checkpoint-dir", None, "a directory when --checkpoint-every or --resume is given")
        if not self.lr > 0:
            raise SpecError("--lr", self.lr, "a positive learning rate")
        if self.threads is not None:
            check_bound("--threads", self.threads, BENCH_THREADS)
        check_stop_grace(self.stop_grace_s)
        if self.convention is not None:
            get_convention(self.convention)


def default_out_dir() -> str:
    return os.path.join("runs", time.strftime("%Y%m%d-%H%M%S"))


def resolve_peaks(workload: Workload, opts: BenchOptions, threads: int | None,
                  say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The peaks MFU is reported against, first = primary (see the module docstring)."""
    from trainperf.accounting.throughput import resolve_peak

    hw, prec = workload.hardware, workload.precision
    if opts.peak_tflops_given:
        p = resolve_peak(hw, prec)
        return [{"kind": "given", "tflops": p.tflops, "label": f"{prec} peak given by the user ({p.source})"}]
    if hw.kind == "cpu":
        from trainperf.specs.cpu_calibration import load_calibration

        threads = threads or threads_per_process(1)
        cal = load_calibration(threads=threads)
        if cal is None or prec not in cal.peak_tflops:
            cal, _ = calibrate_cpu_peak(workload, threads, say)
        when = cal.measured_at[:16].replace("T", " ")
        quick = " quick" if cal.extra.get("quick") else ""
        label = (f"cpu {prec} calibrated matmul peak ({cal.cpu_model}, {cal.threads} thread(s),{quick} "
                 f"calibration {when})")
        return [{"kind": "calibrated", "tflops": cal.peak_tflops[prec], "label": label, "threads": cal.threads}]
    peaks = []
    for dtype in (prec, "bf16") if prec == "fp8" else (prec,):
        try:
            p = resolve_peak(hw, dtype)
            label = p.source if dtype == prec else f"{p.source}; torchtitan's MFU for Float8 runs uses the bf16 peak"
            peaks.append({"kind": "datasheet", "tflops": p.tflops, "label": label})
        except TrainperfError as e:
            say(f"note: no datasheet {dtype} peak: {e}")
    try:
        import torch

        from trainperf.specs.cpu_calibration import load_calibration

        cal = load_calibration(cpu_model=f"cuda: {torch.cuda.get_device_name()}")
        if cal is not None and prec in cal.peak_tflops:
            peaks.append({"kind": "calibrated", "tflops": cal.peak_tflops[prec],
                          "label": f"{prec} calibrated matmul peak of {cal.cpu_model} ({cal.measured_at})"})
    except (TrainperfError, RuntimeError):
        pass
    return peaks


def calibrate_cpu_peak(workload: Workload, threads: int, say: Callable[[str], None], why: str = ""):
    """Measure this CPU's peak for the run's dtype with ``threads`` threads (quick plan plus the
    run's own GEMM shapes), merge it into the cache keeping the best; returns (calibration, path)."""
    from trainperf.measure.calibrate import CalibrationPlan, calibrate_and_save, model_gemm_shapes

    prec = workload.precision
    plan = dataclasses.replace(CalibrationPlan.quick(), dtypes=(prec,),
                               shapes=model_gemm_shapes(workload.model, workload.micro_batch * workload.seq_len))
    why = why or f"no {prec} CPU calibration cached for this machine and {threads} thread(s)"
    say(f"{why}: measuring the {prec} matmul peak (quick, a few seconds; `trainperf calibrate` does a "
        "longer measurement) ...")
    import torch

    before = torch.get_num_threads()
    try:
        cal, path = calibrate_and_save(plan, threads=threads, keep_best=True)
    finally:
        torch.set_num_threads(before)
    say(f"  {prec} {cal.peak_tflops[prec]:.4f} TFLOP/s with {cal.threads} thread(s); saved to {path}")
    return cal, path


def _run_cpu(precision: str, peak: dict[str, Any], threads: int | None):
    """The ``cpu`` entry as this run's processes see it: the calibration cached for this machine
    (the entry now carries it) with the run's own dtype peak, measured at its threads per
    process, so that ``workload.toml`` records the peak the run was measured against and
    ``trainperf predict`` on it uses the same."""
    from trainperf.specs.hardware import get_hardware

    hw = get_hardware("cpu")
    sources = {**hw.sources, f"peak_tflops.{precision}": f"{peak['label']} (the run's {threads} thread(s) per process)"}
    return dataclasses.replace(hw, peak_tflops={**hw.peak_tflops, precision: peak["tflops"]}, sources=sources,
                               calibrated=True)


def lora_convention(workload: Workload, convention: str | None, say: Callable[[str], None]) -> str:
    """The convention the run's MFU is counted with (:func:`run_convention`): the one asked for,
    else ``lora`` for a LoRA fine-tune (the frozen base computes no weight gradients; seed 000's
    0.8% vs 0.53%), which is then said."""
    resolved = run_convention(convention, workload.lora is not None)
    if convention is None and workload.lora is not None:
        say(f"{workload.lora.describe()}: MFU under the lora convention (frozen base: forward + "
            "activation gradients; adapters: all three passes)")
    return resolved


def prepare(workload: Workload, opts: BenchOptions, say: Callable[[str], None] = print,
            *, local: bool = True) -> tuple[Workload, BenchConfig]:
    """Validate the run and resolve peaks and FLOPs: everything that can fail, before any process.

    Returns the workload (its CPU entry refreshed if a quick calibration just ran) and the config.
    ``local=False`` (a config for other machines, e.g. Slurm) skips the checks of this
    machine's devices and the CPU calibration.
    """
    device_type = _check_device(workload, opts, local)
    check_plan(workload)
    workload = as_run(workload)
    from trainperf.measure.model import check_supported

    check_supported(workload.model)
    moe = check_features(workload, opts, device_type, local)
    compile_ = _resolve_compile(workload, opts, device_type, say)
    _check_inputs(workload, opts, local)
    workload, threads, peaks = _resolve_peaks_and_threads(workload, opts, device_type, local, say)
    convention = lora_convention(workload, opts.convention, say)
    return workload, _bench_config(workload, opts, device_type=device_type, threads=threads, peaks=peaks,
                                   compile_=compile_, convention=convention, moe=moe)


def _check_device(workload: Workload, opts: BenchOptions, local: bool) -> str:
    """Check the workload's bounds, device and device count against the launch; returns the
    device type the bench trains on (``cuda`` or ``cpu``)."""
    device_type = "cuda" if workload.hardware.kind == "gpu" else "cpu"
    check_work_bounds(workload, opts.launch, local=local)
    if workload.hardware.kind not in ("gpu", "cpu"):
        raise SpecError("hardware.device", workload.hardware.id, "a GPU or cpu for the bench (it trains on this machine)")
    if local and device_type == "cuda" and local_device_type() != "cuda":
        raise SpecError("hardware.device", workload.hardware.id,
                        "cpu on this machine (no CUDA/ROCm device is visible to torch)")
    if workload.num_devices != opts.launch.world_size:
        raise SpecError("hardware.num_devices", workload.num_devices,
                        f"--nproc x --nnodes = {opts.launch.world_size} (one process per device)")
    return device_type


def _resolve_compile(workload: Workload, opts: BenchOptions, device_type: str,
                     say: Callable[[str], None]) -> bool:
    """``opts.compile``, or when not given (None): on for Float8 on a GPU, said so, else off."""
    compile_ = opts.compile
    if compile_ is None:
        compile_ = workload.precision == "fp8" and device_type == "cuda"
        if compile_:
            say("compile: on (Float8 on a GPU runs compiled, as torchtitan does; --no-compile for eager)")
    return compile_


def _check_inputs(workload: Workload, opts: BenchOptions, local: bool) -> None:
    """Refuse a data file, TensorBoard or LoRA run this install cannot serve, and an unusable
    checkpoint directory."""
    if opts.data:
        from trainperf.measure.data import TextDataset

        TextDataset.from_path(opts.data, workload.seq_len, workload.model.vocab)  # raises if unusable
    if opts.tensorboard:
        from trainperf.measure.sinks import tensorboard_available

        if not tensorboard_available():
            raise SpecError("--tensorboard", opts.tensorboard, "needs the tensorboard package (pip install tensorboard)")
    if workload.lora is not None and local:
        from trainperf.measure.lora import peft_available

        if not peft_available():
            raise SpecError("--lora-rank", workload.lora.rank, "needs the peft package (pip install peft)")
    from trainperf.measure.checkpoint_manifest import check_checkpoint_dir

    check_checkpoint_dir(opts.checkpoint_dir, resume=opts.resume)  # a --resume checkpoint: verified, unread


def _resolve_peaks_and_threads(workload: Workload, opts: BenchOptions, device_type: str, local: bool,
                               say: Callable[[str], None]) -> tuple[Workload, int | None, list[dict[str, Any]]]:
    """Threads per process (CPU) and the peaks; on this CPU, its kernels calibrated and the
    workload's hardware entry replaced by the run's (:func:`_run_cpu`)."""
    default = threads_per_process(opts.launch.nproc_per_node)
    threads = (opts.threads or default) if device_type == "cpu" else None
    shared = shared_cores_note(opts.launch.nproc_per_node, threads) if local and threads else None
    if shared:
        say(f"warning: {shared}; this run's steps measure them taking turns")
    peaks = resolve_peaks(workload, opts, threads, say) if local else []
    if local and workload.hardware.kind == "cpu" and not opts.peak_tflops_given:
        from trainperf.measure.kernel_calibration import calibrate_for_run

        if threads is not None:
            calibrate_for_run(workload, threads, say)
        workload = workload.replace(hardware=_run_cpu(workload.precision, peaks[0], threads))
    if opts.threads and device_type == "cpu" and opts.threads != default:
        # not the default share of the cores: the run's workload.toml says so, for `predict`
        workload = workload.replace(threads_per_device=opts.threads)
    return workload, threads, peaks


def _bench_config(workload: Workload, opts: BenchOptions, *, device_type: str, threads: int | None,
                  peaks: list[dict[str, Any]], compile_: bool, convention: str,
                  moe: dict[str, Any] | None) -> BenchConfig:
    """The config every process of the run reads: paths made absolute, FLOPs per token counted."""
    from trainperf.specs.workload_file import workload_to_dict

    seq = workload.seq_len
    return BenchConfig(
        workload=workload_to_dict(workload), steps=opts.steps, warmup=opts.warmup, seed=opts.seed,
        data=os.path.abspath(opts.data) if opts.data else None, compile=bool(compile_), lr=opts.lr,
        out_dir=os.path.abspath(opts.out_dir), device_type=device_type, threads=threads,
        flops_per_token=model_flops_per_token(workload.model, seq, convention, lora=workload.lora),
        hardware_flops_per_token=hardware_flops_per_token(workload.model, seq, workload.activation_checkpointing,
                                                          convention, lora=workload.lora),
        peak_tflops=peaks[0]["tflops"] if peaks else None, peak_source=peaks[0]["label"] if peaks else None,
        convention=convention,
        checkpoint_dir=os.path.abspath(opts.checkpoint_dir) if opts.checkpoint_dir else None,
        checkpoint_every=opts.checkpoint_every, resume=opts.resume, tensorboard=opts.tensorboard,
        quiet=opts.quiet, stop_grace_s=float(opts.stop_grace_s), meta={"peaks": peaks, "warmup_given": opts.warmup, "command": " ".join(sys.argv),
                                "precision": opts.precision},
        fp8_base=(opts.precision or {}).get("fp8_base"), moe=moe,
    )


def check_features(workload: Workload, opts: BenchOptions, device_type: str, local: bool) -> dict[str, Any] | None:
    """Float8, context parallel and MoE checks that need the device or the bench's options;
    returns the MoE options as a dict (None for a dense model)."""
    if workload.precision == "fp8" and local:
        from trainperf.measure import fp8

        fp8.check_available(device_type)
    if workload.plan.cp > 1 and local:
        from trainperf.measure import context_parallel

        context_parallel.check_available(device_type)
    if not workload.model.is_moe:
        if opts.moe:
            flag = f"--moe-{next(iter(opts.moe)).replace('_', '-')}"
            raise SpecError(flag, next(iter(opts.moe.values())),
                            f"omitted for {workload.model.name}, a dense model (MoE options need an MoE "
                            "model, e.g. --model debug-moe)")
        return None
    from trainperf.measure.moe import MoEOptions

    return MoEOptions.for_model(workload.model, **(opts.moe or {})).to_dict()


def execute(workload: Workload, cfg: BenchConfig, launch: LaunchSpec,
            say: Callable[[str], None] = print, *, force: bool = False,
            warn: Callable[[str], None] | None = None) -> tuple[dict[str, Any] | None, int]:
    """Run the bench; returns (summary or None if this node holds no record, exit code).

    The output directory is held for the run's life
    (:func:`~trainperf.records.output_path.claim_run_dir`: a second run into it is refused in
    one line; one holding an earlier run's record is refused unless ``force``, which replaces
    it). ``workload.toml`` and ``run_config.json`` are written first. Several processes run
    under torchrun, in this process (:func:`~trainperf.measure.agent.run_torchrun`: logs in the
    directory; a dead worker is one line on ``warn``, default stderr). A stop signal: the step in progress
    finishes, the summary is written with the steps kept, then
    :class:`~trainperf.measure.stop.RunStopped` propagates.
    """
    from trainperf.measure.failures import failure_line
    from trainperf.records.output_path import claim_run_dir

    warn = warn or (lambda m: print(m, file=sys.stderr, flush=True))
    out = Path(cfg.out_dir)
    stop: int | None = None
    failures: list[Any] = []
    with claim_run_dir(out, what="--out", force=force, shared=launch.nnodes > 1, parents=True) as claim:
        if claim.fd is None:
            say(f"note: {out} is on a filesystem without file locks; only the exclusive creation of "
                "steps.jsonl keeps another run out")
        config_path = _write_run_files(out, workload, cfg)
        say(f"bench: {workload.describe()}")
        say(f"output: {out}")
        if launch.distributed:
            stop, rc, failures = _run_distributed(cfg, launch, config_path, say)
        else:
            stop, rc = _run_in_process(cfg, say)
        claim.check_still_there()  # a directory removed mid-run: said so, not "failed before its first step"
        if not (out / "steps.jsonl").exists():
            _no_run_record(out, launch, failures, stop, rc, say)  # raises unless another node holds it
            return None, rc
        summary = _summarize_run(out, workload, rc)
    if failures:
        warn(failure_line(failures, out, steps_kept=summary["steps_completed"], last_step=summary["last_step"]))
    say("")
    say(summary_text(summary, out))
    if stop is not None:
        stopped = RunStopped(stop)
        stopped.summary = summary
        raise stopped
    return summary, rc


def _write_run_files(out: Path, workload: Workload, cfg: BenchConfig) -> Path:
    """Write ``workload.toml`` and ``run_config.json`` into ``out``; returns the config's path."""
    from trainperf.records.output_path import write_text_atomic
    from trainperf.specs.workload_file import dump_workload_toml

    config_path = out / "run_config.json"
    for path, text in ((out / "workload.toml", dump_workload_toml(workload)), (config_path, cfg.to_json())):
        write_text_atomic(path, text, what="--out", force=True)  # never through a FIFO/device/link
    return config_path


def _run_in_process(cfg: BenchConfig, say: Callable[[str], None]) -> tuple[int | None, int]:
    """Train in this process; returns (the stop signal or None, exit code)."""
    from trainperf.measure.trainer import train

    try:
        with stop_signals_raise():
            train(cfg, say=say, interactive=True)
    except RunStopped as e:
        return e.signum, e.exit_code
    except KeyboardInterrupt:
        return signal.SIGINT, 128 + signal.SIGINT
    return None, 0


def _no_run_record(out: Path, launch: LaunchSpec, failures: list[Any], stop: int | None, rc: int,
                   say: Callable[[str], None]) -> None:
    """The run left no ``steps.jsonl``: raise why (failed workers, a stop, a failure), except on
    a node of several, where global rank 0 on another node writes it (said so)."""
    from trainperf.measure.failures import failure_line

    if failures:
        raise RunFailedError(failure_line(failures, out, steps_kept=0, last_step=None))
    if stop is not None:
        raise RunStopped(stop, "before the first step")
    if launch.nnodes > 1:
        say("this node holds no run record: global rank 0 (on another node) writes steps.jsonl")
        return
    where = f"see {out / 'torchrun.log'} and the rank*.log beside it" if launch.distributed \
        else "see the messages above"
    raise RunFailedError(f"the run failed before its first step (exit code {rc}); {where}")


def _summarize_run(out: Path, workload: Workload, rc: int) -> dict[str, Any]:
    """Write ``summary.json`` from the run record, and the MoE load measured into ``workload.toml``."""
    from trainperf.records.output_path import write_text_atomic
    from trainperf.specs.workload_file import dump_workload_toml

    summary = write_summary(out, exit_code=rc)
    measured = stated_imbalance(workload, summary)
    if measured is not workload:
        write_text_atomic(out / "workload.toml", dump_workload_toml(measured), what="--out", force=True)
    return summary


def stated_imbalance(workload: Workload, summary: dict[str, Any]) -> Workload:
    """``workload`` with the MoE load it ran with stated (``training.moe_imbalance``: the median
    over steps of the busiest expert-parallel rank's assignments over the mean), so that
    ``predict`` on the run's ``workload.toml`` prices the load the run had; unchanged without
    expert parallelism or a measurement."""
    got = (summary.get("moe") or {}).get("rank_imbalance_median")
    if workload.plan.ep <= 1 or not isinstance(got, int | float) or not got >= 1.0:
        return workload
    return workload.replace(moe_imbalance=round(float(got), 4))


def _run_distributed(cfg: BenchConfig, launch: LaunchSpec, config_path: Path,
                     say: Callable[[str], None]) -> tuple[int | None, int, list[Any]]:
    """torchrun in this process; returns (the stop signal or None, exit code, the failed workers)."""
    import socket

    from trainperf.measure.agent import run_torchrun

    out = Path(cfg.out_dir)
    node = "" if launch.nnodes == 1 else f"-{socket.gethostname()}"
    say(f"launching {launch.world_size} processes ({launch.nnodes} node(s)) with torchrun; "
        f"their output: {out}/rank<k>.log, torchrun{node}.log")
    try:
        return run_torchrun(torchrun_args(str(config_path), launch), cfg, report=out / f"failures{node}.json",
                            log=out / f"torchrun{node}.log")
    except RunStopped as e:  # before the workers started
        return e.signum, e.exit_code, []
