"""Stack capabilities: every packaged profile states what it runs, with sources; the planner
searches only that space; the plans experts ran are in it."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from trainperf.cli.main import main
from trainperf.errors import SpecError, UnknownNameError
from trainperf.predict.stack_capabilities import (
    PARALLELISMS,
    apply_stack,
    capabilities_from_table,
    capabilities_of,
    plan_refusal,
    stacks_for,
)
from trainperf.predict.stacks import STACKS, packaged_profile
from trainperf.specs.hardware import get_hardware
from trainperf.specs.parallel import ParallelPlan
from trainperf.specs.presets import get_model
from trainperf.specs.workload import Workload

H100 = get_hardware("h100-sxm")


def _w(plan: ParallelPlan, n: int = 64, model: str = "llama2-70b", **kw) -> Workload:
    return Workload(model=get_model(model), hardware=H100, num_devices=n, seq_len=4096, global_batch=256,
                    plan=plan, **kw)


@pytest.mark.parametrize("stack", STACKS)
def test_every_packaged_stack_states_its_space_with_sources(stack):
    prof = packaged_profile(stack)
    table = dict(prof.capabilities)
    assert table, f"{stack} has no [capabilities]"
    caps = capabilities_from_table(stack, table)
    for key in table:
        if key != "sources":
            assert caps.sources.get(key, "").strip(), f"{stack}: {key} has no source"
    assert set(caps.parallelisms) <= set(PARALLELISMS)


def test_generic_is_everything_and_the_stacks_differ():
    g = capabilities_of("generic")
    assert set(g.parallelisms) == set(PARALLELISMS) and g.zero_stages == (0, 1, 2, 3)
    assert capabilities_of("llm-foundry").parallelisms == ("dp", "fsdp", "ep")
    mc = capabilities_of("megatron-core")
    assert "fsdp" not in mc.parallelisms and mc.zero_stages == (0, 1) and mc.pipeline_slots
    assert capabilities_of("torchtitan").sequence_parallel == "always"


@pytest.mark.parametrize(("table", "needle"), [
    ({"parallelisms": ["dp", "zz"], "sources": {"parallelisms": "x"}}, "zz"),
    ({"zero_stages": [4], "sources": {"zero_stages": "x"}}, "zero_stages"),
    ({"sequence_parallel": "sometimes", "sources": {"sequence_parallel": "x"}}, "sequence_parallel"),
    ({"checkpointing": ["fulll"], "sources": {"checkpointing": "x"}}, "fulll"),
    ({"max_vpp": -1, "sources": {"max_vpp": "x"}}, "max_vpp"),
    ({"loss_bytes_per_logit": 0, "sources": {"loss_bytes_per_logit": "x"}}, "loss_bytes_per_logit"),
    ({"pipeline_zero_stages": [0, 5], "sources": {"pipeline_zero_stages": "x"}}, "pipeline_zero_stages"),
    ({"pipeline_zero_stages": [], "sources": {"pipeline_zero_stages": "x"}}, "pipeline_zero_stages"),
    ({"fp8_gemm_input_bytes": "one", "sources": {"fp8_gemm_input_bytes": "x"}}, "fp8_gemm_input_bytes"),
    ({"fp8_gemm_input_bytes": 8, "sources": {"fp8_gemm_input_bytes": "x"}}, "fp8_gemm_input_bytes"),
    ({"pipeline_schedules": ["gpipe", "zigzag"], "sources": {"pipeline_schedules": "x"}}, "zigzag"),
    ({"fsdp_grad_unit": "bucket", "sources": {"fsdp_grad_unit": "x"}}, "bucket"),
    ({"expert_tp": ["2"], "sources": {"expert_tp": "x"}}, "expert_tp"),
    ({"expert_tp": [], "sources": {"expert_tp": "x"}}, "expert_tp"),
    ({"max_vpp": 4}, "a source for every value"),
    ({"frobnicate": 1}, "frobnicate"),
    ({"expert_tp": ["tp", "1"], "introduced": {"expert_tp": ["X 1.0"]},
      "sources": {"expert_tp": "x", "introduced": "x"}}, "'key=value'"),
    ({"expert_tp": ["tp"], "introduced": {"expert_tp=1": ["X 1.0"]},
      "sources": {"expert_tp": "x", "introduced": "x"}}, "a value [capabilities].expert_tp lists"),
    ({"expert_tp": ["tp", "1"], "introduced": {"expert_tp=1": ["NeMo"]},
      "sources": {"expert_tp": "x", "introduced": "x"}}, "a product and its first release"),
    ({"expert_tp": ["tp", "1"], "introduced": {"expert_tp=1": []},
      "sources": {"expert_tp": "x", "introduced": "x"}}, "non-empty list"),
    ({"expert_tp": ["tp", "1"], "introduced": {"expert_tp=1": ["X 1.0"]},
      "sources": {"expert_tp": "x"}}, "a source for every value"),
])
def test_bad_tables_are_one_line_errors(table, needle):
    with pytest.raises((SpecError, UnknownNameError)) as e:
        capabilities_from_table("mine", table)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_refusals_name_what_the_stack_lacks():
    assert "no fsdp" in plan_refusal(capabilities_of("megatron-core"), _w(ParallelPlan(fsdp=64)))
    assert "no tp" in plan_refusal(capabilities_of("llm-foundry"), _w(ParallelPlan(tp=8)))
    assert "ZeRO stage" in plan_refusal(capabilities_of("torchtitan"), _w(ParallelPlan(zero_stage=2)))
    assert "checkpointing" in plan_refusal(capabilities_of("llm-foundry"),
                                           _w(ParallelPlan(fsdp=64), activation_checkpointing="selective"))
    assert plan_refusal(capabilities_of("megatron-core"),
                        _w(ParallelPlan(tp=8, pp=4, vpp=5, sequence_parallel=True, zero_stage=1))) is None
    assert "megatron-core" in stacks_for(_w(ParallelPlan(tp=8, pp=4, vpp=5, zero_stage=1)))
    assert stacks_for(_w(ParallelPlan(fsdp=64))) == ("maxtext", "paxml", "torchtitan", "llm-foundry", "deepspeed")


def test_torchtitan_tp_is_sequence_parallel():
    w = dataclasses.replace(_w(ParallelPlan(fsdp=8, tp=8)), stack="torchtitan")
    a = apply_stack(w)
    assert a.plan.sequence_parallel and any("sequence parallel assumed" in n for n in a.notes)
    assert apply_stack(dataclasses.replace(w, stack="megatron-core")) is not None
    assert not apply_stack(dataclasses.replace(w, stack="megatron-core")).plan.sequence_parallel


def test_loss_bytes_follow_the_stack():
    from trainperf.predict import predict

    base = _w(ParallelPlan(fsdp=64), activation_checkpointing="full")
    logits = {s: predict(dataclasses.replace(base, stack=s)).memory_breakdown_GiB["logits"]
              for s in ("llm-foundry", "generic", "torchtitan")}
    tokens_vocab = 4 * 4096 * 32000 / 2**30  # local batch 4 x seq x vocab, GiB per byte
    assert logits["llm-foundry"] == pytest.approx(2 * tokens_vocab / 4, rel=1e-9)  # micro batch 1
    assert logits["generic"] == pytest.approx(6 * tokens_vocab / 4, rel=1e-9)
    assert logits["torchtitan"] == pytest.approx(12 * tokens_vocab / 4, rel=1e-9)
    compiled = predict(dataclasses.replace(base, stack="torchtitan", compile=True))
    assert compiled.memory_breakdown_GiB["logits"] == pytest.approx(4 * tokens_vocab / 4, rel=1e-9)


def _plan(capsys, *argv):
    rc = main(["plan", *argv, "--json"])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if out.out.strip() else {}), out.err


def test_llm_foundry_plans_are_fsdp_only(capsys):
    rc, d, _ = _plan(capsys, "--model", "mpt-70b", "--device", "h100-sxm", "--num-devices", "64", "--seq-len", "2048",
                     "--global-batch", "2048", "--stack", "llm-foundry", "--top", "5")
    assert rc == 0 and d["plans"]
    for p in d["plans"]:
        assert p["fsdp"] > 1 and p["tp"] == p["pp"] == p["cp"] == 1 and p["zero_stage"] == 0
        assert p["activation_checkpointing"] in ("none", "full")


def test_without_a_stack_every_plan_names_its_stacks(capsys):
    rc, d, _ = _plan(capsys, "--model", "mpt-70b", "--device", "h100-sxm", "--num-devices", "64", "--seq-len", "2048",
                     "--global-batch", "2048", "--top", "5")
    assert rc == 0 and all(p["stacks"] for p in d["plans"])


def test_nvidias_405b_layout_is_planned_and_fits(capsys):
    rc, d, _ = _plan(capsys, "--model", "llama3.1-405b", "--device", "h100-sxm", "--num-devices", "512",
                     "--seq-len", "8192", "--global-batch", "256", "--stack", "megatron-core",
                     "--fix", "tp=8,pp=8,vpp=8,cp=2")
    assert rc == 0
    best = d["plans"][0]
    assert (best["tp"], best["pp"], best["vpp"], best["cp"]) == (8, 8, 8, 2) and best["fits"]
    assert best["embedding_slot"] and best["loss_slot"]  # 126 layers + 2 slots = 64 chunks of 2


def test_gb200_trays_and_nvlink_domain(capsys):
    gb = get_hardware("gb200")
    assert gb.devices_per_node == 4 and gb.scale_up_devices == 72
    for n in (128, 256, 512):
        rc, d, err = _plan(capsys, "--model", "nemotron4-340b", "--device", "gb200", "--num-devices", str(n),
                           "--seq-len", "4096", "--global-batch", "512", "--top", "1")
        assert rc == 0 and d["plans"], err
    rc, _, err = _plan(capsys, "--model", "llama3-8b", "--device", "gb200", "--num-devices", "6",
                       "--seq-len", "4096", "--global-batch", "12")
    assert rc == 2 and "devices_per_node=4" in err  # 6 GPUs do not fill whole trays


def test_collectives_are_priced_by_the_domain_they_span():
    from trainperf.predict import predict

    model = get_model("llama3-70b")
    gb = get_hardware("gb200")
    w = Workload(model=model, hardware=gb, num_devices=64, seq_len=4096, global_batch=64,
                 plan=ParallelPlan(fsdp=64))
    p = predict(w)
    fsdp = next(c for c in p.collectives if c.name.endswith("all-gather") and c.group_size == 64)
    assert "intra" in fsdp.link  # 64 GPUs of one NVL72 rack: NVLink, though they span 16 trays
    small = dataclasses.replace(gb, scale_up_domain=4, sources={**gb.sources, "scale_up_domain": "test"})
    q = predict(dataclasses.replace(w, hardware=small, notes=()))
    assert q.step_time_s > p.step_time_s  # the same group over the network is slower



def test_tpu_slices_talk_over_the_data_center_network():
    """Chips of one TPU slice talk over ICI (the scale-up domain); slices talk over the DCN, at the
    catalog's DCN rate per chip, which is far below ICI (it used to repeat the ICI figure)."""
    from trainperf.predict import predict

    for dev in ("tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e"):
        hw = get_hardware(dev)
        assert 10 * hw.inter_node_link_GB_per_s < hw.intra_node_link_GB_per_s, dev
    v5e = get_hardware("tpu-v5e")
    w = Workload(model=get_model("llama2-7b"), hardware=v5e, num_devices=512, seq_len=2048, global_batch=1024,
                 micro_batch=2, plan=ParallelPlan(dp=2, fsdp=256), activation_checkpointing="full", stack="maxtext")
    p = predict(w)
    dp = next(c for c in p.collectives if c.name == "dp all-reduce")
    fsdp = next(c for c in p.collectives if c.name == "fsdp all-gather")
    assert "inter" in dp.link and "intra" in fsdp.link  # a replica per slice; each fsdp group is one slice
    assert dp.time_s >= dp.bytes_per_device / (v5e.inter_node_link_GB_per_s * 1e9)  # no faster than the wire
    ici = dataclasses.replace(v5e, inter_node_link_GB_per_s=v5e.intra_node_link_GB_per_s)
    q = predict(dataclasses.replace(w, hardware=ici, notes=()))
    assert dp.time_s > 10 * next(c for c in q.collectives if c.name == "dp all-reduce").time_s
    assert p.step_time_s > q.step_time_s

