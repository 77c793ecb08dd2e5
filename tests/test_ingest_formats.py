"""Each log format's fixture parses into the steps, facts and recomputed figures derived by hand.

Fixtures: tests/fixtures/logs (regenerate with make_fixtures.py there). Expected values come
from the seeds (seed 003: MaxText Llama-2-70B on 64 H100) and from the fixtures' construction
(claimed TFLOP/s = FLOPs per token under the framework's convention x tokens/s per device).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainperf.accounting.conventions import model_flops_per_token
from trainperf.cli.main import main
from trainperf.ingest.pipeline import parse_log
from trainperf.specs.model import ModelSpec

LOGS = Path(__file__).parent / "fixtures" / "logs"
REAL_LOGS = Path(__file__).parent / "fixtures" / "reallogs"
SEED_003_LINE = ("completed step: 49, seconds: 7.908, TFLOP/s/device: 460.480, Tokens/s/device: 1035.970, "
                 "total_weights: 524288, loss: 0.000")


def run_json(capsys, *argv: str) -> dict:
    assert main(["parse", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def claim(out: dict, metric: str) -> dict:
    return next(c for c in out["claims"] if c["metric"] == metric)


# --- MaxText / seed 003 -------------------------------------------------------------------------

def test_maxtext_fixture_facts_ranks_and_summary(capsys):
    out = run_json(capsys, str(LOGS / "maxtext_llama2_70b_64xh100.log"), "--device", "h100-sxm")
    assert out["format"] == "maxtext" and "auto-detected" in out["format_detection"]
    assert out["steps_total"] == 50 and out["warmup_steps"] == 5 and out["steps"] == 45
    assert out["rank_used"] == 0 and out["ranks_with_steps"] == [0]
    # model, devices, batch, sequence and dtype all come from the log; only the device from a flag
    fields = out["workload_fields"]
    assert fields["hardware.device"] == "flag --device"
    for key in ("model.preset", "hardware.num_devices", "training.global_batch", "training.seq_len",
                "training.precision"):
        assert fields[key].startswith("log (line"), key
    assert out["workload"].startswith("llama2-70b on 64x h100-sxm")
    assert out["tokens_per_step"] == 524288
    assert out["step_time_median_s"] == pytest.approx(7.908, abs=0.01)
    assert out["tokens_per_s_per_device"] == pytest.approx(524288 / 64 / out["step_time_median_s"])


def test_seed_003_recomputed_under_each_convention(tmp_path, capsys):
    """The seed's line alone, with what the log does not say given as flags."""
    log = tmp_path / "seed003.out"
    log.write_text(SEED_003_LINE + "\n")
    out = run_json(capsys, str(log), "--model", "llama2-70b", "--device", "h100-sxm", "--num-devices", "64",
                   "--seq-len", "4096", "--peak-tflops", "989")
    assert out["steps"] == 1 and out["step_time_median_s"] == 7.908
    assert out["workload_fields"]["training.global_batch"] == "log tokens per step 524288 / seq_len 4096"
    tps_dev = 128 * 4096 / 7.908 / 64
    assert out["tokens_per_s"] == pytest.approx(66298.43, abs=0.01)  # the seed's own figure
    rows = {r["convention"]: r for r in out["by_convention"]}
    model = ModelSpec.preset("llama2-70b")
    # The seed's MFU, 46.54%, counts 1.82e15 per sequence (nemo-legacy, no causal halving)
    assert rows["nemo-legacy"]["flops_per_token"] * 4096 == pytest.approx(1.82e15, rel=1e-3)
    assert rows["nemo-legacy"]["mfu_pct"] == pytest.approx(46.54, abs=0.03)
    # ... which is also what the log's TFLOP/s/device counts: 460.480 / 1035.970 per token
    implied = 460.480e12 / 1035.970
    assert rows["nemo-legacy"]["claimed_over_this"] == pytest.approx(1.0, abs=2e-4)
    assert implied == pytest.approx(rows["nemo-legacy"]["flops_per_token"], rel=2e-4)
    # Under trainperf's default (megatron: causal attention halved) the claim is 3.76% high
    meg = model_flops_per_token(model, 4096, "megatron")
    assert out["convention"] == "megatron"
    assert out["tflops_per_device"] == pytest.approx(meg * tps_dev / 1e12)
    assert out["mfu_pct"] == pytest.approx(100 * meg * tps_dev / 989e12)
    tf = claim(out, "tflops_per_device")
    assert tf["ratio"] == pytest.approx(implied / meg, rel=1e-3)
    assert "nemo-legacy" in tf["reason"] and "convention" in tf["reason"]
    assert claim(out, "tokens_per_s_per_device")["reason"].startswith("same basis")


def test_maxtext_device_count_derived_from_the_step_line(tmp_path):
    log = tmp_path / "a.log"
    log.write_text(SEED_003_LINE + "\n")
    parsed = parse_log(log)
    assert parsed.facts.values["num_devices"] == 64
    assert "total_weights" in parsed.facts.where["num_devices"]
    assert parsed.run.workload is None
    assert any("model" in m for m in parsed.run.meta["workload_missing"])


# --- torchtitan -----------------------------------------------------------------------------------

