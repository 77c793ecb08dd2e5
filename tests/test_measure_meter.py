"""ThroughputMeter: rates from a controlled clock, warm-up flags, the JSONL it leaves behind."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from trainperf.measure import meter as meter_mod
from trainperf.measure.meter import ThroughputMeter
from trainperf.measure.sinks import step_line
from trainperf.records.jsonl import read_run

pytestmark = pytest.mark.torch


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(meter_mod.time, "perf_counter", c)
    return c


def test_rates_from_step_time(clock, tmp_path):
    out = tmp_path / "steps.jsonl"
    m = ThroughputMeter(out, flops_per_token=6e6, peak_tflops=0.5, total_steps=4,
                        data_parallel_size=4, num_devices=8)
    lines: list[str] = []
    m._sinks.append(type("S", (), {"write": lambda self, r, w: lines.append(step_line(r, w)),
                                   "close": lambda self: None})())
    clock.t += 2.0
    r = m.step(tokens=1000, loss=3.5, grad_norm=1.25)
    # 1000 tokens on each of 4 data-parallel ranks, 8 devices (tp=2), 2 s.
    assert r.step == 1 and r.step_time_s == pytest.approx(2.0)
    assert r.tokens == 4000
    assert r.claimed_tokens_per_s == pytest.approx(2000.0)
    assert r.claimed_tokens_per_s_per_device == pytest.approx(250.0)
    assert r.claimed_tflops_per_device == pytest.approx(6e6 * 250 / 1e12)
    assert r.claimed_mfu_pct == pytest.approx(100 * 6e6 * 250 / 1e12 / 0.5)
    assert r.extra["warmup"] is True  # first step of 4: warm-up by the default rule
    assert lines[0].startswith("completed step: 1, seconds: 2.000, TFLOP/s/device: 0.002, "
                               "Tokens/s/device: 250.0, loss: 3.5000, mfu: 0.30%")
    for dt in (1.0, 1.0, 3.0):
        clock.t += dt
        m.step(tokens=1000)
    s = m.summary()
    assert s["steps_measured"] == 3 and s["step_time_median_s"] == pytest.approx(1.0)
    assert s["tokens_per_s"] == pytest.approx(4000.0)
    m.close()
    run = read_run(out)
    assert not run.interrupted and [st.step for st in run.steps] == [1, 2, 3, 4]
    assert run.meta["peak_tflops"] == 0.5 and run.source == "meter"


def test_paused_time_is_excluded(clock, tmp_path):
    m = ThroughputMeter(flops_per_token=None, warmup_steps=0)
    clock.t += 1.0
    with m.paused():
        clock.t += 5.0  # a checkpoint save
    clock.t += 0.5
    r = m.step(tokens=10)
    assert r.step_time_s == pytest.approx(1.5)
    assert r.claimed_tflops_per_device is None and r.claimed_mfu_pct is None


def test_killed_run_keeps_finished_steps(clock, tmp_path):
    out = tmp_path / "steps.jsonl"
    m = ThroughputMeter(out, total_steps=10, first_step=5)
    for _ in range(3):
        clock.t += 1.0
        m.step(tokens=8)
    # No close(): the process died. Every finished step is on disk, flushed.
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["type"] for x in lines] == ["run", "step", "step", "step"]
    run = read_run(out)
    assert run.interrupted and [s.step for s in run.steps] == [5, 6, 7]


def test_interrupted_close_and_memory(clock, tmp_path):
    out = tmp_path / "steps.jsonl"
    with pytest.raises(KeyboardInterrupt), ThroughputMeter(out) as m:
        clock.t += 1.0
        rec = m.step(tokens=8)
        raise KeyboardInterrupt
    assert rec.memory_GiB is not None and rec.memory_GiB > 0
    run = read_run(out)
    assert run.interrupted and run.meta["steps_completed"] == 1


def test_public_reexport():
    from trainperf.meter import ThroughputMeter as T

    assert T is ThroughputMeter
