"""Silicon no published table covers: end-to-end runs the predictor was not fitted on.

The published-runs table (``trainperf validate``) has runs on A100, H100 and TPU v5e only. Other
public end-to-end results, on MI300X, B200 and H200, were never used to fit anything but (for
some) an fp8 or attention ratio; they are the check of a stack on a GPU nobody fitted:

* torchao's float8 training docs (``pytorch/ao@36027d8:docs/source/workflows/training.md``,
  "e2e training benchmarks"): torchtitan, Llama3-8B, 8 GPUs, FSDP2, torch.compile, per-op SAC,
  batch 1 x seq 8192, median tokens/s per GPU over 100 steps, bf16 baselines on H100 ("SXM
  presumed"; torchtitan's own H100s are 500 W HBM2e parts, ``h100-sxm-hbm2e``), MI300X and a
  power-limited B200 (cap not stated; how slow it ran: one B200 elsewhere runs a step of the same
  model at the same 8192 tokens, with every layer recomputed and no communication, in 0.64 s, and
  trainperf predicts that step +6%, ``benchmarks/launch_bound.py``, against this row's 0.99 s). The fp8 rows of these tables set the rowwise fp8 factor
  and are not repeated here. Each row states its peak memory (torchtitan's logged maximum
  reserved, GiB): 47.65 on H100, 39.09 on MI300X, 33.71 on B200. The H100 row ran torchtitan
  0.0.2, which left the loss uncompiled (the torchtitan profile's own source says so): it is
  predicted with a profile file stating that (``compiled_loss_bytes_per_logit`` = the eager 10
  bytes); the MI300X and B200 rows ran August 2025 releases, which compile it.
* torchao's MoE training README (``pytorch/ao@36027d8:torchao/prototype/moe_training/README.md``,
  "End-to-end training benchmark with TorchTitan"): Llama 4 Scout cut to 2 layers, 4 B200, FSDP 4,
  EP 4, no AC, compile, batch 8 x seq 8192, bf16 baseline, median tokens/s (per GPU, as torchtitan
  logs it), max memory 145.55 GiB. The routed experts run grouped GEMMs, which no kernel
  measurement here covers.
* stas00/ml-engineering ``insights/when-to-upgrade-gpus`` ("Step decomposition @ 8k", total
  row): DeepSpeed ZeRO-2, Llama-3.1-8B, seq 8K, no activation checkpointing, 8 GPUs, model
  TFLOP/s per GPU on H200 and B200 (micro batch not stated: 1 assumed; the page's FA4/FA3
  attention ratio shapes the Blackwell attention curve, so these two are not fully out of
  sample).
* A real NeMo log (``tests/fixtures/reallogs/nemo_2.log``, NeMo's performance notes):
  ``pretrain_llama3_8b -g b200``, Megatron-Core, Llama 3 8B on 8 B200, global batch 128, micro
  batch 2, seq 8192; the step time is the median the log parser reads (``train_step_timing``).
  Not stated in the log: precision (bf16 taken: the performance scripts' default compute dtype,
  read from memory; the log's 1,250 model TFLOP/s per GPU is 56% of the B200's bf16 peak and
  28% of its fp8 peak), the parallel plan (data parallel 8 with the distributed optimizer, as
  NeMo's Llama 3 8B pre-training recipes run at 8 GPUs) and recomputation (none taken).

* A real Megatron log on Volta (``tests/fixtures/reallogs/megatron_4.log``, BigScience's
  ``meg_ds_3d_gpt2_perf_n16-ds-off.out``, June 2021): the Megatron-DeepSpeed fork with DeepSpeed
  off, i.e. Megatron-LM of 2021, on 16 nodes of 4 V100 SXM2 32 GB (the file name and the
  repository's experiment notes; the device is not in the log), and everything else from the
  log's argument dump: 64 layers, hidden 8192, 32 heads of 256, GeLU MLP 32768, vocabulary
  50,688 (padded), TP 4, PP 16, micro batch 4, global batch 1024, seq 1024, fp16, full
  recomputation. No published run on Volta exists here: every share is the nearest fitted
  generation's (Ampere).

Prints, per run: the published and the predicted step time, the signed error (positive =
predicted slower), the 80% range and whether it holds the published value; for a log that
prints its peak memory, the predicted memory per device against it. Usage:
``python benchmarks/new_silicon.py [--json]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

TORCHAO = "pytorch/ao@36027d8 docs/source/workflows/training.md"
MLENG = "stas00/ml-engineering@744d01e insights/when-to-upgrade-gpus"
NEMO_LOG = "tests/fixtures/reallogs/nemo_2.log"
MEGATRON_V100_LOG = "tests/fixtures/reallogs/megatron_4.log"
REPO = Path(__file__).resolve().parent.parent

RUNS: tuple[dict[str, Any], ...] = (
    # name, device, stack, workload fields, published figure
    {"name": "torchtitan Llama3-8B bf16 (torchao)", "device": "h100-sxm", "source": TORCHAO,
     "tokens_per_s_per_device": 6150.0, "peak_GiB": 47.65, "loss_uncompiled": True},
    {"name": "torchtitan Llama3-8B bf16 (torchao)", "device": "h100-sxm-hbm2e", "source": TORCHAO,
     "tokens_per_s_per_device": 6150.0, "peak_GiB": 47.65, "loss_uncompiled": True},
    {"name": "torchtitan Llama3-8B bf16 (torchao)", "device": "mi300x", "source": TORCHAO,
     "tokens_per_s_per_device": 5376.5, "peak_GiB": 39.09},
    {"name": "torchtitan Llama3-8B bf16 (torchao, power-limited)", "device": "b200", "source": TORCHAO,
     "tokens_per_s_per_device": 8307.5, "peak_GiB": 33.71},
    {"name": "torchtitan Llama 4 Scout, 2 layers, bf16 (torchao MoE)", "device": "b200", "source": TORCHAO,
     "tokens_per_s_per_device": 49381.0, "moe": True, "peak_GiB": 145.55},
    {"name": "DeepSpeed ZeRO-2 Llama-3.1-8B bf16 (ml-engineering)", "device": "h200-sxm", "source": MLENG,
     "tflops_per_device": 461.0},
    {"name": "DeepSpeed ZeRO-2 Llama-3.1-8B bf16 (ml-engineering)", "device": "b200", "source": MLENG,
     "tflops_per_device": 778.0},
    {"name": "NeMo Llama 3 8B bf16 (real log)", "device": "b200", "source": NEMO_LOG, "log": NEMO_LOG},
    {"name": "Megatron-LM (2021) GPT 52B fp16 (real log)", "device": "v100-sxm2-32gb", "source": MEGATRON_V100_LOG,
     "log": MEGATRON_V100_LOG, "workload": {
         "model": {"layers": 64, "hidden": 8192, "heads": 32, "head_dim": 256, "ffn_hidden": 32768, "vocab": 50688,
                   "mlp": "gelu", "norm": "layernorm", "bias": True, "position": "learned", "max_seq_len": 1024},
         "hardware": {"device": "v100-sxm2-32gb", "num_devices": 64, "devices_per_node": 4},
         "parallel": {"tp": 4, "pp": 16},
         "training": {"seq_len": 1024, "global_batch": 1024, "micro_batch": 4, "precision": "fp16",
                      "activation_checkpointing": "full", "stack": "megatron-lm-2021"}}},
)


def workload(run: dict[str, Any]) -> Any:
    from trainperf.specs.workload_file import workload_from_dict

    if "workload" in run:
        return workload_from_dict(run["workload"])
    if run.get("moe"):
        return workload_from_dict({
            "model": {"preset": "llama4-scout", "layers": 2},
            "hardware": {"device": run["device"], "num_devices": 4}, "parallel": {"fsdp": 4, "ep": 4},
            "training": {"seq_len": 8192, "global_batch": 32, "micro_batch": 8, "precision": "bf16",
                         "activation_checkpointing": "none", "compile": True, "stack": "torchtitan"}})
    if "log" in run:
        return workload_from_dict({
            "model": {"preset": "llama3-8b"}, "hardware": {"device": run["device"], "num_devices": 8},
            "parallel": {"dp": 8, "zero_stage": 1},
            "training": {"seq_len": 8192, "global_batch": 128, "micro_batch": 2, "precision": "bf16",
                         "activation_checkpointing": "none", "stack": "megatron-core"}})
    if "tokens_per_s_per_device" in run:
        stack = _uncompiled_loss_profile() if run.get("loss_uncompiled") else "torchtitan"
        return workload_from_dict({
            "model": {"preset": "llama3-8b"}, "hardware": {"device": run["device"], "num_devices": 8},
            "parallel": {"fsdp": 8},
            "training": {"seq_len": 8192, "global_batch": 8, "micro_batch": 1, "precision": "bf16",
                         "activation_checkpointing": "selective-op", "compile": True, "stack": stack}})
    return workload_from_dict({
        "model": {"preset": "llama3.1-8b"}, "hardware": {"device": run["device"], "num_devices": 8},
        "parallel": {"dp": 8, "zero_stage": 2},
        "training": {"seq_len": 8192, "global_batch": 8, "micro_batch": 1, "precision": "bf16",
                     "activation_checkpointing": "none", "stack": "deepspeed"}})


@functools.cache
def _uncompiled_loss_profile() -> str:
    """A profile file: the packaged ``torchtitan`` profile whose compiled step leaves the loss
    uncompiled (torchtitan 0.0.2): the eager loss' live bytes per logit under compile too."""
    from trainperf.predict.stacks import packaged_profile

    prof = packaged_profile("torchtitan")
    prof = prof.with_facts("torchtitan-0.0.2", "capabilities",
                           {"compiled_loss_bytes_per_logit": prof.capabilities["loss_bytes_per_logit"]},
                           {"compiled_loss_bytes_per_logit": "torchtitan 0.0.2 compiled the transformer blocks, "
                                                             "not the loss (the packaged profile's source)"})
    path = Path(tempfile.mkdtemp(prefix="trainperf-new-silicon-")) / "torchtitan-0.0.2.toml"
    path.write_text(prof.to_toml(), encoding="utf-8")
    return str(path)


