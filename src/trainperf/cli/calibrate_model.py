"""``trainperf calibrate-model``: fit the predictor's efficiency knobs to measured runs."""

from __future__ import annotations

import argparse
import json

from trainperf.cli.common import add_json_argument, add_output_arguments, print_json, table

HELP = "fit the predictor's efficiency knobs to measured runs and write a calibration file"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="bench run directories, JSONL run files, or published:<id|vendor|device|all>")
    parser.add_argument("--holdout", nargs="*", default=[], metavar="RUN",
                        help="runs to predict after fitting (not used to fit); their error is reported")
    parser.add_argument("--knobs", metavar="A,B",
                        help="knobs to fit (default: matmul_efficiency, then op_overhead_us, then "
                             "memory_efficiency, no more than the number of runs)")
    parser.add_argument("--statistic", default="median", choices=("median", "p10", "min"),
                        help="step time of a measured run to fit: median (default), or p10/min on a "
                             "shared, loaded machine")
    parser.add_argument("--calibration", metavar="FILE", help="start from this calibration file's values")
    parser.add_argument("-o", "--output", default="calibration.json", metavar="FILE",
                        help="calibration file to write (default calibration.json; an existing one is "
                             "replaced only with --force)")
    add_output_arguments(parser)
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from trainperf.errors import SpecError
    from trainperf.predict.calibrate import error_rows, fit_knobs, load_runs, observation_from_run
    from trainperf.predict.step import load_calibration, resolve_knobs
    from trainperf.records.output_path import check_output_file, write_text_atomic

    inputs = [*args.runs, *args.holdout, args.calibration]
    safe = {"what": "--output", "inputs": inputs, "force": args.force, "parents": args.parents}
    check_output_file(args.output, **safe)  # refuse before fitting (one line, exit 2)
    obs = [observation_from_run(r, statistic=args.statistic) for spec in args.runs for r in load_runs(spec)]
    held = [observation_from_run(r, statistic=args.statistic) for spec in args.holdout for r in load_runs(spec)]
    devices = {o.workload.hardware.id for o in obs}
    if len(devices) != 1:
        raise SpecError("runs", sorted(devices), "runs of one device (fit each device separately)")
    device = devices.pop()
    start = load_calibration(args.calibration) if args.calibration else None
    base = resolve_knobs(obs[0].workload, start)
    free = [k.strip() for k in args.knobs.split(",")] if args.knobs else None
    res = fit_knobs(obs, base, free)
    held_rows = error_rows(res.knobs, held) if held else ()
    out = {
        "format": "trainperf-calibration", "version": 1,
        "devices": {device: {n: getattr(res.knobs, n) for n in res.fitted}},
        "fitted_knobs": list(res.fitted), "fitted_on": [o.name for o in obs],
        "fit_rows": list(res.rows), "holdout_rows": list(held_rows),
        "fit_mape_pct": res.mape_pct,
        "holdout_mape_pct": (sum(r["abs_pct_error"] for r in held_rows) / len(held_rows)) if held_rows else None,
    }
    write_text_atomic(args.output, json.dumps(out, indent=2) + "\n", **safe)
    if args.json:
        print_json({**out, "output": args.output})
        return 0
    print(f"fitted {', '.join(res.fitted)} of {device} to {len(obs)} run(s):")
    for n in res.fitted:
        print(f"  {n} = {getattr(res.knobs, n):.4g}")
    rows = [("fit", r["name"], f"{r['measured_step_time_s']:.4g}", f"{r['predicted_step_time_s']:.4g}",
             f"{r['abs_pct_error']:.1f}") for r in res.rows]
    rows += [("held out", r["name"], f"{r['measured_step_time_s']:.4g}", f"{r['predicted_step_time_s']:.4g}",
              f"{r['abs_pct_error']:.1f}") for r in held_rows]
    print(table(rows, ["", "run", "measured s", "predicted s", "abs err %"]))
    print(f"fit MAPE {out['fit_mape_pct']:.2f}%"
          + (f"; held-out MAPE {out['holdout_mape_pct']:.2f}%" if held_rows else ""))
    print(f"wrote {args.output} (use: trainperf predict ... --calibration {args.output})")
    return 0
