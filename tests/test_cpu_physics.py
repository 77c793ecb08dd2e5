"""This CPU's own kernel physics: measured by the bench into the calibration cache, used by the
predictor for CPU workloads (issue 29, item 1)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainperf.predict.kernels import cpu as k_cpu
from trainperf.predict.step import predict
from trainperf.predict.step_model import attention as step_attention
from trainperf.predict.step_model.compute import elementwise_bytes_per_token, exposed_launch_s
from trainperf.specs import cpu_calibration as cc
from trainperf.specs.presets import get_model
from trainperf.specs.workload_file import workload_from_dict

PEAK = {"fp32": 0.1, "bf16": 0.4}
KERNELS = {"elementwise_GB_per_s": 20.0, "op_overhead_us": 10.0, "ops_per_layer": 180.0, "fsdp_module_us": 900.0,
           "tp_module_us": 1500.0, "optimizer_GB_per_s": 17.0,
           "attention": [{"seq": 256, "head_dim": 32, "causal": True, "fwd_fraction": 0.3, "bwd_fraction": 0.15},
                         {"seq": 1024, "head_dim": 32, "causal": True, "fwd_fraction": 0.5, "bwd_fraction": 0.25}]}
GLOO = {"bf16": {"all-reduce": {"ranks": 2, "latency_us": 200.0, "busbw_GB_per_s": 1.0},
                 "all-gather": {"ranks": 2, "latency_us": 150.0, "busbw_GB_per_s": 0.8}}}


def _calibration(threads: int, **fields) -> cc.CpuCalibration:
    return cc.CpuCalibration(cpu_model=cc.cpu_model_name(), threads=threads, peak_tflops=dict(PEAK),
                             memory_bandwidth_GB_per_s=10.0, measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
                             **fields)


@pytest.fixture
def measured(tmp_path, monkeypatch):
    """A cache holding measured kernels for every thread count a 1- or 2-process run may get."""
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path))
    for threads in {cc.threads_per_process(1), cc.threads_per_process(2)}:
        cc.save_calibration(_calibration(threads, kernels={"bf16": KERNELS, "fp32": KERNELS}, collectives=GLOO))
    return tmp_path


def _workload(nproc: int = 1, **parallel):
    return workload_from_dict({
        "model": {"preset": "debug"},
        "hardware": {"device": "cpu", "num_devices": nproc, "devices_per_node": nproc, "peak_tflops": 0.4},
        "parallel": parallel,
        "training": {"seq_len": 256, "micro_batch": 8, "global_batch": 8 * nproc, "precision": "bf16"}})


def test_measured_records_round_trip_through_the_cache(tmp_path):
    cal = _calibration(2, kernels={"bf16": KERNELS}, collectives=GLOO)
    path = cc.save_calibration(cal, tmp_path / "c.json")
    back = cc.load_calibration(path, threads=2)
    assert back == cal
    assert back.kernels["bf16"].attention[1].seq == 1024
    assert back.collectives["bf16"]["all-reduce"].busbw_GB_per_s == 1.0


@pytest.mark.parametrize(("table", "value"), [("kernels", {"bf16": {**KERNELS, "op_overhead_us": -1}}),
                                              ("collectives", {"bf16": {"all-reduce": {
                                                  "ranks": 2, "latency_us": 1e300, "busbw_GB_per_s": 1}}}),
                                              ("collectives", {"bf16": {"all-reduce": {
                                                  "ranks": 2, "latency_us": 9, "busbw_GB_per_s": 1,
                                                  "sync_wait_us": -5}}}),
                                              ("collectives", {"bf16": {"all-reduce": {
                                                  "ranks": 2, "latency_us": 9, "busbw_GB_per_s": 1,
                                                  "sync_wait_us": True}}})])
def test_a_measurement_out_of_bounds_is_refused(table, value):
    with pytest.raises(ValueError, match=r"op_overhead_us|latency_us|sync_wait_us"):
        _calibration(1, **{table: value})


def test_the_ranks_drift_adds_to_every_collective_in_a_step(measured, monkeypatch):
    """The wait measured once for the ranks' drift (``sync_wait_us``) lengthens every call of
    every kind by as much: the DP gradient sync of two processes by its buckets x 300 us; a cache
    without it (written before the field) prices none."""
    w = _workload(2, dp=2)
    before = predict(w).breakdown["dp grad sync (exposed)"]
    for threads in {cc.threads_per_process(1), cc.threads_per_process(2)}:
        drift = {"bf16": {k: {**v, "averaged": True, "sync_wait_us": 300.0} for k, v in GLOO["bf16"].items()}}
        cc.save_calibration(_calibration(threads, kernels={"bf16": KERNELS, "fp32": KERNELS}, collectives=drift))
    phys = k_cpu.physics(w)
    assert {k: v[2] for k, v in phys.link.by_kind.items() if k in GLOO["bf16"]} == {"all-reduce": 500.0,
                                                                                    "all-gather": 450.0}
    after = predict(w).breakdown["dp grad sync (exposed)"]
    buckets = (before - 4.0 * w.model.total_params / 1e9) / 200e-6
    assert after - before == pytest.approx(round(buckets) * 300e-6, rel=1e-6)


def test_the_drift_probe_runs_and_waits_for_no_one_alone(tmp_path, monkeypatch):
    """One process (a 1-rank group): the probe runs its blocks and finds no wait (clamped at 0,
    never negative); every kind carries the one figure (a bus factor of 1 for the test: one rank
    moves no bus bytes)."""
    pytest.importorskip("torch")
    import torch
    import torch.distributed as dist

    from trainperf.measure import collective_calibration as coll
    from trainperf.measure.collective_calibration import measure_collectives, sync_wait_s

    monkeypatch.setattr(coll, "BUS_VOLUME", {k: (lambda n: 1.0) for k in coll.BUS_VOLUME})

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        assert 0.0 <= sync_wait_s(torch.float32) < 1.0  # timing noise only: a busy test machine
        # the arithmetic, on set block times (compute alone, the all-gather's burst, both): the
        # mean of each block's joint time less the other two, a block below 0 included
        blocks = [(5e-3, 1e-4, 5.4e-3)] * (coll.DRIFT_BLOCKS - 1) + [(5e-3, 1e-4, 4.0e-3)]
        times = iter([t for b in blocks for t in b] * 2)
        monkeypatch.setattr(coll, "_block_s", lambda fn, group: next(times))
        want = ((coll.DRIFT_BLOCKS - 1) * 3e-4 - 1.1e-3) / coll.DRIFT_BLOCKS
        assert sync_wait_s(torch.float32) == pytest.approx(max(0.0, want), rel=1e-9)
        got = measure_collectives(torch.float32)
        assert len({m.sync_wait_us for m in got.values()}) == 1 and "all-gather" in got
    finally:
        dist.destroy_process_group()


def test_measured_attention_prices_the_core(measured):
    """fwd = flops / (fraction x peak), backward 2.5x the flops at the backward fraction: the
    measured point at 256 tokens, hand-derived."""
    w = _workload()
    from trainperf.predict.step import resolve_knobs
    from trainperf.predict.step_model.layout import layout_of

    lay = layout_of(w, 1.0)
    times = step_attention.attention_times(lay, resolve_knobs(w).numbers(), lay.kernels.cp_flavour)
    m = get_model("debug")
    flops = 4.0 * 8 * m.heads * m.head_dim * 256 * 257 / 2
    assert times.fwd == pytest.approx(flops / (0.3 * 0.4e12), rel=1e-9)
    assert times.bwd == pytest.approx(2.5 * flops / (0.15 * 0.4e12), rel=1e-9)


def test_cpu_knobs_are_shares_of_one_with_nothing_overlapped(measured):
    p = predict(_workload())
    k = p.knobs
    assert (k.matmul_fraction, k.attention_fraction, k.memory_bound_fraction, k.link_fraction) == (1, 1, 1, 1)
    assert k.overlap == 0.0 and k.op_overhead_us == 10.0
    assert "measured by the bench" in k.sources["op_overhead_us"]


def test_operator_overhead_adds_on_a_cpu():
    assert exposed_launch_s(1.0, 0.2, host_bound=True) == 0.2
    assert exposed_launch_s(1.0, 0.2) == pytest.approx((1.0 + 0.2**3) ** (1 / 3) - 1.0)  # a GPU: mostly hidden


def test_gloo_all_reduce_is_latency_plus_bytes_over_bus_bandwidth(measured):
    """Two processes' DP gradient all-reduce of 4-byte gradients in buckets: each bucket 200 us,
    plus all bytes at 1 GB/s (bus factor 2(n-1)/n = 1), all of it exposed (overlap 0)."""
    w = _workload(2, dp=2)
    p = predict(w)
    bytes_s = 4.0 * w.model.total_params / 1e9
    got = p.breakdown["dp grad sync (exposed)"]
    buckets = (got - bytes_s) / 200e-6
    assert p.knobs.overlap == 0.0
    assert buckets >= 1 and buckets == pytest.approx(round(buckets), abs=1e-6)


def test_the_link_level_reproduces_the_fit(measured):
    phys = k_cpu.physics(_workload(2, dp=2))
    eff, half, lat = phys.link.by_kind["all-gather"]
    link = 5.0e9
    size = 3e6
    bus = 0.5 * size
    assert 0.5 * (size + half) / (link * eff) == pytest.approx(150e-6 + bus / 0.8e9, rel=1e-12)
    assert lat == 150.0


def test_elementwise_bytes_agree_with_the_step_model():
    torch = pytest.importorskip("torch")
    from trainperf.measure import kernel_calibration as kc

    m = get_model("debug")
    want = elementwise_bytes_per_token(m.hidden, m.heads * m.head_dim, m.kv_heads * m.head_dim, m.ffn_hidden,
                                       True, 2.0, True)
    assert kc.elementwise_bytes(100, m, 2) == pytest.approx(100 * want, rel=1e-12)
    assert kc.FLASH_BACKWARD_FACTOR == step_attention.FLASH_BACKWARD_FACTOR
    assert torch is not None


@given(lat=st.floats(1e-5, 1e-2), bw=st.floats(1e8, 1e11))
def test_alpha_beta_reads_a_line_and_never_exceeds_the_largest_transfer(lat, bw):
    """On an exact line: the latency is the 16 KB time (its bytes add <= 16 us / 1e-4 relative
    at these rates) and the bandwidth exact where the 4 MB transfer dominates its time; always
    no faster than the largest size's bytes over its time beyond the latency, and positive."""
    pytest.importorskip("torch")
    from trainperf.measure.collective_calibration import alpha_beta

    xs = [16e3, 512e3, 4e6]
    ts = [lat + x / bw for x in xs]
    got_lat, got_bw = alpha_beta(xs, ts)
    assert got_lat == ts[0] and got_bw > 0
    if ts[-1] - ts[0] >= 0.5 * ts[-1]:
        assert got_bw == pytest.approx(xs[-1] / (ts[-1] - ts[0]), rel=1e-12)
    else:
        assert got_bw == pytest.approx(xs[-1] / ts[-1], rel=1e-12)


