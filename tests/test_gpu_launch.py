"""Kernel launches on a GPU: the smooth maximum of host and device time, and the bench stack's
measured kernel counts and host cost per kernel (``[kernels] kernels_per_layer``,
``moe_kernels_per_layer``, ``kernels_per_step``, ``host_us_per_kernel``)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainperf.errors import TrainperfError
from trainperf.predict import predict, stack_kernels
from trainperf.predict.stacks import BENCH_STACK, packaged_profile
from trainperf.predict.step_model.compute import SMOOTH_MAX_P, exposed_launch_s
from trainperf.predict.step_model.kernel_physics import kernels_of
from trainperf.specs.hardware import get_hardware
from trainperf.specs.presets import get_model
from trainperf.specs.workload import Workload

H200 = get_hardware("h200-sxm")
times = st.floats(min_value=1e-7, max_value=10.0, allow_nan=False)


@given(device=times, launch=times)
def test_a_step_takes_at_least_the_longer_and_at_most_the_sum(device, launch):
    total = device + exposed_launch_s(device, launch)
    assert max(device, launch) * (1 - 1e-9) <= total <= (device + launch) * (1 + 1e-9)


def test_the_smooth_maximum_by_hand():
    # equal host and device time: 2^(1/3) of either
    assert exposed_launch_s(1.0, 1.0) == pytest.approx(2 ** (1 / SMOOTH_MAX_P) - 1.0)
    # launch-bound: (0.1^3 + 1)^(1/3) - 0.1 = 0.90033...
    assert exposed_launch_s(0.1, 1.0) == pytest.approx((0.1**3 + 1.0) ** (1 / 3) - 0.1)
    assert exposed_launch_s(0.0, 0.0) == 0.0 and exposed_launch_s(0.5, 0.0) == 0.0


def _bench(model: str = "debug", stack: str = BENCH_STACK, hw=H200, **kw) -> Workload:
    return Workload(model=get_model(model), hardware=hw, num_devices=1, seq_len=256, global_batch=8,
                    micro_batch=8, precision="bf16", stack=stack, **kw)


def test_the_bench_stack_states_its_measured_launch_facts():
    k = stack_kernels.for_stack(BENCH_STACK, "hopper")
    assert (k.kernels_per_layer, k.moe_kernels_per_layer, k.kernels_per_step, k.host_us_per_kernel) == \
        (33.4, 103.7, 48.0, 30.0)
    g = stack_kernels.for_stack("generic", "hopper")
    assert (g.kernels_per_layer, g.moe_kernels_per_layer, g.kernels_per_step, g.host_us_per_kernel) == (0, 0, 0, 0)


def test_they_reach_the_step_model_on_a_gpu_only():
    gpu = kernels_of(_bench())
    assert (gpu.ops_per_layer_fwd, gpu.moe_ops_per_layer_fwd, gpu.step_kernels, gpu.host_us_per_kernel) == \
        (33.4, 103.7, 48.0, 30.0)
    # a CPU's own calibration counts and prices its operators; without one the step model's defaults
    cpu = kernels_of(_bench(hw=get_hardware("cpu")))
    assert cpu.host_us_per_kernel == 0.0 and cpu.step_kernels == 0.0
    assert kernels_of(_bench(stack="generic")).host_us_per_kernel == 0.0


def test_the_debug_step_on_a_gpu_is_launch_bound_at_the_measured_host_cost():
    """4 layers x 33.4 kernels forward (x3 with the backward) + 48 outside them + the head's 6:
    454.8 kernels at 30 us, 13.6 ms (the H200 measured 13.3-15.7 ms). The device's share is tiny,
    so the step is the launches and a little more."""
    p = predict(_bench())
    launches_s = (4 * 33.4 * 3 + 48 + 6) * 30e-6
    assert launches_s <= p.step_time_s <= 1.3 * launches_s
    # the generic stack's fitted ~5 us per kernel and 14 kernels per layer: several times faster
    assert predict(_bench(stack="generic")).step_time_s < 0.4 * p.step_time_s


def test_a_bad_launch_fact_is_a_one_line_error():
    prof = packaged_profile(BENCH_STACK)
    for key, bad in (("host_us_per_kernel", -3), ("kernels_per_layer", "many"), ("kernels_per_step", True)):
        with pytest.raises(TrainperfError) as e:
            stack_kernels.resolve(dataclasses.replace(prof, kernels={**prof.kernels, key: bad}), "hopper")
        assert key in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------ the bench's memory on one device
def _gib(w: Workload, part: str) -> float:
    return predict(w).memory_breakdown_GiB[part]


def _one_b(**kw) -> Workload:
    return Workload(model=get_model("llama3.2-1b"), hardware=H200, num_devices=1, seq_len=4096, global_batch=2,
                    micro_batch=2, precision="bf16", stack=BENCH_STACK, **kw)


def test_the_fused_loss_holds_a_chunk_not_the_logits():
    """Llama 3.2 1B, 8,192 tokens, vocab 128,256, hidden 2,048 on one GPU: a chunk of 1 GiB of fp32
    logits is 2,048 tokens (2,093 rounded down to 256s); live: the chunk at 8 bytes per logit
    (2,048 x 128,256 x 8 = 2.10 GB), the head's bf16 copy and fp32 gradient (262.7M x 6 = 1.58 GB),
    the hidden states' fp32 gradient (8,192 x 2,048 x 4 = 67 MB)."""
    from trainperf.predict.stack_capabilities import fused_loss_chunk_bytes

    assert fused_loss_chunk_bytes(BENCH_STACK, "gpu") == 2**30 and fused_loss_chunk_bytes(BENCH_STACK, "cpu") == 2**25
    assert fused_loss_chunk_bytes("torchtitan", "gpu") == 0.0
    vocab, hidden, tokens = 128_256, 2048, 8192
    expected = 2048 * vocab * 8 + vocab * hidden * 6 + tokens * hidden * 4
    assert _gib(_one_b(), 'logits') == pytest.approx(expected / 2**30)
    # the whole logits (12 bytes each at the loss's backward peak) where the head is sharded: FSDP over 8 GPUs
    from trainperf.specs.parallel import ParallelPlan

    sharded = Workload(model=get_model("llama3.2-1b"), hardware=H200, num_devices=8, seq_len=4096, global_batch=16,
                       micro_batch=2, precision="bf16", stack=BENCH_STACK, plan=ParallelPlan(fsdp=8))
    assert _gib(sharded, 'logits') == pytest.approx(tokens * vocab * 12.0 / 2**30)


