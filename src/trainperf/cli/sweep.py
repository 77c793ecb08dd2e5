"""``trainperf sweep``: the bench at several process counts, and the scaling-efficiency table.

Weak scaling keeps the per-device batch fixed (global batch = micro batch x N); strong scaling
keeps the global batch fixed (more devices, fewer micro-batches each). Efficiency as seeds
001/004 define it (:mod:`trainperf.accounting.scaling`): weak E = (X_N / X_1) / (N / N_1) for
global tokens/s X; strong E = (T_1 N_1) / (T_N N) for step time T. Each run uses FSDP over all
its processes (``--plan dp`` for plain data parallel).
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import time

from trainperf.cli.common import eprint, print_json, table
from trainperf.errors import SpecError
from trainperf.numbers import fmt

HELP = "run the bench at several process counts and print the scaling-efficiency table"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trainperf.cli.bench import add_arguments as bench_arguments

    bench_arguments(parser)
    # --nproc is a list here; replace the bench's single-int option.
    for action in parser._actions:
        if action.dest == "nproc":
            action.type = str
            action.default = "1,2"
            action.help = "comma-separated process counts (default 1,2)"
            action.metavar = "N,N"
    parser.add_argument("--mode", choices=("weak", "strong"), default="weak",
                        help="weak: per-device batch fixed; strong: global batch fixed (default weak)")
    parser.add_argument("--plan", choices=("fsdp", "dp"), default="fsdp",
                        help="data parallelism of the multi-process runs (default fsdp)")


def lcm_of(text: str) -> int:
    return math.lcm(*_counts(text))


def _counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise SpecError("--nproc", text, "comma-separated positive integers, e.g. 1,2,4") from None
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        raise SpecError("--nproc", text, "distinct positive integers, e.g. 1,2,4")
    return sorted(counts)


def run(args: argparse.Namespace) -> int:
    from trainperf.accounting.scaling import strong_scaling_efficiency, weak_scaling_efficiency
    from trainperf.cli.bench import bench_workload
    from trainperf.measure.runner import BenchOptions, execute, prepare

    counts = _counts(args.nproc)
    if args.nnodes != 1:
        raise SpecError("--nnodes", args.nnodes, "1 for a sweep (it varies processes on this node)")
    micro = args.micro_batch or 8
    if args.mode == "strong" and args.global_batch and args.global_batch % (micro * lcm_of(args.nproc)):
        raise SpecError("--global-batch", args.global_batch,
                        f"a multiple of micro_batch x lcm(nproc) = {micro * lcm_of(args.nproc)} for strong scaling")
    lcm = math.lcm(*counts)
    out_root = args.out or os.path.join("runs", "sweep-" + time.strftime("%Y%m%d-%H%M%S"))
    say = eprint
    # Build and validate every run first: a bad count stops the sweep before anything runs.
    planned = []
    for n in counts:
        a = copy.copy(args)
        a.nproc = n
        a.micro_batch = micro
        if args.mode == "weak":
            a.global_batch = micro * n
        else:
            a.global_batch = args.global_batch or micro * lcm
        if n > 1 and args.plan == "fsdp" and not (args.tp or args.fsdp or args.dp):
            a.fsdp = n
        workload, launch, peak_given, precision = bench_workload(a)
        if precision.warning and not planned:
            say(precision.warning)
        opts = BenchOptions(steps=args.steps, warmup=args.warmup, launch=launch,
                            out_dir=os.path.join(out_root, f"nproc{n}"), data=args.data, seed=args.seed,
                            compile=args.compile, convention=args.convention, lr=args.lr, quiet=True,
                            threads=args.threads,
                            peak_tflops_given=peak_given, precision=precision.to_dict())
        planned.append((n, workload, launch, opts))
    rows, results = [], []
    base = None
    for n, workload, launch, opts in planned:
        say(f"--- sweep: {n} process(es), {args.mode} scaling ---")
        workload, cfg = prepare(workload, opts, say)
        summary, rc = execute(workload, cfg, launch, say)
        if summary is None or summary.get("step_time_median_s") is None or rc != 0:
            raise SpecError("sweep", f"nproc={n}", f"a run that finishes (it exited {rc}; see {opts.out_dir})")
        T, X = summary["step_time_median_s"], summary["tokens_per_s"]
        if base is None:
            base = (n, T, X)
        eff = (weak_scaling_efficiency(base[0], base[2], n, X) if args.mode == "weak"
               else strong_scaling_efficiency(base[0], base[1], n, T))
        results.append({"nproc": n, "global_batch": workload.global_batch, "step_time_median_s": T,
                        "tokens_per_s": X, "tokens_per_s_per_device": summary["tokens_per_s_per_device"],
                        "tflops_per_device": summary["tflops_per_device"], "mfu_pct": summary["mfu_pct"],
                        "efficiency": eff, "out": opts.out_dir})
        rows.append((n, workload.global_batch, fmt(T), fmt(X), fmt(summary["tokens_per_s_per_device"]),
                     fmt(summary["tflops_per_device"]), fmt(summary["mfu_pct"]), f"{100 * eff:.1f}%"))
    if args.json:
        print_json({"mode": args.mode, "convention": args.convention, "runs": results})
        return 0
    rule = ("weak: E = (X_N / X_1) / (N / N_1), X = global tokens/s" if args.mode == "weak"
            else "strong: E = (T_1 x N_1) / (T_N x N), T = median step time")
    print(table(rows, ["processes", "global batch", "step time (s)", "tokens/s", "tokens/s/device",
                       "TFLOP/s/device", "MFU %", "efficiency"]))
    print(f"{rule}; convention {args.convention}; runs under {out_root}")
    return 0
