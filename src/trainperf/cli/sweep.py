"""``trainperf sweep``: the bench at several process counts, and the scaling-efficiency table.

Weak scaling keeps the per-device batch fixed (global batch = micro batch x N); strong scaling
keeps the global batch fixed (more devices, fewer micro-batches each). Efficiency as seeds
001/004 define it (:mod:`trainperf.accounting.scaling`): weak E = (X_N / X_1) / (N / N_1) for
global tokens/s X; strong E = (T_1 N_1) / (T_N N) for step time T. Each run uses FSDP over all
its processes (``--plan dp`` for plain data parallel).

``--compare-lora R`` runs every count twice, as a full fine-tune and as a LoRA fine-tune of
rank R (:mod:`trainperf.specs.lora`) of the same model on the same data, and prints tokens/s
and peak memory side by side (each MFU under its own convention, named). ``--repeats K`` runs
each configuration K times, interleaved, and reports medians.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import os
import statistics
import time
from typing import TYPE_CHECKING, Any

from trainperf.cli.common import eprint, print_json, table
from trainperf.errors import SpecError
from trainperf.numbers import fmt

if TYPE_CHECKING:
    from trainperf.measure.launch import LaunchSpec
    from trainperf.measure.precision import PrecisionChoice
    from trainperf.measure.runner import BenchOptions
    from trainperf.specs.workload import Workload

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
    parser.add_argument("--compare-lora", type=int, metavar="R",
                        help="also run a rank-R LoRA fine-tune of each configuration and compare with full")
    parser.add_argument("--repeats", type=int, default=1, metavar="K",
                        help="runs per configuration, interleaved; medians reported (default 1)")


def lcm_of(text: str) -> int:
    return math.lcm(*_counts(text))


def _counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise SpecError("--nproc", text, "comma-separated positive integers, e.g. 1,2,4") from None
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        raise SpecError("--nproc", text, "distinct positive integers, e.g. 1,2,4")
    from trainperf.specs.bounds import BENCH_NPROC

    if max(counts) > BENCH_NPROC.hi:
        raise SpecError("--nproc", text, f"process counts each {BENCH_NPROC.valid()}")
    return sorted(counts)


def run(args: argparse.Namespace) -> int:
    from trainperf.measure.stop import RunStopped, stop_signals_raise

    try:
        with stop_signals_raise():
            return _run(args)
    except RunStopped as e:
        eprint(f"trainperf sweep: {e}; the runs finished so far are kept")
        return e.exit_code


def _run(args: argparse.Namespace) -> int:
    counts = _counts(args.nproc)
    micro = args.micro_batch or 8
    out_root, parents = _check_sweep(args, micro)
    planned = _plan_runs(args, counts, micro, out_root)
    summaries = _execute_runs(args, planned, out_root, parents)
    results, rows = _results(args, planned, summaries)
    if args.json:
        print_json({"mode": args.mode, "convention": args.convention, "repeats": args.repeats, "runs": results})
        return 0
    _print_table(args, results, rows, out_root)
    return 0


@dataclasses.dataclass(frozen=True)
class _Planned:
    """One configuration of the sweep: its process count, workload and launch, and the bench's
    options for each of its ``--repeats`` runs."""

    nproc: int
    workload: Workload
    launch: LaunchSpec
    opts: list[BenchOptions]


def _check_sweep(args: argparse.Namespace, micro: int) -> tuple[str, bool]:
    """The checks that need no workload, before any work; returns the sweep's root directory and
    whether its missing parents are created."""
    from trainperf.measure.limits import check_bound
    from trainperf.records.output_path import check_run_dir
    from trainperf.specs.bounds import BENCH_REPEATS

    if args.nnodes != 1:
        raise SpecError("--nnodes", args.nnodes, "1 for a sweep (it varies processes on this node)")
    if args.mode == "strong" and args.global_batch and args.global_batch % (micro * lcm_of(args.nproc)):
        raise SpecError("--global-batch", args.global_batch,
                        f"a multiple of micro_batch x lcm(nproc) = {micro * lcm_of(args.nproc)} for strong scaling")
    out_root = args.out or os.path.join("runs", "sweep-" + time.strftime("%Y%m%d-%H%M%S"))
    parents = args.parents or args.out is None
    check_run_dir(out_root, what="--out", inputs=[args.data], parents=parents, force=args.force)
    check_bound("--repeats", args.repeats, BENCH_REPEATS)
    return out_root, parents


def _lora_variants(args: argparse.Namespace) -> list[int | None]:
    """The LoRA ranks every process count runs at (None: a full fine-tune): full and rank R with
    ``--compare-lora R``, else the bench's own ``--lora-rank``."""
    if args.compare_lora is not None and args.compare_lora < 1:
        raise SpecError("--compare-lora", args.compare_lora, "a positive LoRA rank")
    return [None, args.compare_lora] if args.compare_lora else [args.lora_rank]


