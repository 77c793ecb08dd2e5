"""The ``trainperf-bench`` stack profile: the facts of what trainperf's own bench runs, the stack its
runs' ``workload.toml`` names, kept out of the planner's comparison of published frameworks."""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest

from trainperf.predict import predict, stack_kernels
from trainperf.predict.stack_capabilities import (
    apply_stack,
    capabilities_of,
    compared_stacks,
    packaged_capabilities,
    plan_refusal,
    stacks_for,
)
from trainperf.predict.stack_defaults import stack_defaults
from trainperf.predict.stacks import BENCH_STACK, STACKS, packaged_profile, stack_knobs, stack_of_framework
from trainperf.predict.step_model.kernel_physics import kernels_of
from trainperf.specs.hardware import get_hardware
from trainperf.specs.parallel import ParallelPlan
from trainperf.specs.presets import get_model
from trainperf.specs.workload import Workload
from trainperf.specs.workload_file import dump_workload_toml, workload_from_dict

H100 = get_hardware("h100-sxm")


def _w(plan: ParallelPlan, n: int = 64, stack: str = BENCH_STACK, **kw) -> Workload:
    return Workload(model=get_model("llama2-70b"), hardware=H100, num_devices=n, seq_len=4096, global_batch=256,
                    plan=plan, stack=stack, **kw)


def test_the_profile_loads_states_every_fact_with_a_source_and_fits_nothing():
    prof = packaged_profile(BENCH_STACK)
    assert BENCH_STACK in STACKS and prof.name == BENCH_STACK
    assert prof.frameworks == ("trainperf bench", "trainperf-bench") and not prof.knobs and not prof.generations
    assert prof.description.endswith("No published table: generic's values.")
    stack_kernels.validate_table(prof.kernels, BENCH_STACK)
    for table in (prof.kernels, prof.capabilities, prof.defaults):
        facts = [k for k in table if k != "sources"]
        assert facts and all(len(table["sources"].get(k, "")) > 20 for k in facts), facts
    assert stack_knobs(H100, BENCH_STACK).values() == stack_knobs(H100, "generic").values()  # generic's shares
    assert stack_of_framework("trainperf bench 0.4") == stack_of_framework("trainperf-bench") == BENCH_STACK


def test_a_refit_writes_the_packaged_file_back_unchanged():
    """tools/fit_profiles.py rewrites every profile: the bench's, unfitted, from its DESCRIPTIONS
    entry and the packaged facts, exactly as packaged."""
    from tools.fit_profiles import DESCRIPTIONS, _packaged_facts

    desc, fws = DESCRIPTIONS[BENCH_STACK]
    prof = packaged_profile(BENCH_STACK)
    rebuilt = type(prof)(name=BENCH_STACK, description=desc + " No published table: generic's values.",
                         frameworks=fws, **_packaged_facts(BENCH_STACK))
    text = resources.files("trainperf.predict").joinpath(f"data/stacks/{BENCH_STACK}.toml").read_text(encoding="utf-8")
    assert tomllib.loads(rebuilt.to_toml()) == tomllib.loads(text)


def test_its_kernels_are_the_benchs():
    bench, generic = stack_kernels.for_stack(BENCH_STACK, "cpu"), stack_kernels.for_stack("generic", "cpu")
    assert bench.context_parallel == "ring-allgather" and bench.context_parallel_load_balance
    assert bench.autocast_unsharded and not generic.autocast_unsharded
    assert not stack_kernels.for_stack("torchtitan", "hopper").autocast_unsharded
    assert generic.context_parallel == "ring-p2p"
    hopper = stack_kernels.for_stack(BENCH_STACK, "hopper")
    assert (hopper.attention, hopper.elementwise_impl(False), hopper.tp_overlap) == ("fa2", "eager", "never")
    assert (hopper.grouped_gemm, hopper.moe_dispatcher, hopper.moe_host_sync, hopper.fp8_recipe) == \
        ("torch-grouped-mm", "nccl", True, "tensorwise")
    # the step model reads them from the workload's stack
    k = kernels_of(_w(ParallelPlan(fsdp=8, tp=8)))
    assert k.autocast_unsharded and k.cp_flavour.name == "ring-allgather"
    g = kernels_of(_w(ParallelPlan(fsdp=8, tp=8), stack="generic"))
    assert not g.autocast_unsharded and g.cp_flavour.name == "ring-p2p"