def test_torchtitan_timestamps_mesh_and_palm_claims(capsys):
    out = run_json(capsys, str(LOGS / "torchtitan_llama3_8b_8xh100.log"))
    assert out["format"] == "torchtitan"
    assert out["workload"].startswith("llama3-8b on 8x h100-sxm (fsdp=8)")
    assert out["workload_fields"]["hardware.device"].startswith("log device name 'NVIDIA H100 80GB HBM3'")
    assert out["log_facts"]["claimed_peak_tflops"] == pytest.approx(989.0)
    assert out["steps_total"] == 11 and out["rank_used"] == 0 and out["ranks_with_steps"] == [0, 1]
    # steps 10..100 are 10 steps apart at ~1.170 s each: (t_i - t_{i-1}) / 10
    assert out["step_time_median_s"] == pytest.approx(1.170, abs=0.01)
    assert out["tokens_per_step"] == 8 * 8192
    # torchtitan's tflops count 6N + 12LHQT (palm): the log's claim / palm recomputation = 1
    rows = {r["convention"]: r for r in out["by_convention"]}
    assert rows["palm"]["claimed_over_this"] == pytest.approx(1.0, abs=2e-3)
    mfu = claim(out, "mfu_pct")
    assert "988.9" in mfu["reason"] or "989" in mfu["reason"]


def test_torchtitan_without_timestamps_needs_tokens_and_devices(tmp_path):
    lines = [f"step: {s}  loss: 3.0  memory: 10.00GiB(12.00%)  tps: 8,192  tflops: 400.00  mfu: 40.00%"
             for s in (1, 2, 3)]
    log = tmp_path / "t.log"
    log.write_text("\n".join(lines) + "\n")
    bare = parse_log(log, fmt="torchtitan")
    assert bare.run.steps == [] and any("left out" in n for n in bare.run.meta["notes"])
    given = parse_log(log, fmt="torchtitan", overrides={"training.seq_len": 8192, "training.global_batch": 8,
                                                         "hardware.num_devices": 8})
    assert [s.step for s in given.run.steps] == [1, 2, 3]
    assert given.run.steps[0].step_time_s == pytest.approx(8 * 8192 / (8192 * 8))


# --- Megatron-LM / NeMo ---------------------------------------------------------------------------

def test_megatron_restart_args_and_legacy_convention(capsys):
    out = run_json(capsys, str(LOGS / "megatron_llama2_7b_restart.log"), "--device", "h100-sxm")
    assert out["format"] == "megatron"
    assert out["restarts"] == [{"line": out["restarts"][0]["line"], "from_step": 120, "to_step": 110}]
    assert out["superseded_steps"] == 2 and out["restart_warmup_dropped"] == [110]
    assert [s for s in out["log_facts"] if s in ("layers", "hidden", "heads", "ffn_hidden", "vocab")]
    assert out["workload"].startswith("custom on 16x h100-sxm (dp=2 tp=8)")
    assert out["workload_fields"]["model.layers"].startswith("log (line")
    assert out["tokens_per_step"] == 256 * 4096
    assert out["step_time_median_s"] == pytest.approx(7.45, abs=0.05)
    # 2024 Megatron counted attention without causal halving: the nemo-legacy count
    rows = {r["convention"]: r for r in out["by_convention"]}
    assert rows["nemo-legacy"]["claimed_over_this"] == pytest.approx(1.0, abs=1e-3)
    assert "nemo-legacy" in claim(out, "tflops_per_device")["reason"]
    assert out["malformed_lines"] == 0 and out["skipped_lines"] > 10  # traceback, warnings, timers


def test_nemo_printer(capsys):
    out = run_json(capsys, str(LOGS / "nemo_llama2_7b_8gpu.log"), "--model", "llama2-7b", "--device", "h100-sxm",
                   "--num-devices", "8", "--seq-len", "4096")
    assert out["format"] == "nemo" and out["steps_total"] == 30
    assert out["workload_fields"]["training.global_batch"].startswith("log (line")
    assert out["step_time_median_s"] == pytest.approx(6.31, abs=0.03)
    rows = {r["convention"]: r for r in out["by_convention"]}
    assert rows["nemo-legacy"]["claimed_over_this"] == pytest.approx(1.0, abs=2e-3)


def test_nemo_tqdm_postfix_redraws(tmp_path):
    bar = "".join(f"\rEpoch 0: : {s * 10}%|█| {s}/10 [00:{s:02d}<00:10, reduced_train_loss=3.{s}, "
                  f"global_step={s - 1}.000, consumed_samples={s * 64}.0, train_step_timing in s=2.50{s}]"
                  for s in range(1, 11))
    log = tmp_path / "nemo1.log"
    log.write_text(bar + bar[-200:] + "\n")  # a redraw of the last state must not count as a restart
    parsed = parse_log(log)
    assert parsed.run.meta["format"] == "nemo"
    assert [s.step for s in parsed.run.steps] == list(range(10)) and parsed.run.meta["restarts"] == []


# --- Composer / HF Trainer / nanoGPT / trainperf JSONL ---------------------------------------------

def test_composer_blocks_rates_and_facts(capsys):
    out = run_json(capsys, str(LOGS / "composer_mpt_7b_8xa100.log"), "--model", "mpt-7b", "--device",
                   "a100-sxm-80gb")
    assert out["format"] == "composer"
    assert out["steps_total"] == 25  # blocks 6..30: the speed monitor's window (5) is full
    assert out["num_devices"] == 8 and out["tokens_per_step"] == 256 * 2048
    assert out["step_time_median_s"] == pytest.approx(21.2, abs=0.1)
    assert claim(out, "tokens_per_s")["reason"].startswith("same basis")
    mfu = claim(out, "mfu_pct")
    assert "312" in mfu["reason"]
    rows = {r["convention"]: r for r in out["by_convention"]}
    assert rows["palm"]["claimed_over_this"] == pytest.approx(1.0, abs=2e-3)


