"""The eager penalty a training step pays, against the end-to-end measurements that set it.

stas00/ml-engineering@744d01e ``insights/when-to-upgrade-gpus``: Liger-Kernel's fused RMSNorm,
RoPE, SwiGLU and cross-entropy changed the step of Llama-3.1-8B at 8k tokens (DeepSpeed ZeRO-2,
8 GPUs, micro batch 1, no checkpointing) by at most 1.5% on H200 and on B200. The step model's
swap of the same ops (eager passes to one pass) must stay within that. The microbenchmarks'
penalties stay kernel data; the share of them a step pays is a stack fact
(``[kernels] eager_pass_share``, 0.15 where a stack states none).
"""

from __future__ import annotations

import dataclasses

import pytest

from trainperf.errors import TrainperfError
from trainperf.predict import predict, stack_kernels
from trainperf.predict.kernels.memory_bound import eager_penalty
from trainperf.predict.stacks import packaged_profile
from trainperf.predict.step_model import kernel_physics
from trainperf.specs.hardware import get_hardware
from trainperf.specs.parallel import ParallelPlan
from trainperf.specs.presets import get_model
from trainperf.specs.workload import Workload


def _zero2(device: str) -> Workload:
    return Workload(model=get_model("llama3.1-8b"), hardware=get_hardware(device), num_devices=8, seq_len=8192,
                    global_batch=8, micro_batch=1, precision="bf16", activation_checkpointing="none",
                    stack="deepspeed", plan=ParallelPlan(dp=8, zero_stage=2))


@pytest.mark.parametrize("device", ["h200-sxm", "b200"])
def test_fusing_the_eager_ops_saves_what_liger_saved_end_to_end(device, monkeypatch):
    w = _zero2(device)
    eager = predict(w).step_time_s
    k = kernel_physics.kernels_of(w)
    assert k.elementwise_impl == "eager" and k.rope_passes > 1.0
    fused = dataclasses.replace(k, norm_passes=1.0, rope_passes=1.0, act_passes=1.0)
    monkeypatch.setattr(kernel_physics, "kernels_of", lambda _w: fused)  # imported where called
    saved = 1.0 - predict(w).step_time_s / eager
    assert 0.0 < saved <= 0.017  # the stated "<= 1.5%", to the model's rounding


def test_a_step_pays_the_stacks_share_of_the_microbenchmarks_extra_passes():
    """Isolated kernels (Liger-Kernel's benchmarks): RMSNorm 3.621, RoPE 6.677, SwiGLU 2.488 times
    the fused kernel's time; one native kernel (LayerNorm, GELU, add) none. A step of a stack that
    states no share moves 1 + 0.15 x (penalty - 1): 1.393, 1.852, 1.223."""
    assert eager_penalty("rmsnorm") == pytest.approx(3.621, abs=1e-3)
    assert eager_penalty("rope") == pytest.approx(6.677, abs=1e-3)
    assert eager_penalty("swiglu") == pytest.approx(2.488, abs=1e-3)
    assert eager_penalty("layernorm") == eager_penalty("gelu") == eager_penalty("add") == 1.0
    k = kernel_physics.kernels_of(_zero2("h200-sxm"))
    assert stack_kernels.for_stack("deepspeed", "hopper").eager_pass_share == 0.15
    assert (k.norm_passes, k.rope_passes, k.act_passes) == pytest.approx((1.393, 1.852, 1.223), abs=1e-3)
    # compiled or fused, every op is one pass
    comp = kernel_physics.kernels_of(dataclasses.replace(_zero2("h200-sxm"), compile=True))
    assert (comp.norm_passes, comp.rope_passes, comp.act_passes) == (1.0, 1.0, 1.0)


def test_a_stack_states_its_own_share_and_a_bad_one_is_a_one_line_error():
    prof = packaged_profile("deepspeed")
    full = stack_kernels.resolve(dataclasses.replace(prof, kernels={**prof.kernels, "eager_pass_share": 1}), "hopper")
    assert full.eager_pass_share == 1.0
    for bad in (-0.1, 1.5, "most", True):
        with pytest.raises(TrainperfError) as e:
            stack_kernels.resolve(dataclasses.replace(prof, kernels={**prof.kernels, "eager_pass_share": bad}),
                                  "hopper")
        assert "eager_pass_share" in str(e.value) and "\n" not in str(e.value)


H200_BENCH_RUNS = (
    # (model, seq, extra workload fields, measured median step s): docs/BENCH.md, the gpu_check
    # table (one H200, torch 2.11.0+cu130, 2026-11-28), eager unless compiled
    ("llama3.2-1b", 4096, {}, 0.1795),
    ("llama3.2-1b", 4096, {"compile": True}, 0.1564),
    ("llama3.2-1b", 4096, {"activation_checkpointing": "full"}, 0.2154),
    ("llama3.2-3b", 2048, {}, 0.2317),
)


@pytest.mark.parametrize("model,seq,extra,measured_s", H200_BENCH_RUNS)
def test_the_benchs_own_h200_runs_within_15_percent(model, seq, extra, measured_s):
    """trainperf's own bench on one H200 runs 16-bit by autocast over fp32 weights: its residual
    stream and norm outputs are fp32, so its norms and residual adds move twice the bytes of a
    16-bit run. Priced so, with the default share of the eager extra passes, each run is
    predicted within 15% of its measured median step."""
    w = Workload(model=get_model(model), hardware=get_hardware("h200-sxm"), num_devices=1, seq_len=seq,
                 global_batch=2, micro_batch=2, precision="bf16", stack="trainperf-bench", **extra)
    assert predict(w).step_time_s == pytest.approx(measured_s, rel=0.15)


def test_predict_says_how_many_passes_the_unfused_ops_make(capsys):
    from trainperf.cli.main import main

    args = ["predict", "--model", "llama3.1-8b", "--device", "h200-sxm", "--num-devices", "8", "--dp", "8",
            "--zero-stage", "2", "--seq-len", "8192", "--global-batch", "8", "--micro-batch", "1",
            "--precision", "bf16", "--stack", "deepspeed"]
    assert main(args) == 0
    assert "memory-bound ops eager (norms x1.39, RoPE x1.85, activation x1.22 their ideal bytes)" in \
        capsys.readouterr().out
    assert main([*args, "--compile"]) == 0
    out = capsys.readouterr().out
    assert "memory-bound ops compiled" in out and "their ideal bytes" not in out
