"""``trainperf validate``: predicted vs published step time for every published run.

The packaged published-runs table (or ``--data FILE.csv``), in-sample with the packaged stack
profiles, leave-one-table-out (every profile refitted without the table) and
leave-one-(stack, silicon)-out (every table of a software stack on one silicon generation refitted
out together), overall, per group, per table and per stack."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from trainperf.cli.common import add_json_argument, print_json, table

if TYPE_CHECKING:
    from trainperf.predict.validate_runs import RunsValidation

HELP = ("predict every published run: MAPE, mean signed error, worst row; in-sample, leave-one-table-out and "
        "leave-one-(stack, silicon)-out")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", metavar="FILE.csv",
                        help="a runs file with the packaged table's columns (default: the packaged table)")
    parser.add_argument("--stack", metavar="NAME|FILE",
                        help="predict every row with this stack profile instead of each row's own")
    parser.add_argument("--no-loto", action="store_true",
                        help="skip the held-out checks (they refit every profile once per table and per group; cached)")
    add_json_argument(parser)


def _pct(x: Any) -> str:
    return "-" if x is None else f"{x:+.1f}"


def _abs(x: Any) -> str:
    return "-" if x is None else f"{x:.1f}"


def run(args: argparse.Namespace) -> int:
    from trainperf.predict.runs_table import load_table_runs, reading_summary, row_reading
    from trainperf.predict.stacks import load_profile
    from trainperf.predict.validate_runs import validate_runs

    if args.stack:
        load_profile(args.stack)  # a bad name or file is a one-line error before any work
    runs = load_table_runs(args.data)
    v = validate_runs(args.data, stack=args.stack, loto=not args.no_loto, runs=runs)
    d = v.to_dict()
    readings = {r.row_id: row_reading(r) for r in runs}
    _add_readings(d["rows"], readings)
    d["reading"] = reading_summary(runs)
    if args.json:
        print_json(d)
        return 0
    _require_predicted(d, args.data)
    if args.data:
        _print_rows_read(v, readings)
    _print_per_table(v, d["per_table"])
    print()
    _print_per_group(v, d["per_group"])
    print()
    _print_unread(d["reading"])
    _print_overall(d, args.stack)
    _print_architecture(d["per_architecture"])
    _print_interval_coverage(d)
    never = [r["row_id"] for r in d["rows"] if r["included"] and not r["fitted"]]
    if never:
        print(f"predicted, never fitted ({len(never)}: rows {', '.join(never)}): a framework no profile describes, "
              "priced by generic; their held-out figures are their in-sample ones")
    print("signed error: positive = predicted slower than published")
    return 0


def _add_readings(rows: list[dict[str, Any]], readings: dict[str, dict[str, Any]]) -> None:
    """Add to each row how its cells were read: hardware resolution, whether it states the
    essentials, why it was not read."""
    for row in rows:
        rd = readings.get(row["row_id"], {})
        row.update(device=rd.get("device"), hardware_read=rd.get("hardware_read"),
                   states_essentials=rd.get("states_essentials"), unread_kind=rd.get("unread_kind"))


def _require_predicted(d: dict[str, Any], data: str | None) -> None:
    """A one-line error when not one row of the runs file could be predicted (its first reason)."""
    if not d["rows_predicted"]:
        from trainperf.errors import InputFileError

        why = next((r["exclude_reason"] for r in d["rows"] if r.get("exclude_reason")), "no row was read")
        raise InputFileError(f"runs file {data or 'packaged'!r}: none of its {d['rows_total']} row(s) can be "
                             f"predicted (first reason: {str(why)[:200]}); `--json` lists each row's")


def _print_per_table(v: RunsValidation, per_table: dict[str, dict[str, Any]]) -> None:
    """One line per published table: its stack, MAPE and mean signed error in-sample,
    leave-one-table-out and leave-one-(stack, silicon)-out."""
    rows = []
    for t, x in per_table.items():
        i, lo, go = x["in_sample"], x["leave_one_table_out"] or {}, x["leave_one_group_out"] or {}
        stack = next(r.stack for r in v.rows if r.table_id == t)
        rows.append([t[:48], stack, i["rows"], _abs(i["mape_pct"]), _pct(i["mean_signed_pct"]),
                     _abs(lo.get("mape_pct")), _pct(lo.get("mean_signed_pct")),
                     _abs(go.get("mape_pct")), _pct(go.get("mean_signed_pct"))])
    print(table(rows, ["table", "stack", "rows", "MAPE %", "signed %", "LOTO MAPE %", "LOTO signed %",
                       "group-out MAPE %", "group-out signed %"]))


def _print_per_group(v: RunsValidation, per_group: dict[str, dict[str, Any]]) -> None:
    """One line per (stack, silicon) group: its tables and rows, MAPE in-sample and held out,
    and its worst row."""
    rows = []
    for g, x in per_group.items():
        i, lo, go = x["in_sample"], x["leave_one_table_out"] or {}, x["leave_one_group_out"] or {}
        tables = len({r.table_id for r in v.rows if r.included and r.group == g})
        rows.append([g, tables, i["rows"], _abs(i["mape_pct"]), _abs(lo.get("mape_pct")),
                     _abs(go.get("mape_pct")), _pct(go.get("mean_signed_pct")),
                     f"{go.get('worst', i['worst'])} ({_pct(go.get('worst_pct', i['worst_pct']))})"])
    print(table(rows, ["group (stack@silicon)", "tables", "rows", "MAPE %", "LOTO MAPE %",
                       "group-out MAPE %", "group-out signed %", "worst row (group-out %)"]))


def _print_overall(d: dict[str, Any], stack: str | None) -> None:
    """The totals over every predicted row: in-sample, and each hold-out that was run."""
    how = f"stack {stack} for every row" if stack else "each row's stack profile"
    print(f"in-sample ({how}): MAPE {d['mape_pct']:.2f}%, mean signed {d['mean_signed_pct']:+.2f}% over "
          f"{d['rows_predicted']} of {d['rows_total']} rows; worst row {d['worst_row']} ({d['worst_pct']:+.1f}%)")
    if d["leave_one_table_out_mape_pct"] is not None:
        print(f"leave-one-table-out (profiles refitted without the table): MAPE "
              f"{d['leave_one_table_out_mape_pct']:.2f}%, mean signed {d['leave_one_table_out_mean_signed_pct']:+.2f}%; "
              f"worst row {d['leave_one_table_out_worst_row']} ({d['leave_one_table_out_worst_pct']:+.1f}%)")
    if d["leave_one_group_out_mape_pct"] is not None:
        print(f"leave-one-(stack, silicon)-out (every table of the row's stack on its silicon refitted out): "
              f"MAPE {d['leave_one_group_out_mape_pct']:.2f}%, mean signed "
              f"{d['leave_one_group_out_mean_signed_pct']:+.2f}%; worst group "
              f"{d['leave_one_group_out_max_group_mape_pct']:.1f}% MAPE; worst row "
              f"{d['leave_one_group_out_worst_row']} ({d['leave_one_group_out_worst_pct']:+.1f}%)")


def _print_interval_coverage(d: dict[str, Any]) -> None:
    """How many rows the prediction ranges hold under leave-one-(stack, silicon)-out, when run."""
    if d.get("leave_one_group_out_interval_coverage_pct") is not None:
        print(f"{d['interval_level_pct']:.0f}% ranges under leave-one-(stack, silicon)-out hold "
              f"{d['leave_one_group_out_interval_coverage_pct']:.1f}% of the rows and "
              f"{d['leave_one_group_out_interval_group_balanced_coverage_pct']:.1f}% of a group's rows on average "
              "(each group's range fitted without it); before the widening for a new source, "
              f"{d['leave_one_group_out_quantile_coverage_pct']:.1f}% and "
              f"{d['leave_one_group_out_quantile_group_balanced_coverage_pct']:.1f}%")


def _print_architecture(groups: dict[str, dict[str, Any]]) -> None:
    """One line per architecture group (the MoE rows, the dense rows): MAPE and mean signed error
    in-sample, leave-one-table-out and leave-one-(stack, silicon)-out."""
    for name, label in (("moe", "mixture-of-experts rows"), ("dense", "dense rows")):
        g = groups.get(name) or {}
        if not (g.get("in_sample") or {}).get("rows"):
            continue
        parts = []
        for key, what in (("in_sample", "in-sample"), ("leave_one_table_out", "leave-one-table-out"),
                          ("leave_one_group_out", "leave-one-(stack, silicon)-out")):
            x = g.get(key)
            if x and x["rows"]:
                parts.append(f"{what} {x['mape_pct']:.2f}% ({x['mean_signed_pct']:+.2f}%)")
        print(f"{label} ({g['in_sample']['rows']}): MAPE (mean signed) " + ", ".join(parts))


def _print_rows_read(v: Any, readings: dict[str, dict[str, Any]]) -> None:
    """One line per row of a user's runs file: its hardware as resolved, stack, measured and
    predicted step time, and how many stack defaults it took."""
    rows = []
    for r in v.rows:
        rd = readings.get(r.row_id, {})
        hw = f"{r.hardware[:34]} -> {rd.get('device') or '?'}"
        rows.append([r.row_id, r.table_id[:24], hw, r.stack,
                     "-" if r.measured_step_time_s is None else f"{r.measured_step_time_s:.4g}",
                     "-" if r.predicted_step_time_s is None else f"{r.predicted_step_time_s:.4g}",
                     _pct(r.signed_pct), rd.get("defaults_taken", 0) if r.included else "unread"])
    print(table(rows, ["row", "table", "hardware -> device", "stack", "measured s", "predicted s", "signed %",
                       "defaults"]))
    print()
    seen: dict[str, tuple[str, list[str]]] = {}
    for r in v.rows:
        rd = readings.get(r.row_id, {})
        seen.setdefault(r.hardware, (rd.get("hardware_read", ""), []))[1].append(r.row_id)
    print("hardware read as (rule: trainperf.specs.device_names):")
    for text, (how, ids) in seen.items():
        dev = readings[ids[0]].get("device")
        where = ", ".join(ids[:6]) + (f" +{len(ids) - 6}" if len(ids) > 6 else "")
        print(f"  {text[:60]!r} -> {dev or 'not resolved'} ({how}) [rows {where}]")
    print()


def _print_unread(reading: dict[str, Any]) -> None:
    """Every row not predicted, with its reason, counted by kind; and the coverage of the rows
    that state model shape, batch, devices and a time."""
    unread = reading["unread"]
    if unread:
        kinds = ", ".join(f"{k} {n}" for k, n in reading["unread_by_kind"].items())
        print(f"not predicted ({len(unread)} of {reading['rows_total']} rows: {kinds}):")
        for u in unread:
            print(f"  row {u['row_id']} ({u['table_id']}): {u['reason']}")
        print()
    if reading["rows_stating_essentials"]:
        print(f"rows stating model shape, batch, devices and a time: {reading['rows_stating_essentials']}; "
              f"predicted {reading['rows_stating_essentials_read']} "
              f"({reading['coverage_of_stating_rows_pct']:.1f}%)")
