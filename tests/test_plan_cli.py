"""``trainperf plan`` end to end: output, --json, --explain, the inverse question, exit codes."""

from __future__ import annotations

import json

import pytest

from trainperf.cli.main import main
from trainperf.cli.plan import parse_counts

BASE = ["plan", "--model", "llama3.1-405b", "--device", "h100-sxm", "--seq-len", "8192"]


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_parse_counts():
    assert parse_counts("64", "n") == (64,)
    assert parse_counts("64,128, 256", "n") == (64, 128, 256)
    assert parse_counts("64-1024", "n") == (64, 128, 256, 512, 1024)
    assert parse_counts("64-1000", "n") == (64, 128, 256, 512, 1000)
    assert parse_counts(8, "n") == (8,)


def test_parse_fixed():
    from trainperf.cli.plan import parse_fixed

    assert parse_fixed("tp=8, pp=1,mbs=2,sp=on,zero_stage=1") == (
        ("tp", 8), ("pp", 1), ("micro_batch", 2), ("sp", 1), ("zero", 1))
    assert parse_fixed(None) == ()


def test_fix_pins_degrees(capsys):
    rc, out, _ = run(capsys, *BASE, "--num-devices", "128", "--global-batch", "32", "--fix", "tp=8,pp=1", "--json")
    assert rc == 0
    d = json.loads(out)
    assert all(p["tp"] == 8 and p["pp"] == 1 for p in d["plans"]) and d["rejected"]["fixed"] > 0
    rc, _, err = run(capsys, *BASE, "--num-devices", "128", "--global-batch", "32", "--fix", "tpp=8")
    assert rc == 2 and "fix" in err


def test_human_output_and_explain(capsys):
    rc, out, err = run(capsys, *BASE, "--num-devices", "128", "--global-batch", "32", "--top", "3", "--explain")
    assert rc == 0 and err == ""
    assert "why #1: best (" in out and "runner-up" in out
    assert "considered" in out and "does not fit device memory" in out
    assert "tp larger than the scale-up (NVLink/xGMI) domain" in out
    assert out.count("AC=") >= 3


