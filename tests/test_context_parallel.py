"""Context parallelism in the step model: ring blocks, merges, exchange exposure, buffers, stack
facts, and the long-context memory of a torchtitan run, against hand-derived numbers."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from trainperf.predict import predict, stack_kernels
from trainperf.predict.efficiency import KnobValues
from trainperf.predict.kernels import attention as k_attention
from trainperf.predict.stack_capabilities import apply_stack
from trainperf.predict.stacks import stack_knobs
from trainperf.predict.step_model import attention, context_parallel, layout_of, step_costs
from trainperf.predict.step_model.collectives import fabric_of
from trainperf.predict.step_model.stage import busiest_stage
from trainperf.specs.hardware import get_hardware
from trainperf.specs.parallel import ParallelPlan
from trainperf.specs.presets import get_model
from trainperf.specs.workload import Workload

GiB = float(1 << 30)


def _workload(cp=4, seq=65536, stack="megatron-core", num=None, plan=None, policy="full", device="h100-sxm"):
    plan = plan or ParallelPlan(cp=cp)
    n = num or plan.tp * plan.cp * plan.pp * plan.fsdp * (plan.dp or 1)
    return Workload(model=get_model("llama3-8b"), hardware=get_hardware(device), num_devices=n, seq_len=seq,
                    global_batch=n // (plan.tp * plan.cp * plan.pp), micro_batch=1, plan=plan,
                    devices_per_node=8, activation_checkpointing=policy, stack=stack)


def _knobs(w):
    return stack_knobs(w.hardware, w.stack).numbers()


def _with_flavour(lay, fl):
    return dataclasses.replace(lay, kernels=dataclasses.replace(lay.kernels, cp_flavour=fl))


# ------------------------------------------------------------------------------ the kernels
def test_one_rank_is_one_causal_kernel():
    w = _workload(cp=1, seq=8192, stack="torchtitan")
    lay, kn = layout_of(w), _knobs(w)
    a = attention.attention_times(lay, kn, lay.kernels.cp_flavour)
    f, b = k_attention.efficiency("hopper", "fa2", 8192, 128, True)
    flops = 2.0 * 8192 * lay.model.kv_avg * 32 * 256  # b s kv_avg heads (qk + v dims)
    rate = lay.device.attn_peak_flops * kn.attention_fraction
    assert a.fwd == pytest.approx(flops / (rate * f))
    assert a.bwd == pytest.approx(2.5 * flops / (rate * b))
    assert (a.merge_fwd, a.step_fwd, a.extra_kernels) == (0.0, 0.0, 0.0)


def test_balanced_ring_is_a_causal_diagonal_and_half_blocks():
    """cp = 4 over 64k tokens: 16k per rank; the diagonal is causal at 16k, the three later steps
    are non-causal half blocks priced at 16k/sqrt(2); every step a quarter of the rank's FLOPs;
    the merges are Transformer Engine's fp32 corrections, 10 B per query element per later step
    and 10 B once, at the stack's elementwise bandwidth."""
    w = _workload(cp=4, seq=65536)
    lay, kn = layout_of(w), _knobs(w)
    fl = lay.kernels.cp_flavour
    assert fl.name == "ring-p2p" and fl.load_balance
    a = attention.attention_times(lay, kn, fl)
    s_loc = 16384
    flops = 2.0 * s_loc * lay.model.kv_avg * 32 * 256
    rate = lay.device.attn_peak_flops * kn.attention_fraction
    dc = k_attention.efficiency("hopper", "cudnn", s_loc, 128, True)
    hb = k_attention.efficiency("hopper", "cudnn", s_loc / math.sqrt(2), 128, False)
    q = s_loc * 4096.0
    bw = lay.device.hbm_bytes_per_s * lay.kernels.elementwise_fraction * kn.memory_bound_fraction
    merge_f = (3 * 10.0 * q + 10.0 * q) / bw
    assert a.first_fwd == pytest.approx(flops / 4 / (rate * dc[0]))
    assert a.fwd == pytest.approx(flops / 4 / (rate * dc[0]) + 0.75 * flops / (rate * hb[0]) + merge_f)
    assert a.step_bwd == pytest.approx((2.5 * 0.75 * flops / (rate * hb[1]) + a.merge_bwd) / 3)
    assert a.merge_bwd == pytest.approx(3 * (6.0 * q + 12.0 * s_loc * 1024) / bw)
    assert a.extra_kernels == 3 * 4.0