def test_the_cache_keeps_a_running_mean_of_measurements():
    """Each figure is the mean of the runs that measured it (no ratchet towards the fastest of
    many noisy runs, and no figure left at the last run's noise), each counted by its own runs."""
    pytest.importorskip("torch")
    from trainperf.measure.kernel_calibration import merge_collectives, merge_kernels

    slow = cc.MeasuredKernels(10.0, 20.0, 180.0, ({"seq": 256, "head_dim": 32, "causal": True,
                                                   "fwd_fraction": 0.1, "bwd_fraction": 0.2},), tp_module_us=800.0)
    fast = dataclasses.replace(slow, elementwise_GB_per_s=30.0, op_overhead_us=5.0, attention=(
        cc.MeasuredAttention(256, 32, True, 0.3, 0.1), cc.MeasuredAttention(512, 32, True, 0.4, 0.2)),
        tp_module_us=None, fsdp_module_us=600.0, optimizer_GB_per_s=40.0)
    got = merge_kernels(slow, fast)
    assert (got.elementwise_GB_per_s, got.op_overhead_us, got.samples) == (20.0, 12.5, 2)
    assert (got.tp_module_us, got.fsdp_module_us, got.optimizer_GB_per_s) == (800.0, 600.0, 40.0)
    assert (got.tp_module_samples, got.fsdp_module_samples) == (1, 1)
    # a third run weighs a third: (20 + 20 + 50) / 3
    third = merge_kernels(got, dataclasses.replace(fast, elementwise_GB_per_s=50.0, fsdp_module_us=300.0))
    assert (third.elementwise_GB_per_s, third.fsdp_module_us, third.fsdp_module_samples) == (30.0, 450.0, 2)
    assert {(a.seq, a.fwd_fraction, a.bwd_fraction, a.samples) for a in got.attention} == {
        (256, 0.2, 0.15, 2), (512, 0.4, 0.2, 1)}
    a = {"all-reduce": cc.MeasuredCollective(2, 100.0, 1.0, averaged=True)}
    b = {"all-reduce": cc.MeasuredCollective(2, 300.0, 2.0, averaged=True)}
    assert merge_collectives(a, b)["all-reduce"] == cc.MeasuredCollective(2, 200.0, 1.5, averaged=True, samples=2)
    # the drift wait: a running mean too; one never measured takes the new one
    drift = {k: dataclasses.replace(v, sync_wait_us=400.0) for k, v in b.items()}
    assert merge_collectives(a, drift)["all-reduce"].sync_wait_us == 400.0
    assert merge_collectives(drift, {"all-reduce": dataclasses.replace(b["all-reduce"], sync_wait_us=200.0)}
                             )["all-reduce"].sync_wait_us == 300.0
    # a measurement of bursts replaces one of single calls, and is not replaced by one
    single = {"all-reduce": cc.MeasuredCollective(2, 50.0, 5.0)}
    assert merge_collectives(single, b)["all-reduce"] == b["all-reduce"]
    assert merge_collectives(b, single)["all-reduce"] == b["all-reduce"]
    four = {"all-reduce": cc.MeasuredCollective(4, 500.0, 0.5, averaged=True)}
    assert merge_collectives(b, four)["all-reduce"] == four["all-reduce"]


