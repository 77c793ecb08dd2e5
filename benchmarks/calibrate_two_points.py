"""Calibrate on the two smallest runs of a published table, predict the rest of it.

For every table of the packaged published-runs table with at least 4 predictable rows: fit a
user profile (``trainperf calibrate-model``'s fit) on the table's two smallest runs (fewest
devices, then shortest step), over ``generic`` and the table's own stack profile *refitted
without every table of the same (software stack, silicon) group* (so the stack on that silicon
is unknown but for those two runs: the case of a user calibrating a stack on a GPU no published
table covers), then predict the table's other rows. Prints each table's MAPE on the predicted
rows and the mean over tables.

    PYTHONPATH=src python benchmarks/calibrate_two_points.py [--fast] [--tables SUBSTR ...]

``--fast`` starts from the packaged profiles instead (which were fitted on every table: an
optimistic figure, for quick checks only).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from typing import Any

from trainperf.predict.fit_profiles import (
    FitRow,
    build_problem,
    fit_user_profile,
    profiles_from_fit,
    rows_from_table,
    solve,
)
from trainperf.predict.runs_table import packaged_runs
from trainperf.predict.stacks import DEFAULT_STACK, STACKS, knobs_with_profiles, packaged_profile
from trainperf.predict.step import as_float
from trainperf.predict.step_model import layout_of, step_time_s

MIN_ROWS = 4
_fits: dict[tuple[str, str], dict[str, Any]] = {}
"""Profiles refitted without one (stack, silicon) group, by group (a table's siblings share it)."""


def _with_facts(profs: dict[str, Any]) -> dict[str, Any]:
    """Fitted profiles with the packaged profiles' kernel facts (a fit writes numbers only)."""
    import dataclasses

    return {n: dataclasses.replace(p, kernels=packaged_profile(n).kernels) if n in STACKS else p
            for n, p in profs.items()}


def _base(rows: Sequence[FitRow], table: str, stack: str, fast: bool) -> list[Any]:
    if fast:
        profs = {name: packaged_profile(name) for name in STACKS}
    else:
        held = next(r for r in rows if r.table == table)
        key = _fits.get((held.stack, held.generation))
        if key is None:
            pb = build_problem([r for r in rows if (r.stack, r.generation) != (held.stack, held.generation)])
            theta, _ = solve(pb)
            key = _fits[(held.stack, held.generation)] = _with_facts(profiles_from_fit(pb, theta))
        profs = key
    base = [profs[DEFAULT_STACK]]
    if stack != DEFAULT_STACK and stack in profs:
        base.append(profs[stack])
    return base


def two_point(rows: Sequence[FitRow], table: str, fast: bool = False) -> dict[str, Any]:
    """Fit on the two smallest runs of ``table``; the error on its other rows."""
    mine = sorted((r for r in rows if r.table == table),
                  key=lambda r: (r.workload.num_devices, r.measured_step_time_s))
    fit, rest = mine[:2], mine[2:]
    base = _base(rows, table, mine[0].stack, fast)
    prof, _ = fit_user_profile(fit, "user", base)
    errs = []
    for r in rest:
        k = knobs_with_profiles(r.workload.hardware, [base[0], prof])
        p = as_float(step_time_s(layout_of(r.workload), k.numbers()))
        errs.append(100.0 * (p / r.measured_step_time_s - 1.0))
    return {"table": table, "stack": mine[0].stack, "fit": [r.name for r in fit], "rows": len(rest),
            "mape_pct": statistics.fmean(abs(e) for e in errs), "mean_signed_pct": statistics.fmean(errs)}


def run(tables: Sequence[str] | None = None, fast: bool = False) -> dict[str, Any]:
    rows = rows_from_table(packaged_runs())
    names = [t for t in dict.fromkeys(r.table for r in rows)
             if sum(r.table == t for r in rows) >= MIN_ROWS and (not tables or any(s in t for s in tables))]
    res = [two_point(rows, t, fast) for t in names]
    return {"tables": res, "mean_mape_pct": statistics.fmean(r["mape_pct"] for r in res) if res else float("nan")}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="start from the packaged profiles (optimistic)")
    ap.add_argument("--tables", nargs="*", help="only tables whose id contains one of these")
    args = ap.parse_args(argv)
    out = run(args.tables, args.fast)
    for r in out["tables"]:
        print(f"{r['table'][:50]:50s} {r['stack']:14s} fit on rows {','.join(r['fit']):10s} "
              f"predict {r['rows']:2d}: MAPE {r['mape_pct']:5.1f}%  signed {r['mean_signed_pct']:+5.1f}%")
    print(f"two-point calibration: mean MAPE over {len(out['tables'])} tables with >= {MIN_ROWS} rows: "
          f"{out['mean_mape_pct']:.2f}% (target <= 6%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
