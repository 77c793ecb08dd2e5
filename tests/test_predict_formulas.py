"""Every formula of the predictor against hand-derived numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainperf.predict import comms, compute, memory, pipeline

# --- Korthikanti et al. 2022, activation memory per layer (bytes, 16-bit activations) ------------
S, B, H, A = 2048, 1, 12288, 96  # GPT-3 175B shape, as in the paper's Table 2 discussion


def test_korthikanti_no_recompute_single_device():
    # sbh(34 + 5as/h)
    want = S * B * H * (34 + 5 * A * S / H)
    assert memory.korthikanti_activation_bytes(S, B, H, A) == pytest.approx(want)
    # numerically: 2048*12288*(34 + 80) = 2,868,903,936 bytes
    assert want == pytest.approx(2_868_903_936)


def test_korthikanti_tensor_parallel_without_sp():
    t = 8
    want = S * B * H * (10 + 24 / t + 5 * A * S / (H * t))
    assert memory.korthikanti_activation_bytes(S, B, H, A, t=t) == pytest.approx(want)


def test_korthikanti_sequence_parallel():
    t = 8
    want = S * B * H * (34 / t + 5 * A * S / (H * t))
    got = memory.korthikanti_activation_bytes(S, B, H, A, t=t, sequence_parallel=True)
    assert got == pytest.approx(want)
    # with SP everything is split t ways: exactly 1/t of the single-device figure
    assert got == pytest.approx(memory.korthikanti_activation_bytes(S, B, H, A) / t)


def test_korthikanti_selective_and_full():
    t = 8
    assert memory.korthikanti_activation_bytes(S, B, H, A, t=t, sequence_parallel=True,
                                               policy="selective") == pytest.approx(S * B * H * 34 / t)
    assert memory.korthikanti_activation_bytes(S, B, H, A, t=t, policy="selective") == pytest.approx(
        S * B * H * (10 + 24 / t))
    assert memory.korthikanti_activation_bytes(S, B, H, A, policy="full") == pytest.approx(2 * S * B * H)
    assert memory.korthikanti_activation_bytes(S, B, H, A, t=t, sequence_parallel=True,
                                               policy="full") == pytest.approx(2 * S * B * H / t)


def test_generalised_activations_reduce_to_34h_for_a_gpt_block():
    # MHA (q = kv = h), 4h GELU MLP: 32h without dropout masks; Korthikanti's 34h has two h-byte masks
    per_layer = memory.activation_bytes_per_layer(S, B, H, H, H, 4 * H, False, 1, False, "none")
    assert per_layer == pytest.approx(S * B * H * 32)
    assert per_layer + 2 * S * B * H == pytest.approx(memory.korthikanti_activation_bytes(S, B, H, A, policy="selective"))
    # with SP every term is split; full keeps the (split) input only
    sp = memory.activation_bytes_per_layer(S, B, H, H, H, 4 * H, False, 8, True, "none")
    assert sp == pytest.approx(per_layer / 8)
    full = memory.activation_bytes_per_layer(S, B, H, H, H, 4 * H, False, 8, True, "full")
    assert full == pytest.approx(2 * S * B * H / 8)
    # materialised scores add 5as per token (per layer, /t)
    nf = memory.activation_bytes_per_layer(S, B, H, H, H, 4 * H, False, 1, False, "none", flash=False, heads=A)
    assert nf - per_layer == pytest.approx(S * B * 5 * A * S)


# --- ZeRO (Rajbhandari et al. 2020, Figure 1: 7.5B params, 64 GPUs, mixed-precision Adam) ---------
@pytest.mark.parametrize("stage,want_GB", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_stage_memory_matches_the_paper(stage, want_GB):
    n, psi = 64, 7.5e9
    shards = (1 if stage < 3 else n, 1 if stage < 2 else n, 1 if stage < 1 else n)
    w, g, o = memory.state_bytes(psi, "mixed", *shards)
    assert (w + g + o) / 1e9 == pytest.approx(want_GB, abs=0.06)


def test_zero_bytes_per_param_are_2_2_12():
    assert memory.state_bytes(1.0, "mixed", 1, 1, 1) == (2.0, 2.0, 12.0)
    assert sum(memory.state_bytes(1.0, "fp32", 1, 1, 1)) == 16.0


# --- pipeline bubble (Narayanan et al. 2021) -------------------------------------------------------
def test_1f1b_bubble_fraction():
    # p = 4 stages, m = 8 micro-batches: (p-1)/(m+p-1) = 3/11 of the step, (p-1)/m of the ideal
    assert pipeline.bubble_fraction_of_step(4, 8) == pytest.approx(3 / 11)
    assert pipeline.bubble_fraction_of_ideal(4, 8) == pytest.approx(3 / 8)
    assert pipeline.bubble_time_s(4, 1, 2.0) == pytest.approx(6.0)


def test_interleaved_bubble_is_v_times_smaller():
    assert pipeline.bubble_fraction_of_ideal(8, 16, vpp=4) == pytest.approx(7 / (4 * 16))
    assert pipeline.bubble_time_s(8, 4, 1.0) == pytest.approx(7 / 4)
    assert pipeline.bubble_fraction_of_step(8, 16, vpp=4) == pytest.approx((7 / 4) / (16 + 7 / 4))


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
           nvls_min: float = 0.0, ring: tuple | None = None) -> tuple:
    """A level model (comms.level_model's shape) with the same parameters for every kind."""
    kinds = tuple((k, eff, half, lat_us) for k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                                                  "send-recv"))
    return (ref, p, mesh, nvls_min, ring, kinds)


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
    out = (32.0, 0.5, False, 0.0, None, (("all-reduce", 0.9, 400e6, 300.0), ("all-to-all", 0.9, 400e6, 300.0),
                                          ("send-recv", 0.95, 2e6, 5.0)))
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
    f = compute.attention_forward_flops(1, 4096, 2048.5, 64, 128, 128)
    assert f == pytest.approx(2 * 4096 * 2048.5 * 64 * 256)
    fwd, bwd = compute.attention_time_s(1e12, 1e15, 0.5)
    assert fwd == pytest.approx(2e-3) and bwd == pytest.approx(5e-3)


