"""``trainperf predict``: step time, throughput and memory of a workload, explained."""

from __future__ import annotations

import argparse

from trainperf.cli.common import (
    add_convention_argument,
    add_json_argument,
    add_software_arguments,
    add_workload_arguments,
    print_json,
    table,
    workload_from_args,
)

HELP = "predict step time (with a breakdown), tokens/s, MFU and memory per device of a workload"

BAR_WIDTH = 40


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_workload_arguments(parser, positional="many")
    parser.add_argument("--mtp-layers", type=int, metavar="N", dest="mtp_layers",
                        help="multi-token-prediction modules to train (override [model] mtp_layers; DeepSeek-V3: 1)")
    add_software_arguments(parser)
    parser.add_argument("--calibration", metavar="FILE",
                        help="knob values from `trainperf calibrate-model` (JSON)")
    add_convention_argument(parser)
    parser.add_argument("--train-tokens", type=float, default=1e12, metavar="N",
                        help="tokens to train, for days to train (default 1e12)")
    parser.add_argument("--trainable-fraction", type=float, default=1.0, metavar="F",
                        help="trainable / total parameters (LoRA-style fine-tuning; default 1 = full)")
    add_json_argument(parser)


def bar_chart(parts: dict[str, float], total: float, width: int = BAR_WIDTH) -> str:
    """One line per component: name, seconds, share and a horizontal bar."""
    if total <= 0:
        return ""
    name_w = max((len(n) for n in parts), default=0)
    lines = []
    for name, sec in parts.items():
        share = sec / total
        n = round(share * width)
        bar = "█" * n if n else ("▏" if sec > 0 else "")
        lines.append(f"  {name:<{name_w}}  {sec:9.4g} s  {100 * share:5.1f}%  {bar}")
    return "\n".join(lines)


def render(p) -> str:
    w = p.workload
    out = [w.describe()]
    out += [f"  note: {n}" for n in p.notes]
    fit = "yes" if p.fits else f"NO: {p.memory_over_GiB:.1f} GiB over"
    rows = [
        ("step time", f"{p.step_time_s:.4g} s" + (
            f" ({100 * p.interval.level:.0f}% range {p.interval.low_s:.4g}-{p.interval.high_s:.4g} s)"
            if p.interval is not None else "")),
        ("tokens/s (global)", f"{p.tokens_per_s:,.1f}"),
        ("tokens/s per device", f"{p.tokens_per_s_per_device:,.1f}"),
        ("TFLOP/s per device (model)", f"{p.tflops_per_device:,.1f}"),
        (f"MFU / HFU ({p.convention})", f"{p.mfu_pct:.1f}% / {p.hfu_pct:.1f}%"),
        ("memory per device", f"{p.memory_per_device_GiB:.1f} of {p.memory_capacity_GiB:.1f} GiB"),
        ("fits", fit),
        (f"days to train {p.train_tokens:.3g} tokens", f"{p.days_to_train:,.2f}"),
    ]
    out.append(table(rows, ["", ""]))
    out.append("")
    out.append("step time breakdown:")
    out.append(bar_chart(p.breakdown, p.step_time_s))
    comp = {k: v for k, v in p.compute_breakdown.items() if k != "optimizer" and v > 0}
    out.append("compute by kind (forward, backward and recompute): " + ", ".join(
        f"{k} {v:.4g} s" for k, v in comp.items()))
    if p.collectives:
        out.append("")
        out.append(table([(c.name, c.link, c.algorithm, c.group_size, f"{c.bytes_per_device / 1e9:.3g}",
                           f"{c.time_s:.3g}", f"{c.exposed_s:.3g}", f"{100 * c.hidden_fraction:.0f}%")
                          for c in p.collectives],
                         ["collective", "link", "algorithm", "ranks", "GB/device", "time s", "exposed s",
                          "hidden"]))
    out.append("")
    out.append("memory per device (GiB): " + ", ".join(
        f"{k} {v:.2f}" for k, v in p.memory_breakdown_GiB.items() if v > 0))
    out.append(f"bottleneck: {p.bottleneck}")
    if p.interval is not None:
        out.append(f"range: {100 * p.interval.level:.0f}% of held-out published runs fell within it "
                   f"({p.interval.basis})" + ("; wider: " + "; ".join(p.interval.widened_by)
                                               if p.interval.widened_by else ""))
    kinfo = p.extra.get("kernels", {})
    if kinfo:
        out.append(f"kernels ({kinfo['silicon']}): GEMMs at {100 * kinfo['gemm_peak_fraction']:.0f}% of peak at best, "
                   f"attention {kinfo['attn_family']}, memory-bound ops {kinfo['elementwise_impl']}"
                   + (f", fp8 {kinfo['fp8_recipe']} scaling" if kinfo.get("fp8_recipe") else "")
                   + (f", routed experts' grouped GEMMs at {kinfo['grouped_fraction']:.2f} of the dense law (measured)"
                      if w.model.is_moe and kinfo.get("grouped_fraction", 1.0) != 1.0 else "")
                   + (f", MoE dispatch by {kinfo['moe_dispatcher']}" if w.model.is_moe and w.plan.ep > 1 else ""))
    out.append(f"stack shares of the kernels' speed: {p.knobs.device} (matmul {p.knobs.matmul_fraction:.3g}, "
               f"attention {p.knobs.attention_fraction:.3g}, memory-bound {p.knobs.memory_bound_fraction:.3g}, "
               f"overlap {p.knobs.overlap:.3g}, {p.knobs.op_overhead_us:.3g} us per kernel)")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    from trainperf.predict.step import load_calibration, predict

    calibration = load_calibration(args.calibration) if args.calibration else None
    paths = list(args.workload or []) or [None]
    for i, path in enumerate(paths):
        w = workload_from_args(args, path)
        p = predict(w, calibration=calibration, convention=args.convention, train_tokens=args.train_tokens,
                    trainable_fraction=args.trainable_fraction)
        if args.json:
            print_json(p.to_dict(), lines=len(paths) > 1)
        else:
            if i:
                print()
            print(render(p))
    return 0
