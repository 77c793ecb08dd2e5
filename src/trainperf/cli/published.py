"""``trainperf published``: the packaged published-runs table (169 rows, 30 tables), filtered.

Each row shows the stack it maps to, its step time, and its MFU recomputed on one convention
(``--convention``, against the catalog's dense peak) beside the MFU the source claimed on its
own basis; excluded rows say why."""

from __future__ import annotations

import argparse
from typing import Any

from trainperf.cli.common import add_json_argument, print_json, table

HELP = "list published runs (filter by model, device, framework, precision) with MFU on one convention"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", nargs="?", help="one row id to show in full")
    parser.add_argument("--model", help="rows whose model contains this (case-insensitive)")
    parser.add_argument("--device", help="rows whose hardware or device id contains this")
    parser.add_argument("--framework", help="rows whose framework or stack contains this")
    parser.add_argument("--precision", help="rows of this precision (bf16, fp16, fp8)")
    parser.add_argument("--convention", default="megatron", help="FLOP convention of the recomputed MFU")
    add_json_argument(parser)


def _check_filters(args: argparse.Namespace) -> None:
    """A ``--precision`` no device computes is a typo: one line naming the valid ones (an empty
    table would look like "no published run")."""
    from trainperf.errors import UnknownNameError
    from trainperf.specs.hardware import PRECISIONS

    if args.precision is not None and args.precision.lower() not in PRECISIONS:
        raise UnknownNameError("--precision", args.precision, PRECISIONS)


def _matches(r, args: argparse.Namespace) -> bool:
    def has(needle: str | None, *hay: str) -> bool:
        return needle is None or any(needle.lower() in h.lower() for h in hay)

    dev = r.workload.hardware.id if r.workload is not None else ""
    return (has(args.model, r.model) and has(args.device, r.hardware, dev)
            and has(args.framework, r.framework, r.stack)
            and (args.precision is None or r.precision == args.precision.lower()))


def table_row_dict(r, convention: str = "megatron") -> dict:
    """One published-runs row as a dict, with its MFU recomputed under ``convention``."""
    from trainperf.accounting.throughput import throughput

    d = {"row_id": r.row_id, "table_id": r.table_id, "source": r.source, "model": r.model,
         "hardware": r.hardware, "framework": r.framework, "stack": r.stack, "precision": r.precision,
         "included": r.included, "exclude_reason": r.exclude_reason,
         "step_time_s": r.step_time_s, "step_time_from": r.step_time_from,
         "claimed_mfu_pct": r.claimed_mfu_pct, "mfu_basis": r.mfu_basis, "assumptions": list(r.assumptions)}
    if r.included:
        w = r.workload
        t = throughput(w, step_time_s=r.step_time_s, convention=convention)
        d.update(device=w.hardware.id, num_devices=w.num_devices, workload=w.describe(),
                 tokens_per_s=t.tokens_per_s, mfu_pct=t.mfu_pct, convention=t.convention,
                 peak_tflops=t.peak_tflops)
    return d


def run(args: argparse.Namespace) -> int:
    _check_filters(args)
    from trainperf.accounting.conventions import get_convention
    from trainperf.errors import UnknownNameError
    from trainperf.predict.runs_table import packaged_runs

    get_convention(args.convention)
    runs = packaged_runs()
    if args.id:
        picked = [r for r in runs if r.row_id == args.id]
        if not picked:
            raise UnknownNameError("published row", args.id, [r.row_id for r in runs])
        return _print_record(table_row_dict(picked[0], args.convention), args.json)
    rows = [r for r in runs if _matches(r, args)]
    if args.json:
        print_json({"runs": [table_row_dict(r, args.convention) for r in rows], "convention": args.convention})
        return 0
    out = []
    for r in rows:
        d = table_row_dict(r, args.convention)
        claimed = "-" if r.claimed_mfu_pct is None else f"{r.claimed_mfu_pct:.1f}"
        if r.included:
            out.append((r.row_id, r.model[:28], d["device"], d["num_devices"], r.precision, r.stack,
                        f"{r.step_time_s:.4g}", f"{d['mfu_pct']:.1f}", claimed))
        else:
            out.append((r.row_id, r.model[:28], r.hardware[:16], "", r.precision[:8], r.stack, "-", "-", claimed))
    print(table(out, ["row", "model", "device", "devices", "prec", "stack", "step s",
                      f"MFU % ({args.convention})", "claimed MFU %"]))
    excluded = [r for r in rows if not r.included]
    if excluded:
        print()
        print("not predictable:")
        for r in excluded:
            print(f"  row {r.row_id}: {r.exclude_reason}")
    print()
    print(f"{len(rows)} rows; MFU recomputed from the step time with the {args.convention} FLOP count and the "
          "catalog's dense peak; claimed MFU is on each source's own basis (`trainperf published ROW`).")
    return 0


def _print_record(d: dict[str, Any], as_json: bool) -> int:
    """One published row: JSON, or one ``key: value`` line per field."""
    if as_json:
        print_json(d)
    else:
        for k, v in d.items():
            print(f"{k}: {v}")
    return 0