def test_a_bad_autocast_fact_is_a_one_line_error():
    import dataclasses

    from trainperf.errors import TrainperfError

    prof = packaged_profile(BENCH_STACK)
    with pytest.raises(TrainperfError) as e:
        stack_kernels.resolve(dataclasses.replace(prof, kernels={**prof.kernels, "autocast_unsharded": "yes"}), "cpu")
    assert "autocast_unsharded" in str(e.value) and "\n" not in str(e.value)


def test_its_capabilities_and_defaults_are_the_benchs():
    caps = capabilities_of(BENCH_STACK)
    assert caps.sequence_parallel == "optional" and caps.cp_shards_states and caps.hybrid_shard
    assert caps.zero_stages == (0,) and caps.checkpointing == ("none", "selective", "full")
    assert caps.expert_tp == ("1",) and caps.moe_dispatchers == ("nccl",)
    assert set(caps.pipeline_schedules) == {"1f1b", "interleaved", "gpipe", "dualpipev"}
    d = stack_defaults(BENCH_STACK)
    assert d.get("selective").value == "selective"  # Korthikanti's attention core, not torchtitan's per-op
    assert d.get("sequence_parallel").value is False and d.get("precision").value == "bf16"
    assert d.get("tflops_convention").value == "megatron"


def test_the_planner_compares_published_frameworks_only():
    w = _w(ParallelPlan(fsdp=8, tp=8, sequence_parallel=True))
    assert BENCH_STACK not in compared_stacks() and "generic" not in compared_stacks()
    assert BENCH_STACK not in {c.stack for c in packaged_capabilities()}
    assert stacks_for(w) and BENCH_STACK not in stacks_for(w)
    assert plan_refusal(capabilities_of(BENCH_STACK), w) is None  # the bench could run it


@pytest.mark.parametrize(("plan", "kw", "needle"), [
    (ParallelPlan(dp=8, tp=8, zero_stage=1), {}, "ZeRO stage 0 over dp, not 1"),
    (ParallelPlan(fsdp=8, tp=8), {"activation_checkpointing": "selective-op"}, "no checkpointing policy selective-op"),
    (ParallelPlan(dp=32, pp=2, account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True),
     {}, "no embedding/loss pipeline slots"),
    (ParallelPlan(dp=32, pp=2, first_stage_layers=38), {}, "cannot set first/last stage layers"),
])
def test_a_plan_the_bench_cannot_run_is_refused_under_its_stack(plan, kw, needle):
    w = _w(plan, **kw)
    assert needle in (plan_refusal(capabilities_of(BENCH_STACK), w) or "")
    assert any(needle in n and "cannot run this plan" in n for n in apply_stack(w).notes)


def test_a_workload_file_naming_the_stack_keeps_the_benchs_selective_and_sequence_parallel():
    """``selective`` under trainperf-bench stays Korthikanti's attention-core recompute (under
    torchtitan the same file would mean its per-op policy), and TP without SP stays so (torchtitan
    always shards the sequence)."""
    def read(stack: str) -> Workload:
        return workload_from_dict({"model": {"preset": "llama3-8b"}, "hardware": {"device": "h100-sxm", "num_devices": 8},
                                   "parallel": {"tp": 8},
                                   "training": {"seq_len": 8192, "global_batch": 8, "precision": "bf16",
                                                "activation_checkpointing": "selective", "stack": stack}})

    w = read(BENCH_STACK)
    assert w.activation_checkpointing == "selective" and not w.plan.sequence_parallel
    ran = apply_stack(w)
    assert not ran.plan.sequence_parallel and not ran.notes
    assert predict(w).knobs.device.startswith(f"generic+{BENCH_STACK}")
    titan = read("torchtitan")
    assert titan.activation_checkpointing == "selective-op" and apply_stack(titan).plan.sequence_parallel


def test_a_bench_run_names_the_stack_and_round_trips_through_its_workload_file():
    pytest.importorskip("torch")
    from trainperf.measure.parallelize import as_run, check_plan
    from trainperf.measure.testing import tiny_workload_dict

    data = tiny_workload_dict(activation_checkpointing="selective", precision="bf16")
    data["hardware"]["num_devices"] = 2
    data["parallel"] = {"tp": 2}
    given = workload_from_dict(data)
    check_plan(given)
    ran = as_run(given)  # what the runner's prepare() writes to workload.toml and run_config.json
    assert ran.stack == BENCH_STACK and ran.plan == given.plan
    back = workload_from_dict(tomllib.loads(dump_workload_toml(ran)))
    assert back == ran and back.activation_checkpointing == "selective" and not back.plan.sequence_parallel
    assert kernels_of(back).autocast_unsharded
    # a stack the workload names (a calibrate-model profile, another framework's) is kept
    assert as_run(given.replace(stack="torchtitan")).stack == "torchtitan"