def test_fix_names_the_infeasible_value(capsys):
    base = ["--model", "gpt3-175b", "--device", "h100-sxm", "--num-devices", "128", "--seq-len", "2048",
            "--global-batch", "256"]
    rc, _, err = _plan(capsys, *base, "--fix", "tp=4,pp=8,vpp=12,micro_batch=1", "--stack", "megatron-core")
    assert rc == 0
    for fix, needle in (("micro_batch=3", "micro_batch=3: micro batch does not divide the local batch"),
                        ("tp=16", "tp=16: tp larger than the scale-up"),
                        ("vpp=7,pp=8", "vpp=7: with pp=8, pp*vpp must divide the 96 layers"),
                        ("pp=7", "multiply to 7, which does not divide 128 devices"),
                        ("tp=1,pp=1,cp=1,fsdp=1", "every plan with these values runs out of memory")):
        rc, _, err = _plan(capsys, *base, "--fix", fix)
        assert rc == 1 and needle in err, err
        assert "change: or" not in err and err.count("\n") == 1
    # with a stack, plans its space refuses outnumber the others; the reason is still the fixed value's
    for fix, needle in (("micro_batch=3", "micro_batch=3: micro batch does not divide the local batch"),
                        ("tp=16", "tp=16: tp larger than the scale-up")):
        rc, _, err = _plan(capsys, *base, "--fix", fix, "--stack", "megatron-core")
        assert rc == 1 and needle in err, err
    moe = ["--model", "mixtral-8x7b", "--device", "h100-sxm", "--num-devices", "16", "--seq-len", "4096",
           "--global-batch", "256"]
    for args, needle in (([*base, "--fix", "etp=2"], "etp=2: the model has no experts"),
                         ([*moe, "--fix", "tp=4,etp=2"], "etp=2: routed experts are split like the dense layers"),
                         ([*moe, "--fix", "tp=2,etp=1", "--stack", "torchtitan"],
                          "etp=1: the torchtitan stack splits routed experts like the dense layers")):
        rc, _, err = _plan(capsys, *args)
        assert rc == 1 and needle in err, err
    rc, out, _ = _plan(capsys, *moe, "--fix", "tp=2,etp=1", "--stack", "megatron-core")
    assert rc == 0 and all(q["etp"] == 1 and q["tp"] == 2 and "etp=1" in q["plan"] for q in out["plans"])


