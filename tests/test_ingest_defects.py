"""One test per parser defect of issue 12 (each failed before the fix): wrong numbers with exit 0,
and the formats as they are in the wild."""

from __future__ import annotations

import gzip
import io
import json
import math
import sys

import pytest

from trainperf.cli.main import main
from trainperf.errors import SpecError
from trainperf.ingest.pipeline import parse_log
from trainperf.records.jsonl import read_run
from trainperf.records.run_record import StepRecord

MEG = (" iteration {i:8d}/ 1000 | consumed samples: {s:12d} | elapsed time per iteration (ms): {ms} | learning rate: "
       "3.0E-04 | global batch size:   256 | lm loss: 2.0E+00 | loss scale: 1.0 | grad norm: 1.234 | number of "
       "skipped iterations:   0 | number of nan iterations:   0 |")
MT = ("completed step: {i}, seconds: {s}, TFLOP/s/device: 100.000, Tokens/s/device: 1000.000, "
      "total_weights: 16000, loss: 1.000")
NEMO = ("Training epoch 0, iteration {i}/99 | lr: 1e-05 | global_batch_size: 128 | global_step: {i} | "
        "reduced_train_loss: 11.96 | train_step_timing in s: {t} | TFLOPS_per_GPU: 1.25e+03 | consumed_samples: 6400")
TITAN = ("[rank0]:[titan] 2025-06-16 22:30:{sec:02d},000 - root - INFO - step: {i}  loss: {loss}  memory: 49.66GiB(52.28%)"
         "  tps: 5,856  tflops: 339.16  mfu: 34.29%")


def write(tmp_path, name: str, text: str):
    p = tmp_path / name
    p.write_text(text)
    return p


# --- a step is a complete line --------------------------------------------------------------------

@pytest.mark.parametrize("fmt, good, cut", [
    ("megatron", MEG.format(i=1, s=256, ms="973.8"), MEG.format(i=2, s=512, ms="973.8").split("(ms): ")[0] + "(ms): 9"),
    ("maxtext", MT.format(i=1, s="5.668"), "completed step: 2, seconds: 5.6"),
    ("nemo", NEMO.format(i=1, t="6.071"), NEMO.format(i=2, t="6.0").split(" | TFLOPS")[0]),
    ("nanogpt", "iter 1: loss 3.2, time 562.94ms", "iter 2: loss 3.7, time 56"),
])
def test_last_line_cut_mid_number_is_malformed_and_named(tmp_path, fmt, good, cut):
    """A job killed mid-write: '(ms): 9' (really 973.8) must not become a 0.009 s step."""
    log = write(tmp_path, f"{fmt}.log", "\n".join([good, good.replace(" 1", " 1", 1), cut]))  # no final newline
    parsed = parse_log(log)
    meta = parsed.run.meta
    assert meta["format"] == fmt
    assert [s.step for s in parsed.run.steps] == [1]
    assert meta["malformed_lines"] >= 1
    if fmt != "nanogpt":  # nanoGPT's regex needs the "ms" unit: it always rejected these
        assert meta["cut_lines"] == 1 and meta["cut_line_examples"][0]["line"] == 3
        assert any("cut mid-number" in n and "line 3" in n for n in meta["notes"])


def test_megatron_cut_in_the_middle_of_a_file_too(tmp_path):
    lines = [MEG.format(i=1, s=256, ms="973.8"), MEG.format(i=2, s=512, ms="973.8").split("(ms): ")[0] + "(ms): 9",
             MEG.format(i=3, s=768, ms="974.1")]
    parsed = parse_log(write(tmp_path, "m.log", "\n".join(lines) + "\n"))
    assert [s.step for s in parsed.run.steps] == [1, 3] and parsed.run.meta["cut_lines"] == 1


