"""Robustness of the reader and the pipeline: bad input gives a clear result or one error line
(exit 2), never a traceback; streaming input (directory, gzip, stdin) parses like a file."""

from __future__ import annotations

import gzip
import io
import json
import random
import sys
from pathlib import Path

import pytest

from trainperf.cli.main import main
from trainperf.errors import InputFileError
from trainperf.ingest.pipeline import parse_log, strip_rank
from trainperf.ingest.reader import CHUNK_BYTES, MAX_LINE_CHARS, ReadStats, block_lines, iter_blocks, iter_log

LOGS = Path(__file__).parent / "fixtures" / "logs"
MT = ("completed step: {s}, seconds: 2.000, TFLOP/s/device: 100.000, Tokens/s/device: 1000.000, "
      "total_weights: 16000, loss: 1.000")


def mt_lines(n: int, start: int = 0) -> list[str]:
    return [MT.format(s=s) for s in range(start, start + n)]


def error_line(capsys, *argv: str) -> str:
    assert main(["parse", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_missing_empty_binary_unknown_give_one_line_errors(tmp_path, capsys):
    assert "does not exist" in error_line(capsys, str(tmp_path / "nope.log"))
    (tmp_path / "empty.log").write_bytes(b"")
    assert "is empty" in error_line(capsys, str(tmp_path / "empty.log"))
    (tmp_path / "bin.log").write_bytes(random.Random(0).randbytes(50_000))
    assert "binary" in error_line(capsys, str(tmp_path / "bin.log"))
    (tmp_path / "prose.log").write_text("hello\nworld\n" * 50)
    assert "no known training-log format" in error_line(capsys, str(tmp_path / "prose.log"))
    assert "unknown" in error_line(capsys, str(tmp_path / "prose.log"), "--format", "nonsense")
    assert "no timed step lines" in error_line(capsys, str(tmp_path / "prose.log"), "--format", "maxtext")
    assert "convention" in error_line(capsys, str(LOGS / "nanogpt_shakespeare_char.log.gz"), "--convention", "bogus")


def test_torchtitan_lines_without_timestamps_say_what_would_time_them(tmp_path, capsys):
    """Console lines copied without the logger's timestamps carry tps but no time: the error says
    which facts give the time, and with them the steps are timed as tokens / (tps x devices)."""
    log = tmp_path / "tt.log"
    log.write_text("".join(f"\x1b[31mstep: {s:2}  \x1b[32mloss: 9.{s}000  \x1b[33mmemory: 28.00GiB(29.47%)  "
                           f"\x1b[34mtps: 5,000  \x1b[36mtflops: 300.0  \x1b[35mmfu: 30.0%\x1b[39m\n"
                           for s in range(1, 6)))
    err = error_line(capsys, str(log))
    assert "5 step line(s)" in err and "--seq-len, --global-batch and --num-devices" in err
    assert main(["parse", str(log), "--seq-len", "8192", "--global-batch", "8", "--num-devices", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step_time_median_s"] == pytest.approx(8 * 8192 / (5000 * 8))


def test_garbage_mixed_encodings_and_truncated_lines_are_skipped_and_counted(tmp_path):
    rng = random.Random(1)
    parts: list[bytes] = []
    for i, line in enumerate(mt_lines(40)):
        parts.append(line.encode() + b"\n")
        if i % 5 == 0:
            parts.append(rng.randbytes(200).replace(b"\n", b"") + b"\n")  # binary garbage
        if i % 7 == 0:
            parts.append("Température élevée: 81°C\n".encode("latin-1"))  # another encoding
        if i % 9 == 0:
            parts.append(line[: rng.randrange(5, len(line))].encode() + b"\n")  # truncated copy
    parts.append(b"\x00" * 5000)  # NUL padding left by a crash on a network file system
    (tmp_path / "g.log").write_bytes(b"".join(parts))
    parsed = parse_log(tmp_path / "g.log", fmt="maxtext")
    meta = parsed.run.meta
    kept = [s.step for s in parsed.run.steps]
    assert kept[-1] == 39 and len(kept) >= 40 - 5  # a truncated copy may parse as its own step
    assert meta["skipped_lines"] >= 8 + 6
    assert meta["lines_total"] == meta["lines_used"] + meta["skipped_lines"]


def _lines(chunks: list[bytes], stats: ReadStats) -> list[str]:
    out: list[str] = []
    for item in iter_blocks(iter(chunks), stats, mark_partial=False):
        out += block_lines(item) if isinstance(item, bytes) else [item]
    return out


@pytest.mark.parametrize("size", [7, 1000, CHUNK_BYTES])
def test_overlong_line_is_cut_not_held_in_memory(size):
    big = "x" * (5 * MAX_LINE_CHARS)
    mid = "é" * (MAX_LINE_CHARS - 1)  # more bytes than MAX_LINE_CHARS, fewer characters: not overlong
    data = f"a\n{big}\nb\n{mid}\n{big}".encode()
    stats = ReadStats()
    lines = _lines([data[i:i + size] for i in range(0, len(data), size)], stats)
    assert lines == ["a", big[:MAX_LINE_CHARS], "b", mid, big[:MAX_LINE_CHARS]]
    assert stats.overlong_lines == 2


def test_truncated_gzip_keeps_what_was_read(tmp_path):
    data = gzip.compress(("\n".join(mt_lines(2000)) + "\n").encode())
    (tmp_path / "t.log.gz").write_bytes(data[: len(data) // 2])
    parsed = parse_log(tmp_path / "t.log.gz")
    assert parsed.run.meta["truncated_input"] is True
    assert 10 < len(parsed.run.steps) < 2000
    assert any("ended early" in n for n in parsed.run.meta["notes"])


def test_directory_of_rank_files_and_of_restart_segments(tmp_path):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in (1, 0, 2):
        (ranks / f"rank{r}.log").write_text("\n".join(mt_lines(10)) + "\n")
    parsed = parse_log(ranks)
    assert parsed.run.meta["rank_used"] == 0 and len(parsed.run.steps) == 10
    assert parsed.run.meta["restarts"] == []
    segs = tmp_path / "segs"
    segs.mkdir()
    (segs / "job-1.out").write_text("\n".join(mt_lines(30)) + "\n")
    (segs / "job-2.out").write_text("\n".join(mt_lines(30, start=20)) + "\n")
    (segs / "core.bin").write_bytes(b"\x00\x01\x02" * 1000)
    parsed = parse_log(segs)
    meta = parsed.run.meta
    assert meta["restarts"][0]["from_step"] == 29 and meta["restarts"][0]["to_step"] == 20
    assert meta["superseded_steps"] == 10
    steps = [s.step for s in parsed.run.steps]
    assert steps == sorted(steps) and steps[-1] == 49 and len(steps) == 50 - len(meta["restart_warmup_dropped"])


@pytest.mark.parametrize("line, rank, rest", [
    ("[rank3]:step: 1", 3, "step: 1"), ("[default12]:x", 12, "x"), ("7: completed", 7, "completed"),
    ("  3: hello", 3, "hello"), ("[1,5]<stdout>:iter 1", 5, "iter 1"), ("2024-05-01 12:00", None, "2024-05-01 12:00"),
    ("[batch=1/10]:", None, "[batch=1/10]:"),
])
def test_rank_prefixes(line, rank, rest):
    assert strip_rank(line) == (rest, rank)


def test_stdin(monkeypatch, capsys):
    data = (LOGS / "megatron_llama2_7b_restart.log").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["parse", "-", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["format"] == "megatron" and out["steps_total"] == 19


def test_json_keys_and_human_output(capsys):
    log = str(LOGS / "maxtext_llama2_70b_64xh100.log")
    assert main(["parse", log, "--device", "h100-sxm", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("format", "steps", "skipped_lines", "step_time_median_s", "tokens_per_s_per_device", "mfu_pct",
                "claimed"):
        assert key in out
    assert out["claimed"]["tflops_per_device"] > 0
    assert main(["parse", log]) == 0
    text = capsys.readouterr().out
    assert "format: maxtext (auto-detected" in text and "rates need" in text and "the device" in text


def test_format_override_and_save(tmp_path, capsys):
    log = tmp_path / "m.log"
    log.write_text("\n".join(mt_lines(20)) + "\n")
    assert main(["parse", str(log), "--format", "maxtext", "--save", str(tmp_path / "run.jsonl"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["format_detection"] == "given with --format"
    from trainperf.records.jsonl import read_run

    assert len(read_run(tmp_path / "run.jsonl").steps) == 20


def test_inconsistent_workload_is_one_line_error(tmp_path, capsys):
    log = tmp_path / "m.log"
    log.write_text("\n".join(mt_lines(5)) + "\n")
    # 16000 tokens per step at seq 4000 = batch 4, not a multiple of 64 data-parallel ranks
    err = error_line(capsys, str(log), "--model", "llama2-7b", "--device", "h100-sxm", "--num-devices", "64",
                     "--seq-len", "4000")
    assert "global_batch" in err


def test_input_file_error_type(tmp_path):
    with pytest.raises(InputFileError):
        list(iter_log(tmp_path / "missing"))


def test_every_step_line_is_parsed_no_sampling(tmp_path):
    """Issue 12 item 6: no systematic sampling of long logs; every step is a record."""
    log = tmp_path / "long.log"
    log.write_text("\n".join(mt_lines(120_000) + mt_lines(200, start=119_900)) + "\n")  # restart at 119900
    parsed = parse_log(log)
    meta = parsed.run.meta
    assert meta["steps_parsed"] == 120_200 and meta["step_lines_sampled_out"] == 0
    assert meta["steps_sampling_stride"] == 1
    assert meta["restarts"][0]["to_step"] == 119_900 and meta["superseded_steps"] == 100
    steps = [s.step for s in parsed.run.steps]
    assert steps == sorted(steps) and steps[-1] == 120_099
    assert len(steps) == 120_100 - len(meta["restart_warmup_dropped"])