def _run_args(args: argparse.Namespace, n: int, rank: int | None, micro: int, lcm: int) -> argparse.Namespace:
    """The bench's arguments for one run of the sweep: ``n`` processes, LoRA rank ``rank``, and the
    global batch that the scaling mode asks for."""
    a = copy.copy(args)
    a.nproc = n
    a.micro_batch = micro
    a.lora_rank = rank
    if args.mode == "weak":
        a.global_batch = micro * n
    else:
        a.global_batch = args.global_batch or micro * lcm
    if n > 1 and args.plan == "fsdp" and not (args.tp or args.fsdp or args.dp):
        a.fsdp = n
    return a


def _plan_runs(args: argparse.Namespace, counts: list[int], micro: int, out_root: str) -> list[_Planned]:
    """Every configuration, built and validated before anything runs, so that a bad count stops
    the sweep first."""
    from trainperf.cli.bench import bench_workload, precheck

    # The runner imports torch: without it, that error comes after the cheap checks, before --compare-lora's.
    from trainperf.measure.runner import BenchOptions  # noqa: F401

    lcm = math.lcm(*counts)
    variants = _lora_variants(args)
    planned: list[_Planned] = []
    for n in counts:
        for rank in variants:
            a = _run_args(args, n, rank, micro, lcm)
            precheck(a)
            workload, launch, peak_given, precision = bench_workload(a)
            if args.compare_lora:  # every run in its own process: peak memory (RSS high-water mark) is its own
                launch = dataclasses.replace(launch, own_process=True)
            if rank is None and workload.lora is not None and args.compare_lora:
                workload = workload.replace(lora=None)  # the full fine-tune of a [lora] workload file
            if precision.warning and not planned:
                eprint(precision.warning)
            name = f"nproc{n}" + (f"-lora{workload.lora.rank}" if args.compare_lora and workload.lora else "")
            opts = _bench_options(args, os.path.join(out_root, name), launch, peak_given, precision)
            planned.append(_Planned(n, workload, launch, opts))
    return planned


def _bench_options(args: argparse.Namespace, out_dir: str, launch: LaunchSpec, peak_given: bool,
                   precision: PrecisionChoice) -> list[BenchOptions]:
    """The bench's options for each of a configuration's ``--repeats`` runs (``out_dir``, or
    ``out_dir-runK`` when it runs more than once)."""
    from trainperf.cli.bench import moe_flags
    from trainperf.measure.runner import BenchOptions

    return [BenchOptions(steps=args.steps, warmup=args.warmup, launch=launch,
                         out_dir=out_dir + (f"-run{k + 1}" if args.repeats > 1 else ""),
                         data=args.data, seed=args.seed, compile=args.compile, convention=args.convention,
                         lr=args.lr, quiet=True, threads=args.threads,
                         peak_tflops_given=peak_given, precision=precision.to_dict(),
                         stop_grace_s=args.stop_grace, force=args.force, moe=moe_flags(args))
            for k in range(args.repeats)]


def _execute_runs(args: argparse.Namespace, planned: list[_Planned], out_root: str,
                  parents: bool) -> list[list[dict[str, Any]]]:
    """Run every configuration ``--repeats`` times while ``out_root`` is held; each
    configuration's run summaries, in ``planned``'s order."""
    from trainperf.records.output_path import check_run_dir, claim_run_dir

    for p in planned:  # no run starts unless every run's directory is free
        for o in p.opts:
            check_run_dir(o.out_dir, what="--out", parents=True, force=args.force)
    summaries: list[list[dict[str, Any]]] = [[] for _ in planned]
    with claim_run_dir(out_root, what="--out", inputs=[args.data], parents=parents, force=args.force):
        for k in range(args.repeats):  # interleaved: drift on a shared machine hits every configuration alike
            for i, p in enumerate(planned):
                summaries[i].append(_execute_one(args, p, k))
    return summaries