def test_the_running_mean_settles_on_the_runs_mean_and_then_follows_the_machine():
    """Alternating noisy runs (a 3x range, as gloo's latency on a 2-core host) settle on their
    mean, not on the last ones; past :data:`WINDOW` runs each new one weighs 1/WINDOW, so that
    a machine that got slower is followed."""
    pytest.importorskip("torch")
    from trainperf.measure.kernel_calibration import WINDOW, merge_collectives

    def run(latency_us: float) -> dict[str, cc.MeasuredCollective]:
        return {"all-gather": cc.MeasuredCollective(2, latency_us, 1.0, averaged=True, sync_wait_us=latency_us)}

    cache = run(300.0)
    for k in range(1, WINDOW):
        cache = merge_collectives(cache, run(900.0 if k % 2 else 300.0))
    got = cache["all-gather"]
    assert got.samples == WINDOW and got.latency_us == pytest.approx(600.0, abs=1e-3)
    assert got.sync_wait_us == pytest.approx(600.0, abs=1e-3)
    slower = merge_collectives(cache, run(1400.0))["all-gather"]
    assert slower.latency_us == pytest.approx(600.0 + 800.0 / WINDOW, abs=1e-3) and slower.samples == WINDOW + 1


def test_without_measurements_the_fallbacks_stand(tmp_path, monkeypatch):
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path))
    assert k_cpu.physics(_workload()) is None
    assert predict(_workload()).step_time_s > 0


def test_the_cache_file_written_is_json_with_the_new_tables(measured):
    data = json.loads((measured / cc.CACHE_FILE).read_text())
    entry = next(iter(data["entries"].values()))
    assert set(entry["kernels"]) == {"bf16", "fp32"} and "all-reduce" in entry["collectives"]["bf16"]


