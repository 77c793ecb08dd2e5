"""``trainperf bench``: train a Llama-family model on this machine and measure every step.

With no arguments: the ``debug`` preset (tiny byte-vocabulary Llama) on the CPU, synthetic
tokens, 20 steps (the first 2 are warm-up), ``--precision auto``: bf16 mixed precision where the
device computes bf16 natively, fp32 elsewhere (:mod:`trainperf.measure.precision`; the summary
says which ran and why). Output goes to ``--out``
(default ``runs/<timestamp>``): ``steps.jsonl``, ``summary.json``, ``workload.toml``; with
``--nproc N``, also each rank's output (``rank<k>.log``) and torchrun's (``torchrun.log``).

One run per output directory: a directory another run is using is refused, and one holding an
earlier run's record too, unless ``--force``. SIGTERM, SIGINT or SIGHUP stop the run after its
step in progress (``--stop-grace``), keep every finished step and write the summary; the exit
code is then 128 + the signal's number. See docs/BENCH.md.
"""

from __future__ import annotations

import argparse
from typing import Any

from trainperf.cli.common import (
    add_convention_argument,
    add_json_argument,
    add_workload_arguments,
    eprint,
    overrides_from_args,
    print_json,
)
from trainperf.errors import SpecError
from trainperf.measure.stop import DEFAULT_GRACE_S

HELP = "train a Llama-family model here (CPU or GPU, 1..N processes) and measure every step"

DEFAULT_MODEL = "debug"
# The default run when neither a workload file nor flags set them: 8 sequences of the debug
# preset's 256 tokens per device, big enough that the matmuls (not Python) dominate a step.
DEFAULT_TRAINING = {"training.seq_len": 256, "training.micro_batch": 8}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_workload_arguments(parser)
    for action in parser._actions:
        if action.dest == "precision":
            action.help = ("auto (default: bf16 where this device computes it natively, else fp32; "
                           "TRAINPERF_NATIVE_BF16=0|1 overrides the detection) | fp32 | bf16 | tf32 | fp16")
    r = parser.add_argument_group("run")
    r.add_argument("--steps", type=int, default=20, metavar="N", help="optimizer steps (default 20)")
    r.add_argument("--warmup", type=int, metavar="N",
                   help="steps left out of the summary (default: first 10%%, at least 1, at most 10)")
    r.add_argument("--nproc", type=int, metavar="N", help="processes on this node (default: num_devices, else 1)")
    r.add_argument("--nnodes", type=int, default=1, metavar="N", help="nodes (multi-node via torchrun c10d)")
    r.add_argument("--node-rank", type=int, metavar="I", help="this node's rank (optional with c10d)")
    r.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="c10d rendezvous on the head node")
    r.add_argument("--rdzv-id", default="trainperf", metavar="ID", help="job id shared by all nodes")
    r.add_argument("--out", metavar="DIR", help="output directory (default runs/<timestamp>)")
    r.add_argument("--parents", action="store_true", help="create missing parent directories of --out")
    r.add_argument("--force", action="store_true",
                   help="replace the files of an earlier run in --out (never those of a run in progress)")
    r.add_argument("--stop-grace", type=float, default=DEFAULT_GRACE_S, metavar="S",
                   help=f"seconds a stopped run's step in progress may take to finish before the run is "
                        f"killed (default {DEFAULT_GRACE_S:g}; torchrun kills what is left 1 s later)")
    r.add_argument("--data", metavar="PATH", help="UTF-8 text file or directory (byte tokens); default synthetic")
    r.add_argument("--seed", type=int, default=0, help="model init and data order (default 0)")
    r.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default 1e-3)")
    r.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile each transformer block (default: on for fp8 on a GPU, as torchtitan "
                        "runs Float8, else off)")
    r.add_argument("--fp8-recipe", metavar="NAME",
                   help="train the linears in Float8 with torchao: tensorwise | rowwise (implies --precision "
                        "fp8; needs torchao: pip install 'trainperf[fp8]')")
    r.add_argument("--threads", type=int, metavar="N",
                   help="CPU threads per process (default: cores / processes; the peak is scaled to match)")
    add_convention_argument(parser, per_run=True)
    c = parser.add_argument_group("checkpoint")
    c.add_argument("--checkpoint-dir", metavar="DIR", help="torch.distributed.checkpoint directory")
    c.add_argument("--checkpoint-every", type=int, default=0, metavar="N", help="save every N steps (0: never)")
    c.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --checkpoint-dir")
    me = parser.add_argument_group("mixture of experts (MoE models, e.g. --model debug-moe)")
    me.add_argument("--moe-aux-loss-coef", type=float, metavar="C",
                    help="load-balancing auxiliary loss weight (default 0.01; 0: off)")
    me.add_argument("--moe-bias-update-rate", type=float, metavar="R",
                    help="DeepSeek's auxiliary-loss-free bias step (default 0.001 where the model has the "
                         "router bias, else 0: off)")
    me.add_argument("--moe-capacity-factor", type=float, metavar="F",
                    help="drop assignments beyond F x an even share per expert (default: dropless)")
    me.add_argument("--moe-grouped-gemm", metavar="HOW",
                    help="auto (default: torch._grouped_mm where it runs here) | grouped | loop")
    lo = parser.add_argument_group("LoRA fine-tune (override [lora]; needs peft)")
    lo.add_argument("--lora-rank", type=int, metavar="R", help="train rank-R LoRA adapters, the base frozen")
    lo.add_argument("--lora-alpha", type=float, metavar="A", help="adapter scaling alpha/R (default alpha = R)")
    lo.add_argument("--lora-targets", metavar="LIST", help="adapted projections (default q,k,v,o,gate,up,down)")
    parser.add_argument("--tensorboard", metavar="DIR", help="also log scalars to TensorBoard (if installed)")
    add_json_argument(parser)