def test_composer_json_lines(tmp_path):
    lines = [json.dumps({"time/batch": b, "throughput/batches_per_sec": 0.5, "throughput/samples_per_sec": 64.0,
                         "throughput/tokens_per_sec": 131072.0, "throughput/device/tokens_per_sec": 16384.0,
                         "loss/train/total": 2.0}) for b in range(1, 6)]
    log = tmp_path / "c.jsonl"
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_log(log)
    assert parsed.run.meta["format"] == "composer"
    assert [s.step_time_s for s in parsed.run.steps] == [2.0] * 5
    assert parsed.facts.values["num_devices"] == 8 and parsed.facts.values["seq_len"] == 2048
    assert parsed.facts.values["global_batch"] == 128


def test_hf_trainer_progress_bar_dicts_and_run_claims(capsys):
    out = run_json(capsys, str(LOGS / "hf_trainer_gpt2_2gpu.log"), "--model", "gpt2", "--device", "a100-sxm-40gb",
                   "--seq-len", "1024")
    assert out["format"] == "hf-trainer"
    assert out["steps_total"] == 72  # the evaluation bar (37 steps) is not the training bar
    assert out["num_devices"] == 2  # 32 / (8 per device x 2 accumulation)
    assert out["workload_fields"]["training.global_batch"].startswith("log (line")
    assert out["step_time_median_s"] == pytest.approx(0.80, abs=0.02)
    assert out["claimed"]["claimed_train_runtime"] == pytest.approx(61.2034)
    row = claim(out, "step_time_s (run mean)")
    assert row["claimed"] == pytest.approx(1 / 1.176) and "whole run" in row["reason"]


def test_hf_trainer_without_bar_gives_one_aggregate_record(tmp_path):
    log = tmp_path / "hf.log"
    log.write_text("{'loss': 2.5, 'learning_rate': 1e-05, 'epoch': 0.5}\n"
                   "{'train_runtime': 100.0, 'train_samples_per_second': 64.0, 'train_steps_per_second': 2.0, "
                   "'train_loss': 2.4, 'epoch': 1.0}\n")
    parsed = parse_log(log)
    (rec,) = parsed.run.steps
    assert rec.step == 200 and rec.step_time_s == 0.5 and rec.extra["aggregate"] is True
    assert parsed.facts.values["global_batch"] == 32


def test_nanogpt_gzip_with_workload_file(capsys):
    out = run_json(capsys, str(LOGS / "nanogpt_shakespeare_char.log.gz"), str(LOGS / "nanogpt_shakespeare_char.toml"))
    assert out["format"] == "nanogpt" and out["steps_total"] == 50
    assert out["tokens_per_step"] == 16384
    assert out["workload_fields"]["training.global_batch"] == "log tokens per step 16384 / seq_len 256"
    assert out["workload_fields"]["model.layers"].startswith("workload file")
    # the first iterations print "mfu -100.00%" (not yet measured): read as missing
    parsed = parse_log(LOGS / "nanogpt_shakespeare_char.log.gz")
    assert all(s.claimed_mfu_pct is None for s in parsed.run.steps[:5])
    assert parsed.run.steps[0].step_time_s == pytest.approx(31.01244)
    # nanoGPT's MFU is palm FLOPs against 312 TFLOP/s; same timing basis, so ~ trainperf's palm MFU
    rows = {r["convention"]: r for r in out["by_convention"]}
    assert out["claimed"]["mfu_pct"] == pytest.approx(rows["palm"]["mfu_pct"], rel=0.01)


def test_trainperf_jsonl_round_trip(tmp_path, capsys):
    from trainperf.records.jsonl import write_run
    from trainperf.records.run_record import RunRecord, StepRecord
    from trainperf.specs.workload_file import load_workload

    w = load_workload(None, {"model.preset": "llama3-8b", "hardware.device": "h100-sxm",
                             "hardware.num_devices": 8, "training.seq_len": 8192, "training.global_batch": 8})
    steps = [StepRecord(step=i, step_time_s=1.0 + (0.5 if i == 0 else 0.0), tokens=65536) for i in range(20)]
    path = write_run(RunRecord(source="bench", steps=steps, workload=w, meta={"name": "mine"}), tmp_path / "r.jsonl")
    out = run_json(capsys, str(path))
    assert out["format"] == "trainperf" and out["steps_total"] == 20
    assert out["workload_fields"]["model.layers"] == "log (trainperf run header)"
    assert out["step_time_median_s"] == 1.0
    assert out["tokens_per_s_per_device"] == pytest.approx(8192.0)


def test_megatron_deepspeed_variant(tmp_path):
    log = tmp_path / "mds.log"
    log.write_text(
        "  seq_length ...................................... 2048\n"
        " iteration      100/  500000 | consumed samples:        51200 | consumed tokens:    104857600 | elapsed "
        "time per iteration (ms): 12800.5 | learning rate: 1.000E-04 | global batch size:   512 | lm loss: 7.2E+00 | "
        "loss scale: 65536.0 | grad norm: 1.2 | num zeros: 0.0 | actual seqlen:  2048 | number of skipped "
        "iterations:   0 | number of nan iterations:   0 | samples per second: 40.0 | TFLOPs: 150.2 |\n")
    (rec,) = parse_log(log).run.steps
    assert rec.step == 100 and rec.step_time_s == pytest.approx(12.8005) and rec.tokens == 512 * 2048
    assert rec.claimed_tflops_per_device == 150.2 and rec.claimed_tokens_per_s == 40.0 * 2048
    assert rec.loss == 7.2 and rec.grad_norm == 1.2
    log.write_text(" iteration      100/  292968 | consumed samples:        51200 | consumed tokens:    104857600 | "
                   "elapsed time per iteration (s): 3.45 | learning rate: 5.999E-05 | global batch size:   512 | "
                   "lm loss: 6.789012E+00 | loss scale: 4096.0 | grad norm: 0.512 | samples per second: 148.406 | "
                   "tokens per gpu per second (tgs): 2374.502 | TFLOPs: 120.45 |\n")
    (rec,) = parse_log(log).run.steps  # the sequence from consumed tokens / samples: 2048
    assert rec.tokens == 512 * 2048 and rec.claimed_tokens_per_s_per_device == 2374.502


