"""``trainperf calibrate``: measure this machine's matmul TFLOP/s per dtype and memory bandwidth.

The result is cached (``$TRAINPERF_CACHE_DIR/calibration.json``) under the CPU model name, core
count, matmul ISA flags and thread count, merged with the dtypes already cached for them;
``trainperf bench`` and every command that takes ``--device cpu`` use it as the CPU's peak for
MFU. bf16 is measured by default only where the CPU computes it natively (``--dtypes`` to force).

Given a CPU workload file (a bench run's ``workload.toml``, or one written by hand), it also
times, at that workload's shapes and with its threads per process, the kernels the predictor
prices a CPU step with (GEMMs, attention, elementwise ops, per-operator host time, the
optimizer: :func:`trainperf.measure.kernel_calibration.calibrate_for_run`, what a bench run of it
measures before it trains), so that ``trainperf predict`` stands on this machine before any run;
with several processes it starts them here and times gloo's collectives and FSDP2's / DTensor's
host time between them too (:mod:`trainperf.measure.collectives_here`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from trainperf.cli.common import add_json_argument, eprint, print_json, table
from trainperf.errors import SpecError
from trainperf.specs.bounds import (
    CALIBRATE_REPEATS,
    CALIBRATE_ROUNDS,
    CALIBRATE_SIZE,
    CALIBRATE_SIZE_COUNT,
    Bound,
)

HELP = ("measure this machine's matmul TFLOP/s per dtype and memory bandwidth (the CPU peak for MFU); given a "
        "CPU workload file, the kernels predict prices it with too")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", nargs="?", metavar="WORKLOAD",
                        help="a CPU workload file (a bench run's workload.toml): also time its kernels at its shapes "
                             "and threads per process (with several processes, gloo between them too), which "
                             "`trainperf predict` of it then stands on")
    parser.add_argument("--rounds", type=int, default=3, metavar="N",
                        help="with a WORKLOAD: times its kernels (and gloo) N times; the cache keeps their mean, as "
                             "it keeps the mean of bench runs' (default 3: one round moved a 2-process TP prediction "
                             "by 20%% here)")
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


def _cores_used() -> int:
    from trainperf.specs.cpu_calibration import _cores_used as cores

    return cores()


def _check_threads(field: str, threads: int) -> None:
    """At most the cores this process may use: more threads than cores time their contention."""
    cores = _cores_used()
    Bound(1, cores, f"the {cores} core(s) this process may use: more threads than cores time their "
                    "contention, not the peak").check(field, threads)


def _checked_sizes_and_repeats(args: argparse.Namespace) -> dict[str, Any]:
    """``--sizes`` and ``--repeats`` within their bounds (:mod:`trainperf.specs.bounds`), and the
    largest matmul's three fp32 matrices within half this machine's memory; one line otherwise,
    before torch is imported."""
    from trainperf.measure.limits import physical_memory_bytes

    out: dict[str, Any] = {}
    if args.sizes:
        try:
            sizes = tuple(int(x) for x in args.sizes.split(","))
        except ValueError:
            raise SpecError("--sizes", args.sizes, "comma-separated positive integers, e.g. 2048,4096") from None
        CALIBRATE_SIZE_COUNT.check("--sizes", len(sizes))
        for n in sizes:
            CALIBRATE_SIZE.check("--sizes", n)
        ram = physical_memory_bytes()
        if ram and 12 * max(sizes) ** 2 > ram // 2:
            most = int((ram // 24) ** 0.5)
            raise SpecError("--sizes", max(sizes), f"at most {most:,} here: three {max(sizes):,}^2 fp32 matrices "
                                                   f"need {12 * max(sizes) ** 2 / 2**30:,.1f} GiB, over half of "
                                                   f"this machine's {ram / 2**30:,.1f} GiB")
        out["sizes"] = sizes
    if args.repeats is not None:
        out["repeats"] = CALIBRATE_REPEATS.check("--repeats", args.repeats)
    return out


_WORKLOAD_DTYPES = {"fp32": ("fp32",), "bf16": ("bf16",), "fp8": ("bf16", "fp8")}
"""The matmul dtypes a workload's kernels are timed against (their peaks must be in the cache), for
each precision the bench trains in on a CPU."""


def _workload(args: argparse.Namespace) -> tuple[Any, int | None]:
    """The CPU workload to time the kernels of, and the threads per process to calibrate with:
    the workload's own (``threads_per_device``, else the cores shared out among its processes on
    a node); ``--threads`` alone without a workload."""
    if args.workload is None:
        return None, args.threads
    from trainperf.specs.cpu_calibration import threads_per_process
    from trainperf.specs.workload_file import load_workload

    if args.device != "cpu":
        raise SpecError("--device", args.device, "cpu with a WORKLOAD (its kernels are timed on this CPU)")
    if args.dry_run:
        raise SpecError("--dry-run", True, "absent with a WORKLOAD (its kernels are timed into the cache)")
    w = load_workload(args.workload)
    if w.hardware.kind != "cpu":
        raise SpecError("hardware.device", w.hardware.id, f"cpu in {args.workload} (this command times this CPU)")
    if w.precision not in _WORKLOAD_DTYPES:
        raise SpecError("training.precision", w.precision,
                        f"one of {', '.join(_WORKLOAD_DTYPES)} (what the bench trains in on a CPU)")
    threads = int(w.threads_per_device) or threads_per_process(int(w.devices_per_node))
    _check_threads("hardware.threads_per_device", threads)
    if args.threads is not None and args.threads != threads:
        raise SpecError("--threads", args.threads, f"absent or {threads}, the workload's threads per process")
    return w, threads


def _time_workload(workload: Any, threads: int, rounds: int, say: Callable[[str], None]) -> None:
    """``rounds`` timings of the workload's kernels (and, with several processes, of gloo between
    them), each merged into the cache's running means as a bench run's are."""
    from trainperf.measure.kernel_calibration import calibrate_for_run

    say(f"timing the kernels of {workload.describe()} at {threads} thread(s) per process, {rounds} round(s)")
    for _ in range(rounds):
        calibrate_for_run(workload, threads, say)
    if workload.num_devices > 1:
        from trainperf.measure.collectives_here import calibrate_collectives_here, processes_here

        say(f"timing gloo's collectives and the sharded modules' host time between {processes_here(workload)} "
            f"processes of {threads} thread(s), as a bench run of it does before it trains, {rounds} round(s)")
        calibrate_collectives_here(workload, threads, say, rounds)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    checked = _checked_sizes_and_repeats(args)  # before torch is imported: a refusal is instant
    CALIBRATE_ROUNDS.check("--rounds", args.rounds)
    if args.threads is not None:
        _check_threads("--threads", args.threads)
    from trainperf.measure.calibrate import CalibrationPlan, calibrate
    from trainperf.specs.cpu_calibration import save_calibration

    plan = CalibrationPlan.quick() if args.quick else CalibrationPlan()
    plan = dataclasses.replace(plan, **checked)
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
    workload, threads = _workload(args)
    if workload is not None:  # its matmul dtype (an fp8 run's attention and elementwise ops: bf16)
        dtypes = tuple(dict.fromkeys((*dtypes, *_WORKLOAD_DTYPES.get(workload.precision, ()))))
    plan = dataclasses.replace(plan, dtypes=dtypes)
    say = eprint if args.json else print
    cal = calibrate(plan, threads=threads, device=args.device, progress=say)
    if not args.dry_run:  # keep the other dtypes already measured with this CPU and thread count
        from trainperf.specs.cpu_calibration import load_calibration

        old = load_calibration(cpu_model=cal.cpu_model, threads=cal.threads)
        if old is not None:
            cal = dataclasses.replace(cal, peak_tflops={**old.peak_tflops, **cal.peak_tflops})
    path = None if args.dry_run else str(save_calibration(cal))
    if workload is not None and threads is not None:
        _time_workload(workload, threads, args.rounds, say)
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
