"""`trainperf bench` end to end in one process: outputs, MFU against the calibrated peak, errors."""

from __future__ import annotations

import json
import math
import os
import shutil
import sysconfig
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trainperf.cli.main import main  # noqa: E402
from trainperf.measure.testing import FAKE_PEAKS, TINY_FLAGS, fake_calibration  # noqa: E402
from trainperf.records.jsonl import read_run  # noqa: E402
from trainperf.specs.workload_file import load_workload  # noqa: E402

pytestmark = [pytest.mark.torch]

SUMMARY_KEYS = {"steps_completed", "interrupted", "step_time_median_s", "tokens_per_s", "tokens_per_s_per_device",
                "tflops_per_device", "mfu_pct", "peak_source", "convention"}


@pytest.fixture
def calibrated(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    # --precision auto picks fp32 on any machine (bf16 is tested in test_bench_precision.py).
    monkeypatch.setenv("TRAINPERF_NATIVE_BF16", "0")
    return fake_calibration(tmp_path / "cache")


def _bench(*argv: str) -> int:
    n = torch.get_num_threads()
    try:
        return main(["bench", *argv])
    finally:
        torch.set_num_threads(n)


def test_tiny_run_writes_record_summary_and_workload(tmp_path, calibrated, capsys):
    out = tmp_path / "run"
    assert _bench(*TINY_FLAGS, "--steps", "4", "--out", str(out)) == 0
    text = capsys.readouterr().out
    assert text.count("completed step:") == 4 and "MFU:" in text and "warm-up" in text
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) >= SUMMARY_KEYS
    assert summary["steps_completed"] == 4 and summary["interrupted"] is False
    assert summary["convention"] == "megatron" and "calibrated" in summary["peak_source"]
    # MFU = model TFLOP/s per device / the (fake) calibrated fp32 peak, 1 thread as calibrated.
    assert summary["mfu_pct"] == pytest.approx(100 * summary["tflops_per_device"] / FAKE_PEAKS["fp32"])
    assert summary["precision"] == "fp32" and summary["precision_requested"] == "auto"
    assert "TRAINPERF_NATIVE_BF16=0" in summary["precision_reason"] and "precision: fp32 (auto:" in text
    assert summary["tokens_per_s"] == pytest.approx(2 * 32 / summary["step_time_median_s"])
    run = read_run(out / "steps.jsonl")
    assert [s.step for s in run.steps] == [1, 2, 3, 4] and not run.interrupted
    assert all(s.loss is not None and s.grad_norm is not None for s in run.steps)
    w = load_workload(out / "workload.toml")
    assert w.model.layers == 2 and w.model.hidden == 64 and w.seq_len == 32 and w.precision == "fp32"
    assert w.stack == "trainperf-bench"  # predict prices what the bench runs, not generic's stack
    assert run.workload == w  # the record's header states the same workload


def test_the_report_predicts_a_bench_run_with_the_benchs_stack(tmp_path, calibrated):
    """The report's predicted-vs-measured section reads the run's workload: stack trainperf-bench,
    and the bench's ``selective`` (the attention core) kept as such."""
    from trainperf.accounting.summarize import summarize
    from trainperf.report.explain import explain_runs
    from trainperf.report.load import load_paths

    out = tmp_path / "run"
    assert _bench(*TINY_FLAGS, "--steps", "3", "--activation-checkpointing", "selective", "--out", str(out)) == 0
    (loaded,) = load_paths([out])
    w = loaded.run.workload
    assert (w.stack, w.activation_checkpointing) == ("trainperf-bench", "selective")
    (ex,), notes = explain_runs([(loaded.run, summarize(loaded.run))])
    assert not notes and ex.predicted_step_time_s > 0


def test_json_output_and_convention(tmp_path, calibrated, capsys):
    out = tmp_path / "run"
    assert _bench(*TINY_FLAGS, "--steps", "3", "--convention", "palm", "--precision", "fp32",
                  "--out", str(out), "--json") == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["convention"] == "palm" and data["steps_completed"] == 3
    assert data["mfu_pct"] == pytest.approx(100 * data["tflops_per_device"] / FAKE_PEAKS["fp32"])
    assert "completed step:" in captured.err  # progress goes to stderr with --json