def test_unbalanced_ring_waits_for_the_last_rank():
    """Without load balancing the last rank computes a causal diagonal and cp - 1 full blocks:
    (2 cp - 1) / cp of the average work, 1 / (2 cp - 1) of it on the diagonal."""
    w = _workload(cp=4, seq=65536)
    lay, kn = layout_of(w), _knobs(w)
    bal = context_parallel.flavour("ring-p2p")
    unb = context_parallel.flavour("ring-p2p", load_balance=False)
    a, u = (attention.attention_times(lay, kn, fl) for fl in (bal, unb))
    flops = 2.0 * 16384 * lay.model.kv_avg * 32 * 256 * 7 / 4
    rate = lay.device.attn_peak_flops * kn.attention_fraction
    dc = k_attention.efficiency("hopper", "cudnn", 16384, 128, True)[0]
    full = k_attention.efficiency("hopper", "cudnn", 16384, 128, False)[0]
    assert u.fwd - u.merge_fwd == pytest.approx(flops / 7 / (rate * dc) + flops * 6 / 7 / (rate * full))
    assert u.fwd > 1.5 * a.fwd  # the zhuzilin/ring-flash-attention README: ring well below zigzag at CP 8


def test_gathered_keys_are_one_kernel_and_ulysses_one_per_head_group():
    w = _workload(cp=4, seq=65536, stack="maxtext")
    lay, kn = layout_of(w), _knobs(w)
    assert lay.kernels.cp_flavour.name == "allgather"
    a = attention.attention_times(lay, kn, lay.kernels.cp_flavour)
    flops = 2.0 * 16384 * lay.model.kv_avg * 32 * 256
    rate = lay.device.attn_peak_flops * kn.attention_fraction
    eff = k_attention.efficiency("hopper", "cudnn", math.sqrt(16384 * 65536), 128, True)
    assert a.fwd == pytest.approx(flops / (rate * eff[0])) and a.merge_fwd == 0.0
    uly = attention.attention_times(lay, kn, context_parallel.FLAVOURS["ulysses"])
    eff = k_attention.efficiency("hopper", "cudnn", 65536, 128, True)
    assert uly.fwd == pytest.approx(flops / (rate * eff[0]))


# ------------------------------------------------------------------------------- exchange
def _exchange(w, fl):
    lay = _with_flavour(layout_of(w), fl)
    kn = _knobs(w)
    s = step_costs(lay, kn)
    return lay, kn, s, fabric_of(lay, kn.link_fraction)


@pytest.mark.parametrize("name", ["ring-p2p", "ring-allgather", "ring-alltoall"])
def test_ring_exposure_by_hand(name):
    """Per layer forward: cp - 1 K/V sends, each behind one step (or one all-gather behind the
    diagonal); backward the K/V again and cp dK/dV sends, cp - 1 behind the next step and the
    last one exposed in full. Full recomputation re-runs the forward exchange."""
    w = _workload(cp=4, seq=16384)
    fl = context_parallel.FLAVOURS[name]
    _lay, kn, s, fab = _exchange(w, fl)
    a, g = s.compute.layer.attn, fab.group(4, 1)
    kv = 16384 / 4 * 1024  # K elements of one rank
    block, grad = 2 * kv * 2.0, 2 * kv * (fl.grad_bytes or 2.0)
    t_grad, ovl = fab.time_s("send-recv", grad, g), kn.overlap

    def behind(t, window):  # what the overlap share of the window does not hide
        return max(0.0, t - ovl * window)

    if fl.kv_exchange == "all-gather":
        t_kv = fab.time_s("all-gather", 4 * block, g)
        fwd_t, fwd_x = t_kv, behind(t_kv, a.first_fwd)
        bwd_x = behind(t_kv, a.first_bwd) + 3 * behind(t_grad, a.step_bwd) + t_grad
    else:
        t_kv = fab.time_s("send-recv", block, g)
        fwd_t, fwd_x = 3 * t_kv, 3 * behind(t_kv, a.step_fwd)
        bwd_x = 3 * behind(t_kv + t_grad, a.step_bwd) + t_grad
    layers = 32
    assert s.cp.exposed_s == pytest.approx(layers * (2 * fwd_x + bwd_x))  # full AC: the forward twice
    assert s.cp.time_s == pytest.approx(layers * (2 * fwd_t + fwd_t + 4 * t_grad))
    assert s.cp.bytes_per_device == pytest.approx(layers * (2 * 3 * block + 3 * block + 4 * grad))
    assert s.cp.exposed_s >= layers * t_grad  # at least the last dK/dV of every layer


