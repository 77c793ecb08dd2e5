"""This CPU's GEMMs at the shapes runs use: timed by the bench forward and backward (the
calibration's ``gemms``), priced by the predictor from the nearest measured shape (issue 29,
item 1: "per-shape GEMM throughput ... in the calibration cache")."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import pytest
import torch

from trainperf.measure import kernel_calibration as kc
from trainperf.predict.step import predict
from trainperf.predict.step_model.compute import measured_efficiency, shape_factor
from trainperf.specs import cpu_calibration as cc
from trainperf.specs.workload_file import workload_from_dict

KERNELS = {"elementwise_GB_per_s": 20.0, "op_overhead_us": 10.0, "ops_per_layer": 180.0,
           "attention": [{"seq": 256, "head_dim": 32, "causal": True, "fwd_fraction": 0.3, "bwd_fraction": 0.15}]}


def _save(tmp_path, monkeypatch, gemms: list[dict]) -> None:
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path))
    for threads in {cc.threads_per_process(1), cc.threads_per_process(2)}:
        cc.save_calibration(cc.CpuCalibration(
            cpu_model=cc.cpu_model_name(), threads=threads, peak_tflops={"bf16": 0.4}, memory_bandwidth_GB_per_s=10.0,
            measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
            kernels={"bf16": {**KERNELS, "gemms": gemms}}))


def _workload(model: str = "debug", **parallel):
    nproc = max(1, parallel.get("ep", 1), parallel.get("tp", 1))
    return workload_from_dict({
        "model": {"preset": model},
        "hardware": {"device": "cpu", "num_devices": nproc, "devices_per_node": nproc, "peak_tflops": 0.4},
        "parallel": parallel,
        "training": {"seq_len": 256, "micro_batch": 8, "global_batch": 8 * nproc, "precision": "bf16"}})


def test_a_measured_shape_is_priced_at_its_own_rate_and_a_far_one_by_the_law():
    table = ((2048.0, 256.0, 256.0, 0.8), (128.0, 256.0, 256.0, 0.4))
    assert measured_efficiency(2048.0, 256.0, 256.0, table, 8.0) == pytest.approx(0.8)
    assert measured_efficiency(128.0, 256.0, 256.0, table, 8.0) == pytest.approx(0.4)
    # 96 rows: nearest is 128 (log distance), scaled by the law between them
    law = shape_factor(96.0, 8.0) / shape_factor(128.0, 8.0)
    assert measured_efficiency(96.0, 256.0, 256.0, table, 8.0) == pytest.approx(0.4 * law)
    # vectorised over plans: each element takes its own nearest shape
    got = measured_efficiency(np.array([2048.0, 128.0]), np.array([256.0, 256.0]), np.array([256.0, 256.0]), table, 8.0)
    assert got.tolist() == pytest.approx([0.8, 0.4])


def test_the_run_s_gemm_shapes_are_its_local_ones():
    dense = kc.layer_gemm_shapes(_workload(tp=2))
    # debug: hidden 256, 8 heads x 32, 4 kv heads, ffn 768, vocab 256; 8 x 256 tokens
    assert dense == tuple(sorted({(2048, 256, 128), (2048, 128, 256), (2048, 256, 64), (2048, 256, 128),
                                  (2048, 256, 384), (2048, 384, 256)}))
    moe = kc.layer_gemm_shapes(_workload("debug-moe", ep=2))
    # 8 experts top-2 over ep 2: 2048 x 2 x 2 / 8 = 1024 rows an expert; expert ffn 256; one shared
    assert {(1024, 256, 256), (2048, 256, 8), (2048, 256, 768), (2048, 768, 256)} <= set(moe)


def test_gemms_round_trip_and_merge_as_running_means(tmp_path):
    a = cc.MeasuredKernels(**KERNELS, gemms=(cc.MeasuredGemm(m=64, k=32, n=32, tflops=0.2),
                                             cc.MeasuredGemm(m=64, k=32, n=32, tflops=0.1, groups=4)))
    b = cc.MeasuredKernels(**KERNELS, gemms=(cc.MeasuredGemm(m=64, k=32, n=32, tflops=0.4),))
    merged = kc.merge_kernels(a, b)
    by = {(g.m, g.groups): g.tflops for g in merged.gemms}
    assert by == {(64, 0): pytest.approx(0.3), (64, 4): 0.1}
    cal = cc.CpuCalibration(cpu_model="x", threads=1, peak_tflops={"bf16": 0.4}, memory_bandwidth_GB_per_s=10.0,
                            measured_at=datetime.now(UTC).isoformat(timespec="seconds"), kernels={"bf16": merged})
    back = cc.load_calibration(cc.save_calibration(cal, tmp_path / "c.json"), cpu_model="x", threads=1)
    assert back.kernels["bf16"].gemms == merged.gemms
    with pytest.raises(ValueError, match="groups"):
        cc.MeasuredGemm(m=1, k=1, n=1, tflops=1.0, groups=-1)
    with pytest.raises(ValueError, match="tflops"):
        cc.MeasuredGemm(m=1, k=1, n=1, tflops=0.0)


def test_the_predictor_prices_a_cpu_s_gemms_at_the_rates_measured(tmp_path, monkeypatch):
    """Twice the measured rate at every shape halves the GEMMs' seconds; the grouped experts take
    their own measured rate."""
    w = _workload("debug-moe")
    shapes = kc.layer_gemm_shapes(w)
    rows = 2048 * 2 // 8

    def gemms(rate: float, grouped: float) -> list[dict]:
        out = [{"m": m, "k": k, "n": n, "tflops": rate} for m, k, n in shapes]
        return [*out, {"m": rows, "k": 256, "n": 256, "tflops": grouped, "groups": 8}]

    _save(tmp_path, monkeypatch, gemms(0.1, 0.05))
    slow = predict(w)
    _save(tmp_path, monkeypatch, gemms(0.2, 0.05))
    fast = predict(w)
    mm, grouped = "matmul", "grouped GEMMs (routed experts)"
    # the roofline floor (operands over the memory bandwidth) holds up the router's skinny GEMMs
    assert fast.compute_breakdown[mm] == pytest.approx(slow.compute_breakdown[mm] / 2, rel=0.01)
    assert fast.compute_breakdown[grouped] == pytest.approx(slow.compute_breakdown[grouped], rel=1e-6)
    # 3 MoE layers x 3 expert matrices x (forward + 2 backward): 6 m k n FLOPs each over 8 experts
    flops = 3 * 3 * 6.0 * rows * 256 * 256 * 8
    assert slow.compute_breakdown[grouped] == pytest.approx(flops / 0.05e12, rel=0.02)


def test_the_bench_times_its_gemms_forward_and_backward():
    rates = kc.gemm_rates(((64, 32, 48),), torch.float32)
    assert len(rates) == 1 and (rates[0].m, rates[0].k, rates[0].n, rates[0].groups) == (64, 32, 48, 0)
    assert 0 < rates[0].tflops < 100
    grouped = kc.grouped_rates(_workload("debug-moe", ep=2), torch.float32)
    assert {(g.m, g.k, g.n, g.groups) for g in grouped} == {(1024, 256, 256, 4)}
    assert kc.grouped_rates(_workload(), torch.float32) == ()
    assert all(math.isfinite(g.tflops) for g in grouped)
