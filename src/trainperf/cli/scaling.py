"""``trainperf scaling``: weak or strong scaling efficiency between a base run and a larger one."""

from __future__ import annotations

import argparse

from trainperf.accounting.scaling import (
    per_device_efficiency,
    strong_scaling_efficiency,
    weak_scaling_efficiency,
)
from trainperf.cli.common import add_json_argument, print_json
from trainperf.errors import SpecError

HELP = "weak or strong scaling efficiency between two runs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=("strong", "weak"), required=True,
                        help="strong: global batch fixed; weak: per-device batch fixed")
    parser.add_argument("--base-devices", type=int, required=True, metavar="N")
    parser.add_argument("--devices", type=int, required=True, metavar="N")
    parser.add_argument("--base-step-time", type=float, metavar="S")
    parser.add_argument("--step-time", type=float, metavar="S")
    parser.add_argument("--base-tokens-per-s", type=float, metavar="X", help="global tokens/s of the base run")
    parser.add_argument("--tokens-per-s", type=float, metavar="X", help="global tokens/s of the larger run")
    parser.add_argument("--base-per-device", type=float, metavar="X",
                        help="per-device throughput of the base run (tokens/s or TFLOP/s)")
    parser.add_argument("--per-device", type=float, metavar="X", help="per-device throughput of the larger run")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from trainperf.specs.bounds import NUM_DEVICES

    NUM_DEVICES.check("--base-devices", args.base_devices)
    NUM_DEVICES.check("--devices", args.devices)
    if args.base_per_device is not None and args.per_device is not None:
        eff, basis = per_device_efficiency(args.base_per_device, args.per_device), "per-device throughput ratio"
    elif args.mode == "strong" and args.base_step_time is not None and args.step_time is not None:
        eff = strong_scaling_efficiency(args.base_devices, args.base_step_time, args.devices, args.step_time)
        basis = "T_base*N_base / (T_N*N), global batch fixed"
    elif args.base_tokens_per_s is not None and args.tokens_per_s is not None:
        if args.mode == "strong":
            eff = weak_scaling_efficiency(args.base_devices, args.base_tokens_per_s, args.devices, args.tokens_per_s)
            basis = "(X_N/X_base) / (N/N_base), global batch fixed"
        else:
            eff = weak_scaling_efficiency(args.base_devices, args.base_tokens_per_s, args.devices, args.tokens_per_s)
            basis = "(X_N/X_base) / (N/N_base), per-device batch fixed"
    elif args.mode == "weak" and args.base_step_time is not None and args.step_time is not None:
        eff, basis = args.base_step_time / args.step_time, "T_base / T_N, per-device batch fixed"
    else:
        raise SpecError("rates", "missing", "give --base-step-time/--step-time, --base-tokens-per-s/"
                        "--tokens-per-s, or --base-per-device/--per-device")
    if args.json:
        print_json({"mode": args.mode, "efficiency_pct": 100 * eff, "basis": basis,
                    "base_devices": args.base_devices, "devices": args.devices})
    else:
        print(f"{args.mode} scaling efficiency {args.base_devices} -> {args.devices} devices: "
              f"{100 * eff:.2f}%  ({basis})")
    return 0