def test_modded_nanogpt_steps_from_cumulative_train_time(tmp_path):
    """modded-nanogpt's lines carry the cumulative training time: a step is the difference of
    consecutive times; a validation line gives no step, and the timer's reset (the time going
    down) gives none either. The script's own source, printed at the top of its logs, is no step."""
    src = ('print0(f"step:{step+1}/{train_steps} train_time:{approx_training_time_ms:.0f}ms '
           'step_avg:{approx_training_time_ms/(step + 1):.2f}ms", console=True)')
    lines = [src, "step:0/100 val_loss:10.8258 train_time:0ms step_avg:0.04ms"]
    lines += [f"step:{i}/100 train_time:{20000 + 70 * i}ms step_avg:{(20000 + 70 * i) / i:.2f}ms" for i in range(1, 11)]
    lines += ["step:10/100 val_loss:7.1234 train_time:20700ms step_avg:2070.00ms",
              "step:11/100 train_time:75ms step_avg:nanms",  # the reset after warm-up
              "step:12/100 train_loss:6.9 train_time:155ms step_avg:77.50ms",
              "step:14/100 train_time:315ms step_avg:78.75ms"]
    log = tmp_path / "modded.log"
    log.write_text("\n".join(lines) + "\n")
    steps = {s.step: s for s in parse_log(log).run.steps}
    assert parse_log(log).format == "nanogpt"
    assert steps[1].step_time_s == pytest.approx(20.07)  # compile and warm-up land on the first step
    assert [steps[i].step_time_s for i in range(2, 11)] == pytest.approx([0.07] * 9)
    assert 11 not in steps and steps[12].step_time_s == pytest.approx(0.08) and steps[12].loss == 6.9
    assert steps[14].step_time_s == pytest.approx(0.08)  # 160 ms over two steps


LLMC_TABLE = """+-----------------------+----------------------------------------------------+
| Parameter             | Value                                              |
+-----------------------+----------------------------------------------------+
| micro batch size B    | 16                                                 |
| sequence length T     | 1024                                               |
| total batch size      | 131072                                             |
| precision             | BF16                                               |
| device                | NVIDIA H100 80GB HBM3                              |
| peak TFlops           | 989.5                                              |
| max_sequence_length T | 1024                                               |
| num_layers L          | 12                                                 |
| num_heads NH          | 12                                                 |
| channels C            | 768                                                |
| padded_vocab_size Vp  | 50304                                              |
| num_processes         | 8                                                  |
+-----------------------+----------------------------------------------------+
"""


@pytest.mark.parametrize("layout", [
    "step {i:4d}/18865 | loss 10.5{i} (+1.2z)| norm 1.0 (+0.1z)| lr 1.00e-04 | {ms} ms | 40.1% bf16 MFU | {tps} tok/s",
    "step {i:4d}/18865 | train loss 10.5{i} | norm 1.0 | lr 1.00e-04 | {ms} ms | 40.1% bf16 MFU | {tps} tok/s",
    "step {i}/74: train loss 10.5{i} (acc 10.5{i}) ({ms} ms, {tps} tok/s)",
])
def test_llmc_step_layouts(tmp_path, layout):
    """llm.c's three step-line layouts: the step's own milliseconds; its tokens from the printed
    global tok/s (rounded to a whole number) times the seconds, taken to the nearest multiple of
    64: 131072 tokens in 0.32768 s is 400,000 tok/s, printed as 400000 or (at 0.33 s) 397188."""
    rows = [(1, "327.68", "400000"), (2, "330.00", "397188"), (3, "327.68", "400000")]
    log = tmp_path / "llmc.log"
    log.write_text("\n".join(layout.format(i=i, ms=ms, tps=tps) for i, ms, tps in rows) + "\n")
    parsed = parse_log(log)
    assert parsed.format == "nanogpt"
    steps = parsed.run.steps
    assert [s.step for s in steps] == [1, 2, 3]
    assert [s.step_time_s for s in steps] == pytest.approx([0.32768, 0.33, 0.32768])
    assert [s.tokens for s in steps] == [131072] * 3
    assert steps[0].loss == pytest.approx(10.51) and steps[0].claimed_tokens_per_s == 400000.0


