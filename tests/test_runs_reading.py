"""Runs tables as other people write them: cell readers, stack defaults, torchtitan's local batch
under pipeline parallelism, the packaged table unchanged, a messy fixture, validate/calibrate-model
--data (trainperf.predict.runs_cells, stack_defaults, runs_table)."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hand_runs import parse_hand_rows
from trainperf.cli.main import main
from trainperf.errors import TrainperfError
from trainperf.predict.runs_cells import (
    CellError,
    read_count,
    read_flag,
    read_framework,
    read_global_batch,
    read_precision,
    read_rate,
    read_seconds,
    unstated,
)
from trainperf.predict.runs_table import load_table_runs, packaged_runs, parse_runs, reading_summary
from trainperf.predict.stack_defaults import DEFAULT_KEYS, read_defaults_table, stack_defaults
from trainperf.predict.stacks import STACKS, packaged_profile
from trainperf.predict.validate_runs import predict_row

FIXTURE = Path(__file__).parent / "fixtures" / "runs_tables" / "messy_runs.csv"


# ------------------------------------------------------------------------------- cell readers
@pytest.mark.parametrize("cell", ["", "  ", "-", "--", "—", "?", "n/a", "N/A", "na", "null", "unknown",
                                  "not stated", "Not stated in reachable text", "not read", "not given"])
def test_unstated_cells(cell):
    assert unstated(cell)
    assert read_count(cell) is None and read_seconds(cell) == (None, "") and read_precision(cell) is None


@pytest.mark.parametrize(("cell", "key", "value"), [
    ("1,024", "", 1024), ("8k", "", 8192), ("32K", "", 32768), ("2x8", "", 16), ("2 x 8", "", 16),
    ("16 nodes x 8 GPUs", "", 128), ("4 x 8 = 32", "", 32), ("64 (FSDP degree)", "", 64), ("tp=8", "tp", 8),
    ("TP8", "tp", 8), ("PP = 4", "pp", 4), ("~64", "", 64), ("1 (inferred from model-parallel size 1)", "", 1),
    ("8x H100", "", 8), ("1_024", "", 1024), ("ici_tensor 16", "", 16),
])
def test_counts(cell, key, value):
    assert read_count(cell, key) == value


@pytest.mark.parametrize("cell", ["4-8", "64 to 128", "1.5"])
def test_counts_that_are_not_one_whole_value_are_refused(cell):
    with pytest.raises(CellError):
        read_count(cell)


@pytest.mark.parametrize(("cell", "seconds"), [
    ("7.0", 7.0), ("7.0 (derived)", 7.0), ("850 ms", 0.85), ("1,234.5ms", 1.2345), ("1.2 s", 1.2),
    ("8.85 sec", 8.85), ("2 min", 120.0), ("10,400 ms", 10.4),
])
def test_step_times_with_units(cell, seconds):
    assert read_seconds(cell)[0] == pytest.approx(seconds)


@pytest.mark.parametrize(("cell", "seconds"), [
    ("0.5 it/s", 2.0), ("2 steps/sec", 0.5), ("0.8 it / s", 1.25), ("4 iters/s (tqdm)", 0.25)])
def test_a_step_rate_is_inverted_and_said(cell, seconds):
    v, note = read_seconds(cell)
    assert v == pytest.approx(seconds) and "rate" in note and "inverted" in note
    assert read_seconds("1.23 s/it") == (pytest.approx(1.23), "")  # seconds per iteration: a time


@pytest.mark.parametrize(("cell", "value"), [("2^13", 8192), ("2**20 tokens", 1048576), ("2 ^ 11", 2048)])
def test_a_power_written_out_is_read_as_its_value_not_its_base(cell, value):
    assert read_count(cell) == value


def test_a_step_time_range_takes_its_midpoint_and_says_so():
    v, note = read_seconds("10.9-11.1 s")
    assert v == pytest.approx(11.0) and "range" in note


@pytest.mark.parametrize(("cell", "seq", "seqs", "tokens"), [
    ("1024", 4096, 1024, False), ("1,024", 4096, 1024, False), ("4M tokens", 4096, 1024, True),
    ("2,097,152 tokens", 2048, 1024, True), ("524288", 4096, 128, True), ("16M", 4096, 4096, True),
    ("1024 (inferred from 2M-token batch / 2048)", 2048, 1024, False), ("1024 seqs (4M tokens)", 4096, 1024, False),
    ("2M tokens", 2000, 1000, True),
])
def test_global_batch_in_sequences_or_tokens(cell, seq, seqs, tokens):
    got, note = read_global_batch(cell, seq)
    assert got == seqs
    assert bool(note) == tokens


@pytest.mark.parametrize(("cell", "value", "per_device"), [
    ("74,908.99", 74908.99, False), ("1.2M", 1.2e6, False), ("3k per GPU", 3000.0, True),
    ("2,904 tok/s/gpu", 2904.0, True), ("25.655k", 25655.0, False), ("185 / chip", 185.0, True),
])
def test_rates(cell, value, per_device):
    v, dev = read_rate(cell)
    assert v == pytest.approx(value) and dev is per_device


@pytest.mark.parametrize(("cell", "flag"), [("yes", True), ("✓", True), ("TRUE", True), ("on", True),
                                            ("no", False), ("off", False), ("✗", False), ("", None)])
def test_flags(cell, flag):
    assert read_flag(cell) is flag


@pytest.mark.parametrize(("cell", "precision", "recipe"), [
    ("bf16", "bf16", None), ("BF16 mixed", "bf16", None), ("amp_bf16", "bf16", None), ("bf16-mixed", "bf16", None),
    ("fp16 mixed (inferred)", "fp16", None), ("fp16/bf16 mixed (not read)", "bf16", None),
    ("FP8 (Float8 rowwise)", "fp8", "rowwise"), ("FP8 (Float8 tensorwise)", "fp8", "tensorwise"),
    ("float8 + bf16", "fp8", None), ("FP8 hybrid (TE)", "fp8", "delayed"), ("fp8 (TE hybrid, fp8_params)", "fp8", "delayed"),
    ("FP8 (current scaling)", "fp8", "tensorwise"), ("FP8 (delayed scaling)", "fp8", "delayed"),
    ("FP8-CS", "fp8", "tensorwise"), ("FP8-DS", "fp8", "delayed"), ("FP8-MX", "fp8", "mxfp8"),
    ("FP8-SS", "fp8", "blockwise"), ("fp8_blk", "fp8", "blockwise"),
    ("fp8 (per-tensor, delayed)", "fp8", "delayed"), ("fp8 per-tensor", "fp8", "tensorwise"),
    ("MXFP8", "fp8", "mxfp8"), ("fp8 block-wise (DeepSeek)", "fp8", "blockwise"), ("NVFP4", "fp4", None), ("amp_fp8", "fp8", None), ("TF32", "tf32", None),
])
def test_precisions_and_fp8_recipes(cell, precision, recipe):
    p = read_precision(cell)
    assert (p.precision, p.fp8_recipe) == (precision, recipe)


@pytest.mark.parametrize(("cell", "stack", "policy"), [
    ("none (yaml null)", "megatron-core", "none"), ("AC: full", "megatron-core", "full"), ("Full AC", "generic", "full"),
    ("no AC", "generic", "none"), ("selective", "megatron-core", "selective"), ("selective", "torchtitan", "selective-op"),
    ("SAC (op)", "torchtitan", "selective-op"), ("Selective (op)", "generic", "selective-op"),
    ("selective layer", "torchtitan", "full-every:2"), ("every 4th layer", "generic", "full-every:4"),
    ("recompute: block 4", "megatron-core", "full:4"), ("uniform, 1 layer", "megatron-core", "full"),
    ("activation_checkpointing: true", "llm-foundry", "full"), ("activation_checkpointing: false", "llm-foundry", "none"),
    ("remat_policy=full", "maxtext", "full"), ("remat_policy=save_qkv_proj", "maxtext", "save_qkv_proj"),
    ("selective/custom remat (MaxText remat_policy=custom)", "maxtext", "save_dot_except_mlpwi"),
    ("yes (HFU>MFU implies rematerialization)", "generic", "full"), ("true", "generic", "full"),
    ("selective (recompute_modules: core_attn, moe_act, layernorm)", "megatron-core",
     "selective:core_attn+moe_act+layernorm"),
    ("recompute_modules=[mla_up_proj, moe]", "megatron-core", "selective:mla_up_proj+moe"),
    ("AC: selective, recompute-modules mlp moe", "megatron-core", "selective:mlp+moe"),
    ("selective (core_attn)", "megatron-core", "selective"), ("selective moe", "megatron-core", "selective"),
    # MaxText's named policies and its custom policy as runs state them (issue 29)
    ("remat_policy=save_out_proj", "maxtext", "save_out_proj"), ("minimal_flash", "maxtext", "minimal_flash"),
    ("save_dot_with_context_except_mlp", "maxtext", "save_dot_with_context_except_mlp"),
    ("custom (save_dot_except_mlpwi-like)", "maxtext", "save_dot_except_mlpwi"),
    ("remat_policy=custom decoder_layer_input=offload query_proj=device key_proj=device value_proj=device",
     "maxtext", "custom:decoder_layer_input=offload+query_proj=device+key_proj=device+value_proj=device"),
    ("custom: qkv/out/mlpwo kept on device", "maxtext", "custom:qkv_proj=device+out_proj=device+mlpwo=device"),
    ("remat_policy=custom; decoder layer input offloaded to host; qkv_proj and out_proj on device", "maxtext",
     "custom:decoder_layer_input=offload+qkv_proj=device+out_proj=device"),
    # whole words only: "offload" is not "off", and torchtitan's bare "op" is its per-op policy
    ("activation offload", "generic", "none"), ("offloaded activations", "generic", "none"), ("Off", "generic", "none"),
    ("op", "torchtitan", "selective-op"), ("enabled (every layer)", "generic", "full"),
    ("nothing recomputed", "generic", "none"),
    # flags and other frameworks' words (Megatron-LM's --recompute-activations is selective; Hugging Face's
    # gradient checkpointing recomputes every layer)
    ("--recompute-activations", "megatron-core", "selective"), ("--recompute-granularity selective", "megatron-core",
                                                                 "selective"),
    ("AC: off", "generic", "none"), ("ac=True", "generic", "full"), ("gradient checkpointing", "hf-transformers", "full"),
    ("gradient_checkpointing: false", "hf-transformers", "none"), ("ckpt-all", "generic", "full"),
    ("CPU offload of activations (2 layers)", "generic", "none"),
])
def test_checkpointing_spellings(cell, stack, policy):
    from trainperf.predict.runs_policy import read_policy

    assert read_policy(cell, stack, stack_defaults(stack), "bf16", 8.0, []) == policy


def test_activation_offloading_is_read_as_no_recomputation_and_said():
    notes: list[str] = []
    from trainperf.predict.runs_policy import read_policy

    assert read_policy("offload", "generic", stack_defaults("generic"), "bf16", 8.0, notes) == "none"
    assert any("offloading" in n and "not modelled" in n for n in notes)
    for cell in ("only attention recomputed", "onload", "non-uniform"):  # not read from their first letters
        with pytest.raises(Exception, match="not readable"):
            read_policy(cell, "generic", stack_defaults("generic"), "bf16", 8.0, [])


def test_an_unreadable_precision_is_refused_and_mixed_alone_is_unstated():
    with pytest.raises(CellError):
        read_precision("int4 weight-only")
    assert read_precision("mixed") is None


@pytest.mark.parametrize(("cell", "stack"), [
    ("Megatron-Bridge", "megatron-core"), ("NeMo 2.0", "megatron-core"), ("Megatron-LM", "megatron-core"),
    ("NeMo 24.09 (Megatron-Core, TE)", "megatron-core"), ("ROCm Megatron-LM", "megatron-core"),
    ("torchtitan", "torchtitan"), ("TorchTitan + AsyncTP", "torchtitan"), ("Composer", "llm-foundry"),
    ("LLM Foundry", "llm-foundry"), ("llmfoundry", "llm-foundry"), ("MosaicML", "llm-foundry"),
    ("MaxText", "maxtext"), ("Pax", "paxml"), ("PaxML (JAX) 24.03.04 container", "paxml"),
    ("DeepSpeed", "deepspeed"), ("Megatron-DeepSpeed", "deepspeed"), ("JAX", "generic"), ("HF Trainer", "hf-transformers"),
    ("Hugging Face Accelerate (FSDP)", "hf-transformers"), ("HF Accelerate + DeepSpeed ZeRO-3", "deepspeed"),
])
def test_frameworks_in_free_text(cell, stack):
    assert read_framework(cell) == stack


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 10**7))
def test_thousands_separators_and_keys_read_back(n):
    assert read_count(f"{n:,}") == n
    assert read_count(f"tp={n}", "tp") == n
    assert read_count(f"{n} (stated)") == n


@settings(max_examples=200, deadline=None)
@given(a=st.integers(1, 512), b=st.integers(1, 16), ms=st.integers(1, 10**6))
def test_products_and_milliseconds(a, b, ms):
    assert read_count(f"{a}x{b}") == a * b
    assert read_seconds(f"{ms:,} ms")[0] == pytest.approx(ms / 1000)


@settings(max_examples=200, deadline=None)
@given(seqs=st.integers(1, 8192), seq=st.sampled_from([1024, 2048, 4096, 8192, 32768]))
def test_a_batch_in_tokens_reads_back_as_sequences(seqs, seq):
    assert read_global_batch(f"{seqs * seq:,} tokens", seq)[0] == seqs
    assert read_global_batch(str(seqs), seq)[0] == seqs


# ------------------------------------------------------------------------------ stack defaults
def test_every_profile_states_its_defaults_with_sources():
    generic = packaged_profile("generic")
    values, _ = read_defaults_table(generic.defaults, "generic")
    assert set(DEFAULT_KEYS) - {"fp8_recipe", "pipeline_microbatch_size"} <= set(values)
    for name in STACKS:
        d = stack_defaults(name)
        for key in d.values:
            got = d.get(key, 8.0)
            assert got.source and len(got.source) > 20, (name, key)
    # the size table splits torchtitan's 8B (selective op) and 70B/405B (full) configs
    assert stack_defaults("torchtitan").get("activation_checkpointing", 8.0).value == "selective-op"
    assert stack_defaults("torchtitan").get("activation_checkpointing", 405.0).value == "full"
    assert stack_defaults("llm-foundry").get("activation_checkpointing", 1.3).value == "none"
    assert stack_defaults("paxml").get("activation_checkpointing").value == "full"
    # a stack's table leaves keys to generic, and says so
    assert stack_defaults("paxml").get("tp").stack == "generic"


@pytest.mark.parametrize(("body", "fragment"), [
    ({"activation_checkpointing": "sometimes", "sources": {"activation_checkpointing": "x"}}, "sometimes"),
    ({"micro_batch": 0, "sources": {"micro_batch": "x"}}, "micro_batch"),
    ({"micro_batchh": 1, "sources": {"micro_batchh": "x"}}, "micro_batch"),
    ({"micro_batch": 1}, "source"),
    ({"activation_checkpointing": {"13": "none"}, "sources": {"activation_checkpointing": "x"}}, "above"),
    ({"precision": "bf17", "sources": {"precision": "x"}}, "bf17"),
])
def test_a_bad_defaults_table_is_a_one_line_error_naming_it(body, fragment):
    with pytest.raises(TrainperfError) as e:
        read_defaults_table(body, "mine.toml [defaults]")
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_defaults_round_trip_through_to_toml():
    import tomllib

    for name in STACKS:
        p = packaged_profile(name)
        assert tomllib.loads(p.to_toml())["defaults"] == dict(p.defaults)


# --------------------------------------------------------------------------- the packaged table
EXCLUDED = {"401": "time", "415": "batch", "416": "batch", "417": "devices", "418": "devices", "419": "devices"}
"""Why each packaged row is not predicted: the Frontier rows publish an MFU alone (read against a
peak) and no device count per figure. PaLM's row names its model (the preset) and its plan in words."""


