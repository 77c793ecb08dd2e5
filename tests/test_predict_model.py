"""The assembled predictor: memory fits as published, breakdowns, bad input, vectorisation."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from trainperf.errors import SpecError, TrainperfError
from trainperf.predict import predict
from trainperf.predict.efficiency import KNOB_NAMES, vendor_knobs
from trainperf.predict.step_model import layout_of, step_costs
from trainperf.specs.workload_file import workload_from_dict


def wl(model="llama2-70b", device="h100-sxm", n=64, par=None, seq=4096, gbs=128, mb=2, prec="bf16",
       ac="full", **hw):
    return workload_from_dict({
        "model": {"preset": model}, "hardware": {"device": device, "num_devices": n, **hw},
        "parallel": par or {"fsdp": n},
        "training": {"seq_len": seq, "global_batch": gbs, "micro_batch": mb, "precision": prec,
                     "activation_checkpointing": ac},
    })


H100_94 = {"id": "h100-sxm-94gb", "name": "H100 SXM 94GB", "hbm_GB": 94.0}


def test_405b_1d_fsdp_on_128_h100_does_not_fit():
    # seed 002: "We do see OOM for 1D parallelism (FSDP2)"
    p = predict(wl("llama3.1-405b", n=128, par={"fsdp": 128}, seq=8192, gbs=128, mb=1, **H100_94))
    assert not p.fits
    assert p.memory_over_GiB > 5
    assert any("does not fit" in n for n in p.notes)


def test_405b_fsdp16_tp8_full_ac_fits():
    p = predict(wl("llama3.1-405b", n=128, par={"fsdp": 16, "tp": 8, "sequence_parallel": True},
                   seq=8192, gbs=32, mb=2, **H100_94))
    assert p.fits
    # and on the 80 GB SXM part too
    p80 = predict(wl("llama3.1-405b", n=128, par={"fsdp": 16, "tp": 8, "sequence_parallel": True},
                     seq=8192, gbs=32, mb=2))
    assert p80.fits


def test_maxtext_70b_on_64_h100_fits():
    # seed 003: FSDP=64, MBS=2 ran on 80 GB H100s
    p = predict(wl())
    assert p.fits
    assert 30 < p.memory_per_device_GiB < 74.5


def test_model_states_follow_zero():
    p = predict(wl())
    n = 64
    params = p.workload.model.total_params
    mb = p.memory_breakdown_GiB
    gib = float(1 << 30)
    assert mb["weights"] == pytest.approx(2 * params / n / gib, rel=1e-6)
    assert mb["gradients"] == pytest.approx(2 * params / n / gib, rel=1e-6)
    assert mb["optimizer states"] == pytest.approx(12 * params / n / gib, rel=1e-6)
    ddp = predict(wl("llama3-8b", device="h100-sxm", n=8, par={"dp": 8}, gbs=8, mb=1))
    assert ddp.memory_breakdown_GiB["optimizer states"] == pytest.approx(
        12 * ddp.workload.model.total_params / gib, rel=1e-6)
    z1 = predict(wl("llama3-8b", n=8, par={"dp": 8, "zero_stage": 1}, gbs=8, mb=1))
    assert z1.memory_breakdown_GiB["optimizer states"] == pytest.approx(
        ddp.memory_breakdown_GiB["optimizer states"] / 8, rel=1e-6)
    assert z1.memory_breakdown_GiB["gradients"] == pytest.approx(ddp.memory_breakdown_GiB["gradients"])


def test_breakdown_sums_to_step_time_and_rates_follow():
    for w in (wl(), wl("llama3-8b", n=16, par={"pp": 4, "tp": 2, "dp": 2}, gbs=32, mb=1, ac="selective"),
              wl("mixtral-8x7b", n=16, par={"fsdp": 16, "ep": 8}, gbs=16, mb=1)):
        p = predict(w)
        assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s, rel=1e-9)
        assert p.tokens_per_s == pytest.approx(w.tokens_per_step / p.step_time_s)
        assert 0 < p.mfu_pct < 100 and p.hfu_pct >= p.mfu_pct
        for c in p.collectives:
            assert 0 <= c.exposed_s <= c.time_s + 1e-12 and c.bytes_per_device > 0


def test_pipeline_bubble_matches_1f1b():
    p = predict(wl("llama3-8b", n=8, par={"pp": 4, "dp": 2}, gbs=16, mb=1, ac="none"))
    m = p.workload.grad_accum_steps  # 8
    mb_time = p.extra["microbatch_s"]
    bubble = p.breakdown["pipeline bubble"]
    # bubble = (p-1) micro-batch times exactly; the pipelined part is about m of them
    assert bubble == pytest.approx(3 * mb_time)
    assert bubble / (p.step_time_s - bubble) == pytest.approx(3 / m, rel=0.15)


def test_more_tp_means_more_tp_comm_and_less_memory():
    a = predict(wl("llama3-70b", n=64, par={"fsdp": 32, "tp": 2, "sequence_parallel": True}, gbs=64, mb=2))
    b = predict(wl("llama3-70b", n=64, par={"fsdp": 8, "tp": 8, "sequence_parallel": True}, gbs=64, mb=8))
    assert b.breakdown["tp comm"] > a.breakdown["tp comm"]
    assert b.memory_breakdown_GiB["activations"] < 4 * a.memory_breakdown_GiB["activations"]


def test_cross_node_fsdp_is_inter_node():
    p = predict(wl())
    ag = next(c for c in p.collectives if c.name == "fsdp all-gather")
    assert ag.link == "inter-node" and ag.group_size == 64
    one = predict(wl("llama3-8b", n=8, par={"fsdp": 8}, gbs=8, mb=1))
    assert next(c for c in one.collectives if c.name == "fsdp all-gather").link == "intra-node"


@pytest.mark.parametrize("kw,field", [
    (dict(par={"tp": 128}, n=128), "parallel.tp"),  # tp > heads (64)
    (dict(model="llama3-8b", par={"pp": 64}, n=64, gbs=64, mb=1), "parallel.pp"),  # pp > layers
    (dict(par={"fsdp": 6}, n=64), "parallel"),  # degrees not dividing the device count
    (dict(mb=3), "training"),  # micro batch not dividing the local batch
    (dict(device="a100-sxm-80gb", prec="fp8"), "training.precision"),
    (dict(device="mi250-gcd", prec="fp8"), "training.precision"),
])
def test_bad_plans_name_the_field(kw, field):
    with pytest.raises(TrainperfError) as e:
        predict(wl(**kw))
    assert field in str(e.value)


def test_check_plan_micro_batch():
    w = wl(model="llama3-8b", n=8, par={"fsdp": 8}, gbs=16, mb=1)
    object.__setattr__(w, "micro_batch", 3)  # bypass the workload's own check
    with pytest.raises(SpecError, match=r"training\.micro_batch"):
        predict(w)


def test_lora_needs_less_memory_and_time():
    w = wl("llama3.1-405b", device="mi300x", n=8, par={"fsdp": 8}, seq=64, gbs=16, mb=2, ac="none")
    full = predict(w)
    lora = predict(w, trainable_fraction=0.01)
    assert lora.step_time_s < full.step_time_s
    assert lora.memory_breakdown_GiB["optimizer states"] == pytest.approx(
        0.01 * full.memory_breakdown_GiB["optimizer states"])
    # its MFU counts what a LoRA step runs (lora), unless another convention is named
    assert (full.convention, lora.convention) == ("megatron", "lora")
    assert predict(w, trainable_fraction=0.01, convention="megatron").convention == "megatron"


def test_a_frozen_base_is_held_as_the_stack_holds_it():
    """A LoRA base: 2 bytes per parameter by default (loaded in 16 bits), 4 under the bench,
    which keeps its model in fp32 (``frozen_weight_bytes``); the adapters as trained weights."""
    w = wl("llama3-8b", n=8, par={"fsdp": 8}, seq=1024, gbs=8, mb=1, ac="full")
    sixteen = predict(w, trainable_fraction=0.01).memory_breakdown_GiB["weights"]
    bench = predict(dataclasses.replace(w, stack="trainperf-bench"), trainable_fraction=0.01)
    assert bench.memory_breakdown_GiB["weights"] == pytest.approx(sixteen * (0.01 * 2 + 0.99 * 4) / 2, rel=1e-9)
    assert predict(dataclasses.replace(w, stack="trainperf-bench")).memory_breakdown_GiB["weights"] == pytest.approx(
        predict(w).memory_breakdown_GiB["weights"])


def test_step_model_vectorises_over_plans():
    w = wl()
    lay = layout_of(w)
    k = vendor_knobs("nvidia").numbers()
    scalar = step_costs(lay, k)
    mesh = dataclasses.replace(lay.mesh, fsdp=np.array([64.0, 64.0]), shards_params=np.array([64.0, 64.0]),
                               micro_batch=np.array([2.0, 1.0]), grad_accum=np.array([1.0, 2.0]))
    arr = step_costs(dataclasses.replace(lay, mesh=mesh), k)
    assert arr.step_time_s[0] == pytest.approx(scalar.step_time_s)
    assert arr.memory.total_bytes[0] == pytest.approx(scalar.memory.total_bytes)
    assert arr.memory.activations_bytes[1] < arr.memory.activations_bytes[0]
    # the same micro batch 1 plan through the scalar path
    s1 = step_costs(layout_of(wl(mb=1)), k)
    assert arr.step_time_s[1] == pytest.approx(s1.step_time_s)


def test_knobs_have_sources_and_defaults():
    for vendor in ("nvidia", "amd", "cpu", "other"):
        k = vendor_knobs(vendor)
        assert set(k.values()) == set(KNOB_NAMES)
        assert all(k.sources.get(n) for n in KNOB_NAMES)


def test_to_dict_has_the_documented_keys():
    d = predict(wl()).to_dict()
    for key in ("step_time_s", "tokens_per_s", "tokens_per_s_per_device", "mfu_pct",
                "memory_per_device_GiB", "fits", "breakdown", "memory_breakdown_GiB", "bottleneck"):
        assert key in d


def test_properties_hold_over_random_plans():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=25, deadline=None)
    @given(fsdp=st.sampled_from([8, 16, 32, 64]), mb=st.sampled_from([1, 2]),
           ac=st.sampled_from(["none", "selective", "full"]), eff=st.floats(0.3, 0.9))
    def check(fsdp, mb, ac, eff):
        w = wl("llama3-8b", n=64, par={"fsdp": fsdp}, gbs=64 * 4, mb=mb, ac=ac)
        k = vendor_knobs("nvidia")
        slow = predict(w, knobs=k.replace(matmul_fraction=eff))
        fast = predict(w, knobs=k.replace(matmul_fraction=min(1.0, eff + 0.1)))
        assert fast.step_time_s < slow.step_time_s  # faster GEMMs never slow a step
        assert sum(slow.breakdown.values()) == pytest.approx(slow.step_time_s, rel=1e-9)
        if fsdp < 64:  # sharding over more ranks never needs more model-state memory
            more = predict(wl("llama3-8b", n=64, par={"fsdp": 64}, gbs=64 * 4, mb=mb, ac=ac))
            states = ("weights", "gradients", "optimizer states")
            assert sum(more.memory_breakdown_GiB[s] for s in states) < sum(
                slow.memory_breakdown_GiB[s] for s in states)

    check()


def test_prediction_as_run_record():
    p = predict(wl())
    run = p.to_run_record()
    assert run.source == "predicted" and run.steps[0].step_time_s == p.step_time_s
    assert run.steps[0].breakdown == p.breakdown and run.workload is p.workload


def test_expert_parallel_does_not_shard_experts_twice():
    # ep is carved out of the fsdp ranks: with fsdp=16 and ep=16, each device holds 1/16 of the
    # routed experts (not 1/256), so DeepSeek-V3's 671B bf16 weights are ~84 GB per device.
    from trainperf.predict.step import predict
    from trainperf.specs.workload_file import workload_from_dict

    w = workload_from_dict({"model": {"preset": "deepseek-v3"},
                            "hardware": {"device": "h100-sxm", "num_devices": 16},
                            "parallel": {"fsdp": 16, "ep": 16},
                            "training": {"seq_len": 4096, "global_batch": 16,
                                         "activation_checkpointing": "full"}})
    p = predict(w)
    expected_GiB = w.model.total_params * 2 / 16 / 2**30
    assert p.memory_breakdown_GiB["weights"] == pytest.approx(expected_GiB, rel=0.02)
    assert not p.fits


def test_moe_dispatcher_gathers_topk_copies_over_the_expert_tp_group():
    """Megatron-Core's alltoall dispatcher all-gathers the tokens a rank received over the expert
    tp group and reduce-scatters the expert outputs back: topk copies of [s, h] in 16 bits, not
    hidden by TP comm overlap. With unsplit experts (etp = 1, MoE parallel folding) nothing is
    gathered: the difference is exactly those collectives, by hand from the comms model."""
    from trainperf.predict.step_model.collectives import collective_time_s

    par = {"dp": 8, "tp": 4, "ep": 8, "sequence_parallel": True, "zero_stage": 1}
    w = wl("mixtral-8x7b", n=32, par=par, seq=4096, gbs=64, mb=1, ac="none")
    w1 = wl("mixtral-8x7b", n=32, par={**par, "etp": 1}, seq=4096, gbs=64, mb=1, ac="none")
    k = vendor_knobs("nvidia").numbers()
    lay = layout_of(w)
    split, folded = step_costs(lay, k).tp.comm, step_costs(layout_of(w1), k).tp.comm
    buf = 4096 * 4096 * 2.0 * 2  # tokens x hidden x bf16 x topk
    d, kp = lay.device, lay.kernels
    one = sum(collective_time_s(kind, buf, 4.0, 4.0, 1.0, d.intra_bytes_per_s, d.inter_bytes_per_s,
                                kp.link_up, kp.link_out, k.link_fraction) for kind in ("all-gather", "reduce-scatter"))
    micro_batches, layers, passes = 64 / 8, 32, 2.0  # forward + backward, no recomputation
    assert split.time_s - folded.time_s == pytest.approx(micro_batches * layers * passes * one)
    assert split.exposed_s - folded.exposed_s == pytest.approx(micro_batches * layers * passes * one)
    assert folded.time_s > 0  # the attention block's collectives stay
