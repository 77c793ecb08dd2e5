"""Stopping a one-process bench on a signal: the step in progress finishes and is kept, the record
gets its end line, the summary leaves the warm-up out; a second signal or an expired grace
stops at once. In-process, tiny model, no extra processes. Also where torchrun puts the workers'
logs (the multi-process runs themselves: tests/test_bench_distributed.py)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

torch = pytest.importorskip("torch")

from trainperf.measure.meter import ThroughputMeter  # noqa: E402
from trainperf.measure.results import build_summary  # noqa: E402
from trainperf.measure.stop import GracefulStop, RunStopped  # noqa: E402
from trainperf.measure.testing import fake_calibration, tiny_workload_dict  # noqa: E402
from trainperf.measure.trainer import BenchConfig, train  # noqa: E402
from trainperf.records.jsonl import read_run  # noqa: E402
from trainperf.records.output_path import OutputPathError  # noqa: E402

pytestmark = [pytest.mark.torch]


@pytest.fixture(autouse=True)
def _one_thread(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    fake_calibration(tmp_path / "cache")
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _cfg(out, steps: int) -> BenchConfig:
    return BenchConfig(workload=tiny_workload_dict(), steps=steps, out_dir=str(out), threads=1)


def _signal_at(step: int, *signums: int):
    """A ``say`` that sends ``signums`` to this process when step ``step``'s line is printed."""
    def say(msg: str) -> None:
        if msg.startswith(f"completed step: {step},"):
            for s in signums:
                os.kill(os.getpid(), s)
    return say


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_finishes_the_step_and_keeps_it(tmp_path, signum):
    out = tmp_path / "run"
    out.mkdir()
    before = signal.getsignal(signum)
    with pytest.raises(RunStopped) as stopped:
        train(_cfg(out, 100), say=_signal_at(2, signum))
    assert stopped.value.signum == signum and stopped.value.exit_code == 128 + signum
    run = read_run(out / "steps.jsonl")
    assert [s.step for s in run.steps] == [1, 2]
    assert run.meta["interrupted"] is True and run.meta["interrupted_at_step"] == 3
    assert run.meta["stop_signal"] == signal.Signals(signum).name
    # 100 steps planned: the meter's warm-up is 10 steps, so nothing is measured yet.
    s = build_summary(out, exit_code=128 + signum)
    assert s["steps_completed"] == 2 and s["steps_measured"] == 0 and s["tokens_per_s"] is None
    assert signal.getsignal(signum) is before  # the loop's handler is gone


def test_a_summary_after_the_warm_up_counts_only_steady_steps(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with pytest.raises(RunStopped):
        train(_cfg(out, 100), say=_signal_at(13, signal.SIGTERM))
    run = read_run(out / "steps.jsonl")
    flagged = [s.step for s in run.steps if (s.extra or {}).get("warmup")]
    assert flagged == list(range(1, 11)) and len(run.steps) == 13
    s = build_summary(out, exit_code=143)
    assert s["steps_measured"] == 3 and s["warmup_steps"] == 10
    steady = sorted(st.step_time_s for st in run.steps[10:])
    assert s["step_time_median_s"] == pytest.approx(steady[1])


def test_a_second_signal_stops_an_interactive_run_at_once(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with pytest.raises(RunStopped, match="signalled again"):
        train(_cfg(out, 100), say=_signal_at(2, signal.SIGINT, signal.SIGINT), interactive=True)
    run = read_run(out / "steps.jsonl")
    assert [s.step for s in run.steps] == [1, 2] and run.meta["interrupted"] is True
    assert "signalled again" in run.meta["reason"]


def test_the_grace_period_bounds_a_step_that_does_not_finish():
    with GracefulStop(0.3) as stop:
        stop.request(signal.SIGTERM)
        t0 = time.monotonic()
        with pytest.raises(RunStopped, match=r"did not finish within 0\.3 s"):
            while time.monotonic() - t0 < 60:  # a step that would never end
                sum(range(1000))
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_one_record_per_run(tmp_path):
    """The bench's meter creates its record exclusively: a second run into it is refused."""
    out = tmp_path / "run"
    out.mkdir()
    train(_cfg(out, 2))
    before = (out / "steps.jsonl").read_bytes()
    with pytest.raises(OutputPathError, match="already exists"):
        train(_cfg(out, 2))
    assert (out / "steps.jsonl").read_bytes() == before


def test_the_meter_summary_of_warm_up_steps_only_measures_nothing(tmp_path):
    m = ThroughputMeter(tmp_path / "steps.jsonl", total_steps=100, flops_per_token=1e6)
    for _ in range(3):
        m.step(tokens=10)
    s = m.summary()
    assert s["steps"] == 3 and s["steps_measured"] == 0 and s["step_time_median_s"] is None
    m.close(interrupted=True)
    assert json.loads((tmp_path / "steps.jsonl").read_text().splitlines()[-1])["interrupted"] is True


def test_torchrun_logs_each_rank_in_the_run_directory(tmp_path):
    """torchrun's LogsSpecs for the bench: stderr to rank<global rank>.log in the run directory
    (stdout inherited: the worker joins it there itself), the @record error file elsewhere."""
    from trainperf.measure.agent import RunDirLogs

    envs = {0: {"RANK": "2"}, 1: {"RANK": "3"}}
    dest = RunDirLogs(tmp_path, str(tmp_path / "errors")).reify(envs)
    assert dest.stderrs == {0: str(tmp_path / "rank2.log"), 1: str(tmp_path / "rank3.log")}
    assert dest.stdouts == {0: "", 1: ""} and (tmp_path / "rank3.log").is_file()
    assert envs[1]["TORCHELASTIC_ERROR_FILE"] == dest.error_files[1] == str(tmp_path / "errors" / "rank3.json")


def test_torchrun_never_writes_a_log_through_a_link(tmp_path):
    from trainperf.measure.agent import RunDirLogs

    target = tmp_path / "precious"
    target.write_text("keep\n")
    (tmp_path / "rank0.log").symlink_to(target)
    with pytest.raises(OSError):
        RunDirLogs(tmp_path, str(tmp_path)).reify({0: {"RANK": "0"}})
    assert target.read_text() == "keep\n"