def test_llmc_table_gives_the_gpt2_workload(tmp_path, capsys):
    """The configuration table names the model, batch, devices and GPU; GPT-2's fixed parts (GeLU
    MLP of 4 C, tied embeddings) follow from ``channels C``: tokens/s per device = 131072 / 0.32768
    / 8 = 50,000, MFU claimed as printed."""
    log = tmp_path / "llmc.log"
    log.write_text(LLMC_TABLE + "".join(
        f"step {i:4d}/100 | loss 9.0 (+0.0z)| norm 1.0 (+0.0z)| lr 1e-4 | 327.68 ms | 4.9% bf16 MFU | 400000 tok/s\n"
        for i in range(1, 6)))
    out = run_json(capsys, str(log))
    w = out["workload"]
    assert "8x h100-sxm" in w and "seq 1024" in w and "global batch 128" in w and "micro batch 16" in w
    facts = out["log_facts"]
    assert (facts["layers"], facts["heads"], facts["hidden"], facts["ffn_hidden"]) == (12, 12, 768, 3072)
    assert facts["mlp"] == "gelu" and facts["tied_embeddings"] is True and facts["vocab"] == 50304
    assert out["tokens_per_s_per_device"] == pytest.approx(50000.0)
    mfu = claim(out, "mfu_pct")
    assert mfu["claimed"] == pytest.approx(4.9) and "documents llm.c" in mfu["reason"]
    # llm.c's own count for this GPT-2 (124,475,904 parameters with the padded vocabulary):
    # 6 x 124,475,904 + 6 x 12 x 768 x 1024 = 803,478,528 FLOPs per token
    llmc = next(r for r in out["by_convention"] if r["convention"] == "llm.c")
    assert llmc["flops_per_token"] == pytest.approx(803_478_528)


def test_llmc_cpu_reference_and_nanogpt_eval_lines(tmp_path):
    """train_gpt2.c prints ``step N: train loss L (took T ms)``; nanoGPT's evaluation line
    ``step N: train loss L, val loss V`` has no time and gives no step."""
    log = tmp_path / "cpu.log"
    log.write_text("step 0: train loss 5.356189 (took 1452.121000 ms)\nval loss 4.828473\n"
                   "step 1: train loss 4.301033 (took 1288.673000 ms)\n")
    assert [(s.step, s.step_time_s) for s in parse_log(log).run.steps] == [(0, 1.452121), (1, 1.288673)]
    nano = tmp_path / "nano.log"
    nano.write_text("step 0: train loss 10.9876, val loss 10.9880\n"
                    "iter 0: loss 10.9712, time 31245.11ms, mfu -100.00%\niter 10: loss 9.5123, time 301.23ms, mfu 45.12%\n")
    assert [s.step for s in parse_log(nano).run.steps] == [0, 10]
    nano.write_text("iter 0: loss 10.97, time 31245.11 ms, mfu -100.00%\niter 10: loss 9.51, time 301.23 ms, mfu 45.12%\n")
    assert [(s.step, s.step_time_s) for s in parse_log(nano).run.steps] == [(0, 31.24511), (10, 0.30123)]


def test_nanochat_steps_tokens_and_claims(tmp_path):
    """nanochat: ``dt`` is the step's time; the tokens are the printed total batch size, else the
    global tok/sec times dt (1,024,000 x 0.512 s = 524,288); the MFU is per GPU against 989."""
    lines = [f"step {i:05d}/21400 (0.0{i}%) | loss: 9.{i}00000 | lrm: 1.00 | dt: 512.00ms | tok/sec: 1,024,000 | "
             f"mfu: 45.70 | total time: 0.0{i}m" for i in range(1, 4)]
    log = tmp_path / "nanochat.log"
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_log(log)
    assert parsed.format == "nanogpt"
    steps = parsed.run.steps
    assert [(s.step, s.step_time_s, s.tokens) for s in steps] == [(i, 0.512, 524288) for i in range(1, 4)]
    assert steps[0].claimed_mfu_pct == 45.7 and steps[0].claimed_tokens_per_s == 1024000.0
    assert parsed.facts.values["claimed_peak_tflops"] == 989.0
    log.write_text("Total batch size 262,144 => gradient accumulation steps: 1\n" + lines[0] + "\n")
    assert parse_log(log).run.steps[0].tokens == 262144


def test_hf_trl_num_tokens_give_tokens_per_step(tmp_path):
    """TRL's ``num_tokens`` (tokens seen so far, every process) at the bar's step: the median change
    per step between dicts: (262144 - 131072) / (20 - 10) = 13107.2 -> 13107; a single dict gives
    its count over its step."""
    bar = "{p:3d}%|#         | {n}/100 [00:{n:02d}<01:30,  1.00it/s]"
    lines = [bar.format(p=n, n=n) for n in range(1, 11)]
    lines.append("{'loss': 1.5, 'grad_norm': 0.9, 'learning_rate': 2e-05, 'num_tokens': 131072.0, 'epoch': 0.1}")
    lines += [bar.format(p=n, n=n) for n in range(11, 21)]
    lines.append("{'loss': 1.4, 'grad_norm': 0.8, 'learning_rate': 2e-05, 'num_tokens': 262144.0, 'epoch': 0.2}")
    log = tmp_path / "trl.log"
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_log(log)
    assert parsed.format == "hf-trainer" and parsed.facts.values["tokens_per_step"] == 13107
    log.write_text("\n".join(lines[:11]) + "\n")
    assert parse_log(log).facts.values["tokens_per_step"] == 13107  # 131072 / 10


def test_composer_progress_bar(tmp_path):
    """Composer's default console output, the training bar counting batches: a step's time is the
    bar's smoothed rate (s/ba, or 1 / ba/s), numbered across epochs; the postfix gives the loss;
    the first update (no rate yet) and a redraw give no step."""
    bar = ("train          Epoch {e:3d}:   {p:2d}%|#        | {n}/4 [00:0{n}<00:0{r},  {rate}, "
           "loss/train/total={loss}]")
    ups = ["train          Epoch   0:    0%|         | 0/4 [00:00<?, ?ba/s]"]
    ups += [bar.format(e=0, p=25 * n, n=n, r=4 - n, rate=rate, loss=7 - n / 10)
            for n, rate in ((1, "2.00s/ba"), (2, "1.50s/ba"), (2, "1.50s/ba"), (3, "0.80ba/s"))]
    ups.append(bar.format(e=1, p=25, n=1, r=3, rate="1.25s/ba", loss=6.5))
    log = tmp_path / "composer.log"
    log.write_text("\r".join(ups) + "\n")
    parsed = parse_log(log)
    assert parsed.format == "composer"
    got = [(s.step, s.step_time_s, s.loss) for s in parsed.run.steps]
    assert got == [(1, 2.0, 6.9), (2, 1.5, 6.8), (3, 1.25, pytest.approx(6.7)), (5, 1.25, 6.5)]