def test_expert_layouts_are_in_their_stacks_space():
    """Every published run with a stated plan is a plan its stack can run."""
    from trainperf.predict.runs_table import packaged_runs

    refused = []
    for r in packaged_runs():
        if r.included:
            w = apply_stack(r.workload)
            why = plan_refusal(capabilities_of(w.stack), w)
            if why:
                refused.append((r.row_id, why))
    assert refused == []


def test_planner_space_holds_vpp_beyond_eight():
    from trainperf.plan.space import SearchSpace, enumerate_candidates

    c = enumerate_candidates(get_model("gpt3-175b"), H100, SearchSpace((128,), 8, 2048, (256,), stack="megatron-core"))
    assert {12, 24}.issubset(set(np.unique(c["vpp"][c["pp"] == 4]).tolist()))
    assert 20 in np.unique(c["vpp"]).tolist() or 12 in np.unique(c["vpp"][c["pp"] == 8]).tolist()


def test_deepspeed_pipelines_only_with_zero_0_or_1(capsys):
    """DeepSpeed's PipelineEngine refuses ZeRO-2 and ZeRO-3: a pp plan with either is out of its
    space (refused with the reason, never proposed); without pp, ZeRO-2 is fine."""
    ds = capabilities_of("deepspeed")
    assert "no ZeRO stage 2 with pipeline" in plan_refusal(ds, _w(ParallelPlan(dp=16, tp=2, pp=2, zero_stage=2)))
    assert "no fsdp with pipeline" in plan_refusal(ds, _w(ParallelPlan(fsdp=32, pp=2)))
    assert plan_refusal(ds, _w(ParallelPlan(dp=16, tp=2, pp=2, zero_stage=1))) is None
    assert plan_refusal(ds, _w(ParallelPlan(dp=32, tp=2, zero_stage=2))) is None
    rc, d, _ = _plan(capsys, "--model", "llama2-70b", "--device", "a100-sxm-80gb", "--num-devices", "128",
                     "--seq-len", "4096", "--global-batch", "512", "--stack", "deepspeed", "--top", "20",
                     "--rerank", "40")
    assert rc == 0 and d["plans"]
    assert any(p["pp"] > 1 for p in d["plans"]) and any(p["zero_stage"] == 2 for p in d["plans"])
    for p in d["plans"]:
        assert p["pp"] == 1 or (p["zero_stage"] <= 1 and p["fsdp"] == 1), p["plan"]


