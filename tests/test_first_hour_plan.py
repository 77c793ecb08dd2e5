"""Issue 31, a user's first hour with ``plan`` and ``predict``: each numbered item end to end.

4 a missing ``--global-batch`` is named as a missing flag; 5 days, device-hours and dollars in one
answer (text and JSON); 6 ``plan`` ranks and labels with the profile ``predict --stack`` uses;
7 the inverse question's tried counts say "no plan fits" and why a count is slower; 8 the
bottleneck is a line of the breakdown and a stack share above 1 is explained; 9 each
framework's own checkpointing names; 16 a Hugging Face config's default sequence and a plan that
does not fit.
"""

from __future__ import annotations

import json
import re

import pytest

from trainperf.cli.main import main
from trainperf.specs.checkpointing import FRAMEWORK_NAMES, framework_policy, get_policy

PLAN_8B = ["plan", "--model", "llama3-8b", "--device", "h100-sxm", "--seq-len", "8192"]
PREDICT_70B = ["predict", "--model", "llama3-70b", "--device", "h100-sxm", "--num-devices", "64", "--dp", "8",
               "--tp", "4", "--cp", "2", "--sequence-parallel", "--zero-stage", "2", "--seq-len", "8192",
               "--global-batch", "1024", "--micro-batch", "1"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# --- 4: plan without --global-batch ---------------------------------------------------------------
def test_plan_without_a_global_batch_names_the_flag(capsys):
    rc, out, err = run(capsys, *PLAN_8B, "--num-devices", "8")
    assert rc == 2 and out == ""
    assert err.strip() == ("trainperf plan: error: training.global_batch is not given: give --global-batch N (a "
                           "count, a comma-separated list A,B or a range LO-HI) or [training] global_batch in the "
                           "workload file")
    rc, _, err = run(capsys, *PLAN_8B, "--global-batch", "8")
    assert rc == 2 and "hardware.num_devices is not given: give --num-devices N" in err and "None" not in err


# --- 5: how long and how much, in one command -------------------------------------------------------
def test_predict_gives_days_device_hours_and_cost(capsys):
    rc, out, _ = run(capsys, *PREDICT_70B, "--train-tokens", "15e12", "--usd-per-device-hour", "2.5", "--json")
    d = json.loads(out)
    tc = d["time_and_cost"]
    # by hand: days = T / tokens/s / 86400; device-hours = days x 24 x 64; cost = device-hours x 2.5
    days = 15e12 / d["tokens_per_s"] / 86400
    assert rc == 0 and tc["days"] == pytest.approx(days) and d["days_to_train"] == pytest.approx(days)
    assert tc["device_hours"] == pytest.approx(days * 24 * 64)
    assert tc["cost_usd"] == pytest.approx(days * 24 * 64 * 2.5)
    rc, out, _ = run(capsys, *PREDICT_70B, "--train-tokens", "15e12", "--usd-per-device-hour", "2.5")
    assert rc == 0 and f"days to train 1.5e+13 tokens   {days:,.2f}" in out
    assert f"device-hours                   {days * 24 * 64:,.0f}" in out
    assert f"cost at $2.50 per device-hour  ${days * 24 * 64 * 2.5:,.0f}" in out


def test_plan_gives_days_device_hours_and_cost_with_any_objective(capsys):
    rc, out, _ = run(capsys, *PLAN_8B, "--num-devices", "16", "--global-batch", "64", "--train-tokens", "1e12",
                     "--usd-per-device-hour", "2", "--top", "2", "--json")
    assert rc == 0
    for p in json.loads(out)["plans"]:
        days = 1e12 / p["tokens_per_s"] / 86400
        assert p["days_to_train"] == pytest.approx(days) and p["device_hours"] == pytest.approx(days * 24 * 16)
        assert p["cost_usd"] == pytest.approx(days * 24 * 16 * 2)
    rc, out, _ = run(capsys, *PLAN_8B, "--num-devices", "16", "--global-batch", "64", "--train-tokens", "1e12",
                     "--usd-per-device-hour", "2", "--top", "2")
    head = out.splitlines()[1]
    assert rc == 0 and "days" in head and "device-hours" in head and "USD" in head
    assert any(line.startswith("#1 trains 1e+12 tokens in ") and "device-hours = $" in line
               and "at $2.00 per device-hour" in line for line in out.splitlines())
    # --target-days answers with the cost too
    rc, out, _ = run(capsys, *PLAN_8B, "--global-batch", "64", "--target-days", "30", "--train-tokens", "1e12",
                     "--usd-per-device-hour", "2", "--top", "1")
    assert rc == 0 and "USD" in out and "#1 trains 1e+12 tokens in " in out


# --- 6: the plan's figures are predict --stack's ---------------------------------------------------
def test_plan_ranks_and_labels_with_the_stack_profile_predict_uses(capsys):
    rc, out, _ = run(capsys, *PLAN_8B, "--num-devices", "16", "--global-batch", "64", "--top", "3", "--json")
    assert rc == 0
    plans = json.loads(out)["plans"]
    for p in plans:
        assert p["stack"] in p["stacks"]  # predicted with a stack that runs it
        argv = ["predict", "--model", "llama3-8b", "--device", "h100-sxm", "--num-devices", "16", "--seq-len", "8192",
                "--global-batch", "64", "--micro-batch", str(p["micro_batch"]), "--stack", p["stack"],
                "--activation-checkpointing", p["activation_checkpointing"], "--json"]
        for key in ("dp", "fsdp", "tp", "pp", "cp"):
            argv += [f"--{key}", str(p[key])]
        argv += ["--zero-stage", str(p["zero_stage"])] if p["zero_stage"] else []
        argv += ["--sequence-parallel"] if p["sequence_parallel"] else []
        assert p["pp"] == 1  # (a pipeline would need its schedule too)
        rc, pout, _ = run(capsys, *argv)
        assert rc == 0 and json.loads(pout)["step_time_s"] == pytest.approx(p["step_time_s"], rel=1e-9)
    assert [p["step_time_s"] for p in plans] == sorted(p["step_time_s"] for p in plans)  # ranked by them
    rc, out, _ = run(capsys, *PLAN_8B, "--num-devices", "16", "--global-batch", "64", "--top", "1")
    assert "predicted with stack (others that run it)" in out and f"  {plans[0]['stack']} (" in out


# --- 7: the inverse question's tried counts ---------------------------------------------------------
def test_tried_counts_say_no_plan_fits_and_why_a_count_is_slower():
    from trainperf.cli.plan import tried_line

    text, why = tried_line({8: 0.0, 16: 1.06e4, 1984: 1.09e6, 2016: 7.33e5, 2032: 0.0, 2048: 1.94e6}, "1024")
    assert text == ("8: no plan fits, 16: 0.0106M tok/s, 1984: 1.09M tok/s, 2016: 0.733M tok/s, 2032: no plan fits, "
                    "2048: 1.94M tok/s")
    assert why is not None and why.startswith("2016, 2032 are slower than a smaller count: a count's plans split it "
                                              "as dp x tp x pp x cp with dp dividing the global batch 1024")
    assert tried_line({8: 1.0, 16: 2.0}, "64") == ("8: 1e-06M tok/s, 16: 2e-06M tok/s", None)


def test_inverse_output_lists_the_tried_counts_on_their_own_line(capsys):
    rc, out, _ = run(capsys, *PLAN_8B, "--global-batch", "64", "--target-days", "30", "--train-tokens", "1e12",
                     "--top", "1")
    lines = out.splitlines()
    assert rc == 0 and lines[1].startswith("smallest device count: ") and lines[2].startswith("tried: ")
    assert "0M tok/s" not in out
    # the count is chosen on the figures shown: each plan predicted with its fastest stack
    rc, out, _ = run(capsys, *PLAN_8B, "--global-batch", "64", "--target-days", "30", "--train-tokens", "1e12",
                     "--top", "1", "--json")
    inv = json.loads(out)["inverse"]
    at = {t["num_devices"]: t["tokens_per_s"] for t in inv["tried"]}
    assert rc == 0 and at[inv["num_devices"]] == pytest.approx(inv["best_plan"]["tokens_per_s"])
    assert inv["best_plan"]["days_to_train"] <= 30


# --- 8: the bottleneck is a line of the breakdown; shares above 1 explained ------------------------
def test_predict_bottleneck_is_a_line_of_the_breakdown(capsys):
    rc, out, _ = run(capsys, *PREDICT_70B, "--json")
    d = json.loads(out)
    comp = d["compute_breakdown"]
    fwd_bwd = d["breakdown"]["forward"] + d["breakdown"]["backward"]
    # the kernel classes add up to forward + backward (no recompute here)
    assert sum(v for k, v in comp.items() if k != "optimizer") == pytest.approx(fwd_bwd, rel=1e-6)
    # the bottleneck names a kernel class of the compute breakdown, with its share of the step
    names = {"memory-bound ops": "memory-bound ops (norms, activations, RoPE, loss)", "attention": "attention kernels",
             "matmul": "matmuls"}
    part = next(k for k in names if d["bottleneck"].startswith(names[k]))
    share = round(100 * comp[part] / d["step_time_s"])
    assert d["bottleneck"] == f"{names[part]}: {share}% of the step"
    rc, out, _ = run(capsys, *PREDICT_70B)
    assert rc == 0
    assert "forward + backward by kernel class (shares of the step):" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("memory-bound ops "))
    assert f"{100 * comp['memory-bound ops'] / d['step_time_s']:5.1f}%" in line
    # every share above 1 on the stack line is named in the explanation (the fitted values move with refits)
    shares = re.search(r"stack shares of the kernels' speed: \S+ \((.*?)\)", out).group(1)
    above = [f"{k} {v}" for k, v in re.findall(r"(matmul|attention|memory-bound) ([\d.]+)", shares) if float(v) > 1]
    if above:
        assert f"above 1 ({', '.join(above)})" in out and "the runs it was fitted on went faster than the" in out
    else:
        assert "above 1 (" not in out


