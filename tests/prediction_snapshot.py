"""What the predictor and the planner say, captured once so a restructuring can prove it changed
nothing (issue 28).

``python tests/prediction_snapshot.py`` (with ``PYTHONPATH=src``) writes
``tests/fixtures/prediction_snapshot.json``; ``tests/test_prediction_snapshot.py`` recomputes
every figure and compares. Captured:

* ``table``: every row of the packaged published-runs table: why it is excluded, if it is, and
  for each that maps to a workload, the full
  :func:`trainperf.predict.predict` result (step time, breakdown, compute breakdown, each
  collective's bytes, time and exposed time, memory by category, MFU, bottleneck, notes) and the
  step time ``trainperf validate`` computes for the row;
* ``documents``: every run read from the five public documents (the seeds), each with its
  workload written out as a workload-file dict, so the case outlives the catalog it came from;
* ``plans``: six planner searches: the counts (considered, rejected by reason, fitting), the
  top plans after re-prediction, the vectorised ranking's first 50 step times, and sums over
  every evaluated plan's step time and memory.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).parent / "fixtures" / "prediction_snapshot.json"

PLAN_CASES: tuple[dict[str, Any], ...] = (
    {"name": "405b-16384xh100", "model": "llama3.1-405b", "device": "h100-sxm", "devices": 16384,
     "seq": 8192, "gbs": 2048},
    {"name": "llama3-8b-8xh100-torchtitan-compile", "model": "llama3-8b", "device": "h100-sxm", "devices": 8,
     "seq": 8192, "gbs": 32, "stack": "torchtitan", "compile": True, "async_tp": True},
    {"name": "llama2-70b-64xh100-megatron-fp8", "model": "llama2-70b", "device": "h100-sxm", "devices": 64,
     "seq": 4096, "gbs": 128, "stack": "megatron-core", "precisions": ("bf16", "fp8")},
    {"name": "mixtral-8x7b-64xmi300x", "model": "mixtral-8x7b", "device": "mi300x", "devices": 64,
     "seq": 4096, "gbs": 256},
    {"name": "deepseek-v3-1024xh100-megatron", "model": "deepseek-v3", "device": "h100-sxm", "devices": 1024,
     "seq": 4096, "gbs": 2048, "stack": "megatron-core"},
    {"name": "gpt3-175b-512xtpu-v5p-maxtext", "model": "gpt3-175b", "device": "tpu-v5p", "devices": 512,
     "seq": 2048, "gbs": 1024, "stack": "maxtext"},
)


def _num(x: Any) -> Any:
    """JSON-safe number (inf and nan as strings)."""
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    x = float(x)
    return x if math.isfinite(x) else repr(x)


def prediction_figures(p: Any) -> dict[str, Any]:
    """A :class:`~trainperf.predict.step.Prediction` as flat ``path -> value``."""
    out: dict[str, Any] = {}
    for key in ("step_time_s", "tokens_per_s", "tokens_per_s_per_device", "tflops_per_device", "mfu_pct",
                "hfu_pct", "peak_tflops", "days_to_train", "memory_per_device_GiB", "memory_capacity_GiB"):
        out[key] = _num(getattr(p, key))
    out["fits"] = p.fits
    out["bottleneck"] = p.bottleneck
    out["notes"] = list(p.notes)
    out["convention"] = p.convention
    for name, v in p.breakdown.items():
        out[f"breakdown.{name}"] = _num(v)
    for name, v in p.compute_breakdown.items():
        out[f"compute.{name}"] = _num(v)
    for name, v in p.memory_breakdown_GiB.items():
        out[f"memory.{name}"] = _num(v)
    for c in p.collectives:
        for key in ("algorithm", "link", "group_size", "bytes_per_device", "time_s", "exposed_s"):
            out[f"collective.{c.name}.{key}"] = _num(getattr(c, key))
    out["microbatch_s"] = _num(p.extra.get("microbatch_s"))
    for key, v in sorted(p.extra.get("kernels", {}).items()):
        out[f"kernels.{key}"] = _num(v) if not isinstance(v, str) else v
    if p.interval is not None:
        out["interval.low_s"] = _num(p.interval.low_s)
        out["interval.high_s"] = _num(p.interval.high_s)
    return out


def capture_table() -> dict[str, Any]:
    from trainperf.predict import predict
    from trainperf.predict.runs_table import packaged_runs
    from trainperf.predict.validate_runs import predict_row

    out: dict[str, Any] = {}
    for r in packaged_runs():
        if r.workload is None:
            out[r.row_id] = {"exclude_reason": r.exclude_reason}
            continue
        figs = prediction_figures(predict(r.workload))
        figs["exclude_reason"] = r.exclude_reason
        if r.included:
            figs["validate_step_time_s"] = _num(predict_row(r))
        out[r.row_id] = figs
    return out


def document_runs() -> list[tuple[str, dict[str, Any], float]]:
    """(id, workload-file dict, trainable fraction) of every run of the five documents: read from
    the snapshot itself (their catalog, ``predict/data/published.toml``, was retired in issue 28;
    the workloads were written out when the snapshot was first taken)."""
    old = json.loads(SNAPSHOT.read_text(encoding="utf-8"))["documents"]
    return [(rid, case["workload"], case["trainable_fraction"]) for rid, case in old.items()]


def predict_document(wdict: dict[str, Any], trainable_fraction: float) -> dict[str, Any]:
    from trainperf.predict import predict
    from trainperf.specs.workload_file import workload_from_dict

    return prediction_figures(predict(workload_from_dict(wdict), trainable_fraction=trainable_fraction))


def capture_documents() -> dict[str, Any]:
    return {rid: {"workload": wd, "trainable_fraction": tf, "figures": predict_document(wd, tf)}
            for rid, wd, tf in document_runs()}


def run_plan_case(case: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from trainperf.plan.search import search
    from trainperf.plan.space import SearchSpace
    from trainperf.specs.hardware import get_hardware
    from trainperf.specs.presets import get_model

    model, hw = get_model(case["model"]), get_hardware(case["device"])
    space = SearchSpace((case["devices"],), hw.devices_per_node, case["seq"], (case["gbs"],),
                        precisions=tuple(case.get("precisions", ("bf16",))), stack=case.get("stack", "generic"),
                        compile=case.get("compile", False), async_tp=case.get("async_tp", False))
    r = search(model, hw, space)
    ev = r.all_eval
    finite = np.isfinite(ev.step_time_s)
    return {
        "considered": r.considered, "rejected": dict(sorted(r.rejected.items())), "feasible": r.feasible,
        "collapsed": r.collapsed, "ranked": len(r.ranked),
        "vector_top50_step_time_s": [_num(x) for x in r.step_time_s[:50]],
        "vector_finite_plans": int(finite.sum()),
        "vector_step_time_sum_s": _num(ev.step_time_s[finite].sum()),
        "vector_memory_sum_GiB": _num(ev.memory_GiB.sum()),
        "top": [{"label": p.label, "step_time_s": _num(p.step_time_s), "vector_step_time_s": _num(p.vector_step_time_s),
                 "mfu_pct": _num(p.mfu_pct), "memory_GiB": _num(p.memory_GiB), "tokens_per_s": _num(p.tokens_per_s),
                 "bottleneck": p.bottleneck, "stacks": list(p.stacks),
                 "breakdown": {k: _num(v) for k, v in p.breakdown_s.items()}}
                for p in r.top[:5]],
    }


def capture_plans() -> dict[str, Any]:
    return {case["name"]: run_plan_case(case) for case in PLAN_CASES}


def main() -> int:
    data = {"table": capture_table(), "documents": capture_documents(), "plans": capture_plans()}
    SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
    SNAPSHOT.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT}: {len(data['table'])} table rows, {len(data['documents'])} document runs, "
          f"{len(data['plans'])} searches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
