"""DualPipe (DeepSeek-V3 report, arXiv 2412.19437, section 3.2.1 and Table 2): the bubble
``(pp/2 - 1)(F&B + B - 3W)``, two copies of the parameters, ``pp + 1`` micro-batch activation
sets, each rank running a pair of stages, and the expert-parallel all-to-alls hidden behind the
paired chunk's compute."""

from __future__ import annotations

import pytest

from trainperf.cli.main import main
from trainperf.errors import SpecError
from trainperf.predict import predict
from trainperf.predict.efficiency import vendor_knobs
from trainperf.predict.step_model import layout_of, step_costs
from trainperf.predict.step_model import memory as mem
from trainperf.predict.step_model.pipeline import dualpipe_bubble_s, wgrad_s
from trainperf.specs.parallel import ParallelPlan
from trainperf.specs.workload_file import workload_from_dict


def _w(schedule: str = "dualpipe", model: str = "llama2-70b", n: int = 64, pp: int = 4, gbs: int = 64,
       parallel: dict | None = None, **training) -> object:
    return workload_from_dict({
        "model": {"preset": model},
        "hardware": {"device": "h100-sxm", "num_devices": n},
        "parallel": {"tp": 8, "pp": pp, "sequence_parallel": True, "pp_schedule": schedule, **(parallel or {})},
        "training": {"seq_len": 4096, "global_batch": gbs, "micro_batch": 1, "precision": "bf16",
                     "activation_checkpointing": "none", **training}})


def _costs(w: object):
    lay = layout_of(w)
    return lay, step_costs(lay, vendor_knobs(lay.device))


def test_bubble_formula_by_hand():
    # a GEMM-only chunk: F = 1, backward 2 (B = W = 1), F&B = 3: (8/2 - 1)(3 + 1 - 3) = 3 = 3 F
    assert dualpipe_bubble_s(8.0, 3.0, 2.0, 1.0) == pytest.approx(3.0)
    assert dualpipe_bubble_s(2.0, 3.0, 2.0, 1.0) == 0.0  # pp = 2: both ends at once, no bubble
    assert dualpipe_bubble_s(8.0, 1.0, 0.5, 1.0) == 0.0  # never negative


def test_bubble_in_a_prediction_and_against_1f1b():
    _, dual = _costs(_w())
    c = dual.compute
    w = wgrad_s(c, 1.0)
    assert 0.0 < w < c.bwd_mb
    assert dual.pp.bubble_s == pytest.approx((4 / 2 - 1) * (dual.microbatch_s + c.bwd_mb - 4.0 * w), rel=1e-9)
    _, one = _costs(_w("1f1b"))
    assert one.pp.bubble_s == pytest.approx(3 * one.microbatch_s, rel=1e-9)
    assert dual.pp.bubble_s < one.pp.bubble_s / 3


def test_two_copies_of_the_parameters():
    d, o = predict(_w()), predict(_w("1f1b"))
    for part in ("weights", "gradients", "optimizer states"):
        assert d.memory_breakdown_GiB[part] == pytest.approx(2 * o.memory_breakdown_GiB[part], rel=1e-9)


def test_pp_plus_one_activation_sets_on_a_rank_running_the_ends():
    """Llama-2-70B over pp 4 (20 layers a stage), no recomputation: rank 0 runs the first and the
    last stage, holding pp + 1 = 5 micro-batch sets of 20 layers (1F1B's rank 0: 4) and the
    logits of the micro-batches that end on it."""
    lay, dual = _costs(_w())
    _, one = _costs(_w("1f1b"))
    kept = mem._kept(lay, dual.stage)
    layer_set = 20 * kept.layer
    assert mem.dualpipe_inflight_units(4.0, 16.0) == 5.0
    assert mem.dualpipe_inflight_units(4.0, 3.0) == 3.0
    working = dual.memory.activations_bytes - 5 * layer_set
    assert one.memory.activations_bytes - 4 * layer_set == pytest.approx(working, rel=1e-9)
    assert dual.memory.logits_bytes > 0 and one.memory.logits_bytes == 0  # 1F1B's peak is rank 0, no loss there


