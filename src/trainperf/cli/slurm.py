"""``trainperf slurm``: write an sbatch script that runs the bench on K nodes (submit with --submit).

One Slurm task per node runs ``torchrun`` for the node's devices, with c10d rendezvous on the
job's first node; after training, the script writes ``summary.json`` from the run record.
The run configuration (workload, steps, FLOPs per token, peaks) is resolved here and written
next to the script, so every node trains exactly what was validated.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

from trainperf.cli.common import print_json
from trainperf.errors import SpecError

if TYPE_CHECKING:
    from trainperf.measure.launch import SlurmSpec
    from trainperf.measure.trainer import BenchConfig
    from trainperf.specs.workload import Workload

HELP = "write (and optionally submit) an sbatch script that runs the bench on K nodes"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trainperf.cli.bench import add_arguments as bench_arguments

    bench_arguments(parser)
    s = parser.add_argument_group("slurm")
    s.add_argument("--nodes", type=int, required=True, metavar="K", help="nodes to run on")
    s.add_argument("--gpus-per-node", type=int, metavar="G",
                   help="processes per node (default: the workload's devices_per_node, else 8 GPUs or 1 CPU)")
    s.add_argument("--partition", metavar="NAME")
    s.add_argument("--account", metavar="NAME")
    s.add_argument("--time", default="00:30:00", metavar="HH:MM:SS", help="job time limit (default 00:30:00)")
    s.add_argument("--job-name", default="trainperf-bench")
    s.add_argument("--port", type=int, default=29500, help="rendezvous port on the head node (default 29500)")
    s.add_argument("--submit", action="store_true", help="run sbatch on the script (default: only write it)")
    for action in parser._actions:  # the bench's --force, said for the script
        if action.dest == "force":
            action.help = ("replace the script and configuration files of an earlier `slurm` run in --out, and "
                           "remove the record of a run that already ran there")


def run(args: argparse.Namespace) -> int:
    from trainperf.measure.launch import check_slurm_values
    from trainperf.measure.limits import check_bound
    from trainperf.measure.runner import default_out_dir
    from trainperf.specs.bounds import BENCH_NNODES, BENCH_NPROC

    check_bound("--nodes", args.nodes, BENCH_NNODES)
    out = os.path.abspath(args.out or default_out_dir())
    check_slurm_values(job_name=args.job_name, time_limit=args.time, partition=args.partition,
                       account=args.account, out_dir=out)  # before any work: the script's every value
    if args.gpus_per_node is not None:
        check_bound("--gpus-per-node", args.gpus_per_node, BENCH_NPROC)
    if args.device is None and not args.workload:
        raise SpecError("--device", None, "the nodes' device id, e.g. h100-sxm (or cpu); see `trainperf hw`")
    per_node = _processes_per_node(args)
    workload, cfg = _prepare_run(args, out, per_node)
    paths = _JobPaths(out)
    _write_job(args, paths, per_node, workload, cfg)
    result = {"script": paths.script, "config": paths.config, "nodes": args.nodes, "per_node": per_node,
              "workload": workload.describe(), "submitted": False}
    if args.submit:
        result["sbatch"] = _submit(paths.script)
        result["submitted"] = True
    if args.json:
        print_json(result)
        return 0
    print(f"wrote {paths.script} ({args.nodes} nodes x {per_node} processes: {workload.describe()})")
    print(result.get("sbatch") or f"submit with: sbatch {paths.script}")
    return 0


@dataclasses.dataclass(frozen=True)
class _JobPaths:
    """The files a ``slurm`` run writes into its ``--out`` directory."""

    out: str

    @property
    def config(self) -> str:
        """The run configuration every node trains from."""
        return os.path.join(self.out, "run_config.json")

    @property
    def script(self) -> str:
        """The sbatch script."""
        return os.path.join(self.out, "bench.sbatch")

    @property
    def workload(self) -> str:
        """The resolved workload, as a workload file."""
        return os.path.join(self.out, "workload.toml")


def _processes_per_node(args: argparse.Namespace) -> int:
    """``--gpus-per-node``, else ``--nproc``, else one process per device of a node of the
    device (``--device``, else the workload file's; one for a CPU)."""
    per_node: int | None = args.gpus_per_node or args.nproc
    if per_node is None:
        from trainperf.specs.hardware import get_hardware

        dev = args.device
        if dev is None:
            from trainperf.specs.workload_file import read_workload_file

            dev = read_workload_file(args.workload).get("hardware", {}).get("device", "cpu")
        per_node = 1 if get_hardware(dev).kind == "cpu" else get_hardware(dev).devices_per_node
    return per_node


def _prepare_run(args: argparse.Namespace, out: str, per_node: int) -> tuple[Workload, BenchConfig]:
    """The workload and the run configuration every node trains, resolved and validated here
    (``args`` is set to ``per_node`` processes on each of ``--nodes`` nodes)."""
    from trainperf.cli.bench import bench_workload, moe_flags, precheck
    from trainperf.measure.runner import BenchOptions, prepare

    args.nproc, args.nnodes = per_node, args.nodes
    args.rdzv_endpoint = "head-node:0"  # placeholder for validation; the script finds the head node
    precheck(args)
    workload, launch, peak_given, precision = bench_workload(args, local=False)
    opts = BenchOptions(steps=args.steps, warmup=args.warmup, launch=launch, out_dir=out, data=args.data,
                        seed=args.seed, compile=args.compile, convention=args.convention,
                        checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
                        resume=args.resume, tensorboard=None, lr=args.lr, peak_tflops_given=peak_given,
                        precision=precision.to_dict(), stop_grace_s=args.stop_grace, force=args.force,
                        moe=moe_flags(args))
    workload, cfg = prepare(workload, opts, local=False)
    if workload.hardware.kind == "gpu":
        _use_datasheet_peak(workload, cfg)
    return workload, cfg


def _use_datasheet_peak(workload: Workload, cfg: BenchConfig) -> None:
    """Set ``cfg``'s peak to the GPU's datasheet figure, when there is one for its precision
    (``prepare(local=False)`` resolves no peak for other machines)."""
    from trainperf.accounting.throughput import resolve_peak

    try:
        p = resolve_peak(workload.hardware, workload.precision)
        cfg.peak_tflops, cfg.peak_source = p.tflops, p.source
        cfg.meta["peaks"] = [{"kind": "datasheet", "tflops": p.tflops, "label": p.source}]
    except SpecError:
        pass


def _slurm_spec(args: argparse.Namespace, paths: _JobPaths, per_node: int, workload: Workload) -> SlurmSpec:
    """What the sbatch script is written from."""
    from trainperf.measure.launch import SlurmSpec

    return SlurmSpec(nodes=args.nodes, gpus_per_node=per_node, config_path=paths.config, out_dir=paths.out,
                     job_name=args.job_name, time_limit=args.time, partition=args.partition,
                     account=args.account, port=args.port, cpu=workload.hardware.kind == "cpu",
                     stop_grace_s=args.stop_grace)


def _write_job(args: argparse.Namespace, paths: _JobPaths, per_node: int, workload: Workload,
               cfg: BenchConfig) -> None:
    """Write the run configuration, the workload file and the sbatch script into ``--out``, every
    one of them checked before any is written, while the directory is held."""
    from trainperf.measure.launch import sbatch_script
    from trainperf.records.output_path import (
        check_output_file,
        check_run_dir,
        claim_run_dir,
        write_text_atomic,
    )
    from trainperf.specs.workload_file import dump_workload_toml

    files = {paths.config: cfg.to_json(), paths.workload: dump_workload_toml(workload)}
    safe = {"what": "--out", "inputs": [args.workload, args.data], "force": args.force}
    parents = args.parents or args.out is None
    spec = _slurm_spec(args, paths, per_node, workload)
    # The job's trainer creates steps.jsonl exclusively: a directory holding a run that already
    # ran is refused here, or (--force) its record removed, while the directory is held.
    check_run_dir(paths.out, what="--out", inputs=[args.workload, args.data], parents=parents, force=args.force)
    for path in [*files, paths.script]:  # refuse before writing (or locking) anything
        check_output_file(path, **safe, parents=True)  # the directory itself: checked above
    with claim_run_dir(paths.out, what="--out", inputs=[args.workload, args.data], parents=parents,
                       force=args.force):
        for path in [*files, paths.script]:  # refuse before writing any of them
            check_output_file(path, **safe)
        for path, text in files.items():
            write_text_atomic(path, text, **safe)
        write_text_atomic(paths.script, sbatch_script(spec, python=sys.executable), **safe)


def _submit(script_path: str) -> str:
    """Submit the script with ``sbatch``; what sbatch printed (its job id line)."""
    if shutil.which("sbatch") is None:
        raise SpecError("--submit", True, "a machine with Slurm's sbatch on PATH (the script is written)")
    proc = subprocess.run(["sbatch", script_path], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SpecError("sbatch", script_path, f"accepted by Slurm ({proc.stderr.strip() or proc.returncode})")
    return proc.stdout.strip()
