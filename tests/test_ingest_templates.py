"""The template speed path (lines read by shape from byte blocks, numbers combined with numpy)
gives exactly what ``parse_line`` gives line by line: hypothesis draws step lines whose numbers
take every form the canonical regexes admit (padding, long digit runs, exponents past 1e22,
signs, nan/inf, values beyond int64, impossible times) behind every kind of rank prefix; and a
NUL or a byte that is not UTF-8 costs at most its own line."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from same_values import same
from trainperf.ingest.base import ParseState
from trainperf.ingest.pipeline import LineCounts, parse_log, run_parser
from trainperf.ingest.registry import get_parser
from trainperf.ingest.templates import BlockField, _plan, read_fields

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

digits = st.text("0123456789", min_size=1, max_size=22)
decimal = st.one_of(
    st.builds(lambda a, b: f"{a}.{b}", digits, st.text("0123456789", max_size=20)),
    digits, st.builds(lambda a: f"{a}.", digits),
    st.floats(1e-9, 1e9).map(lambda x: f"{x:.1f}"), st.floats(1e-9, 1e9).map(lambda x: f"{x:.3f}"))
exponent = st.builds(lambda m, e, sign, ch: f"{m}{ch}{sign}{e:02d}",
                     st.floats(0, 10).map(lambda x: f"{x:.6f}"), st.integers(0, 400),
                     st.sampled_from("+-"), st.sampled_from("Ee"))
loss_text = st.one_of(exponent, decimal, st.sampled_from(["nan", "inf", "-0.0E+00", "1.2.3", "E", "+-1", "-5",
                                                          "1e999", "00000000000000000001.5E+03"]))
prefix = st.sampled_from(["", "0: ", "3: ", "12: ", "1234567: ", "[rank2]:", "[default1]:", " [rank0]:",
                          "\t[rank1]:", "[1,2]<stdout>:", "  7: "])
stamp = st.sampled_from(["", " [2024-06-11 19:21:40] ", "[2024-06-11 19:21:40] ", "  "])


@st.composite
def megatron_line(draw):
    it = draw(st.integers(0, 10**10))
    width = draw(st.sampled_from(["8d", "d", "12d"]))
    unit = draw(st.sampled_from(["ms", "s"]))
    tf = draw(st.one_of(st.none(), decimal))
    skipped = draw(st.booleans())
    line = (f"{draw(prefix)}{draw(stamp)}iteration {it:{width}}/ 1000 | consumed samples: {draw(digits)} | "
            f"elapsed time per iteration ({unit}): {draw(decimal)} |"
            + (f" throughput per GPU (TFLOP/s/GPU): {tf} |" if tf is not None else "")
            + f" learning rate: {draw(exponent)} | global batch size: {draw(digits):>5} | lm loss: {draw(loss_text)} |"
            f" loss scale: 1.0 | grad norm: {draw(decimal)} |"
            + (" number of skipped iterations:   0 | number of nan iterations:   0 |" if skipped else "")
            + draw(st.sampled_from(["", "  ", " x"])))
    return line


@st.composite
def maxtext_line(draw):
    return (f"{draw(prefix)}completed step: {draw(digits)}, seconds: {draw(decimal)}, TFLOP/s/device: "
            f"{draw(decimal)}, Tokens/s/device: {draw(decimal)}, total_weights: {draw(digits)}, loss: {draw(decimal)}")


OTHER = ["  seq_length ...................................... 2048", "warning: 12 things", "",
         "0:   world_size ...................................... 16", "Config param max_target_length: 4096"]


def _run(fmt: str, lines: list[str], fast: bool, hints: dict) -> tuple:
    parser = get_parser(fmt)
    if not fast:
        parser.block_re = None
    state = ParseState(hints=dict(hints))
    counts = LineCounts()
    data = ("\n".join(lines) + "\n").encode()
    items = [data[i:i + 997] for i in range(0, len(data), 997)]  # blocks cut anywhere, as the reader does
    from trainperf.ingest.reader import ReadStats, iter_blocks

    col = run_parser(iter_blocks(iter(items), ReadStats()), parser, state, counts)
    return ([s.to_dict() for s in col.steps], col.rank, sorted(col.ranks_with_steps), col.other_rank_steps,
            col.restarts, col.superseded_steps, counts.lines_total, counts.lines_used, counts.other_rank_lines,
            state.malformed_lines, state.cut_count, dict(state.facts.values), dict(state.facts.where))


@pytest.mark.parametrize("fmt, line", [("megatron", megatron_line()), ("maxtext", maxtext_line())])
@SETTINGS
@given(data=st.data())
def test_template_path_equals_parse_line(fmt, line, data):
    body = data.draw(st.lists(st.one_of(line, line, line, st.sampled_from(OTHER)), min_size=1, max_size=40))
    hints = data.draw(st.sampled_from([{}, {"seq_len": 4096}, {"seq_len": 10**15}]))
    fast, slow = _run(fmt, body, True, hints), _run(fmt, body, False, hints)
    assert same(fast, slow, same_type=True), (fast, slow)


@SETTINGS
@given(text=st.one_of(decimal, exponent), kind=st.sampled_from(["float", "to_float"]))
def test_numbers_read_from_digits_equal_float(text, kind):
    """One field's value from its digits (module doc of templates) is Python's float of the text."""
    import numpy as np

    from trainperf.ingest.base import to_float

    shape = "".join("0" if c.isdigit() else c for c in text)
    f = BlockField("x", 1, kind)
    plan = _plan(f, shape, 2)

    from trainperf.ingest.templates import Template

    block = f"a:{text}\n".encode()
    got, _, ok = read_fields(Template(len(shape) + 2, 0, None, {"x": plan}), np.frombuffer(block, np.uint8), block,
                             np.array([0]), (f,))
    try:
        want = float(text) if kind == "float" else to_float(text)
    except ValueError:
        assert not ok[0]
        return
    if want is None:
        assert math.isnan(got["x"][0])
    elif ok[0]:
        assert got["x"][0] == want and math.copysign(1, got["x"][0]) == math.copysign(1, want)


@pytest.mark.parametrize("bad", [b"\x00", b"\xff", b"\xe2\x82", b"\x00\x00\xfe"])
@pytest.mark.parametrize("fmt", ["megatron", "maxtext"])
def test_a_nul_or_non_utf8_byte_costs_at_most_its_line(tmp_path, fmt, bad):
    meg = (" iteration {i:8d}/ 1000 | consumed samples: {s:12d} | elapsed time per iteration (ms): 973.{i} | "
           "learning rate: 3.0E-04 | global batch size:   256 | lm loss: 2.0E+00 | loss scale: 1.0 | grad norm: "
           "1.234 |")
    mt = ("completed step: {i}, seconds: 2.{i}, TFLOP/s/device: 100.000, Tokens/s/device: 1000.000, "
          "total_weights: 16000, loss: 1.000")
    lines = [(meg if fmt == "megatron" else mt).format(i=i, s=256 * i).encode() for i in range(1, 41)]
    damaged = {5: lines[5][:30] + bad + lines[5][30:], 17: lines[17] + bad, 30: bad + lines[30]}
    for i, x in damaged.items():
        lines[i] = x
    lines.insert(10, bad * 3)  # a line of nothing but the bad bytes
    (tmp_path / "d.log").write_bytes(b"\n".join(lines) + b"\n")
    parsed = parse_log(tmp_path / "d.log", fmt=fmt)
    meta = parsed.run.meta
    steps = [s.step for s in parsed.run.steps]
    assert set(range(1, 41)) - set(steps) <= {6}  # only the line broken inside a number may be lost
    assert meta["lines_total"] == 41
    kind = "nul_lines" if b"\x00" in bad else "non_utf8_lines"
    assert meta["damaged_lines"][kind] == 4
    assert meta["lines_total"] == meta["lines_used"] + meta["skipped_lines"] + meta["other_rank_lines"]


def _digit_blind(parsed) -> list[str]:
    """What in a parsed regex tells one ASCII digit from another (a literal digit, a class with
    some digits but not all, a back-reference): must be nothing for a block_re."""
    bad = []
    for op, av in parsed:
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL") and 48 <= av <= 57:
            bad.append(f"literal digit {chr(av)!r}")
        elif name == "IN":
            digits: set[int] = set()
            for o, a in av:
                if str(o) == "LITERAL" and 48 <= a <= 57:
                    digits.add(a)
                elif str(o) == "RANGE":
                    digits |= set(range(max(a[0], 48), min(a[1], 57) + 1))
                elif str(o) == "CATEGORY" and str(a) == "CATEGORY_DIGIT":
                    digits |= set(range(48, 58))
            if len(digits) not in (0, 10):
                bad.append(f"a class holding some digits {sorted(map(chr, digits))}")
        elif name.startswith("GROUPREF"):
            bad.append("a back-reference")
        elif name == "SUBPATTERN":
            bad += _digit_blind(av[3])
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            bad += _digit_blind(av[2])
        elif name == "BRANCH":
            for alt in av[1]:
                bad += _digit_blind(alt)
        elif name in ("ASSERT", "ASSERT_NOT", "ATOMIC_GROUP"):
            bad += _digit_blind(av[1] if name != "ATOMIC_GROUP" else av)
    return bad


@pytest.mark.parametrize("fmt", sorted(__import__("trainperf.ingest.registry", fromlist=["FORMATS"]).FORMATS))
def test_every_block_re_treats_digits_alike(fmt):
    """The shape argument of templates (two lines of one shape match alike) holds for the regex."""
    import re._parser as sre_parse

    parser = get_parser(fmt)
    if parser.block_re is None:
        return
    assert parser.block_fields, "a block_re needs its block_fields"
    assert _digit_blind(sre_parse.parse(parser.block_re.pattern, parser.block_re.flags)) == []
    assert _digit_blind(sre_parse.parse(r"a[0-4]\d(x)\1")) == [
        "a class holding some digits ['0', '1', '2', '3', '4']", "a back-reference"]
