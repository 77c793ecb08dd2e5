"""The planner's vectorised evaluation must equal the scalar predictor, plan for plan.

``trainperf.plan.vectorized`` gives the predictor's own step model a layout whose mesh holds the
candidates' plans as numpy arrays, built with the plan rules ParallelPlan itself uses. This test
draws a few hundred random executable
plans across models, devices, precisions and checkpointing policies and checks that step time,
memory per device and the fit verdict equal :func:`trainperf.predict.predict` to 1e-6.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from trainperf.plan import vectorized
from trainperf.plan.search import workload_of
from trainperf.plan.space import SearchSpace, enumerate_candidates
from trainperf.predict import predict
from trainperf.predict.step_model import layout_of
from trainperf.specs.hardware import get_hardware
from trainperf.specs.presets import get_model

CASES = [
    # model, device, devices, devices/node, seq, global batches, precisions
    ("llama2-70b", "h100-sxm", (64, 128), 8, 4096, (128, 256), ("bf16", "fp8")),
    ("llama3.1-405b", "h100-sxm", (512,), 8, 8192, (256,), ("bf16",)),
    ("mixtral-8x7b", "mi300x", (32, 64), 8, 4096, (64, 128), ("bf16",)),
    ("deepseek-v3", "h200-sxm", (256,), 8, 4096, (512,), ("bf16", "fp8")),
    ("llama4-maverick", "h100-sxm", (128,), 8, 8192, (256,), ("bf16",)),
    ("llama3-8b", "a100-sxm-80gb", (8, 16), 8, 8192, (16, 32), ("bf16", "fp32")),
    ("gpt3-175b", "tpu-v5p", (64,), 4, 2048, (128,), ("bf16",)),
    ("gemma2-9b", "mi250-gcd", (16,), 8, 4096, (32,), ("bf16",)),
    ("debug", "gb200", (144,), 72, 256, (144, 288), ("bf16",)),
]
SAMPLES_PER_CASE = 40


@pytest.mark.parametrize("case", CASES, ids=[c[0] + "@" + c[1] for c in CASES])
def test_vectorised_equals_scalar_predictor(case):
    name, dev, counts, dpn, seq, gbs, precs = case
    model, hw = get_model(name), get_hardware(dev)
    space = SearchSpace(counts, dpn, seq, gbs, precisions=precs, max_micro_batch=4, max_vpp=4,
                        allow_cross_node_tp=(name == "debug"))
    cands = enumerate_candidates(model, hw, space)
    assert len(cands) > SAMPLES_PER_CASE
    ev = vectorized.evaluate(cands, model, hw, seq, dpn)
    rng = np.random.default_rng(zlib.crc32(f"{name}@{dev}".encode()))
    # random rows, plus the extremes (fastest, leanest, largest) where formulas are stressed
    pick = set(rng.choice(len(cands), SAMPLES_PER_CASE - 3, replace=False).tolist())
    pick |= {int(np.argmin(ev.step_time_s)), int(np.argmin(ev.memory_GiB)), int(np.argmax(ev.memory_GiB))}
    unsplit = np.flatnonzero(cands["etp"] != cands["tp"])  # MoE: experts not split by tp (etp = 1)
    assert unsplit.size == 0 or model.is_moe
    pick |= set(rng.choice(unsplit, min(5, unsplit.size), replace=False).tolist())
    uneven = np.flatnonzero(cands["slots"] >= 4)  # a lighter first or last stage
    pick |= set(rng.choice(uneven, min(5, uneven.size), replace=False).tolist())
    for i in sorted(pick):
        w = workload_of(model, hw, space, cands, i)
        p = predict(w)
        assert ev.step_time_s[i] == pytest.approx(p.step_time_s, rel=1e-6), w.describe()
        assert ev.memory_GiB[i] == pytest.approx(p.memory_per_device_GiB, rel=1e-6), w.describe()
        assert bool(ev.fits[i]) == p.fits, w.describe()
        assert ev.capacity_GiB == pytest.approx(p.memory_capacity_GiB, rel=1e-9)


def test_only_the_mesh_and_policy_depend_on_the_plan():
    """The planner prices every plan of a (checkpointing, precision) group with one single-device
    layout whose mesh it replaces: two plans of one model, device and precision must differ in
    nothing else (a new plan-dependent field belongs in the Mesh)."""
    import dataclasses

    from trainperf.specs.parallel import ParallelPlan
    from trainperf.specs.workload import Workload

    model, hw = get_model("mixtral-8x7b"), get_hardware("h100-sxm")
    a = Workload(model=model, hardware=hw, num_devices=64, seq_len=4096, global_batch=64, micro_batch=1,
                 plan=ParallelPlan(fsdp=8, tp=4, pp=2, ep=8), devices_per_node=8,
                 activation_checkpointing="full")
    b = Workload(model=model, hardware=hw, num_devices=32, seq_len=4096, global_batch=128, micro_batch=2,
                 plan=ParallelPlan(dp=2, zero_stage=2, tp=2, sequence_parallel=True, pp=4, vpp=2, cp=2, ep=2),
                 devices_per_node=8, activation_checkpointing="selective")
    la, lb = layout_of(a), layout_of(b)
    assert la.mesh != lb.mesh
    assert (la.model, la.device, la.kernels) == (lb.model, lb.device, lb.kernels)
    assert dataclasses.replace(la.run, policy=lb.run.policy) == lb.run


def test_calibration_reaches_both_evaluators():
    """A calibration (device id -> knob values) changes the vectorised and scalar figures alike."""
    model, hw = get_model("llama2-70b"), get_hardware("h100-sxm")
    space = SearchSpace((64,), 8, 4096, (128,), max_micro_batch=2, max_vpp=2)
    cands = enumerate_candidates(model, hw, space)
    cal = {"h100-sxm": {"matmul_fraction": 0.5, "overlap": 0.3, "reserve_GiB": 6.0}}
    plain = vectorized.evaluate(cands, model, hw, 4096, 8)
    tuned = vectorized.evaluate(cands, model, hw, 4096, 8, calibration=cal)
    assert (tuned.step_time_s > plain.step_time_s).mean() > 0.9  # slower GEMMs dominate
    from trainperf.plan.scalar import knob_values

    assert np.allclose(tuned.memory_GiB - plain.memory_GiB, 6.0 - knob_values(hw).reserve_GiB)  # the reserve
    for i in np.random.default_rng(1).choice(len(cands), 15, replace=False):
        p = predict(workload_of(model, hw, space, cands, int(i)), calibration=cal)
        assert tuned.step_time_s[i] == pytest.approx(p.step_time_s, rel=1e-6)
        assert tuned.memory_GiB[i] == pytest.approx(p.memory_per_device_GiB, rel=1e-6)


@pytest.mark.parametrize("stack", ["maxtext", "paxml"])
def test_gpipe_stacks_agree_with_the_scalar_predictor(stack):
    """MaxText's and PaxML's pipelines are GPipe (circular with vpp > 1 for MaxText): the planner
    marks their pp plans so, and its memory and time equal the scalar predictor's."""
    model, hw = get_model("llama2-70b"), get_hardware("h100-sxm")
    space = SearchSpace((64,), 8, 4096, (128,), max_micro_batch=2, max_vpp=4, stack=stack,
                        checkpointing=("none", "full"))
    cands = enumerate_candidates(model, hw, space)
    ev = vectorized.evaluate(cands, model, hw, 4096, 8, software=space.software)
    piped = np.flatnonzero(cands["pp"] > 1)
    assert piped.size > 10
    if stack == "paxml":
        assert (cands["vpp"] == 1).all()
    else:
        assert (cands["vpp"][piped] > 1).any()
    for i in np.random.default_rng(2).choice(piped, 12, replace=False):
        w = workload_of(model, hw, space, cands, int(i))
        assert w.plan.pp_schedule == "gpipe"
        p = predict(w)
        assert ev.step_time_s[i] == pytest.approx(p.step_time_s, rel=1e-6), w.describe()
        assert ev.memory_GiB[i] == pytest.approx(p.memory_per_device_GiB, rel=1e-6), w.describe()


