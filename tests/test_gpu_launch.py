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
