"""``trainperf models``: the model presets with derived parameter counts and sources."""

from __future__ import annotations

import argparse

from trainperf.cli.common import add_json_argument, print_json, table
from trainperf.numbers import fmt

HELP = "list the model presets, or show one with its parameter counts"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="preset id (e.g. llama3-8b); omit to list all")
    add_json_argument(parser)


def _counts(m) -> dict[str, int]:
    return {"total_params": m.total_params, "active_params": m.active_params,
            "embedding_params": m.embedding_params, "matmul_params": m.matmul_params}


def run(args: argparse.Namespace) -> int:
    from trainperf.specs.presets import get_model, list_models

    if args.name:
        m = get_model(args.name)
        if args.json:
            print_json({**m.to_dict(), **_counts(m), "notes": m.extra.get("notes", "")})
            return 0
        rows = [(k, v) for k, v in m.to_dict().items() if v not in (None, 0, False, "")]
        rows += [(k, fmt(v)) for k, v in _counts(m).items()]
        print(table(rows, ["field", "value"]))
        if m.extra.get("notes"):
            print(f"notes: {m.extra['notes']}")
        return 0
    models = list_models()
    if args.json:
        print_json([{"id": m.name, **_counts(m), "source": m.source} for m in models])
        return 0
    rows = [(m.name, m.layers, m.hidden, m.heads, m.kv_heads, fmt(m.total_params / 1e9, 4),
             fmt(m.active_params / 1e9, 4)) for m in models]
    print(table(rows, ["id", "layers", "hidden", "heads", "kv", "params (B)", "active (B)"]))
    return 0