def test_fp8_input_bytes_reach_the_planner():
    """Megatron-Core fp8 plans keep fp8 matmul inputs: the planner's memory equals predict's."""
    model, hw = get_model("llama3-70b"), get_hardware("h100-sxm")
    space = SearchSpace((64,), 8, 8192, (64,), precisions=("fp8",), max_micro_batch=2, max_vpp=2,
                        stack="megatron-core", checkpointing=("none", "selective"))
    cands = enumerate_candidates(model, hw, space)
    ev = vectorized.evaluate(cands, model, hw, 8192, 8, software=space.software)
    for i in np.random.default_rng(3).choice(len(cands), 15, replace=False):
        w = workload_of(model, hw, space, cands, int(i))
        p = predict(w)
        assert ev.memory_GiB[i] == pytest.approx(p.memory_per_device_GiB, rel=1e-6), w.describe()
        assert ev.step_time_s[i] == pytest.approx(p.step_time_s, rel=1e-6), w.describe()


def test_moe_dispatcher_and_imbalance_reach_the_planner():
    """A search for DeepSeek-V3 with DeepEP and a stated load imbalance prices every plan as
    predict prices its workload (the run fields travel with the plan's software fields)."""
    model, hw = get_model("deepseek-v3"), get_hardware("h100-sxm")
    space = SearchSpace((256,), 8, 4096, (512,), precisions=("bf16",), max_micro_batch=1, max_vpp=2,
                        stack="megatron-core", checkpointing=("full",), moe_dispatcher="deepep",
                        moe_imbalance=1.2)
    cands = enumerate_candidates(model, hw, space)
    ev = vectorized.evaluate(cands, model, hw, 4096, 8, software=space.software)
    moe = np.flatnonzero(cands["ep"] > 8)  # expert groups across nodes, where DeepEP differs most
    for i in np.random.default_rng(5).choice(moe, min(15, moe.size), replace=False):
        w = workload_of(model, hw, space, cands, int(i))
        assert (w.moe_dispatcher, w.moe_imbalance) == ("deepep", 1.2)
        p = predict(w)
        assert ev.step_time_s[i] == pytest.approx(p.step_time_s, rel=1e-6), w.describe()
        assert ev.memory_GiB[i] == pytest.approx(p.memory_per_device_GiB, rel=1e-6), w.describe()


