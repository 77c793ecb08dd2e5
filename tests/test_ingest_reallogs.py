"""The 13 real training logs in tests/fixtures/reallogs (provenance in SOURCES.md there) parse:
format auto-detected, step count and median step time equal to a count made by hand, and the
claims each log states are read.

The expected numbers were counted independently of the parsers, with grep/awk, e.g.::

    grep -o 'per iteration (ms): [0-9.]* |' megatron_1.log | awk '{print $4/1000}' | sort -g   # 8 values
    grep -o '[0-9]*/22184 \\[[^]]*it/s\\]' hf_1.log | grep -v '^0/'                             # 45 updates

(medians of the sorted values; torchtitan: differences of consecutive timestamps / steps).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from trainperf.cli.main import main
from trainperf.ingest.pipeline import parse_log

REAL = Path(__file__).parent / "fixtures" / "reallogs"

# file -> (format, steps, median step time in s over every parsed step, hand-counted)
HAND_COUNT = {
    "composer_1.log": ("composer", 1, 1024 / 2.7330),  # exact batch 4096/4 over samples_per_sec
    "hf_1.log": ("hf-trainer", 45, 1 / 4.39),  # 45 bar updates 500..22184 (the 0/22184 has no rate)
    "hf_3.log": ("hf-trainer", 2, 1 / 1.50),  # 1272/3414 and 3414/3414 at 1.50it/s; 1271/3414 is cut
    "maxtext_1.log": ("maxtext", 10, 5.668),
    "maxtext_3.log": ("maxtext", 10, 0.281),
    "megatron_1.log": ("megatron", 8, 107.51425),
    "megatron_4.log": ("megatron", 62, 126.6672),
    "megatron_7.log": ("megatron", 11, 106.33),
    "nanogpt_1.log": ("nanogpt", 11, 0.56266),
    "nemo_1.log": ("nemo", 6, 0.0316),
    "nemo_2.log": ("nemo", 5, 6.071),
    "torchtitan_1.log": ("torchtitan", 7, 1.121),  # 8 step lines; the first has no predecessor
    "torchtitan_2.log": ("torchtitan", 5, 1.3974),  # 6 step lines, log_freq 10
}


def test_every_real_log_is_a_fixture():
    assert sorted(p.name for p in REAL.glob("*.log")) == sorted(HAND_COUNT)
    sources = (REAL / "SOURCES.md").read_text()
    assert all(name in sources for name in HAND_COUNT)


@pytest.mark.parametrize("name", sorted(HAND_COUNT))
def test_real_log_format_steps_and_median(name):
    fmt, n, median = HAND_COUNT[name]
    parsed = parse_log(REAL / name)
    meta = parsed.run.meta
    assert meta["format"] == fmt and meta["format_detection"].startswith("auto-detected")
    assert len(parsed.run.steps) == n
    assert statistics.median(s.step_time_s for s in parsed.run.steps) == pytest.approx(median, rel=2e-3)
    # maxtext_1 names its chip (TFRT TPU v5: v5p), so its step 1, claiming 5x the chip's peak, is flagged
    assert meta["flagged_steps"] == (1 if name == "maxtext_1.log" else 0)


@pytest.mark.parametrize("name", sorted(HAND_COUNT))
def test_real_log_cli_exit_0(name, capsys):
    assert main(["parse", str(REAL / name), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["format"] == HAND_COUNT[name][0]


def _claims(name: str, key: str) -> list[float]:
    return [getattr(s, key) for s in parse_log(REAL / name).run.steps if getattr(s, key) is not None]


def test_megatron_deepspeed_seconds_rank_prefix_and_claims():
    """BLOOM-176B: '(s)' timing, '[default7]:' prefix, 'samples per second:' and 'TFLOPs:' claims."""
    parsed = parse_log(REAL / "megatron_7.log")
    steps = parsed.run.steps
    assert parsed.run.meta["rank_used"] == 7
    assert [s.step for s in steps] == [*range(31214, 31223), 31250, 31251]
    assert steps[0].step_time_s == 106.46 and steps[0].claimed_tflops_per_device == 147.29
    assert statistics.median(s.claimed_tflops_per_device for s in steps) == pytest.approx(147.46)
    # seq 2048 from consumed tokens / consumed samples; tokens/s = samples per second x seq
    assert parsed.facts.values["seq_len"] == 2048 and parsed.facts.values["global_batch"] == 2048
    assert steps[0].claimed_tokens_per_s == pytest.approx(19.238 * 2048)
    assert steps[0].tokens == 2048 * 2048 and steps[0].loss == pytest.approx(2.198845)


def test_megatron_per_line_global_batch_is_in_the_log(capsys):
    assert main(["parse", str(REAL / "megatron_1.log"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "global_batch" in out["fields_in_log"] and "global_batch" not in out["fields_not_in_log"]
    assert out["log_facts"]["global_batch"] == 1024


def test_megatron_4_args_resolve_the_model():
    facts = parse_log(REAL / "megatron_4.log").facts.values
    assert facts["vocab"] == 50688 and facts["mlp"] == "gelu"  # padded vocab; no swiglu in the dump
    assert (facts["layers"], facts["hidden"], facts["heads"], facts["ffn_hidden"]) == (64, 8192, 32, 32768)
    assert (facts["tp"], facts["pp"], facts["num_devices"], facts["seq_len"]) == (4, 16, 64, 1024)
    assert facts["precision"] == "fp16" and facts["global_batch"] == 1024
    # "checkpoint_activations .... True" (2021 releases): every layer recomputed
    assert facts["activation_checkpointing"] == "megatron:full" and facts["head_dim"] == 256


def test_megatron_4_peak_memory_is_the_busiest_ranks(capsys):
    """report_memory on 63 ranks, MiB; counted by hand: the largest ``max allocated`` is 17504.846
    (``grep -o 'max allocated: [0-9.]*' | sort -t: -k2 -g | tail -1``), the largest ``max
    reserved`` 24460.0."""
    facts = parse_log(REAL / "megatron_4.log").facts.values
    assert facts["memory_peak_GiB"] == pytest.approx(17504.84619140625 / 1024)
    assert facts["memory_reserved_peak_GiB"] == pytest.approx(24460.0 / 1024)
    assert main(["parse", str(REAL / "megatron_4.log"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_max_GiB"] == pytest.approx(17.0946, abs=1e-4)


def test_maxtext_claims_and_device_count():
    parsed = parse_log(REAL / "maxtext_1.log")
    assert parsed.facts.values["num_devices"] == 4 and parsed.facts.values["seq_len"] == 2048
    # the chip JAX names (TFRT TPU v5: a v5p; the doc says v5p-8) and per_device_batch_size 24 x 4 chips
    assert parsed.run.workload is None and parsed.facts.values["device_name"] == "TPU v5"
    assert parsed.facts.values["global_batch"] == 96  # total_weights 196,608 = 96 x 2048
    assert statistics.median(_claims("maxtext_1.log", "claimed_tflops_per_device")) == pytest.approx(134.9125)
    assert statistics.median(_claims("maxtext_1.log", "claimed_tokens_per_s_per_device")) == pytest.approx(8672.0495)
    assert statistics.median(_claims("maxtext_3.log", "claimed_tflops_per_device")) == pytest.approx(53.547)


def test_maxtext_step_above_the_device_peak_is_flagged(capsys):
    """maxtext_1's step 1 (0.319 s) claims 2400.7 TFLOP/s per chip: 5x a TPU v5p's 459."""
    assert main(["parse", str(REAL / "maxtext_1.log"), "--device", "tpu-v5p", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    meta = parse_log(REAL / "maxtext_1.log", overrides={"hardware.device": "tpu-v5p"}).run.meta
    assert meta["flagged_steps"] == 1 and meta["flag_reasons"][0].startswith("step 1:")
    assert any("impossible" in n for n in out["notes"])
    assert out["step_time_median_s"] == pytest.approx(5.668)


def test_nemo_claims_and_config():
    parsed = parse_log(REAL / "nemo_2.log")
    assert statistics.median(_claims("nemo_2.log", "claimed_tflops_per_device")) == pytest.approx(1250.0)
    f = parsed.facts.values
    assert (f["seq_len"], f["global_batch"], f["micro_batch"]) == (8192, 128, 2)
    assert parsed.run.steps[0].tokens is None or parsed.run.steps[0].tokens == 128 * 8192
    # "max_memory_reserved: 127785762816 | max_memory_allocated: 115792977920" (bytes)
    assert parsed.run.steps[0].memory_GiB == pytest.approx(115792977920 / 2**30)
    assert parsed.run.steps[0].extra["memory_reserved_GiB"] == pytest.approx(127785762816 / 2**30)


def test_torchtitan_claims():
    assert statistics.median(_claims("torchtitan_1.log", "claimed_tflops_per_device")) == pytest.approx(0.52)
    # the 5 timed steps 210..250 (step 200 has no predecessor and no tokens per step to time it)
    assert statistics.median(_claims("torchtitan_2.log", "claimed_mfu_pct")) == pytest.approx(34.34)
    assert statistics.median(_claims("torchtitan_2.log", "claimed_tokens_per_s_per_device")) == pytest.approx(5864)


def test_composer_exact_counters_precision_microbatch():
    parsed = parse_log(REAL / "composer_1.log")
    f = parsed.facts.values
    assert f["global_batch"] == 1024  # time/sample 4096 / time/batch 4, not 2.7330 / 0.0027 = 1012
    assert "seq_len" not in f  # 7348 = tokens/s / samples/s counts non-padding tokens: not a sequence length
    assert "exact counters" in parsed.facts.where["global_batch"]
    assert f["precision"] == "fp16" and f["micro_batch"] == 8 and f["num_devices"] == 16
    (step,) = parsed.run.steps
    assert step.tokens == round(29254495 / 4)
    assert step.claimed_tokens_per_s == 20082.8418 and step.claimed_tokens_per_s_per_device == 1255.1776


def test_hf_3_training_bar_is_the_longest_running_one(capsys):
    parsed = parse_log(REAL / "hf_3.log")
    assert [s.step for s in parsed.run.steps] == [1272, 3414]
    assert parsed.run.meta["cut_lines"] == 1  # "1271/3414 [12:38<22:43,  1.57" ran into the next bar
    assert parsed.facts.values["claimed_train_steps_per_second"] == 1.498
    assert any("longest-running" in n for n in parsed.run.meta["notes"])
    # TRL's num_tokens at epochs 1 and 3 of 3 (3414 steps): (2.787e5 - 9.289e4) / (3414 x 2 / 3) = 81.6;
    # the bar printed last before the first dict was a dataset map's, and the training bar's 1272
    # lags the epoch-3 dict's step (3414) by 2142 steps, so neither positions a dict
    assert parsed.facts.values["tokens_per_step"] == 82


def test_hf_1_losses_attached():
    steps = parse_log(REAL / "hf_1.log").run.steps
    assert steps[0].step == 500 and steps[0].loss == 2.5609 and steps[-1].step == 22184