def test_lora_adapters_are_priced_as_skinny_gemms(measured):
    """A rank-8 adapter on each of a layer's seven matrices: A (m x in x 8) and B (m x 8 x out) at
    the shape law, forward once and backward twice (both gradients train): the matmul class
    grows by exactly 3 x that per layer and micro-batch over the same run without adapters."""
    from trainperf.predict.step_model.compute import gemm_speed
    from trainperf.predict.step_model.layout import layout_of
    from trainperf.specs.lora import LoraSpec

    plain = _workload()
    lora = plain.replace(lora=LoraSpec(rank=8))
    frac = lora.lora.trainable_fraction(lora.model)
    lay = layout_of(lora, frac)
    g = gemm_speed(lay, predict(lora).knobs.numbers())
    m_tok = 8 * 256
    want = sum(g.time_s(m_tok, 8, i) + g.time_s(m_tok, o, 8) for i, o in lora.lora.matrices(lora.model).values())
    with_ad = predict(lora).compute_breakdown["matmul"]
    without = predict(plain, trainable_fraction=frac).compute_breakdown["matmul"]
    assert len(lay.run.adapters) == 7
    assert with_ad - without == pytest.approx(3 * want * lora.model.layers, rel=1e-9)


def test_fsdp_copies_on_a_cpu_are_counted_from_fsdp2(measured):
    """Two-way FSDP in bf16: a gather pass moves 7 bytes per parameter of the stage (the fp32
    shard cast to bf16, 6/2; the gathered buffer copied out, 2 x 2), a reduce-scatter pass 14 (the
    bf16 gradients cast up, 6; the divide and the add into the fp32 shard, 16/2), at the measured
    elementwise 20 GB/s; and a third each of FSDP2's measured 900 us per module and step, for the
    layers and the root."""
    from trainperf.predict.step import resolve_knobs
    from trainperf.predict.step_model.collectives import fabric_of
    from trainperf.predict.step_model.data_parallel import _sharded, host_copies_s
    from trainperf.predict.step_model.layout import layout_of
    from trainperf.predict.step_model.stage import busiest_stage

    w = _workload(2, fsdp=2)
    lay, kn = layout_of(w, 1.0), resolve_knobs(w).numbers()
    st = busiest_stage(lay)
    ag, rs = host_copies_s(lay, st, kn, _sharded(lay, st, fabric_of(lay, kn.link_fraction)))
    hooks = (w.model.layers + 1) * 900e-6 / 3
    assert ag == pytest.approx(7.0 * st.p_stage / 20e9 + hooks, rel=1e-9)
    assert rs == pytest.approx(14.0 * st.p_stage / 20e9 + hooks, rel=1e-9)


def test_data_parallel_replicas_pay_fsdp2_s_copies_and_per_block_all_reduces_on_a_cpu(measured):
    """The bench runs dp = 2 as FSDP2 over replicas (one shard): per micro-batch, a gather pass of
    10 bytes per parameter (the fp32 parameters cast to bf16, 4 + 2; the buffer copied out, 2 x 2)
    and a reduce pass of 22 (the bf16 gradients cast up, 6; the divide and the add into the fp32
    gradient, 16) at the measured elementwise 20 GB/s, with two thirds of FSDP2's 900 us per module;
    and one gradient all-reduce per block and the root, every micro-batch. DDP (the generic stack)
    pays neither: one bucketed all-reduce a step."""
    from trainperf.predict.step import resolve_knobs
    from trainperf.predict.step_model.collectives import fabric_of
    from trainperf.predict.step_model.data_parallel import (
        DDP_BUCKETS,
        GRAD_REDUCE_BYTES,
        DataParallel,
        data_parallel,
        replica_copies_s,
    )
    from trainperf.predict.step_model.layout import layout_of
    from trainperf.predict.step_model.stage import busiest_stage
    from trainperf.predict.step_model.step import step_costs

    def sync_of(stack: str) -> tuple[float, float, float, float, float]:
        w = workload_from_dict({
            "model": {"preset": "debug"},
            "hardware": {"device": "cpu", "num_devices": 2, "devices_per_node": 2, "peak_tflops": 0.4},
            "parallel": {"dp": 2},
            "training": {"seq_len": 256, "micro_batch": 8, "global_batch": 32, "precision": "bf16", "stack": stack}})
        lay, kn = layout_of(w, 1.0), resolve_knobs(w).numbers()
        st = busiest_stage(lay)
        fab = fabric_of(lay, kn.link_fraction)
        dp: DataParallel = data_parallel(lay, st, kn, fab, step_costs(lay, kn).compute)
        group = dp.grad_sync.group
        grad = st.p_stage * GRAD_REDUCE_BYTES
        return (float(dp.grad_sync.time_s), float(replica_copies_s(lay, st, kn)), float(st.p_stage),
                float(fab.time_s("all-reduce", grad, group, st.layers + 1.0)),
                float(fab.time_s("all-reduce", grad, group, min(st.layers, DDP_BUCKETS))))

    sync, copies, p, per_block, _ = sync_of("trainperf-bench")
    hooks = (get_model("debug").layers + 1) * 900e-6 / 3
    assert copies == pytest.approx(32.0 * p / 20e9 + 2 * hooks, rel=1e-9)
    assert sync == pytest.approx(2 * (per_block + copies), rel=1e-9)  # two micro-batches
    ddp_sync, ddp_copies, _, _, bucketed = sync_of("generic")
    assert ddp_copies == 0.0
    assert ddp_sync == pytest.approx(bucketed, rel=1e-9)  # once a step, in min(layers, 8) buckets


