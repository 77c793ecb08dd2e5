"""Readers of run records say what they skipped; damage costs at most its own line; interrupted
runs say so in compare and report."""

from __future__ import annotations

import json

import pytest

from trainperf.cli.main import main
from trainperf.records.jsonl import MAX_LINE_BYTES, describe_skipped, is_trainperf_jsonl, read_run, write_run
from trainperf.records.run_record import RunRecord, StepRecord
from trainperf.report.load import load_paths
from trainperf.specs.workload_file import load_workload

CPU_WORKLOAD = {"model.preset": "debug", "hardware.device": "cpu", "hardware.num_devices": 1,
                "training.seq_len": 128, "training.global_batch": 4, "training.precision": "fp32"}


def _record(path, n=10, **meta):
    steps = [StepRecord(step=i, step_time_s=0.5 + 0.01 * i) for i in range(n)]
    write_run(RunRecord(source="bench", steps=steps, workload=load_workload(None, CPU_WORKLOAD),
                        meta={"name": "r", **meta}), path)
    return path.read_bytes().splitlines(keepends=True)  # header, steps 0..n-1, end


@pytest.fixture
def damaged(tmp_path):
    """Steps 0..9 with: step 2 behind a NUL-filled block (kept), a NUL inside step 3, a
    non-UTF-8 byte inside step 4, a line of garbage, a bad step, a second run header, no end
    line and step 9 cut in the middle."""
    lines = _record(tmp_path / "ok.jsonl")
    lines[3] = b"\0" * 64 + lines[3]
    lines[4] = lines[4].replace(b'"step_time_s"', b'"step_\0time_s"')
    lines[5] = lines[5].replace(b'"step_time_s"', b'"step_\xfftime_s"')
    extra = [b"garbage {\n", b'{"type":"step","step":"x","step_time_s":-1}\n', lines[0], b"[1, 2]\n",
             b'{"type":"mystery"}\n']
    body = lines[:6] + extra + lines[6:10] + [lines[10][:25]]
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(b"".join(body))
    return path


def test_damage_costs_at_most_its_line_and_every_skip_is_counted(damaged):
    run = read_run(damaged)
    assert [s.step for s in run.steps] == [0, 1, 2, 5, 6, 7, 8]  # 3 (NUL), 4 (bad byte), 9 (cut) lost
    assert run.interrupted
    assert run.meta["skip_reasons"] == {"nul": 1, "not_utf8": 1, "not_json": 1, "bad_step": 1,
                                        "extra_header": 1, "not_object": 1, "unknown_type": 1, "truncated": 1}
    assert run.meta["skipped_lines"] == 8
    text = describe_skipped(run.meta["skip_reasons"])
    assert text.startswith("8 lines skipped: ") and "1 with NUL bytes" in text and "1 not UTF-8" in text
    assert describe_skipped({}) == ""


def test_an_intact_record_skips_nothing(tmp_path):
    _record(tmp_path / "ok.jsonl")
    run = read_run(tmp_path / "ok.jsonl")
    assert len(run.steps) == 10 and not run.interrupted
    assert run.meta["skipped_lines"] == 0 and run.meta["skip_reasons"] == {}


def test_an_overlong_line_is_skipped_unread_and_the_next_kept(tmp_path):
    lines = _record(tmp_path / "ok.jsonl", n=3)
    path = tmp_path / "long.jsonl"
    path.write_bytes(lines[0] + b"x" * (2 * MAX_LINE_BYTES + 10) + b"\n" + b"".join(lines[1:]))
    run = read_run(path)
    assert len(run.steps) == 3 and run.meta["skip_reasons"] == {"too_long": 1}
    assert is_trainperf_jsonl(path)
    path.write_bytes(b"\xff\xfe binary" * 10)
    assert not is_trainperf_jsonl(path)


def test_compare_reports_skips_interruption_and_why_there_is_no_mfu(damaged, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "no-calibration"))
    assert main(["compare", str(tmp_path / "ok.jsonl"), str(damaged)]) == 0
    out = capsys.readouterr().out
    # both records name themselves "r": each row is labelled by its file (issue 31)
    assert "damaged.jsonl (run of r) (interrupted)" in out and "ok.jsonl (run of r) " in out
    assert f"note: damaged.jsonl (run of r): {damaged}: 8 lines skipped: " in out
    assert "interrupted (no end line); its 7 recorded step(s) are kept" in out
    # the workload is recorded in the header: the reason is the CPU's missing peak, not the workload
    assert "workload unknown" not in out and "MFU not computed (no peak" in out
    assert main(["compare", str(damaged), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["runs"]
    assert row["interrupted"] and row["skipped_lines"] == 8 and row["skip_reasons"]["nul"] == 1
    assert row["model"] == "debug" and "no peak" in row["no_mfu_because"]


def test_compare_without_a_workload_still_says_workload_unknown(tmp_path, capsys):
    write_run(RunRecord(source="bench", steps=[StepRecord(step=i, step_time_s=0.5) for i in range(4)]),
              tmp_path / "bare.jsonl")
    assert main(["compare", str(tmp_path / "bare.jsonl")]) == 0
    assert "no MFU for bare: workload unknown" in capsys.readouterr().out


def test_report_notes_skipped_lines_and_interruption(damaged, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "no-calibration"))
    (loaded,) = load_paths([damaged])
    assert any("8 lines skipped" in n for n in loaded.notes)
    out_dir = tmp_path / "rep"
    assert main(["report", str(damaged), "--out", str(out_dir), "--no-published", "--no-predict"]) == 0
    out = capsys.readouterr().out
    assert "r (interrupted)" in out and "8 lines skipped" in out
    md = (out_dir / "report.md").read_text()
    assert "8 lines skipped: " in md and "interrupted (no end line)" in md


def test_report_out_on_a_regular_file_says_so(tmp_path, capsys):
    _record(tmp_path / "ok.jsonl")
    target = tmp_path / "report.html"
    target.write_text("mine\n")
    for extra in ([], ["--force"]):
        assert main(["report", str(tmp_path / "ok.jsonl"), "--out", str(target), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "already exists and is a file, not a directory" in err
        assert "not a regular file" not in err and "give another path" in err
    assert target.read_text() == "mine\n"
