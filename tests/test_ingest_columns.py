"""The columnar speed path (templates, StepColumns, block_arrays) gives exactly what the per-line path gives:
the same records, meta, summary and ``trainperf parse`` output, on the benchmark's generated logs,
on the real-log fixtures and on logs cut, garbled and restarted at random places."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from same_values import same
from trainperf.accounting.summarize import summarize
from trainperf.cli.parse import parse_and_summarize
from trainperf.ingest.maxtext import MaxTextParser
from trainperf.ingest.megatron import MegatronParser
from trainperf.ingest.pipeline import parse_log
from trainperf.records.run_record import StepRecord
from trainperf.records.step_columns import StepColumns

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "fixtures" / "reallogs"


def _bench():
    spec = importlib.util.spec_from_file_location("parse_speed_bench", ROOT / "benchmarks" / "parse_speed.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("parse_speed_bench", mod)
    spec.loader.exec_module(mod)
    return mod


def _per_line(monkeypatch):
    """Every line through parse_line (no templates): the reference the speed path must equal."""
    monkeypatch.setattr(MaxTextParser, "block_re", None)
    monkeypatch.setattr(MegatronParser, "block_re", None)


def _outputs(path: Path, **kw) -> tuple:
    parsed = parse_log(path, **kw)
    run = parsed.run
    summary = summarize(run).to_dict() if len(run.steps) else None
    try:
        out = parse_and_summarize(str(path), fmt_name=kw.get("fmt"), workload_path=None,
                                  overrides=kw.get("overrides") or {}, convention="megatron", warmup=None)
        out.pop("_run")
        out.pop("_summary")
    except Exception as e:  # the same refusal on both paths
        out = repr(e)
    steps = [s.to_dict() for s in run.steps]
    return steps, run.meta, summary, out, dict(parsed.facts.values)


def _check(path: Path, monkeypatch, **kw) -> StepColumns | list:
    fast = _outputs(path, **kw)
    lazy = parse_log(path, **kw).run.steps
    with monkeypatch.context() as m:
        _per_line(m)
        slow = _outputs(path, **kw)
    for what, x, y in zip(("steps", "meta", "summary", "parse output", "facts"), fast, slow, strict=True):
        assert same(x, y), what
    return lazy


@pytest.mark.parametrize("kind", ["maxtext", "megatron"])
@pytest.mark.parametrize("hosts", [1, 2])
def test_benchmark_logs_columns_equal_per_line(tmp_path, monkeypatch, kind, hosts):
    bench = _bench()
    monkeypatch.setattr(bench, "HOSTS", hosts)
    path = tmp_path / f"{kind}.log"
    n = bench.generate(path, kind, 30_000, 0.9)
    steps = _check(path, monkeypatch)
    assert isinstance(steps, StepColumns) and steps.lazy  # the speed path was taken, nothing materialized
    parsed = parse_log(path)
    assert parsed.run.meta["steps_parsed"] == n
    summarize(parsed.run)
    assert parsed.run.steps.lazy  # the summary read the columns
    assert isinstance(parsed.run.steps[0], StepRecord) and not parsed.run.steps.lazy


@pytest.mark.parametrize("name", sorted(p.name for p in REAL.glob("*.log")))
def test_real_logs_columns_equal_per_line(monkeypatch, name):
    _check(REAL / name, monkeypatch)


def test_step_columns_sequence():
    cols = {"step": [1, 2, 3], "step_time_s": [1.0, 2.0, 3.0], "tokens": [8, None, 8], "loss": None}
    sc = StepColumns(cols, 3)
    assert sc.lazy and len(sc) == 3 and sc.column("tokens") == [8, None, 8]
    assert sc.column("loss") == [None] * 3 and sc.column("rank") == [3] * 3 and sc.lazy
    recs = [StepRecord(1, 1.0, 8, rank=3), StepRecord(2, 2.0, rank=3), StepRecord(3, 3.0, 8, rank=3)]
    assert sc == recs and recs == sc and sc[1:] == recs[1:] and list(reversed(sc)) == recs[::-1]
    sc[0].flag = "x"
    assert sc.column("flag") == ["x", None, None] and not sc.lazy and sc != recs


def _mutate(lines: list[str], rng: random.Random, ops: list[tuple[int, int]]) -> list[str]:
    out = list(lines)
    for where, op in ops:
        i = where % len(out)
        line = out[i]
        if op == 0:  # cut mid-line, as a killed job leaves it
            out[i] = line[: rng.randrange(1, max(2, len(line)))]
        elif op == 1:  # an impossible step time
            out[i] = line.replace("seconds: ", "seconds: 0.0000000", 1).replace("(ms): ", "(ms): 0.00000", 1)
        elif op == 2:  # a restart: the step number goes back
            out.insert(i, lines[max(0, i - 40)])
        elif op == 3:  # another rank's line
            out[i] = "1: " + line.split(": ", 1)[-1] if line[:1].isdigit() else "1: " + line
        elif op == 4:  # a garbled number
            out[i] = line.replace("1", "x", 1)
        elif op == 5:  # a fact line in the middle
            out.insert(i, "0:   seq_length ...................................... 2048")
        elif op == 6:  # a non-finite loss
            out[i] = line.replace("lm loss: ", "lm loss: nan |", 1).replace("loss: ", "loss: inf, x: ", 1)
        elif op == 7:  # a canonical step line above any device's peak: flagged
            out[i] = line.replace("TFLOP/s/device: ", "TFLOP/s/device: 99999", 1).replace(
                "(TFLOP/s/GPU): ", "(TFLOP/s/GPU): 99999", 1)
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["maxtext", "megatron"]),
       ops=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), max_size=6),
       cut_end=st.booleans(), seed=st.integers(0, 1000))
def test_random_cuts_columns_equal_per_line(tmp_path_factory, monkeypatch, kind, ops, cut_end, seed):
    bench = _bench()
    tmp = tmp_path_factory.mktemp("cols")
    path = tmp / f"{kind}.log"
    bench.generate(path, kind, 9_000, 0.9)
    lines = path.read_text().split("\n")[:-1]
    lines = _mutate(lines, random.Random(seed), ops)
    text = "\n".join(lines)
    if cut_end:  # the last line cut, no newline
        text = text[: len(text) - random.Random(seed).randrange(1, 20)]
    else:
        text += "\n"
    path.write_text(text)
    _check(path, monkeypatch)


@pytest.mark.parametrize("kind", ["maxtext", "megatron"])
def test_step_above_peak_flagged_on_columns(tmp_path, monkeypatch, kind):
    bench = _bench()
    path = tmp_path / f"{kind}.log"
    bench.generate(path, kind, 5_000, 0.9)
    lines = path.read_text().split("\n")
    i = next(i for i in range(3000, len(lines)) if "TFLOP/s" in lines[i])
    lines[i] = lines[i].replace("TFLOP/s/device: ", "TFLOP/s/device: 99999", 1).replace(
        "(TFLOP/s/GPU): ", "(TFLOP/s/GPU): 99999", 1)
    path.write_text("\n".join(lines))
    _check(path, monkeypatch)
    parsed = parse_log(path)
    assert parsed.run.meta["flagged_steps"] == 1
    assert sum(1 for s in parsed.run.steps if s.flag) == 1


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(1e-6, 1e7), min_size=1, max_size=300), st.integers(4096, 6001), st.integers(0, 10**6))
def test_order_statistics_equal_sorting(base, n, seed):
    import statistics

    from trainperf.accounting.summarize import _median_or_none, _time_stats, percentile

    rnd = random.Random(seed)
    times = [base[i % len(base)] * (1 + rnd.random()) if i % 3 else base[i % len(base)] for i in range(n)]
    rnd.shuffle(times)
    xs = sorted(times)
    assert _time_stats(times) == (statistics.median(xs), percentile(xs, 10), percentile(xs, 90))
    assert _median_or_none([*times, None]) == statistics.median(xs)


@pytest.mark.parametrize("kind", ["maxtext", "megatron"])
@pytest.mark.parametrize("fast_step", [False, True])
def test_columns_with_workload_equal_per_line(tmp_path, monkeypatch, kind, fast_step):
    """With the model and device known, the rate check recomputes each step's TFLOP/s: a step far
    too short for its tokens is flagged on both paths."""
    bench = _bench()
    path = tmp_path / f"{kind}.log"
    bench.generate(path, kind, 6_000, 0.9)
    if fast_step:
        lines = path.read_text().split("\n")
        i = next(i for i in range(4000, len(lines)) if "TFLOP/s" in lines[i])
        line = lines[i]
        if kind == "maxtext":
            lines[i] = line[:line.index("seconds: ") + 9] + "0.001" + line[line.index(", TFLOP/s"):]
        else:
            lines[i] = line[:line.index("(ms): ") + 6] + "1.0" + line[line.index(" | throughput"):]
        path.write_text("\n".join(lines))
    overrides = {"model.preset": "llama3-8b", "hardware.device": "h100-sxm", "hardware.num_devices": 16}
    _check(path, monkeypatch, overrides=overrides)
    assert parse_log(path, overrides=overrides).run.meta["flagged_steps"] == (1 if fast_step else 0)