# --- 9: each framework's own names ---------------------------------------------------------------------
@pytest.mark.parametrize(("given", "stack", "policy"), [
    ("selective", "torchtitan", "selective-op"),
    ("torchtitan:selective", "generic", "selective-op"),
    ("torchtitan:selective:2", "generic", "full-every:2"),
    ("torchtitan:full", "generic", "full"),
    ("selective:3", "torchtitan", "full-every:3"),
    ("megatron:selective", "generic", "selective"),
    ("megatron:full:block:4", "generic", "full:4"),
    ("megatron:selective:core_attn+mlp", "generic", "selective:core_attn+mlp"),
    ("maxtext:save_dot_except_mlpwi", "generic", "save_dot_except_mlpwi"),
    ("selective", "megatron-core", "selective"),
    ("selective", "generic", "selective"),
])
def test_framework_names_map_to_policies(given, stack, policy):
    assert framework_policy(given, stack)[0] == policy
    assert get_policy(framework_policy(given, stack)[0]).name == policy


def test_every_framework_name_resolves():
    for fw, table in FRAMEWORK_NAMES.items():
        for name, (policy, _) in table.items():
            name = name.replace(":N", ":2").replace(":K", ":2").replace(":MODULES", ":core_attn")
            policy = policy.replace(":N", ":2").replace(":K", ":2").replace(":MODULES", ":core_attn")
            assert get_policy(f"{fw}:{name}").name == get_policy(policy).name