def test_a_cp_bench_run_records_the_sharding_it_runs():
    """The bench shards parameters over the cp ranks (FSDP2 over dp_shard x cp, as torchtitan):
    with no fsdp or dp degree its workload says ZeRO-3 over dp x cp, so `predict` prices gathers
    and reduce-scatters, not a DDP all-reduce; a plan with an fsdp degree is left as stated."""
    pytest.importorskip("torch")
    from trainperf.measure.parallelize import as_run

    stated = _workload(2, cp=2)
    cp = as_run(stated)
    assert cp.plan.zero_stage == 3 and cp.plan.shards_params == 2
    assert {"fsdp all-gather (exposed)", "fsdp reduce-scatter (exposed)"} <= set(predict(cp).breakdown)
    assert "dp grad sync (exposed)" in predict(stated).breakdown
    fsdp = _workload(2, fsdp=2)
    assert as_run(fsdp).plan == fsdp.plan and as_run(fsdp).stack == "trainperf-bench"


def test_dtensor_host_time_adds_per_tensor_parallel_module(measured):
    """TP over 2 processes with sequence parallelism on the debug model (4 gated layers): per
    layer four attention Linears, three MLP Linears and two norms, plus the embedding, the final
    norm and the head: 39 modules at the measured 1.5 ms each (forward and backward), added
    to the TP collectives' time and exposed in full; without sequence parallelism the norms are
    not DTensor modules (30)."""
    from trainperf.predict.step_model.layout import layout_of
    from trainperf.predict.step_model.tensor_parallel import host_s

    elements = 8 * 256 * 256
    for sp, modules in ((True, 39), (False, 30)):
        w = _workload(2, tp=2, sequence_parallel=sp)
        assert host_s(layout_of(w, 1.0), w.model.layers, elements) == pytest.approx(modules * 1.5e-3, rel=1e-12)
        with_host = predict(w).breakdown["tp comm"]
        assert with_host > modules * 1.5e-3
    gpu = workload_from_dict({"model": {"preset": "debug"}, "hardware": {"device": "h100-sxm", "num_devices": 2},
                              "parallel": {"tp": 2}, "training": {"seq_len": 256, "global_batch": 8}})
    assert host_s(layout_of(gpu, 1.0), gpu.model.layers, elements) == 0.0


def test_dtensor_host_time_grows_with_the_activation_where_measured(tmp_path, monkeypatch):
    """Where the cache holds the part of DTensor's host time that grows with the activation
    (2 ns per element of the rank's [8 x 256, 256] micro-batch), each of the 39 modules adds it
    to the fixed 1.5 ms, and the sequence-parallel copies, which that measurement includes, are
    not priced again from the elementwise rate."""
    from trainperf.predict.step import resolve_knobs
    from trainperf.predict.step_model.layout import layout_of
    from trainperf.predict.step_model.stage import busiest_stage
    from trainperf.predict.step_model.tensor_parallel import host_s, sequence_copies_s

    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path))
    kernels = {**KERNELS, "tp_module_ns_per_element": 2.0}
    cc.save_calibration(_calibration(cc.threads_per_process(2), kernels={"bf16": kernels}, collectives=GLOO))
    w = _workload(2, tp=2, sequence_parallel=True)
    lay, kn = layout_of(w, 1.0), resolve_knobs(w).numbers()
    elements = 8 * 256 * 256
    assert host_s(lay, w.model.layers, elements) == pytest.approx(39 * (1.5e-3 + 2e-9 * elements), rel=1e-12)
    assert sequence_copies_s(lay, kn, 18.0, busiest_stage(lay).tp_buf) == 0.0


def test_sequence_parallel_norm_gradients_are_all_reduced_one_by_one_on_a_cpu(measured):
    """Under sequence parallelism each norm's weight gradient (256 fp32 values) is a partial sum
    per rank, all-reduced on its own: 2 per layer and the final norm, 9 for the debug model, at
    gloo's measured 200 us + 2 (n-1)/n x 1 KiB / 1 GB/s each; none without sequence parallelism
    or on a GPU."""
    from trainperf.predict.step import resolve_knobs
    from trainperf.predict.step_model import step_costs
    from trainperf.predict.step_model.collectives import fabric_of
    from trainperf.predict.step_model.layout import layout_of
    from trainperf.predict.step_model.tensor_parallel import norm_grads_s

    for sp, count in ((True, 9), (False, 0)):
        w = _workload(2, tp=2, sequence_parallel=sp)
        lay = layout_of(w, 1.0)
        fab = fabric_of(lay, resolve_knobs(w).numbers().link_fraction)
        got = norm_grads_s(lay, fab, fab.group(lay.mesh.tp, 1.0), w.model.layers)
        assert got == pytest.approx(count * (200e-6 + 1024 / 1e9), rel=1e-6)
        # once a step, after the micro-batches: in the step time, not only in the breakdown
        costs = step_costs(lay, resolve_knobs(w).numbers())
        assert costs.tp.exposed_step_s == pytest.approx(got, rel=1e-12)
        assert costs.step_time_s == pytest.approx(costs.grad_accum * costs.microbatch_s + costs.optimizer_s
                                                  + costs.tp.exposed_step_s, rel=1e-12)


def test_tp_probe_measures_dtensor_host_time(tmp_path):
    """The probe runs (one process: a 1-rank mesh, no collectives) and returns at least 1 us."""
    pytest.importorskip("torch")
    import torch
    import torch.distributed as dist

    from trainperf.measure.collective_calibration import tp_host_cost

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        got = tp_host_cost(get_model("debug"), 1, True, torch.bfloat16, batch=2, seq=64)
        assert got.module_us >= 1.0 and got.ns_per_element >= 0.0
    finally:
        dist.destroy_process_group()


