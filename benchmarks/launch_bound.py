"""Single-GPU eager and compiled steps, launch-bound and device-bound, the predictor was not fitted on.

stas00/ml-engineering ``training/performance/README.md``, "torch.compile" section tables
(``torch-compile-bench.py``, torch 2.13.0+cu130, one B200, bf16, Hugging Face Transformers Llama
with SDPA attention, batch 1):
the forward + backward + AdamW step with gradient checkpointing, eager and under
``torch.compile`` (default mode), of

* Llama-3.2-1B at 512 tokens: 58.8 ms eager, 18.7 ms compiled. So little work per kernel that
  the host's launches set the step (the compiled step launches fewer, fused kernels);
* Llama-3.1-8B at 8,192 tokens: 637.3 ms eager, 673.8 ms compiled (compiling did not help).

Each is predicted with the generic profile (the stack of an unknown framework: no host launch
model, a per-kernel cost fitted on published runs, all device-bound), with
``--stack trainperf-bench``, whose launch model is measured (the kernels an eager PyTorch decoder
layer launches and the host's microseconds a kernel, on trainperf's own reference model), and
with ``--stack hf-transformers`` (a Hugging Face Llama layer's kernels, 34 forward and 106
forward and backward, counted with torch.profiler on transformers 5.24's LlamaForCausalLM on a
CPU, at the bench's host cost). The compiled 1B step set the share of the launch cost a compiled
step keeps (``compile_overhead_factor``): it is in sample. The 8B pair (compiling did not help) is
part of the evidence, with the same page's Liger-Kernel row, for the share of unfused ops' extra
passes a step pays (``EAGER_PASS_SHARE`` in ``trainperf.predict.stack_kernels``), so it is not fully
out of sample either; the eager 1B step is. Prints the published and
predicted step, the signed error (positive = predicted slower). Usage:
``python benchmarks/launch_bound.py [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

SOURCE = "stas00/ml-engineering@744d01e training/performance/README.md (torch.compile tables)"

RUNS: tuple[dict[str, Any], ...] = (
    {"model": "llama3.2-1b", "seq_len": 512, "compile": False, "published_ms": 58.8},
    {"model": "llama3.2-1b", "seq_len": 512, "compile": True, "published_ms": 18.7},
    {"model": "llama3.1-8b", "seq_len": 8192, "compile": False, "published_ms": 637.3},
    {"model": "llama3.1-8b", "seq_len": 8192, "compile": True, "published_ms": 673.8},
)
STACKS = ("generic", "trainperf-bench", "hf-transformers")


def judge(run: dict[str, Any], stack: str) -> dict[str, Any]:
    from trainperf.predict import predict
    from trainperf.specs.workload_file import workload_from_dict

    w = workload_from_dict({
        "model": {"preset": run["model"]}, "hardware": {"device": "b200", "num_devices": 1},
        "training": {"seq_len": run["seq_len"], "global_batch": 1, "micro_batch": 1, "precision": "bf16",
                     "activation_checkpointing": "full", "compile": run["compile"], "stack": stack}})
    predicted_ms = 1e3 * predict(w).step_time_s
    return {**run, "stack": stack, "predicted_ms": predicted_ms,
            "signed_pct": 100.0 * (predicted_ms / run["published_ms"] - 1.0)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [judge(r, s) for s in STACKS for r in RUNS]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'stack':16s} {'model':12s} {'tokens':>6s} {'mode':8s} {'published ms':>12s} {'predicted ms':>12s} "
          f"{'signed %':>8s}")
    for r in rows:
        print(f"{r['stack']:16s} {r['model']:12s} {r['seq_len']:6d} {'compile' if r['compile'] else 'eager':8s} "
              f"{r['published_ms']:12.1f} {r['predicted_ms']:12.1f} {r['signed_pct']:+8.1f}")
    for s in STACKS:
        errs = [r["signed_pct"] for r in rows if r["stack"] == s]
        print(f"{s}: MAPE {statistics.mean(abs(e) for e in errs):.1f}%, mean signed {statistics.mean(errs):+.1f}% "
              f"over {len(errs)} runs ({SOURCE})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