def test_packaged_table_reads_as_before():
    runs = packaged_runs()
    assert len(runs) == 169 and sum(r.included for r in runs) == 163
    assert {r.row_id: r.exclude_kind for r in runs if not r.included} == EXCLUDED
    by_id = {r.row_id: r for r in runs}
    assert by_id["401"].exclude_reason.startswith("only a best-case 'up to' TFLOP/s")
    assert by_id["415"].exclude_reason == "sequence length or global batch not stated"
    s = reading_summary(runs)
    assert s["rows_stating_essentials"] == 162 and s["coverage_of_stating_rows_pct"] == 100.0
    # hardware as resolved by the rule, per row
    assert {r.device_id for r in runs if r.included} == {
        "h100-sxm", "a100-sxm-80gb", "a100-sxm-40gb", "h100-sxm-hbm2e", "tpu-v5e", "tpu-v4"}
    assert by_id["405"].device_id == "tpu-v4" and by_id["415"].device_id == "mi250"
    assert by_id["417"].device_id == "mi250x-gcd" and by_id["340"].device_id == "h100-sxm-hbm2e"
    # PaxML's unstated checkpointing is the paxml default, noted with its source
    assert by_id["101"].workload.activation_checkpointing == "full"
    assert any("paxml default" in a and "rematerialise" in a for a in by_id["101"].assumptions)


def test_palm_reads_its_preset_its_plan_in_words_and_the_sharding_it_must_have_had():
    """PaLM 540B (row 405): the model cell names the preset, the dp cell says "12-way model x
    256-way data per pod" (tp 12, the rest data parallel), and the row states no sharding; unsharded,
    540B / 12 parameters with Adam need about 671 GiB of a 32 GiB TPU v4, so the run sharded them
    over its 512 data-parallel ranks (ZeRO-3), noted. Its framework has no profile, so no fit uses it."""
    from trainperf.predict.fit_profiles import fitted_on

    r = {x.row_id: x for x in packaged_runs()}["405"]
    assert r.included and r.stack == "generic" and not fitted_on(r)
    p = r.workload.plan
    assert (p.tp, p.fsdp, p.dp, p.zero_stage) == (12, 512, 1, 3)
    assert r.workload.model.total_params / 1e9 == pytest.approx(540.35, rel=1e-3)
    assert any("'12-way model'" in a for a in r.assumptions)
    assert any("ZeRO-3 over the 512 data-parallel ranks" in a for a in r.assumptions)
    # never fitted, so held out already: its held-out predictions are its in-sample one
    from trainperf.predict.validate_runs import validate_runs

    row = next(x for x in validate_runs().rows if x.row_id == "405")
    assert not row.fitted and row.predicted_step_time_s == row.loto_predicted_step_time_s \
        == row.group_out_predicted_step_time_s


def test_model_parallel_in_words_is_not_tensor_parallel_beside_a_pipeline():
    """Megatron's "model-parallel size" is tp x pp: "8-way model" beside pp 4 is not read as tp."""
    a = _hand_row(model="Llama 3 70B", tp="", pp="4", dp="8-way model, rest data", num_gpus="256")
    assert not any("'8-way model'" in x for x in a.assumptions)
    b = _hand_row(model="Llama 3 70B", tp="", pp="", dp="8-way tensor-slicing x 4-way pipeline", num_gpus="256")
    assert (b.workload.plan.tp, b.workload.plan.pp) == (8, 4)


def test_packaged_torchtitan_rows_run_the_local_batch_whole():
    for r in packaged_runs():
        if r.stack != "torchtitan":
            continue
        w = r.workload
        local = read_count(r.cells["micro_batch"])
        assert w.micro_batch == local and w.grad_accum_steps == 1
        assert w.global_batch == local * w.plan.data_parallel


# ------------------------------------------------------------------------------- the fixture
def _fixture():
    return {r.row_id: r for r in load_table_runs(FIXTURE)}


def test_respelled_packaged_rows_read_as_the_packaged_rows():
    packaged = {r.row_id: r for r in packaged_runs()}
    checked = 0
    for r in _fixture().values():
        m = re.search(r"respells packaged row (\d+)", r.cells.get("notes", ""))
        if not m:
            continue
        p = packaged[m.group(1)]
        assert r.included, (r.row_id, r.exclude_reason)
        assert r.workload == p.workload, r.row_id
        assert r.step_time_s == pytest.approx(p.step_time_s, rel=2e-3), r.row_id
        assert r.device_id == p.device_id and r.stack == p.stack
        checked += 1
    assert checked == 28