def test_fsdp_probe_measures_fsdp2_host_time_on_a_one_rank_mesh(tmp_path):
    """The FSDP2 probe shards over each rank's own one-rank mesh (no transfer between ranks to
    subtract) and returns FSDP2's host time per module: at least 1 us, and below 100 ms."""
    pytest.importorskip("torch")
    import torch
    import torch.distributed as dist

    from trainperf.measure.collective_calibration import fsdp_module_us

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        assert 1.0 <= fsdp_module_us(torch.bfloat16) < 1e5
    finally:
        dist.destroy_process_group()


def test_partial_gradients_are_reduced_once_before_the_norm(tmp_path):
    """A sequence-parallel norm's weight gradient arrives as a partial sum: it is made whole
    once, in place (the gradient norm and the optimizer then read the same tensor), and a whole
    one is left alone."""
    pytest.importorskip("torch")
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate

    from trainperf.measure.trainer import reduce_partial_grads

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        p = torch.nn.Parameter(DTensor.from_local(torch.ones(4), mesh, [Replicate()]))
        p.grad = DTensor.from_local(torch.full((4,), 2.0), mesh, [Partial()])
        assert reduce_partial_grads([p]) == 1
        assert p.grad.placements == (Replicate(),) and p.grad.to_local().tolist() == [2.0] * 4
        assert reduce_partial_grads([p]) == 0
    finally:
        dist.destroy_process_group()


def test_dtensor_copies_around_sequence_parallel_collectives_on_a_cpu(measured):
    """TP 2 with sequence parallelism, micro-batch 8: each of 18 region passes (4 layers x
    attention and MLP x forward and backward, and the embedding and head forward and backward)
    copies its gathered and its reduce-scattered 1 MiB buffers (bf16 [8, 256, 256]), read and
    written once: 4 MiB at the measured elementwise 20 GB/s; none without sequence parallelism.
    The trainperf-bench stack's autocast residual doubles the input side's (fp32)."""
    from trainperf.predict.step import resolve_knobs
    from trainperf.predict.step_model.layout import layout_of
    from trainperf.predict.step_model.stage import busiest_stage
    from trainperf.predict.step_model.tensor_parallel import sequence_copies_s

    for sp, stack, per_pass in ((True, "generic", 4.0), (False, "generic", 0.0), (True, "trainperf-bench", 6.0)):
        w = _workload(2, tp=2, sequence_parallel=sp).replace(stack=stack)
        lay, kn = layout_of(w, 1.0), resolve_knobs(w).numbers()
        buf = busiest_stage(lay).tp_buf
        assert buf == 8 * 256 * 256 * 2
        got = sequence_copies_s(lay, kn, 18.0, buf)
        assert got == pytest.approx(18 * per_pass * buf / 20e9, rel=1e-9)


def test_per_layer_figures_are_kept_and_read_by_model_width(tmp_path, monkeypatch):
    """A wider model's block costs more per operator at a few tokens: the cache keeps each
    width's figures apart (running mean per width) and the predictor reads the nearest width's,
    so a run of the 100M model does not move the debug model's prediction."""
    pytest.importorskip("torch")
    from trainperf.measure.kernel_calibration import merge_kernels

    narrow = cc.MeasuredKernels(10.0, 10.0, 180.0, widths=(cc.MeasuredWidth(256, 10.0, 10.0, 180.0),))
    wide = cc.MeasuredKernels(20.0, 40.0, 170.0, widths=(cc.MeasuredWidth(768, 20.0, 40.0, 170.0),))
    again = cc.MeasuredKernels(10.0, 6.0, 180.0, widths=(cc.MeasuredWidth(256, 10.0, 6.0, 180.0),))
    got = merge_kernels(merge_kernels(narrow, wide), again)
    def figures(w: cc.MeasuredWidth) -> tuple[float, float, float]:
        return w.elementwise_GB_per_s, w.op_overhead_us, w.ops_per_layer

    assert figures(got.at_width(256)) == (10.0, 8.0, 180.0)
    assert figures(got.at_width(1024)) == (20.0, 40.0, 170.0)
    assert figures(got.at_width(300)) == (10.0, 8.0, 180.0)
    assert figures(cc.MeasuredKernels(5.0, 7.0, 100.0).at_width(256)) == (5.0, 7.0, 100.0)
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path))
    for threads in {cc.threads_per_process(1), cc.threads_per_process(2)}:
        cc.save_calibration(_calibration(threads, kernels={"bf16": got}, collectives=GLOO))
    assert k_cpu.physics(_workload()).op_overhead_us == 8.0  # the debug model is 256 wide