def test_predict_says_when_the_stack_cannot_run_the_plan():
    """A plan outside the named stack's space is still predicted as written, with a note saying
    why the stack cannot run it; a plan inside it (or the generic stack) gets no such note."""
    from trainperf.predict import predict

    out = predict(_w(ParallelPlan(fsdp=64), stack="megatron-core"))
    assert any("megatron-core has no fsdp" in n and "cannot run this plan" in n for n in out.notes)
    for w in (_w(ParallelPlan(fsdp=64), stack="torchtitan"), _w(ParallelPlan(fsdp=64))):
        assert not any("cannot run this plan" in n for n in predict(w).notes)


def test_unsplit_experts_are_megatron_cores_moe_folding():
    """etp = 1 beside tp = 2 (Megatron-Core's MoE parallel folding) runs under megatron-core, not
    under a stack whose experts follow tp; etp = tp runs under both."""
    from trainperf.predict.stack_capabilities import capabilities_of, plan_refusal

    folded = _w(ParallelPlan(dp=8, tp=2, ep=8, etp=1, sequence_parallel=True), n=16, model="mixtral-8x7b")
    assert plan_refusal(capabilities_of("megatron-core"), folded) is None
    why = plan_refusal(capabilities_of("torchtitan"), folded)
    assert why is not None and "etp=1" in why
    split = _w(ParallelPlan(dp=8, tp=2, ep=4, sequence_parallel=True), n=16, model="mixtral-8x7b")
    assert plan_refusal(capabilities_of("torchtitan"), split) is None


