"""``trainperf models``: the model presets (or a Hugging Face config.json) with derived parameter
counts and sources."""

from __future__ import annotations

import argparse

from trainperf.cli.common import add_json_argument, print_json, table
from trainperf.numbers import fmt
from trainperf.specs.model import ModelSpec
from trainperf.specs.model_notes import buffer_line, counts, tower_lines, towers_json

HELP = "list the model presets, or show one with its parameter counts"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="preset id (e.g. llama3-8b); omit to list all")
    parser.add_argument("--hf-config", metavar="PATH",
                        help="Hugging Face config.json (or a directory holding one) to show instead of a preset")
    add_json_argument(parser)


def _show(m: ModelSpec, as_json: bool) -> None:
    if as_json:
        print_json({**m.to_dict(), "attention_layout": m.attention_layout, **counts(m), "towers": towers_json(m),
                    "notes": m.extra.get("notes", "")})
        return
    rows = [(k, attention_text(m) if k == "attention" else v) for k, v in m.to_dict().items()
            if v not in (None, 0, False, "")]
    rows += [(k, fmt(v)) for k, v in counts(m).items() if v or k in ("total_params", "active_params")]
    print(table(rows, ["field", "value"]))
    for line in [buffer_line(m), *tower_lines(m)]:
        if line:
            print(line)
    if m.extra.get("notes"):
        print(f"notes: {m.extra['notes']}")


def attention_text(m: ModelSpec) -> str:
    """``gqa: 4 KV heads for 28 query heads (7 each)``, ``mha``, ``mqa: 1 KV head ...`` or ``mla``."""
    kind = m.attention_layout
    if kind in ("mha", "mla"):
        return kind
    kv = m.kv_heads or m.heads
    return f"{kind}: {kv} KV head{'s' if kv != 1 else ''} for {m.heads} query heads ({m.heads // kv} each)"


def run(args: argparse.Namespace) -> int:
    from trainperf.errors import SpecError
    from trainperf.specs.presets import get_model, list_models

    if args.hf_config:
        if args.name:
            raise SpecError("name", args.name, "omitted when --hf-config is given (show one model)")
        _show(ModelSpec.from_hf_config(args.hf_config), args.json)
        return 0
    if args.name:
        _show(get_model(args.name), args.json)
        return 0
    models = list_models()
    if args.json:
        print_json([{"id": m.name, **counts(m), "source": m.source} for m in models])
        return 0
    rows = [(m.name, m.layers, m.hidden, m.heads, m.kv_heads, fmt(m.total_params / 1e9, 4),
             fmt(m.active_params / 1e9, 4)) for m in models]
    print(table(rows, ["id", "layers", "hidden", "heads", "kv", "params (B)", "active (B)"]))
    return 0