def test_elementwise_bytes():
    # h=4096, q=4096, kv=1024, gated f=14336: 2 bytes * (4h + 6h + 2(q+kv) + 3f)
    got = compute.elementwise_bytes_per_token(4096, 4096, 1024, 14336, True)
    assert got == pytest.approx(2 * (10 * 4096 + 2 * 5120 + 3 * 14336))


def test_vectorised_helpers_accept_arrays():
    up, out = _level(1.0, 0.0, 0.0), _level(1.0, 0.0, 0.0, ref=32.0)
    t = comms.collective_time_s("all-gather", np.array([1e9, 2e9]), np.array([8.0, 1.0]),
                                np.array([8.0, 1.0]), np.array([1.0, 1.0]), 450e9, 50e9, up, out)
    assert t[0] == pytest.approx(7 / 8 * 1e9 / 450e9) and t[1] == 0.0
    assert math.isclose(float(pipeline.bubble_fraction_of_step(np.array([4.0]), np.array([8.0]))[0]), 3 / 11)


def test_the_lm_head_runs_in_16_bits_under_fp8(monkeypatch):
    """Megatron-Core's output layer is not a Transformer Engine module and torchtitan's float8
    conversion skips ``output``: under fp8 the LM head is a bf16 GEMM at the bf16 peak. On one
    H100 (pp = 1: the head is on the only stage), turning that off changes an fp8 step by the
    head's forward and two backward GEMMs, 4 micro-batches, at fp8 speed instead of bf16 (the
    launch-overlap blend moves it by a little), and leaves a bf16 step alone."""
    from trainperf.predict import core, predict
    from trainperf.predict.step import resolve_knobs
    from trainperf.specs.hardware import get_hardware
    from trainperf.specs.workload_file import workload_from_dict

    def w(precision: str):
        return workload_from_dict({
            "model": {"preset": "llama3-8b"}, "hardware": {"device": "h100-sxm", "num_devices": 1},
            "training": {"seq_len": 4096, "global_batch": 4, "micro_batch": 1, "precision": precision,
                         "activation_checkpointing": "full", "stack": "megatron-core"}})

    assert core._head_dtype(get_hardware("b200"), "fp4") == "bf16"
    assert core._head_dtype(get_hardware("h100-sxm"), "bf16") == "bf16"
    bf16_on, fp8_on = predict(w("bf16")).step_time_s, predict(w("fp8")).step_time_s
    f, k = core.workload_features(w("fp8")), resolve_knobs(w("fp8"))
    monkeypatch.setattr(core, "HEAD_16BIT_UNDER_FP8", False)
    bf16_off, fp8_off = predict(w("bf16")).step_time_s, predict(w("fp8")).step_time_s
    assert bf16_on == bf16_off
    half, hbm = f["gemm_half_dim"], f["hbm_bytes_per_s"]
    head16 = compute.matmul_time_s(4096, 128256, 4096, f["attn_peak_flops"],
                                   f["head_gemm_peak_fraction"] * k.matmul_fraction, half, hbm, 2.0)
    head8 = compute.matmul_time_s(4096, 128256, 4096, f["peak_flops"],
                                  f["gemm_peak_fraction"] * k.fp8_matmul_fraction, half, hbm, 1.0)
    assert fp8_on - fp8_off == pytest.approx(4 * 3 * (head16 - head8), rel=1e-3)
