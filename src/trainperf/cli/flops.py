"""``trainperf flops``: the per-op FLOP breakdown and the totals under every convention."""

from __future__ import annotations

import argparse

from trainperf.accounting.conventions import CONVENTIONS, model_flops_per_token, nemo_legacy_terms
from trainperf.accounting.flops import forward_flops
from trainperf.cli.common import (
    add_json_argument,
    add_workload_arguments,
    eprint,
    model_from_args,
    print_json,
    table,
)
from trainperf.numbers import fmt
from trainperf.specs.model_notes import (
    SEQ_DEFAULT,
    buffer_line,
    position_warning,
    seq_len_line,
    tower_lines,
    towers_json,
)

HELP = "FLOPs per token and per sequence under every convention, with the per-op breakdown"
EPILOG = ("Without --seq-len (or [training] seq_len) the sequence is the model's position table "
          "(max_position_embeddings), stated on its own line: attention FLOPs per token grow with it. "
          "A --seq-len beyond the position table is computed with a warning. For a multimodal "
          "checkpoint the FLOPs are the text model's; the vision tower and projector are listed.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    add_workload_arguments(parser, hardware=False)
    parser.add_argument("--lora-fraction", type=float, default=0.0, metavar="F",
                        help="trainable adapter parameters / base parameters (lora convention)")
    parser.add_argument("--include-elementwise", action="store_true",
                        help="also estimate norms, activations, softmax (never part of MFU)")
    add_json_argument(parser)


def seq_len_source(args: argparse.Namespace) -> str:
    """``flag``, ``workload file`` or ``default`` (the model's position table)."""
    if getattr(args, "seq_len", None) is not None:
        return "flag"
    if getattr(args, "workload", None):
        from trainperf.specs.workload_file import read_workload_file

        training = read_workload_file(args.workload).get("training", {})
        if isinstance(training, dict) and training.get("seq_len") is not None:
            return "workload file"
    return SEQ_DEFAULT


def run(args: argparse.Namespace) -> int:
    model, seq = model_from_args(args)
    source = seq_len_source(args)
    warning = position_warning(model, seq)
    if warning:
        eprint(warning)
    fb = forward_flops(model, seq, "causal", include_elementwise=args.include_elementwise)
    conv = {name: model_flops_per_token(model, seq, name, args.lora_fraction) for name in CONVENTIONS}
    params = {
        "total": model.total_params, "active": model.active_params, "embedding": model.embedding_params,
        "non_embedding": model.non_embedding_params, "matmul": model.matmul_params,
        "trainable": model.trainable_params, "buffers": model.buffer_params,
        "towers": model.tower_params, "checkpoint": model.checkpoint_params,
    }
    if args.json:
        print_json({
            "model": model.name, "seq_len": seq,
            "seq_len_source": "default: the model's max_seq_len (max_position_embeddings)"
            if seq_len_line(model, seq, source) else source,
            "warnings": [warning] if warning else [],
            "params": params, "towers": towers_json(model),
            "flops_cover": "text model only" if model.towers else "whole model",
            "forward_flops_per_seq": fb.ops, "forward_matmul_flops_per_seq": fb.matmul,
            "attention_mask": "causal (exact pairs)",
            "conventions": {name: {"model_flops_per_token": v, "model_flops_per_seq": v * seq,
                                   "counts": CONVENTIONS[name].description} for name, v in conv.items()},
            "nemo_legacy_terms_per_token": nemo_legacy_terms(model, seq),
        })
        return 0
    print(f"{model.name}: {fmt(model.total_params / 1e9)}B parameters "
          f"({fmt(model.active_params / 1e9)}B active), seq_len {seq}")
    for line in [seq_len_line(model, seq, source), buffer_line(model), *tower_lines(model)]:
        if line:
            print(line)
    total = fb.total(args.include_elementwise)
    rows = [(op, fmt(v / seq), fmt(v), f"{100 * v / total:.1f}%") for op, v in fb.ops.items() if v or op == "embedding"]
    print("\nForward FLOPs by op (causal mask counted exactly):")
    print(table(rows, ["op", "per token", "per sequence", "share"]))
    print("\nTraining model FLOPs (forward + backward) by convention:")
    rows = [(name, fmt(v), fmt(v * seq), CONVENTIONS[name].description) for name, v in conv.items()]
    print(table(rows, ["convention", "per token", "per sequence", "counts"]))
    return 0
