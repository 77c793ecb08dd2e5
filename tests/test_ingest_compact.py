"""Every format keeps its parsed steps as compact columns (issue 17: parsing memory must not grow
by a Python object per step): numpy arrays of 8 bytes per step and varying field, nothing for a
constant field, no per-step dict, and no StepRecord made until something asks."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainperf.accounting.summarize import summarize
from trainperf.ingest.pipeline import parse_log
from trainperf.records.step_columns import StepColumns

N = 3000
LINES = {
    "megatron": lambda i: (f" iteration {i:8d}/ 10000 | consumed samples: {256 * i:12d} | elapsed time per iteration "
                           f"(ms): {900 + i % 97:.1f} | learning rate: 3.0E-04 | global batch size:   256 | lm loss: "
                           f"{2 + i % 13 / 10:.6E} | loss scale: 1.0 | grad norm: {1 + i % 7 / 10:.3f} |"),
    "maxtext": lambda i: (f"completed step: {i}, seconds: {2 + i % 9 / 100:.3f}, TFLOP/s/device: 100.000, "
                          f"Tokens/s/device: 1000.000, total_weights: 16000, loss: {1 + i % 5 / 10:.3f}"),
    "nanogpt": lambda i: f"iter {i}: loss {3 + i % 11 / 100:.4f}, time {130 + i % 17:.2f}ms, mfu 38.21%",
    "torchtitan": lambda i: (f"[rank0]:[titan] 2025-06-16 {i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d},000 - "
                             f"root - INFO - step: {i}  loss: {9 - i / N:.4f}  memory: 49.66GiB(52.28%)  tps: 5,856  "
                             f"tflops: 339.16  mfu: 34.29%"),
    "trainperf": lambda i: json.dumps({"type": "step", "step": i, "step_time_s": 1.5 + i % 3 / 10, "tokens": 4096}),
}


@pytest.mark.parametrize("fmt", sorted(LINES))
def test_steps_are_compact_columns(tmp_path, fmt):
    log = tmp_path / f"{fmt}.log"
    log.write_text("\n".join(LINES[fmt](i) for i in range(1, N + 1)) + "\n")
    parsed = parse_log(log, fmt=fmt)
    steps = parsed.run.steps
    assert isinstance(steps, StepColumns) and len(steps) >= N - 2
    assert steps.overridden() == []  # no per-step dict
    stored = [a for a in steps._cols.values() if a is not None] + list(steps._xcols.values())
    per_step = sum(a.nbytes for a in stored if a.strides != (0,)) / len(steps)
    assert per_step <= 8 * len(stored)
    summarize(parsed.run)
    assert steps.lazy  # the summary read the arrays
    first = steps[0]
    assert first.step in (0, 1, 2) and first.step_time_s > 0 and not steps.lazy


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


values = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**70), 2**70),
                   st.booleans())


@st.composite
def step_record(draw):
    from trainperf.records.run_record import StepRecord

    rec = StepRecord(step=draw(st.integers(0, 2**66)), step_time_s=draw(st.floats(1e-3, 1e3)))
    for k in ("tokens", "loss", "grad_norm", "memory_GiB", "claimed_tokens_per_s",
              "claimed_tokens_per_s_per_device", "claimed_tflops_per_device", "claimed_mfu_pct"):
        setattr(rec, k, draw(values))
    rec.flag = draw(st.sampled_from([None, None, "impossible"]))
    rec.extra = draw(st.dictionaries(st.sampled_from(["memory_pct", "x", "line"]), values, max_size=2))
    rec.breakdown = draw(st.sampled_from([None, {"compute": 1.0}]))
    return rec


@settings(max_examples=60, deadline=None)
@given(recs=st.lists(step_record(), max_size=30), cut=st.integers(0, 30))
def test_columns_give_back_every_record_exactly(recs, cut):
    """Whatever a parser puts in a StepRecord (a NaN, an int where a float goes, a count beyond
    int64, a bool, extras) comes back from the columns unchanged, value and type."""
    import dataclasses

    from trainperf.records.step_columns import StepColumnsBuilder

    b = StepColumnsBuilder()
    for i, r in enumerate(recs):
        b.add_record(r, i + 1)
        if i == cut:
            b._flush()  # blocks of several sizes
    cols, lines = b.build(None)
    assert lines.tolist() == list(range(1, len(recs) + 1))
    assert len(cols) == len(recs)
    singles = [cols.record_at(i) for i in range(len(recs))]
    for got in (singles, cols.records()):
        for x, y in zip(got, recs, strict=True):
            assert _same(dataclasses.asdict(x), dataclasses.asdict(y)), (x, y)
