"""trainperf.text_table prints exactly what tabulate prints ("simple" format), on hand-picked
tables from the CLI and on generated ones (tabulate is the oracle: it stays a dependency)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tabulate import tabulate

from trainperf.text_table import format_table

NARROW = st.text(alphabet=st.sampled_from([*list("abcXYZ019 .,-+e_%()/:="), "≥", "×", "µ", "é", "·"]),
                 max_size=12)
NUMERIC_TEXT = st.one_of(
    st.integers(-10**12, 10**12).map(str),
    st.integers(-10**12, 10**12).map(lambda i: f"{i:,}"),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(-1e9, 1e9).map(lambda f: f"{f:,.3f}"),
    st.sampled_from(["nan", "inf", "-inf", "1e3", "1E-5", ".5", "5.", "1,000", "1,0000", "+1,234.5",
                     " 12", "12 ", "1_000", "True", "False", "0x10", ""]),
)
CELL = st.one_of(st.none(), st.booleans(), st.integers(-10**15, 10**15),
                 st.floats(allow_nan=True, allow_infinity=True), NUMERIC_TEXT, NARROW)


@st.composite
def tables(draw):
    ncols = draw(st.integers(1, 5))
    # columns of one flavour are where type inference and decimal alignment matter
    flavours = [draw(st.sampled_from([CELL, NUMERIC_TEXT, st.floats(-1e6, 1e6), NARROW])) for _ in range(ncols)]
    rows = draw(st.lists(st.tuples(*flavours).map(list), max_size=6))
    headers = draw(st.one_of(st.just([]), st.lists(NARROW, min_size=0, max_size=ncols)))
    return rows, headers


@settings(max_examples=400, deadline=None)
@given(tables(), st.sampled_from(["g", ",.4g", ".2f", ",.0f"]), st.booleans())
def test_generated_tables_match_tabulate(table, floatfmt, numparse):
    rows, headers = table
    expected = tabulate(rows, headers=headers, floatfmt=floatfmt, disable_numparse=not numparse)
    assert format_table(rows, headers, floatfmt=floatfmt, numparse=numparse) == expected


@pytest.mark.parametrize(("rows", "headers"), [
    # the shapes trainperf's commands print
    ([("attn_qkv", "13,421,772,800", "54,975,581,388,800", "9.4%"), ("mlp", "0", "0", "79.0%")],
     ["op", "per token", "per sequence", "share"]),
    ([("step time", "7.908 s"), ("MFU", "44.85%")], ["", ""]),
    ([("megatron", 428385239040, 1.7547e15, "matmul FLOPs")], ["convention", "per token", "per sequence", "counts"]),
    ([(1, 2.34), (-56, "8.999"), ("2", "10001")], []),
    ([], ["a", "bb"]),
    ([], []),
    ([("x", None, math.nan), ("y", 3, math.inf)], ["name", "n", "f"]),
    # not plain: handed to tabulate (multi-line, wide characters, ANSI, ragged rows)
    ([("two\nlines", 1)], ["a", "b"]),
    ([("東京", 1)], ["city", "n"]),
    ([("\x1b[31mred\x1b[0m", 1)], ["c", "n"]),
    ([("a", 1), ("b",)], ["x", "y"]),
    ([[]], []),
])
def test_known_tables_match_tabulate(rows, headers):
    for floatfmt in ("g", ",.4g"):
        for numparse in (True, False):
            assert format_table(rows, headers, floatfmt=floatfmt, numparse=numparse) == \
                tabulate(rows, headers=headers, floatfmt=floatfmt, disable_numparse=not numparse)
