"""``trainperf calibrate``: measure this machine's matmul TFLOP/s per dtype and memory bandwidth.

The result is cached (``$TRAINPERF_CACHE_DIR/calibration.json``) under the CPU model name, core
count, matmul ISA flags and thread count, merged with the dtypes already cached for them;
``trainperf bench`` and every command that takes ``--device cpu`` use it as the CPU's peak for
MFU. bf16 is measured by default only where the CPU computes it natively (``--dtypes`` to force).
"""

from __future__ import annotations

import argparse

from trainperf.cli.common import add_json_argument, eprint, print_json, table
from trainperf.errors import SpecError

HELP = "measure this machine's matmul TFLOP/s per dtype and memory bandwidth (the CPU peak for MFU)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a few seconds instead of about half a minute")
    parser.add_argument("--threads", type=int, metavar="N", help="threads to use (default: torch's default)")
    parser.add_argument("--sizes", metavar="N,N", help="matmul sizes (default 2048,4096; quick 1536)")
    parser.add_argument("--repeats", type=int, metavar="N", help="timed repeats per size (default 5)")
    parser.add_argument("--dtypes", metavar="D,D",
                        help="dtypes to measure, of fp32,bf16,fp8 (fp8: torch._scaled_mm; default: fp32, plus bf16 where the device "
                             "computes it natively; emulated bf16 can take minutes at the default sizes)")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="what to measure (default cpu)")
    parser.add_argument("--dry-run", action="store_true", help="measure and print, do not write the cache")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from trainperf.measure.calibrate import CalibrationPlan, calibrate
    from trainperf.specs.cpu_calibration import save_calibration

    plan = CalibrationPlan.quick() if args.quick else CalibrationPlan()
    if args.sizes:
        try:
            sizes = tuple(int(x) for x in args.sizes.split(","))
        except ValueError:
            raise SpecError("--sizes", args.sizes, "comma-separated positive integers, e.g. 2048,4096") from None
        if not sizes or min(sizes) <= 0:
            raise SpecError("--sizes", args.sizes, "comma-separated positive integers")
        plan = dataclasses.replace(plan, sizes=sizes)
    if args.repeats is not None:
        if args.repeats < 1:
            raise SpecError("--repeats", args.repeats, "a positive integer")
        plan = dataclasses.replace(plan, repeats=args.repeats)
    if args.device == "cuda":
        from trainperf.measure.runner import local_device_type

        if local_device_type() != "cuda":
            raise SpecError("--device", "cuda", "cpu (no CUDA/ROCm device is visible to torch)")
    if args.dtypes:
        from trainperf.measure.calibrate import DTYPES

        dtypes = tuple(d.strip().lower() for d in args.dtypes.split(",") if d.strip())
        if not dtypes or any(d not in DTYPES for d in dtypes):
            raise SpecError("--dtypes", args.dtypes, f"comma-separated, of {', '.join(DTYPES)}")
    else:
        from trainperf.measure.precision import detect_native_bf16

        dtypes = ("fp32", "bf16") if detect_native_bf16(args.device).native else ("fp32",)
    plan = dataclasses.replace(plan, dtypes=dtypes)
    if args.threads is not None and args.threads < 1:
        raise SpecError("--threads", args.threads, "a positive integer")
    say = eprint if args.json else print
    cal = calibrate(plan, threads=args.threads, device=args.device, progress=say)
    if not args.dry_run:  # keep the other dtypes already measured with this CPU and thread count
        from trainperf.specs.cpu_calibration import load_calibration

        old = load_calibration(cpu_model=cal.cpu_model, threads=cal.threads)
        if old is not None:
            cal = dataclasses.replace(cal, peak_tflops={**old.peak_tflops, **cal.peak_tflops})
    path = None if args.dry_run else str(save_calibration(cal))
    if args.json:
        print_json({**cal.to_dict(), "cache": path})
        return 0
    rows = [(f"matmul {k}", f"{v:.4f} TFLOP/s") for k, v in cal.peak_tflops.items()]
    rows.append(("memory bandwidth (copy)", f"{cal.memory_bandwidth_GB_per_s:.1f} GB/s"))
    print(f"{cal.cpu_model}, {cal.threads} threads")
    print(table(rows, ["", ""]))
    print(f"method: {cal.method}")
    print(f"saved to {path}" if path else "not saved (--dry-run)")
    return 0