def logged(path: Path) -> dict[str, float]:
    """Median step seconds of a training log, as ``trainperf`` reads it, and its peak memory
    (GiB allocated and reserved by torch) where the log prints it."""
    from trainperf.ingest import parse_log

    steps = parse_log(path).run.steps
    out = {"step_s": statistics.median(s.step_time_s for s in steps if s.step_time_s)}
    allocated = [s.memory_GiB for s in steps if s.memory_GiB]
    reserved = [s.extra["memory_reserved_GiB"] for s in steps if "memory_reserved_GiB" in s.extra]
    if allocated:
        out["allocated_GiB"] = max(allocated)
    if reserved:
        out["reserved_GiB"] = max(reserved)
    return out


def judge(run: dict[str, Any]) -> dict[str, Any]:
    from trainperf.predict import predict

    w = workload(run)
    p = predict(w)
    tokens_per_device = w.tokens_per_step / w.num_devices
    log = logged(REPO / run["log"]) if "log" in run else {}
    if log:
        published_s = log["step_s"]
    elif "tokens_per_s_per_device" in run:
        published_s = tokens_per_device / run["tokens_per_s_per_device"]
    else:  # the published model TFLOP/s at the predictor's own FLOP count (megatron convention)
        published_s = p.step_time_s * p.tflops_per_device / run["tflops_per_device"]
    lo, hi = p.interval.low_s, p.interval.high_s
    return {"run": run["name"], "device": run["device"], "published_s": published_s,
            "predicted_s": p.step_time_s, "signed_pct": 100 * (p.step_time_s / published_s - 1),
            "range_s": (lo, hi), "in_range": lo <= published_s <= hi, "widened_by": list(p.interval.widened_by),
            "memory_GiB": {"predicted": p.memory_per_device_GiB, **{k: v for k, v in log.items() if k != "step_s"},
                           **({"reserved_GiB": run["peak_GiB"]} if "peak_GiB" in run else {})}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [judge(r) for r in RUNS]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'run':52s} {'device':15s} {'published s':>11s} {'predicted s':>11s} {'signed %':>8s}  80% range")
    for r in rows:
        lo, hi = r["range_s"]
        print(f"{r['run']:52s} {r['device']:15s} {r['published_s']:11.3f} {r['predicted_s']:11.3f} "
              f"{r['signed_pct']:+8.1f}  {lo:.3f}-{hi:.3f} {'holds it' if r['in_range'] else 'MISSES'}")
    for r in rows:
        mem = r["memory_GiB"]
        if "reserved_GiB" in mem and "allocated_GiB" not in mem:
            print(f"memory, {r['run']} on {r['device']}: predicted {mem['predicted']:.1f} GiB (with the framework "
                  f"reserve); the published peak {mem['reserved_GiB']:.2f} GiB reserved "
                  f"({100 * (mem['predicted'] / mem['reserved_GiB'] - 1):+.1f}%)")
        if "allocated_GiB" in mem:
            print(f"memory, {r['run']} on {r['device']}: predicted {mem['predicted']:.1f} GiB (with the framework "
                  f"reserve); the log's peak {mem['allocated_GiB']:.1f} GiB allocated "
                  f"({100 * (mem['predicted'] / mem['allocated_GiB'] - 1):+.1f}%), "
                  f"{mem.get('reserved_GiB', float('nan')):.1f} GiB reserved "
                  f"({100 * (mem['predicted'] / mem.get('reserved_GiB', float('nan')) - 1):+.1f}%)")
    errs = [r["signed_pct"] for r in rows]
    print(f"MAPE {statistics.mean(abs(e) for e in errs):.1f}%, mean signed {statistics.mean(errs):+.1f}% "
          f"over {len(rows)} runs; ranges hold {sum(r['in_range'] for r in rows)} of {len(rows)} "
          "(signed: positive = predicted slower than published)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