def _has_model(data: dict[str, Any], overrides: dict[str, Any]) -> bool:
    body = data.get("model", {})
    if body.get("preset") or body.get("hf_config") or "model.preset" in overrides or "model.hf_config" in overrides:
        return True
    return all(k in body for k in ("layers", "hidden", "heads", "ffn_hidden", "vocab"))


def bench_precision(requested: str | None, device: str, local: bool = True, nodes: int = 1):
    """The :class:`~trainperf.measure.precision.PrecisionChoice` for ``requested`` (None: auto).

    ``local=False`` (a run on other machines, e.g. Slurm) cannot detect their bf16 support:
    auto then picks bf16 for a GPU (every catalog GPU the bench runs on has bf16 tensor
    cores) and fp32 for a CPU. On CPUs across ``nodes`` > 1 auto is fp32 too: each node's
    launcher would time its own bf16 matmul, and two nodes that decide differently run ranks
    of different dtypes, which the collectives cannot join.
    """
    from trainperf.measure.precision import AUTO, PrecisionChoice, resolve_precision

    device_type = "cpu" if device == "cpu" else "cuda"
    is_auto = not requested or requested.lower() == AUTO
    if local and is_auto and device_type == "cpu" and nodes > 1:
        return PrecisionChoice("fp32", AUTO, f"auto across {nodes} CPU nodes: fp32 (every node must run one "
                                             "dtype; bf16 speed is timed per machine: pass --precision bf16 to "
                                             "run it on all)")
    if local:
        return resolve_precision(requested, device_type)
    if not is_auto:
        assert requested is not None
        return PrecisionChoice(requested, requested, f"{requested} as requested")
    prec = "fp32" if device_type == "cpu" else "bf16"
    return PrecisionChoice(prec, AUTO, f"auto for another machine ({device}): {prec}")


