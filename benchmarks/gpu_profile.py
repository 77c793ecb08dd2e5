"""Where a bench step's time goes on the device, measured: kernels by kind, and how busy the device is.

Builds the bench's own training process (:class:`trainperf.measure.trainer.BenchRun`, the code
``trainperf bench`` runs) from a run's ``workload.toml``, runs ``--warmup`` steps, then profiles
``--steps`` steps with ``torch.profiler`` and sums the device's kernel time by kind:

* ``gemm`` (cuBLAS, cuBLASLt, CUTLASS, nvjet, ``_scaled_mm``), ``attention`` (flash, cuDNN, efficient
  SDPA kernels), ``optimizer`` (fused AdamW, the foreach multi-tensor kernels), ``loss``
  (log-softmax, NLL, cross-entropy), ``norm`` (RMSNorm), ``compiled`` (Triton kernels of
  ``torch.compile``), ``communication`` (NCCL), ``copy`` (memcpy, memset, casts), and
  ``elementwise`` (everything else: activations, adds, reductions, the autocast copies);

and per step: the wall time (timed without the profiler, then with it), the device's busy time (the union of its kernel intervals), the
kernel count, and the host's time per kernel launched (wall / kernels) where the device sits idle:
the figure that prices a launch-bound step. On a CPU the same ops are summed by their CPU time
(no device kernels), so the script also runs here. One JSON object goes to stdout (and ``--json``);
the predictor's breakdown for the same workload is included for comparison.

    python3 benchmarks/gpu_profile.py RUN/workload.toml --steps 3 --warmup 3 --json OUT.json
    python3 benchmarks/gpu_profile.py RUN/workload.toml --layers 8   # the same model, 8 layers
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("communication", re.compile(r"nccl", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|cudnn|sdpa|efficient_attention", re.I)),
    ("gemm", re.compile(r"gemm|cutlass|nvjet|cublas|xmma|scaled_mm|sm90_|sm100_|matmul|addmm|bmm|aten::mm\b|"
                         r"aten::linear|MmBackward", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach", re.I)),
    ("loss", re.compile(r"softmax|nll|cross_entropy", re.I)),
    ("norm", re.compile(r"rms_?norm|layer_?norm", re.I)),
    ("compiled", re.compile(r"^triton_", re.I)),
    ("copy", re.compile(r"memcpy|memset|copy|cast|to_copy|fill", re.I)),
)
"""First match wins: a kernel's kind by its name."""


def kind_of(name: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "elementwise"


def busy_us(intervals: list[tuple[float, float]]) -> float:
    """The union of the intervals' lengths (us): the time the device ran at least one kernel."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def build(workload_path: str, out_dir: str, layers: int | None = None):
    from trainperf.measure.runner import local_device_type
    from trainperf.measure.trainer import BenchConfig, BenchRun
    from trainperf.specs.workload_file import load_workload, workload_to_dict

    w = load_workload(workload_path, {"model.layers": layers} if layers else None)
    device = local_device_type()
    cfg = BenchConfig(workload=workload_to_dict(w), steps=10**6, seed=0, out_dir=out_dir,
                      device_type=device, quiet=True)
    return w, BenchRun(cfg, say=lambda m: None), device


def profile(run, device: str, warmup: int, steps: int) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def timed(first: int) -> list[float]:
        walls = []
        for k in range(first, first + steps):
            t = time.perf_counter()
            loss, _ = run.train_step(k)
            float(loss)
            sync()
            walls.append(time.perf_counter() - t)
        return walls

    for k in range(1, warmup + 1):
        run.train_step(k)
    sync()
    plain = timed(warmup + 1)  # the profiler slows the host: time the same steps without it first
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch_profile(activities=acts) as prof:
        profiled = timed(warmup + steps + 1)
    return {"walls_s": plain, "profiled_walls_s": profiled, **summarise(prof.events(), device, steps)}


def summarise(events: Any, device: str, steps: int) -> dict[str, Any]:
    """Kernel time by kind (ms per step), busy time and kernel count per step."""
    by_kind: dict[str, float] = {}
    top: dict[str, float] = {}
    intervals: list[tuple[float, float]] = []
    for e in events:
        is_kernel = str(getattr(e, "device_type", "")).endswith("CUDA") if device == "cuda" else \
            (e.cpu_parent is None)  # on a CPU: top-level ops only, so nothing counts twice
        if not is_kernel or getattr(e, "is_user_annotation", False):  # a range, not a kernel
            continue
        dur = e.time_range.end - e.time_range.start
        by_kind[kind_of(e.name)] = by_kind.get(kind_of(e.name), 0.0) + dur
        top[e.name] = top.get(e.name, 0.0) + dur
        intervals.append((e.time_range.start, e.time_range.end))
    n = len(intervals)
    return {
        "kernel_ms_per_step": {k: round(v / steps / 1e3, 4) for k, v in sorted(by_kind.items(), key=lambda x: -x[1])},
        "busy_ms_per_step": round(busy_us(intervals) / steps / 1e3, 4),
        "kernels_per_step": n // steps,
        "top_kernels_ms_per_step": {k[:120]: round(v / steps / 1e3, 4)
                                    for k, v in sorted(top.items(), key=lambda x: -x[1])[:25]},
    }


def predicted(w: Any) -> dict[str, Any]:
    from trainperf.predict.step import predict

    p = predict(w)
    d = p.to_dict() if hasattr(p, "to_dict") else {}
    return {k: d.get(k) for k in ("step_time_s", "breakdown", "bottleneck")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", help="a bench run's workload.toml")
    p.add_argument("--warmup", type=int, default=3, help="steps before profiling (default 3)")
    p.add_argument("--steps", type=int, default=3, help="steps profiled (default 3)")
    p.add_argument("--layers", type=int, help="override the model's layer count (two counts give a layer's share)")
    p.add_argument("--json", help="also write the result here")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        w, run, device = build(a.workload, tmp, a.layers)
        out = profile(run, device, a.warmup, a.steps)
    wall = statistics.median(out["walls_s"])
    out["wall_ms_per_step"] = round(wall * 1e3, 4)
    out["idle_pct"] = round(100 * (1 - out["busy_ms_per_step"] / out["wall_ms_per_step"]), 1)
    out["profiled_wall_ms_per_step"] = round(statistics.median(out["profiled_walls_s"]) * 1e3, 4)
    out["host_us_per_kernel"] = round(1e3 * out["wall_ms_per_step"] / max(1, out["kernels_per_step"]), 2)
    out["device"] = device
    out["workload"] = a.workload
    try:
        out["prediction"] = predicted(w)
    except Exception as e:  # the comparison is a bonus: the measurement stands without it
        out["prediction"] = {"error": f"{type(e).__name__}: {e}"}
    text = json.dumps(out, indent=2)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
