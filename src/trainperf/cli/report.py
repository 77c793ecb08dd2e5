"""``trainperf report``: one self-contained HTML page (plus Markdown and PNGs) for runs, sweeps
and comparisons with published results."""

from __future__ import annotations

import argparse

from trainperf.cli.common import (
    add_convention_argument,
    add_json_argument,
    add_output_arguments,
    print_json,
    shown,
    table,
)
from trainperf.numbers import fmt
from trainperf.specs.bounds import PEAK_TFLOPS, WARMUP_STEPS

HELP = "write a self-contained HTML report (plus Markdown and PNGs) of runs, sweeps and published comparisons"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN_OR_DIR",
                        help="trainperf JSONL run records, bench output directories, directories of "
                             "them (a sweep), or framework logs")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="directory for index.html, report.md and the PNGs (created if its parent "
                             "exists; an earlier report there is replaced only with --force)")
    add_output_arguments(parser)
    add_convention_argument(parser, per_run=True)
    parser.add_argument("--peak-tflops", type=float, metavar="X",
                        help="dense peak TFLOP/s per device for MFU instead of the catalog's")
    parser.add_argument("--warmup", type=int, metavar="N",
                        help="steps to exclude as warm-up (default: the run's own, else the first 10%%)")
    parser.add_argument("--workload", metavar="FILE",
                        help="workload file completing logs that do not state the model or device")
    parser.add_argument("--calibration", metavar="FILE",
                        help="predictor calibration file (from `trainperf calibrate-model`) for the "
                             "predicted-vs-measured breakdown")
    parser.add_argument("--title", metavar="TEXT", help="page title")
    parser.add_argument("--no-published", action="store_true",
                        help="leave out the comparison with published results")
    parser.add_argument("--no-predict", action="store_true",
                        help="leave out the predicted-vs-measured breakdown")
    add_json_argument(parser)


def refuse_file_as_out_dir(out: str) -> None:
    """``--out`` names the report's directory: an existing regular file there is refused in one
    line that says so (the report never replaces a file with a directory, even with --force;
    --force replaces an earlier report's files inside a directory)."""
    import os
    import stat

    from trainperf.records.output_path import OutputPathError

    try:
        st = os.stat(out)
    except (OSError, ValueError):
        return  # missing (or unreadable): check_output_dir says what is wrong with it
    if stat.S_ISREG(st.st_mode):
        raise OutputPathError(f"--out {out!r} already exists and is a file, not a directory (the report "
                              "needs one): give another path (--force replaces an earlier report's files in a directory, "
                              "never a file)")


def run(args: argparse.Namespace) -> int:
    from trainperf.report import build_report

    if args.warmup is not None:
        WARMUP_STEPS.check("--warmup", args.warmup)
    if args.peak_tflops is not None:
        PEAK_TFLOPS.check("--peak-tflops", args.peak_tflops)
    refuse_file_as_out_dir(args.out)
    workload = None
    if args.workload:
        from trainperf.specs.workload_file import load_workload

        workload = load_workload(args.workload)
    calibration = None
    if args.calibration:
        from trainperf.predict.step import load_calibration

        calibration = load_calibration(args.calibration)
    rep = build_report(args.runs, args.out, convention=args.convention, peak_tflops=args.peak_tflops,
                       warmup=args.warmup, workload=workload, use_published=not args.no_published,
                       use_predictor=not args.no_predict, title=args.title, calibration=calibration,
                       force=args.force, parents=args.parents)
    if args.json:
        print_json(rep.to_dict())
        return 0
    rows = [[s.summary.name + (" (interrupted)" if s.summary.interrupted else ""), s.summary.steps_measured, fmt(s.summary.step_time_median_s),
             fmt(s.summary.tokens_per_s), fmt(s.summary.tflops_per_device), fmt(s.summary.mfu_pct)]
            for s in rep.runs]
    print(table(rows, ["run", "steps", "median step (s)", "tokens/s", f"TFLOP/s/device ({rep.convention})",
                       "MFU %"]))
    sections = [f"{len(rep.runs)} run(s)"]
    if rep.explanations:
        sections.append(f"{len(rep.explanations)} predicted-vs-measured")
    if rep.sweeps:
        sections.append(f"{len(rep.sweeps)} sweep(s)")
    if rep.comparisons:
        sections.append(f"{len(rep.comparisons)} published comparison(s)")
    print(f"\nwrote {rep.html_path} ({', '.join(sections)}; {fmt(len(rep.figures))} figures), "
          f"{rep.markdown_path}")
    for note in rep.notes:
        print(f"note: {shown(note)}")
    return 0
