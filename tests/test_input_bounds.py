"""Every numeric input is bounded before any work, as one line and exit 2 (plan, predict, flops,
mfu, bench's workload validation); user files are size-capped before they are read.

Time and memory of the absurd cases are measured by ``benchmarks/absurd_inputs.py`` (whole
processes), not here.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainperf.cli.main import main
from trainperf.errors import InputFileError, SpecError, TrainperfError
from trainperf.specs import bounds
from trainperf.specs.bounds import Bound, RealBound
from trainperf.specs.datafiles import max_bytes_for, read_user_text
from trainperf.specs.workload_file import load_workload

WORKLOAD = ["--model", "llama3-8b", "--device", "h100-sxm", "--num-devices", "8", "--seq-len", "4096",
            "--global-batch", "8"]
BASE = {
    "predict": ["predict", *WORKLOAD],
    "mfu": ["mfu", *WORKLOAD, "--step-time", "1"],
    "flops": ["flops", "--model", "llama3-8b", "--seq-len", "4096"],
    "plan": ["plan", "--model", "llama3-8b", "--device", "h100-sxm", "--num-devices", "64", "--seq-len", "4096",
             "--global-batch", "128"],
}
POSITIVE = RealBound(0.0, math.inf, "positive")  # checked as positive and finite, no upper bound
FRACTION = RealBound(0.0, 1.0, "a fraction", lo_open=False)
MODEL = {"--layers": bounds.LAYERS, "--hidden": bounds.WIDTH, "--heads": bounds.HEADS,
         "--kv-heads": bounds.HEADS, "--head-dim": bounds.WIDTH, "--ffn-hidden": bounds.WIDTH,
         "--vocab": bounds.VOCAB}
TRAINING = {"--seq-len": bounds.SEQ_LEN, "--global-batch": bounds.GLOBAL_BATCH,
            "--micro-batch": bounds.MICRO_BATCH}
HARDWARE = {"--num-devices": bounds.NUM_DEVICES, "--devices-per-node": bounds.DEVICES_PER_NODE,
            "--peak-tflops": bounds.PEAK_TFLOPS}
PARALLEL = {f"--{k}": bounds.PARALLEL_DEGREE for k in ("dp", "fsdp", "tp", "pp", "cp", "ep", "etp")} | {
    "--vpp": bounds.VPP}
FIELDS: dict[str, dict[str, Bound | RealBound]] = {
    "predict": MODEL | TRAINING | HARDWARE | PARALLEL | {
        "--train-tokens": POSITIVE, "--trainable-fraction": RealBound(0.0, 1.0, "fraction")},
    "mfu": MODEL | TRAINING | HARDWARE | PARALLEL | {
        "--step-time": POSITIVE, "--train-tokens": POSITIVE, "--model-flops-per-seq": POSITIVE,
        "--usd-per-device-hour": POSITIVE, "--lora-fraction": FRACTION},
    "flops": MODEL | TRAINING | {"--lora-fraction": FRACTION},
    "plan": {"--num-devices": bounds.NUM_DEVICES, "--global-batch": bounds.GLOBAL_BATCH,
             "--seq-len": bounds.SEQ_LEN, "--devices-per-node": bounds.DEVICES_PER_NODE,
             "--max-micro-batch": bounds.MICRO_BATCH, "--max-vpp": Bound(0, bounds.VPP.hi, "0 = up to layers/pp"), "--top": bounds.SEARCH_RESULTS,
             "--rerank": bounds.SEARCH_RESULTS, "--train-tokens": bounds.TRAIN_TOKENS,
             "--usd-per-device-hour": bounds.USD_PER_DEVICE_HOUR, "--target-days": bounds.DAYS},
}
TEXT = ["nan", "inf", "-inf", "1e38", "-1e38", "1e400", "1.5", "", "0x10", "10" * 30, "1" + "0" * 5000]


def absurd(bound: Bound | RealBound) -> st.SearchStrategy[str]:
    """Values just and far outside ``bound``, as the command line spells them."""
    if isinstance(bound, Bound):
        out = [st.integers(min_value=-10**40, max_value=bound.lo - 1).map(str),
               st.integers(min_value=bound.hi + 1, max_value=10**40).map(str)]
    else:
        low = st.floats(max_value=bound.lo, exclude_max=not bound.lo_open, allow_nan=False)
        out = [low.map(repr)]
        if math.isfinite(bound.hi):
            out.append(st.floats(min_value=bound.hi, exclude_min=True, allow_nan=False).map(repr))
    return st.one_of(*out, st.sampled_from([t for t in TEXT if not _within(bound, t)]))


def _within(bound: Bound | RealBound, text: str) -> bool:
    """Whether ``text`` is a number the flag accepts (a huge step time is no typo when nothing bounds it)."""
    try:
        bound.check("x", int(text) if isinstance(bound, Bound) else float(text))
    except (ValueError, SpecError):
        return False
    return True


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse: a value that is not a number at all
            code = e.code
    return code, out.getvalue(), err.getvalue()


CASES = [(cmd, flag) for cmd, fields in FIELDS.items() for flag in fields]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_absurd_number_is_one_line_and_exit_2(data, tmp_path_factory):
    cmd, flag = data.draw(st.sampled_from(CASES), label="field")
    value = data.draw(absurd(FIELDS[cmd][flag]), label="value")
    base = BASE[cmd]
    if flag in base:  # replace the base's value of this flag
        i = base.index(flag)
        argv = base[:i] + base[i + 2:]
    else:
        argv = list(base)
    code, out, err = run_cli([*argv, f"{flag}={value}"])
    assert code == 2, (cmd, flag, value, out[-500:], err[-500:])
    assert out == "" and err.count("\n") == 1 and err.strip(), (cmd, flag, value, err[-500:])


def test_the_issue_s_absurd_values(capsys):
    cases = [
        (["plan", "--model", "llama3-8b", "--device", "h100-sxm", "--seq-len", "4096", "--global-batch", "128",
          "--num-devices", "1000000000000"], "hardware.num_devices=1000000000000"),
        (["plan", "--model", "llama3-8b", "--device", "h100-sxm", "--seq-len", "4096", "--global-batch", "128",
          "--num-devices", "963761198400"], "hardware.num_devices=963761198400"),
        (["plan", "--model", "llama3-8b", "--device", "h100-sxm", "--seq-len", "4096", "--num-devices", "64",
          "--global-batch", str(10**38)], "training.global_batch='~1e38'"),
        (["plan", "--model", "llama3-8b", "--device", "h100-sxm", "--seq-len", "4096", "--num-devices", "64",
          "--global-batch", "1-1000000000000"], "training.global_batch=1000000000000"),
        ([*BASE["predict"], "--seq-len", str(10**15)], "training.seq_len=1000000000000000"),
        ([*BASE["flops"], "--global-batch", "-1"], "training.global_batch=-1"),
        ([*BASE["flops"], "--micro-batch", "0"], "training.micro_batch=0"),
    ]
    for argv, said in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err


def test_flops_checks_the_workload_file_it_reads(tmp_path, capsys):
    """flops reads only the model and sequence, yet rejects a workload whose other numbers are absurd."""
    for section, key, value in [("training", "global_batch", "0"), ("training", "micro_batch", "-3"),
                                ("hardware", "num_devices", "0"), ("hardware", "peak_tflops", "nan"),
                                ("hardware", "peak_tflops", "-1.0"), ("hardware", "num_devices", "1e12")]:
        path = tmp_path / "w.toml"
        path.write_text(f'[model]\npreset = "llama3-8b"\n[{section}]\n{key} = {value}\n')
        assert main(["flops", str(path)]) == 2, (key, value)
        err = capsys.readouterr().err
        assert f"{section}.{key}=" in err and err.count("\n") == 1


def test_bounds_hold_at_the_limit_and_name_the_field():
    assert bounds.NUM_DEVICES.check("n", 1 << 21) == 1 << 21
    with pytest.raises(SpecError, match=r"^n=2097153 is invalid: an integer from 1 to 2,097,152 \("):
        bounds.NUM_DEVICES.check("n", (1 << 21) + 1)
    with pytest.raises(SpecError, match="~1e400"):
        bounds.NUM_DEVICES.check("n", 10**400)
    for bad in (True, 2.0, "3", None):
        with pytest.raises(SpecError):
            bounds.NUM_DEVICES.check("n", bad)
    assert bounds.PEAK_TFLOPS.check("p", 1e7) == 1e7
    for bad in (0, -1.0, math.nan, math.inf, 1e7 * 1.0001, 10**400, False):
        with pytest.raises(SpecError):
            bounds.PEAK_TFLOPS.check("p", bad)
    assert bounds.USD_PER_DEVICE_HOUR.check("usd", 0) == 0.0


def test_every_workload_bound_is_checked_when_a_workload_is_built():
    base = {"model.preset": "llama3-8b", "hardware.device": "h100-sxm", "training.seq_len": 4096}
    assert load_workload(None, {**base, "hardware.num_devices": 8, "training.global_batch": 8}).num_devices == 8
    for dotted, bound in bounds.WORKLOAD_FIELD_BOUNDS.items():
        too_big = bound.hi + 1 if isinstance(bound, Bound) else bound.hi * 2
        with pytest.raises(SpecError, match=f"^{dotted.replace('.', '[.]')}=") as e:
            load_workload(None, {**base, dotted: too_big})
        assert "\n" not in str(e.value)


def test_a_defaulted_sequence_stops_at_8192_whatever_the_position_table():
    from trainperf.specs.model import ModelSpec
    from trainperf.specs.workload_file import workload_from_dict

    model = ModelSpec.preset("llama3-8b").replace(max_seq_len=1 << 30).to_dict()
    w = workload_from_dict({"model": model, "hardware": {"device": "h100-sxm"}})
    assert w.seq_len == 8192 and any("holds 1,073,741,824 tokens" in n for n in w.notes)


def test_bench_workload_validation_uses_the_same_bounds():
    pytest.importorskip("torch")
    from trainperf.cli.bench import bench_workload
    from trainperf.cli.main import build_parser

    for flag, value in [("--seq-len", "1000000000000000"), ("--global-batch", "1000000000000"),
                        ("--micro-batch", "0"), ("--peak-tflops", "nan"), ("--num-devices", "0")]:
        args = build_parser("bench").parse_args(["bench", "--model", "debug", "--device", "cpu", flag, value])
        with pytest.raises(TrainperfError) as e:
            bench_workload(args, local=False)
        assert "\n" not in str(e.value) and flag[2:].replace("-", "_") in str(e.value)


# ------------------------------------------------------------------------------ input files
def _huge(path, size=1 << 30):
    """A sparse file of ``size`` bytes: no disk, no time, and a reader that reads it whole would
    need ``size`` bytes of memory."""
    with open(path, "wb") as f:
        f.truncate(size)
    return path


@pytest.mark.parametrize(("name", "argv"), [
    ("w.toml", ["predict", "{}"]),
    ("w.json", ["flops", "{}"]),
    ("config.json", ["flops", "--hf-config", "{}"]),
    ("stack.toml", ["predict", *WORKLOAD, "--stack", "{}"]),
    ("cal.json", ["predict", *WORKLOAD, "--calibration", "{}"]),
    ("runs.csv", ["validate", "--data", "{}", "--no-loto"]),
])
def test_a_1_gb_input_file_is_refused_before_it_is_read(tmp_path, capsys, name, argv, monkeypatch):
    path = _huge(tmp_path / name)
    monkeypatch.chdir(tmp_path)
    code = main([a.replace("{}", str(path)) for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"is {1 << 30:,} bytes, more than trainperf reads ({max_bytes_for(path):,} bytes)" in err


def test_the_size_cap_holds_for_a_file_that_lies_about_its_size(tmp_path, monkeypatch):
    """A file whose ``stat`` size is small (as in /proc) is still read at most cap + 1 bytes."""
    path = tmp_path / "w.toml"
    path.write_text("x" * 100)
    real_stat = os.stat

    def small_stat(p, *a, **kw):
        st = real_stat(p, *a, **kw)
        if str(p) == str(path):
            return os.stat_result((st.st_mode, *st[1:6], 0, *st[7:]))
        return st

    monkeypatch.setattr(os, "stat", small_stat)
    with pytest.raises(InputFileError, match="is 11 bytes, more than trainperf reads"):
        read_user_text(path, "workload file", max_bytes=10)
    assert read_user_text(path, "workload file", max_bytes=100) == "x" * 100


@pytest.mark.parametrize("text", [
    '{"training": {"seq_len": ' + "9" * 5000 + "}}",  # beyond Python's 4300-digit int parse limit
    "[" * 100_000 + "]" * 100_000,  # nesting deeper than the recursion limit
    '{"training": ' + "[" * 500 + "]" * 500 + "}",  # parses, but deeper than trainperf reads
])
def test_a_pathological_json_workload_is_one_line(tmp_path, capsys, text):
    path = tmp_path / "w.json"
    path.write_text(text)
    assert main(["flops", str(path)]) == 2
    err = capsys.readouterr().err
    assert ("is malformed" in err or "levels deep" in err) and err.count("\n") == 1 and len(err) < 400


def test_the_calibration_cache_is_capped_too(tmp_path, monkeypatch):
    from trainperf.specs import cpu_calibration

    path = _huge(tmp_path / "calibration.json", cpu_calibration.CACHE_MAX_BYTES + 1)
    assert cpu_calibration.load_calibration(path, cpu_model="x") is None  # not read; ignored in one line
    cal = cpu_calibration.CpuCalibration(cpu_model="x", threads=1, peak_tflops={"fp32": 1.0},
                                         memory_bandwidth_GB_per_s=1.0, measured_at="2026-01-01T00:00:00")
    cpu_calibration.save_calibration(cal, path)  # an oversized cache is replaced, not read
    assert list(json.loads(path.read_text())["entries"]) == ["x [1 thread]"]
