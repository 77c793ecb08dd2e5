"""The calculator commands end to end (in-process for speed, one subprocess for the entry point)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainperf.cli.main import main

SEED003 = ["--model", "llama2-70b", "--device", "h100-sxm", "--num-devices", "64", "--fsdp", "64",
           "--seq-len", "4096", "--global-batch", "128", "--micro-batch", "2"]


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_mfu_reproduces_seed003(capsys):
    # seed 003: "MFU = 128 * 1.82E+15 / 7.908 / 64 / 989E+12 = 46.54%"
    code, out, _ = run_cli(capsys, "mfu", *SEED003, "--step-time", "7.908", "--model-flops-per-seq", "1.82e15",
                           "--peak-tflops", "989", "--json")
    assert code == 0
    d = json.loads(out)
    assert round(d["mfu_pct"], 2) == 46.54
    assert round(d["tokens_per_s"], 2) == 66298.43
    for key in ("tokens_per_s", "tokens_per_s_per_device", "tflops_per_device", "mfu_pct", "hfu_pct",
                "model_flops_per_seq", "days_to_train", "convention", "peak_source"):
        assert key in d
    assert "given by the user" in d["peak_source"]


def test_mfu_from_workload_file(tmp_path, capsys):
    f = tmp_path / "w.toml"
    f.write_text('[model]\npreset = "llama3-8b"\n[hardware]\ndevice = "a100-sxm-80gb"\nnum_devices = 64\n'
                 '[parallel]\nfsdp = 64\n[training]\nseq_len = 8192\nglobal_batch = 64\n')
    # seed 002: 8B, 2973 WPS per GPU -> 58.2% MFU under torchtitan's 2024 count
    code, out, _ = run_cli(capsys, "mfu", str(f), "--tokens-per-s-per-device", "2973",
                           "--convention", "torchtitan-2024", "--json")
    assert code == 0 and round(json.loads(out)["mfu_pct"], 1) == 58.2
    code, out, _ = run_cli(capsys, "mfu", str(f), "--tokens-per-s-per-device", "2973")
    assert code == 0 and "MFU" in out and "megatron" in out and "a100-sxm-80gb" in out


def test_flops_json_lists_every_convention(capsys):
    code, out, _ = run_cli(capsys, "flops", "--model", "llama2-70b", "--seq-len", "4096", "--json")
    d = json.loads(out)
    assert code == 0
    assert d["conventions"]["nemo-legacy"]["model_flops_per_seq"] == 1_820_636_636_774_400
    assert set(d["conventions"]) >= {"megatron", "palm", "nemo-legacy", "6n", "lora", "torchtitan-2024"}
    code, out, _ = run_cli(capsys, "flops", "--model", "llama2-70b", "--seq-len", "4096")
    assert "attn_scores" in out and "nemo-legacy" in out


def test_hw_and_models(capsys):
    code, out, _ = run_cli(capsys, "hw")
    assert code == 0 and "mi250-gcd" in out and "tpu-v5p" in out
    code, out, _ = run_cli(capsys, "hw", "h100-sxm", "--json")
    assert json.loads(out)["peak_tflops"]["bf16"] == pytest.approx(989.4)
    code, out, _ = run_cli(capsys, "models")
    assert code == 0 and "llama3.1-405b" in out
    code, out, _ = run_cli(capsys, "models", "llama3-8b", "--json")
    assert json.loads(out)["total_params"] == 8_030_261_248


def test_scaling(capsys):
    code, out, _ = run_cli(capsys, "scaling", "--mode", "strong", "--base-devices", "4", "--devices", "128",
                           "--base-per-device", "166", "--per-device", "159", "--json")
    assert code == 0 and round(json.loads(out)["efficiency_pct"], 1) == 95.8


@pytest.mark.parametrize(("argv", "needle"), [
    (["mfu", *SEED003, "--step-time", "0"], "step_time_s"),
    (["mfu", "--model", "llama2-70b", "--device", "h100", "--step-time", "1"], "did you mean h100-sxm"),
    (["mfu", "--model", "llama2-70b", "--device", "h100-sxm", "--num-devices", "64", "--fsdp", "48",
      "--step-time", "1"], "must divide num_devices=64"),
    (["mfu", *SEED003, "--global-batch", "100", "--step-time", "1"], "training.global_batch"),
    (["mfu", *SEED003, "--step-time", "1", "--tokens-per-s", "3"], "exactly one"),
    (["mfu", *SEED003, "--precision", "fp8", "--device", "a100-sxm-80gb", "--step-time", "1"], "supports"),
    (["mfu", "--model", "llama2-70b", "--device", "cpu", "--step-time", "1", "--precision", "fp32"], "calibrate"),
    (["flops", "--model", "llama2-70b", "--heads", "7"], "heads"),
    (["flops", "--model", "llama2-70b", "--kv-heads", "5"], "kv_heads"),
    (["flops", "/nonexistent/w.toml"], "does not exist"),
    (["mfu", *SEED003, "--step-time", "abc"], "invalid float"),
    (["nonsense"], "invalid choice"),
    (["flops", "--model", "llama2-70b", "--seq-len"], "expected one argument"),
])
def test_bad_input_one_line_exit_2(capsys, tmp_path, monkeypatch, argv, needle):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path))
    try:
        code = main(argv)
    except SystemExit as e:  # argparse usage errors
        code = e.code
    _, err = capsys.readouterr()
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_entry_point_subprocess():
    out = subprocess.run([sys.executable, "-m", "trainperf.cli.main", "mfu", *SEED003, "--step-time", "7.908",
                          "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["convention"] == "megatron"
    bad = subprocess.run([sys.executable, "-m", "trainperf.cli.main", "mfu", "--model", "nope", "--step-time", "1"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
