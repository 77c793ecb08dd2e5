"""``trainperf predict``: step time, throughput and memory of a workload, explained."""

from __future__ import annotations

import argparse
from typing import Any

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
    add_convention_argument(parser, per_run=True)
    parser.add_argument("--train-tokens", type=float, default=1e12, metavar="N",
                        help="tokens to train, for days and device-hours to train (default 1e12)")
    parser.add_argument("--usd-per-device-hour", type=float, metavar="USD",
                        help="price of one device for one hour: adds the cost to train --train-tokens")
    parser.add_argument("--trainable-fraction", type=float, default=None, metavar="F",
                        help="trainable / total parameters (LoRA-style fine-tuning; default: the workload's "
                             "[lora] adapters' share, else 1 = full)")
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


def render(p, price: float | None = None) -> str:
    """The prediction for a person: what is predicted, the figures (with how long and how much
    ``p.train_tokens`` take, priced at ``price`` per device-hour when given), where the step's
    time goes and the memory per device. A plan that does not fit shows its memory and no time:
    a step time for a plan that cannot run is no answer. One over by less than the memory model's
    error (:attr:`~trainperf.predict.step.Prediction.at_memory_edge`) may run: its time is shown,
    marked as at the edge."""
    w = p.workload
    out = [w.describe()]
    # a plan that does not fit gets its own section below rather than the note
    out += [f"  note: {n}" for n in p.notes if p.fits or not n.startswith("does not fit:")]
    if not (p.fits or p.at_memory_edge):
        return "\n".join(out + _does_not_fit(p))
    cost = _cost(p, price)
    rows = [
        ("step time", f"{p.step_time_s:.4g} s" + (
            f" ({100 * p.interval.level:.0f}% range {p.interval.low_s:.4g}-{p.interval.high_s:.4g} s)"
            if p.interval is not None else "")),
        ("tokens/s (global)", f"{p.tokens_per_s:,.1f}"),
        ("tokens/s per device", f"{p.tokens_per_s_per_device:,.1f}"),
        ("TFLOP/s per device (model)", f"{p.tflops_per_device:,.1f}"),
        (f"MFU / HFU ({p.convention})", f"{p.mfu_pct:.1f}% / {p.hfu_pct:.1f}%"),
        ("memory per device", f"{p.memory_per_device_GiB:.1f} of {p.memory_capacity_GiB:.1f} GiB"),
        ("fits", "yes" if p.fits else f"at the edge ({p.memory_over_GiB:.1f} GiB over: within the memory model's "
                                      "error)"),
        (f"days to train {p.train_tokens:.3g} tokens", f"{cost.days:,.2f}"),
        ("device-hours", f"{cost.device_hours:,.0f}"),
    ]
    if cost.cost_usd is not None:
        rows.append((f"cost at ${cost.usd_per_device_hour:,.2f} per device-hour", f"${cost.cost_usd:,.0f}"))
    out.append(table(rows, ["", ""]))
    out += ["", "step time breakdown:", bar_chart(p.breakdown, p.step_time_s)]
    out += _compute_lines(p)
    if p.collectives:
        out.append("")
        out.append(table([(c.name, c.link, c.algorithm, c.group_size, f"{c.bytes_per_device / 1e9:.3g}",
                           f"{c.time_s:.3g}", f"{c.exposed_s:.3g}", f"{100 * c.hidden_fraction:.0f}%")
                          for c in p.collectives],
                         ["collective", "link", "algorithm", "ranks", "GB/device", "time s", "exposed s",
                          "hidden"]))
    out.append("")
    out.append(_memory_line(p))
    out.append(f"bottleneck: {p.bottleneck}")
    if p.interval is not None:
        out.append(f"range: the middle {100 * p.interval.level:.0f}% of held-out published runs' errors "
                   f"({p.interval.basis})" + ("; wider: " + "; ".join(p.interval.widened_by)
                                               if p.interval.widened_by else ""))
    out += _kernel_lines(p)
    return "\n".join(out)