def test_json_output(capsys):
    rc, out, _ = run(capsys, *BASE, "--num-devices", "128", "--global-batch", "32", "--top", "4", "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["considered"] == d["feasible"] + sum(d["rejected"].values())
    assert len(d["plans"]) == 4 and d["plans"][0]["rank"] == 1
    p = d["plans"][0]
    for key in ("step_time_s", "tokens_per_s", "mfu_pct", "memory_per_device_GiB", "fits", "bottleneck",
                "breakdown", "memory_breakdown_GiB", "tp", "fsdp", "pp", "micro_batch",
                "activation_checkpointing", "etp", "first_stage_layers", "last_stage_layers"):
        assert key in p
    assert p["fits"] and p["memory_per_device_GiB"] <= p["capacity_GiB"]
    assert sum(p["breakdown"].values()) == pytest.approx(p["step_time_s"], rel=1e-6)
    assert [q["step_time_s"] for q in d["plans"]] == sorted(q["step_time_s"] for q in d["plans"])
    assert d["why"] and d["message"] is None


def test_nothing_fits_names_memory_and_the_nearest_change(capsys):
    rc, _, err = run(capsys, *BASE, "--num-devices", "64", "--global-batch", "32")
    assert rc == 1
    assert "Traceback" not in err and err.count("\n") == 1
    assert "no plan fits: memory" in err and "GiB per device" in err
    assert "fits with 2x the devices" in err


def test_nothing_fits_json(capsys):
    rc, out, err = run(capsys, *BASE, "--num-devices", "64", "--global-batch", "32", "--json")
    assert rc == 1
    d = json.loads(out)
    assert d["feasible"] == 0 and d["plans"] == [] and d["message"].startswith("no plan fits")
    assert d["rejected"]["oom"] > 0 and "no plan fits" in err


def test_nothing_fits_without_full_checkpointing_suggests_it(capsys):
    rc, _, err = run(capsys, "plan", "--model", "llama2-70b", "--device", "h100-sxm", "--seq-len", "8192",
                     "--num-devices", "16", "--global-batch", "16", "--activation-checkpointing", "none")
    assert rc == 1
    assert "full checkpointing" in err


@pytest.mark.parametrize(("argv", "needle"), [
    (["--num-devices", "12", "--global-batch", "32"], "hardware.num_devices=12"),
    (["--num-devices", "1x2", "--global-batch", "32"], "hardware.num_devices"),
    (["--num-devices", "128"], "training.global_batch"),
    (["--num-devices", "128", "--global-batch", "32", "--precision", "fp4"], "training.precision"),
    (["--num-devices", "128", "--global-batch", "32", "--objective", "cost"], "train_tokens"),
    (["--num-devices", "128", "--global-batch", "32", "--activation-checkpointing", "some"],
     "activation_checkpointing"),
    (["--global-batch", "32", "--target-days", "10"], "train_tokens"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, needle):
    rc, _, err = run(capsys, *BASE, *argv)
    assert rc == 2
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_unknown_model_suggests(capsys):
    rc, _, err = run(capsys, "plan", "--model", "llama2-70", "--device", "h100-sxm", "--num-devices", "64",
                     "--seq-len", "4096", "--global-batch", "128")
    assert rc == 2 and "did you mean" in err


def test_device_and_batch_ranges_with_cost(capsys):
    rc, out, _ = run(capsys, "plan", "--model", "llama3-8b", "--device", "h100-sxm", "--seq-len", "4096",
                     "--num-devices", "8-32", "--global-batch", "64,128", "--objective", "cost",
                     "--train-tokens", "1e12", "--usd-per-device-hour", "2", "--json", "--rerank", "50")
    assert rc == 0
    d = json.loads(out)
    assert d["num_devices"] == [8, 16, 32] and d["global_batches"] == [64, 128]
    costs = [p["cost_usd"] for p in d["plans"]]
    assert costs == sorted(costs)


def test_inverse_question(capsys):
    rc, out, _ = run(capsys, "plan", "--model", "llama3-8b", "--device", "h100-sxm", "--seq-len", "4096",
                     "--global-batch", "512", "--target-days", "10", "--train-tokens", "2e11", "--json")
    assert rc == 0
    d = json.loads(out)
    inv = d["inverse"]
    assert inv["num_devices"] % 8 == 0
    assert inv["best_plan"]["days_to_train"] <= 10
    slower = [t for t in inv["tried"] if t["num_devices"] < inv["num_devices"]]
    assert slower and all(t["days"] is None or t["days"] > 10 for t in slower)


def test_workload_file_supplies_the_rest(tmp_path, capsys):
    f = tmp_path / "w.toml"
    f.write_text('[model]\npreset = "llama2-70b"\n[hardware]\ndevice = "h100-sxm"\nnum_devices = 64\n'
                 '[parallel]\nfsdp = 64\n[training]\nseq_len = 4096\nglobal_batch = 128\nmicro_batch = 2\n')
    rc, out, _ = run(capsys, "plan", str(f), "--top", "2", "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["model"] == "llama2-70b" and d["num_devices"] == [64] and d["global_batches"] == [128]


def test_inverse_question_unreachable(capsys):
    rc, _, err = run(capsys, "plan", "--model", "llama3-8b", "--device", "h100-sxm", "--seq-len", "4096",
                     "--global-batch", "16", "--target-days", "0.01", "--train-tokens", "1e13")
    assert rc == 1 and err.startswith("trainperf plan: no device count") and "Traceback" not in err


def test_a_device_count_with_many_divisors_is_a_bounded_search(capsys):
    """1,441,440 is within the device bound but factors into 1,181,250 (dp, fsdp, tp, pp, cp)
    meshes: the search says so in one line before laying them out (it took minutes and GBs)."""
    from trainperf.plan.space import MAX_LAYOUT_ROWS, mesh_count

    assert mesh_count(1_441_440) == 126 * 15 * 5 ** 4 > MAX_LAYOUT_ROWS  # 2^5 3^2 5 7 11 13
    assert mesh_count(16_384) == 3060 and mesh_count(8) == 35
    rc = main(["plan", "--model", "llama3-70b", "--device", "h100-sxm", "--num-devices", "1441440",
               "--seq-len", "8192", "--global-batch", "1000000"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--fix" in err and "1,181,250" in err


def test_memory_margin_keeps_proposed_plans_off_the_limit(capsys):
    """Llama-2-70B on 64 H100 with MaxText: without a margin the fastest plan needs 77.5 of 79.7
    GiB (97%); the default 10% margin proposes only plans within 71.7 GiB, and says so."""
    argv = ["plan", "--model", "llama2-70b", "--device", "h100-sxm", "--num-devices", "64", "--seq-len",
            "4096", "--global-batch", "128", "--stack", "maxtext", "--top", "3", "--json"]
    assert main([*argv, "--memory-margin", "0"]) == 0
    bare = json.loads(capsys.readouterr().out)["plans"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    kept = out["plans"]
    assert out["memory_margin"] == 0.10
    assert bare[0]["memory_per_device_GiB"] > 0.90 * bare[0]["capacity_GiB"]
    assert all(p["memory_per_device_GiB"] <= 0.90 * p["capacity_GiB"] for p in kept)
    assert kept[0]["step_time_s"] >= bare[0]["step_time_s"]
    assert main([*argv[:-1], "--num-devices", "8", "--stack", "llm-foundry"]) == 1
    err = capsys.readouterr().err
    assert "71.7 GiB the planner allows" in err and "--memory-margin 0" in err


@pytest.mark.parametrize("value", ["0.6", "-0.1", "nan"])
def test_bad_memory_margin_is_one_line_exit_2(capsys, value):
    rc, _, err = run(capsys, *BASE, "--num-devices", "128", "--global-batch", "32", "--memory-margin", value)
    assert rc == 2
    assert "memory_margin" in err and err.count("\n") == 1 and "Traceback" not in err


def test_json_carries_a_lighter_first_stage(capsys):
    rc, out, _ = run(capsys, "plan", "--model", "llama3-70b", "--device", "h100-sxm", "--num-devices", "32",
                     "--seq-len", "8192", "--global-batch", "128", "--stack", "megatron-core", "--fix", "tp=8,pp=4",
                     "--activation-checkpointing", "none", "--max-micro-batch", "1", "--top", "20", "--json")
    assert rc == 0
    firsts = [q for q in json.loads(out)["plans"] if q["first_stage_layers"] is not None]
    assert firsts and all(q["first_stage_layers"] == 17 and "first-stage-layers=17" in q["plan"] for q in firsts)


def test_a_cpu_plan_says_its_devices_are_machines_unless_the_count_per_node_is_given(capsys, tmp_path,
                                                                                   monkeypatch):
    from trainperf.measure.testing import fake_calibration

    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path))
    fake_calibration(tmp_path)
    argv = ["plan", "--model", "debug", "--device", "cpu", "--num-devices", "2", "--seq-len", "256",
            "--global-batch", "8", "--top", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "(1 per node)" in out and "note: 2 cpu devices at one per node: 2 machines" in out
    assert main([*argv, "--devices-per-node", "2"]) == 0
    out = capsys.readouterr().out
    assert "(2 per node)" in out and "cpu devices at one per node" not in out


def test_a_precision_that_names_its_recipe_plans_with_it(capsys):
    argv = ["plan", "--model", "llama3-8b", "--device", "b200", "--num-devices", "8", "--seq-len", "8192",
            "--global-batch", "64", "--top", "1", "--json"]
    rc, out, _ = run(capsys, *argv, "--precision", "mxfp8")
    assert rc == 0
    mx = json.loads(out)["plans"][0]
    rc, out, _ = run(capsys, *argv, "--precision", "fp8", "--fp8-recipe", "mxfp8")
    assert rc == 0 and json.loads(out)["plans"][0]["step_time_s"] == mx["step_time_s"]
    assert mx["precision"] == "fp8"
    rc, _, err = run(capsys, *argv, "--precision", "mxfp8", "--fp8-recipe", "delayed")
    assert rc == 2 and "training.fp8_recipe='delayed'" in err