@pytest.mark.parametrize("case", CASES[:4], ids=[c[0] + "@" + c[1] for c in CASES[:4]])
def test_pricing_only_the_plans_that_fit_changes_nothing_that_fits(case):
    """A search prices only the plans whose memory fits (``fitting_only``): their step times and
    every plan's memory are the full evaluation's, bit for bit; the rest are infinitely slow."""
    name, dev, counts, dpn, seq, gbs, precs = case
    model, hw = get_model(name), get_hardware(dev)
    space = SearchSpace(counts, dpn, seq, gbs, precisions=precs, max_micro_batch=4, max_vpp=4)
    cands = enumerate_candidates(model, hw, space)
    full = vectorized.evaluate(cands, model, hw, seq, dpn)
    lean = vectorized.evaluate(cands, model, hw, seq, dpn, fitting_only=True)
    fit = full.memory_GiB <= full.capacity_GiB
    assert fit.any() and (~fit).any()
    assert np.array_equal(full.memory_GiB, lean.memory_GiB) and full.capacity_GiB == lean.capacity_GiB
    assert np.array_equal(full.step_time_s[fit], lean.step_time_s[fit])
    assert np.isinf(lean.step_time_s[~fit]).all()


@pytest.mark.parametrize("name,dev,counts,gbs", [("deepseek-v3", "h800", (256,), (512,)),
                                                 ("llama2-70b", "h100-sxm", (64,), (128,))])
def test_dualpipe_plans_equal_scalar_predictor(name, dev, counts, gbs):
    """DualPipe and DualPipeV plans (the ``sched`` column; searched where the stack lists them:
    the generic profile, here without the packaged-stack filter) price as the scalar predictor
    prices the same plan, and every one of them has what the schedule needs: an even pp for
    DualPipe, vpp 2 for DualPipeV, at least 2*pp micro-batches a step."""
    model, hw = get_model(name), get_hardware(dev)
    space = SearchSpace(counts, 8, 4096, gbs, max_micro_batch=2, max_vpp=2, require_stack=False,
                        checkpointing=("full",))
    cands = enumerate_candidates(model, hw, space)
    ev = vectorized.evaluate(cands, model, hw, 4096, 8)
    for code, schedule in ((1, "dualpipe"), (2, "dualpipev")):
        rows = np.flatnonzero(cands["sched"] == code)
        assert rows.size > 0
        accum = cands["global_batch"][rows] // (cands["dp"][rows] * cands["fsdp"][rows] * cands["micro_batch"][rows])
        assert (accum >= 2 * cands["pp"][rows]).all()
        assert (cands["vpp"][rows] == code).all() and (cands["slots"][rows] == 0).all()
        assert code == 2 or (cands["pp"][rows] % 2 == 0).all()
        rng = np.random.default_rng(code)
        for i in rng.choice(rows, min(12, rows.size), replace=False):
            w = workload_of(model, hw, space, cands, int(i))
            assert w.plan.pp_schedule == schedule
            p = predict(w)
            assert ev.step_time_s[i] == pytest.approx(p.step_time_s, rel=1e-6), w.describe()
            assert ev.memory_GiB[i] == pytest.approx(p.memory_per_device_GiB, rel=1e-6), w.describe()
