"""Issue 11: the bench's native precision by default, and an MFU that cannot exceed its peak.

Both precision paths run on any machine through ``TRAINPERF_NATIVE_BF16=0|1``; the runs are the
tiny model for 2-3 steps, so this file stays within seconds even where bf16 is emulated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trainperf.cli.main import main  # noqa: E402
from trainperf.measure import precision as prec_mod  # noqa: E402
from trainperf.measure.meter import ThroughputMeter  # noqa: E402
from trainperf.measure.testing import TINY_FLAGS, fake_calibration  # noqa: E402
from trainperf.records.jsonl import read_run  # noqa: E402
from trainperf.specs import cpu_calibration  # noqa: E402

pytestmark = [pytest.mark.torch]
SRC = Path(__file__).resolve().parents[1] / "src"


def _bench(*argv: str) -> int:
    n = torch.get_num_threads()
    try:
        return main(["bench", *argv])
    finally:
        torch.set_num_threads(n)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    fake_calibration(tmp_path / "cache")
    return tmp_path / "cache"


# ----------------------------------------------------------------------------- precision choice
@pytest.mark.parametrize("env, expected", [("0", "fp32"), ("1", "bf16")])
def test_override_decides_auto(monkeypatch, env, expected):
    monkeypatch.setenv("TRAINPERF_NATIVE_BF16", env)
    choice = prec_mod.resolve_precision(None, "cpu")
    assert choice.precision == expected and choice.requested == "auto" and choice.warning is None
    assert f"TRAINPERF_NATIVE_BF16={env}" in choice.reason
    assert prec_mod.resolve_precision("fp32").precision == "fp32"  # explicit wins


@pytest.mark.parametrize("env", ["0", "1"])
def test_auto_across_cpu_nodes_is_one_dtype(monkeypatch, env):
    """Each node's launcher resolves auto on its own; a bf16 timing that differs between two
    machines would give ranks of different dtypes (gloo then aborts). Across CPU nodes auto is
    fp32 whatever one node detects; an explicit bf16 is run as asked on every node."""
    from trainperf.cli.bench import bench_precision

    monkeypatch.setenv("TRAINPERF_NATIVE_BF16", env)
    multi = bench_precision(None, "cpu", nodes=2)
    assert multi.precision == "fp32" and multi.requested == "auto" and "2 CPU nodes" in multi.reason
    assert bench_precision("bf16", "cpu", nodes=2).precision == "bf16"
    assert bench_precision(None, "cpu", nodes=1).precision == ("bf16" if env == "1" else "fp32")


@pytest.mark.parametrize("env, expected", [("0", "fp32"), ("1", "bf16")])
def test_default_bench_runs_the_overridden_precision(tmp_path, cache, monkeypatch, capsys, env, expected):
    monkeypatch.setenv("TRAINPERF_NATIVE_BF16", env)
    out = tmp_path / "run"
    assert _bench(*TINY_FLAGS, "--steps", "2", "--out", str(out)) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["precision"] == expected and summary["precision_requested"] == "auto"
    assert f"TRAINPERF_NATIVE_BF16={env}" in summary["precision_reason"]
    assert f"precision: {expected} (auto:" in capsys.readouterr().out
    assert read_run(out / "steps.jsonl").workload.precision == expected


def test_default_bench_picks_what_detection_says(tmp_path, cache, monkeypatch):
    monkeypatch.delenv("TRAINPERF_NATIVE_BF16", raising=False)
    # one timing for the test and the bench alike: two timings on a loaded machine may disagree
    ratio = prec_mod.matmul_time_ratio("cpu")
    monkeypatch.setattr(prec_mod, "matmul_time_ratio", lambda *a, **k: ratio)
    native = prec_mod.detect_native_bf16("cpu").native
    out = tmp_path / "run"
    assert _bench(*TINY_FLAGS, "--steps", "2", "--out", str(out)) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["precision"] == ("bf16" if native else "fp32")


def test_cpu_without_bf16_flags_is_not_native_and_explicit_bf16_warns_with_slowdown(monkeypatch):
    monkeypatch.delenv("TRAINPERF_NATIVE_BF16", raising=False)
    monkeypatch.setattr(prec_mod, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    monkeypatch.setattr(prec_mod, "matmul_time_ratio", lambda *a, **k: 97.0)
    nb = prec_mod.detect_native_bf16("cpu")
    assert not nb.native and "avx2 fma" in nb.why
    assert prec_mod.resolve_precision("auto").precision == "fp32"
    choice = prec_mod.resolve_precision("bf16")
    assert choice.precision == "bf16" and choice.native_bf16 is False
    assert choice.warning is not None and "97.0x the fp32 time" in choice.warning and "\n" not in choice.warning
    # Flags present but timing says bf16 is slower: not native either.
    monkeypatch.setattr(prec_mod, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    assert not prec_mod.detect_native_bf16("cpu").native
    monkeypatch.setattr(prec_mod, "matmul_time_ratio", lambda *a, **k: 0.4)
    assert prec_mod.detect_native_bf16("cpu").native


def test_explicit_bf16_warns_once_in_the_bench(tmp_path, cache, monkeypatch, capsys):
    monkeypatch.setenv("TRAINPERF_NATIVE_BF16", "0")
    assert _bench(*TINY_FLAGS, "--steps", "2", "--precision", "bf16", "--out", str(tmp_path / "r")) == 0
    err = capsys.readouterr().err
    assert err.count("warning: --precision bf16 on a device without native bf16") == 1


# ----------------------------------------------------------------------------- MFU <= 100%
def test_underestimated_peak_never_yields_mfu_above_100(tmp_path, monkeypatch, capsys):
    """A tiny fake peak in the cache: the bench recalibrates once and never shows MFU > 100%."""
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRAINPERF_NATIVE_BF16", "0")
    cal = fake_calibration(tmp_path / "cache")
    import dataclasses

    cpu_calibration.save_calibration(dataclasses.replace(cal, peak_tflops={"fp32": 1e-6}))  # the least valid
    out = tmp_path / "run"
    assert _bench(*TINY_FLAGS, "--steps", "3", "--out", str(out)) == 0
    text = capsys.readouterr().out
    assert "recalibrating once" in text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mfu_pct"] is None or 0 < summary["mfu_pct"] <= 100
    for p in summary["mfu_by_peak"]:
        assert p["mfu_pct"] is None or p["mfu_pct"] <= 100
    assert all(s.claimed_mfu_pct is None or s.claimed_mfu_pct <= 100 for s in read_run(out / "steps.jsonl").steps)
    # The cache now holds the better (re-measured) peak, never the tiny one.
    assert cpu_calibration.load_calibration(threads=1).peak_tflops["fp32"] > 1e-6


def test_meter_marks_impossible_mfu_invalid_without_recalibration(capsys):
    warned: list[str] = []
    meter = ThroughputMeter(None, flops_per_token=1e9, peak_tflops=1e-9, peak_source="tiny", warn=warned.append)
    recs = [meter.step(tokens=1000) for _ in range(3)]
    assert all(r.claimed_mfu_pct is None and "exceeds 100%" in r.extra["mfu_invalid"] for r in recs)
    assert len(warned) == 1 and "tiny" in warned[0]
    s = meter.summary()
    assert s["mfu_pct"] is None and "impossible" in s["mfu_invalid"]


def test_meter_recalibrates_once():
    calls: list[float] = []

    def recal(tflops: float):
        calls.append(tflops)
        return (tflops * 1e6, "better")

    meter = ThroughputMeter(None, flops_per_token=1e9, peak_tflops=1e-9, peak_source="tiny", recalibrate=recal,
                            warn=lambda m: None)
    r = meter.step(tokens=1000)
    meter.step(tokens=1000)
    assert len(calls) == 1 and meter.peak_source == "better" and 0 < r.claimed_mfu_pct <= 100


# ----------------------------------------------------------------------------- calibration cache key
def test_cache_keeps_isa_and_thread_counts_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path))
    for flags in ({"avx2", "fma"}, {"avx2", "fma", "avx512f", "avx512_bf16"}):
        monkeypatch.setattr(cpu_calibration, "cpu_flags", lambda f=frozenset(flags), **k: f)
        assert cpu_calibration.load_calibration() is None  # the other EPYC's entry does not apply
        fake_calibration(tmp_path, threads=1)
        fake_calibration(tmp_path, threads=2)
        assert cpu_calibration.load_calibration(threads=2).threads == 2
        assert cpu_calibration.load_calibration(threads=3) is None
    entries = json.loads((tmp_path / "calibration.json").read_text())["entries"]
    assert len(entries) == 4 and any("avx512_bf16" in k for k in entries)


# ----------------------------------------------------------------------------- outside the bench
def test_mfu_command_flags_impossible_and_rejects_non_finite(capsys):
    base = ["mfu", "--model", "llama2-7b", "--device", "h100-sxm", "--num-devices", "8", "--seq-len", "4096",
            "--global-batch", "32"]
    assert main([*base, "--step-time", "0.001"]) == 0
    cap = capsys.readouterr()
    assert "(impossible, > 100%)" in cap.out
    lines = [ln for ln in cap.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "impossible" in lines[0] and "step time" in lines[0]
    assert main([*base, "--step-time", "1e-320"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainperf mfu: error:") and "inf" not in err[0].lower()


@pytest.mark.parametrize("command", [["bench"], ["calibrate"], ["sweep"], ["slurm", "--device", "h100-sxm", "--nodes", "2"]])
def test_commands_needing_torch_say_which_extra_without_it(command):
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(f\"No module named '{name}'\", name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from trainperf.cli.main import main\n"
        f"sys.exit(main({command!r}))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(SRC))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    err = out.stderr.strip().splitlines()
    assert out.returncode == 2, out.stderr[-2000:]
    assert len(err) == 1 and "pip install 'trainperf[bench]'" in err[0] and "Traceback" not in out.stderr


# ----------------------------------------------------------------------------- TensorBoard
def test_tensorboard_event_files_hold_every_step(tmp_path, cache, monkeypatch):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from trainperf.measure.sinks import TensorBoardSink

    monkeypatch.setenv("TRAINPERF_NATIVE_BF16", "0")
    tb = tmp_path / "tb"
    assert _bench(*TINY_FLAGS, "--steps", "3", "--tensorboard", str(tb), "--out", str(tmp_path / "r")) == 0
    acc = EventAccumulator(str(tb))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in ("throughput/tokens_per_s", "throughput/tflops_per_device", "mfu(%)", "loss", "time/step(s)"):
        assert tag in tags and tag in TensorBoardSink.TAGS
        assert [e.step for e in acc.Scalars(tag)] == [1, 2, 3], tag
    steps = read_run(tmp_path / "r" / "steps.jsonl").steps
    assert [e.value for e in acc.Scalars("loss")] == pytest.approx([s.loss for s in steps], rel=1e-6)
    assert [e.value for e in acc.Scalars("mfu(%)")] == pytest.approx([s.claimed_mfu_pct for s in steps], rel=1e-6)


def test_compare_flags_impossible_mfu_in_one_line():
    from trainperf.cli.compare import _mfu_warning

    msg = _mfu_warning("run1", 150.0, 0.5, "cpu fp32 calibrated")
    assert msg.startswith("run1: MFU 150.00% exceeds 100%") and "cpu fp32 calibrated" in msg and "\n" not in msg
    assert _mfu_warning("run1", 50.0, 0.5, "x") is None and _mfu_warning("run1", None, None, None) is None