def test_a_rank_pairs_two_stages_per_micro_batch():
    """Rank 0 runs the first and the last stage for half the micro-batches each: per micro-batch
    the mean of (20 + 20) layers and half a head."""
    _, dual = _costs(_w())
    _, one = _costs(_w("1f1b"))
    assert dual.compute.layers == pytest.approx(20.0)
    assert dual.compute.head_on == pytest.approx(0.5)
    assert one.compute.head_on == pytest.approx(1.0)
    assert dual.compute.fwd_mb < one.compute.fwd_mb


def test_expert_all_to_alls_hide_behind_the_paired_chunk():
    def w(schedule: str) -> object:
        return workload_from_dict({
            "model": {"preset": "mixtral-8x7b"}, "hardware": {"device": "h100-sxm", "num_devices": 64},
            "parallel": {"pp": 4, "ep": 8, "pp_schedule": schedule},
            "training": {"seq_len": 4096, "global_batch": 128, "micro_batch": 1, "precision": "bf16",
                         "stack": "generic"}})
    lay, dual = _costs(w("dualpipe"))
    _, one = _costs(w("1f1b"))
    ov = vendor_knobs(lay.device).overlap
    both = dual.ep.dispatch.comm.time_s + dual.ep.combine.comm.time_s
    assert both > 0
    assert dual.ep.dispatch.comm.time_s == pytest.approx(one.ep.dispatch.comm.time_s, rel=1e-9)
    M = dual.grad_accum
    expected = max(0.0, both / M - ov * dual.compute.mb_s) * M
    assert dual.ep.exposed_s == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert one.ep.exposed_s == pytest.approx(both, rel=1e-9)


