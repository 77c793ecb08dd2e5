"""Stack profiles' kernel facts (predict/stack_kernels.py) and the step model standing on them."""

from __future__ import annotations

import dataclasses

import pytest

from trainperf.errors import TrainperfError
from trainperf.predict import stack_kernels
from trainperf.predict.stacks import STACKS, packaged_profile
from trainperf.predict.step import predict
from trainperf.predict.step_model import layout_of
from trainperf.predict.step_model.tensor_parallel import overlapped
from trainperf.specs.workload_file import workload_from_dict


def _w(stack: str, device: str = "h100-sxm", **training):
    tr = {"seq_len": 8192, "global_batch": 8, "precision": "bf16", "stack": stack, **training}
    return workload_from_dict({"model": {"preset": "llama3-8b"}, "hardware": {"device": device, "num_devices": 8},
                               "training": tr})


def test_every_packaged_stack_states_its_kernels_with_a_source():
    for name in STACKS:
        prof = packaged_profile(name)
        body = stack_kernels.validate_table(prof.kernels, name)
        facts = [k for k in body if k not in ("sources", "attention_by_silicon")]
        assert {"attention", "elementwise", "compiled", "fp8_recipe", "tp_overlap"} <= set(facts), name
        for k in facts + (["attention_by_silicon"] if "attention_by_silicon" in body else []):
            assert len(body["sources"].get(k, "")) > 20, (name, k)


def test_facts_resolve_per_silicon():
    assert stack_kernels.for_stack("megatron-core", "hopper").attention == "cudnn"
    assert stack_kernels.for_stack("megatron-core", "ampere").attention == "fa2"
    assert stack_kernels.for_stack("torchtitan", "hopper").attention == "fa2"
    assert stack_kernels.for_stack("maxtext", "tpu-v5e").attention == "xla"
    mc = stack_kernels.for_stack("megatron-core", "hopper")
    assert mc.elementwise_impl(False) == "fused" and overlapped(mc.tp_overlap, False, True)
    assert not overlapped(mc.tp_overlap, False, False)
    tt = stack_kernels.for_stack("torchtitan", "hopper")
    assert tt.elementwise_impl(False) == "eager" and tt.elementwise_impl(True) == "compiled"
    assert not overlapped(tt.tp_overlap, False, True) and overlapped(tt.tp_overlap, True, True)
    assert stack_kernels.for_stack("maxtext", "hopper").elementwise_impl(False) == "compiled"


def test_bad_facts_are_one_line_errors():
    prof = packaged_profile("torchtitan")
    for bad in ({"attention": "fa9"}, {"elementwise": "jit"}, {"tp_overlap": "sometimes"}, {"colour": "red"},
                {"attention_by_silicon": {"hopper": "nope"}}, {"compiled": "yes"}, {"gpu_memory_fraction": 0},
                {"gpu_memory_fraction": 1.5}, {"gpu_memory_fraction": True}):
        with pytest.raises(TrainperfError) as e:
            stack_kernels.resolve(dataclasses.replace(prof, kernels={**prof.kernels, **bad}), "hopper")
        assert "\n" not in str(e.value)


def test_the_stacks_kernels_change_the_prediction_where_physics_says():
    tt, mc = predict(_w("torchtitan")), predict(_w("megatron-core"))
    # FlashAttention-2 on Hopper runs well below cuDNN's fused attention: torchtitan's attention is slower
    assert tt.compute_breakdown["attention"] > 1.3 * mc.compute_breakdown["attention"]
    assert tt.extra["kernels"]["attn_family"] == "fa2" and mc.extra["kernels"]["attn_family"] == "cudnn"
    # compile turns torchtitan's eager memory-bound ops into fused ones
    f_eager = layout_of(_w("torchtitan")).kernels
    f_comp = layout_of(_w("torchtitan", compile=True)).kernels
    assert f_comp.elementwise_impl == "compiled" and f_eager.elementwise_impl == "eager"
    # unfused Python RMSNorm, RoPE and SwiGLU move their bytes more than once (a share of the
    # microbenchmarks' fused-vs-eager penalty: tests/test_eager_in_step.py)
    for op in ("norm_passes", "rope_passes", "act_passes"):
        assert getattr(f_eager, op) > 1.2 and getattr(f_comp, op) == 1.0
    assert predict(_w("torchtitan", compile=True)).compute_breakdown["memory-bound ops"] < \
        0.8 * tt.compute_breakdown["memory-bound ops"]


def test_a_stack_on_silicon_it_was_never_fitted_on_uses_that_silicons_kernels():
    b200, h100 = predict(_w("torchtitan", device="b200")), predict(_w("torchtitan"))
    assert b200.extra["kernels"]["silicon"] == "blackwell"
    # Blackwell's measured GEMM and attention speed make the same step faster than on Hopper
    assert b200.step_time_s < h100.step_time_s


