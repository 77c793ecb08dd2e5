"""Issue 31, a user's first hour with ``parse``, ``compare``, ``hw`` and ``models``: each item end
to end.

10 a torchtitan log's "Applied selective activation checkpointing" and its tokens per step;
11 ``parse`` tables that wrap, quotes cut at a word, no LoRA row for a pretraining run;
12 ``compare`` labels each row with the file given; 13 a torchtitan log is predicted with the
torchtitan stack; 14 ``hw`` fits a terminal; 15 ``models`` names GQA.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainperf.cli.main import main

FIXTURES = Path(__file__).parent / "fixtures"
TITAN_LOG = FIXTURES / "logs" / "torchtitan_llama3_8b_8xh100.log"
AC_LINE = ("[rank0]:[titan] 2024-03-17 10:00:01,700 - root - INFO - Applied {mode} activation checkpointing "
           "to the model\n")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def titan_log(tmp_path: Path, mode: str | None, name: str = "titan_llama3_8b_8xh100.log") -> Path:
    """The torchtitan fixture, with torchtitan's checkpointing line after the model line."""
    lines = TITAN_LOG.read_text().splitlines(keepends=True)
    if mode is not None:
        lines.insert(8, AC_LINE.format(mode=mode))
    p = tmp_path / name
    p.write_text("".join(lines))
    return p


# --- 10 and 13: what a torchtitan log says, and the stack it comes from ------------------------------
@pytest.mark.parametrize(("mode", "policy"), [("selective", "selective-op"), ("full", "full"), (None, "none")])
def test_torchtitan_checkpointing_line_and_tokens_per_step(capsys, tmp_path, mode, policy):
    rc, out, _ = run(capsys, "parse", str(titan_log(tmp_path, mode)), "--json")
    d = json.loads(out)
    assert rc == 0 and d["workload"].endswith(f"AC {policy}")
    assert "tokens_per_step" in d["fields_in_log"] and "tokens_per_step" not in d["fields_not_in_log"]
    assert d["tokens_per_step"] == 8 * 8192  # global batch 8 x sequence 8192, both stated
    assert d["workload_fields"]["training.stack"] == "log (a torchtitan log comes from the torchtitan stack)"
    ac_from = d["workload_fields"]["training.activation_checkpointing"]
    if mode is None:
        assert ac_from == "default (none; give --activation-checkpointing if the run recomputed)"
    else:
        assert ac_from == f"log (line 9: Applied {mode} activation checkpointing to the model)"
    if mode == "selective":
        assert any("torchtitan's 'selective'" in n and "selective-op" in n for n in d["workload_notes"])


def test_report_predicts_a_torchtitan_log_with_the_torchtitan_stack(tmp_path):
    from trainperf.predict import predict
    from trainperf.report.load import load_paths

    (loaded,) = load_paths([titan_log(tmp_path, "selective")])
    w = loaded.run.workload
    assert w.stack == "torchtitan" and w.activation_checkpointing == "selective-op"
    assert predict(w).knobs.device.startswith("generic+torchtitan")  # the torchtitan profile's shares


# --- 11: parse tables --------------------------------------------------------------------------------
def test_parse_tables_wrap_quote_whole_words_and_leave_out_lora(capsys, tmp_path):
    rc, out, _ = run(capsys, "parse", str(titan_log(tmp_path, "selective")))
    assert rc == 0
    tables = out.split("\n\n")
    for block in tables:
        if block.startswith(("field ", "summary (trainperf)", "claimed by the log", "convention ")):
            assert max(map(len, block.splitlines())) <= 120, block
    # quotes drop the logging prefix and end at a whole word
    assert "(line 5: CUDA capacity: NVIDIA" in out and "79.11GiB m)" not in out
    assert "[titan] 2024-03-17" not in out
    assert "n_kv_heads=8, …)" in out
    conventions = [line.split()[0] for line in out.split("convention       FLOPs/token")[1].splitlines()[2:]
                   if line and not line.startswith("note")]
    assert "lora" not in conventions and {"megatron", "palm", "6n", "exact"} <= set(conventions)


def test_quote_cuts_at_a_word():
    from trainperf.ingest.base import quote

    assert quote("a " * 10) == "a a a a a a a a a a"
    q = quote("[titan] 2024-03-17 10:00:00,800 - root - INFO - " + "word " * 40, width=30)
    assert q == "word word word word word …" and len(q) <= 30
    assert quote("x" * 50, width=10) == "xxxxxxxxx…"


# --- 12: compare labels ------------------------------------------------------------------------------
def test_compare_labels_each_row_with_the_file_given(capsys, tmp_path):
    log = titan_log(tmp_path, None)
    saved = tmp_path / "titan.jsonl"
    assert run(capsys, "parse", str(log), "--save", str(saved))[0] == 0
    rc, out, _ = run(capsys, "compare", str(saved), str(log), str(log), "--json")
    names = [r["run"] for r in json.loads(out)["runs"]]
    assert rc == 0
    assert names == ["titan.jsonl (run of titan_llama3_8b_8xh100.log)", "titan_llama3_8b_8xh100.log",
                     "titan_llama3_8b_8xh100.log#2"]


# --- 14: hw fits a terminal --------------------------------------------------------------------------
def test_hw_table_is_narrow_and_the_cpu_name_drops_its_flags(capsys, monkeypatch):
    import dataclasses

    from trainperf.specs import cpu_calibration, hardware

    isa = "avx2 fma avx512f avx512_bf16 avx512_fp16 amx_tile amx_bf16"
    monkeypatch.setattr(cpu_calibration, "isa_tag", lambda flags=None: isa)
    real = hardware.list_hardware

    def with_xeon():
        return [dataclasses.replace(h, name=f"CPU: Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz (2 cores, {isa})")
                if h.kind == "cpu" else h for h in real()]

    monkeypatch.setattr(hardware, "list_hardware", with_xeon)
    rc, out, _ = run(capsys, "hw")
    assert rc == 0 and max(map(len, out.splitlines())) <= 160
    assert "CPU: Intel Xeon Platinum 8480+ (2 cores)" in out and "amx" not in out
    rc, out, _ = run(capsys, "hw", "cpu")
    assert rc == 0 and "cpu:" in out


# --- 15: models names GQA --------------------------------------------------------------------------
@pytest.mark.parametrize(("config", "text"), [
    ("qwen2-7b", "gqa: 4 KV heads for 28 query heads (7 each)"),
    ("llama3.1-8b", "gqa: 8 KV heads for 32 query heads (4 each)"),
    ("gpt2", "mha"),
    ("deepseek-v3", "mla"),
])
def test_models_names_the_attention_layout(capsys, config, text):
    cfg = str(FIXTURES / "hf_configs" / f"{config}.json")
    rc, out, _ = run(capsys, "models", "--hf-config", cfg)
    row = next(line for line in out.splitlines() if line.startswith("attention "))
    assert rc == 0 and row.split(None, 1)[1] == text
    rc, out, _ = run(capsys, "models", "--hf-config", cfg, "--json")
    assert json.loads(out)["attention_layout"] == text.split(":")[0]


def test_models_names_mqa():
    from trainperf.specs.presets import get_model

    m = get_model("llama2-7b").replace(kv_heads=1)
    assert m.attention_layout == "mqa"

