"""Hypothesis fuzzing: every parser's parse_line (and finish) never raises, on random text and on
near-miss lines (real step lines truncated, with characters replaced or inserted)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainperf.ingest.base import ParseState
from trainperf.ingest.pipeline import LineCounts, run_parser
from trainperf.ingest.registry import FORMATS, get_parser

REAL = {
    "maxtext": "completed step: 49, seconds: 7.908, TFLOP/s/device: 460.480, Tokens/s/device: 1035.970, "
               "total_weights: 524288, loss: 0.000",
    "torchtitan": "[titan] 2025-03-17 10:00:10,123 - root - INFO - step: 10  loss:  9.2741  grad_norm:  2.1034  "
                  "memory: 42.11GiB(44.33%)  tps: 6,543  tflops: 378.95  mfu: 38.32%",
    "megatron": " [2024-06-11 19:21:40] iteration      100/   10000 | consumed samples:        51200 | elapsed time "
                "per iteration (ms): 5320.1 | throughput per GPU (TFLOP/s/GPU): 452.3 | learning rate: 2.999997E-04 | "
                "global batch size:   512 | lm loss: 7.251953E+00 | loss scale: 1.0 | grad norm: 1.234 | number of "
                "skipped iterations:   0 | number of nan iterations:   0 |",
    "nemo": "Training epoch 0, iteration 9/49 | lr: 1.5e-06 | global_batch_size: 128 | global_step: 9 | "
            "reduced_train_loss: 10.35 | train_step_timing in s: 7.912 | TFLOPS_per_GPU: 459.2",
    "composer": "\t Train throughput/batches_per_sec: 0.1264",
    "hf-trainer": " 45%|████▌     | 450/1000 [06:12<07:35,  1.21it/s]",
    "nanogpt": "iter 100: loss 3.2145, time 135.67ms, mfu 38.21%",
    "trainperf": '{"type":"step","step":3,"step_time_s":1.5,"tokens":4096}',
}
EXTRA = ["[batch=3/10]:", "{'loss': 2.5, 'grad_norm': np.float64(1.2), 'epoch': 0.1}",
         "{'train_runtime': 1.0, 'train_samples_per_second': 3.0, 'train_steps_per_second': 1e400}",
         "  world_size ...................................... 64", "Config param max_target_length: 4096",
         "Building 2-D device mesh with ['dp_shard', 'tp'], [8, -1]", "tokens per iteration will be: 0",
         '{"type":"run","schema":1,"workload":{"model":{"preset":"nope"}}}']
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def near_miss(draw):
    base = draw(st.sampled_from(list(REAL.values()) + EXTRA))
    cut = draw(st.integers(0, len(base)))
    line = base[:cut] if draw(st.booleans()) else base
    for _ in range(draw(st.integers(0, 4))):
        if not line:
            break
        i = draw(st.integers(0, len(line) - 1))
        ch = draw(st.sampled_from([*"0-.e,:|% \x00\ufffd9nNaIinf", draw(st.characters())]))
        line = line[:i] + ch + line[i + draw(st.integers(0, 1)):]
    return line


def _feed(name: str, lines: list[str]) -> None:
    parser = get_parser(name)
    state = ParseState(hints={"seq_len": 4096, "num_devices": 8, "tokens_per_step": 32768})
    for i, line in enumerate(lines, 1):
        state.line_no = i
        rec = parser.parse_line(line, state)
        if rec is not None:
            assert rec.step_time_s > 0 and rec.step >= 0
    parser.finish(state)


@pytest.mark.parametrize("name", list(FORMATS))
@SETTINGS
@given(lines=st.lists(st.text(max_size=300), max_size=8))
def test_random_text_never_raises(name, lines):
    _feed(name, lines)


@pytest.mark.parametrize("name", list(FORMATS))
@SETTINGS
@given(lines=st.lists(near_miss(), min_size=1, max_size=8))
def test_near_miss_lines_never_raise(name, lines):
    _feed(name, lines)


@pytest.mark.parametrize("name", list(FORMATS))
def test_each_real_line_parses_with_its_own_parser(name):
    parser = get_parser(name)
    state = ParseState(hints={"seq_len": 4096, "num_devices": 8, "tokens_per_step": 32768})
    lines = ["[batch=3/10]:", REAL[name], "[batch=4/10]:"] if name == "composer" else [REAL[name]]
    got = [r for r in (parser.parse_line(x, state) for x in lines) if r is not None] + parser.finish(state)
    if name == "torchtitan":
        assert got and got[0].step == 10  # time from tps: 32768 / (6543 * 8)
    else:
        assert len(got) == 1


@SETTINGS
@given(lines=st.lists(near_miss(), max_size=30))
def test_pipeline_with_prefixes_never_raises(lines):
    prefixed = [f"[rank{i % 3}]:{x}" if i % 2 else x for i, x in enumerate(lines)]
    for name in ("maxtext", "megatron", "hf-trainer"):
        run_parser(iter(prefixed), get_parser(name), ParseState(), LineCounts())