def test_quick_calibration_when_none_is_cached(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("TRAINPERF_NATIVE_BF16", "0")
    assert _bench(*TINY_FLAGS, "--steps", "2", "--out", str(tmp_path / "r")) == 0
    assert "no fp32 CPU calibration cached for this machine and 1 thread(s)" in capsys.readouterr().out
    assert (tmp_path / "empty-cache" / "calibration.json").is_file()
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["mfu_pct"] is not None and "quick calibration" in summary["peak_source"]


@pytest.mark.parametrize("flags, field", [
    (["--nproc", "3", "--tp", "3"], "parallel.tp"),                 # tp does not divide heads=4
    (["--nproc", "4", "--dp", "1", "--tp", "2"], "parallel"),       # more processes than the plan's degrees
    (["--precision", "fp4"], "training.precision"),                 # GPU-only precision on a CPU
    (["--fp8-recipe", "delayed"], "training.fp8_recipe"),           # Transformer Engine's: not in the bench
    (["--data", "/nonexistent/corpus.txt"], "--data"),              # unreadable data
    (["--data", "SHORT"], "--data"),                                # shorter than one sequence
    (["--device", "h100-sxm"], "hardware.device"),                  # no GPU here
    (["--nproc", "2", "--pp", "2"], "training.global_batch"),       # 1 micro-batch cannot fill 2 stages
    (["--nproc", "3", "--cp", "3"], "parallel.cp"),                 # 2*cp must divide seq_len=32
    (["--nproc", "4", "--cp", "2", "--tp", "2"], "parallel.tp"),    # cp with tp: not combined in the bench
    (["--nproc", "2", "--ep", "2"], "parallel.ep"),                 # expert parallel on a dense model
    (["--moe-capacity-factor", "1.25"], "--moe-capacity-factor"),   # MoE option on a dense model
    (["--model", "debug-moe", "--nproc", "2", "--ep", "3"], "parallel.ep"),   # 3 does not divide 8 experts
    (["--model", "debug-moe", "--nproc", "4", "--ep", "8"], "parallel.ep"),   # more than dp*fsdp=4 ranks
    (["--model", "debug-moe", "--moe-aux-loss-coef", "-1"], "--moe-aux-loss-coef"),
])
def test_bad_input_stops_before_any_process(tmp_path, calibrated, capsys, flags, field):
    short = tmp_path / "short.txt"
    short.write_text("too short")
    flags = [str(short) if f == "SHORT" else str(tmp_path / "ck") if f == "CK" else f for f in flags]
    out = tmp_path / "never"
    assert _bench(*TINY_FLAGS, *flags, "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainperf bench: error: ") and field in err[0]
    assert not out.exists()


@pytest.mark.slow
def test_resume_gives_identical_losses(tmp_path, calibrated):
    common = [*TINY_FLAGS, "--precision", "fp32", "--seed", "7"]
    assert _bench(*common, "--steps", "6", "--out", str(tmp_path / "full")) == 0
    ck = tmp_path / "ck"
    assert _bench(*common, "--steps", "3", "--checkpoint-dir", str(ck), "--checkpoint-every", "3",
                  "--out", str(tmp_path / "first")) == 0
    assert (ck / "step-3" / ".done").exists()
    assert _bench(*common, "--steps", "6", "--checkpoint-dir", str(ck), "--resume",
                  "--out", str(tmp_path / "resumed")) == 0
    full = {s.step: s.loss for s in read_run(tmp_path / "full" / "steps.jsonl").steps}
    first = {s.step: s.loss for s in read_run(tmp_path / "first" / "steps.jsonl").steps}
    resumed = {s.step: s.loss for s in read_run(tmp_path / "resumed" / "steps.jsonl").steps}
    assert sorted(resumed) == [4, 5, 6]
    assert all(first[k] == full[k] for k in (1, 2, 3))
    assert all(resumed[k] == full[k] for k in (4, 5, 6)), (full, resumed)


@pytest.mark.slow
def test_loss_falls_well_below_uniform_on_real_text(tmp_path, calibrated):
    """Python's own standard library sources as offline text: bytes are far from uniform."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in ("argparse.py", "dataclasses.py", "functools.py", "inspect.py"):
        shutil.copy(stdlib / name, corpus / name)
    out = tmp_path / "run"
    assert _bench("--layers", "2", "--hidden", "128", "--heads", "4", "--kv-heads", "2", "--ffn-hidden", "384",
                  "--seq-len", "128", "--micro-batch", "8", "--threads", "1", "--lr", "3e-3",
                  "--data", str(corpus), "--steps", "30", "--out", str(out)) == 0
    losses = [s.loss for s in read_run(out / "steps.jsonl").steps]
    uniform = math.log(256)
    assert losses[0] == pytest.approx(uniform, rel=0.05)  # starts at chance
    assert sum(losses[-5:]) / 5 < 0.65 * uniform, losses


@pytest.mark.slow
def test_default_command_runs_with_no_arguments(tmp_path, calibrated, monkeypatch, capsys):
    """The README's first command: `trainperf bench` alone (debug preset, CPU, synthetic). Only the
    step count is cut (20 -> 4) to keep the suite fast on a shared 2-core machine."""
    monkeypatch.chdir(tmp_path)
    assert _bench("--steps", "4") == 0
    text = capsys.readouterr().out
    assert text.count("completed step:") == 4
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1
    summary = json.loads((runs[0] / "summary.json").read_text())
    assert summary["steps_completed"] == 4 and summary["warmup_steps"] == 1
    assert summary["workload"] == "debug on 1x cpu (single device), seq 256, global batch 8, micro batch 8, fp32, AC none"
    assert summary["mfu_pct"] is None or 0 < summary["mfu_pct"] <= 100  # never above 100%


def test_slurm_script(tmp_path, calibrated, capsys):
    out = tmp_path / "job"
    assert main(["slurm", "--nodes", "4", "--device", "h100-sxm", "--model", "llama3-8b", "--fsdp", "32",
                 "--seq-len", "8192", "--out", str(out)]) == 0
    script = (out / "bench.sbatch").read_text()
    assert "#SBATCH --nodes=4" in script and "#SBATCH --ntasks-per-node=1" in script
    assert "--nproc-per-node=8" in script and "--rdzv-backend=c10d" in script and "srun" in script
    assert "sbatch" not in [line.split()[0] for line in script.splitlines() if line and not line.startswith("#")]
    cfg = json.loads((out / "run_config.json").read_text())
    assert cfg["workload"]["hardware"]["num_devices"] == 32 and cfg["peak_tflops"] > 900
    assert os.path.exists(out / "workload.toml")


@pytest.mark.slow
def test_sweep_prints_scaling_efficiency(tmp_path, calibrated, capsys):
    assert main(["sweep", *TINY_FLAGS, "--nproc", "1,2", "--mode", "strong", "--steps", "3",
                 "--out", str(tmp_path / "sw"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    runs = data["runs"]
    assert [r["nproc"] for r in runs] == [1, 2] and data["mode"] == "strong"
    assert runs[0]["global_batch"] == runs[1]["global_batch"] == 4  # strong: global batch fixed
    assert runs[0]["efficiency"] == 1.0
    # strong-scaling efficiency as seeds 001/004 define it: T_1 * 1 / (T_2 * 2)
    assert runs[1]["efficiency"] == pytest.approx(runs[0]["step_time_median_s"] / (2 * runs[1]["step_time_median_s"]))
    assert (tmp_path / "sw" / "nproc2" / "summary.json").is_file()


def test_calibrate_command_measures_and_caches(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "c"))
    n = torch.get_num_threads()
    try:
        assert main(["calibrate", "--sizes", "256", "--repeats", "1", "--threads", "1", "--dtypes", "fp32,bf16",
                     "--json"]) == 0
    finally:
        torch.set_num_threads(n)
    data = json.loads(capsys.readouterr().out)
    assert data["threads"] == 1 and data["peak_tflops"]["fp32"] > 0 and data["peak_tflops"]["bf16"] > 0
    from trainperf.specs.hardware import get_hardware

    hw = get_hardware("cpu")
    assert hw.calibrated and hw.peak_tflops["fp32"] == data["peak_tflops"]["fp32"]


def test_calibrate_with_a_workload_times_its_kernels_for_predict(tmp_path, monkeypatch, capsys):
    """`calibrate WORKLOAD` times the workload's kernels at its shapes and threads per process (what
    a bench run of it measures before training): predict then stands on them, not on the GPU law
    it otherwise says stands in."""
    from trainperf.measure.testing import tiny_workload_dict
    from trainperf.specs.workload_file import dump_workload_toml, workload_from_dict

    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "c"))
    wl = tmp_path / "w.toml"
    wl.write_text(dump_workload_toml(workload_from_dict({**tiny_workload_dict(), "hardware": {
        "device": "cpu", "num_devices": 1, "threads_per_device": 1}})))
    n = torch.get_num_threads()
    try:
        assert main(["calibrate", "--sizes", "256", "--repeats", "1", "--dtypes", "fp32", "--rounds", "2", str(wl)]) == 0
        before = capsys.readouterr().out
        assert "timing the kernels of" in before and "1 thread(s) per process" in before
        assert main(["predict", str(wl)]) == 0
    finally:
        torch.set_num_threads(n)
    assert "kernels (cpu, measured on this machine" in capsys.readouterr().out
    from trainperf.specs.cpu_calibration import load_calibration

    cal = load_calibration(threads=1)
    assert cal is not None and cal.kernels["fp32"].gemms  # the workload's GEMM shapes, timed
    assert cal.kernels["fp32"].samples == 2  # two rounds, their mean kept
    for argv, field in ((["--threads", "2"], "--threads"), (["--dry-run"], "--dry-run"),
                        (["--device", "cuda"], "--device"), (["--rounds", "0"], "--rounds")):
        assert main(["calibrate", *argv, str(wl)]) == 2
        assert field in capsys.readouterr().err
    many = tmp_path / "many.toml"  # more threads than this machine's cores would time their contention
    many.write_text(wl.read_text().replace("threads_per_device = 1", "threads_per_device = 4096"))
    assert main(["calibrate", str(many)]) == 2
    assert "hardware.threads_per_device=4096" in capsys.readouterr().err
    fp16 = tmp_path / "fp16.toml"  # a precision the bench does not train in on a CPU: one line, no traceback
    fp16.write_text(wl.read_text().replace('precision = "fp32"', 'precision = "fp16"'))
    assert main(["calibrate", str(fp16)]) == 2
    assert "training.precision='fp16'" in capsys.readouterr().err


def test_calibrate_with_a_multi_process_workload_times_gloo_between_its_processes(tmp_path, monkeypatch, capsys):
    """With several processes, `calibrate WORKLOAD` starts them here and has them time what a bench
    run's processes time before training (gloo's collectives, FSDP2's host time per module)."""
    from trainperf.measure.testing import tiny_workload_dict
    from trainperf.specs.cpu_calibration import load_calibration
    from trainperf.specs.workload_file import dump_workload_toml, workload_from_dict

    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "c"))
    wl = tmp_path / "w.toml"
    wl.write_text(dump_workload_toml(workload_from_dict({**tiny_workload_dict(global_batch=4), "hardware": {
        "device": "cpu", "num_devices": 2, "devices_per_node": 2, "threads_per_device": 1}, "parallel": {"dp": 2}})))
    n = torch.get_num_threads()
    try:
        assert main(["calibrate", "--sizes", "256", "--repeats", "1", "--dtypes", "fp32", "--rounds", "1",
                     str(wl)]) == 0
    finally:
        torch.set_num_threads(n)
    assert "between 2 processes of 1 thread(s)" in capsys.readouterr().out
    cal = load_calibration(threads=1)
    assert cal is not None and cal.collectives["fp32"]["all-reduce"].ranks == 2
    assert cal.kernels["fp32"].fsdp_module_us is not None


