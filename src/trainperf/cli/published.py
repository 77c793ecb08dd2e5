"""``trainperf published``: the catalog of published results built from the seed documents."""

from __future__ import annotations

import argparse

from trainperf.cli.common import add_json_argument, print_json, table

HELP = "list the catalog of published results (from the seeds), with sources"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", nargs="?", help="one run id to show in full (omit to list all)")
    add_json_argument(parser)


def _row_dict(r) -> dict:
    w = r.workload
    return {
        "id": r.id, "source": r.source, "seed": r.seed, "line": r.line, "citation": r.citation,
        "framework": r.framework, "vendor": r.vendor, "device": w.hardware.id,
        "workload": w.describe(), "published_step_time_s": r.step_time_s,
        "derived_from": r.derived_from, "tokens_per_step": w.tokens_per_step,
        "claimed": r.claimed, "convention": r.convention, "assumptions": r.assumptions,
        "validate": r.validate, "exclude_reason": r.exclude_reason,
    }


def run(args: argparse.Namespace) -> int:
    from trainperf.predict.published import get_published, published_claims, published_runs

    if args.id:
        d = _row_dict(get_published(args.id))
        if args.json:
            print_json(d)
        else:
            for k, v in d.items():
                print(f"{k}: {v}")
        return 0
    runs = published_runs()
    if args.json:
        print_json({"runs": [_row_dict(r) for r in runs], "claims": list(published_claims())})
        return 0
    print(table([(r.id, r.workload.hardware.id, r.workload.num_devices, f"{r.step_time_s:.4g}",
                  "derived" if r.derived_from else "published", f"seed {r.seed[:3]}:{r.line}",
                  "" if r.validate else "not validated") for r in runs],
                ["id", "device", "devices", "step s", "step time", "source", ""]))
    claims = published_claims()
    if claims:
        print()
        print("published figures that are not step times:")
        for c in claims:
            print(f"  {c['id']}: {c['metric']} = {c['value']} (seed {c['seed'][:3]}:{c['line']}) - {c.get('note', '')}")
    return 0