@pytest.mark.parametrize(("framework", "product", "version"), [
    ("NeMo 24.09 (Megatron-Core, TE)", "nemo", (24, 9, 0, 0)),
    ("Megatron-Core v0.9.0", "megatron-core", (0, 9, 0, 0)),
    ("megatron-lm core_r0.12.1", "megatron-lm", (0, 12, 1, 0)),
    ("Megatron-LM", "megatron-lm", None),
    ("NeMo 24.09", "megatron-core", None),
    ("xnemo 24.09", "nemo", None),
    ("NeMo 24.09.", "nemo", (24, 9, 0, 0)),
    ("torchtitan 2024-11", "torchtitan", (2024, 11, 0, 0)),
    ("torchtitan@2024-08-15", "torchtitan", (2024, 8, 15, 0)),
    ("torchtitan (FSDP2 1D) | github.com/pytorch/torchtitan @ 3faaa1a0 (2024-08) : docs/performance.md",
     "torchtitan", (2024, 8, 0, 0)),
    ("torchtitan (FSDP2 1D)", "torchtitan", None),
])
def test_release_named_reads_the_version_a_framework_cell_gives(framework, product, version):
    from trainperf.predict.stack_capabilities import release_named

    assert release_named(framework, product) == version


def test_a_stack_as_of_an_older_release_lacks_what_came_later():
    """Megatron-Core gained MoE parallel folding (etp = 1 beside tp > 1) in 0.10 / NeMo 24.12:
    NVIDIA's NeMo 24.09 runs split experts like the dense layers; a release the cell does not
    date (or a NeMo 2.x API version, not a container date) keeps the current space."""
    caps = capabilities_of("megatron-core")
    assert caps.expert_tp == ("tp", "1")
    for fw, expected in (("NeMo 24.09 (Megatron-Core, TE)", ("tp",)), ("Megatron-Core 0.9.0", ("tp",)),
                         ("NeMo 24.12", ("tp", "1")), ("Megatron-Core 0.10.0", ("tp", "1")),
                         ("NeMo 25.04", ("tp", "1")), ("Megatron-LM", ("tp", "1")), ("NeMo 2.0", ("tp", "1")),
                         ("", ("tp", "1"))):
        assert caps.as_of(fw).expert_tp == expected, fw
    assert caps.as_of("NeMo 24.09").parallelisms == caps.parallelisms


def test_torchtitan_is_dated_by_month():
    """torchtitan had no releases before 2025: its context parallelism (late 2024) is dated by
    month; its 2024-08 performance tables, dated by their source, predate it. A semantic release
    (torchtitan 0.1) is not compared with a date, and an undated cell keeps the current space."""
    from trainperf.predict.runs_table import packaged_runs

    caps = capabilities_of("torchtitan")
    assert "cp" in caps.parallelisms
    for release, has_cp in (("torchtitan 2024-08", False), ("torchtitan@2024-10-31", False),
                            ("torchtitan 2024-11", True), ("torchtitan 0.1", True), ("torchtitan", True), ("", True)):
        assert ("cp" in caps.as_of(release).parallelisms) is has_cp, release
    runs = [r for r in packaged_runs() if r.included and r.stack == "torchtitan"
            and "3faaa1a0" in r.source]
    assert len(runs) == 11  # the rows of 7 workloads
    for r in runs:
        assert "cp" not in caps.as_of(r.release).parallelisms, r.release


