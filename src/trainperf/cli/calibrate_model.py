"""``trainperf calibrate-model``: fit the predictor's efficiency knobs to measured runs."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path

from trainperf.cli.common import add_json_argument, add_output_arguments, print_json, table

HELP = "fit a software-stack profile (.toml, for --stack) or device knobs (.json) to measured runs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="bench run directories, JSONL run files, row:<row_id> / table:<table_id> of the "
                             "published-runs table, or published:<row|table|device|vendor|all> (its rows)")
    parser.add_argument("--data", metavar="FILE.csv",
                        help="a runs file with the packaged table's columns: row:<row_id> and table:<table_id> "
                             "name its rows (read as `trainperf validate --data` reads them; a table's unread "
                             "rows are listed and left out)")
    parser.add_argument("--holdout", nargs="*", default=[], metavar="RUN",
                        help="runs to predict after fitting (not used to fit); their error is reported")
    parser.add_argument("--knobs", metavar="A,B",
                        help="knobs to fit (a .json calibration: default matmul_fraction, then op_overhead_us, "
                             "then memory_bound_fraction, no more than the number of runs; a .toml profile: the "
                             "GEMM shares of each generation plus attention, memory-bound, overhead and overlap "
                             "shares, pulled towards the base stack)")
    parser.add_argument("--statistic", default="median", choices=("median", "p10", "min"),
                        help="step time of a measured run to fit: median (default), or p10/min on a "
                             "shared, loaded machine")
    parser.add_argument("--calibration", metavar="FILE", help="start from this calibration file's values")
    parser.add_argument("-o", "--output", default="calibration.json", metavar="FILE",
                        help="file to write: a stack profile if it ends in .toml (use with --stack FILE), "
                             "else a JSON device calibration (default calibration.json); an existing file "
                             "is replaced only with --force")
    add_output_arguments(parser)
    parser.add_argument("--stack", metavar="NAME|FILE",
                        help="profile to start from when writing a .toml profile (default: the runs' own stack, "
                             "else generic)")
    parser.add_argument("--name", help="name of the profile written (default: the output file's stem)")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from trainperf.errors import SpecError
    from trainperf.predict.calibrate import error_rows, fit_knobs, load_runs, observation_from_run
    from trainperf.predict.step import load_calibration, resolve_knobs
    from trainperf.records.output_path import check_output_file, write_text_atomic

    inputs = [*args.runs, *args.holdout, args.calibration]
    safe = {"what": "--output", "inputs": inputs, "force": args.force, "parents": args.parents}
    check_output_file(args.output, **safe)  # refuse before fitting (one line, exit 2)
    _check_knobs_and_name(args)
    unread: list[dict] = []
    load = _table_loader(args.data, unread, load_runs)
    fit_runs = [r for spec in args.runs for r in load(spec)]
    held_runs = [r for spec in args.holdout for r in load(spec)]
    _say_skipped([*fit_runs, *held_runs], args.json)
    obs = [observation_from_run(r, statistic=args.statistic) for r in fit_runs]
    held = [observation_from_run(r, statistic=args.statistic) for r in held_runs]
    args.unread = unread
    if unread and not args.json:
        print(f"not used ({len(unread)} rows of the selected tables could not be read):")
        for u in unread:
            print(f"  row {u['row_id']} ({u['table_id']}): {u['reason']}")
    if str(args.output).endswith(".toml"):
        return _write_profile(args, obs, held, safe)
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
        "unread_rows": args.unread,
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


def _say_skipped(runs: list, quiet: bool) -> None:
    """One note per run record with damaged lines (skipped, not fitted on), as compare and report say."""
    from trainperf.cli.common import eprint, shown
    from trainperf.records.jsonl import describe_skipped

    for r in runs:
        said = describe_skipped(r.meta.get("skip_reasons") or {}) if isinstance(r.meta.get("skip_reasons"), dict) \
            else ""
        if said:
            (eprint if quiet else print)(f"note: {shown(r.name)}: {said}")


PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+@-]{0,63}")
"""A profile's name: what ``--stack`` names it by and the TOML file's ``name``."""


def _check_knobs_and_name(args: argparse.Namespace) -> None:
    """Before any fit (one line, exit 2): ``--knobs`` names knobs a .json calibration can fit (a
    .toml profile fits its own shares: ``--knobs`` is refused there rather than ignored), and
    the profile's name (``--name``, else the output's stem) is one a profile file can carry."""
    from trainperf.errors import SpecError
    from trainperf.predict.efficiency import KNOB_NAMES

    toml = str(args.output).endswith(".toml")
    if args.knobs is not None:
        if toml:
            raise SpecError("--knobs", args.knobs, "only with a .json --output: a .toml profile fits the GEMM, "
                                                   "attention, memory-bound, overhead and overlap shares itself")
        for k in args.knobs.split(","):
            if k.strip() not in KNOB_NAMES:
                raise SpecError("--knobs", k.strip(), f"comma-separated, of {', '.join(KNOB_NAMES)}")
    if toml:
        name = args.name if args.name is not None else Path(args.output).stem
        if not PROFILE_NAME.fullmatch(name):
            flag = "--name" if args.name is not None else "--name (the output file's stem is not one)"
            raise SpecError(flag, name, "1 to 64 letters, digits and ._+@- (starting with a letter or digit)")


def _write_profile(args: argparse.Namespace, obs: list, held: list, safe: dict) -> int:
    """Fit a stack profile (over generic and a starting stack) and write it as TOML."""
    from trainperf.predict.fit_profiles import FitRow, Prediction, fit_user_profile, summarize
    from trainperf.predict.stacks import DEFAULT_STACK, knobs_with_profiles, load_profile, packaged_profile
    from trainperf.predict.step import as_float
    from trainperf.predict.step_model import layout_of, step_time_s

    name = args.name or Path(args.output).stem
    start = args.stack or next((getattr(o.workload, "stack", "") for o in obs
                                if getattr(o.workload, "stack", DEFAULT_STACK) != DEFAULT_STACK), DEFAULT_STACK)
    base = [packaged_profile(DEFAULT_STACK)]
    if start != DEFAULT_STACK:
        base.append(load_profile(start))
    rows = [FitRow(o.name, o.name, name, o.workload, o.measured_step_time_s, o.trainable_fraction) for o in obs]
    prof, fit_preds = fit_user_profile(rows, name, base)
    from trainperf.records.output_path import write_text_atomic

    write_text_atomic(args.output, "# trainperf software-stack profile written by `trainperf calibrate-model`; "
                      f"use: --stack {args.output}\n" + prof.to_toml(), **safe)
    held_preds = []
    for o in held:
        k = knobs_with_profiles(o.workload.hardware, [base[0], prof])
        p = as_float(step_time_s(layout_of(o.workload, o.trainable_fraction), k.numbers()))
        held_preds.append(Prediction(o.name, o.name, name, o.measured_step_time_s, p))
    fit_s, held_s = summarize(fit_preds), summarize(held_preds)
    out = {"format": "trainperf-stack-profile", "output": args.output, "name": name, "base": [p.name for p in base],
           "generations": {g: dict(v) for g, v in prof.generations.items()},
           "fit_rows": [p.__dict__ | {"signed_pct": p.signed_pct} for p in fit_preds],
           "holdout_rows": [p.__dict__ | {"signed_pct": p.signed_pct} for p in held_preds],
           "fit_mape_pct": fit_s["mape_pct"], "holdout_mape_pct": held_s["mape_pct"] if held_preds else None,
           "unread_rows": args.unread}
    if args.json:
        print_json(out)
        return 0
    print(f"profile {name!r} over {', '.join(p.name for p in base)}, fitted to {len(obs)} run(s):")
    for g, vals in prof.generations.items():
        print(f"  [{g}] " + ", ".join(f"{k} = {v:.4g}" for k, v in vals.items()
                                      if "calibrate-model" in prof.sources.get(f"{g}.{k}", "")))
    table_rows = [("fit", p.name, f"{p.measured_step_time_s:.4g}", f"{p.predicted_step_time_s:.4g}", f"{p.signed_pct:+.1f}")
                  for p in fit_preds]
    table_rows += [("held out", p.name, f"{p.measured_step_time_s:.4g}", f"{p.predicted_step_time_s:.4g}",
                    f"{p.signed_pct:+.1f}") for p in held_preds]
    print(table(table_rows, ["", "run", "measured s", "predicted s", "signed err %"]))
    print(f"fit MAPE {fit_s['mape_pct']:.2f}%" + (f"; held-out MAPE {held_s['mape_pct']:.2f}%" if held_preds else ""))
    print(f"wrote {args.output} (use: trainperf predict ... --stack {args.output})")
    return 0


def _table_loader(data: str | None, unread: list, load_runs: Callable[[str], list]) -> Callable[[str], list]:
    """``row:``/``table:`` specs read from the runs file ``data`` (others as ``load_runs`` reads
    them). A named row that cannot be read is a one-line error with its reason; a table's
    unread rows are left out and appended to ``unread`` (row, table, reason)."""
    if not data:
        return load_runs
    from trainperf.errors import SpecError
    from trainperf.predict.runs_table import load_table_runs, select_runs

    runs = load_table_runs(data)

    def load(spec: str) -> list:
        if not spec.startswith(("row:", "table:")):
            return load_runs(spec)
        picked = select_runs(runs, spec, where=f"runs file {data!r}")
        bad = [r for r in picked if not r.included]
        if spec.startswith("row:") and bad:
            raise SpecError("run", spec, f"a row trainperf can read (row {bad[0].row_id}: {bad[0].exclude_reason})")
        unread.extend({"row_id": r.row_id, "table_id": r.table_id, "reason": r.exclude_reason} for r in bad)
        good = [r.to_run_record() for r in picked if r.included]
        if not good:
            raise SpecError("run", spec, f"a table with at least one readable row ({len(bad)} unread)")
        return good

    return load
