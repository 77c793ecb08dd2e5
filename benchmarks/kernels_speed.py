"""Cost of one call of each trainperf.predict.kernels function (goal: a few microseconds per scalar call).

A whole prediction must stay under 0.3 ms and calls these a few dozen times, so each scalar call
should cost a few microseconds; the planner passes arrays of thousands of plans, so the array calls
are timed per element too. Medians of many repeats with ``time.process_time`` (other processes'
load counts less), and in the same run a fixed pure-Python baseline, so a loaded machine shows up
as a slow baseline too. Prints microseconds per call, the ratio to the baseline, and PASS/FAIL
against the goal.

    python benchmarks/kernels_speed.py [--repeats 2000] [--goal-us 5]
"""

from __future__ import annotations

import argparse

from predict_speed import _per_call_s  # same directory: one timing rule for both benchmarks


def _baseline() -> float:
    # ~fixed amount of interpreter work: 1000 float multiply-adds (about the cost of a few calls)
    acc = 0.0
    for i in range(1000):
        acc += i * 0.5
    return acc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=4000)
    ap.add_argument("--goal-us", type=float, default=5.0, help="per scalar call")
    args = ap.parse_args()

    import numpy as np

    from trainperf.predict.kernels import attention, collectives, fp8, gemm, memory_bound

    scalar = {
        "gemm.peak_fraction": lambda: gemm.peak_fraction("hopper", "bf16"),
        "gemm.half_dim": lambda: gemm.half_dim("hopper", "bf16"),
        "gemm.efficiency": lambda: gemm.efficiency("hopper", "bf16", 8192, 4096, 14336),
        "attention.efficiency": lambda: attention.efficiency("hopper", "fa3", 8192, 128, True),
        "attention.efficiency (hd 96)": lambda: attention.efficiency("blackwell", "sdpa", 131072, 96, True),
        "attention.resolve_family": lambda: attention.resolve_family("ampere", "fa3"),
        "collectives.link_params": lambda: collectives.link_params("hopper", "scale-up", "all-reduce"),
        "collectives.link_params (ranks)": lambda: collectives.link_params("hopper", "scale-out", "all-gather", 128),
        "collectives.busbw_fraction": lambda: collectives.busbw_fraction("hopper", "scale-up", "all-gather", 6.4e7),
        "memory_bound.hbm_fraction": lambda: memory_bound.hbm_fraction("hopper"),
        "memory_bound.elementwise_fraction": lambda: memory_bound.elementwise_fraction("hopper", "fused"),
        "fp8.recipe_gemm_factor": lambda: fp8.recipe_gemm_factor("hopper", "tensorwise"),
    }
    for fn in scalar.values():
        fn()  # load params.json and fill the caches once
    base = _per_call_s(_baseline, args.repeats // 10, chunk=20)
    print(f"baseline (1000 float ops in Python): {base * 1e6:8.2f} us per call (measured under whatever load "
          "the machine has)")
    worst = 0.0
    for name, fn in scalar.items():
        t = _per_call_s(fn, args.repeats)
        worst = max(worst, t)
        print(f"{name:36s} {t * 1e6:8.2f} us per call ({t / base:5.2f}x baseline)")
    n = 10_000
    seqs = np.geomspace(512, 262144, n)
    dims = np.linspace(512, 65536, n)
    sizes = np.geomspace(1e3, 1e10, n)
    arrays = {
        "gemm.efficiency (10k shapes)": lambda: gemm.efficiency("hopper", "fp8", dims, dims, 8192),
        "attention.efficiency (10k lengths)": lambda: attention.efficiency("hopper", "fa3", seqs, 128, True),
        "collectives.busbw_fraction (10k sizes)": lambda: collectives.busbw_fraction("hopper", "scale-out",
                                                                                       "all-reduce", sizes, 64),
    }
    for name, fn in arrays.items():
        t = _per_call_s(fn, 200, chunk=10)
        print(f"{name:36s} {t * 1e6:8.1f} us per call, {t / n * 1e9:6.1f} ns per element")
    ok = worst * 1e6 < args.goal_us
    print(f"slowest scalar call {worst * 1e6:.2f} us (goal < {args.goal_us} us): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