def test_torchtitan_selective_runs_with_the_mapping_shown(capsys):
    base = ["--model", "llama3-8b", "--device", "h100-sxm", "--num-devices", "8", "--seq-len", "8192",
            "--global-batch", "8", "--stack", "torchtitan", "--activation-checkpointing", "selective"]
    rc, out, _ = run(capsys, "predict", *base, "--fsdp", "8")
    assert rc == 0 and "AC selective-op" in out.splitlines()[0]
    assert "note: activation checkpointing: torchtitan's 'selective' (mode = \"selective\" with " \
           "selective_ac_option = \"op\"" in out and "is trainperf's selective-op" in out
    assert "cannot run this plan" not in out
    rc, out, _ = run(capsys, "plan", *base, "--top", "1")
    assert rc == 0 and "AC=selective-op" in out and "torchtitan's 'selective'" in out
    rc, _, err = run(capsys, "predict", *base, "--fsdp", "8", "--activation-checkpointing", "torchtitan:sometimes")
    assert rc == 2 and "one of torchtitan's names: torchtitan:none, torchtitan:full, torchtitan:selective" in err


# --- 16: a Hugging Face config's default sequence; a plan that does not fit -------------------------
def test_hf_config_default_sequence_is_capped_and_a_plan_over_memory_gets_no_time(capsys):
    from pathlib import Path

    cfg = str(Path(__file__).parent / "fixtures" / "hf_configs" / "qwen2-7b.json")
    rc, out, _ = run(capsys, "predict", "--hf-config", cfg, "--device", "h100-sxm", "--num-devices", "8")
    lines = out.splitlines()
    assert rc == 0 and ", seq 8192," in lines[0]
    assert "note: seq_len: 8,192 (default: the model's position table holds 131,072 tokens" in out
    assert out.count("does not fit: ") == 1 and "no step time is predicted for a plan that cannot run" in out
    assert "days to train" not in out and "step time breakdown" not in out
    assert "largest: optimizer states" in out and "`trainperf plan`" in out
    rc, out, _ = run(capsys, "predict", "--hf-config", cfg, "--device", "h100-sxm", "--num-devices", "8", "--json")
    d = json.loads(out)
    assert rc == 0 and d["fits"] is False and ", seq 8192," in d["workload"]
    rc, out, _ = run(capsys, "predict", "--hf-config", cfg, "--device", "h100-sxm", "--num-devices", "8",
                     "--fsdp", "8", "--seq-len", "4096")
    assert rc == 0 and "step time breakdown" in out and "(default" not in out