def test_plan_with_a_dated_stack_release(capsys):
    args = ["--model", "llama3-70b", "--device", "a100-sxm-80gb", "--num-devices", "64", "--seq-len", "8192",
            "--global-batch", "64", "--stack", "torchtitan", "--top", "50"]
    rc, out, _ = _plan(capsys, *args)
    assert rc == 0 and any(q["cp"] > 1 for q in out["plans"])
    rc, out, _ = _plan(capsys, *args, "--stack-release", "torchtitan 2024-08")
    assert rc == 0 and out["plans"] and all(q["cp"] == 1 for q in out["plans"])


def test_plan_with_a_stack_release_searches_that_release(capsys):
    moe = ["--model", "mixtral-8x7b", "--device", "h100-sxm", "--num-devices", "16", "--seq-len", "4096",
           "--global-batch", "256", "--stack", "megatron-core"]
    rc, _, err = _plan(capsys, *moe, "--fix", "tp=2,etp=1", "--stack-release", "NeMo 24.09")
    assert rc == 1 and "etp=1: the megatron-core stack splits routed experts like the dense layers" in err, err
    assert err.count("\n") == 1
    rc, out, _ = _plan(capsys, *moe, "--stack-release", "NeMo 24.09")
    assert rc == 0 and out["plans"] and all(q["etp"] == q["tp"] for q in out["plans"])
    rc, out, _ = _plan(capsys, *moe, "--fix", "tp=2,etp=1", "--stack-release", "NeMo 25.04")
    assert rc == 0 and all(q["etp"] == 1 for q in out["plans"])


@pytest.mark.parametrize(("stack", "release", "needle"), [
    ("megatron-core", "24.09", "a release of megatron-core or nemo with its version or date, e.g. "
                               "'megatron-core 0.15'"),
    ("torchtitan", "NeMo 24.09", "a release of torchtitan with its version or date, e.g. 'torchtitan 2025-04'"),
    ("llm-foundry", "NeMo 24.09", "the llm-foundry stack dates none of its capabilities"),
    ("torchtitan", "torchtitan 2024-13", "a date as YYYY-MM or YYYY-MM-DD with a month 1-12"),
])
def test_a_stack_release_naming_no_dated_product_is_a_usage_error(capsys, stack, release, needle):
    rc = main(["plan", "--model", "mixtral-8x7b", "--device", "h100-sxm", "--num-devices", "16", "--seq-len",
               "4096", "--global-batch", "256", "--stack", stack, "--stack-release", release])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and err.count("\n") == 1, err


def test_recompute_modules_are_searched_from_their_release():
    """Megatron-Core's --recompute-modules (0.12 / NeMo 25.04): a NeMo 24.11 run cannot use them;
    a current one can: the output-discarding modules the model has a part for, and the whole MoE
    block; on a dense model only ``selective:core_attn+layernorm``."""
    from trainperf.plan.space import _distinct_policies, searched_policies

    caps = capabilities_of("megatron-core")
    assert caps.allows_policy("selective:core_attn+moe_act")
    assert not caps.as_of("NeMo 24.11").allows_policy("selective:core_attn+moe_act")
    assert caps.as_of("NeMo 24.11").allows_policy("selective")
    assert not capabilities_of("torchtitan").allows_policy("selective:core_attn+moe_act")
    assert searched_policies(get_model("mixtral-8x7b"), caps) == (
        "none", "selective", "selective:core_attn+moe_act+layernorm", "selective:core_attn+layernorm+moe", "full")
    assert searched_policies(get_model("deepseek-v3"), caps) == (
        "none", "selective", "selective:core_attn+moe_act+layernorm+mla_up_proj", "selective:core_attn+layernorm+moe",
        "full")
    assert searched_policies(get_model("llama3-70b"), caps) == ("none", "selective", "selective:core_attn+layernorm",
                                                                "full")
    assert searched_policies(get_model("llama3-70b"), caps.as_of("NeMo 24.11")) == ("none", "selective", "full")
    # a set named by the user is searched even when the default would not try it; one that does
    # nothing a named policy before it does not is searched once
    assert _distinct_policies(get_model("mixtral-8x7b"), ["selective:core_attn+layernorm", "selective"]) == [
        "selective:core_attn+layernorm", "selective"]
    assert _distinct_policies(get_model("llama3-70b"), ["selective", "selective:core_attn+moe_act"]) == ["selective"]