def test_hugging_face_runs_have_an_eager_launch_model_and_are_not_compared_by_the_planner():
    from trainperf.predict.stack_capabilities import compared_stacks
    from trainperf.predict.stacks import stack_of_framework

    hf = stack_kernels.for_stack("hf-transformers", "hopper")
    assert (hf.kernels_per_layer, hf.host_us_per_kernel, hf.elementwise_impl(False)) == (34.0, 30.0, "eager")
    assert stack_of_framework("HF Trainer (Accelerate FSDP)") == "hf-transformers"
    assert stack_of_framework("Megatron-Core, Transformer Engine") == "megatron-core"
    assert "hf-transformers" not in compared_stacks() and "torchtitan" in compared_stacks()
    # a launch-bound step: 16 layers x (34 forward + 68 backward + 34 recomputed) kernels at 30 us
    w = workload_from_dict({"model": {"preset": "llama3.2-1b"}, "hardware": {"device": "h100-sxm", "num_devices": 1},
                            "training": {"seq_len": 512, "global_batch": 1, "precision": "bf16",
                                         "activation_checkpointing": "full", "stack": "hf-transformers"}})
    assert predict(w).step_time_s > 16 * 136 * 30e-6


def test_a_profile_with_one_fact_changed_keeps_the_rest_and_reads_back(tmp_path):
    """A run's stack that differs from the packaged one in a stated fact: the fact and its source
    replaced, every other fact, source and fitted knob kept, and the file reads back the same."""
    from trainperf.predict.stacks import load_profile, packaged_profile

    base = packaged_profile("deepspeed")
    var = base.with_facts("deepspeed-liger", "kernels", {"elementwise": "fused"}, {"elementwise": "Liger-Kernel"})
    assert (var.name, var.kernels["elementwise"], var.kernels["sources"]["elementwise"]) == \
        ("deepspeed-liger", "fused", "Liger-Kernel")
    assert {k: v for k, v in var.kernels.items() if k not in ("elementwise", "sources")} == \
        {k: v for k, v in base.kernels.items() if k not in ("elementwise", "sources")}
    assert var.knobs == base.knobs and base.kernels["elementwise"] == "eager"
    path = tmp_path / "deepspeed-liger.toml"
    path.write_text(var.to_toml(), encoding="utf-8")
    back = load_profile(str(path))
    assert back.kernels["elementwise"] == "fused" and back.knobs == var.knobs
    assert stack_kernels.for_stack(str(path), "hopper").elementwise == "fused"


def test_megatron_lm_2021_reduces_an_fp16_runs_gradients_in_fp16():
    """Megatron-LM (2021) all-reduces an fp16 run's gradients in fp16 (``--accumulate-allreduce-
    grads-in-fp32`` only for bf16): SC21's GPT-18B layout moves half the bytes of the same run in
    bf16, and half those of Megatron-Core, which reduces in fp32."""
    def dp_bytes(precision, stack):
        p = predict(workload_from_dict({
            "model": {"layers": 40, "hidden": 6144, "heads": 48, "ffn_hidden": 24576, "vocab": 51200, "mlp": "gelu",
                      "norm": "layernorm", "bias": True, "position": "learned", "max_seq_len": 2048},
            "hardware": {"device": "a100-sxm-80gb", "num_devices": 256}, "parallel": {"tp": 8},
            "training": {"seq_len": 2048, "global_batch": 1024, "micro_batch": 1, "precision": precision,
                         "activation_checkpointing": "full", "stack": stack}}))
        return next(c.bytes_per_device for c in p.collectives if c.name == "dp all-reduce")
    fp16 = dp_bytes("fp16", "megatron-lm-2021")
    assert fp16 == pytest.approx(0.5 * dp_bytes("bf16", "megatron-lm-2021"), rel=1e-9)
    assert fp16 == pytest.approx(0.5 * dp_bytes("fp16", "megatron-core"), rel=1e-9)


def test_llm_foundry_reduce_scatters_in_bf16_as_its_pure_mixed_precision_does():
    """LLM Foundry's benchmark runs use Composer's PURE mixed precision (reduce_dtype bf16): the
    FSDP reduce-scatter moves half the bytes of torchtitan's fp32 reduce on the same plan, and an
    fp32 run reduces in fp32."""
    def rs_bytes(stack, precision="bf16"):
        p = predict(workload_from_dict({
            "model": {"preset": "mpt-7b"}, "hardware": {"device": "a100-sxm-80gb", "num_devices": 16},
            "parallel": {"fsdp": 16},
            "training": {"seq_len": 2048, "global_batch": 64, "micro_batch": 4, "precision": precision,
                         "activation_checkpointing": "full", "stack": stack}}))
        return next(c.bytes_per_device for c in p.collectives if "reduce-scatter" in c.name)
    assert rs_bytes("llm-foundry") == pytest.approx(0.5 * rs_bytes("torchtitan"), rel=1e-9)
    assert rs_bytes("llm-foundry", "fp32") == pytest.approx(rs_bytes("torchtitan", "fp32"), rel=1e-9)