def test_torchtitan_validation_and_checkpoint_time_is_no_steps(tmp_path):
    """Validation and checkpoint saving run after a step's line and log when they end: the next
    step is timed from that line (1.5 s each here), not from the step line before (11.5 s)."""
    pre = "[rank0]:[titan] 2025-06-01 10:00:{ts} - root - INFO - "
    step = "step: {n:2d}  loss: {loss:7.4f}  grad_norm:  2.0000  memory: 40.00GiB(42.11%)  tps: 5,461  tflops: 316.00  mfu: 31.95%"
    lines = [pre.format(ts="05,000") + step.format(n=1, loss=12.0), pre.format(ts="06,500") + step.format(n=2, loss=11.5),
             pre.format(ts="16,500") + "validate step:  2  loss: 10.9000  memory: 41.00GiB(43.16%)",
             pre.format(ts="18,000") + step.format(n=3, loss=11.0),
             pre.format(ts="28,000") + "Finished saving the checkpoint (or staging if async is enabled)in 10.00 seconds.",
             pre.format(ts="29,500") + step.format(n=4, loss=10.5), pre.format(ts="31,000") + step.format(n=5, loss=10.4)]
    log = tmp_path / "tt.log"
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_log(log)
    assert [(s.step, s.step_time_s) for s in parsed.run.steps] == [(2, 1.5), (3, 1.5), (4, 1.5), (5, 1.5)]
    assert any("validation or checkpoint" in n for n in parsed.run.meta["notes"])


def test_hf_train_metrics_block(tmp_path):
    """The example scripts' ``***** train metrics *****`` block: the runtime from H:MM:SS.ss
    (0:12:34.56 = 754.56 s), total_flos from GF (2^30 FLOPs); without a bar, one aggregate
    record of 754.56 / 939 steps; devices 32 / (8 x 1) = 4."""
    log = tmp_path / "hf.log"
    log.write_text("***** Running training *****\n  Instantaneous batch size per device = 8\n"
                   "  Total train batch size (w. parallel, distributed & accumulation) = 32\n"
                   "  Gradient Accumulation steps = 1\n  Total optimization steps = 939\n"
                   "***** train metrics *****\n  epoch                    =        3.0\n"
                   "  total_flos               =  1456789GF\n  train_loss               =     2.3456\n"
                   "  train_runtime            = 0:12:34.56\n  train_samples_per_second =     39.756\n"
                   "  train_steps_per_second   =      1.244\n")
    parsed = parse_log(log)
    facts = parsed.facts.values
    assert facts["claimed_train_runtime"] == pytest.approx(754.56) and facts["num_devices"] == 4
    assert facts["claimed_total_flos"] == 1456789 * 2**30 and facts["claimed_train_loss"] == 2.3456
    (rec,) = parsed.run.steps
    assert rec.step_time_s == pytest.approx(754.56 / 939)


def test_torchtitan_start_line_with_gradient_accumulation(tmp_path):
    """Newer torchtitan puts the gradient accumulation steps between the global batch and the
    sequence length (the line was not read at all): the micro batch is local batch / steps."""
    pre = "[rank0]:[titan] 2025-06-01 10:00:{ts} - root - INFO - "
    step = "step: {n:2d}  loss: 10.0000  grad_norm:  2.0000  memory: 40.00GiB(42.11%)  tps: 6,150  tflops: 356.00  mfu: 36.00%"
    log = tmp_path / "tt.log"
    log.write_text("\n".join([
        pre.format(ts="00,000") + "Training starts at step 1, with local batch size 4, global batch size 32, "
                                  "gradient accumulation steps 2, sequence length 8192, total steps 100 (warmup 10)",
        pre.format(ts="05,000") + step.format(n=1), pre.format(ts="06,330") + step.format(n=2)]) + "\n")
    facts = parse_log(log).facts.values
    assert (facts["global_batch"], facts["seq_len"], facts["micro_batch"]) == (32, 8192, 2)


def test_torchtitan_model_args_of_an_unnamed_flavour(tmp_path):
    """``Building llama3 debugmodel with TransformerModelArgs(dim=256, n_layers=6, n_heads=16,
    n_kv_heads=None, vocab_size=2000, multiple_of=256, ffn_dim_multiplier=None, ...)``: no preset
    names it, so the shape comes from the arguments; the MLP as torchtitan's FeedForward sizes it:
    int(2 * 4 * 256 / 3) = 682, rounded up to a multiple of 256: 768. Llama 3 8B's arguments
    give 14336 (1.3 x 10922 = 14198 -> 14336), and its preset wins."""
    pre = "[rank0]:[titan] 2025-06-01 09:59:03,000 - root - INFO - Building llama3 {f} with TransformerModelArgs("
    args = ("_enforced='x', dim={d}, n_layers={l}, n_heads={h}, n_kv_heads={kv}, vocab_size={v}, multiple_of={m}, "
            "ffn_dim_multiplier={x}, norm_eps=1e-05, rope_theta=500000, max_seq_len=2048, eos_id=0)")
    log = tmp_path / "tt.log"
    log.write_text(pre.format(f="debugmodel") + args.format(d=256, l=6, h=16, kv=None, v=2000, m=256, x=None) + "\n")
    f = parse_log(log).facts.values
    assert (f["hidden"], f["layers"], f["heads"], f["kv_heads"], f["vocab"], f["ffn_hidden"]) == (256, 6, 16, 16, 2000, 768)
    log.write_text(pre.format(f="8B") + args.format(d=4096, l=32, h=32, kv=8, v=128256, m=1024, x=1.3) + "\n")
    f = parse_log(log).facts.values
    assert f["ffn_hidden"] == 14336 and f["kv_heads"] == 8 and f["model_flavor"] == "llama3 8b"