def _passes_text(kinfo: dict[str, Any]) -> str:
    """`` (norms x1.39, RoPE x1.85, activation x1.22 their ideal bytes)`` where unfused ops move
    more than one pass (the stack's share of the microbenchmarks' eager penalty); else empty."""
    names = {"norm_passes": "norms", "rope_passes": "RoPE", "activation_passes": "activation"}
    more = [f"{name} x{kinfo[k]:.3g}" for k, name in names.items() if kinfo.get(k, 1.0) > 1.0]
    return f" ({', '.join(more)} their ideal bytes)" if more else ""


COMPUTE_PARTS = ("matmul", "attention", "memory-bound ops", "kernel overhead", "grouped GEMMs (routed experts)",
                 "router + permute/unpermute")
"""The kernel classes the forward, backward and recompute times are made of (the predictor's
``compute_breakdown``, less the optimizer, which has its own line)."""


def _compute_lines(p) -> list[str]:
    """The forward + backward (+ recompute) time split by kernel class, so that the bottleneck
    line's "memory-bound ops" or "attention kernels" is a line of the breakdown."""
    parts = {k: p.compute_breakdown.get(k, 0.0) for k in COMPUTE_PARTS if p.compute_breakdown.get(k, 0.0) > 0}
    if not parts:
        return []
    what = " + ".join(k for k in ("forward", "backward", "recompute") if p.breakdown.get(k, 0.0) > 0)
    return [f"{what} by kernel class (shares of the step):", bar_chart(parts, p.step_time_s)]


def _memory_line(p) -> str:
    return "memory per device (GiB): " + ", ".join(
        f"{k} {v:.2f}" for k, v in p.memory_breakdown_GiB.items() if v > 0)


def _does_not_fit(p) -> list[str]:
    """What a plan that does not fit gets instead of a step time: the memory, its largest parts
    and where to find a plan that fits."""
    parts = sorted(((v, k) for k, v in p.memory_breakdown_GiB.items() if v > 0), reverse=True)[:3]
    return ["", f"does not fit: {p.memory_per_device_GiB:.1f} GiB needed per device, "
                f"{p.memory_capacity_GiB:.1f} GiB available ({p.memory_over_GiB:.1f} GiB over); no step time "
                "is predicted for a plan that cannot run",
            _memory_line(p),
            "largest: " + ", ".join(f"{k} {v:.1f} GiB" for v, k in parts),
            "to find plans that fit: `trainperf plan` with the same model, --device, --num-devices, --seq-len "
            "and --global-batch (it shards, splits and recomputes until they fit); --json still gives every "
            "figure of this one"]


def _cost(p, price: float | None):
    from trainperf.accounting.throughput import time_and_cost

    return time_and_cost(p.train_tokens, p.tokens_per_s, p.workload.num_devices, price)


