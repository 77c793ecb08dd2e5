"""One writer per run directory, the bench's bounds, dead-worker lines and interrupted summaries:
the parts that need no torch (the bench refuses a bad number before importing it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainperf.cli.main import main
from trainperf.measure.failures import (
    WorkerFailure,
    failure_line,
    first_failure,
    read_failures,
    write_failures,
)
from trainperf.measure.results import build_summary
from trainperf.records.output_path import (
    RUN_LOCK_NAME,
    RUN_MANIFEST_NAME,
    OutputPathError,
    check_run_dir,
    claim_run_dir,
)
from trainperf.specs import bounds

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="flock and FIFOs as on Linux")


def _snapshot(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            s = os.lstat(p)
            out[str(p.relative_to(root))] = (s.st_mode, s.st_size, s.st_mtime_ns, s.st_ino)
    return out


# --------------------------------------------------------------------------- claims
def test_a_held_directory_is_refused_and_released_with_the_claim(tmp_path):
    run = tmp_path / "run"
    with claim_run_dir(run) as claim:
        assert claim.fd is not None and (run / RUN_LOCK_NAME).is_file()
        assert f"pid {os.getpid()}" in (run / RUN_LOCK_NAME).read_text()
        before = _snapshot(tmp_path)
        for attempt in (lambda: claim_run_dir(run), lambda: check_run_dir(run), lambda: claim_run_dir(run, force=True)):
            with pytest.raises(OutputPathError, match=f"in use by another run \\(pid {os.getpid()} on"):
                attempt()
        assert _snapshot(tmp_path) == before  # refusals change nothing
    with claim_run_dir(run):  # released: the directory can be taken again
        pass


def test_a_lock_held_by_a_killed_process_is_not_stale(tmp_path):
    """A kernel lock dies with its process: after SIGKILL the directory is free at once."""
    run = tmp_path / "run"
    code = ("import sys, time; from trainperf.records.output_path import claim_run_dir; "
            f"c = claim_run_dir({str(run)!r}); print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(OutputPathError, match=f"pid {proc.pid}"):
            claim_run_dir(run)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    with claim_run_dir(run) as claim:
        assert claim.fd is not None


def _earlier_run(run: Path, files: list[str]) -> None:
    """A run that took ``run`` and wrote ``files`` (its manifest lists them when it lets go)."""
    with claim_run_dir(run, parents=True):
        for name in files:
            (run / name).write_text("old\n")


def test_an_earlier_run_needs_force_and_force_replaces_only_its_files(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    # The user's files, there before the run; the first two matched the old glob patterns (issue 30).
    for name in ("ranking.log", "failures-analysis.json", "torchrun-notes.log", "notes.txt"):
        (run / name).write_text("mine\n")
    files = ["steps.jsonl", "summary.json", "workload.toml", "run_config.json", "torchrun.log", "rank0.log",
             "rank1.log", "failures.json"]
    _earlier_run(run, files)
    manifest = json.loads((run / RUN_MANIFEST_NAME).read_text())
    assert set(manifest["files"]) >= set(files) and "ranking.log" in manifest["before"]
    before = _snapshot(tmp_path)
    with pytest.raises(OutputPathError, match=r"holds an earlier run \(steps.jsonl\).*--force"):
        check_run_dir(run)
    with pytest.raises(OutputPathError, match="holds an earlier run"):
        claim_run_dir(run)
    assert _snapshot(tmp_path) == before
    with claim_run_dir(run, force=True):
        left = sorted(p.name for p in run.iterdir() if not p.name.startswith("."))
        assert left == ["failures-analysis.json", "notes.txt", "ranking.log", "torchrun-notes.log"]
    assert all((run / n).read_text() == "mine\n" for n in left)


def test_force_without_a_manifest_removes_nothing(tmp_path, capsys):
    """A record no trainperf manifest describes (written by hand, or by an older trainperf): --force
    cannot know which files are that run's, so it refuses in one line and removes nothing."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("steps.jsonl", "rank0.log", "ranking.log", "failures-analysis.json"):
        (run / name).write_text("old\n")
    before = _snapshot(tmp_path)
    with pytest.raises(OutputPathError, match="no manifest of the files it wrote"):
        claim_run_dir(run, force=True)
    assert main(["bench", "--out", str(run), "--force"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force removes only what a manifest lists" in err
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("kind", ["symlink", "fifo", "dir"])
def test_force_never_removes_what_is_not_a_regular_file(tmp_path, kind):
    run = tmp_path / "run"
    _earlier_run(run, ["summary.json", "steps.jsonl"])
    target = tmp_path / "precious"
    target.write_text("keep\n")
    (run / "steps.jsonl").unlink()
    if kind == "symlink":
        (run / "steps.jsonl").symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(run / "steps.jsonl")
    else:
        (run / "steps.jsonl").mkdir()
    before = _snapshot(tmp_path)
    with pytest.raises(OutputPathError, match=r"steps\.jsonl' is a"):
        claim_run_dir(run, force=True)
    assert _snapshot(tmp_path) == before and target.read_text() == "keep\n"


@pytest.mark.parametrize("content", ["", "{}", '{"files": ["../../victim"], "before": []}',
                                     '{"files": ["/etc/passwd"], "before": []}', "[" * 10000])
def test_a_manifest_trainperf_did_not_write_is_refused(tmp_path, content):
    run = tmp_path / "run"
    _earlier_run(run, ["steps.jsonl"])
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (run / RUN_MANIFEST_NAME).write_text(content)
    before = _snapshot(tmp_path)
    with pytest.raises(OutputPathError, match="not a run manifest trainperf wrote"):
        claim_run_dir(run, force=True)
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_lock_file_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    run = tmp_path / "run"
    run.mkdir()
    if kind == "symlink":
        (run / RUN_LOCK_NAME).symlink_to(tmp_path / "elsewhere")
    else:
        os.mkfifo(run / RUN_LOCK_NAME)
    with pytest.raises(OutputPathError, match="refusing to use it"):
        claim_run_dir(run)
    assert not (tmp_path / "elsewhere").exists()


def test_the_nodes_of_one_run_share_a_directory_that_a_single_node_run_cannot_enter(tmp_path):
    run = tmp_path / "run"
    with claim_run_dir(run, shared=True), claim_run_dir(run, shared=True), \
            pytest.raises(OutputPathError, match="in use"):
        claim_run_dir(run)
    with claim_run_dir(run), pytest.raises(OutputPathError, match="in use"):
        claim_run_dir(run, shared=True)


def test_the_bench_refuses_an_earlier_run_in_one_line_and_touches_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "steps.jsonl").write_text('{"type":"run"}\n')
    before = _snapshot(tmp_path)
    for cmd in ("bench", "sweep"):
        assert main([cmd, "--out", str(run)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "holds an earlier run" in err[0] and "--force" in err[0]
    assert _snapshot(tmp_path) == before


# --------------------------------------------------------------------------- bounds
BENCH_NUMBERS = [  # flag, bound, the field the error names
    ("--steps", bounds.BENCH_STEPS, "--steps"),
    ("--nproc", bounds.BENCH_NPROC, "--nproc"),
    ("--nnodes", bounds.BENCH_NNODES, "--nnodes"),
    ("--threads", bounds.BENCH_THREADS, "--threads"),
    ("--stop-grace", bounds.BENCH_STOP_GRACE_S, "--stop-grace"),
    ("--seq-len", bounds.BENCH_SEQ_LEN, "training.seq_len"),
    ("--micro-batch", bounds.BENCH_MICRO_TOKENS, "training.micro_batch"),
    ("--global-batch", bounds.BENCH_MICRO_BATCHES, "training.global_batch"),
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(BENCH_NUMBERS), excess=st.integers(min_value=1, max_value=10**40))
def test_absurd_bench_numbers_are_one_line_before_any_work(tmp_path, capsys, which, excess):
    """Any value past a bound: exit 2, one line naming the field, no directory, no torch import
    needed (the global batch and micro-batch are scaled so that the bound is what they cross:
    a micro-batch of 256-token sequences, 8 sequences a micro-batch)."""
    flag, bound, field = which
    value = bound.hi + excess
    if flag == "--micro-batch":
        value = bound.hi // 256 + excess
    elif flag == "--global-batch":
        value = 8 * (bound.hi + excess)
    out = tmp_path / "never"
    argv = ["bench", flag, str(value), "--out", str(out)]
    if flag == "--nnodes":
        argv += ["--rdzv-endpoint", "127.0.0.1:1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainperf bench: error: ") and field in err[0], err
    assert "Traceback" not in err[0] and not out.exists()


def test_a_bench_refusal_imports_no_torch(tmp_path):
    code = ("import sys; from trainperf.cli.main import main; "
            f"rc = main(['bench', '--global-batch', '1000000000000', '--out', {str(tmp_path / 'x')!r}]); "
            "print(rc, 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert r.stdout.split() == ["2", "False"], r.stderr


# --------------------------------------------------------------------------- dead workers
def test_the_dead_worker_line_names_the_cause_not_its_victims(tmp_path):
    victim = WorkerFailure(rank=0, exit_code=1, pid=11, message="RuntimeError: Connection closed by peer",
                           timestamp=100.0)
    closed = WorkerFailure(rank=2, exit_code=-signal.SIGTERM, pid=13, timestamp=100.0)
    killed = WorkerFailure(rank=1, exit_code=-signal.SIGKILL, pid=12, timestamp=101.0)
    assert first_failure([victim, closed, killed]) is killed
    assert first_failure([victim, closed]) is victim
    write_failures(tmp_path / "failures.json", [victim, closed, killed])
    got = read_failures(tmp_path)
    assert got == [victim, closed, killed]
    line = failure_line(got, tmp_path, steps_kept=7, last_step=9)
    assert "\n" not in line
    assert line.startswith("worker rank 1 (pid 12) was killed by SIGKILL")
    assert "after it: rank 0 exit code 1, rank 2 killed by SIGTERM" in line
    assert f"7 step(s) kept (last step 9) in {tmp_path / 'steps.jsonl'}" in line
    assert line.endswith(f"full worker log: {tmp_path / 'rank1.log'}")
    alone = failure_line([victim], tmp_path, steps_kept=0, last_step=None)
    assert "rank 0 (pid 11) exited with code 1 (RuntimeError: Connection closed by peer); no step finished" in alone


def test_a_damaged_failure_report_is_skipped(tmp_path):
    (tmp_path / "failures.json").write_text("{not json")
    os.symlink(tmp_path / "elsewhere.json", tmp_path / "failures-b.json")
    assert read_failures(tmp_path) == []


# --------------------------------------------------------------------------- interrupted summaries
def _record(path: Path, n_steps: int, *, warmup_flagged: int, planned: int, end: dict | None) -> None:
    workload = None
    lines = [{"type": "run", "schema": 1, "source": "bench", "workload": workload,
              "meta": {"warmup_steps": warmup_flagged, "planned_steps": planned, "warmup_given": None,
                       "convention": "megatron"}}]
    for i in range(1, n_steps + 1):
        extra = {"warmup": True} if i <= warmup_flagged else {}
        lines.append({"type": "step", "step": i, "step_time_s": 10.0 if i <= warmup_flagged else 1.0 + i / 100,
                      "tokens": 64, "rank": 0, "extra": extra})
    if end is not None:
        lines.append({"type": "end", **end})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


@pytest.mark.parametrize("done", [1, 3, 10])
def test_a_run_stopped_within_its_warm_up_measures_nothing(tmp_path, done):
    """100 steps planned: the meter flagged the first 10 as warm-up. Stopped after ``done`` of
    them, the summary counts none as measured (the rule on 3 steps alone would count 2)."""
    _record(tmp_path / "steps.jsonl", done, warmup_flagged=10, planned=100,
            end={"interrupted": True, "interrupted_at_step": done + 1, "stop_signal": "SIGTERM"})
    s = build_summary(tmp_path, exit_code=143)
    assert s["steps_completed"] == done and s["steps_measured"] == 0 and s["warmup_steps"] == done
    assert s["step_time_median_s"] is None and s["interrupted"] and s["stop_signal"] == "SIGTERM"
    assert "of the 100 planned" in s["warmup_rule"]


def test_a_run_stopped_after_its_warm_up_measures_only_the_steps_after_it(tmp_path):
    _record(tmp_path / "steps.jsonl", 13, warmup_flagged=10, planned=100, end=None)  # killed: no end line
    s = build_summary(tmp_path, exit_code=137)
    assert s["steps_completed"] == 13 and s["steps_measured"] == 3 and s["warmup_steps"] == 10
    assert s["step_time_median_s"] == pytest.approx(1.12)  # steps 11..13, not a 10 s warm-up step
    assert s["interrupted"] and s["interrupted_at_step"] == 14


def test_results_main_prints_the_dead_worker_line_after_a_slurm_job(tmp_path, capsys):
    from trainperf.measure.results import main as results_main

    _record(tmp_path / "steps.jsonl", 12, warmup_flagged=1, planned=20, end=None)
    write_failures(tmp_path / "failures-node7.json",
                   [WorkerFailure(rank=5, exit_code=-signal.SIGKILL, pid=99, host="node7", timestamp=1.0)])
    assert results_main([str(tmp_path), "--exit-code", "1"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("worker rank 5 (pid 99 on node7) was killed by SIGKILL")
    assert "12 step(s) kept (last step 12)" in err[0]
    assert json.loads((tmp_path / "summary.json").read_text())["steps_measured"] == 11


def test_slurm_script_stops_gracefully_and_locks_its_directory(tmp_path):
    from trainperf.measure.launch import SlurmSpec, sbatch_script

    text = sbatch_script(SlurmSpec(nodes=2, gpus_per_node=8, config_path=str(tmp_path / "run_config.json"),
                                   out_dir=str(tmp_path), stop_grace_s=45))
    assert "#SBATCH --signal=TERM@75" in text  # the stop grace plus 30 s before the time limit
    assert "srun --kill-on-bad-exit=1" in text and "-m trainperf.measure.agent --report" in text
    assert "trap '" in text and " TERM" in text and "flock -n 9" in text
    assert "46 s after a stop signal" in text  # torchrun's shutdown timeout: the stop grace + 1 s
    assert text.index("srun") < text.index("-m trainperf.measure.results")
    r = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True, check=False)
    assert r.returncode == 0, r.stderr