def test_impossible_steps_are_kept_flagged_and_left_out_of_the_median(tmp_path, capsys):
    """A 0.002 s MaxText step claiming 917,442 TFLOP/s per device; '(ms): 1e-300' on Megatron."""
    lines = [MT.format(i=i, s="2.000") for i in range(6)]
    lines.insert(3, "completed step: 3, seconds: 0.002, TFLOP/s/device: 917442.000, Tokens/s/device: 8000000.000, "
                    "total_weights: 16000, loss: 1.000")
    del lines[4]
    parsed = parse_log(write(tmp_path, "mt.log", "\n".join(lines) + "\n"))
    steps = parsed.run.steps
    assert len(steps) == 6 and steps[3].step_time_s == 0.002  # kept ...
    assert steps[3].flag and "917442" in steps[3].flag and "peak" in steps[3].flag  # ... flagged
    assert parsed.run.meta["flagged_steps"] == 1
    assert main(["parse", str(tmp_path / "mt.log"), "--json", "--warmup", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step_time_median_s"] == 2.0 and out["steps"] == 5
    assert any("impossible" in n for n in out["notes"])

    meg = [MEG.format(i=i, s=256 * i, ms="973.8") for i in range(1, 5)]
    meg[2] = MEG.format(i=3, s=768, ms="1e-300")
    parsed = parse_log(write(tmp_path, "meg.log", "\n".join(meg) + "\n"))
    s3 = parsed.run.steps[2]
    assert s3.step == 3 and s3.step_time_s == pytest.approx(1e-303) and "below" in s3.flag
    assert parsed.run.meta["flagged_steps"] == 1


def test_non_finite_step_time_is_kept_flagged_and_survives_jsonl(tmp_path):
    meg = [MEG.format(i=i, s=256 * i, ms="973.8") for i in range(1, 4)]
    meg[1] = MEG.format(i=2, s=512, ms="nan")
    parsed = parse_log(write(tmp_path, "meg.log", "\n".join(meg) + "\n"))
    s2 = parsed.run.steps[1]
    assert math.isnan(s2.step_time_s) and "not finite" in s2.flag
    # the flag round-trips through JSONL; a record without the key (older files) reads as unflagged
    d = StepRecord(step=1, step_time_s=1.0).to_dict()
    assert "flag" not in d and StepRecord.from_dict(d).flag is None
    assert StepRecord.from_dict({**d, "flag": "x", "step_time_s": 1e-9}).flag == "x"
    with pytest.raises(SpecError):
        StepRecord(step=1, step_time_s=float("nan"))  # unflagged: still validated


def test_flagged_steps_in_saved_jsonl(tmp_path):
    from trainperf.records.jsonl import write_run
    from trainperf.records.run_record import RunRecord

    steps = [StepRecord(step=i, step_time_s=1.0) for i in range(3)] + [StepRecord(step=3, step_time_s=1e-9, flag="x")]
    path = write_run(RunRecord(source="ingest", steps=steps), tmp_path / "r.jsonl")
    back = read_run(path)
    assert [s.flag for s in back.steps] == [None, None, None, "x"]


# --- the formats as they are in the wild ----------------------------------------------------------

def test_hf_training_bar_without_total_steps_line(tmp_path):
    """Model loading bar first (fast, 272 items), then the training bar: the longest-running wins."""
    text = ("Loading weights: 100%|████| 272/272 [00:00<00:00, 2812.46it/s]\n"
            + "".join(f" {s}%|█ | {s}/100 [00:{s:02d}<01:00,  1.50it/s]\n" for s in range(1, 40)))
    parsed = parse_log(write(tmp_path, "hf.log", text))
    assert [s.step for s in parsed.run.steps] == list(range(1, 40))
    assert parsed.run.steps[0].step_time_s == pytest.approx(1 / 1.5)


def test_hf_literal_caret_m_holds_several_bars(tmp_path):
    """A console paste keeps '\\r' as the two characters '^M': every bar on the line counts."""
    bars = "^M".join(f" {s}%|█ | {s}/50 [00:{s:02d}<00:30,  2.00it/s]" for s in range(1, 11))
    parsed = parse_log(write(tmp_path, "hf.log", bars + "\n"))
    assert [s.step for s in parsed.run.steps] == list(range(1, 11))
    assert all(s.step_time_s == 0.5 for s in parsed.run.steps)


def test_megatron_deepspeed_seconds_with_format_flag(tmp_path):
    line = ("[default7]: iteration    31214/  115311 | consumed samples:     47768496 | consumed tokens:  97829879808 | "
            "elapsed time per iteration (s): 106.46 | learning rate: 5.279E-05 | global batch size:  2048 | "
            "lm-loss: 2.198845E+00 | grad norm: 0.242 | num zeros: 0.0 | number of skipped iterations:   0 | number "
            "of nan iterations:   0 | samples per second: 19.238 | TFLOPs: 147.29 |")
    parsed = parse_log(write(tmp_path, "ds.log", line + "\n"), fmt="megatron")
    (rec,) = parsed.run.steps
    assert rec.step_time_s == 106.46 and rec.loss == pytest.approx(2.198845) and rec.claimed_tflops_per_device == 147.29
    assert rec.claimed_tokens_per_s == pytest.approx(19.238 * 2048) and rec.rank == 7


def test_torchtitan_nan_loss_steps_are_kept(tmp_path):
    lines = [TITAN.format(sec=i, i=10 + i, loss="nan" if i >= 3 else "6.1384") for i in range(6)]
    parsed = parse_log(write(tmp_path, "t.log", "\n".join(lines) + "\n"))
    steps = parsed.run.steps
    assert [s.step for s in steps] == [11, 12, 13, 14, 15]  # step 10 has no predecessor
    assert all(s.step_time_s == pytest.approx(1.0) for s in steps)
    assert [s.extra.get("loss_not_finite") for s in steps] == [None, None, "nan", "nan", "nan"]
    assert any("non-finite loss" in n for n in parsed.run.meta["notes"])


def test_torchtitan_timestamp_going_backwards(tmp_path):
    secs = [0, 10, 5, 30, 40]  # the third line's clock went back 5 s
    lines = [TITAN.format(sec=s, i=10 * (k + 1), loss="6.0") for k, s in enumerate(secs)]
    parsed = parse_log(write(tmp_path, "t.log", "\n".join(lines) + "\n"))
    times = {s.step: s.step_time_s for s in parsed.run.steps}
    assert times == {20: pytest.approx(1.0), 40: pytest.approx(1.0), 50: pytest.approx(1.0)}  # not (30-5)/10
    assert any("backwards" in n for n in parsed.run.meta["notes"])


def test_nemo_tokens_per_sec_per_gpu(tmp_path):
    line = NEMO.format(i=5, t="6.071") + " | tokens_per_sec_per_gpu: 21592.3"
    (rec,) = parse_log(write(tmp_path, "n.log", line + "\n")).run.steps
    assert rec.claimed_tokens_per_s_per_device == 21592.3 and rec.claimed_tflops_per_device == 1250.0


def test_mixed_file_reports_every_stream(tmp_path, capsys):
    meg = [MEG.format(i=i, s=256 * i, ms="973.8") for i in range(1, 21)]
    mt = [MT.format(i=i, s="2.000") for i in range(1, 6)]
    parsed = parse_log(write(tmp_path, "mix.log", "\n".join(meg[:10] + mt + meg[10:]) + "\n"))
    meta = parsed.run.meta
    assert meta["format"] == "megatron" and len(parsed.run.steps) == 20
    (other,) = meta["other_streams"]
    assert other["format"] == "maxtext" and other["steps"] == 5 and other["step_time_median_s"] == 2.0
    assert any("also holds a maxtext stream" in n for n in meta["notes"])
    picked = parse_log(tmp_path / "mix.log", fmt="maxtext")
    assert len(picked.run.steps) == 5 and picked.run.meta["other_streams"][0]["format"] == "megatron"


def test_gzip_on_stdin(monkeypatch, capsys):
    data = gzip.compress(("\n".join(MT.format(i=i, s="2.000") for i in range(10)) + "\n").encode())
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["parse", "-", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["format"] == "maxtext" and out["steps_total"] == 10


# --- the speed path gives the same records as the line path ---------------------------------------

def test_column_records_have_every_stepRecord_field():
    import dataclasses

    from trainperf.records.step_columns import StepColumns

    full = StepRecord(step=1, step_time_s=1.0, tokens=2, loss=3.0, grad_norm=4.0, memory_GiB=4.5,
                      claimed_tokens_per_s=5.5, claimed_tokens_per_s_per_device=6.0, claimed_tflops_per_device=5.0,
                      claimed_mfu_pct=7.5, rank=7)
    cols = StepColumns({k: [getattr(full, k)] for k in dataclasses.asdict(full) if k not in ("rank", "extra")}, 7)
    assert dataclasses.asdict(cols.record_at(0)) == dataclasses.asdict(full)
    rec = cols[0]
    assert dataclasses.asdict(rec) == dataclasses.asdict(full) and rec == full
    rec.flag = "x"  # settable like any record, and kept
    assert cols[0].flag == "x" and StepRecord.flag is None


@pytest.mark.parametrize("fmt", ["megatron", "maxtext"])
def test_block_path_equals_line_path(fmt):
    import random

    from trainperf.ingest.base import ParseState
    from trainperf.ingest.pipeline import LineCounts, run_parser
    from trainperf.ingest.registry import get_parser

    rng = random.Random(3)
    lines = []
    for i in range(3000):
        ms = f"{rng.uniform(900, 1000):.1f}" if i != 1500 else "1e-300"
        step = (MEG.format(i=i, s=256 * i, ms=ms) if fmt == "megatron" else MT.format(i=i, s=f"{float(ms) / 1000:.3f}"))
        prefix = rng.choice(["", "0: ", "1: ", "[rank0]:", "[default1]:"])
        lines.append(prefix + step)
        if rng.random() < 0.1:
            lines.append(rng.choice(["0: warning: x", "  seq_length ........ 4096", "garbage | (ms): 9", step[:50]]))
    out = []
    for use_block in (True, False):
        parser = get_parser(fmt)
        if not use_block:
            parser.block_re = None
        state = ParseState(hints={"seq_len": 4096})
        counts = LineCounts()
        items = [("\n".join(lines[i:i + 700]) + "\n").encode() for i in range(0, len(lines), 700)]
        col = run_parser(iter(items), parser, state, counts)
        out.append(([s.to_dict() for s in col.steps], col.rank, counts.lines_total, counts.lines_used,
                     counts.other_rank_lines, state.malformed_lines))
    assert out[0] == out[1]
    assert out[0][1] == 0 and len(out[0][0]) > 1000


def test_parse_json_names_cut_lines_flags_and_streams(tmp_path, capsys):
    lines = [MT.format(i=i, s="2.000") for i in range(5)] + ["completed step: 5, seconds: 0.0000001, TFLOP/s/device: "
                                                             "1.0, Tokens/s/device: 1.0, total_weights: 16000, loss: 1.0"]
    log = write(tmp_path, "m.log", "\n".join([*lines, "completed step: 6, seconds: 2.0"]))
    assert main(["parse", str(log), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cut_lines"] == 1 and out["cut_line_examples"][0]["line"] == 7
    assert out["flagged_steps"] == 1 and out["flag_reasons"][0].startswith("step 5:")
    assert out["other_streams"] == [] and out["malformed_lines"] == 1
