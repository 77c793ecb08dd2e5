"""``trainperf compare``: parsed logs and trainperf run records side by side on one convention."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainperf.cli.main import main

LOGS = Path(__file__).parent / "fixtures" / "logs"


def test_compare_logs_and_a_trainperf_run(tmp_path, capsys):
    (tmp_path / "mpt.toml").write_text('[model]\npreset = "mpt-7b"\n[hardware]\ndevice = "a100-sxm-80gb"\n')
    saved = tmp_path / "titan.jsonl"
    assert main(["parse", str(LOGS / "torchtitan_llama3_8b_8xh100.log"), "--save", str(saved), "--json"]) == 0
    capsys.readouterr()
    argv = ["compare", str(LOGS / "maxtext_llama2_70b_64xh100.log"),
            f"{LOGS / 'composer_mpt_7b_8xa100.log'}@{tmp_path / 'mpt.toml'}", str(saved), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["source"]: r for r in out["runs"]}
    assert set(rows) == {"log:maxtext", "log:composer", "ingest"}
    assert rows["log:maxtext"]["mfu_pct"] is None  # no device given: no MFU, and no guess
    assert rows["log:composer"]["num_devices"] == 8 and rows["log:composer"]["mfu_pct"] > 0
    assert rows["ingest"]["tflops_per_device"] == pytest.approx(359.7, rel=0.01)  # llama3-8b, megatron
    assert main([*argv[:-1], "--convention", "palm"]) == 0
    text = capsys.readouterr().out
    assert "convention: palm" in text and "no MFU for" in text


def test_compare_errors_are_one_line(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "missing.log")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["compare", "published:x"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_compare_a_parsed_log_with_its_published_record(tmp_path, capsys):
    (tmp_path / "h100.toml").write_text('[hardware]\ndevice = "h100-sxm"\n')
    argv = ["compare", f"{LOGS / 'maxtext_llama2_70b_64xh100.log'}@{tmp_path / 'h100.toml'}",
            "published:1", "--json"]  # the recipe's table: 6.999 s on 64 H100, MFU 52.59%
    assert main(argv) == 0
    log, pub = json.loads(capsys.readouterr().out)["runs"]
    assert pub["source"] == "published" and pub["claimed_mfu_pct"] == pytest.approx(52.59)
    # the fixture's steady median step is the recipe's worked example, 7.908 s give or take its noise
    assert log["mfu_pct"] == pytest.approx(pub["mfu_pct"] * 6.999 / 7.908, rel=0.002)
    assert main(["compare", "published:no-such-run"]) == 2
    assert "unknown" in capsys.readouterr().err


def test_compare_bench_output_directory(tmp_path, capsys):
    from trainperf.records.jsonl import write_run
    from trainperf.records.run_record import RunRecord, StepRecord

    out_dir = tmp_path / "bench-out"
    out_dir.mkdir()
    steps = [StepRecord(step=i, step_time_s=0.5) for i in range(10)]
    write_run(RunRecord(source="bench", steps=steps), out_dir / "steps.jsonl")
    (out_dir / "workload.toml").write_text(
        '[model]\npreset = "llama3-8b"\n[hardware]\ndevice = "h100-sxm"\nnum_devices = 8\n'
        '[training]\nseq_len = 8192\nglobal_batch = 8\n')
    assert main(["compare", str(out_dir), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert row["run"] == "bench-out" and row["source"] == "bench"
    assert row["tokens_per_s_per_device"] == pytest.approx(8 * 8192 / 0.5 / 8)