def test_an_moe_block_s_operators_are_counted_and_priced_on_a_cpu(tmp_path, monkeypatch):
    """The debug-moe preset's MoE block runs more operators than a dense block (routing,
    permutation, the experts' grouped GEMMs): counted, and on a CPU every one costs the measured
    host time, forward and backward, in place of the dense count and the GPU's extra kernels."""
    pytest.importorskip("torch")
    import torch

    from trainperf.measure.kernel_calibration import moe_layer_ops

    moe = get_model("debug-moe")
    counted = moe_layer_ops(moe, torch.bfloat16)
    assert counted is not None and counted > 256 and moe_layer_ops(get_model("debug"), torch.bfloat16) is None
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path))
    w = workload_from_dict({"model": {"preset": "debug-moe"}, "hardware": {"device": "cpu", "num_devices": 1,
                            "peak_tflops": 0.4}, "training": {"seq_len": 256, "global_batch": 8, "micro_batch": 8}})
    overhead = {}
    for moe_ops in (None, 600.0):
        width = cc.MeasuredWidth(moe.hidden, 20.0, 10.0, 180.0, moe_ops_per_layer=moe_ops)
        kernels = cc.MeasuredKernels(20.0, 10.0, 180.0, KERNELS["attention"], widths=(width,))
        cc.save_calibration(_calibration(cc.threads_per_process(1), kernels={"bf16": kernels}))
        overhead[moe_ops] = predict(w).compute_breakdown["kernel overhead"]
    from trainperf.predict.step_model.compute import moe_launches
    from trainperf.predict.step_model.layout import layout_of
    from trainperf.predict.step_model.stage import busiest_stage

    lay = layout_of(w, 1.0)
    st = busiest_stage(lay)
    extra, _ = moe_launches(lay, st)  # the GPU's extra kernels per layer forward, replaced by the count
    per_layer_fwd = st.moe_frac * (600.0 - 180.0) / 3.0 - extra
    assert overhead[600.0] - overhead[None] == pytest.approx(moe.layers * 3.0 * per_layer_fwd * 10e-6, rel=1e-6)


def test_only_the_bench_runs_data_parallel_replicas_as_fsdp2():
    """The packaged stacks state how their replicas reduce gradients; a bad value is one line."""
    from trainperf.errors import UnknownNameError
    from trainperf.predict import stack_kernels

    assert stack_kernels.for_stack("trainperf-bench", "hopper").data_parallel == "fsdp2-replicas"
    assert {stack_kernels.for_stack(s, "hopper").data_parallel for s in ("megatron-core", "torchtitan", "generic")} \
        == {"ddp"}
    with pytest.raises(UnknownNameError, match="data_parallel"):
        stack_kernels.validate_table({"data_parallel": "zero"}, "stack x")


def test_an_expert_exchange_on_a_cpu_is_named_for_gloo(measured):
    """The bench's all_to_all_single runs on gloo between CPU processes: the breakdown says so."""
    w = workload_from_dict({
        "model": {"preset": "debug-moe"},
        "hardware": {"device": "cpu", "num_devices": 2, "devices_per_node": 2, "peak_tflops": 0.4},
        "parallel": {"dp": 2, "ep": 2},
        "training": {"seq_len": 256, "micro_batch": 8, "global_batch": 16, "precision": "bf16",
                     "stack": "trainperf-bench"}})
    algos = {c.name: c.algorithm for c in predict(w).collectives}
    assert algos["ep dispatch"] == algos["ep combine"] == "all-to-all (gloo)"


def test_the_optimizer_step_is_priced_at_the_rate_the_bench_measured(measured):
    """One process stepping the debug model: the optimizer takes 34 bytes per parameter at the
    measured 17 GB/s (clipping and fused AdamW timed together), plus its 20 launches at the
    measured 10 us per operator; not the memory bandwidth's estimate."""
    from trainperf.predict.step import resolve_knobs
    from trainperf.predict.step_model.layout import layout_of
    from trainperf.predict.step_model.optimizer import OPTIMIZER_KERNELS, optimizer_s
    from trainperf.predict.step_model.stage import busiest_stage

    w = _workload(1)
    lay, kn = layout_of(w, 1.0), resolve_knobs(w).numbers()
    st = busiest_stage(lay)
    want = 34.0 * st.p_stage / 17e9 + OPTIMIZER_KERNELS * 10e-6
    assert optimizer_s(lay, st, kn) == pytest.approx(want, rel=1e-9)
    assert predict(w).breakdown["optimizer"] == pytest.approx(want, rel=1e-9)


def test_the_bench_times_its_optimizer_over_the_parameters_a_process_steps():
    """The timed step and the step model count the same bytes; the sample is the run's own
    parameters per process (a LoRA run's adapters), clamped so the timing takes a moment."""
    pytest.importorskip("torch")
    from trainperf.measure import kernel_calibration as kc
    from trainperf.predict.step_model import optimizer

    assert kc.OPTIMIZER_BYTES_PER_PARAM == optimizer.OPTIMIZER_BYTES_PER_PARAM
    rate = kc.optimizer_GB_per_s(1000)  # clamped up to 2^18 parameters
    assert 0.1 < rate < 1e4
    dense = workload_from_dict({
        "model": {"preset": "debug"}, "hardware": {"device": "cpu", "num_devices": 2, "devices_per_node": 2},
        "parallel": {"fsdp": 2}, "training": {"seq_len": 256, "micro_batch": 8, "global_batch": 16}})
    assert kc.stepped_params(dense) == dense.model.total_params // 2
    lora = workload_from_dict({
        "model": {"preset": "debug"}, "hardware": {"device": "cpu", "num_devices": 1},
        "lora": {"rank": 8}, "training": {"seq_len": 256, "micro_batch": 8, "global_batch": 8}})
    assert kc.stepped_params(lora) == lora.lora.adapter_params(lora.model)


