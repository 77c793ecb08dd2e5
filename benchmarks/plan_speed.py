"""How fast ``trainperf plan`` searches: candidate plans per second and the 405B wall time.

Prints, all measured in this run (the machine may be shared, so ratios matter more than
absolute numbers):

* the scalar predictor's rate (``trainperf.predict.predict`` on sampled plans, one call each):
  the baseline a non-vectorised planner would have;
* the vectorised evaluator's rate on the full candidate table of Llama-3.1-405B on 16,384 H100
  at seq 8192 (global batch 2,048 sequences = 16M tokens, Llama 3's final batch), and its
  ratio to the baseline;
* the wall time of the full search as ``trainperf plan`` runs it (enumeration over the generic
  space -- vpp up to layers/pp, Megatron's embedding/loss slots, the plans some packaged stack
  runs --, vectorised evaluation, ranking and the scalar re-prediction of the best 20), median
  of several runs.

Targets (issue 5, issue 16): >= 100,000 candidate plans/s; the full 405B search in < 0.3 s.
Every published workload in < 1 s: ``benchmarks/expert_plans.py`` prints the slowest.

Usage: ``python benchmarks/plan_speed.py [--repeats 5] [--global-batch 2048]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--global-batch", type=int, default=2048)
    ap.add_argument("--num-devices", type=int, default=16384)
    ap.add_argument("--scalar-samples", type=int, default=300)
    args = ap.parse_args()

    from trainperf.plan import vectorized
    from trainperf.plan.search import search, workload_of
    from trainperf.plan.space import SearchSpace, enumerate_candidates
    from trainperf.predict import predict
    from trainperf.specs.hardware import get_hardware
    from trainperf.specs.presets import get_model

    model, hw = get_model("llama3.1-405b"), get_hardware("h100-sxm")
    space = SearchSpace((args.num_devices,), 8, 8192, (args.global_batch,))
    search(model, hw, space, rerank=5)  # warm caches and imports

    # --- baseline: the scalar predictor, one plan per call
    cands = enumerate_candidates(model, hw, space)
    rng = np.random.default_rng(0)
    rows = rng.choice(len(cands), min(args.scalar_samples, len(cands)), replace=False)
    wls = [workload_of(model, hw, space, cands, int(i)) for i in rows]
    t0 = time.perf_counter()
    for w in wls:
        predict(w)
    scalar_rate = len(wls) / (time.perf_counter() - t0)

    # --- vectorised evaluation, and enumeration + evaluation
    eval_t, enum_t, search_t = [], [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        c = enumerate_candidates(model, hw, space)
        t1 = time.perf_counter()
        vectorized.evaluate(c, model, hw, space.seq_len, space.devices_per_node)
        t2 = time.perf_counter()
        enum_t.append(t1 - t0)
        eval_t.append(t2 - t1)
    for _ in range(args.repeats):
        r = search(model, hw, space)
        search_t.append(r.elapsed_s)
    n_valid, n_considered = len(cands), cands.considered
    ev_med, en_med, s_med = (statistics.median(x) for x in (eval_t, enum_t, search_t))
    vec_rate = n_valid / ev_med
    pipeline_rate = n_valid / (ev_med + en_med)

    print(f"workload: llama3.1-405b on {args.num_devices:,} h100-sxm, seq 8192, global batch {args.global_batch}")
    print(f"candidates: {n_considered:,} considered, {n_valid:,} executable (evaluated), "
          f"{r.feasible:,} fit; best: {r.top[0].label} {r.top[0].step_time_s:.3f} s/step")
    print(f"scalar predictor (baseline):      {scalar_rate:12,.0f} plans/s")
    print(f"vectorised evaluation:            {vec_rate:12,.0f} plans/s  ({vec_rate / scalar_rate:,.0f}x baseline)")
    print(f"enumeration + evaluation:         {pipeline_rate:12,.0f} plans/s  "
          f"(enumeration {en_med * 1e3:.0f} ms, evaluation {ev_med * 1e3:.0f} ms, median of {args.repeats})")
    print(f"full search (default rerank):     {s_med:12.3f} s median of {args.repeats} "
          f"(min {min(search_t):.3f}, max {max(search_t):.3f})")
    ok_rate, ok_wall = pipeline_rate >= 100_000, s_med < 0.3
    print(f"targets: >= 100,000 plans/s {'PASS' if ok_rate else 'FAIL'}; 405B search < 0.3 s "
          f"{'PASS' if ok_wall else 'FAIL'}")
    return 0 if ok_rate and ok_wall else 1


if __name__ == "__main__":
    raise SystemExit(main())