def _kernel_lines(p) -> list[str]:
    """Which kernels the prediction assumes and the stack's shares of their measured speed."""
    from trainperf.predict.kernels.cpu import MEASURED_SUFFIX
    from trainperf.specs.cpu_calibration import threads_per_process

    w = p.workload
    out = []
    kinfo = p.extra.get("kernels", {})
    if p.knobs.device.endswith(MEASURED_SUFFIX):
        k = p.knobs
        shapes = kinfo.get("measured_gemm_shapes", 0)
        gemms = (f"GEMMs at the rates of the nearest of {shapes} shapes timed forward and backward" if shapes else
                 f"GEMMs at {100 * kinfo['gemm_peak_fraction']:.0f}% of the calibrated peak at best")
        several, here = w.num_devices > 1, kinfo.get("collectives_measured_here", False)
        measured = "attention, elementwise ops" + (" and gloo's collectives" if several and here else "")
        unmeasured = ("; gloo's collectives not measured between processes here: the catalog's placeholders stand "
                      "in (`trainperf calibrate WORKLOAD.toml` times them too)") if several and not here else ""
        return [f"kernels (cpu, measured on this machine by a bench run or `trainperf calibrate WORKLOAD`): {gemms}, "
                f"{measured} at their measured rates{unmeasured}, {k.op_overhead_us:.3g} us of host time per "
                "operator added to compute, nothing overlapped (docs/KERNELS.md, \"This machine's CPU\")"]
    if kinfo.get("silicon") == "cpu":
        threads = w.threads_per_device or threads_per_process(int(w.devices_per_node))
        out.append(f"kernels (cpu): not measured on this machine for {w.precision} at {threads} thread(s) per process: "
                   "a law for GPUs stands in (GEMMs at "
                   f"{100 * kinfo['gemm_peak_fraction']:.0f}% of the calibrated peak at best, attention "
                   f"{kinfo['attn_family']}), which can be far from this CPU's own; `trainperf calibrate WORKLOAD.toml` times this "
                   "workload's kernels here in seconds (a bench run of it does too)")
    elif kinfo:
        out.append(f"kernels ({kinfo['silicon']}): GEMMs at {100 * kinfo['gemm_peak_fraction']:.0f}% of peak at best, "
                   f"attention {kinfo['attn_family']}, memory-bound ops {kinfo['elementwise_impl']}"
                   + _passes_text(kinfo)
                   + (f", fp8 {kinfo['fp8_recipe']} scaling" if kinfo.get("fp8_recipe") else "")
                   + (f", routed experts' grouped GEMMs at {kinfo['grouped_fraction']:.2f} of the dense law (measured)"
                      if w.model.is_moe and kinfo.get("grouped_fraction", 1.0) != 1.0 else "")
                   + (", routed experts in 16 bits (the stack's fp8 leaves its grouped GEMM out: [kernels] "
                      "fp8_grouped_gemm)" if w.model.is_moe and kinfo.get("experts_16bit") else "")
                   + (f", MoE dispatch by {kinfo['moe_dispatcher']}" if w.model.is_moe and w.plan.ep > 1 else ""))
    k = p.knobs
    out.append(f"stack shares of the kernels' speed: {k.device} (matmul {k.matmul_fraction:.3g}, "
               f"attention {k.attention_fraction:.3g}, memory-bound {k.memory_bound_fraction:.3g}, "
               f"overlap {k.overlap:.3g}, {k.op_overhead_us:.3g} us per kernel)")
    above = [f"{name} {v:.3g}" for name, v in (("matmul", k.matmul_fraction), ("attention", k.attention_fraction),
                                                ("memory-bound", k.memory_bound_fraction)) if v > 1.0]
    out.append("  a share is the fraction of the kernel's measured (microbenchmark) speed the stack keeps in a "
               "training step, fitted on published runs; "
               + (f"above 1 ({', '.join(above)}): the runs it was fitted on went faster than the kernel data "
                  "predicts (newer kernel releases, shapes the measurements do not cover), and the share carries "
                  "that" if above else "1 would be the microbenchmark's speed"))
    return out


def run(args: argparse.Namespace) -> int:
    from trainperf.predict.step import load_calibration, predict
    from trainperf.specs.bounds import TRAIN_TOKENS, USD_PER_DEVICE_HOUR

    TRAIN_TOKENS.check("train_tokens", args.train_tokens)
    if args.usd_per_device_hour is not None:
        USD_PER_DEVICE_HOUR.check("usd_per_device_hour", args.usd_per_device_hour)
    calibration = load_calibration(args.calibration) if args.calibration else None
    paths = list(args.workload or []) or [None]
    for i, path in enumerate(paths):
        w = workload_from_args(args, path)
        p = predict(w, calibration=calibration, convention=args.convention, train_tokens=args.train_tokens,
                    trainable_fraction=args.trainable_fraction)
        if args.json:
            print_json({**p.to_dict(), "time_and_cost": _cost(p, args.usd_per_device_hour).to_dict()},
                       lines=len(paths) > 1)
        else:
            if i:
                print()
            print(render(p, args.usd_per_device_hour))
    return 0