def test_plans_dualpipe_cannot_run_are_refused_in_one_line(capsys):
    with pytest.raises(SpecError, match=r"parallel\.pp_schedule.*even pp"):
        ParallelPlan(pp=3, pp_schedule="dualpipe")
    with pytest.raises(SpecError, match="vpp = 1"):
        ParallelPlan(pp=4, vpp=2, pp_schedule="dualpipe")
    with pytest.raises(SpecError, match=r"at least 2\*pp=8 micro-batches"):
        _w(gbs=4)
    rc = main(["predict", "--model", "llama2-70b", "--device", "h100-sxm", "--num-devices", "64", "--tp", "8",
               "--pp", "4", "--pp-schedule", "dualpipe", "--global-batch", "4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "dualpipe" in err[0]


def test_a_stack_without_dualpipe_says_it_cannot_run_it():
    p = predict(_w(stack="megatron-core"))
    assert any("cannot run this plan" in n for n in p.notes)
    assert not any("cannot run" in n for n in predict(_w(stack="generic")).notes)


def test_the_bench_refuses_dualpipe(tmp_path, capsys):
    rc = main(["bench", "--pp", "2", "--nproc", "2", "--pp-schedule", "dualpipe", "--global-batch", "8", "--micro-batch", "1",
               "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2 and "parallel.pp_schedule" in err and "1f1b" in err
    assert not (tmp_path / "run").exists()


def test_deepseek_v3_as_trained_names_the_hidden_all_to_alls(capsys):
    """DeepSeek-V3's plan (report, section 3.2): 2048 H800, DualPipe over 16 stages, EP 64,
    ZeRO-1 data parallelism, fp8 with 1x128/128x128 blocks, DeepEP-style dispatch, one MTP module.
    The dispatch and combine are named and hidden behind compute, the bubble is DualPipe's."""
    rc = main(["predict", "--model", "deepseek-v3", "--mtp-layers", "1", "--device", "h800", "--num-devices",
               "2048", "--pp", "16", "--pp-schedule", "dualpipe", "--ep", "64", "--zero-stage", "1",
               "--seq-len", "4096", "--global-batch", "15360", "--micro-batch", "1", "--precision", "fp8",
               "--fp8-recipe", "blockwise", "--activation-checkpointing", "full", "--moe-dispatcher", "deepep"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "pp=16 dualpipe" in out
    for words in ("ep dispatch", "ep combine", "grouped GEMMs (routed experts)", "pipeline bubble", "DeepEP"):
        assert words in out


def test_dualpipev_runs_a_v_of_half_stages():
    """DualPipeV (PyTorch's ScheduleDualPipeV): vpp 2 (set), rank 0 holding the first and the last
    of 2 pp half-stages (the embedding and the head), DualPipe's bubble over 2 pp stages of half a
    rank's work, 2 pp + 1 half-stage activation sets, one copy of the parameters, nothing hidden."""
    assert ParallelPlan(pp=4, pp_schedule="dualpipev").vpp == 2
    with pytest.raises(SpecError, match=r"parallel\.vpp"):
        ParallelPlan(pp=4, vpp=3, pp_schedule="dualpipev")
    lay, v = _costs(_w("dualpipev"))
    _, one = _costs(_w("1f1b"))
    c, w = v.compute, wgrad_s(v.compute, 1.0)
    assert v.pp.bubble_s == pytest.approx((4 - 1) * (v.microbatch_s / 2 + c.bwd_mb / 2 - 4 * w / 2), rel=1e-9)
    assert c.layers == 20.0 and c.head_on == 1.0  # rank 0: its 20 layers, the head every micro-batch
    ms = lay.model
    assert v.stage.p_stage == pytest.approx(one.stage.p_stage + min(ms.params_embedding, ms.params_head) / 8, rel=1e-9)
    assert mem.dualpipe_inflight_units(4.0, 16.0, True) == 4.5
    kept = mem._kept(lay, v.stage)
    working = one.memory.activations_bytes - 4 * 20 * kept.layer
    assert v.memory.activations_bytes - working == pytest.approx(4.5 * 20 * kept.layer, rel=1e-9)


def test_a_runs_table_names_dualpipe_in_its_pp_cell():
    from hand_runs import parse_hand_rows

    def row(pp: str) -> object:
        (r,) = parse_hand_rows([{
            "row_id": "h1", "table_id": "hand", "source": "hand-built", "model": "Llama2-70B", "layers": "80",
            "hidden": "8192", "heads": "64", "kv_heads": "8", "ffn_hidden": "28672", "vocab": "32000",
            "seq_len": "4096", "micro_batch": "1", "global_batch_seqs": "512", "hardware": "H100 SXM5 80GB",
            "num_gpus": "64", "tp": "8", "pp": pp, "act_ckpt": "none", "precision": "bf16", "step_time_s": "30"}])
        assert r.included, r.exclude_reason
        return r.workload.plan.pp_schedule
    assert row("4 (DualPipe)") == "dualpipe"
    assert row("4, DualPipeV") == "dualpipev"
    assert row("4") == "1f1b"


def test_the_readme_quotes_the_deepseek_v3_figures_the_model_gives():
    """README's DualPipe paragraph quotes DeepSeek-V3's predicted step and days per trillion
    tokens, and 1F1B's days: they are the model's, to the digits quoted."""
    import re
    from pathlib import Path

    text = " ".join((Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8").split())
    got = re.search(r"is predicted at ([\d.]+) s a step, ([\d.]+) days per trillion tokens, against the "
                    r"report's 3\.7 \(an average over its batch-size ramp, so an upper bound on the steady "
                    r"step\): (\d+)% slow, against (\d+)% slow under 1F1B", text)
    assert got, "README's DeepSeek-V3 DualPipe sentence changed: update this test with it"
    step_s, days, slow, slow_1f1b = float(got[1]), float(got[2]), int(got[3]), int(got[4])

    def run(schedule: str) -> object:
        return predict(workload_from_dict({
            "model": {"preset": "deepseek-v3", "mtp_layers": 1},
            "hardware": {"device": "h800", "num_devices": 2048},
            "parallel": {"pp": 16, "ep": 64, "zero_stage": 1, "pp_schedule": schedule},
            "training": {"seq_len": 4096, "global_batch": 15360, "micro_batch": 1, "precision": "fp8",
                         "fp8_recipe": "blockwise", "activation_checkpointing": "full", "moe_dispatcher": "deepep"}}))
    dual, one = run("dualpipe"), run("1f1b")
    assert round(dual.step_time_s, 1) == step_s
    assert round(dual.days_to_train, 2) == days
    assert round(100 * (dual.days_to_train / 3.7 - 1)) == slow
    assert round(100 * (one.days_to_train / 3.7 - 1)) == slow_1f1b


def _search(stack: str, require_stack: bool, n: int, gbs: int, model: str = "deepseek-v3", device: str = "h800",
            seq: int = 4096, per_node: int = 8):
    from trainperf.plan.search import search
    from trainperf.plan.space import SearchSpace
    from trainperf.specs.hardware import get_hardware
    from trainperf.specs.presets import get_model

    space = SearchSpace((n,), per_node, seq, (gbs,), stack=stack, require_stack=require_stack,
                        checkpointing=("full",), max_micro_batch=2)
    return search(get_model(model), get_hardware(device), space, top_k=3)


def test_the_planner_proposes_dualpipe_where_the_stack_runs_it():
    """DeepSeek-V3 on 2048 H800 at the report's batch: with a stack that lists DualPipe (the
    generic profile, not filtered to packaged frameworks) the fastest plan is a DualPipe plan,
    faster than the best the frameworks' schedules give; their search rejects it."""
    free = _search("generic", False, 2048, 15360)
    frameworks = _search("generic", True, 2048, 15360)
    best = free.top[0].workload.plan
    assert best.pp_schedule == "dualpipe" and best.pp % 2 == 0
    assert free.top[0].to_dict()["pp_schedule"] == "dualpipe"
    assert all(p.workload.plan.pp_schedule not in ("dualpipe", "dualpipev") for p in frameworks.top)
    assert free.top[0].step_time_s < 0.85 * frameworks.top[0].step_time_s
    assert frameworks.rejected["no_stack"] > 0


def test_the_planner_needs_two_micro_batches_a_rank_for_dualpipe(tmp_path, monkeypatch):
    """The bench's stack lists DualPipeV: on 2 CPUs a pp=2 plan of 2 sequences has at most 2
    micro-batches a step, fewer than 2*pp = 4, so its DualPipeV options are rejected by name; at 16
    sequences none is. (The CPU's peak comes from a calibration of this test's own, not from
    whatever cache another test left ``TRAINPERF_CACHE_DIR`` pointing at.)"""
    from trainperf.measure.testing import fake_calibration

    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path))
    fake_calibration(tmp_path)
    r = _search("trainperf-bench", True, 2, 2, model="debug", device="cpu", seq=256, per_node=1)
    assert r.rejected["dualpipe_microbatches"] > 0
    r = _search("trainperf-bench", True, 2, 16, model="debug", device="cpu", seq=256, per_node=1)
    assert r.rejected["dualpipe_microbatches"] == 0


def test_plan_with_a_stack_file_that_lists_dualpipe(tmp_path, capsys):
    """A user's own stack profile (Megatron-Core's, with DualPipe added to its schedules): `plan`
    proposes DualPipe plans for DeepSeek-V3, and --json names the schedule."""
    import json
    from importlib import resources

    src = resources.files("trainperf.predict").joinpath("data/stacks/megatron-core.toml").read_text(encoding="utf-8")
    src = src.replace('name = "megatron-core"', 'name = "my-dualpipe-stack"', 1)
    src = src.replace('pipeline_schedules = [\n    "1f1b",', 'pipeline_schedules = [\n    "dualpipe",\n    "1f1b",', 1)
    assert '"dualpipe",' in src
    stack = tmp_path / "mine.toml"
    stack.write_text(src)
    rc = main(["plan", "--model", "deepseek-v3", "--device", "h800", "--num-devices", "2048", "--seq-len", "4096",
               "--global-batch", "15360", "--activation-checkpointing", "full", "--max-micro-batch", "1",
               "--stack", str(stack), "--top", "3", "--json"])
    assert rc == 0
    top = json.loads(capsys.readouterr().out)["plans"]
    assert top and top[0]["pp_schedule"] == "dualpipe" and top[0]["pp"] % 2 == 0


def test_why_the_best_plan_names_a_schedule_difference():
    from trainperf.plan.explain import plan_differences

    a, b = _w("dualpipe"), _w("1f1b")
    assert plan_differences(a, b) == ["schedule dualpipe vs 1f1b"]
    assert plan_differences(a, a) == []
