"""``trainperf validate``: predicted vs published step time for every published result."""

from __future__ import annotations

import argparse

from trainperf.cli.common import add_json_argument, print_json, table

HELP = "predict every published result and report the error per row and the MAPE"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calibration", metavar="FILE", help="knob values from `trainperf calibrate-model`")
    parser.add_argument("--holdout", action="store_true",
                        help="also leave-one-out: refit each device's knobs without the row, then predict it")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from trainperf.predict.step import load_calibration
    from trainperf.predict.validate import validate

    cal = load_calibration(args.calibration) if args.calibration else None
    v = validate(calibration=cal, holdout=args.holdout)
    if args.json:
        print_json(v.to_dict())
        return 0
    headers = ["id", "device", "published s", "predicted s", "abs err %"]
    if args.holdout:
        headers += ["held-out s", "held-out err %"]
    for vendor, stats in v.by_vendor().items():
        rows = []
        for r in v.rows:
            if r.vendor != vendor or not r.included:
                continue
            row = [r.id + (" *" if r.derived_from else ""), r.device, f"{r.published_step_time_s:.4g}",
                   f"{r.predicted_step_time_s:.4g}", f"{r.abs_pct_error:.1f}"]
            if args.holdout:
                row += [f"{r.holdout_predicted_step_time_s:.4g}", f"{r.holdout_abs_pct_error:.1f}"]
            rows.append(row)
        print(f"{vendor}: {int(stats['rows'])} rows, MAPE {stats['mape_pct']:.1f}%, "
              f"worst {stats['max_abs_pct_error']:.1f}%"
              + (f", held-out MAPE {stats['holdout_mape_pct']:.1f}%" if "holdout_mape_pct" in stats else ""))
        print(table(rows, headers))
        print()
    excluded = [r for r in v.rows if not r.included]
    if excluded:
        print("not averaged (catalog says why):")
        for r in excluded:
            print(f"  {r.id}: published {r.published_step_time_s:.4g} s, predicted "
                  f"{r.predicted_step_time_s:.4g} s ({r.abs_pct_error:.0f}%): {r.exclude_reason}")
        print()
    worst = v.worst
    print(f"MAPE {v.mape_pct:.2f}% over {len(v.included)} rows; worst row {worst.id} "
          f"{worst.abs_pct_error:.1f}%" if worst else "no rows")
    if v.holdout_mape_pct is not None:
        ho = max(v.included, key=lambda r: r.holdout_abs_pct_error or 0.0)
        print(f"held-out (leave-one-out per device) MAPE {v.holdout_mape_pct:.2f}%; worst {ho.id} "
              f"{ho.holdout_abs_pct_error:.1f}%")
    print("knobs fitted per device: " + "; ".join(
        f"{d}: {', '.join(k) if k else 'none (vendor defaults)'}" for d, k in v.knobs_per_device.items()))
    print("* step time derived from a published tokens/s or TFLOP/s (see `trainperf published ID`)")
    return 0