def test_gathered_kv_without_a_ring_is_waited_for():
    w = _workload(cp=4, seq=16384, stack="maxtext", policy="none")
    _lay, _kn, s, fab = _exchange(w, context_parallel.FLAVOURS["allgather"])
    g = fab.group(4, 1)
    block = 2 * 16384 / 4 * 1024 * 2.0
    t_ag, t_rs = fab.time_s("all-gather", 4 * block, g), fab.time_s("reduce-scatter", 4 * block, g)
    assert s.cp.exposed_s == pytest.approx(32 * (t_ag + t_ag + t_rs))
    assert s.cp.exposed_s == pytest.approx(s.cp.time_s)


def test_ulysses_all_to_alls_are_exposed():
    w = _workload(cp=4, seq=16384, stack="deepspeed", policy="none")
    _lay, _kn, s, fab = _exchange(w, context_parallel.FLAVOURS["ulysses"])
    g = fab.group(4, 1)
    per_rank = (2 * 4096 * 4096 + 2 * 4096 * 1024) * 2.0  # Q and the output, K and V of one rank
    t = fab.time_s("all-to-all", per_rank, g, 2.0)
    assert s.cp.exposed_s == pytest.approx(32 * 2 * t)


def test_cp_one_costs_nothing():
    s = step_costs(layout_of(_workload(cp=1, seq=8192)), _knobs(_workload(cp=1, seq=8192)))
    assert (s.cp.time_s, s.cp.exposed_s, s.cp.bytes_per_device) == (0.0, 0.0, 0.0)


# -------------------------------------------------------------------------------- memory
def test_ring_buffers_by_hand():
    """PyTorch's ring (torchtitan) holds every rank's K/V gathered (cp blocks of K and V, bf16),
    and forward 18 B per query element (fp32 output, its update temporaries, the block output),
    more than backward's 6 B per query and 28 B per key element at GQA 4:1."""
    w = _workload(cp=8, seq=262144, stack="torchtitan")
    lay = layout_of(apply_stack(w))
    st = busiest_stage(lay)
    q, kv = 32768 * 4096.0, 32768 * 1024.0
    want = 8 * 2 * kv * 2.0 + max(18 * q, 6 * q + 28 * kv)
    assert context_parallel.ring_buffer_bytes(lay, st) == pytest.approx(want)
    assert context_parallel.ring_buffer_bytes(layout_of(_workload(cp=1, seq=8192)), st) == 0.0


def test_torchtitan_262k_on_8_gpus_with_cp_8_fits_and_names_the_ring():
    """A torchtitan run of Llama 3 8B at 262,144 tokens on 8 GPUs, CP 8, full checkpointing:
    torchtitan's FSDP spans the cp ranks, so the states are sharded 8 ways; the logits of the
    rank's 32k tokens (12 B each at the uncompiled loss's backward peak) and the ring's buffers
    fit in the 95 GB part."""
    w = _workload(cp=8, seq=262144, stack="torchtitan", device="h100-sxm-hbm2e")
    applied = apply_stack(w)
    assert applied.plan.zero_stage == 3 and any("context-parallel ranks" in n for n in applied.notes)
    p = predict(w)
    assert p.fits, p.memory_breakdown_GiB
    mem = p.memory_breakdown_GiB
    assert mem["optimizer states"] == pytest.approx(12.0 * (8.03e9 / 8) / GiB, rel=0.01)
    assert mem["logits"] == pytest.approx(32768 * 128256 * 12.0 / GiB)
    assert p.breakdown["cp ring (exposed)"] > 0
    ring = next(c for c in p.collectives if c.name == "cp ring exchange")
    assert ring.algorithm.startswith("ring-allgather") and ring.group_size == 8