def test_fixture_rows_are_read_or_refused_with_their_reason():
    rows = _fixture()
    refused = {i: r.exclude_kind for i, r in rows.items() if not r.included}
    assert refused == {"c1": "hardware", "c2": "hardware", "c3": "cell", "c4": "time", "c5": "model",
                       "c6": "hardware", "c7": "precision"}
    assert "gb400" in rows["c1"].exclude_reason and "gb300" in rows["c1"].exclude_reason
    assert "h200-sxm" in rows["c2"].exclude_reason
    s = reading_summary(list(rows.values()))
    assert s["rows_total"] == 62 and s["rows_unread"] == 7
    assert s["rows_stating_essentials"] == 59 and s["rows_stating_essentials_read"] == 54
    assert sum(s["unread_by_kind"].values()) == 7


@pytest.mark.parametrize(("row", "device", "stack", "policy"), [
    ("b4", "gb200", "megatron-core", "none"), ("b5", "gb200", "megatron-core", "none"),
    ("b6", "b200", "megatron-core", "none"), ("b7", "h200-sxm", "torchtitan", "selective-op"),
    ("b8", "tpu-v5p", "maxtext", "full"), ("b9", "mi355x", "megatron-core", "full"),
    ("b10", "mi250x-gcd", "deepspeed", "full"), ("b11", "gaudi3", "deepspeed", "none"),
    ("b12", "h100-sxm", "llm-foundry", "full"), ("b13", "h100-sxm", "llm-foundry", "none"),
])
def test_fixture_rows_take_the_stack_default_for_what_they_leave_unstated(row, device, stack, policy):
    r = _fixture()[row]
    assert r.included, r.exclude_reason
    assert (r.device_id, r.stack, r.workload.activation_checkpointing) == (device, stack, policy)
    if r.cells["act_ckpt"].strip().lower() in ("not stated", "-", ""):
        assert any(a.startswith("activation checkpointing not stated") and f"{stack} default" in a
                   for a in r.assumptions)


@pytest.mark.parametrize(("row_id", "unstated"), [
    ("106", {"ac"}),  # PaxML: checkpointing not stated, the stack default taken
    ("290", {"micro_batch", "sharding", "vpp"}),  # SC21: micro batch, distributed optimizer, interleaving
    ("1", {"ac"}),  # MaxText remat_policy=custom: a named policy stands in for its per-tensor choices
    ("400", {"sp"}),  # BLOOM: sequence parallelism not stated
    ("13", set()),  # NVIDIA's GPT-3 175B recipe states its whole plan
])
def test_the_plan_fields_a_row_leaves_unstated(row_id, unstated):
    from trainperf.predict.runs_table import packaged_runs, select_runs

    assert select_runs(packaged_runs(), f"row:{row_id}")[0].unstated_plan_fields == frozenset(unstated)


def test_fixture_units_and_token_batches():
    rows = _fixture()
    assert rows["b5"].step_time_s == pytest.approx(7.5)  # "7,500 ms"
    assert rows["b5"].workload.fp8_recipe == "mxfp8"  # "MXFP8" on GB200: MX block scales
    assert rows["b4"].workload.fp8_recipe == "tensorwise"  # "FP8 (current scaling)"
    assert rows["b13"].workload.global_batch == 2048  # "4M tokens" of 2048-token sequences
    assert rows["b12"].workload.num_devices == 16  # "2x8"
    assert rows["b12"].step_time_s == pytest.approx(1024 * 8192 / (2500 * 16))  # tokens/s per GPU only
    assert rows["b14"].step_time_s == pytest.approx(11.0)  # a range: its midpoint
    assert rows["b15"].workload.plan.fsdp == 8 and rows["b15"].workload.plan.dp == 4  # HSDP within a node
    assert rows["b16"].workload.model.layers == 32  # shape from the preset the model cell names


# ------------------------------------------------------------- torchtitan local batch under PP
def test_torchtitan_local_batch_is_split_into_pipeline_microbatches():
    rows = _fixture()
    w = rows["b1"].workload  # 512 H100, tp 8, pp 8, FSDP 8; local batch 16, global not stated
    assert (w.plan.tp, w.plan.pp, w.plan.data_parallel) == (8, 8, 8)
    assert w.global_batch == 16 * 8 and w.micro_batch == 1 and w.grad_accum_steps == 16
    assert any("pipeline micro-batch size not stated: 1" in a for a in rows["b1"].assumptions)
    # a global batch written as local x all devices is corrected to local x data-parallel ranks
    w2 = rows["b2"].workload
    assert w2.global_batch == 128 and any("local x all 512 devices" in a for a in rows["b2"].assumptions)
    # a stated pipeline micro-batch size
    w3 = rows["b3"].workload
    assert (w3.micro_batch, w3.grad_accum_steps, w3.global_batch) == (2, 4, 128)


def test_reading_the_local_batch_as_a_micro_batch_would_be_a_bubble():
    """The +134% to +299% of issue 15: 16 sequences in one micro-batch leave pp-1 of pp stages idle."""
    import dataclasses

    r = _fixture()["b1"]
    right = predict_row(r)
    misread = dataclasses.replace(r, workload=dataclasses.replace(r.workload, micro_batch=16))
    assert misread.workload.grad_accum_steps == 1
    assert predict_row(misread) / right > 2.0


def test_a_hand_built_pp_row(tmp_path):
    (r,) = parse_hand_rows([dict(
        row_id="pp1", table_id="hand", source="hand-built", model="Llama 3 70B", layers="80", hidden="8192",
        heads="64", kv_heads="8", ffn_hidden="28672", vocab="128256", arch_type="dense (SwiGLU, GQA)",
        seq_len="8192", micro_batch="4 (local batch size)", hardware="H100 SXM5 80GB", num_gpus="128",
        tp="8", pp="4", act_ckpt="full", precision="bf16", framework="torchtitan", step_time_s="12.5")])
    assert r.included, r.exclude_reason
    assert (r.workload.global_batch, r.workload.micro_batch, r.workload.grad_accum_steps) == (16, 1, 4)


def _hand_row(**cells: str):
    (r,) = parse_hand_rows([{
        "row_id": "h1", "table_id": "hand", "source": "hand-built", "seq_len": "4096", "micro_batch": "1",
        "global_batch_seqs": "1024", "hardware": "H100 SXM5 80GB", "num_gpus": "1024", "act_ckpt": "selective",
        "precision": "bf16", "framework": "NeMo 25.04 (Megatron-Core)", "step_time_s": "30", **cells}])
    return r


def test_a_row_naming_a_preset_whose_shape_agrees_takes_its_architecture():
    """The columns cannot say MLA, shared experts, leading dense layers or a head dim other than
    hidden / heads; a preset the model cell names can, when every stated shape agrees with it
    (kv heads = heads for MLA; an all-MoE model's ffn column may name the experts' width)."""
    ds = _hand_row(model="DeepSeek-V3", layers="61", hidden="7168", heads="128", kv_heads="128", ffn_hidden="18432",
                   vocab="129280", moe_experts="256", moe_topk="8", moe_expert_ffn="2048", arch_type="MoE",
                   tp="2", pp="16", ep="64", etp="1", sp="yes")
    m = ds.workload.model
    assert ds.included, ds.exclude_reason
    assert (m.attention, m.moe_shared_experts, m.moe_dense_layers) == ("mla", 1, 3)
    assert any("architecture from the model preset deepseek-v3" in a for a in ds.assumptions)
    qw = _hand_row(model="Qwen3-235B-A22B", layers="94", hidden="4096", heads="64", kv_heads="4", ffn_hidden="1536",
                   vocab="151936", moe_experts="128", moe_topk="8", arch_type="MoE", tp="4", pp="8", ep="8")
    assert qw.included, qw.exclude_reason
    assert (qw.workload.model.q_dim, qw.workload.model.qk_norm) == (8192, True)
    # a stated shape the preset does not have: the columns, as written
    odd = _hand_row(model="Qwen3-235B-A22B", layers="94", hidden="4096", heads="32", kv_heads="4", ffn_hidden="1536",
                    vocab="151936", moe_experts="128", moe_topk="8", arch_type="MoE", tp="4", pp="8", ep="8")
    assert (odd.workload.model.heads, odd.workload.model.q_dim) == (32, 4096)


@pytest.mark.parametrize(("cell", "dpn", "GB_per_s"), [
    ("DGX H100 ref. arch (EOS): NVLink4 900 GB/s bidir intra-node; 8x400 Gb/s InfiniBand compute", 8, 50.0),
    ("1600 Gbps node-node RoCE (stated for A100 tables)", 8, 25.0), ("400 Gb/s per GPU RDMA backend", 8, 50.0),
    ("4x100 Gb/s EFA", 8, 6.25), ("3.2 Tbps EFA", 8, 50.0), ("800 Gbps node interconnect", 4, 25.0),
    ("HPE Slingshot-11", 8, None), ("NVLink intra-node; Omni-Path inter-node", 8, None), ("not stated", 8, None),
    ("0 Gb/s", 8, None),
])
def test_interconnect_cells_give_the_nic_rate_per_device(cell, dpn, GB_per_s):
    from trainperf.predict.runs_cells import read_interconnect

    assert read_interconnect(cell, dpn) == GB_per_s


def test_a_stated_network_slower_than_the_catalogs_is_used():
    """A cloud's 4 x 100 Gb/s EFA for 8 A100s is a quarter of a DGX A100's 8 x 200 Gb/s: the row
    runs on that network (noted); a row on the catalog's own network changes nothing."""
    cells = dict(model="Llama3-70B", layers="80", hidden="8192", heads="64", kv_heads="8", ffn_hidden="28672",
                 vocab="128256", arch_type="dense", hardware="A100 SXM 80GB", num_gpus="64", fsdp_zero="FSDP 64",
                 global_batch_seqs="64", seq_len="4096", act_ckpt="full", framework="torchtitan")
    slow = _hand_row(**cells, interconnect="p4d: 4x100 Gb/s EFA")
    same = _hand_row(**cells, interconnect="8x200 Gb/s HDR InfiniBand")
    assert slow.workload.hardware.inter_node_link_GB_per_s == 6.25
    assert any("inter-node link from the interconnect cell" in a for a in slow.assumptions)
    assert same.workload.hardware.inter_node_link_GB_per_s == 25.0
    assert predict_row(slow) > predict_row(same)


