"""Long sequences end to end: published runs at 8k to 256k tokens the predictor was not fitted on.

No row of the published-runs table (``trainperf validate``) has a sequence beyond 8k. The kernel
collection's end-to-end rows do: stas00/ml-engineering @744d01e,
``insights/when-to-upgrade-gpus/README.md``, table "Results: speedup grows with sequence length"
(DeepSpeed 0.19.2, torch 2.13.0/cu130): Llama-3.1-8B, micro batch 1, 8 GPUs, ZeRO-3, activation
checkpointing, CPU offload and Liger kernels, FlashAttention-3 3.0.0 on H200 and FlashAttention-4
4.0.0b22 on B200, model TFLOP/s per GPU with causal attention FLOPs, at 8K, 32K, 64K, 128K, 192K
and 256K tokens. Each becomes a workload: ``llama3.1-8b``, 8 x ``h200-sxm`` or ``b200``, ZeRO-3
over the 8 GPUs (each its own sequence: the row names no sequence parallelism), global batch 8,
full checkpointing, the optimizer offloaded to the host CPU (``offload_optimizer``: the page's "CPU
offload"; taken as DeepSpeed's ``offload_optimizer``, the weights staying on the GPUs), the
``deepspeed`` stack with the attention family the page names and Liger's fused norms, RoPE,
SwiGLU and cross-entropy (a profile file that says so: ``[kernels] attention_by_silicon``,
``elementwise``, ``cross_entropy``). What the predictor does not model: Liger's fused linear
cross-entropy never holding the whole logits (it changes memory, not FLOPs). One row was fitted on: the H200 row at 8K sets the deepspeed profile's
host rate (``[kernels] cpu_optimizer_params_per_s``: the offloaded step is most of that step, MFU
14% against 45% without offload and checkpointing on the same page), so it is in sample by
construction; the B200 row at 8K checks the rate on another host. The page's FA4/FA3 kernel
speedup (1.88x at 8k, 1.95x at 32k) shapes the Blackwell attention curve, and its in-step
attention TFLOP/s at 8k are kernel data, so the B200 rows are not fully out of sample.

The published TFLOP/s is compared at the predictor's own FLOP count ("megatron": matmuls with the
LM head, causal attention halved), so predicted / published time is the inverse TFLOP/s ratio.
Prints per row the published and predicted TFLOP/s, the signed error of the step time (positive =
predicted slower) and the share of attention in the predicted step; then MAPE and mean signed
error over the rows at 32k tokens or more and at 64k or more. Usage:
``python benchmarks/long_context.py [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

SOURCE = ("stas00/ml-engineering@744d01e18b79512572f64a6bbd8b5f4a725203a7:insights/when-to-upgrade-gpus/README.md, "
          "table 'Results: speedup grows with sequence length'")

PUBLISHED: dict[str, dict[int, float]] = {
    # device -> seq len (tokens) -> training step model TFLOP/s per GPU (causal attention)
    "h200-sxm": {8192: 141.0, 32768: 324.0, 65536: 391.0, 131072: 420.0, 196608: 422.0, 262144: 419.0},
    "b200": {8192: 167.0, 32768: 524.0, 65536: 719.0, 131072: 836.0, 196608: 852.0, 262144: 852.0},
}
"""The page's table as the shared kernel collection records it (e2e_fp8_compile.csv, rows 6-17)."""

KERNELS = {"attention": "fa3", "attention_by_silicon": {"blackwell": "fa4"}, "elementwise": "fused",
           "cross_entropy": "fused"}
KERNEL_SOURCES = {
    "attention": "ml-engineering when-to-upgrade-gpus: flash-attn 3.0.0 on H200",
    "attention_by_silicon": "ml-engineering when-to-upgrade-gpus: flash-attn-4 4.0.0b22 on B200",
    "elementwise": "ml-engineering when-to-upgrade-gpus: Liger-Kernel's fused RMSNorm, RoPE and SwiGLU",
    "cross_entropy": "ml-engineering when-to-upgrade-gpus: Liger-Kernel's fused cross-entropy",
}


def _profile(tmp: Path) -> str:
    """The packaged ``deepspeed`` profile (its fitted knobs and facts) with the page's attention
    and Liger kernels, written as a profile file."""
    from trainperf.predict.stacks import packaged_profile

    prof = packaged_profile("deepspeed").with_facts("deepspeed-fa3-fa4", "kernels", KERNELS, KERNEL_SOURCES)
    path = tmp / "deepspeed-fa3-fa4.toml"
    path.write_text(prof.to_toml(), encoding="utf-8")
    return str(path)


def workload(device: str, seq: int, stack: str) -> Any:
    from trainperf.specs.workload_file import workload_from_dict

    return workload_from_dict({
        "model": {"preset": "llama3.1-8b"}, "hardware": {"device": device, "num_devices": 8},
        "parallel": {"fsdp": 8},
        "training": {"seq_len": seq, "global_batch": 8, "micro_batch": 1, "precision": "bf16",
                     "activation_checkpointing": "full", "stack": stack, "offload_optimizer": True}})


def judge(device: str, seq: int, tflops: float, stack: str) -> dict[str, Any]:
    from trainperf.predict import predict

    p = predict(workload(device, seq, stack), convention="megatron")
    published_s = p.step_time_s * p.tflops_per_device / tflops
    return {"device": device, "seq_len": seq, "published_tflops": tflops, "predicted_tflops": p.tflops_per_device,
            "published_s": published_s, "predicted_s": p.step_time_s,
            "signed_pct": 100.0 * (p.step_time_s / published_s - 1.0),
            "attention_share_pct": 100.0 * p.compute_breakdown["attention"] / p.step_time_s,
            "attention_family": p.extra["kernels"]["attn_family"]}


def rows() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        stack = _profile(Path(tmp))
        return [judge(dev, seq, tf, stack) for dev, by_seq in PUBLISHED.items() for seq, tf in by_seq.items()]


def summary(rs: list[dict[str, Any]], min_seq: int) -> tuple[float, float, int]:
    """(MAPE %, mean signed %, rows) over the rows at ``min_seq`` tokens or more."""
    errs = [r["signed_pct"] for r in rs if r["seq_len"] >= min_seq]
    return statistics.mean(abs(e) for e in errs), statistics.mean(errs), len(errs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rs = rows()
    if args.json:
        print(json.dumps(rs, indent=1))
        return 0
    print(f"source: {SOURCE}")
    print(f"{'device':9s} {'seq':>7s} {'kernel':6s} {'published TFLOP/s':>17s} {'predicted TFLOP/s':>17s} "
          f"{'signed %':>8s} {'attention %':>11s}")
    for r in rs:
        print(f"{r['device']:9s} {r['seq_len']:7d} {r['attention_family']:6s} {r['published_tflops']:17.0f} "
              f"{r['predicted_tflops']:17.1f} {r['signed_pct']:+8.1f} {r['attention_share_pct']:11.0f}")
    for lo in (32768, 65536):
        mape, signed, n = summary(rs, lo)
        print(f"rows at {lo // 1024}k tokens or more: MAPE {mape:.1f}%, mean signed {signed:+.1f}% over {n} rows")
    print("signed: positive = predicted slower than published; the H200 row at 8K set the host's optimizer rate "
          "(in sample)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
