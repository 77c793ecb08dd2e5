"""Does `trainperf validate --data` read a table as people write it, and predict it as well as the same rows with every fact passed by hand?

A runs table with the packaged columns (``--data FILE.csv``; default: the repository's messy
fixture, ``tests/fixtures/runs_tables/messy_runs.csv``) is read by
:func:`trainperf.predict.runs_table.load_table_runs`. A row that restates a row of the packaged
published-runs table says so in its notes: ``respells packaged row N`` (the same facts in other
spellings: "FP8-CS", "NVL72", "96GB HBM2e @ 500W", "FSDP", "interleaved (paper; not re-read)")
or ``states less than packaged row N`` (it leaves out what the framework's recipes decide:
sequence parallelism and the distributed optimizer of a NeMo run, the vpp of an interleaved
schedule). For those rows the packaged row is the same run with every fact passed by hand, so
this script reports

* rows read: of the rows that state a model shape, a batch, devices and a time (the rows a reader
  should be able to predict), how many were read, and every row not read with its reason;
* MAPE of the reader's workloads against the published step times, and MAPE of the packaged
  rows' workloads (facts by hand) against the same step times, over the rows that restate one;
* each restating row whose workload differs from its packaged row's, and the assumptions that
  made it differ.

Goal (issue 29, judged on tables kept aside): the reader reads >= 95% of the rows that state
their plan, and its MAPE is within 2 points of the MAPE with every fact passed by hand. Run:
``python benchmarks/table_reading.py [--data FILE.csv] [--json]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "runs_tables" / "messy_runs.csv"
TWIN = re.compile(r"(respells|states less than) packaged row (\d+)")


def _err(predicted: float, published: float) -> float:
    return 100.0 * (predicted / published - 1.0)


def _diff(a: Any, b: Any) -> list[str]:
    """Names of the workload fields (plan fields spelled out) where ``a`` and ``b`` differ."""
    out = []
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if x == y:
            continue
        if dataclasses.is_dataclass(x) and f.name == "plan":
            out += [f"plan.{g.name}: {getattr(x, g.name)} (by hand {getattr(y, g.name)})"
                    for g in dataclasses.fields(x) if getattr(x, g.name) != getattr(y, g.name)]
        else:
            out.append(f.name)
    return out


def judge(data: str | Path = FIXTURE) -> dict[str, Any]:
    """Rows read, and reader vs by-hand errors over the rows that restate a packaged row."""
    from trainperf.predict.runs_table import load_table_runs, packaged_runs, reading_summary
    from trainperf.predict.validate_runs import predict_row

    runs = load_table_runs(data)
    packaged = {r.row_id: r for r in packaged_runs()}
    twins = []
    for r in runs:
        m = TWIN.search(r.cells.get("notes", ""))
        if not m or not r.included or not packaged[m.group(2)].included:
            continue
        p = packaged[m.group(2)]
        twins.append({"row_id": r.row_id, "twin": p.row_id, "kind": m.group(1), "published_s": r.step_time_s,
                      "reader_err_pct": _err(predict_row(r), r.step_time_s),
                      "by_hand_err_pct": _err(predict_row(p), r.step_time_s),
                      "differs": _diff(r.workload, p.workload),
                      "assumptions": [a for a in r.assumptions if "assumed" in a or "not stated" in a]})
    reader = statistics.fmean(abs(t["reader_err_pct"]) for t in twins) if twins else None
    by_hand = statistics.fmean(abs(t["by_hand_err_pct"]) for t in twins) if twins else None
    return {"data": str(data), "reading": reading_summary(runs), "twins": twins,
            "reader_mape_pct": reader, "by_hand_mape_pct": by_hand,
            "gap_points": None if reader is None or by_hand is None else reader - by_hand}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(FIXTURE), help="runs table (CSV with the packaged columns)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    res = judge(args.data)
    if args.json:
        print(json.dumps(res, indent=1))
        return 0
    s = res["reading"]
    print(f"{args.data}: {s['rows_total']} rows; read {s['rows_read']}; of the "
          f"{s['rows_stating_essentials']} stating model shape, batch, devices and a time, read "
          f"{s['rows_stating_essentials_read']} ({s['coverage_of_stating_rows_pct']:.1f}%)")
    for u in s["unread"]:
        print(f"  unread {u['row_id']}: {u['reason']}")
    for t in res["twins"]:
        mark = "" if not t["differs"] else "  differs: " + "; ".join(t["differs"])
        print(f"  {t['row_id']:>6} ({t['kind']} {t['twin']}): reader {t['reader_err_pct']:+6.1f}%, "
              f"by hand {t['by_hand_err_pct']:+6.1f}%{mark}")
    if res["twins"]:
        print(f"over the {len(res['twins'])} rows that restate a packaged row: reader MAPE "
              f"{res['reader_mape_pct']:.2f}%, facts by hand {res['by_hand_mape_pct']:.2f}% "
              f"(gap {res['gap_points']:+.2f} points; goal: within 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
