"""How long one prediction takes, once imported (goal: under 0.3 ms of CPU).

Times ``trainperf.predict.predict`` on published workloads, one row of the packaged published-runs
table per (device, software stack) (median of many repeats,
``time.process_time`` so other processes' load counts less) and, in the same run, a fixed
pure-Python baseline, so a loaded machine shows up as a slow baseline too. Prints per-call
microseconds, the ratio to the baseline, and PASS/FAIL against the 0.3 ms goal.

    python benchmarks/predict_speed.py [--repeats 300]
"""

from __future__ import annotations

import argparse
import statistics
import time


def _baseline() -> float:
    # ~fixed amount of interpreter work: 20k float multiply-adds
    acc = 0.0
    for i in range(20_000):
        acc += i * 0.5
    return acc


def _per_call_s(fn, repeats: int, chunk: int = 20) -> float:
    samples = []
    for _ in range(max(1, repeats // chunk)):
        t0 = time.process_time()
        for _ in range(chunk):
            fn()
        samples.append((time.process_time() - t0) / chunk)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=300)
    ap.add_argument("--goal-ms", type=float, default=0.3)
    args = ap.parse_args()

    from trainperf.predict import predict
    from trainperf.predict.runs_table import included, packaged_runs

    picks = {(r.workload.hardware.id, r.stack): r for r in included(packaged_runs())}  # one per device and stack
    base = _per_call_s(_baseline, args.repeats)
    print(f"baseline (20k float ops in Python): {base * 1e6:8.1f} us per call")
    worst = 0.0
    for r in picks.values():
        w = r.workload
        predict(w)  # warm caches (catalog, presets)
        t = _per_call_s(lambda w=w: predict(w), args.repeats)
        worst = max(worst, t)
        print(f"predict {w.model.name[:15]:15s} {w.num_devices:5d}x {w.hardware.id:14s} {r.stack:16s} {t * 1e6:8.1f} us "
              f"per call ({t / base:5.2f}x baseline)")
    ok = worst * 1e3 < args.goal_ms
    print(f"slowest prediction {worst * 1e3:.3f} ms (goal < {args.goal_ms} ms): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