def test_a_gpu_listing_names_the_device(tmp_path):
    """A gpustat or nvidia-smi listing in any format's log names the device (not the count: it
    lists the node's GPUs): NeMo's performance log prints gpustat's ``[0] NVIDIA B200 | ...``."""
    assert parse_log(REAL_LOGS / "nemo_2.log").facts.values["device_name"] == "NVIDIA B200"
    smi = ("|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |\n"
           "| N/A   33C    P0             69W /  700W |       4MiB /  81559MiB |      0%      Default |\n")
    log = tmp_path / "meg.log"
    log.write_text(smi + " iteration       10/    1000 | consumed samples:         1280 | elapsed time per iteration "
                   "(ms): 6073.2 | learning rate: 1.5E-05 | global batch size:   128 | lm loss: 1.1E+01 | loss scale: 1.0 "
                   "| grad norm: 5.123 | number of skipped iterations:   0 | number of nan iterations:   0 |\n")
    parsed = parse_log(log, overrides={"training.seq_len": 4096})
    assert parsed.facts.values["device_name"] == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(("args", "policy"), [
    ({"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": "4"}, "full:4"),
    ({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": "1"}, "full"),
    ({"recompute_granularity": "selective", "recompute_modules": "['core_attn']"}, "selective"),
    ({"recompute_granularity": "selective", "recompute_modules": "['core_attn', 'moe_act']"},
     "selective:core_attn+moe_act"),
    ({"recompute_granularity": "None", "recompute_method": "None"}, "none"),
])
def test_megatron_argument_dump_plan_facts(tmp_path, args, policy):
    """The argument dump's recompute arguments in Megatron's names, read as trainperf's policy;
    sequence parallelism, the distributed optimizer, the virtual pipeline and the experts too."""
    dump = {"world_size": "64", "tensor_model_parallel_size": "4", "pipeline_model_parallel_size": "2",
            "virtual_pipeline_model_parallel_size": "4", "sequence_parallel": "True",
            "use_distributed_optimizer": "True", "num_experts": "8", "moe_router_topk": "2",
            "normalization": "RMSNorm", "seq_length": "4096", **args}
    lines = [f"  {k} {'.' * (40 - len(k))} {v}" for k, v in sorted(dump.items())]
    lines.append(" iteration       10/    1000 | consumed samples:         1280 | elapsed time per iteration (ms): "
                 "6073.2 | learning rate: 1.5E-05 | global batch size:   128 | lm loss: 1.1E+01 | loss scale: 1.0 | "
                 "grad norm: 5.123 | number of skipped iterations:   0 | number of nan iterations:   0 |")
    log = tmp_path / "meg.log"
    log.write_text("\n".join(lines) + "\n")
    from trainperf.specs.checkpointing import framework_policy

    f = parse_log(log).facts.values
    assert framework_policy(f["activation_checkpointing"])[0] == policy
    assert (f["sp"], f["zero_stage"], f["vpp"], f["moe_experts"], f["moe_topk"], f["norm"]) == (True, 1, 4, 8, 2, "rmsnorm")


def test_nemo_config_plan_facts(tmp_path):
    """The configuration NeMo prints (YAML: ``  key: value``): parallel degrees, sequence
    parallelism and the recompute settings (NeMo 1's ``activations_checkpoint_*`` names too)."""
    config = ["  tensor_model_parallel_size: 4", "  pipeline_model_parallel_size: 2", "  context_parallel_size: 2",
              "  virtual_pipeline_model_parallel_size: null", "  sequence_parallel: true", "  seq_length: 8192",
              "  activations_checkpoint_granularity: full", "  activations_checkpoint_method: block",
              "  activations_checkpoint_num_layers: 2", "  use_distributed_optimizer: true", "  bf16: true",
              "  fp8: hybrid"]
    steps = [f"Training epoch 0, iteration {i}/99 | lr: 1e-05 | global_batch_size: 128 | global_step: {i} | "
             f"reduced_train_loss: 10.0 | train_step_timing in s: 6.07 | consumed_samples: {128 * (i + 1)}"
             for i in range(1, 4)]
    log = tmp_path / "nemo.log"
    log.write_text("\n".join(config + steps) + "\n")
    f = parse_log(log).facts.values
    assert (f["tp"], f["pp"], f["cp"], f["sp"], f["seq_len"]) == (4, 2, 2, True, 8192) and "vpp" not in f
    assert f["activation_checkpointing"] == "megatron:full:block:2"
    assert (f["zero_stage"], f["precision"]) == (1, "fp8")


def test_hf_training_arguments_dump(tmp_path):
    """The example scripts' ``TrainingArguments(...)`` dump, one field a line: the precision,
    gradient checkpointing (full recomputation of every decoder layer) and the per-device batch."""
    bar = "{p:3d}%|#         | {n}/100 [00:{n:02d}<01:30,  1.00it/s]"
    log = tmp_path / "hf.log"
    log.write_text("TrainingArguments(\n_n_gpu=1,\nbf16=True,\nfp16=False,\ngradient_accumulation_steps=1,\n"
                   "gradient_checkpointing=True,\nper_device_train_batch_size=8,\n)\n"
                   + "\n".join(bar.format(p=n, n=n) for n in range(1, 6)) + "\n")
    f = parse_log(log).facts.values
    assert (f["precision"], f["activation_checkpointing"], f["micro_batch"]) == ("bf16", "full", 8)


def test_llm_foundry_config(tmp_path):
    """LLM Foundry's YAML configuration: MPT's shape (the MLP expansion_ratio x d_model, GeLU), the
    precision and FSDP's activation checkpointing (every block: full)."""
    cfg = ["model:", "  name: mpt_causal_lm", "  d_model: 7168", "  n_heads: 64", "  n_layers: 48",
           "  expansion_ratio: 4", "  max_seq_len: 8192", "  vocab_size: 50432", "precision: amp_bf16",
           "fsdp_config:", "  sharding_strategy: FULL_SHARD", "  activation_checkpointing: true"]
    log = tmp_path / "foundry.log"
    log.write_text("\n".join(cfg) + "\n[batch=10/100]:\n\t Train time/batch: 9\n\t Train time/sample: 4608\n"
                   "\t Train throughput/batches_per_sec: 0.1\n\t Train throughput/samples_per_sec: 51.2\n")
    f = parse_log(log).facts.values
    assert (f["hidden"], f["heads"], f["layers"], f["ffn_hidden"], f["vocab"], f["mlp"]) == (
        7168, 64, 48, 28672, 50432, "gelu")
    assert (f["precision"], f["activation_checkpointing"], f["seq_len"]) == ("bf16", "full", 8192)
    assert (f["bias"], f["position"], f["tied_embeddings"]) == (False, "alibi", True)


@pytest.mark.parametrize(("remat", "policy"), [("full", "full"), ("minimal_flash", "minimal_flash"),
                                              ("save_dot_except_mlpwi", "save_dot_except_mlpwi"), ("custom", None)])
def test_maxtext_remat_policy_and_fp8(tmp_path, remat, policy):
    """``Config param remat_policy`` is the run's checkpointing where trainperf has the policy
    (``custom`` names no tensors in the dump: left to the user); ``quantization: fp8`` is fp8."""
    log = tmp_path / "maxtext.log"
    log.write_text(f"Config param remat_policy: {remat}\nConfig param dtype: bfloat16\nConfig param quantization: fp8\n"
                   "completed step: 1, seconds: 1.234, TFLOP/s/device: 123.456, Tokens/s/device: 4567.890, "
                   "total_weights: 65536, loss: 10.123\n")
    f = parse_log(log).facts.values
    assert f.get("activation_checkpointing") == policy and f["precision"] == "fp8"


def test_deepspeed_throughput_line_gives_the_peak_memory(tmp_path):
    """A DeepSpeed engine under an HF Trainer prints ``MaxMemAllocated=29.46GB`` (GiB: it divides
    by 1024**3): the run's peak memory, the largest such line's."""
    bar = "{p:3d}%|#         | {n}/100 [00:{n:02d}<01:30,  1.00it/s]"
    ds = ("[2024-05-01 10:00:0{n},000] [INFO] [timer.py:260:stop] epoch=0/micro_step={n}/global_step={n}, "
          "RunningAvgSamplesPerSec=20.39, CurrSamplesPerSec=20.57, MemAllocated=14.4GB, MaxMemAllocated={m}GB")
    lines = [x for n in range(1, 5) for x in (bar.format(p=n, n=n), ds.format(n=n, m=29.46 if n < 3 else 30.01))]
    log = tmp_path / "hf_ds.log"
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_log(log)
    assert parsed.format == "hf-trainer" and parsed.facts.values["memory_peak_GiB"] == 30.01


def test_megatron_dump_facts_that_do_nothing_do_not_refuse_the_plan(tmp_path, capsys):
    """A dense model's dump prints expert_tensor_parallel_size, and a run may set
    sequence_parallel with tp = 1 (Megatron turns it off): neither may make the plan invalid."""
    dump = {"world_size": "8", "tensor_model_parallel_size": "1", "pipeline_model_parallel_size": "1",
            "sequence_parallel": "True", "expert_tensor_parallel_size": "1", "num_experts": "None",
            "seq_length": "4096", "num_layers": "32", "hidden_size": "4096", "num_attention_heads": "32",
            "ffn_hidden_size": "11008", "padded_vocab_size": "32000", "swiglu": "True", "bf16": "True"}
    lines = [f"  {k} {'.' * (40 - len(k))} {v}" for k, v in sorted(dump.items())]
    lines += [f" iteration       {i}0/    1000 | consumed samples:         1280 | elapsed time per iteration (ms): "
              "6073.2 | learning rate: 1.5E-05 | global batch size:   128 | lm loss: 1.1E+01 | loss scale: 1.0 | "
              "grad norm: 5.123 | number of skipped iterations:   0 | number of nan iterations:   0 |" for i in (1, 2)]
    log = tmp_path / "meg.log"
    log.write_text("\n".join(lines) + "\n")
    out = run_json(capsys, str(log), "--device", "h100-sxm")
    assert out["workload"].startswith("custom on 8x h100-sxm (dp=8)")
    assert any("sequence parallelism on with tp = 1" in n for n in out["workload_notes"])
    assert "etp" not in out["log_facts"]
