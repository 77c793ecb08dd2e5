"""Hostile inputs (issue 30): every reader -- framework logs, run records, runs tables, Hugging
Face configs, workload files, stack profiles, the calibration cache -- given values of any type
and size answers with one line and exit code 2, or reads on and counts what it skipped; never a
traceback. Then each reproduction of the audit, fixed, as a regression test."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trainperf.cli.main import main
from trainperf.errors import TrainperfError
from trainperf.records import RunRecord, StepRecord
from trainperf.records.jsonl import read_run, write_run
from trainperf.records.run_record import MAX_STEP_INDEX, MAX_TOKENS_PER_STEP
from trainperf.specs.workload_file import workload_from_dict, workload_to_dict

FIXTURES = Path(__file__).parent / "fixtures"
SETTINGS = settings(max_examples=int(os.environ.get("TRAINPERF_HOSTILE_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])

# Values of every JSON type and of absurd size, with the audit's own among them.
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-10**30, max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from([-5, True, 1e26, "2048", "big", 10**26, 2**63, -2**63 - 1, 1e-300, 1e300, "", "\x00",
                     "nan", "\x1b[2J", "<script>x</script>"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=6)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse
            code = e.code
    return int(code or 0), out.getvalue(), err.getvalue()


def one_line_or_ok(code: int, out: str, err: str, argv: list[str]) -> None:
    """The contract: success, or one line on stderr and exit code 2; never a traceback."""
    assert "Traceback" not in err and "Traceback" not in out, (argv, err[-2000:])
    assert code in (0, 2), (argv, code, err[-2000:])
    if code == 2:
        lines = [x for x in err.splitlines() if not x.startswith("trainperf: note: ")]
        assert len(lines) == 1 and lines[0].startswith(("trainperf ", "usage")), (argv, err[-2000:])


def _workload(n: int = 8):
    return workload_from_dict({
        "model": {"preset": "llama3-8b"}, "hardware": {"device": "h100-sxm", "num_devices": n},
        "parallel": {"fsdp": n}, "training": {"seq_len": 4096, "global_batch": 2 * n, "micro_batch": 2,
                                              "precision": "bf16"}})


# ------------------------------------------------------------------------------ run records
STEP_FIELDS = ["step", "step_time_s", "tokens", "loss", "grad_norm", "memory_GiB", "claimed_tokens_per_s",
               "claimed_tflops_per_device", "claimed_mfu_pct", "breakdown", "rank", "flag", "extra"]


@SETTINGS
@given(bad=st.lists(st.tuples(st.sampled_from(STEP_FIELDS), values), min_size=1, max_size=4))
def test_a_record_step_of_any_value_is_kept_valid_or_counted_skipped(tmp_path_factory, bad):
    d = tmp_path_factory.mktemp("rec")
    lines = [{"type": "run", "schema": 1, "source": "bench", "workload": workload_to_dict(_workload()),
              "meta": {"name": "x"}}]
    lines += [{"type": "step", "step": k, "step_time_s": 1.0, "tokens": 65536} for k in range(1, 6)]
    lines[3] = {**lines[3], **dict(bad)}
    (d / "steps.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    run = read_run(d / "steps.jsonl")
    assert len(run.steps) + run.meta["skipped_lines"] == 5
    for s in run.steps:
        assert isinstance(s.step, int) and abs(s.step) <= MAX_STEP_INDEX
        assert s.tokens is None or (type(s.tokens) is int and 0 <= s.tokens <= MAX_TOKENS_PER_STEP)
        assert s.memory_GiB is None or (math.isfinite(s.memory_GiB) and s.memory_GiB >= 0)
    argv = ["compare", str(d)]  # (the report of such records: test_the_audit_s_step_values_are_counted_skipped)
    code, out, err = run_cli(argv)
    one_line_or_ok(code, out, err, argv)


@pytest.mark.parametrize(("field", "value"), [("tokens", -5), ("tokens", True), ("tokens", 1e26),
                                              ("tokens", "2048"), ("tokens", float("nan")), ("memory_GiB", "big"),
                                              ("step", 10**26)])
def test_the_audit_s_step_values_are_counted_skipped(tmp_path, capsys, field, value):
    d = tmp_path / "run"
    d.mkdir()
    steps = [StepRecord(step=k, step_time_s=1.0, tokens=65536) for k in range(1, 11)]
    write_run(RunRecord("bench", steps, _workload(), {"name": "r"}), d / "steps.jsonl")
    lines = (d / "steps.jsonl").read_text().splitlines()
    lines[5] = json.dumps({**json.loads(lines[5]), field: value})
    (d / "steps.jsonl").write_text("\n".join(lines) + "\n")
    run = read_run(d)
    assert len(run.steps) == 9 and run.meta["skip_reasons"] == {"bad_step": 1}
    for argv in (["compare", str(d)],
                 ["report", str(d), "--out", str(tmp_path / "rep"), "--no-published", "--no-predict"],
                 ["calibrate-model", str(d), "-o", str(tmp_path / "k.json")]):
        assert main(argv) == 0, argv
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        assert "1 line skipped: 1 steps with invalid fields" in out, (argv, out)


# ------------------------------------------------------------------------------ framework logs
MAXTEXT = ("completed step: {step}, seconds: {secs}, TFLOP/s/device: 460.480, Tokens/s/device: 1035.970, "
           "total_weights: {weights}, loss: 0.000")
numbers = st.one_of(st.integers(min_value=-10**30, max_value=10**30).map(str),
                    st.sampled_from(["99999999999999999999999999", "9" * 400, "nan", "inf", "-5", "1e26", "0",
                                     "1e-320", "18446744073709551616", "9223372036854775808"]))


@SETTINGS
@given(step=numbers, secs=numbers, weights=numbers, at=st.integers(0, 20))
def test_a_log_line_of_any_number_never_wraps_or_discards_the_run(tmp_path_factory, step, secs, weights, at):
    d = tmp_path_factory.mktemp("log")
    lines = [MAXTEXT.format(step=k, secs="7.9", weights=524288) for k in range(30)]
    lines[at] = MAXTEXT.format(step=step, secs=secs, weights=weights)
    (d / "m.log").write_text("\n".join(lines) + "\n")
    argv = ["parse", str(d / "m.log"), "--device", "h100-sxm", "--model", "llama2-70b", "--seq-len", "4096",
            "--global-batch", "128", "--num-devices", "64", "--json"]
    code, out, err = run_cli(argv)
    one_line_or_ok(code, out, err, argv)
    try:
        in_range = 0 <= int(step) <= MAX_STEP_INDEX
    except ValueError:
        in_range = False
    if code == 0 and not in_range:  # a step index no counter holds: that line alone is left out
        got = json.loads(out)
        assert got["steps_total"] == 29 and not got["superseded_steps"], (step, got["steps_total"])


def test_a_27_digit_maxtext_step_is_one_malformed_line(tmp_path, capsys):
    src = (FIXTURES / "logs" / "maxtext_llama2_70b_64xh100.log").read_text().splitlines()
    i = next(k for k, x in enumerate(src) if x.startswith("0: completed step: 3,"))
    src[i] = src[i].replace("completed step: 3,", "completed step: 99999999999999999999999999,")
    (tmp_path / "m.log").write_text("\n".join(src) + "\n")
    assert main(["parse", str(tmp_path / "m.log"), "--device", "h100-sxm"]) == 0
    out = capsys.readouterr().out
    assert "(1 malformed step lines)" in out and "49 parsed (rank 0); 49 kept" in out
    assert "-9223372036854775808" not in out and "restart" not in out


# ------------------------------------------------------------------------------ user files
WORKLOAD_KEYS = [("model", "preset"), ("model", "layers"), ("model", "hidden"), ("hardware", "device"),
                 ("hardware", "num_devices"), ("hardware", "peak_tflops"), ("training", "seq_len"),
                 ("training", "global_batch"), ("training", "precision"), ("parallel", "tp"), ("parallel", "fsdp")]


@SETTINGS
@given(edits=st.lists(st.tuples(st.sampled_from(WORKLOAD_KEYS), values), min_size=1, max_size=3))
@example(edits=[(("hardware", "peak_tflops"), 1), (("training", "precision"), [])])  # found by CI, 2026-11-29
def test_a_workload_file_of_any_value_is_one_line(tmp_path_factory, edits):
    d = tmp_path_factory.mktemp("w")
    data = {"model": {"preset": "llama3-8b"}, "hardware": {"device": "h100-sxm", "num_devices": 8},
            "training": {"seq_len": 4096, "global_batch": 16, "micro_batch": 2}}
    for (section, key), v in edits:
        data.setdefault(section, {})[key] = v
    path = d / "w.json"
    path.write_text(json.dumps(data))
    for argv in (["predict", str(path)], ["flops", str(path)]):
        code, out, err = run_cli(argv)
        one_line_or_ok(code, out, err, argv)


HF_KEYS = ["num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size",
           "vocab_size", "max_position_embeddings", "tie_word_embeddings", "head_dim", "rope_scaling", "model_type"]


@SETTINGS
@given(edits=st.lists(st.tuples(st.sampled_from(HF_KEYS), values), min_size=1, max_size=3))
def test_a_hugging_face_config_of_any_value_is_one_line(tmp_path_factory, edits):
    d = tmp_path_factory.mktemp("hf")
    cfg = json.loads((FIXTURES / "hf_configs" / "llama-3.1-8b.json").read_text()) \
        if (FIXTURES / "hf_configs" / "llama-3.1-8b.json").exists() else {
            "model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
            "intermediate_size": 512, "vocab_size": 1000}
    cfg.update(dict(edits))
    (d / "config.json").write_text(json.dumps(cfg))
    argv = ["flops", "--hf-config", str(d / "config.json"), "--seq-len", "2048"]
    code, out, err = run_cli(argv)
    one_line_or_ok(code, out, err, argv)


@SETTINGS
@given(body=st.dictionaries(st.sampled_from(["name", "knobs", "generations", "frameworks", "kernels", "defaults",
                                             "capabilities", "description", "fit", "x"]), values, max_size=4))
def test_a_stack_profile_of_any_value_is_one_line(tmp_path_factory, body):
    d = tmp_path_factory.mktemp("stack")
    lines = []
    for k, v in body.items():
        lines.append(f"{k} = {json.dumps(v)}" if not isinstance(v, float) or math.isfinite(v) else f"{k} = nan")
    (d / "p.toml").write_text("\n".join(lines) + "\n")
    argv = ["predict", "--model", "llama3-8b", "--device", "h100-sxm", "--num-devices", "8", "--seq-len", "4096",
            "--global-batch", "16", "--stack", str(d / "p.toml")]
    code, out, err = run_cli(argv)
    one_line_or_ok(code, out, err, argv)


RUNS_TABLE = FIXTURES / "runs_tables" / "messy_runs.csv"
CELLS = ["layers", "hidden", "heads", "seq_len", "global_batch_seqs", "micro_batch", "num_gpus", "tp", "pp",
         "step_time_s", "tokens_per_s_global", "mfu_pct", "precision", "hardware"]
cells = st.one_of(st.text(max_size=10), numbers, st.sampled_from(["1e-320 s", "1e308k", "tp=" + "9" * 400,
                                                                  "n/a", "\x00", "-1", "1-8", "9" * 400]))


@SETTINGS
@given(edits=st.lists(st.tuples(st.sampled_from(CELLS), cells), min_size=1, max_size=3))
def test_a_runs_table_of_any_cell_is_one_line(tmp_path_factory, edits):
    d = tmp_path_factory.mktemp("csv")
    rows = list(csv.reader(RUNS_TABLE.open(encoding="utf-8")))[:3]
    for col, v in edits:
        rows[1][rows[0].index(col)] = v
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    (d / "t.csv").write_text(buf.getvalue(), encoding="utf-8")
    argv = ["validate", "--data", str(d / "t.csv"), "--no-loto"]
    code, out, err = run_cli(argv)
    one_line_or_ok(code, out, err, argv)


@SETTINGS
@given(entry=st.dictionaries(st.sampled_from(["cpu_model", "threads", "peak_tflops", "memory_bandwidth_GB_per_s",
                                              "measured_at", "method", "extra"]), values, max_size=7),
       top=st.one_of(st.none(), values))
def test_a_calibration_cache_of_any_value_is_ignored_or_valid(tmp_path_factory, entry, top):
    from trainperf.specs.cpu_calibration import PEAK_TFLOPS, load_calibration

    d = tmp_path_factory.mktemp("cal")
    path = d / "calibration.json"
    entry = {**entry, "cpu_model": "X"}
    data = top if top is not None else {"version": 1, "entries": {"X [1 thread]": entry}}
    path.write_text(json.dumps(data))
    cal = load_calibration(path, cpu_model="X")  # never raises
    if cal is not None:
        assert all(PEAK_TFLOPS.lo <= v <= PEAK_TFLOPS.hi for v in cal.peak_tflops.values())


def test_deep_nesting_is_one_line_in_every_reader(tmp_path, capsys):
    """Issue 30: deeply nested TOML/JSON gave a 3,002-line RecursionError."""
    (tmp_path / "deep.toml").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "deep_obj.json").write_text('{"devices":' + '{"a":' * 300 + "1" + "}" * 301)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text('{"rope_scaling":' + "[" * 500 + "]" * 500 + "}")
    (tmp_path / "w.toml").write_text("[training]\nseq_len = " + "[" * 200 + "]" * 200 + "\n")
    base = ["predict", "--model", "llama3-8b", "--device", "h100-sxm", "--num-devices", "8", "--seq-len", "4096",
            "--global-batch", "16"]
    for argv in ([*base, "--stack", str(tmp_path / "deep.toml")],
                 [*base, "--calibration", str(tmp_path / "deep.json")],
                 [*base, "--calibration", str(tmp_path / "deep_obj.json")],
                 ["flops", "--hf-config", str(tmp_path / "hf")],
                 ["predict", str(tmp_path / "w.toml")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ("levels deep" in err or "malformed" in err), err


# ------------------------------------------------------------------------------ the audit, fixed
def _run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir(exist_ok=True)
    steps = [StepRecord(step=k, step_time_s=1.0, tokens=65536) for k in range(1, 6)]
    write_run(RunRecord("bench", steps, _workload(), {"name": "r"}), d / "steps.jsonl")
    return d


def _table(tmp_path: Path, **cells: str) -> Path:
    rows = list(csv.reader(RUNS_TABLE.open(encoding="utf-8")))[:2]
    for col, v in cells.items():
        rows[1][rows[0].index(col)] = v
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    (tmp_path / "t.csv").write_text(buf.getvalue(), encoding="utf-8")
    return tmp_path / "t.csv"


PREDICT = ["predict", "--model", "llama3-8b", "--device", "h100-sxm", "--num-devices", "8", "--seq-len", "4096",
           "--global-batch", "16"]
AUDIT = [
    (lambda t: ["report", str(_run_dir(t)), "--out", str(t / "r"), "--peak-tflops", "nan"], "--peak-tflops=nan"),
    (lambda t: ["report", str(_run_dir(t)), "--out", str(t / "r"), "--peak-tflops", "inf"], "--peak-tflops=inf"),
    (lambda t: ["report", str(_run_dir(t)), "--out", str(t / "r"), "--peak-tflops", "-1"], "--peak-tflops=-1.0"),
    (lambda t: [*PREDICT, "--peak-tflops", "1e-300"], "hardware.peak_tflops=1e-300"),
    (lambda t: ["bench", "--lr", "inf", "--out", str(t / "b")], "--lr=inf"),
    (lambda t: ["slurm", "--nodes", "2", "--device", "cpu", "--time", "banana", "--out", str(t / "s")],
     "--time='banana'"),
    (lambda t: ["calibrate-model", str(_run_dir(t)), "--knobs", "__class__", "-o", str(t / "k.json")],
     "--knobs='__class__'"),
    (lambda t: ["calibrate-model", str(_run_dir(t)), "--knobs", "__class__", "-o", str(t / "k.toml")],
     "--knobs='__class__'"),
    (lambda t: ["calibrate-model", str(_run_dir(t)), "--name", "a\nb", "-o", str(t / "k.toml")], "--name="),
    (lambda t: ["scaling", "--mode", "weak", "--base-devices", "8", "--devices", "99999999999999",
                "--base-tokens-per-s", "1", "--tokens-per-s", "1"], "--devices=99999999999999"),
    (lambda t: ["published", "--precision", "nope"], "--precision='nope' is unknown"),
    (lambda t: ["bench", "--out", str(_table(t)), "--steps", "1"], "is a regular file, not a directory"),
    (lambda t: ["calibrate", "--sizes", "1000000"], "--sizes=1000000"),
    (lambda t: ["calibrate", "--threads", "100000"], "--threads=100000"),
    (lambda t: ["calibrate", "--threads", "5000"], "--threads=5000"),
    (lambda t: ["calibrate", "--repeats", "100000000"], "--repeats=100000000"),
    (lambda t: ["validate", "--data", str(_table(t, **{c: "x" for c in ("step_time_s", "tokens_per_s_global",
                                                                       "tokens_per_s_per_gpu", "tflops_per_gpu",
                                                                       "mfu_pct", "model", "hardware")})),
                "--no-loto"], "none of its 1 row(s) can be predicted"),
    (lambda t: ["validate", "--data", str(_table(t, layers="9" * 400)), "--no-loto"], "is not a finite number"),
    (lambda t: ["validate", "--data", str((t / "nul.csv", (t / "nul.csv").write_bytes(b"\0" * 4096))[0]),
                "--no-loto"], "nul.csv"),
    (lambda t: ["bench", "--checkpoint-dir", str(_table(t)), "--checkpoint-every", "1", "--out", str(t / "b")],
     "--checkpoint-dir="),
]


@pytest.mark.parametrize(("argv", "said"), AUDIT, ids=[f"audit{i}" for i in range(len(AUDIT))])
def test_each_reproduction_of_the_audit_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, argv, said):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    args = argv(tmp_path)
    assert main(args) == 2, args
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and said in err and "Traceback" not in err, (args, err)
    if args[0] == "calibrate":  # refused before torch measures anything
        assert "matmul" not in out


def test_calibrate_refuses_before_importing_torch(tmp_path):
    import subprocess

    code = ("import sys\nfrom trainperf.cli.main import main\n"
            "rc = main(['calibrate', '--sizes', '1000000'])\nprint(rc, 'torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={"TRAINPERF_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin",
                            "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    assert p.stdout.split() == ["2", "False"], p.stderr[-2000:]


def test_no_reader_raises_anything_but_a_one_line_error(tmp_path):
    """The library contract under the CLI: a hostile record file raises TrainperfError or reads."""
    (tmp_path / "steps.jsonl").write_bytes(b"\0" * 1000 + b'\n{"type":"run"}\n' + b"\xff\xfe" * 50 + b"\n")
    try:
        run = read_run(tmp_path)
    except TrainperfError as e:
        assert "\n" not in str(e)
    else:
        assert run.meta["skipped_lines"] >= 1
