"""``trainperf mfu``: tokens/s, TFLOP/s per device, MFU, HFU and time to train."""

from __future__ import annotations

import argparse

from trainperf.accounting.plausibility import check_mfu, check_step_time, require_finite
from trainperf.accounting.throughput import DEFAULT_TRAIN_TOKENS, throughput
from trainperf.cli.common import (
    add_convention_argument,
    add_json_argument,
    add_workload_arguments,
    eprint,
    print_json,
    table,
    workload_from_args,
)
from trainperf.errors import TrainperfError
from trainperf.numbers import fmt

HELP = "tokens/s, TFLOP/s per device, MFU, HFU and time to train from a step time or a rate"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_workload_arguments(parser)
    rate = parser.add_argument_group("measured rate (exactly one)")
    rate.add_argument("--step-time", type=float, metavar="S", help="seconds per optimizer step")
    rate.add_argument("--tokens-per-s", type=float, metavar="X", help="global tokens per second")
    rate.add_argument("--tokens-per-s-per-device", type=float, metavar="X", help="tokens per second per device")
    add_convention_argument(parser)
    parser.add_argument("--model-flops-per-seq", type=float, metavar="F",
                        help="use this model FLOP count per sequence (a publication's own rounding)")
    parser.add_argument("--lora-fraction", type=float, default=0.0, metavar="F",
                        help="trainable adapter parameters / base parameters (lora convention)")
    parser.add_argument("--train-tokens", type=float, default=DEFAULT_TRAIN_TOKENS, metavar="N",
                        help="tokens to train, for days to train (default 1e12)")
    parser.add_argument("--usd-per-device-hour", type=float, metavar="USD", help="price, for the cost to train")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    w = workload_from_args(args)
    tp = throughput(
        w, step_time_s=args.step_time, tokens_per_s=args.tokens_per_s,
        tokens_per_s_per_device=args.tokens_per_s_per_device, convention=args.convention,
        model_flops_per_seq=args.model_flops_per_seq, train_tokens=args.train_tokens,
        usd_per_device_hour=args.usd_per_device_hour, lora_fraction=args.lora_fraction,
    )
    bad_step = check_step_time(tp.step_time_s, "step time")
    if bad_step:
        raise TrainperfError(f"{bad_step} (from the rate given); check its value and units")
    require_finite("MFU", tp.mfu_pct)
    require_finite("HFU", tp.hfu_pct)
    mfu = check_mfu(tp.mfu_pct, tp.peak_tflops, tp.peak_source)
    hfu = check_mfu(tp.hfu_pct, tp.peak_tflops, tp.peak_source, field="hfu_pct")
    if args.json:
        print_json({**tp.to_dict(), "mfu_plausible": mfu.ok, "mfu_warning": mfu.reason or None,
                    "workload": w.describe(), "notes": list(w.notes)})
        return 0
    print(w.describe())
    for note in w.notes:
        print(f"  note: {note}")
    rows = [
        ("step time", f"{tp.step_time_s:.4g} s"),
        ("tokens per step", fmt(tp.tokens_per_step)),
        ("tokens/s (global)", f"{tp.tokens_per_s:,.2f}"),
        ("tokens/s per device", f"{tp.tokens_per_s_per_device:,.2f}"),
        ("model FLOPs per sequence", f"{tp.model_flops_per_seq:.4e}"),
        ("TFLOP/s per device (model)", f"{tp.tflops_per_device:,.2f}"),
        ("MFU", f"{tp.mfu_pct:.2f}%" + ("" if mfu.ok else " (impossible, > 100%)")),
        ("HFU (with recompute)", f"{tp.hfu_pct:.2f}%" + ("" if hfu.ok else " (impossible, > 100%)")),
        (f"days to train {tp.train_tokens:.3g} tokens", f"{tp.days_to_train:,.2f}"),
    ]
    if tp.cost_usd is not None:
        rows.append(("cost to train", f"${tp.cost_usd:,.0f}"))
    print(table(rows, ["", ""]))
    print(f"convention: {tp.convention}; peak: {tp.peak_tflops:g} TFLOP/s ({tp.peak_source})")
    if not mfu.ok:
        eprint(f"trainperf mfu: warning: {mfu.reason}")
    return 0