def test_headers_are_matched_loosely_and_blank_lines_skipped():
    text = FIXTURE.read_text()
    head, rest = text.split("\n", 1)
    head = ",".join(f" {c.upper()} " for c in head.split(","))
    runs = parse_runs("\ufeff" + head + "\n\n" + rest + "\n,,,\n", "loose.csv")
    assert len(runs) == 62 and sum(r.included for r in runs) == 55


@pytest.mark.parametrize("delimiter", [";", "\t"])
def test_a_spreadsheet_export_separated_by_semicolons_or_tabs_reads_the_same(delimiter):
    rows = list(csv.reader(io.StringIO(FIXTURE.read_text())))
    buf = io.StringIO()
    csv.writer(buf, delimiter=delimiter).writerows(rows)
    again, first = parse_runs(buf.getvalue(), "export.csv"), parse_runs(FIXTURE.read_text(), "fixture.csv")
    assert [(r.row_id, r.included, r.step_time_s) for r in again] == [(r.row_id, r.included, r.step_time_s) for r in first]
    # a decimal comma leaves its row unread, naming the cell, never read as 24 (nor 2403)
    step = rows[0].index("step_time_s")
    at = next(i for i, r in enumerate(rows) if i and r[step])
    rows[at][step] = "24,03"
    buf = io.StringIO()
    csv.writer(buf, delimiter=delimiter).writerows(rows)
    bad = {r.row_id: r for r in parse_runs(buf.getvalue(), "export.csv")}[rows[at][0]]
    assert not bad.included and bad.exclude_kind == "cell"
    assert bad.exclude_reason.startswith("step_time_s '24,03': a comma not followed by groups of three digits")


