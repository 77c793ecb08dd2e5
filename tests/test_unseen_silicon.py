"""Silicon no published table covers takes the stack shares of its nearest fitted generation, and a
stack on a fitted generation it has no table on composes generic's share there with its own
deviation (predict/stacks.py stand_in_generation, predict/fit_profiles.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from trainperf.predict.efficiency import knob_logit, silicon
from trainperf.predict.stacks import (
    Profile,
    knobs_with_profiles,
    packaged_profile,
    stack_knobs,
    stand_in_generation,
)
from trainperf.specs.hardware import get_hardware

FITTED = ("ampere", "hopper", "tpu-v5e")


@pytest.mark.parametrize(("gen", "vendor", "want"), [
    ("blackwell", "nvidia", "hopper"),   # 2024: Hopper (2022) is nearest
    ("volta", "nvidia", "ampere"),       # 2017: Ampere (2020)
    ("cdna3", "amd", "hopper"),          # 2023: another vendor's GPU, nearest in time
    ("cdna2", "amd", "hopper"),          # 2021: one year from Ampere and from Hopper, the newer wins
    ("tpu-v6e", "google", "tpu-v5e"),    # a TPU takes a TPU's, never a GPU's
    ("hopper", "nvidia", "hopper"),      # fitted: itself
    ("cpu", "cpu", None),                # measured on the machine: no stand-in
    ("my-asic", "nvidia", "hopper"),     # not listed: the newest fitted generation of its kind
    ("my-tpu", "google", "tpu-v5e"),
])
def test_stand_in_is_the_nearest_fitted_generation_of_the_same_kind(gen, vendor, want):
    assert stand_in_generation(gen, FITTED, vendor) == want


def test_no_fitted_generation_of_the_kind_leaves_the_stack_wide_values():
    assert stand_in_generation("tpu-v6e", ("ampere", "hopper"), "google") is None
    assert stand_in_generation("blackwell", ("tpu-v5e",), "nvidia") is None


def test_every_catalog_silicon_is_listed_with_a_kind():
    from trainperf.specs.hardware import list_hardware

    for hw in list_hardware():
        gen = hw.silicon
        info = silicon(gen)
        assert info is not None, gen
        assert (info.released is None) == (info.kind == "cpu")


def test_b200_takes_hoppers_shares_and_says_so():
    tt = packaged_profile("torchtitan")
    b200 = stack_knobs(get_hardware("b200"), "torchtitan")
    h100 = stack_knobs(get_hardware("h100-sxm"), "torchtitan")
    assert b200.matmul_fraction == h100.matmul_fraction == tt.generations["hopper"]["matmul_fraction"]
    assert b200.matmul_fraction != tt.knobs["matmul_fraction"]  # not the all-silicon centre
    assert b200.device.endswith(":blackwell as hopper")
    assert h100.device.endswith(":hopper")


def test_a_profile_with_its_own_entry_for_the_silicon_keeps_it():
    """A user's profile fitted on B200 runs (trainperf calibrate-model) is read on B200 as written;
    on H100, a fitted generation, its B200 entry is not borrowed."""
    generic = packaged_profile("generic")
    mine = Profile(name="mine", generations={"blackwell": {"matmul_fraction": 0.5}})
    on_b200 = knobs_with_profiles(get_hardware("b200"), [generic, mine])
    on_h100 = knobs_with_profiles(get_hardware("h100-sxm"), [generic, mine])
    assert on_b200.matmul_fraction == 0.5
    assert on_h100.matmul_fraction == generic.generations["hopper"]["matmul_fraction"]


@pytest.mark.parametrize("stack", ["deepspeed", "llm-foundry", "megatron-core", "torchtitan"])
def test_a_stack_on_a_generation_without_its_tables_composes_generics_share(stack):
    """By hand, in the fit's logit space: the stack's deviation from generic is the same on the
    generation it has no table on as stack-wide (the hold-out fits compose it so)."""
    generic, prof = packaged_profile("generic"), packaged_profile(stack)
    composed = [g for g in prof.generations if prof.source_of("matmul_fraction", g).startswith("no table")]
    assert composed
    dev = knob_logit("matmul_fraction", prof.knobs["matmul_fraction"]) - knob_logit(
        "matmul_fraction", generic.knobs["matmul_fraction"])
    for g in composed:
        got = knob_logit("matmul_fraction", prof.generations[g]["matmul_fraction"])
        want = knob_logit("matmul_fraction", generic.generations[g]["matmul_fraction"]) + dev
        assert got == pytest.approx(want, abs=1e-4)


def test_deepspeed_on_hopper_keeps_generics_hopper_residual():
    """DeepSpeed's one table is on A100; on an H100 it takes generic's Hopper share with its own
    deviation, below its stack-wide value (every GPU generation fitted sits below the centre)."""
    ds = stack_knobs(get_hardware("h200-sxm"), "deepspeed")
    assert ds.matmul_fraction == packaged_profile("deepspeed").generations["hopper"]["matmul_fraction"]
    assert ds.matmul_fraction < packaged_profile("deepspeed").knobs["matmul_fraction"]


def test_unseen_silicon_benchmark_holds_out_whole_generations():
    """The benchmark's hold-out on a two-generation toy: held out, Hopper's rows are predicted by
    Ampere's parameters under the stand-in and by none under the centre."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "unseen_silicon.py"
    spec = importlib.util.spec_from_file_location("unseen_silicon", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    from types import SimpleNamespace

    P = SimpleNamespace(params=[("generic", "*", "m"), ("generic", "ampere", "m"), ("stack", "s/ampere", "m")])
    F = SimpleNamespace(params=[*P.params, ("generic", "hopper", "m"), ("stack", "s/hopper", "m"),
                                ("stack", "t/hopper", "m")])

    theta = [0.1, 0.2, 0.3]
    assert list(mod._theta_for(F, P, theta, "hopper", "ampere")) == [0.1, 0.2, 0.3, 0.2, 0.3, 0.0]
    assert list(mod._theta_for(F, P, theta, "hopper", None)) == [0.1, 0.2, 0.3, 0.0, 0.0, 0.0]


def test_a_calibration_on_unfitted_silicon_starts_from_and_writes_the_stand_ins_values():
    """calibrate-model on one B200 run, moving only the 16-bit GEMM share: the knobs it does not
    move are written as the fit started from them, torchtitan's Hopper entry (its fp8 share 0.96,
    not the stack-wide 0.94), so the profile predicts the run as the fit did."""
    from trainperf.predict import predict
    from trainperf.predict.fit_profiles import FitRow, fit_user_profile
    from trainperf.specs.workload_file import workload_from_dict

    w = workload_from_dict({
        "model": {"preset": "llama3-8b"}, "hardware": {"device": "b200", "num_devices": 8},
        "parallel": {"fsdp": 8},
        "training": {"seq_len": 8192, "global_batch": 8, "micro_batch": 1, "precision": "bf16",
                     "activation_checkpointing": "selective-op", "compile": True, "stack": "torchtitan"}})
    base = [packaged_profile("generic"), packaged_profile("torchtitan")]
    prof, preds = fit_user_profile([FitRow("run", "mine", "torchtitan", w, 0.9)], "mine", base,
                                   knobs=("matmul_fraction",))
    entry = prof.generations["blackwell"]
    hopper = base[1].generations["hopper"]
    assert entry["fp8_matmul_fraction"] == hopper["fp8_matmul_fraction"] != base[1].knobs["fp8_matmul_fraction"]
    assert entry["matmul_fraction"] != hopper["matmul_fraction"]  # the one knob it moved
    assert predict(w, stack=prof).step_time_s == pytest.approx(preds[0].predicted_step_time_s, rel=1e-6)
