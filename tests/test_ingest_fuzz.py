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


# --- issue 12: a step is a complete line ----------------------------------------------------------

# format -> (lines before, the step line, the step time it states); composer's block is closed by finish()
TRUE_TIME = {
    "maxtext": ([], REAL["maxtext"], 7.908),
    "megatron": ([], REAL["megatron"], 5.3201),
    "nemo": ([], REAL["nemo"], 7.912),
    "nanogpt": ([], REAL["nanogpt"], 0.13567),
    "hf-trainer": ([], REAL["hf-trainer"], 1 / 1.21),
    "composer": (["[batch=3/10]:", "\t Train throughput/samples_per_sec: 64.0"], REAL["composer"], 1 / 0.1264),
    "torchtitan": ([REAL["torchtitan"]], REAL["torchtitan"].replace("10:00:10,123", "10:00:21,823")
                   .replace("step: 10", "step: 20"), 1.17),
    "trainperf": ([], REAL["trainperf"], 1.5),
}
CUT_FORMATS = sorted(TRUE_TIME)


def _times(name: str, lines: list) -> list[float]:
    state = ParseState(hints={"seq_len": 4096, "num_devices": 8, "tokens_per_step": 32768})
    col = run_parser(iter(lines), get_parser(name), state, LineCounts())
    return [s.step_time_s for s in col.steps]


@pytest.mark.parametrize("name", CUT_FORMATS)
@SETTINGS
@given(data=st.data())
def test_a_cut_last_line_never_gives_a_step_from_a_cut_number(name, data):
    """The file's last line, cut anywhere (no newline after it, as when a job is killed mid-write):
    either no step or the line's true step time, never a step time read from a cut number."""
    from trainperf.ingest.reader import PARTIAL

    before, line, true = TRUE_TIME[name]
    cut = data.draw(st.integers(0, len(line) - 1))
    times = _times(name, [*before, PARTIAL, line[:cut]])
    full = _times(name, [*before, line])
    assert full and full[-1] == pytest.approx(true, rel=1e-3)
    assert all(t == pytest.approx(true, rel=1e-3) for t in times[len(full) - 1:]), (line[:cut], times)


# NeMo's printer ends a line with its last field, no delimiter after it: a line cut right after
# the time's digits is told apart only when it is the file's last line (the test above).
DELIMITED = ["maxtext", "megatron", "nanogpt", "hf-trainer"]


@pytest.mark.parametrize("name", DELIMITED)
@SETTINGS
@given(data=st.data())
def test_a_line_cut_inside_its_time_field_is_never_a_step(name, data):
    """A cut line in the middle of a file (a restarted job appends after it): formats whose step
    time has a delimiter after it never read a step from the cut number."""
    _, line, true = TRUE_TIME[name]
    key = {"maxtext": "seconds: ", "megatron": "(ms): ", "nanogpt": "time ", "hf-trainer": ",  "}[name]
    start = line.index(key) + len(key)
    cut = data.draw(st.integers(start, start + 4))
    times = _times(name, [line[:cut], "some other line"])
    assert all(t == pytest.approx(true, rel=1e-3) for t in times), (line[:cut], times)