def test_autocast_keeps_each_layers_16_bit_weight_copy_unless_compiled_or_recomputed():
    """16 layers x 60.8M parameters x 2 bytes = 1.95 GB more activations in an eager autocast run,
    and the eager SwiGLU's activation output (8,192 tokens x 8,192 wide x 2 bytes a layer, which
    a compiled one recomputes); none compiled (casts recomputed) or with every layer fully
    checkpointed."""
    eager, compiled = _gib(_one_b(), "activations"), _gib(_one_b(compile=True), "activations")
    per_layer = 2048 * (2048 + 512 + 512 + 2048) + 3 * 2048 * 8192 + 2 * 2048  # the norms' weights counted too
    per_layer += 2 * 4096 * 8192  # the activation's output, per token of the micro-batch
    assert eager - compiled == pytest.approx(16 * per_layer * 2 / 2**30, rel=1e-6)
    full = _one_b(activation_checkpointing="full")
    assert _gib(full, "activations") == pytest.approx(_gib(dataclasses.replace(full, stack="generic"), "activations"))


def test_a_bad_fused_loss_fact_is_a_one_line_error():
    from trainperf.predict.stack_capabilities import capabilities_from_table

    for bad in ({"gpu": -1}, {"phone": 1024}, 1024, {}):
        with pytest.raises(TrainperfError) as e:
            capabilities_from_table("x", {"fused_loss_chunk_bytes": bad, "sources": {"fused_loss_chunk_bytes": "s"}})
        assert "fused_loss_chunk_bytes" in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------ the loss as each stack runs it
def test_each_stack_states_how_its_cross_entropy_runs():
    eager = {"megatron-core", "megatron-lm-2021", "deepspeed", "torchtitan", "generic", BENCH_STACK}
    for name in eager | {"llm-foundry", "maxtext", "paxml"}:
        assert stack_kernels.for_stack(name, "hopper").cross_entropy == ("eager" if name in eager else "fused")
        assert len(stack_kernels.for_stack(name, "hopper").sources["cross_entropy"]) > 40


def test_an_eager_loss_moves_44_bytes_per_logit_and_a_compiled_one_16():
    from trainperf.predict.step_model.compute import EAGER_LOSS_BYTES_PER_LOGIT, LOSS_BYTES_PER_LOGIT

    assert (EAGER_LOSS_BYTES_PER_LOGIT, LOSS_BYTES_PER_LOGIT) == (2 + 4 + 16 + 4 + 12 + 4 + 2, 16.0)
    w = dataclasses.replace(_one_b(), stack="torchtitan")
    assert kernels_of(w).loss_traffic_bytes == 44.0
    assert kernels_of(dataclasses.replace(w, compile=True)).loss_traffic_bytes == 16.0
    assert kernels_of(dataclasses.replace(w, stack="maxtext")).loss_traffic_bytes == 16.0


def test_a_bad_cross_entropy_fact_is_a_one_line_error():
    prof = packaged_profile(BENCH_STACK)
    with pytest.raises(TrainperfError) as e:
        stack_kernels.resolve(dataclasses.replace(prof, kernels={**prof.kernels, "cross_entropy": "liger"}), "hopper")
    assert "cross_entropy" in str(e.value) and "liger" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.torch
def test_the_predicted_chunk_is_the_benchs():
    """The memory model's chunk rule (``memory.fused_loss_bytes``) and the bench's
    (``measure.loss.chunk_tokens``) agree: the logits part of the fused loss is chunk x vocab x 8."""
    pytest.importorskip("torch")
    from trainperf.measure.loss import chunk_tokens

    for vocab in (256, 32_000, 128_256, 256_000):
        model = dataclasses.replace(get_model("llama3.2-1b"), vocab=vocab)
        w = Workload(model=model, hardware=H200, num_devices=1, seq_len=4096, global_batch=4, micro_batch=4,
                     precision="bf16", stack=BENCH_STACK)
        tokens = 4 * 4096
        chunk = min(tokens, chunk_tokens(vocab, "cuda"))
        expected = chunk * vocab * 8 + vocab * 2048 * 6 + tokens * 2048 * 4
        assert _gib(w, "logits") == pytest.approx(expected / 2**30), vocab