def _workload_inputs(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """The workload file's data, the overrides (flags and the bench's defaults) and the
    :class:`~trainperf.measure.launch.LaunchSpec`; the device and precision are not resolved
    yet (that needs torch)."""
    from trainperf.measure.launch import LaunchSpec
    from trainperf.specs.workload_file import read_workload_file

    data = read_workload_file(args.workload) if args.workload else {}
    ov = overrides_from_args(args)
    ov.update({f"lora.{k}": getattr(args, f"lora_{k}") for k in ("rank", "alpha", "targets")
               if getattr(args, f"lora_{k}", None) is not None})
    if getattr(args, "compile", None):
        ov["training.compile"] = True  # the workload the run writes says so (predict reads it)
    default_model = not _has_model(data, ov)
    if default_model:
        ov["model.preset"] = DEFAULT_MODEL
    # the tiny presets' default batch: the bench's default model, and its MoE twin by name
    if default_model or ov.get("model.preset", data.get("model", {}).get("preset")) == "debug-moe":
        for k, v in DEFAULT_TRAINING.items():
            if k.split(".", 1)[1] not in data.get("training", {}):
                ov.setdefault(k, v)
    hw = data.get("hardware", {})
    nnodes = args.nnodes
    file_devices = ov.get("hardware.num_devices", hw.get("num_devices"))
    nproc = args.nproc
    if nproc is None:
        nproc = max(1, int(file_devices) // nnodes) if isinstance(file_devices, int) and nnodes else 1
    launch = LaunchSpec(nproc_per_node=nproc, nnodes=nnodes, node_rank=args.node_rank,
                        rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id)
    if file_devices is not None and file_devices != launch.world_size:
        raise SpecError("hardware.num_devices", file_devices,
                        f"--nproc x --nnodes = {launch.world_size} (one process per device)")
    ov["hardware.num_devices"] = launch.world_size
    ov["hardware.devices_per_node"] = nproc
    return data, ov, launch


def precheck(args: argparse.Namespace) -> None:
    """The bounds on the bench's own numbers (:mod:`trainperf.measure.limits`), checked before
    torch is imported, so that a refusal is one line in a fraction of a second: steps, threads,
    stop grace, processes and nodes, and the workload's sequence length and micro-batches per
    step (on the workload with the device as given, else ``cpu``, and fp32)."""
    from trainperf.measure.limits import check_bound, check_stop_grace, check_work_bounds
    from trainperf.specs.bounds import BENCH_LR, BENCH_STEPS, BENCH_THREADS
    from trainperf.specs.workload_file import workload_from_dict

    check_bound("--steps", args.steps, BENCH_STEPS)
    if args.threads is not None:
        check_bound("--threads", args.threads, BENCH_THREADS)
    check_stop_grace(args.stop_grace)
    BENCH_LR.check("--lr", args.lr)
    data, ov, launch = _workload_inputs(args)
    if "hardware.device" not in ov and "device" not in data.get("hardware", {}):
        ov["hardware.device"] = "cpu"
    ov["training.precision"] = "fp32"  # any device computes it; "auto" is resolved later
    ov.pop("training.fp8_recipe", None)
    data = {**data, "training": {k: v for k, v in data.get("training", {}).items() if k != "fp8_recipe"}}
    check_work_bounds(workload_from_dict(data, ov), launch, local=False)


def bench_workload(args: argparse.Namespace, *, local: bool = True):
    """(Workload, LaunchSpec, peak given?, PrecisionChoice) from the file, the flags and the defaults."""
    from trainperf.measure.runner import default_device_id
    from trainperf.specs.workload_file import workload_from_dict

    data, ov, launch = _workload_inputs(args)
    hw = data.get("hardware", {})
    if "hardware.device" not in ov and "device" not in hw:
        ov["hardware.device"] = default_device_id()
    peak_given = "hardware.peak_tflops" in ov or "peak_tflops" in hw
    training = data.get("training", {})
    requested = ov.get("training.precision", training.get("precision"))
    recipe = ov.get("training.fp8_recipe", training.get("fp8_recipe"))
    if recipe is not None and (requested is None or str(requested).lower() == "auto"):
        requested = "fp8"  # --fp8-recipe alone asks for Float8; auto never picks it by itself
    if str(requested).lower() == "fp8" and recipe is None:
        from trainperf.measure.fp8 import DEFAULT_RECIPE

        ov["training.fp8_recipe"] = DEFAULT_RECIPE
    device = ov.get("hardware.device", hw.get("device", "cpu"))
    if local:
        from trainperf.measure.runner import check_device_here

        check_device_here(str(device))
    choice = bench_precision(requested, device, local=local, nodes=launch.nnodes)
    ov["training.precision"] = choice.precision
    workload = workload_from_dict(data, ov)
    _check_schedule(workload.plan)
    return workload, launch, peak_given, choice


def _check_schedule(plan: Any) -> None:
    """The bench runs torch.distributed.pipelining's schedules (its stack profile's list), not
    DeepSeek's DualPipe: a plan naming another is refused, not run as 1F1B."""
    from trainperf.predict.stack_capabilities import capabilities_of

    runs = capabilities_of("trainperf-bench").pipeline_schedules
    if plan.pp > 1 and plan.pp_schedule not in runs:
        raise SpecError("parallel.pp_schedule", plan.pp_schedule, f"one the bench runs: {', '.join(runs)}")


def moe_flags(args: argparse.Namespace) -> dict[str, Any] | None:
    """The MoE router options given on the command line (None: none given)."""
    given = {k: getattr(args, f"moe_{k}", None)
             for k in ("aux_loss_coef", "bias_update_rate", "capacity_factor", "grouped_gemm")}
    given = {k: v for k, v in given.items() if v is not None}
    return given or None


def run(args: argparse.Namespace) -> int:
    from trainperf.measure.stop import RunStopped, stop_signals_raise

    try:
        with stop_signals_raise():
            return _run(args)
    except RunStopped as e:
        if args.json and e.summary is not None:
            print_json(e.summary)
        eprint(f"trainperf bench: {e}")
        return e.exit_code


def _run(args: argparse.Namespace) -> int:
    from trainperf.records.output_path import check_run_dir

    precheck(args)  # before torch: a refusal is instant
    from trainperf.measure.runner import BenchOptions, default_out_dir, execute, prepare

    out_dir = args.out or default_out_dir()
    check_run_dir(out_dir, what="--out", inputs=[args.data], parents=args.parents or args.out is None,
                  force=args.force, shared=args.nnodes > 1)
    workload, launch, peak_given, precision = bench_workload(args)
    say = eprint if args.json else (lambda m: print(m, flush=True))
    if precision.warning:
        eprint(precision.warning)
    opts = BenchOptions(
        steps=args.steps, warmup=args.warmup, launch=launch, out_dir=out_dir,
        data=args.data, seed=args.seed, compile=args.compile, convention=args.convention,
        checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every, resume=args.resume,
        tensorboard=args.tensorboard, lr=args.lr, quiet=args.json, threads=args.threads,
        peak_tflops_given=peak_given, precision=precision.to_dict(), stop_grace_s=args.stop_grace,
        force=args.force, moe=moe_flags(args),
    )
    workload, cfg = prepare(workload, opts, say)
    summary, rc = execute(workload, cfg, launch, say, force=opts.force)
    if args.json and summary is not None:
        print_json(summary)
    if summary is not None and summary.get("interrupted"):
        return rc or 1
    return rc
