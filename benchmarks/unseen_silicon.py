"""Silicon no table covers: every row of a silicon generation predicted by a fit on the others.

Users bring GPUs no published table has (B200, GB200, MI300X, MI355X...). The hold-out that
``trainperf validate`` reports leaves out one (stack, silicon) group at a time, so the silicon
itself is still in the fit through the other stacks. This script leaves out a whole generation
(every table on Ampere, then on Hopper, then on TPU v5e), refits the packaged profiles on the
rest, and predicts the held-out rows two ways:

* ``centre``: the stack-wide values, the all-silicon centre of the fit with no generation's
  residual (what trainperf did for unfitted silicon before 2026.11.29);
* ``stand-in``: the shares of the fitted generation of the same kind released nearest to it
  (:func:`trainperf.predict.stacks.stand_in_generation`: Ampere takes Hopper's and Hopper
  Ampere's when held out; a TPU has no other TPU generation here, so it keeps the centre).

Prints MAPE and mean signed error (positive = predicted slower than published) per held-out
generation and over all rows, the stand-in's ratio to the centre, and the stand-in's errors per
stack within each held-out generation. Usage:
``python benchmarks/unseen_silicon.py [--json]``; about 10 s.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from trainperf.predict.holdout import theta_for as _theta_for


def held_out(rows: list[Any]) -> dict[str, dict[str, list[Any]]]:
    """Per held-out generation, the predictions of its rows by the centre and by the stand-in."""
    from trainperf.predict import fit_profiles as fp
    from trainperf.predict.holdout import Prediction
    from trainperf.predict.stacks import stand_in_generation

    full = fp.build_problem(rows)
    out: dict[str, dict[str, list[Any]]] = {}
    for held in sorted({r.generation for r in rows}):
        train = [r for r in rows if r.generation != held]
        pb = fp.build_problem(train)
        theta, _ = fp.solve(pb)
        idx = [i for i, r in enumerate(rows) if r.generation == held]
        groups = sorted({g for g, grp in enumerate(full.groups) if set(grp.index.tolist()) & set(idx)})
        vendor = rows[idx[0]].workload.hardware.vendor
        stand = stand_in_generation(held, {r.generation for r in train}, vendor)
        out[held] = {}
        for way, s in (("centre", None), ("stand-in", stand)):
            pred = full.predict(_theta_for(full, pb, theta, held, s), groups)
            out[held][way] = [Prediction(rows[i].name, rows[i].table, rows[i].stack, rows[i].measured_step_time_s,
                                         float(pred[i]), held) for i in idx]
        out[held]["stand_in"] = [stand]
    return out


def main(argv: list[str] | None = None) -> int:
    from trainperf.predict.fit_profiles import rows_from_table
    from trainperf.predict.holdout import by, summarize
    from trainperf.predict.runs_table import packaged_runs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = held_out(rows_from_table(packaged_runs()))
    report: dict[str, Any] = {}
    for held, ways in res.items():
        report[held] = {"rows": len(ways["centre"]), "stand_in": ways["stand_in"][0]}
        for way in ("centre", "stand-in"):
            s = summarize(ways[way])
            report[held][way] = {"mape_pct": round(s["mape_pct"], 2), "mean_signed_pct": round(s["mean_signed_pct"], 2)}
    for way in ("centre", "stand-in"):
        s = summarize([p for ways in res.values() for p in ways[way]])
        report.setdefault("all", {})[way] = {"mape_pct": round(s["mape_pct"], 2),
                                             "mean_signed_pct": round(s["mean_signed_pct"], 2)}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{'held out':10s} {'rows':>4s} {'stand-in':>9s}   {'centre MAPE':>11s} {'signed':>7s}   "
          f"{'stand-in MAPE':>13s} {'signed':>7s}")
    for held, r in report.items():
        n = r.get("rows", sum(v["rows"] for k, v in report.items() if k != "all"))
        print(f"{held:10s} {n:4d} {r.get('stand_in', '')!s:>9s}   {r['centre']['mape_pct']:10.2f}% "
              f"{r['centre']['mean_signed_pct']:+6.2f}%   {r['stand-in']['mape_pct']:12.2f}% "
              f"{r['stand-in']['mean_signed_pct']:+6.2f}%")
    a = report["all"]
    print(f"stand-in / centre MAPE: {a['stand-in']['mape_pct'] / a['centre']['mape_pct']:.3f} "
          "(signed: positive = predicted slower than published)")
    print("by stack, stand-in (MAPE, mean signed):")
    for held, ways in res.items():
        per = by(ways["stand-in"], "stack")
        print(f"  {held:10s} " + "; ".join(f"{k} {v['rows']} rows {v['mape_pct']:.1f}% ({v['mean_signed_pct']:+.1f}%)"
                                          for k, v in per.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