def test_states_shard_over_cp_only_where_the_stack_does():
    w = _workload(cp=8, seq=65536, stack="megatron-core")
    assert apply_stack(w).plan.zero_stage == 0  # Megatron-Core shards over cp only with its distributed optimizer
    replicas = _workload(plan=ParallelPlan(dp=2, cp=4), stack="torchtitan", seq=65536)
    assert apply_stack(replicas).plan.zero_stage == 0  # HSDP over cp alone is not expressible: left as written


def test_gradients_reduce_over_dp_and_cp():
    """cp ranks see different tokens: the distributed optimizer reduce-scatters over dp x cp."""
    w = _workload(plan=ParallelPlan(dp=4, cp=2, zero_stage=1), seq=8192)
    p = predict(w)
    rs = next(c for c in p.collectives if c.name == "zero reduce-scatter")
    assert rs.group_size == 8
    plain = predict(_workload(plan=ParallelPlan(cp=8), seq=65536, policy="full"))
    assert any(c.name == "dp all-reduce" and c.group_size == 8 for c in plain.collectives)


# ----------------------------------------------------------------------------- stack facts
def test_flavour_names_agree_and_stacks_state_theirs():
    assert set(stack_kernels.CONTEXT_PARALLEL) == set(context_parallel.FLAVOURS)
    for name, fl in context_parallel.FLAVOURS.items():
        assert fl.name == name and fl.source
    want = {"torchtitan": "ring-allgather", "megatron-core": "ring-p2p", "maxtext": "allgather",
            "deepspeed": "ulysses", "generic": "ring-p2p"}
    for stack, name in want.items():
        sk = stack_kernels.for_stack(stack, "hopper")
        assert sk.context_parallel == name and sk.context_parallel_load_balance
        assert "context_parallel" in sk.sources


def test_unknown_flavour_is_a_one_line_error():
    from trainperf.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="context_parallel"):
        stack_kernels.validate_table({"context_parallel": "zigzag"}, "stack x")


def test_planner_shards_torchtitan_states_over_cp_like_predict():
    from trainperf.plan import vectorized
    from trainperf.plan.search import workload_of
    from trainperf.plan.space import SearchSpace, enumerate_candidates

    model, hw = get_model("llama3-8b"), get_hardware("h100-sxm")
    space = SearchSpace((8,), 8, 65536, (8,), max_micro_batch=1, max_vpp=1, stack="torchtitan",
                        checkpointing=("full",))
    cands = enumerate_candidates(model, hw, space)
    ev = vectorized.evaluate(cands, model, hw, 65536, 8, software=space.software)
    cp_only = np.flatnonzero((cands["cp"] > 1) & (cands["fsdp"] == 1) & (cands["dp"] == 1))
    assert cp_only.size
    for i in cp_only[:6]:
        p = predict(workload_of(model, hw, space, cands, int(i)))
        assert ev.memory_GiB[i] == pytest.approx(p.memory_per_device_GiB, rel=1e-6)
        assert ev.step_time_s[i] == pytest.approx(p.step_time_s, rel=1e-6)


def test_arrays_price_cp_like_scalars():
    """The planner's arrays (cp = 1 and cp > 1 rows together) price attention as one workload does."""
    from trainperf.predict.batch import group_layouts, step_times

    ws = [_workload(cp=c, seq=32768) for c in (1, 2, 4, 8)]
    lays = [layout_of(w) for w in ws]
    kn = _knobs(ws[0])
    groups = group_layouts(lays)
    assert len(groups) == 1
    knobs = {f.name: np.full(4, getattr(kn, f.name)) for f in dataclasses.fields(KnobValues)}
    got = step_times(groups, knobs, 4)
    for i, lay in enumerate(lays):
        assert got[i] == pytest.approx(step_costs(lay, kn).step_time_s, rel=1e-9)
