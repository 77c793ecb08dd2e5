"""trainperf.predict.kernels: published kernel measurements reproduced, properties, sources, fallbacks.

Real values come from the curated rows the parameters were fitted on (tools/kernel_fitting/data/*.csv),
so a changed fit or a bad interpolation shows up as a mismatch with what the source printed.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import sys
from pathlib import Path
from statistics import mean

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainperf.errors import SpecError, TrainperfError, UnknownNameError
from trainperf.predict.kernels import attention, collectives, fp8, gemm, memory_bound
from trainperf.predict.kernels import silicons as kernel_silicons
from trainperf.predict.kernels._params import params
from trainperf.specs.hardware import get_hardware, hardware_ids

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the developer tools: the kernel fit
from tools.kernel_fitting import build
from tools.kernel_fitting.common import read_rows
from tools.kernels_table import KernelFact, describe

SILICONS = kernel_silicons()
CATALOG_SILICONS = sorted({get_hardware(i).silicon for i in hardware_ids() if i != "cpu"})


def _rows(name: str, **where: str) -> list[dict[str, str]]:
    return [r for r in read_rows(name) if all(r[k] == v for k, v in where.items())]


def _combined(f: float, b: float) -> float:
    return 3.5 / (1.0 / f + 2.5 / b)


# ------------------------------------------------------------------------------- real values
def test_every_catalog_silicon_has_kernel_parameters():
    assert set(CATALOG_SILICONS) | {"cpu"} == set(SILICONS)


def test_h100_bf16_mamf_over_the_catalog_peak():
    # Stas Bekman's MAMF table: H100 SXM5 bf16 794.5 TFLOP/s; catalog h100-sxm dense bf16 989.4
    assert gemm.peak_fraction("hopper", "bf16") == pytest.approx(794.5 / 989.4, rel=1e-3)
    assert gemm.peak_fraction("hopper", "fp16") == gemm.peak_fraction("hopper", "bf16")  # fallback, same pipeline


def test_peak_fractions_average_the_measured_skus_of_a_silicon():
    # hopper fp8: H100 SXM 1402.6 and H200 SXM 1453.4 over 1978.9; cdna3 bf16: MAMF and MAF of MI300X and MI325X
    assert gemm.peak_fraction("hopper", "fp8") == pytest.approx((1402.6 + 1453.4) / 2 / 1978.9, rel=1e-3)
    mi300x, mi325x = (668.4 + 708) / 2 / 1307.4, (784.9 + 843) / 2 / 1307.4
    assert gemm.peak_fraction("cdna3", "bf16") == pytest.approx((mi300x + mi325x) / 2, rel=1e-3)
    # blackwell: B200 / B300 over 2250, GB200 over its own 2500
    assert gemm.peak_fraction("blackwell", "bf16") == pytest.approx((1745 / 2250 + 1769 / 2250 + 1822 / 2500) / 3,
                                                                    rel=1e-3)
    # no MAMF for MI355X fp8: the best hipBLASLt point (3293.2 at 16384^3) over 5033.2
    assert gemm.peak_fraction("cdna4", "fp8") == pytest.approx(3293.2 / 5033.2, rel=1e-3)


def test_grouped_gemm_fraction_is_torchaos_b200_times_over_the_dense_law():
    # torchao's torch._grouped_mm bf16 forward+backward on B200, e.g. Llama 4 Scout shapes
    # M=128000, N=8192, K=5120 in one group: 43,140.2 us for 6MNK FLOPs = 746.7 TFLOP/s
    (g1,) = [r for r in _rows("gemm", use="grouped") if r["sweep"].endswith("G1") and r["n"] == "8192"
             and r["dtype_key"] == "bf16"]
    assert float(g1["tflops"]) == pytest.approx(6 * 128000 * 8192 * 5120 / 43140.2e-6 / 1e12, rel=1e-3)
    ratios: dict[str, list[float]] = {"bf16": [], "fp8": []}
    for r in _rows("gemm", use="grouped"):
        groups, dt = int(r["sweep"].rsplit("-G", 1)[1]), r["dtype_key"]
        dense = gemm.efficiency("blackwell", dt, int(r["m"]) / groups, int(r["n"]), int(r["k"]))
        # MXFP8's times carry its dynamic quantisation: taken back to the pre-quantised kernel by
        # the recipe's GEMM factor, which the step model applies to every fp8 GEMM of a run
        quant = fp8.recipe_gemm_factor("blackwell", "mxfp8") if dt == "fp8" else 1.0
        ratios[dt].append(float(r["tflops"]) * quant / (dense * (4500.0 if dt == "fp8" else 2250.0)))
    for dt, got in ratios.items():
        assert len(got) == 8 and min(got) > 0.4 and max(got) < 0.6  # about half the dense law, in both dtypes
        assert gemm.grouped_fraction("blackwell", dt, "torch-grouped-mm") == pytest.approx(mean(got), rel=1e-3)
    # torchao's MXFP8 grouped GEMM (quantisation included) over its bf16 one: 1.2-1.8x, not the dense ratio
    assert fp8.recipe_gemm_factor("blackwell", "mxfp8") > 1.0
    # nothing measured: the dense law
    assert gemm.grouped_fraction("hopper", "bf16", "torch-grouped-mm") == 1.0
    assert gemm.grouped_fraction("hopper", "fp8", "torch-grouped-mm") == 1.0
    assert gemm.grouped_fraction("blackwell", "bf16", "te-grouped") == 1.0
    with pytest.raises(UnknownNameError):
        gemm.grouped_fraction("blackwell", "bf16", "cublas-grouped")


def test_routed_experts_run_the_stacks_grouped_gemm(monkeypatch):
    """The routed experts' GEMM time scales as 1 / grouped_fraction and nothing else does: the
    matmul time at a fraction f is t(1) + (1/f - 1) * (t(1/2) - t(1))."""
    from trainperf.predict import predict
    from trainperf.predict.step_model import kernel_physics
    from trainperf.specs.workload_file import workload_from_dict

    w = workload_from_dict({
        "model": {"preset": "llama4-scout", "layers": 2}, "hardware": {"device": "b200", "num_devices": 4},
        "parallel": {"fsdp": 4, "ep": 4},
        "training": {"seq_len": 8192, "global_batch": 32, "micro_batch": 8, "precision": "bf16",
                     "activation_checkpointing": "none", "compile": True, "stack": "torchtitan"}})
    measured = gemm.grouped_fraction("blackwell", "bf16", "torch-grouped-mm")
    p = predict(w)
    # kernel physics are cached per device and stack: uncached while the fraction is patched
    monkeypatch.setattr(kernel_physics, "_kernels", kernel_physics._kernels.__wrapped__)
    assert p.extra["kernels"]["grouped_fraction"] == measured
    times = {}
    for f in (1.0, 0.5):
        monkeypatch.setattr(kernel_physics.k_gemm, "grouped_fraction", lambda *a, f=f: f)
        cb = predict(w).compute_breakdown
        times[f] = cb["grouped GEMMs (routed experts)"]
        assert cb["matmul"] == pytest.approx(p.compute_breakdown["matmul"], rel=1e-12)  # the other GEMMs stay
    assert p.compute_breakdown["grouped GEMMs (routed experts)"] == pytest.approx(
        times[1.0] + (1 / measured - 1) * (times[0.5] - times[1.0]), rel=1e-6)
    assert times[0.5] > times[1.0]
    # a dense model has no routed experts: the fraction changes nothing
    dense = workload_from_dict({"model": {"preset": "llama3-8b"}, "hardware": {"device": "b200", "num_devices": 8},
                                "parallel": {"fsdp": 8},
                                "training": {"seq_len": 8192, "global_batch": 8, "stack": "torchtitan"}})
    monkeypatch.setattr(kernel_physics.k_gemm, "grouped_fraction", lambda *a: 1.0)
    t_dense_1 = predict(dense).step_time_s
    monkeypatch.setattr(kernel_physics.k_gemm, "grouped_fraction", lambda *a: 0.25)
    assert predict(dense).step_time_s == t_dense_1

def test_an_fp8_run_keeps_the_routed_experts_16_bit_where_the_stack_does(tmp_path):
    """torchtitan's Float8 converter swaps nn.Linear only: under fp8 its routed experts run the
    same bf16 grouped GEMMs as a bf16 run (and keep 16-bit inputs), while the dense GEMMs go fp8;
    a profile stating ``fp8_grouped_gemm = true`` (its MoE prototype) runs them in fp8, at the
    measured MXFP8 grouped rate: 1.5-2.5x the bf16 grouped GEMM, not the 4x of the fp8 dense law
    over bf16's half of it (torchao's grouped-mm tables: 1.2-1.8x)."""
    from trainperf.predict import predict
    from trainperf.predict.stacks import packaged_profile
    from trainperf.specs.workload_file import workload_from_dict

    def run(precision: str, stack: str) -> object:
        return predict(workload_from_dict({
            "model": {"preset": "llama4-scout", "layers": 2}, "hardware": {"device": "b200", "num_devices": 4},
            "parallel": {"fsdp": 4, "ep": 4},
            "training": {"seq_len": 8192, "global_batch": 32, "micro_batch": 8, "precision": precision,
                         "activation_checkpointing": "none", "compile": True, "stack": stack,
                         **({"fp8_recipe": "mxfp8"} if precision == "fp8" else {})}}))

    key = "grouped GEMMs (routed experts)"
    bf16, fp8 = run("bf16", "torchtitan"), run("fp8", "torchtitan")
    assert fp8.compute_breakdown[key] == pytest.approx(bf16.compute_breakdown[key], rel=1e-12)
    assert fp8.compute_breakdown["matmul"] < bf16.compute_breakdown["matmul"]
    prof = packaged_profile("torchtitan").with_facts("torchtitan-moe-fp8", "kernels", {"fp8_grouped_gemm": True},
                                                      {"fp8_grouped_gemm": "a test: the MoE prototype on"})
    path = tmp_path / "torchtitan-moe-fp8.toml"
    path.write_text(prof.to_toml(), encoding="utf-8")
    moe_fp8 = run("fp8", str(path))
    speedup = bf16.compute_breakdown[key] / moe_fp8.compute_breakdown[key]
    assert 1.5 < speedup < 2.5
    assert fp8.extra["kernels"]["experts_16bit"] and not moe_fp8.extra["kernels"]["experts_16bit"]


def test_gemm_shape_law_reproduces_the_large_sweep_points():
    # the Azure cuBLASLt fp8 sweeps on H100 and H200: shapes of >= 4096 within 12% once the per-call
    # overhead (5 us, charged separately) and the sweep's own plateau are accounted for
    for sku in ("h100-sxm", "h200-sxm"):
        rows = _rows("gemm", sku=sku, use="sweep")
        plateau = max(float(r["tflops"]) for r in rows) / 1978.9
        h = gemm.half_dim("hopper", "fp8")
        for r in rows:
            m, n, k = (float(r[c]) for c in "mnk")
            if min(m, n, k) < 4096:
                continue
            t = 2 * m * n * k / (plateau * 1978.9e12 * (m / (m + h)) * (n / (n + h)) * (k / (k + h))) + 5e-6
            measured = 2 * m * n * k / (float(r["tflops"]) * 1e12)
            assert t == pytest.approx(measured, rel=0.12), r["line"]


def _monotone(values: list[float]) -> bool:
    return all(b >= a for a, b in itertools.pairwise(values))


def _later_level(family: str, direction: str, causal: str) -> float:
    """MagiAttention's H100 figure (hd128, GQA, 16k) over the curve figure of the same family,
    direction and mask at 16k, hd128: the level the curves are scaled to (tools/kernel_fitting/attention.py
    ``leveled``)."""
    later = _rows("attention", silicon="hopper", family=family, direction=direction, use="extend", head_dim="128",
                  causal=causal, seq_len="16384")
    return float(later[0]["tflops"])


@pytest.mark.parametrize("family", ["fa2", "fa3"])
def test_flashattention_h100_figures_keep_their_shape_at_the_later_level(family):
    """The FA3 paper's and FA2's H100 figures give each curve's shape in length and head dim; one
    factor per direction and mask (MagiAttention's later figure at 16k, hd128, over the curve's
    value there) sets its level. So every figure, times that factor, is reproduced."""
    checked = 0
    for direction in ("fwd", "bwd"):
        groups: dict[tuple[str, str], list[dict[str, str]]] = {}
        for r in _rows("attention", silicon="hopper", family=family, direction=direction, use="curve"):
            groups.setdefault((r["head_dim"], r["causal"]), []).append(r)
        for (hd, causal), rs in groups.items():
            rs.sort(key=lambda r: int(r["seq_len"]))
            values = [float(r["tflops"]) for r in rs]
            if not _monotone(values):  # isotonic smoothing changes a dip; the property test covers it
                continue
            ref = [r for r in _rows("attention", silicon="hopper", family=family, direction=direction, use="curve",
                                    head_dim="128", causal=causal, seq_len="16384")]
            if not ref:
                continue
            level = _later_level(family, direction, causal) / float(ref[0]["tflops"])
            assert 0.9 < level < 1.1, (family, direction, causal, level)
            for r in rs:
                f, b = attention.efficiency("hopper", family, int(r["seq_len"]), int(hd), causal == "true")
                got = (f if direction == "fwd" else b) * 989.4
                assert got == pytest.approx(float(r["tflops"]) * level, rel=3e-3), r["line"]
                checked += 1
    assert checked >= 30
    # the later benchmark's figures at 16k, hd128, no mask: FA3 forward 684, FA2 373 TFLOP/s
    assert attention.efficiency("hopper", "fa3", 16384, 128, False)[0] * 989.4 == pytest.approx(684, rel=2e-3)
    assert attention.efficiency("hopper", "fa2", 16384, 128, False)[0] * 989.4 == pytest.approx(373, rel=2e-3)


@pytest.mark.parametrize("family", ["fa2", "fa3", "cudnn"])
@pytest.mark.parametrize("direction", ["fwd", "bwd"])
@pytest.mark.parametrize("causal", ["true", "false"])
def test_hopper_curves_stand_at_the_later_benchmark_level_at_16k(family, direction, causal):
    f, b = attention.efficiency("hopper", family, 16384, 128, causal == "true")
    got = (f if direction == "fwd" else b) * 989.4
    assert got == pytest.approx(_later_level(family, direction, causal), rel=2e-3)


def test_a100_fwd_bwd_figure_reproduced_by_the_split_curves():
    rows = _rows("attention", silicon="ampere", family="fa2", use="curve")
    assert len(rows) >= 20
    for r in rows:
        f, b = attention.efficiency("ampere", "fa2", int(r["seq_len"]), int(r["head_dim"]), r["causal"] == "true")
        assert _combined(f, b) * 312 == pytest.approx(float(r["tflops"]), rel=0.02), r["line"]


def test_transcribed_h100_backward_is_consistent_with_the_first_party_fwd_bwd_figure():
    # non-causal FA2 and eager: fwd (FA3 paper figure) + bwd (third-party transcription) against the
    # FA2 repository's own fwd+bwd bars (an older FA2 release): within 6%
    rows = [r for r in _rows("attention", silicon="hopper", use="check", direction="fwdbwd") if r["causal"] == "false"]
    assert len(rows) >= 20
    for r in rows:
        f, b = attention.efficiency("hopper", r["family"], int(r["seq_len"]), int(r["head_dim"]), False)
        assert _combined(f, b) * 989.4 == pytest.approx(float(r["tflops"]), rel=0.06), r["line"]


def test_blackwell_fa4_matches_the_measured_speedup_and_the_in_step_ratio():
    for seq, speedup in ((8192, 1.88), (32768, 1.95)):
        b200 = _combined(*attention.efficiency("blackwell", "fa4", seq, 128, True)) * 2250
        h200 = _combined(*attention.efficiency("hopper", "fa3", seq, 128, True)) * 989.4
        assert b200 / h200 == pytest.approx(speedup, rel=1e-3)
    in_step = {r["sku"]: float(r["tflops"]) for r in _rows("attention", use="check", seq_len="8192", head_dim="128")
               if r["family"] in ("fa3", "fa4")}
    assert in_step == {"h200-sxm": 447.0, "b200": 834.0}
    kernel_ratio = (_combined(*attention.efficiency("blackwell", "fa4", 8192, 128, True)) * 2250
                    / (_combined(*attention.efficiency("hopper", "fa3", 8192, 128, True)) * 989.4))
    assert kernel_ratio == pytest.approx(in_step["b200"] / in_step["h200-sxm"], rel=0.02)


def test_cdna_attention_is_anchored_on_the_measured_points():
    # Azure FA2 on MI300X: 328.6 TFLOP/s fwd+bwd at 8k, hd64; AITER on MI355X: 1247.4 fwd at 16k causal hd128
    f, b = attention.efficiency("cdna3", "ck", 8192, 64, False)
    assert _combined(f, b) * 1307.4 == pytest.approx(328.6, rel=2e-3)
    assert attention.efficiency("cdna4", "aiter", 16384, 128, True)[0] * 2516.6 == pytest.approx(1247.4, rel=2e-3)


def test_collective_fits_reproduce_the_large_message_sweeps():
    # nccl-tests / all_reduce_bench sweeps of the default algorithm, messages 64 MiB .. 4 GiB: within 15%
    for sweep, sil, link in (("azure-h100-sxm", "hopper", 450), ("azure-a100-sxm-80gb", "ampere", 300),
                             ("azure-mi300x", "cdna3", 448), ("stas00-b200-8gpu", "blackwell", 900)):
        rows = [r for r in _rows("collectives", sweep=sweep) if 2**26 <= float(r["size_bytes"]) <= 2**32]
        assert len(rows) >= 4
        for r in rows:
            got = collectives.busbw_fraction(sil, "scale-up", "all-reduce", float(r["size_bytes"])) * link
            assert got == pytest.approx(float(r["busbw_GBps"]), rel=0.2), (sweep, r["line"])
    # B200 across 4 nodes (EFA, 8 x 50 GB/s per node), 64 MiB .. 16 GiB
    for r in _rows("collectives", sweep="stas00-b200-4node"):
        if float(r["size_bytes"]) >= 2**26:
            got = collectives.busbw_fraction("blackwell", "scale-out", "all-reduce", float(r["size_bytes"])) * 400
            assert got == pytest.approx(float(r["busbw_GBps"]), rel=0.25), r["line"]


def test_nvls_and_ring_and_the_xgmi_mesh():
    nvls = collectives.link_params("hopper", "scale-up", "all-reduce", 8)
    ring = collectives.link_params("hopper", "scale-up", "all-reduce", 4)
    assert nvls[0] > 1.0 > ring[0]  # in-switch reduction beats the link rate that bounds a ring
    assert ring[0] * 450 == pytest.approx(367.2, rel=0.05)  # NVLS off, 8 x H200, 16 GiB
    eight = collectives.link_params("cdna3", "scale-up", "all-reduce", 8)
    two = collectives.link_params("cdna3", "scale-up", "all-reduce", 2)
    assert two[0] == pytest.approx(eight[0] / 7)  # one of seven xGMI links
    assert two[0] * 448 == pytest.approx(47.671, rel=0.15)  # measured 2-GPU MI300X all-reduce


def test_link_params_take_arrays_of_group_sizes():
    ranks = np.array([2, 4, 5, 8, 16, 64])
    for sil, level, kind in (("hopper", "scale-up", "all-reduce"), ("cdna3", "scale-up", "all-gather"),
                             ("blackwell", "scale-out", "reduce-scatter"), ("tpu-v5p", "scale-up", "send-recv")):
        arrays = collectives.link_params(sil, level, kind, ranks)
        for i, n in enumerate(ranks):
            scalar = collectives.link_params(sil, level, kind, int(n))
            assert [a[i] for a in arrays] == pytest.approx(list(scalar), rel=1e-12), (sil, level, kind, n)
    fr = collectives.busbw_fraction("hopper", "scale-out", "all-reduce", np.array([1e8, 1e9]), np.array([16, 256]))
    assert fr[1] == pytest.approx(collectives.busbw_fraction("hopper", "scale-out", "all-reduce", 1e9, 256))
    with pytest.raises(SpecError, match="ranks"):
        collectives.link_params("hopper", "scale-up", "all-reduce", np.array([1, 2]))


def test_group_size_grows_the_half_size_and_the_cross_node_latency():
    e32, h32, l32 = collectives.link_params("blackwell", "scale-out", "all-reduce")
    e256, h256, l256 = collectives.link_params("blackwell", "scale-out", "all-reduce", 256)
    assert e256 == e32 and h256 > h32 and l256 == pytest.approx(l32 * 255 / 31)
    assert collectives.link_params("blackwell", "scale-out", "all-reduce", 32) == (e32, h32, l32)


def test_hbm_and_elementwise_fractions():
    h100 = mean([2900, 2970, 3003, 3029]) / 3350  # BabelStream copy, triad; torch.clone bf16, fp32
    h200 = mean([4010, 4180]) / 4800
    assert memory_bound.hbm_fraction("hopper") == pytest.approx((h100 + h200) / 2, rel=1e-3)
    assert memory_bound.hbm_fraction("cdna3") == pytest.approx(mean([4150, 4100]) / 5300, rel=1e-3)
    for sil in ("ampere", "hopper", "cdna4"):
        assert memory_bound.elementwise_fraction(sil, "eager") < memory_bound.elementwise_fraction(sil, "fused")


def test_liger_rmsnorm_ideal_bytes_reproduce_the_fused_forward():
    # Liger RMSNorm forward, bf16, M=2048 x N=32768: 2 x 2048 x 32768 x 2 bytes (+ weight) in the stated time
    row = max((r for r in _rows("memory", kernel="rms_norm", implementation="fused", direction="fwd")),
              key=lambda r: int(r["shape"].split(";")[0][2:]))
    ideal = (2 * 2048 * 32768 + 32768) * 2
    frac = ideal / (float(row["time_ms"]) * 1e-3) / 2039e9
    kernels = params()["memory"]["elementwise"]["ampere"]["fused"]["kernels"]
    assert 0.5 < frac < 1.0
    assert kernels["rms_norm (liger)"] < frac  # its slower backward is in the kernel's combined fraction


def test_fp8_recipe_factors():
    # TE per-layer GEMM time on H200 NVL: current scaling 20.285 ms autocast / 16.785 pre-quantised
    assert fp8.recipe_gemm_factor("hopper", "tensorwise") == pytest.approx(20.285 / 16.785, rel=1e-3)
    assert fp8.recipe_gemm_factor("blackwell", "mxfp8") == pytest.approx(8.984 / 7.161, rel=1e-3)
    assert fp8.recipe_gemm_factor("hopper", "delayed") == 1.0  # 18.978 / 19.099 < 1: held at 1
    assert fp8.recipe_gemm_factor("hopper", "rowwise") > fp8.recipe_gemm_factor("hopper", "tensorwise")
    checks = {c["recipe"]: c for c in fp8.e2e_checks("hopper")}
    assert checks["tensorwise"]["speedup"] == pytest.approx(7689.5 / 6150, rel=1e-3)
    assert checks["tensorwise"]["implied_factor"] == pytest.approx(fp8.recipe_gemm_factor("hopper", "tensorwise"),
                                                                   rel=2e-3)
    assert fp8.e2e_checks("ampere") == []


# -------------------------------------------------------------------------------- properties
FAMILY_REQUESTS = st.sampled_from(attention.REQUESTS)


@settings(max_examples=300, deadline=None)
@given(sil=st.sampled_from(SILICONS), family=FAMILY_REQUESTS, seq=st.floats(16, 2e6), hd=st.floats(16, 512),
       causal=st.booleans())
def test_attention_fractions_are_bounded(sil, family, seq, hd, causal):
    f, b = attention.efficiency(sil, family, seq, hd, causal)
    assert 0 < f <= 1.2 and 0 < b <= 1.2


@settings(max_examples=200, deadline=None)
@given(sil=st.sampled_from(SILICONS), family=FAMILY_REQUESTS, hd=st.sampled_from([48, 64, 96, 128, 192, 256]),
       causal=st.booleans(), seqs=st.lists(st.floats(64, 1e6), min_size=2, max_size=8))
def test_attention_is_non_decreasing_in_seq_len_and_vectorised_equals_scalar(sil, family, hd, causal, seqs):
    seqs = sorted(seqs)
    fa, ba = attention.efficiency(sil, family, np.array(seqs), hd, causal)
    for i, s in enumerate(seqs):
        f, b = attention.efficiency(sil, family, s, hd, causal)
        assert f == pytest.approx(fa[i], rel=1e-12) and b == pytest.approx(ba[i], rel=1e-12)
    assert all(np.diff(fa) >= -1e-12) and all(np.diff(ba) >= -1e-12)


def test_long_context_is_held_flat_beyond_the_measured_range():
    at32k = attention.efficiency("hopper", "fa3", 32768, 128, True)
    assert attention.efficiency("hopper", "fa3", 262144, 128, True) == at32k
    assert attention.efficiency("hopper", "fa3", 1 << 20, 128, False) == attention.efficiency("hopper", "fa3", 32768,
                                                                                              128, False)
    arr = attention.efficiency("blackwell", "fa4", np.array([32768, 131072, 262144]), 128, True)
    assert arr[0][0] == arr[0][1] == arr[0][2]


@pytest.mark.parametrize("fam,direction,causal,r16,r32", [
    ("fa3", "fwd", True, 670, 678), ("fa3", "bwd", True, 560, 584), ("fa2", "bwd", False, 329, 334),
    ("cudnn", "bwd", True, 462, 486)])
def test_hopper_curves_reach_32k_by_the_measured_ratio(fam, direction, causal, r16, r32):
    """16k -> 32k: the FA3 paper's and the FA2 README's curves end at 16k; MagiAttention's H100
    figures (read, +/-3 TFLOP/s) measured the same kernels at 16k and 32k: the curve's 32k value is
    its 16k value times their ratio (isotonic, so never below the 16k value)."""
    i = 0 if direction == "fwd" else 1
    at16 = attention.efficiency("hopper", fam, 16384, 128, causal)[i]
    at32 = attention.efficiency("hopper", fam, 32768, 128, causal)[i]
    assert at32 == pytest.approx(max(at16, at16 * r32 / r16), rel=2e-3)  # params.json keeps 4 digits


@settings(max_examples=300, deadline=None)
@given(sil=st.sampled_from(SILICONS), dtype=st.sampled_from(gemm.DTYPES),
       dims=st.tuples(st.integers(1, 2**17), st.integers(1, 2**17), st.integers(1, 2**17)))
def test_gemm_efficiency_bounded_monotone_and_vectorised(sil, dtype, dims):
    try:
        pf = gemm.peak_fraction(sil, dtype)
    except SpecError:
        return  # dtype without a catalog peak on this silicon
    m, n, k = dims
    e = gemm.efficiency(sil, dtype, m, n, k)
    assert 0 < e <= pf <= 1.2
    assert gemm.efficiency(sil, dtype, 2 * m, n, k) >= e
    arr = gemm.efficiency(sil, dtype, np.array([m, 2 * m]), n, k)
    assert arr[0] == pytest.approx(e, rel=1e-12)


@settings(max_examples=300, deadline=None)
@given(sil=st.sampled_from(SILICONS), level=st.sampled_from(collectives.LEVELS),
       kind=st.sampled_from(collectives.KINDS), ranks=st.one_of(st.none(), st.integers(2, 4096)),
       sizes=st.lists(st.floats(1.0, 1e11), min_size=1, max_size=6))
def test_collectives_bounded_monotone_and_vectorised(sil, level, kind, ranks, sizes):
    eff, half, lat = collectives.link_params(sil, level, kind, ranks)
    assert 0 < eff <= 1.2 and half > 0 and lat >= 0
    sizes = sorted(sizes)
    arr = collectives.busbw_fraction(sil, level, kind, np.array(sizes), ranks)
    assert all(np.diff(arr) >= -1e-12)
    for s, a in zip(sizes, arr, strict=True):
        assert collectives.busbw_fraction(sil, level, kind, s, ranks) == pytest.approx(a, rel=1e-12)


@pytest.mark.parametrize("sil", SILICONS)
def test_memory_and_fp8_values_are_in_range(sil):
    assert 0 < memory_bound.hbm_fraction(sil) <= 1.2
    for impl in memory_bound.IMPLEMENTATIONS:
        assert 0 < memory_bound.elementwise_fraction(sil, impl) <= 1.2
    for recipe in fp8.RECIPES:
        with contextlib.suppress(SpecError):
            assert 1.0 <= fp8.recipe_gemm_factor(sil, recipe) < 3.0


# ------------------------------------------------------------------- families and errors
def test_resolve_family():
    assert attention.resolve_family("ampere", "fa3")[0] == "fa2"
    assert attention.resolve_family("hopper", "fa3") == ("fa3", "runs on hopper")
    assert attention.resolve_family("hopper", "sdpa")[0] == "fa2"
    assert attention.resolve_family("cdna3", "sdpa")[0] == "triton"
    assert attention.resolve_family("cdna3", "fa2")[0] == "ck"
    assert attention.resolve_family("cdna2", "aiter")[0] == "ck"
    assert attention.resolve_family("volta", "fa2")[0] == "xformers"
    assert attention.resolve_family("tpu-v5p", "fa3")[0] == "xla"
    assert attention.resolve_family("blackwell", "xla")[0] == "cudnn"
    # every request resolves, on every silicon, to a family with curves
    for sil in SILICONS:
        for fam in attention.REQUESTS:
            resolved, why = attention.resolve_family(sil, fam)
            assert resolved in attention.FAMILIES and why
            assert resolved in params()["attention"][sil], (sil, fam, resolved)


def test_bad_input_is_a_one_line_error():
    with pytest.raises(UnknownNameError, match="silicon='h100'"):
        gemm.peak_fraction("h100", "bf16")
    with pytest.raises(SpecError, match="no catalog SKU of silicon 'ampere' has a fp8 peak"):
        gemm.peak_fraction("ampere", "fp8")
    with pytest.raises(UnknownNameError, match="attention family"):
        attention.efficiency("hopper", "flash", 4096, 128, True)
    with pytest.raises(SpecError, match="no MX-format"):
        fp8.recipe_gemm_factor("hopper", "mxfp8")
    with pytest.raises(SpecError, match="no fp8"):
        fp8.recipe_gemm_factor("ampere", "tensorwise")
    with pytest.raises(SpecError, match="ranks"):
        collectives.link_params("hopper", "scale-up", "all-reduce", 1)
    with pytest.raises(UnknownNameError, match="level"):
        collectives.link_params("hopper", "intra-node", "all-reduce")
    with pytest.raises(SpecError, match="seq_len"):
        attention.efficiency("hopper", "fa3", 0, 128, True)
    with pytest.raises(SpecError, match="gemm shape"):
        gemm.efficiency("hopper", "bf16", 0, 1, 1)
    with pytest.raises(UnknownNameError, match="implementation"):
        memory_bound.elementwise_fraction("hopper", "jit")
    for call in (lambda: gemm.peak_fraction("ampere", "fp8"), lambda: gemm.half_dim("h100", "bf16")):
        with pytest.raises(TrainperfError) as info:
            call()
        assert "\n" not in str(info.value)


# ------------------------------------------------------------------------- sources, fallbacks
@pytest.mark.parametrize("sil", SILICONS)
def test_every_number_has_a_source_and_fallbacks_say_so(sil):
    facts = describe(sil)
    assert facts and all(isinstance(f, KernelFact) for f in facts)
    for f in facts:
        assert f.silicon == sil and math.isfinite(f.value) and len(f.source) > 20, f
        if not f.measured:
            # a fallback states its rule first: "no <what> measurement: <what is used instead>", or
            # "derived: <how>" for a value computed from other measurements by a stated relation
            assert f.source.startswith(("no ", "derived")), f


def test_silicons_without_measurements_are_all_flagged():
    for sil in ("volta", "ada", "cdna2", "tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "cpu"):
        assert not any(f.measured for f in describe(sil)), sil
    gaudi = [f for f in describe("gaudi2") if f.measured]
    assert {f.quantity for f in gaudi} == {"peak_fraction[bf16]", "peak_fraction[fp8]"}  # MAMF only
    cdna2 = {f.quantity: f for f in describe("cdna2")}
    assert "cdna3" in cdna2["peak_fraction[bf16]"].source and not cdna2["peak_fraction[bf16]"].measured
    tpu = {f.quantity: f for f in describe("tpu-v5p")}
    assert "fallbacks.toml" in tpu["peak_fraction[bf16]"].source


def test_measured_facts_cite_a_curated_row():
    for sil in ("ampere", "hopper", "blackwell", "cdna3", "cdna4"):
        measured = [f for f in describe(sil) if f.measured]
        assert measured
        assert all("[kernels/" in f.source for f in measured), [f for f in measured if "[kernels/" not in f.source][:1]


@pytest.mark.parametrize("name", ["gemm", "attention", "collectives", "memory", "fp8"])
def test_every_curated_row_has_its_source(name):
    rows = read_rows(name)
    assert rows
    for r in rows:
        assert r["source"] and r["where"] and r["file"] and r["line"].isdigit() and r["silicon"] in SILICONS, r


def test_the_parameters_file_is_current():
    """params.json must be what ``python -m tools.kernel_fitting.build`` writes from the curated CSVs."""
    assert build.params_path().read_text(encoding="utf-8") == build.dumps(build.build())
