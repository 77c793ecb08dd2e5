"""Every formula of the predictor against hand-derived numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainperf.predict.kernels.collectives import LevelModel
from trainperf.predict.step_model import collectives as comms
from trainperf.predict.step_model import compute, memory, pipeline

# --- Korthikanti et al. 2022, activation memory per layer (bytes, 16-bit activations) ------------
S, B, H, A = 2048, 1, 12288, 96  # GPT-3 175B shape, as in the paper's Table 2 discussion


def korthikanti_activation_bytes(s, b, h, a, t=1, sequence_parallel=False, policy="none"):
    """Activation bytes of ONE transformer layer, exactly as Korthikanti et al. (2022) write them
    (GPT block: MHA, 4h GELU MLP, dropout, materialised attention scores): the reference."""
    sbh = s * b * h
    if policy == "full":
        return 2.0 * sbh / (t if sequence_parallel else 1)
    base = 34.0 / t if sequence_parallel else 10.0 + 24.0 / t
    if policy == "selective":
        return sbh * base
    return sbh * (base + 5.0 * a * s / (h * t))


def test_korthikanti_reference_by_hand():
    # sbh(34 + 5as/h) = 2048*12288*(34 + 80) = 2,868,903,936 bytes
    assert korthikanti_activation_bytes(S, B, H, A) == pytest.approx(2_868_903_936)
    t = 8
    # with SP everything is split t ways: exactly 1/t of the single-device figure
    assert korthikanti_activation_bytes(S, B, H, A, t=t, sequence_parallel=True) == pytest.approx(
        korthikanti_activation_bytes(S, B, H, A) / t)


def _gpt_widths(policy: str):
    from trainperf.accounting.recompute import layer_recompute
    from trainperf.specs.presets import get_model

    m = get_model("gpt3-175b")
    rc = layer_recompute(policy, tuple(m.attention_matmuls()), tuple(m.dense_mlp_matmuls()), m.gated_mlp)
    return rc.widths


@pytest.mark.parametrize("t,sp", [(1, False), (8, False), (8, True)])
def test_kept_activations_are_korthikantis_less_dropout_masks(t, sp):
    # MHA (q = kv = h), 4h GELU MLP: what the model keeps is Korthikanti's selective figure less his
    # two h-byte dropout masks (dropout is off in modern training; split t ways with SP)
    kept = memory.saved_activation_bytes_per_layer(S, B, H, H, H, 4 * H, t, sp, _gpt_widths("selective"))
    masks = 2 * S * B * H / (t if sp else 1)
    assert kept + masks == pytest.approx(korthikanti_activation_bytes(S, B, H, A, t, sp, "selective"))
    # with flash attention no policy keeps the scores: "none" keeps what "selective" does
    assert memory.saved_activation_bytes_per_layer(S, B, H, H, H, 4 * H, t, sp, _gpt_widths("none")) == kept
    full = memory.saved_activation_bytes_per_layer(S, B, H, H, H, 4 * H, t, sp, _gpt_widths("full"))
    assert full == pytest.approx(korthikanti_activation_bytes(S, B, H, A, t, sp, "full"))


def test_unfused_attention_keeps_korthikantis_scores():
    # materialised scores add 5as per token (per layer, /t)
    assert memory.eager_attention_score_bytes(S, B, S, A) == pytest.approx(S * B * 5 * A * S)


# --- ZeRO (Rajbhandari et al. 2020, Figure 1: 7.5B params, 64 GPUs, mixed-precision Adam) ---------
@pytest.mark.parametrize("stage,want_GB", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_stage_memory_matches_the_paper(stage, want_GB):
    from trainperf.specs.parallel import ParallelPlan

    n, psi = 64, 7.5e9
    plan = ParallelPlan(dp=n, zero_stage=stage)
    w, g, o = memory.STATE_BYTES["mixed"]
    total = psi * (w / plan.shards_params + g / plan.shards_grads + o / plan.shards_optimizer)
    assert total / 1e9 == pytest.approx(want_GB, abs=0.06)


def test_zero_bytes_per_param_are_2_2_12():
    assert memory.STATE_BYTES["mixed"] == (2.0, 2.0, 12.0)
    assert sum(memory.STATE_BYTES["fp32"]) == 16.0


# --- pipeline bubble (Narayanan et al. 2021) -------------------------------------------------------
def test_1f1b_bubble_fraction():
    # p = 4 stages, m = 8 micro-batches, 2 s each: (p-1)/(m+p-1) = 3/11 of the step, (p-1)/m of the ideal
    bubble = pipeline.bubble_time_s(4, 1, 2.0)
    assert bubble == pytest.approx(6.0)
    assert bubble / (8 * 2.0 + bubble) == pytest.approx(3 / 11) and bubble / (8 * 2.0) == pytest.approx(3 / 8)


def test_interleaved_bubble_is_v_times_smaller():
    assert pipeline.bubble_time_s(8, 4, 1.0) == pytest.approx(7 / 4)
    assert pipeline.bubble_time_s(8, 4, 1.0) / 16 == pytest.approx(7 / (4 * 16))


# --- collectives ----------------------------------------------------------------------------------
def test_ring_bus_volumes():
    s = 1e9
    assert comms.ring_bytes_per_device("all-reduce", s, 8) == pytest.approx(2 * 7 / 8 * s)
    assert comms.ring_bytes_per_device("all-gather", s, 8) == pytest.approx(7 / 8 * s)
    assert comms.ring_bytes_per_device("reduce-scatter", s, 64) == pytest.approx(63 / 64 * s)
    assert comms.ring_bytes_per_device("send-recv", s, 2) == s


def test_group_layout():
    # tp=8 innermost on 8-GPU nodes: one node; fsdp=16 with stride 8: one member per node, 16 nodes
    assert comms.group_layout(8, 1, 8) == (8, 1)
    assert comms.group_layout(16, 8, 8) == (1, 16)
    # fsdp=64 with stride 1: 8 per node on 8 nodes
    assert tuple(map(float, comms.group_layout(64, 1, 8))) == (8.0, 8.0)
    # stride 2 on 8-GPU nodes: 4 members per node
    assert tuple(map(float, comms.group_layout(16, 2, 8))) == (4.0, 4.0)


def _level(eff: float, half: float, lat_us: float, ref: float = 8.0, p: float = 0.0, mesh: bool = False,
           nvls_min: float = 0.0, ring: tuple | None = None) -> LevelModel:
    """A level model with the same parameters for every kind."""
    kinds = tuple((k, eff, half, lat_us) for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                                                  "send-recv"))
    return LevelModel(ref, p, mesh, nvls_min, ring[1:] if ring else None, kinds)


def test_collective_time_intra_node_all_reduce_by_hand():
    # 1 GB all-reduce over 8 GPUs on NVLink 450 GB/s, 80% of it at large sizes, half speed at 10 MB:
    # bus volume 2*7/8*(S + half) / (0.8 * 450e9)
    up, out = _level(0.8, 10e6, 20.0), _level(0.9, 80e6, 300.0, ref=32.0)
    t = comms.collective_time_s("all-reduce", 1e9, 8, 8, 1, 450e9, 50e9, up, out)
    assert t == pytest.approx(2 * 7 / 8 * (1e9 + 10e6) / (0.8 * 450e9))
    # a tiny message costs the half-size term, and never less than the latency floor
    assert comms.collective_time_s("all-reduce", 1e3, 8, 8, 1, 450e9, 50e9, up, out) == pytest.approx(
        2 * 7 / 8 * (1e3 + 10e6) / (0.8 * 450e9))
    sharp = _level(0.8, 1e3, 20.0)
    assert comms.collective_time_s("all-reduce", 1e3, 8, 8, 1, 450e9, 50e9, sharp, out) == pytest.approx(20e-6)
    # ten calls of a tenth each: ten halves and ten floors
    t10 = comms.collective_time_s("all-reduce", 1e9, 8, 8, 1, 450e9, 50e9, up, out, calls=10.0)
    assert t10 == pytest.approx(10 * 2 * 7 / 8 * (1e8 + 10e6) / (0.8 * 450e9))
    # NVSwitch all-reduce: NVLS from 5 GPUs, a ring below
    nv = _level(1.0, 10e6, 20.0, nvls_min=5.0, ring=("all-reduce", 0.8, 10e6, 20.0))
    t4 = comms.collective_time_s("all-reduce", 1e9, 4, 4, 1, 450e9, 50e9, nv, out)
    t8 = comms.collective_time_s("all-reduce", 1e9, 8, 8, 1, 450e9, 50e9, nv, out)
    assert t4 == pytest.approx(2 * 3 / 4 * (1e9 + 10e6 * (3 / 7) ** 0.0) / (0.8 * 450e9))
    assert t8 == pytest.approx(2 * 7 / 8 * (1e9 + 10e6) / (1.0 * 450e9))


def test_collective_time_inter_node_uses_the_nodes_nics():
    # all-gather of 8 GB over 64 GPUs (8 nodes x 8): inter stage 7/8*(8e9 + half)/(8*50e9*eff)
    up, out = _level(1.0, 0.0, 0.0), _level(1.0, 0.0, 0.0, ref=32.0)
    t = comms.collective_time_s("all-gather", 8e9, 64, 8, 8, 450e9, 50e9, up, out)
    assert t == pytest.approx(max(7 / 8 * 8e9 / 450e9, 7 / 8 * 8e9 / (8 * 50e9)))
    # one member per node (stride >= node): the single NIC carries it all
    t1 = comms.collective_time_s("all-gather", 8e9, 16, 1, 16, 450e9, 50e9, up, out)
    assert t1 == pytest.approx(15 / 16 * 8e9 / 50e9)
    assert comms.collective_time_s("all-gather", 8e9, 1, 1, 1, 450e9, 50e9, up, out) == 0.0
    # across nodes the half size grows as ((n-1)/(ref-1))^p, the latency with the ring steps
    out_p = _level(1.0, 100e6, 300.0, ref=32.0, p=0.5)
    t64 = comms.collective_time_s("all-gather", 8e9, 64, 8, 8, 450e9, 50e9, up, out_p)
    assert t64 == pytest.approx(7 / 8 * (8e9 + 100e6 * (63 / 31) ** 0.5) / (8 * 50e9))


def test_all_to_all_across_nodes_is_concurrent_sends_through_each_nic():
    """An all-to-all is n-1 concurrent sends, not a ring: across nodes a rank's (N-1)/N of its
    buffer leaves through its own NIC, priced as one send/recv of that size; within the node the
    k members exchange S*k/n each as a k-rank all-to-all; the slower sets the time."""
    up = _level(0.8, 10e6, 20.0)
    out = LevelModel(32.0, 0.5, False, 0.0, None, (("all-reduce", 0.9, 400e6, 300.0),
                                                    ("all-to-all", 0.9, 400e6, 300.0), ("send-recv", 0.95, 2e6, 5.0)))
    # 25 MB a rank, ep = 8 over 4 nodes (2 a node): 3/4 of it crosses the network at 0.95 x 50 GB/s
    t = comms.collective_time_s("all-to-all", 25e6, 8, 2, 4, 450e9, 50e9, up, out)
    assert t == pytest.approx((3 / 4 * 25e6 + 2e6) / (0.95 * 50e9))
    # ten calls: ten times one call of a tenth (each with its own half size)
    t10 = comms.collective_time_s("all-to-all", 25e6, 8, 2, 4, 450e9, 50e9, up, out, calls=10.0)
    assert t10 == pytest.approx(10 * (3 / 4 * 2.5e6 + 2e6) / (0.95 * 50e9))
    # the ring all-reduce's half size and step latencies do not enter: a small exchange costs the
    # point-to-point floor, not 2(n-1) ring steps
    assert comms.collective_time_s("all-to-all", 1.0, 64, 8, 8, 450e9, 50e9, up, out) == pytest.approx(
        max((7 / 8 + 2e6) / (0.95 * 50e9), 5e-6, 7 / 8 * (1 / 8 + 10e6) / (0.8 * 450e9)))
    # within one node it is the measured scale-up all-to-all, as before
    assert comms.collective_time_s("all-to-all", 25e6, 8, 8, 1, 450e9, 50e9, up, out) == pytest.approx(
        7 / 8 * (25e6 + 10e6) / (0.8 * 450e9))


def test_moe_routing_bytes_by_hand():
    # 1024 tokens, top-2, h = 6144, bf16: permute reads 1 and writes 2 copies, unpermute the
    # reverse: 2 * 1024 * 3 * 6144 * 2 bytes; with 4 local experts the 8192 received rows are
    # sorted by expert and back (read + write, twice)
    one = compute.moe_routing_bytes(1024, 8192, 2, 6144, 1, 2.0)
    assert one == pytest.approx(2 * 1024 * 3 * 6144 * 2)
    assert compute.moe_routing_bytes(1024, 8192, 2, 6144, 4, 2.0) == pytest.approx(one + 4 * 8192 * 6144 * 2)


def test_exposed_communication():
    assert comms.exposed_s(1.0, 10.0, 0.8) == pytest.approx(0.2)          # hides all it can
    assert comms.exposed_s(10.0, 4.0, 0.8) == pytest.approx(2.0 + 4.0)   # window too short
    assert comms.exposed_s(1.0, 10.0, 0.0) == pytest.approx(1.0)


# --- compute --------------------------------------------------------------------------------------
def test_matmul_time_by_hand():
    # 8192^3 GEMM at 1000 TFLOP/s, 75% efficiency, no shape penalty: 2*8192^3/(0.75e15)
    t = compute.matmul_time_s(8192, 8192, 8192, 1e15, 0.75, 0.0, 3e12)
    assert t == pytest.approx(2 * 8192 ** 3 / 0.75e15)
    # shape factor d/(d+64) for each dimension
    t2 = compute.matmul_time_s(64, 8192, 8192, 1e15, 1.0, 64.0, 1e15)
    assert t2 == pytest.approx(2 * 64 * 8192 * 8192 / (1e15 * 0.5 * (8192 / 8256) ** 2))


def test_skinny_matmul_is_memory_bound():
    # a GEMV-like (1 x 8192) @ (8192 x 8192) reads 2*8192^2 bytes: bandwidth-bound
    t = compute.matmul_time_s(1, 8192, 8192, 1e15, 0.75, 0.0, 3e12)
    assert t == pytest.approx(2 * (8192 + 8192 * 8192 + 8192) / 3e12)


def test_flash_attention_flops_and_backward_factor():
    from trainperf.predict.step_model import attention

    f = attention.attention_forward_flops(1, 4096, 2048.5, 64, 128, 128)
    assert f == pytest.approx(2 * 4096 * 2048.5 * 64 * 256)
    assert attention.FLASH_BACKWARD_FACTOR == 2.5  # FlashAttention-2: five GEMMs backward, two forward


def test_elementwise_bytes():
    # h=4096, q=4096, kv=1024, gated f=14336: 2 bytes * (4h + 6h + 2(q+kv) + 3f)
    got = compute.elementwise_bytes_per_token(4096, 4096, 1024, 14336, True)
    assert got == pytest.approx(2 * (10 * 4096 + 2 * 5120 + 3 * 14336))


def test_vectorised_helpers_accept_arrays():
    up, out = _level(1.0, 0.0, 0.0), _level(1.0, 0.0, 0.0, ref=32.0)
    t = comms.collective_time_s("all-gather", np.array([1e9, 2e9]), np.array([8.0, 1.0]),
                                np.array([8.0, 1.0]), np.array([1.0, 1.0]), 450e9, 50e9, up, out)
    assert t[0] == pytest.approx(7 / 8 * 1e9 / 450e9) and t[1] == 0.0
    assert math.isclose(float(pipeline.bubble_time_s(np.array([4.0]), np.array([1.0]), 2.0)[0]), 6.0)


def test_the_lm_head_runs_in_16_bits_under_fp8(monkeypatch):
    """Megatron-Core's output layer is not a Transformer Engine module and torchtitan's float8
    conversion skips ``output``: under fp8 the LM head is a bf16 GEMM at the bf16 peak. On one
    H100 (pp = 1: the head is on the only stage), turning that off changes an fp8 step by the
    head's forward and two backward GEMMs, 4 micro-batches, at fp8 speed instead of bf16 (the
    launch-overlap blend moves it by a little), and leaves a bf16 step alone."""
    from trainperf.predict import predict
    from trainperf.predict.step import resolve_knobs
    from trainperf.predict.step_model import layout_of
    from trainperf.predict.step_model.kernel_physics import head_dtype
    from trainperf.specs.hardware import get_hardware
    from trainperf.specs.workload_file import workload_from_dict

    def w(precision: str):
        return workload_from_dict({
            "model": {"preset": "llama3-8b"}, "hardware": {"device": "h100-sxm", "num_devices": 1},
            "training": {"seq_len": 4096, "global_batch": 4, "micro_batch": 1, "precision": precision,
                         "activation_checkpointing": "full", "stack": "megatron-core"}})

    assert head_dtype(get_hardware("b200"), "fp4") == "bf16"
    assert head_dtype(get_hardware("h100-sxm"), "bf16") == "bf16"
    bf16_on, fp8_on = predict(w("bf16")).step_time_s, predict(w("fp8")).step_time_s
    lay, k = layout_of(w("fp8")), resolve_knobs(w("fp8"))
    monkeypatch.setattr(compute, "HEAD_16BIT_UNDER_FP8", False)
    bf16_off, fp8_off = predict(w("bf16")).step_time_s, predict(w("fp8")).step_time_s
    assert bf16_on == bf16_off
    half, hbm = lay.kernels.gemm_half_dim, lay.device.hbm_bytes_per_s
    head16 = compute.matmul_time_s(4096, 128256, 4096, lay.device.attn_peak_flops,
                                   lay.kernels.head_gemm_peak_fraction * k.matmul_fraction, half, hbm, 2.0)
    head8 = compute.matmul_time_s(4096, 128256, 4096, lay.device.peak_flops,
                                  lay.kernels.gemm_peak_fraction * k.fp8_matmul_fraction, half, hbm, 1.0)
    assert fp8_on - fp8_off == pytest.approx(4 * 3 * (head16 - head8), rel=1e-3)