def _execute_one(args: argparse.Namespace, p: _Planned, k: int) -> dict[str, Any]:
    """Run the ``k``-th repeat of one configuration; its summary, or a one-line error when it
    did not finish with a steady-state step."""
    from trainperf.measure.runner import execute, prepare

    what = p.workload.lora.describe() if p.workload.lora else "full fine-tune"
    eprint(f"--- sweep: {p.nproc} process(es), {args.mode} scaling, {what}"
           + (f", run {k + 1} of {args.repeats}" if args.repeats > 1 else "") + " ---")
    workload, cfg = prepare(p.workload, p.opts[k], eprint)
    summary, rc = execute(workload, cfg, p.launch, eprint, force=args.force)
    if summary is None or summary.get("step_time_median_s") is None or rc != 0:
        raise SpecError("sweep", f"nproc={p.nproc}",
                        f"a run that finishes (it exited {rc}; see {p.opts[k].out_dir})")
    return summary


_MEDIAN_KEYS = ("step_time_median_s", "tokens_per_s", "tokens_per_s_per_device", "tflops_per_device", "mfu_pct",
                "memory_max_GiB")
"""The summary figures reported per configuration, each the median over its runs."""


def _results(args: argparse.Namespace, planned: list[_Planned],
             summaries: list[list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], list[tuple[Any, ...]]]:
    """Per configuration: the ``--json`` record and the table row (medians over its runs, and the
    scaling efficiency against the first count of the same fine-tune)."""
    from trainperf.accounting.scaling import strong_scaling_efficiency, weak_scaling_efficiency

    rows, results = [], []
    bases: dict[int | None, tuple[int, float, float]] = {}
    for p, runs in zip(planned, summaries, strict=True):
        n, workload, opts = p.nproc, p.workload, p.opts
        med = {key: _median([r.get(key) for r in runs]) for key in _MEDIAN_KEYS}
        T, X = med["step_time_median_s"], med["tokens_per_s"]
        assert T is not None and X is not None  # every run was checked above to have a steady-state step
        rank = workload.lora.rank if workload.lora else None
        base = bases.setdefault(rank, (n, T, X))
        eff = (weak_scaling_efficiency(base[0], base[2], n, X) if args.mode == "weak"
               else strong_scaling_efficiency(base[0], base[1], n, T))
        tune = f"LoRA r={rank}" if rank else "full"
        results.append({"nproc": n, "fine_tune": tune, "lora_rank": rank, "global_batch": workload.global_batch,
                        **med, "convention": runs[0]["convention"], "efficiency": eff, "repeats": len(runs),
                        "out": opts[0].out_dir, "outs": [o.out_dir for o in opts]})
        rows.append((n, tune, workload.global_batch, fmt(T), fmt(X), fmt(med["tokens_per_s_per_device"]),
                     fmt(med["tflops_per_device"]), fmt(med["mfu_pct"]), runs[0]["convention"],
                     fmt(med["memory_max_GiB"]), f"{100 * eff:.1f}%"))
    return results, rows


def _print_table(args: argparse.Namespace, results: list[dict[str, Any]], rows: list[tuple[Any, ...]],
                 out_root: str) -> None:
    """The scaling-efficiency table, the rule it follows, and the LoRA-vs-full comparison."""
    rule = ("weak: E = (X_N / X_1) / (N / N_1), X = global tokens/s" if args.mode == "weak"
            else "strong: E = (T_1 x N_1) / (T_N x N), T = median step time")
    print(table(rows, ["processes", "fine-tune", "global batch", "step time (s)", "tokens/s", "tokens/s/device",
                       "TFLOP/s/device", "MFU %", "convention", "peak memory/process (GiB)", "efficiency"]))
    reps = f"; medians of {args.repeats} runs each" if args.repeats > 1 else ""
    print(f"{rule}{reps}; runs under {out_root}")
    if args.compare_lora:
        _print_lora_comparison(results)


def _print_lora_comparison(results: list[dict[str, Any]]) -> None:
    """Per process count: the LoRA fine-tune's tokens/s (and peak memory) over the full fine-tune's."""
    full = {r["nproc"]: r for r in results if r["lora_rank"] is None}
    for r in results:
        if r["lora_rank"] is not None and r["tokens_per_s"] and full[r["nproc"]]["tokens_per_s"]:
            f = full[r["nproc"]]
            mem = (f" and {r['memory_max_GiB'] / f['memory_max_GiB']:.2f}x the peak memory"
                   if r["memory_max_GiB"] and f["memory_max_GiB"] else "")
            print(f"{r['nproc']} process(es): {r['fine_tune']} runs at {r['tokens_per_s'] / f['tokens_per_s']:.2f}x "
                  f"the full fine-tune's tokens/s{mem}")


def _median(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None