def test_paired_timings_warm_up_then_alternate():
    """The attention forward and forward+backward are timed in turn after two untimed calls of
    each, so that a load that comes and goes falls on both (their difference is the backward)."""
    from trainperf.measure import kernel_calibration as kc

    calls: list[str] = []
    medians = kc._medians_s((lambda: calls.append("f"), lambda: calls.append("b")), min_time_s=0.0)
    assert calls[:2 * kc.WARMUP_CALLS] == ["f", "b"] * kc.WARMUP_CALLS
    timed = calls[2 * kc.WARMUP_CALLS:]
    assert timed == ["f", "b"] * (len(timed) // 2) and len(timed) // 2 >= 7
    assert len(medians) == 2 and all(m >= 0.0 for m in medians)


def test_a_run_given_threads_is_predicted_from_what_was_measured_with_as_many(measured):
    """`bench --threads N` off the default share writes `threads_per_device` into the run's
    workload (it round-trips through the file), and the predictor reads the cache entry measured
    with N threads, not the one for the cores shared out; 0 keeps the default, a GPU refuses it."""
    from trainperf.errors import SpecError
    from trainperf.measure.runner import BenchOptions, _resolve_peaks_and_threads
    from trainperf.predict.kernels.cpu import physics
    from trainperf.specs.workload_file import workload_to_dict

    default = cc.threads_per_process(1)
    other = 1 if default != 1 else 2
    cc.save_calibration(_calibration(other, kernels={"bf16": KERNELS}, collectives=GLOO))
    w = _workload(1)
    given, _, _ = _resolve_peaks_and_threads(w, BenchOptions(threads=other), "cpu", False, print)
    assert given.threads_per_device == other
    same, _, _ = _resolve_peaks_and_threads(w, BenchOptions(threads=default), "cpu", False, print)
    assert same.threads_per_device == 0
    assert workload_from_dict(workload_to_dict(given)) == given
    assert "threads_per_device" not in workload_to_dict(w)["hardware"]
    assert f"{other} thread(s) per process" in physics(given).source
    assert f"{default} thread(s) per process" in physics(w).source
    with pytest.raises(SpecError, match=r"hardware\.threads_per_device"):
        workload_from_dict({"model": {"preset": "debug"}, "hardware": {"device": "h100-sxm", "threads_per_device": 4}})
    with pytest.raises(SpecError, match=r"hardware\.threads_per_device"):
        workload_from_dict({"model": {"preset": "debug"}, "hardware": {"device": "cpu", "threads_per_device": -1}})


@pytest.mark.parametrize("parallel", [{"tp": 2, "sequence_parallel": True}, {"tp": 2}, {"fsdp": 2}, {"cp": 2},
                                      {"pp": 2}, {"dp": 2}])
def test_a_cpu_runs_breakdown_adds_up_to_its_step(measured, parallel):
    """Every second the step model prices on a CPU run (measured physics, nothing overlapped) is
    in the step time and in one breakdown entry: the breakdown adds up to the step (the sequence-
    parallel norms' gradient all-reduces were once in the breakdown only)."""
    p = predict(_workload(2, **parallel))
    assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s, rel=1e-9)


def test_workloads_priced_with_this_cpus_measured_kernels_stack_for_a_fit(measured):
    """The profile fit (`trainperf calibrate-model` of bench runs) stacks layouts by their categorical
    fields; a CPU's measured attention table (dicts of lists) is one of them: two runs of the same
    kernels group together and are priced as each alone."""
    import numpy as np

    from trainperf.predict.batch import group_layouts, step_times
    from trainperf.predict.step import resolve_knobs
    from trainperf.predict.step_model.layout import layout_of

    ws = [_workload(), _workload().replace(global_batch=16)]
    groups = group_layouts([layout_of(w) for w in ws])
    assert len(groups) == 1
    knobs = resolve_knobs(ws[0]).numbers()
    arrays = {f: np.full(2, getattr(knobs, f)) for f in type(knobs).__dataclass_fields__}
    assert step_times(groups, arrays, 2) == pytest.approx([predict(w).step_time_s for w in ws], rel=1e-9)


def test_a_profile_fitted_to_cpu_runs_prices_them_as_its_fit_did(measured, tmp_path):
    """A CPU's kernel speeds are measured, so a stack's shares are 1 there and nothing overlaps,
    unless the stack profile states its own values for the cpu generation (`trainperf
    calibrate-model` of CPU bench runs writes them): predict then prices with those, as the fit did."""
    from trainperf.predict.stacks import packaged_profile

    w = _workload(2, dp=2)
    plain = predict(w)
    base = packaged_profile("trainperf-bench")
    fitted = dataclasses.replace(base, name="fitted", path="",
                                 generations={**base.generations, "cpu": {"matmul_fraction": 0.5, "overlap": 0.5}})
    path = tmp_path / "fitted.toml"
    path.write_text(fitted.to_toml(), encoding="utf-8")
    got = predict(w, stack=str(path))
    assert got.knobs.matmul_fraction == 0.5 and got.knobs.overlap == 0.5
    assert got.knobs.attention_fraction == 1.0 and plain.knobs.matmul_fraction == 1.0  # unstated: measured
    assert got.step_time_s > plain.step_time_s


def test_a_prediction_says_whether_gloo_was_measured_between_this_machines_processes(measured, tmp_path,
                                                                                   monkeypatch, capsys):
    from trainperf.cli.main import main

    assert predict(_workload(2, dp=2)).extra["kernels"]["collectives_measured_here"] is True
    monkeypatch.setenv(cc.CACHE_ENV, str(tmp_path / "kernels-only"))
    for threads in {cc.threads_per_process(1), cc.threads_per_process(2)}:
        cc.save_calibration(_calibration(threads, kernels={"bf16": KERNELS}))
    assert predict(_workload(2, dp=2)).extra["kernels"]["collectives_measured_here"] is False
    path = tmp_path / "w.toml"
    from trainperf.specs.workload_file import dump_workload_toml

    path.write_text(dump_workload_toml(_workload(2, dp=2)))
    assert main(["predict", str(path)]) == 0
    assert "gloo's collectives not measured between processes here" in capsys.readouterr().out