def test_predict_says_when_a_cpus_kernels_are_not_measured(tmp_path, monkeypatch, capsys):
    from trainperf.measure.testing import fake_calibration

    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "c"))
    fake_calibration(tmp_path / "c")  # a peak, no kernels
    assert main(["predict", "--model", "debug", "--device", "cpu", "--seq-len", "32", "--global-batch", "2",
                 "--micro-batch", "2", "--precision", "fp32"]) == 0
    out = capsys.readouterr().out
    assert "kernels (cpu): not measured on this machine for fp32" in out and "trainperf calibrate WORKLOAD" in out


def test_torchrun_command_lines():
    from trainperf.measure.launch import LaunchSpec, torchrun_args

    local = torchrun_args("cfg.json", LaunchSpec(nproc_per_node=4))
    assert local == ["--nproc-per-node=4", "--standalone", "--max-restarts=0", "-m", "trainperf.measure.trainer",
                     "cfg.json"]
    multi = torchrun_args("cfg.json", LaunchSpec(nproc_per_node=8, nnodes=2, node_rank=1,
                                                 rdzv_endpoint="10.0.0.1:29500", rdzv_id="job7"))
    assert "--nnodes=2" in multi and "--rdzv-backend=c10d" in multi and "--rdzv-endpoint=10.0.0.1:29500" in multi
    assert "--rdzv-id=job7" in multi and "--node-rank=1" in multi and "--standalone" not in multi