# ------------------------------------------------------------------------------------ the CLI
def test_validate_data_shows_each_rows_hardware_and_every_unread_row(capsys):
    assert main(["validate", "--data", str(FIXTURE), "--no-loto"]) == 0
    out = capsys.readouterr().out
    assert "'GB200 (NVL72)' -> gb200" in out and "'Hopper' -> not resolved" in out
    assert "not predicted (7 of 62 rows" in out
    for rid in ("c1", "c2", "c3", "c4", "c5", "c6", "c7"):
        assert f"row {rid} (UNREAD): " in out
    assert "rows stating model shape, batch, devices and a time: 59; predicted 54 (91.5%)" in out
    assert main(["validate", "--data", str(FIXTURE), "--no-loto", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    rows = {r["row_id"]: r for r in d["rows"]}
    assert rows["b9"]["device"] == "mi355x" and "part mi355x" in rows["b9"]["hardware_read"]
    assert rows["c2"]["device"] is None and rows["c2"]["unread_kind"] == "hardware"
    assert d["reading"]["rows_unread"] == 7 == len(d["reading"]["unread"])
    assert d["rows_total"] == 62 and d["rows_predicted"] == 55


def test_calibrate_model_reads_rows_of_a_runs_file(tmp_path, capsys):
    out = tmp_path / "tt.toml"
    assert main(["calibrate-model", "--data", str(FIXTURE), "row:a340", "row:a341", "--holdout",
                 "table:RESPELLED-TORCHTITAN-2408-405B-H100", "-o", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in res["fit_rows"]] == ["row:a340", "row:a341"]
    assert len(res["holdout_rows"]) == 3 and res["unread_rows"] == []
    assert out.is_file()
    # an unread row is a one-line error with its reason; a table's unread rows are listed
    assert main(["calibrate-model", "--data", str(FIXTURE), "row:c2", "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Hopper" in err
    assert main(["calibrate-model", "--data", str(FIXTURE), "row:a23", "row:a45", "--holdout", "table:UNREAD",
                 "-o", str(tmp_path / "y.json")]) == 2


# ------------------------------------------ any re-spelling of a packaged row reads the same
_HW = {
    "h100-sxm": ["NVIDIA H100-SXM5-80GB", "H100 80GB (SXM per composer h100-sxm mapping)", "H100 SXM5", "8xH100 80GB HBM3",
                 "DGX H100", "nvidia h100 sxm5 80gb"],
    "a100-sxm-80gb": ["A100-SXM4-80GB", "NVIDIA A100 80GB", "A100 SXM 80GB", "A100s (80GB)"],
    "a100-sxm-40gb": ["A100-SXM4-40GB", "A100 40GB SXM", "NVIDIA A100 40 GB"],
    "h100-sxm-hbm2e": ["H100 SXM 95GB HBM2e", "H100 94GB (HBM2e, 500 W)", "h100-sxm-96gb",
                       "H100 SXM 96GB HBM2e @ 500W power limit (Meta Grand Teton); peak between SXM and NVL per docs"],
    "tpu-v5e": ["TPU v5e", "Cloud TPU v5 lite", "v5litepod-256"],
    "tpu-v4": ["TPU v4", "Google TPU v4"], "mi250": ["AMD Instinct MI250", "MI250 (OAM)"],
}
_FW = {"megatron-core": ["NeMo", "Megatron-Bridge", "NeMo 2.0 (Megatron-Core)"], "maxtext": ["MaxText", "JAX MaxText"],
       "paxml": ["Pax", "PaxML"], "torchtitan": ["TorchTitan", "torchtitan (PyTorch)"],
       "llm-foundry": ["Composer", "MosaicML LLM Foundry"], "deepspeed": ["Megatron-DeepSpeed"]}
_PREC = {"bf16": ["BF16 mixed", "bfloat16", "amp_bf16"], "fp16": ["FP16 mixed", "float16"], "fp8": ["FP8", "float8"]}
_READ = [r for r in packaged_runs() if r.included]


@settings(max_examples=150, deadline=None)
@given(i=st.integers(0, len(_READ) - 1), data=st.data())
def test_any_respelling_of_a_packaged_row_reads_the_same(i, data):
    run = _READ[i]
    cells = dict(run.cells)
    pick = lambda options: data.draw(st.sampled_from(options))  # noqa: E731
    w = run.workload
    cells["hardware"] = pick(_HW[run.device_id])
    fw = cells["framework"].lower()
    if run.stack in _FW and not re.search(r"async|compile|megatron-lm \(20", fw) and pick([True, False]):
        cells["framework"] = pick(_FW[run.stack])
    if pick([True, False]) and "(te" not in cells["precision"].lower() and "float8" not in cells["precision"]:
        cells["precision"] = pick(_PREC[w.precision])
    seq = w.seq_len
    if pick([True, False]) and seq % 1024 == 0:
        cells["seq_len"] = pick([f"{seq // 1024}k", f"{seq // 1024}K", f"{seq:,}"])
    gb = read_count(cells["global_batch_seqs"])
    if gb is not None and pick([True, False]):
        cells["global_batch_seqs"] = pick([f"{gb:,}", f"{gb * seq:,} tokens"])
    step, _ = read_seconds(cells["step_time_s"])
    if step is not None and pick([True, False]):
        cells["step_time_s"] = f"{step * 1000:.6g} ms"
    for col in ("cp", "ep", "vpp"):
        if not cells[col].strip() and pick([True, False]):
            cells[col] = pick(["n/a", "-", "N/A"])
    if cells["sp"].strip().lower() in ("yes", "no") and pick([True, False]):
        cells["sp"] = pick(["✓", "TRUE", "Yes"] if cells["sp"].strip().lower() == "yes" else ["false", "No", "✗"])
    if re.search(r"nemo|bridge", cells["framework"].lower()) and pick([True, False]):
        # what NeMo's recipes decide, left unstated: sp with tp > 1, the distributed optimizer
        if w.plan.sequence_parallel == (w.plan.tp > 1):
            cells["sp"] = pick(["", "not stated", "-"])
        if w.plan.zero_stage == 1 and "(as stated" not in cells["dp"]:
            cells["fsdp_zero"] = pick(["", "n/a"])
    for col in ("tp", "pp", "vpp"):
        n = getattr(w.plan, col)
        if n > 1 and pick([True, False]):
            cells[col] = pick([f"{col.upper()}{n}", f"{col}={n}", f"{col.upper()} = {n}"])
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(cells))
    writer.writeheader()
    writer.writerow(cells)
    (again,) = parse_runs(buf.getvalue(), "respelled.csv")
    assert again.included, (cells, again.exclude_reason)
    assert again.workload == w, cells
    assert again.step_time_s == pytest.approx(run.step_time_s, rel=1e-4)


# ------------------------------------------------------- issue 29: tables as people write them
def test_nemo_recipes_turn_on_sequence_parallelism_and_the_distributed_optimizer():
    """NeMo 2.0 / Megatron-Bridge recipes, not Megatron-LM's command line: a NeMo row that leaves
    sp and the optimizer unstated runs sp with tp > 1 and ZeRO-1, and says which recipes said so."""
    nemo = stack_defaults("megatron-core", "NeMo 2.0")
    assert nemo.get("sequence_parallel").value is True and nemo.get("data_parallel_sharding").value == "zero-1"
    note = nemo.get("sequence_parallel").note("sequence parallelism")
    assert "recipes 'nemo'" in note and "NeMo 24.09" in note and "llama3_70b.py" in note
    for fw in ("Megatron-Bridge 0.1", "megatron_bridge", "NeMo24.09", "NVIDIA NeMo (Megatron-Core)"):
        assert stack_defaults("megatron-core", fw).get("sequence_parallel").value is True, fw
    for fw in ("Megatron-LM", "Megatron-Core 0.12", "Nemotron trainer", None):
        assert stack_defaults("megatron-core", fw).get("sequence_parallel").value is False, fw
    r = _hand_row(model="Llama3-70B", layers="80", hidden="8192", heads="64", kv_heads="8", ffn_hidden="28672",
                  vocab="128256", tp="4", pp="4", vpp="5", framework="NeMo 2.0")
    assert r.workload.plan.sequence_parallel and r.workload.plan.zero_stage == 1
    raw = _hand_row(model="Llama3-70B", layers="80", hidden="8192", heads="64", kv_heads="8", ffn_hidden="28672",
                    vocab="128256", tp="4", pp="4", vpp="5", framework="Megatron-LM")
    assert not raw.workload.plan.sequence_parallel and raw.workload.plan.zero_stage == 0


@pytest.mark.parametrize(("body", "fragment"), [
    ({"recipes": {"nemo": {"release": "x", "sequence_parallel": True, "sources": {"sequence_parallel": "y"}}}},
     "frameworks"),
    ({"recipes": {"nemo": {"frameworks": ["nemo"], "sequence_parallel": True, "sources": {"sequence_parallel": "y"}}}},
     "release"),
    ({"recipes": {"nemo": {"frameworks": ["nemo"], "release": "x", "sequence_parallel": True}}}, "source"),
    ({"recipes": {"nemo": {"frameworks": ["nemo"], "release": "x", "sequence_paralel": True,
                           "sources": {"sequence_paralel": "y"}}}}, "sequence_paralel"),
])
def test_a_bad_recipes_table_is_a_one_line_error_naming_it(body, fragment):
    with pytest.raises(TrainperfError) as e:
        read_defaults_table(body, "mine.toml [defaults]")
    assert fragment in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("vpp", "pp", "layers", "expect", "says"), [
    ("interleaved", "8", "96", 12, "one layer per virtual stage: 96 layers // pp 8"),
    ("interleaved 1F1B", "4", "80", 20, "vpp 20 assumed"),  # "1F1B" names the schedule, not a count
    ("interleaved (paper; not re-read)", "1", "24", 1, "non-interleaved 1F1B assumed"),  # pp 1: nothing to interleave
    ("", "PP4 (interleaved, vpp=5)", "80", 5, ""),  # the count written in the pp cell
    ("VP=7", "8", "126", 7, ""),
    ("not stated", "4", "80", 1, "non-interleaved 1F1B assumed"),
    ("yes", "4", "80", 20, "interleaved 1F1B, vpp 20"),
])
def test_a_row_that_says_interleaved_is_interleaved(vpp, pp, layers, expect, says):
    r = _hand_row(model="custom", layers=layers, hidden="8192", heads="64", kv_heads="8", ffn_hidden="28672",
                  vocab="128256", tp="8", pp=pp, vpp=vpp, num_gpus="1024", framework="Megatron-LM")
    assert r.included, r.exclude_reason
    assert r.workload.plan.vpp == expect
    assert (r.workload.plan.pp_schedule == "interleaved") == (expect > 1)
    if says:
        assert any(a.startswith("vpp ") and says in a for a in r.assumptions), r.assumptions
        assert "vpp" in r.unstated_plan_fields


@pytest.mark.parametrize(("vpp", "expect"), [
    ("layers per virtual stage 2", 5), ("--num-layers-per-virtual-pipeline-stage 5", 2),
    ("2 layers per virtual pipeline stage", 5),
])
def test_layers_per_virtual_stage_give_the_stage_count(vpp, expect):
    r = _hand_row(model="custom", layers="80", hidden="8192", heads="64", kv_heads="8", ffn_hidden="28672",
                  vocab="128256", tp="8", pp="8", vpp=vpp, num_gpus="1024", framework="Megatron-LM")
    assert r.included, r.exclude_reason
    assert r.workload.plan.vpp == expect and r.workload.plan.pp_schedule == "interleaved"
    assert any(f"80 layers // (pp 8 x {80 // 8 // expect}) = {expect}" in a for a in r.assumptions), r.assumptions
    bad = _hand_row(model="custom", layers="80", hidden="8192", heads="64", kv_heads="8", ffn_hidden="28672",
                    vocab="128256", tp="8", pp="8", vpp="3 layers per virtual stage", num_gpus="1024",
                    framework="Megatron-LM")
    assert not bad.included and "do not divide" in bad.exclude_reason


@pytest.mark.parametrize(("framework", "pp", "expect", "says"), [
    # torchtitan runs 2 stages per rank when its config names a multi-stage schedule without a split
    ("torchtitan (3D: FSDP+TP+PP, Interleaved 1F1B)", "8", 2, "2 taken (torchtitan default"),
    ("torchtitan", "8", 1, ""),
    # elsewhere one layer per virtual stage, the most the layer count allows (NVIDIA's recipes)
    ("Megatron-LM (interleaved pipeline schedule)", "8", 10, "one layer per virtual stage: 80 layers // pp 8"),
    ("Megatron-LM (interleaved dense and MoE layers)", "8", 1, ""),  # interleaving, but not of the pipeline
])
def test_a_framework_cell_that_names_an_interleaved_schedule_is_interleaved(framework, pp, expect, says):
    r = _hand_row(model="custom", layers="80", hidden="8192", heads="64", kv_heads="8", ffn_hidden="28672",
                  vocab="128256", tp="8", pp=pp, vpp="", num_gpus="512", framework=framework)
    assert r.included, r.exclude_reason
    assert r.workload.plan.vpp == expect and (r.workload.plan.pp_schedule == "interleaved") == (expect > 1)
    if says:
        assert any(a.startswith("vpp 'torchtitan") or says in a for a in r.assumptions), r.assumptions
        assert any(says in a for a in r.assumptions), r.assumptions


def test_interleaved_stages_per_rank_is_a_checked_default():
    assert stack_defaults("torchtitan").get("interleaved_stages_per_rank").value == 2
    assert stack_defaults("megatron-core").get("interleaved_stages_per_rank").value == "layers"
    values, _ = read_defaults_table({"interleaved_stages_per_rank": 4, "sources": {"interleaved_stages_per_rank": "x"}},
                                    "mine.toml [defaults]")
    assert values == {"interleaved_stages_per_rank": 4}
    for bad in (0, "half", True):
        with pytest.raises(TrainperfError) as e:
            read_defaults_table({"interleaved_stages_per_rank": bad, "sources": {"interleaved_stages_per_rank": "x"}},
                                "mine.toml [defaults]")
        assert "interleaved_stages_per_rank" in str(e.value) and "\n" not in str(e.value)


def _llama3_8b_row(**cells: str):
    """A read Llama 3 8B row on 8 GPUs, no tp or pp, with ``cells`` over the hand row's."""
    r = _hand_row(model="Llama3-8B", layers="32", hidden="4096", heads="32", kv_heads="8", ffn_hidden="14336",
                  vocab="128256", tp="1", pp="1", num_gpus="8", **cells)
    assert r.included, r.exclude_reason
    return r


@pytest.mark.parametrize(("framework", "compiled"), [
    ("torchtitan (FSDP2, compile)", True),
    ("torchtitan (FSDP + torch.compile + Float8)", True),
    ("torchtitan (eager, no torch.compile)", False),
    ("torchtitan (FSDP2, uncompiled)", False),
])
def test_a_framework_cell_that_says_compiled_is_read_unless_negated(framework, compiled):
    r = _llama3_8b_row(framework=framework, precision="bf16")
    assert r.workload.compile is compiled


@pytest.mark.parametrize(("notes", "compiled"), [
    ("FSDP + torch.compile", True),
    ("compiled with inductor", True),
    ("no torch.compile", False),
    ("not compiled (eager)", False),
    ("uncompiled loss", False),
    ("torch.compile: off", False),
    ("torch.compile=false", False),
    ("eager", False),
])
def test_notes_that_say_compiled_are_read(notes, compiled):
    r = _llama3_8b_row(framework="torchtitan (FSDP)", notes=notes)
    assert r.workload.compile is compiled
    assert any(a == "compiled: the notes say so" for a in r.assumptions) is compiled


@pytest.mark.parametrize(("row", "dims", "says"), [
    ("e1", (1536, 512, 64, 128, 128), "architecture from the model preset deepseek-v3"),  # kv_heads=512 agrees
    ("e2", (1536, 512, 64, 128, 128), "kv_heads 512 read as MLA's KV latent rank"),  # a 16-layer proxy
    ("e3", (1536, 512, 64, 128, 128), ""),  # the MLA columns
    ("e4", (1536, 512, 64, 128, 128), ""),  # the sizes written in arch_type
])
def test_multi_head_latent_attention_rows_read_as_mla(row, dims, says):
    r = _fixture()[row]
    assert r.included, r.exclude_reason
    m = r.workload.model
    assert m.attention == "mla" and m.kv_heads == m.heads
    assert (m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim) == dims
    if says:
        assert any(says in a for a in r.assumptions), r.assumptions


def test_mla_sizes_a_row_does_not_state_come_from_deepseek_v3_and_say_so():
    r = _hand_row(model="Some MLA MoE", arch_type="MoE, multi-head latent attention", layers="27", hidden="2048",
                  heads="16", kv_heads="", ffn_hidden="10944", vocab="102400", moe_experts="64", moe_topk="6",
                  moe_expert_ffn="1408", tp="1", ep="8", num_gpus="64")
    assert r.included, r.exclude_reason
    assert r.workload.model.attention == "mla" and r.workload.model.kv_lora_rank == 512
    assert any(a.startswith("MLA q_lora_rank, kv_lora_rank") and "deepseek-v3's taken" in a for a in r.assumptions)


def test_an_unstated_expert_tp_that_cannot_hold_the_stated_ep_is_one():
    """tp 2 x ep 64 does not fit the 64 non-pipeline ranks of 1,024 GPUs at pp 16; ep 64 alone does."""
    r = _fixture()["e1"]
    assert (r.workload.plan.tp, r.workload.plan.ep, r.workload.plan.expert_tp) == (1, 32, 1)
    ds = _hand_row(model="DeepSeek-V3", layers="61", hidden="7168", heads="128", kv_heads="512", ffn_hidden="18432",
                   vocab="129280", moe_experts="256", moe_topk="8", moe_expert_ffn="2048", arch_type="MoE", tp="2",
                   pp="16", ep="64", sp="yes")
    assert ds.included, ds.exclude_reason
    assert ds.workload.plan.expert_tp == 1 and any(a.startswith("etp not stated: 1 taken") for a in ds.assumptions)


@pytest.mark.parametrize(("row", "twin", "differs"), [
    ("d13", "13", ()), ("d50", "50", ()), ("d60", "60", ()), ("d75", "75", ()), ("d90", "90", ()),
    ("d40", "40", ("vpp",)),  # "interleaved" without a count: 20 chunks of one layer, not the recipe's 5
])
def test_rows_that_leave_recipe_choices_unstated_read_as_the_recipe_ran_them(row, twin, differs):
    import dataclasses

    r, p = _fixture()[row], {x.row_id: x for x in packaged_runs()}[twin]
    assert r.included, r.exclude_reason
    got = {f.name for f in dataclasses.fields(r.workload.plan)
           if getattr(r.workload.plan, f.name) != getattr(p.workload.plan, f.name)} - {"pp_schedule"}
    assert got == set(differs)
    assert dataclasses.replace(r.workload, plan=p.workload.plan) == p.workload


def test_the_table_reading_benchmark_reader_is_within_two_points_of_the_facts_by_hand():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "table_reading.py"
    spec = importlib.util.spec_from_file_location("table_reading", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = mod.judge(FIXTURE)
    assert len(res["twins"]) == 34 and res["reading"]["coverage_of_stating_rows_pct"] > 90
    assert abs(res["gap_points"]) < 2.0
    d40 = next(t for t in res["twins"] if t["row_id"] == "d40")
    assert d40["differs"] == ["plan.vpp: 20 (by hand 5)"]


@pytest.mark.parametrize(("framework", "fsdp", "zero", "from_cell"), [
    ("PyTorch FSDP", 64, 0, True), ("HF Accelerate + DeepSpeed ZeRO-3", 64, 0, True), ("DeepSpeed ZeRO-1", 1, 1, True),
    ("PyTorch FSDP (hybrid_shard)", 8, 0, True),
    # no sharding named: DDP would need 120 GiB of an 80 GiB H100 for 8B parameters with Adam, and the
    # run ran, so the least stage under which they fit
    ("HF Trainer", 1, 1, False),
])
def test_sharding_named_in_the_framework_cell_is_the_runs(framework, fsdp, zero, from_cell):
    r = _hand_row(model="Llama3-8B", layers="32", hidden="4096", heads="32", kv_heads="8", ffn_hidden="14336",
                  vocab="128256", num_gpus="64", global_batch_seqs="128", framework=framework, fsdp_zero="")
    assert r.included, r.exclude_reason
    assert (r.workload.plan.fsdp, r.workload.plan.zero_stage) == (fsdp, zero)
    assert any(a.startswith("data-parallel sharding from the framework cell") for a in r.assumptions) == from_cell
    assert any("the run held them, so ZeRO-1" in a for a in r.assumptions) == (not from_cell)


def test_an_unstated_sharding_stays_plain_data_parallel_where_it_fits():
    r = _hand_row(model="Llama 3.2 1B", num_gpus="64", global_batch_seqs="128", framework="HF Trainer", fsdp_zero="")
    assert r.included, r.exclude_reason
    assert (r.workload.plan.fsdp, r.workload.plan.zero_stage) == (1, 0)
    assert not any("the run held them" in a for a in r.assumptions)


def test_a_maxtext_custom_policy_row_is_in_the_stacks_space_and_priced_as_stated():
    """MaxText's custom policy with q/k/v and the layer input offloaded keeps out_proj only on the
    device: less than save_dot_except_mlpwi by the q, k, v and layer-input widths."""
    from trainperf.predict import predict
    from trainperf.predict.stack_capabilities import capabilities_of, plan_refusal

    cells = dict(model="Llama3-70B", layers="80", hidden="8192", heads="64", kv_heads="8", ffn_hidden="28672",
                 vocab="128256", seq_len="8192", global_batch_seqs="128", micro_batch="2", num_gpus="64",
                 fsdp_zero="FSDP=64", framework="MaxText", hardware="H100 SXM5 80GB")
    named = _hand_row(**cells, act_ckpt="remat_policy=save_dot_except_mlpwi")
    offl = _hand_row(**cells, act_ckpt="remat_policy=custom (decoder_layer_input=offload, qkv_proj=offload, "
                                      "out_proj=device)")
    assert offl.workload.activation_checkpointing == "custom:decoder_layer_input=offload+qkv_proj=offload+out_proj=device"
    assert plan_refusal(capabilities_of("maxtext"), offl.workload) is None
    a, b = predict(named.workload), predict(offl.workload)
    # per token per layer: h (layer input) + q + 2 kv = 8192 + 8192 + 2 x 1024 bf16 elements fewer
    fewer = 80 * 2 * 8192 * 2 * (8192 + 8192 + 2 * 1024) / 2**30
    assert a.memory_breakdown_GiB["activations"] - b.memory_breakdown_GiB["activations"] == pytest.approx(fewer)


def test_llama3_405b_names_the_llama31_preset():
    # Meta released the 405B model only as Llama 3.1; tables write "Llama 3 405B"
    r = _hand_row(model="Llama3 405B", tp="8", pp="16")
    assert r.included, r.exclude_reason
    assert r.workload.model.layers == 126 and r.workload.model.hidden == 16384
    assert any("llama3.1-405b" in n for n in r.assumptions)


def test_a_vpp_count_in_the_pp_cell_and_async_tp_in_the_sp_cell_are_read():
    r = _hand_row(model="Llama 3 70B", tp="8", pp="4 (interleaved, v=5)", num_gpus="256")
    assert r.included, r.exclude_reason
    assert (r.workload.plan.pp, r.workload.plan.vpp) == (4, 5)
    a = _hand_row(model="Llama 3 70B", tp="8", sp="yes (async TP)", pp="4", num_gpus="256")
    assert a.workload.async_tp and a.workload.plan.sequence_parallel


@pytest.mark.parametrize(("model", "preset", "params_B"), [
    ("Grok-1 314B", "grok-1", 316.5), ("Qwen2.5-72B", "qwen2.5-72b", 72.71), ("Mistral 7B", "mistral-7b", 7.242),
    ("DeepSeek-V2 236B", "deepseek-v2", 235.7), ("DeepSeek-V2.5", "deepseek-v2", 235.7), ("Kimi K2", "kimi-k2", 1026.0), ("Falcon-180B", "falcon-180b", 178.6),
    ("Gemma 2 27B", "gemma2-27b", 27.23), ("Qwen3-8B", "qwen3-8b", 8.191),
    # the model cards' parameter counts
    ("Mistral Large 2", "mistral-large-2", 122.6), ("Mistral-Small-24B-Base-2501", "mistral-small-24b", 23.57),
    ("Mistral-Nemo", "mistral-nemo-12b", 12.25), ("01-ai Yi-34B", "yi-34b", 34.39),
    ("allenai OLMo 2 7B", "olmo2-7b", 7.30), ("OLMo 2 13B", "olmo2-13b", 13.72),
    # the LLaMA paper's Table 2 (arXiv:2302.13971); its 33B is "30b" in the converted checkpoints
    ("LLaMA-65B", "llama-65b", 65.29), ("LLaMA 13B", "llama-13b", 13.02), ("Llama 1 7B", "llama-7b", 6.738),
    # PaLM's Table 1 (arXiv:2204.02311); MT-NLG's paper; BLOOM's model card
    ("PaLM 540B", "palm-540b", 540.35), ("PaLM-62B", "palm-62b", 62.50), ("MT-NLG 530B", "mt-nlg-530b", 529.6),
    ("BLOOM-176B", "bloom-176b", 176.2), ("OPT-175B", "opt-175b", 174.6),
    # the language models of the released configs (Gemma 3 without its vision tower)
    ("Gemma 3 27B", "gemma3-27b", 27.01), ("google/gemma-3-12b-pt", "gemma3-12b", 11.77),
    ("Phi-3-mini-4k-instruct", "phi-3-mini", 3.821),
    ("GPT-NeoX 20B", "gpt-neox-20b", 20.55), ("EleutherAI/pythia-12b", "pythia-12b", 11.85), ("GPT-J 6B", "gpt-j-6b", 6.051),
    ("OLMo 7B", "olmo-7b", 6.888), ("DeepSeek 67B", "deepseek-llm-67b", 67.43), ("Code Llama 34B", "codellama-34b", 33.74),
    # Llama 2's shapes with 16 infilling tokens more (68,976,910,336: Llama 2 70B's plus 2 x 16 x 8192)
    ("CodeLlama-70b-Instruct-hf", "codellama-70b", 68.98), ("TinyLlama-1.1B", "tinyllama-1.1b", 1.100),
    ("bigcode/starcoder2-15b", "starcoder2-15b", 15.96), ("GLM-4.5", "glm-4.5", 352.8)])
def test_a_row_naming_a_released_model_without_its_shape_takes_the_preset(model, preset, params_B):
    r = _hand_row(model=model, tp="8", pp="4")
    assert r.included, r.exclude_reason
    assert r.workload.model.total_params / 1e9 == pytest.approx(params_B, rel=2e-3)
    assert any(preset in a for a in r.assumptions), r.assumptions


def test_llama_33b_is_read_by_its_checkpoints_name_with_a_tp_dividing_52_heads():
    r = _hand_row(model="LLaMA-30B", tp="4", pp="4")
    assert r.included, r.exclude_reason
    assert r.workload.model.total_params / 1e9 == pytest.approx(32.53, rel=2e-3)  # Table 2: 32.5B
    assert any("call 30B" in a for a in r.assumptions), r.assumptions
    assert not _hand_row(model="LLaMA-33B", tp="8", pp="4").included  # 8 does not divide 52 heads


def test_phi_4_s_ten_kv_heads_take_a_tp_that_divides_them():
    r = _hand_row(model="Phi-4", tp="2", pp="4")
    assert r.included, r.exclude_reason
    assert r.workload.model.total_params / 1e9 == pytest.approx(14.66, rel=2e-3)  # the model card's 14.7B
    assert not _hand_row(model="Phi-4", tp="8", pp="4").included  # 8 does not divide 10 KV heads


def test_a_row_with_only_an_mfu_is_read_against_the_peak_its_basis_states():
    base = dict(model="Llama 3 70B", tp="4", pp="4", step_time_s="", mfu_pct="40")
    stated = _hand_row(**base, mfu_basis="MFU vs peak BF16 989 TF, FP8 1979 TF")
    assert stated.included, stated.exclude_reason
    assert any("40% of the 989 TFLOP/s peak its basis states" in n for n in stated.assumptions)
    catalog = _hand_row(**base, mfu_basis="")
    assert any("catalog's dense bf16 peak of h100-sxm (989.4 TFLOP/s)" in n for n in catalog.assumptions)
    # the same run at the TFLOP/s the MFU stands for
    same = _hand_row(model="Llama 3 70B", tp="4", pp="4", step_time_s="", tflops_per_gpu="395.6")
    assert stated.step_time_s == pytest.approx(same.step_time_s, rel=1e-9)
    assert catalog.step_time_s == pytest.approx(same.step_time_s * 989.0 / 989.4, rel=1e-9)
    none = _hand_row(model="Llama 3 70B", tp="4", pp="4", step_time_s="")
    assert not none.included and "MFU" in none.exclude_reason
    # an MFU written as a fraction, without a % sign, is that fraction of 100% (noted); with one, percent
    frac = _hand_row(**{**base, "mfu_pct": "0.40"}, mfu_basis="")
    assert frac.step_time_s == pytest.approx(catalog.step_time_s, rel=1e-9)
    assert any("without a % sign" in n for n in frac.assumptions) and frac.claimed_mfu_pct == pytest.approx(40.0)
    tiny = _hand_row(**{**base, "mfu_pct": "0.40%"}, mfu_basis="")
    assert tiny.claimed_mfu_pct == pytest.approx(0.40)


@pytest.mark.parametrize(("cell", "policy"), [
    ("recompute_granularity=selective", "selective"), ("recompute all layers", "full"), ("AC: every layer", "full"),
    ("recompute RMSNorm and MLA up-projections", "selective:layernorm+mla_up_proj"),
    ("recompute core attention", "selective")])
def test_checkpointing_written_as_a_setting_or_in_words(cell, policy):
    r = _hand_row(model="Llama 3 70B", tp="4", pp="4", act_ckpt=cell)
    assert r.included, r.exclude_reason
    assert r.workload.activation_checkpointing == policy


@pytest.mark.parametrize(("cells", "want"), [
    ({"tp": "TP2 PP4 CP2 VP5"}, {"tp": 2, "pp": 4, "cp": 2, "vpp": 5}),
    ({"tp": "tp2/pp4"}, {"tp": 2, "pp": 4, "cp": 1, "vpp": 1}),
    ({"dp": "DP 8 x TP 8", "num_gpus": "64"}, {"tp": 8, "pp": 1, "cp": 1, "vpp": 1}),
    ({"tp": "4", "pp": "", "dp": "tensor parallel size 4, pipeline parallel size 2", "num_gpus": "64"},
     {"tp": 4, "pp": 2, "cp": 1, "vpp": 1}),
])
def test_a_degree_written_in_another_plan_cell_is_read(cells, want):
    r = _hand_row(model="Llama 3.1 70B", **cells)
    assert r.included, r.exclude_reason
    p = r.workload.plan
    assert {"tp": p.tp, "pp": p.pp, "cp": p.cp, "vpp": p.vpp} == want
    assert sum("read from the" in a and "cell" in a for a in r.assumptions) == sum(
        v > 1 for k, v in want.items() if not cells.get(k))


def test_a_degree_in_its_own_cell_wins_over_another_cells_words():
    r = _hand_row(model="Llama 3.1 70B", tp="4", pp="2", dp="TP 8 PP 4")
    assert (r.workload.plan.tp, r.workload.plan.pp) == (4, 2)


def test_megatron_recompute_num_layers_reads_as_block():
    r = _hand_row(model="Llama 3.1 70B", tp="4", pp="4", act_ckpt="recompute_num_layers=20")
    assert r.workload.activation_checkpointing == "full:20"
    assert any("recompute method not stated; block taken" in a for a in r.assumptions)


@pytest.mark.parametrize("cell", ["FP8 (1x128 tiles)", "fp8 with 128x128 weight blocks", "FP8 tile-wise"])
def test_deepseek_fine_grained_fp8_reads_as_blockwise(cell):
    from trainperf.predict.runs_cells import read_precision

    assert read_precision(cell).fp8_recipe == "blockwise"


def test_rates_in_sequences_and_flops_in_other_units_are_converted():
    common = dict(model="Llama 3.1 70B", tp="4", pp="4", step_time_s="")
    tokens = _hand_row(**common, tokens_per_s_global=str(120 * 4096))
    seqs = _hand_row(**common, tokens_per_s_global="120 seq/s")
    assert seqs.step_time_s == pytest.approx(tokens.step_time_s, rel=1e-12)
    assert any("counts sequences: x 4096" in a for a in seqs.assumptions)
    assert _hand_row(**common, tokens_per_s_per_gpu="0.1171875 samples/sec/GPU").step_time_s == pytest.approx(
        tokens.step_time_s, rel=1e-12)  # 120 over the 1024 devices
    # a number derived from samples is still tokens when tokens come first (BLOOM's row 400)
    derived = _hand_row(**common, tokens_per_s_global=f"{120 * 4096} (derived from 120 samples/s)")
    assert derived.step_time_s == pytest.approx(tokens.step_time_s, rel=1e-12)
    tera = _hand_row(**common, tflops_per_gpu="410")
    assert _hand_row(**common, tflops_per_gpu="0.41 PFLOP/s").step_time_s == pytest.approx(tera.step_time_s)


def test_a_tflops_cell_counting_hardware_flops_includes_the_recomputation():
    from trainperf.accounting.conventions import hardware_flops_per_token, model_flops_per_token

    common = dict(model="Llama 3.1 70B", tp="4", pp="4", step_time_s="", act_ckpt="full")
    model = _hand_row(**common, tflops_per_gpu="410")
    hfu = _hand_row(**common, tflops_per_gpu="410 TFLOP/s/GPU (HFU)")
    w = hfu.workload
    conv = next(a for a in model.assumptions if "TFLOP/s FLOP count" in a).split(": ")[1].split(" taken")[0]
    ratio = (hardware_flops_per_token(w.model, w.seq_len, "full", conv, pipeline_chunks=4)
             / model_flops_per_token(w.model, w.seq_len, conv))
    assert ratio > 1.3 and hfu.step_time_s == pytest.approx(model.step_time_s * ratio, rel=1e-9)


@pytest.mark.parametrize(("cell", "per_node", "want"), [
    ("8 nodes", "", 64), ("2 x DGX H100", "", 16), ("16 nodes", "4", 64), ("128 GPUs (16 nodes)", "", 128),
])
def test_a_device_count_in_nodes_is_nodes_times_the_node(cell, per_node, want):
    r = _hand_row(model="Llama 3.1 8B", num_gpus=cell, gpus_per_node=per_node, global_batch_seqs="128")
    assert r.included, r.exclude_reason
    assert r.workload.num_devices == want


@pytest.mark.parametrize(("cells", "shared", "dense"), [
    ({"moe_experts": "64 routed + 2 shared"}, 2, 0),
    ({"moe_experts": "64", "arch_type": "MoE (fine-grained, 2 shared experts, first 1 layer dense)"}, 2, 1),
    ({"moe_experts": "64", "arch_type": "MoE, 3 dense layers"}, 0, 3),
    ({"moe_experts": "64", "arch_type": "MoE"}, 0, 0),
])
def test_an_moe_rows_words_state_shared_experts_and_dense_layers(cells, shared, dense):
    r = _hand_row(model="custom MoE", layers="28", hidden="2048", heads="16", kv_heads="16", ffn_hidden="10944",
                  vocab="102400", moe_topk="6", moe_expert_ffn="1408", ep="8", **cells)
    assert r.included, r.exclude_reason
    m = r.workload.model
    assert (m.moe_experts, m.moe_shared_experts, m.moe_dense_layers) == (64, shared, dense)


def test_a_one_table_file_is_validated_with_its_hold_outs_and_bad_rows_are_listed(tmp_path, capsys, monkeypatch):
    """A runs file of one table: leaving it out leaves nothing to fit (the vendor defaults predict
    it), which crashed the fit on an empty problem. Rows whose values no rule bounds (a sequence
    beyond any position table, an MFU that is no percentage) are listed as unread with their
    reason; the table is still read."""
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    header = list(csv.DictReader(FIXTURE.open()).fieldnames or [])
    base = dict(table_id="T", model="Llama3-8B", seq_len="8192", global_batch_seqs="128", micro_batch="1",
                hardware="H100 SXM 80GB", num_gpus="64", tp="8", act_ckpt="none", precision="bf16",
                framework="NeMo 2.0", tokens_per_s_per_gpu="1500")
    rows = [{**base, "row_id": "ok"}, {**base, "row_id": "long", "seq_len": "1e12"},
            {**base, "row_id": "neg", "tokens_per_s_per_gpu": "", "mfu_pct": "-0.5"},
            {**base, "row_id": "big", "tokens_per_s_per_gpu": "", "mfu_pct": "250"}]
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows({**dict.fromkeys(header, ""), **r} for r in rows)
    assert main(["validate", "--data", str(path)]) == 0
    out = capsys.readouterr().out
    assert "leave-one-(stack, silicon)-out" in out
    assert "row long (T): model does not validate: max_seq_len" in out
    assert "row neg (T): mfu_pct '-0.5' is not a percentage" in out and "row big (T): mfu_pct '250'" in out


@pytest.mark.parametrize(("cell", "preset"), [
    ("meta-llama/Llama-3.3-70B-Instruct", "llama3.1-70b"), ("DeepSeek-R1", "deepseek-v3"),
    ("Mistral AI Mixtral 8x22B", "mixtral-8x22b"), ("OpenAI gpt-oss-120b", "gpt-oss-120b"),
])
def test_a_model_cell_as_its_authors_write_it_names_the_preset_and_says_how(cell, preset):
    r = _hand_row(model=cell, num_gpus="64", tp="8", pp="1", global_batch_seqs="128")
    assert r.included, r.exclude_reason
    assert r.workload.model.name == preset
    assert any(a.startswith(f"the model cell {cell!r} read as the preset {preset}") for a in r.assumptions)


def test_a_model_cell_of_another_network_is_not_read_as_a_preset():
    r = _hand_row(model="Mistral-7B-v0.3", num_gpus="64", global_batch_seqs="128")
    assert not r.included and "model shape" in r.exclude_reason


def test_a_row_whose_fp8_recipe_its_silicon_lacks_is_listed_not_fatal():
    """MXFP8 needs MX-format cores (Blackwell, CDNA4): on an H100 the row is unread with that
    reason, and the other rows of the table are still predicted."""
    r = _hand_row(model="Llama 3.1 70B", num_gpus="64", tp="4", pp="1", global_batch_seqs="128", precision="MXFP8")
    assert not r.included
    assert "training.fp8_recipe='mxfp8'" in r.exclude_reason and "hopper has no MX-format cores" in r.exclude_reason
    ok = _hand_row(model="Llama 3.1 70B", num_gpus="64", tp="4", pp="1", global_batch_seqs="128", precision="FP8-CS")
    assert ok.included and ok.workload.fp8_recipe == "tensorwise"


_VOCAB = {
    "model": ["Llama 3 8B", "Llama 3.1 405B", "Mixtral 8x22B", "DeepSeek-V3", "Qwen3-30B-A3B", "gpt-oss-120b",
              "Nemotron-4 340B", "Grok-1", "Gemma 2 27B", "GPT-3 175B", "meta-llama/Llama-3.3-70B-Instruct"],
    "hardware": ["H100", "B200", "GB200 NVL72", "MI300X", "MI355X", "TPU v5p", "A100 80GB", "H800", "Gaudi 3",
                 "p5.48xlarge", "V100", "H20"],
    "precision": ["bf16", "fp8", "MXFP8", "FP8-CS", "fp8 blockwise", "fp16", "NVFP4", "float8 rowwise"],
    "framework": ["NeMo 2.0", "Megatron-LM", "torchtitan", "MaxText", "DeepSpeed", "LLM Foundry", "Colossal-AI"],
    "act_ckpt": ["none", "full", "selective", "selective op", "offload", "block, 4 layers", "",
                 "save_dot_except_mlpwi", "selective (layernorm, mla_up_proj)"],
    "tp": ["1", "2", "8", ""], "pp": ["1", "4", "16", ""], "cp": ["1", "2", ""], "ep": ["1", "8", "64", ""],
    "vpp": ["", "2", "interleaved"], "micro_batch": ["1", "2"], "seq_len": ["4096", "8192", "131072"],
    "num_gpus": ["8", "64", "1024"], "global_batch_seqs": ["64", "1024"], "fsdp_zero": ["", "FSDP", "zero-1"],
}


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({k: st.sampled_from(v) for k, v in _VOCAB.items()}),
       st.floats(min_value=0.5, max_value=60.0))
def test_any_row_is_predicted_or_listed_with_its_reason(cells, step_s):
    """A row of any mix of plausible cells is either predicted (a finite positive step time) or
    unread with a one-line reason: never an exception that would stop `validate --data`."""
    (r,) = parse_hand_rows([{"row_id": "h", "table_id": "fuzz", "source": "hand", **cells,
                             "step_time_s": f"{step_s:.3f}"}])
    if r.included:
        assert 0.0 < predict_row(r) < float("inf")
    else:
        assert r.exclude_reason and "\n" not in r.exclude_reason


_SHAPE = dict(layers="52", hidden="4096", heads="32", kv_heads="8", ffn_hidden="21504", vocab="131072",
              num_gpus="64", tp="8", pp="1", global_batch_seqs="128")


@pytest.mark.parametrize(("model", "arch", "word"), [
    ("Nemotron-H 56B", "hybrid Mamba2-Transformer", "mamba2"), ("custom", "RWKV-7", "rwkv"),
    ("MiniMax-Text-01", "lightning attention + MoE", "lightning attention"),
    ("Jamba 1.5 Mini", "dense (SwiGLU, GQA)", "jamba"), ("T5-11B", "encoder-decoder", "encoder-decoder"),
])
def test_a_network_that_is_not_a_decoder_transformer_is_left_unread_by_name(model, arch, word):
    """Predicting a state-space, hybrid, linear-attention or encoder-decoder network as a
    transformer of its width would be a silently wrong number: the row is unread, saying why
    (a Nemotron-H row whose shape is not the named preset's too: tests/test_hybrid_mamba.py reads
    the ones whose shape is)."""
    r = _hand_row(model=model, arch_type=arch, **_SHAPE)
    assert not r.included and f"names {word!r}" in r.exclude_reason


@pytest.mark.parametrize(("arch", "layers_windowed"), [
    ("dense, sliding window 4096", 52), ("dense, sliding window 4k alternating with global attention", 26),
])
def test_a_sliding_window_the_architecture_cell_states_is_read(arch, layers_windowed):
    r = _hand_row(model="custom 7B", arch_type=arch, **_SHAPE)
    assert r.included, r.exclude_reason
    assert (r.workload.model.sliding_window, r.workload.model.sliding_window_layers) == (4096, layers_windowed)
    assert any(a.startswith("sliding window of 4,096 tokens") for a in r.assumptions)


@pytest.mark.parametrize(("notes", "factor"), [("capacity factor 1.25, tokens dropped", 1.25), ("CF=2", 2.0),
                                               ("dropless", 1.0), ("", 1.0)])
def test_an_moe_rows_capacity_factor_is_its_expert_load(notes, factor):
    r = _hand_row(model="Mixtral 8x7B", num_gpus="64", tp="2", pp="1", ep="8", global_batch_seqs="128", notes=notes)
    assert r.included, r.exclude_reason
    assert r.workload.moe_imbalance == factor
    assert any(a.startswith("expert capacity factor") for a in r.assumptions) == (factor != 1.0 or "CF" in notes)


@pytest.mark.parametrize(("hardware", "cell", "want"), [
    ("H100 SXM5 80GB", "16 nodes (128 GPUs)", 128),  # the GPUs it names, not the nodes
    ("H100 SXM5 80GB", "16 nodes x 8 GPUs", 128),
    ("GB200 NVL72", "2 racks", 144), ("GB200", "1 NVL72 rack", 72),
    ("TPU v5p-512", "", 256),  # a v5p slice's -N counts TensorCores, two a chip
    ("TPU v6e-256", "", 256), ("v5litepod-64", "", 64),  # a v5e/v6e slice's counts chips
])
def test_a_device_count_as_written_counts_devices(hardware, cell, want):
    r = _hand_row(model="Llama 3.1 8B", hardware=hardware, num_gpus=cell, precision="bf16",
                  global_batch_seqs="2304", tp="1", pp="1", fsdp_zero="FSDP")
    assert r.included, r.exclude_reason
    assert r.workload.num_devices == want


@pytest.mark.parametrize(("tp_cell", "sp"), [
    ("4 (with SP)", True), ("4 + sequence parallel", True), ("4, no SP", False), ("4 (SP off)", False),
    ("4 (sp=false)", False)])
def test_sequence_parallelism_written_beside_the_tp_degree_is_read(tp_cell, sp):
    r = _hand_row(model="Llama 3 70B", tp=tp_cell, pp="4", sp="", num_gpus="64", framework="PyTorch (custom)")
    assert r.included, r.exclude_reason
    assert (r.workload.plan.tp, r.workload.plan.sequence_parallel) == (4, sp)
    assert any("as the tp cell" in a for a in r.assumptions)
    assert not any("sequence parallelism not stated" in a for a in r.assumptions)


def test_a_stack_whose_sharding_cannot_hold_the_states_takes_its_most_sharded_stage():
    """Megatron-LM shards with its distributed optimizer at most (ZeRO-1): a 405B model without
    tensor or pipeline parallelism cannot hold its 16-bit weights and gradients on an 80 GiB H100
    even so; the row takes ZeRO-1 and says that the states still do not fit."""
    r = _hand_row(model="Llama 3.1 405B", tp="1", pp="1", num_gpus="1024", framework="Megatron-LM (custom)",
                  fsdp_zero="")
    assert r.included, r.exclude_reason
    assert (r.workload.plan.zero_stage, r.workload.plan.fsdp) == (1, 1)
    assert any("ZeRO-1 over the 1024 data-parallel ranks taken (the stack's most sharded" in a for a in r.assumptions)


@pytest.mark.parametrize(("cells", "cp", "sp"), [
    ({"sp": "8"}, 8, False), ({"sp": "Ulysses 8"}, 8, False),
    ({"sp": "", "dp": "8 (8-way sequence parallel)"}, 8, False),
    ({"sp": "8", "tp": "8"}, 1, True),  # the tp degree: Megatron's sequence parallelism over the tp ranks
])
def test_a_sequence_parallel_degree_of_its_own_is_context_parallelism(cells, cp, sp):
    """DeepSpeed-Ulysses calls its context parallelism "sequence parallel" and gives it a degree;
    Megatron's sequence parallelism has none (it splits over the tp ranks)."""
    r = _hand_row(model="Llama 2 7B", seq_len="262144", global_batch_seqs="8", num_gpus="64", tp=cells.pop("tp", "1"),
                  pp="1", cp="", framework="Megatron-DeepSpeed (DeepSpeed-Ulysses)", **cells)
    assert r.included, r.exclude_reason
    assert (r.workload.plan.cp, r.workload.plan.sequence_parallel) == (cp, sp)
    assert not any("not read as yes or no" in a for a in r.assumptions)


@pytest.mark.parametrize(("cells", "says"), [
    ({"step_time_s": "", "tflops_per_gpu": "0"}, "tflops_per_gpu '0' is not a positive finite figure"),
    ({"step_time_s": "", "tokens_per_s_global": "0"}, "tokens/s '0' is not positive"),
    ({"step_time_s": "0"}, "step time '0' is not positive"),
    ({"step_time_s": "", "tflops_per_gpu": "1e308"}, "not a positive finite time"),
])
def test_a_time_that_is_not_a_positive_finite_figure_leaves_the_row_unread(cells, says):
    """Found by fuzzing `validate --data`: a zero or overflowing rate divided by zero (a traceback)."""
    r = _hand_row(model="Llama 3 70B", tp="8", pp="4", **cells)
    assert not r.included and r.exclude_kind == "cell"
    assert says in r.exclude_reason, r.exclude_reason
