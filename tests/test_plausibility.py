"""The one MFU / step-time plausibility check every command shares."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainperf.accounting.plausibility import MIN_STEP_TIME_S, check_mfu, check_step_time, require_finite
from trainperf.errors import SpecError


def test_mfu_at_most_100_is_ok():
    v = check_mfu(46.54, 989.0, "h100-sxm bf16")
    assert v.ok and v.mfu_pct == 46.54 and v.reason == ""
    assert check_mfu(100.0, 989.0).ok


def test_mfu_above_100_is_flagged_on_one_line_naming_causes():
    # `trainperf mfu` for Llama-2-7B on 8 H100 with --step-time 0.001 gave 141960.52%.
    v = check_mfu(141960.52, 989.4, "h100-sxm bf16 datasheet dense peak")
    assert not v.ok
    assert "\n" not in v.reason
    assert "141960" in v.reason and "989.4 TFLOP/s" in v.reason
    for cause in ("step time", "batch", "peak"):
        assert cause in v.reason


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_non_finite_is_a_one_line_spec_error(bad):
    with pytest.raises(SpecError) as e:
        check_mfu(bad, 989.0)
    assert "\n" not in str(e.value) and "mfu_pct" in str(e.value)
    with pytest.raises(SpecError):
        require_finite("tokens_per_s", bad)


@given(st.floats(min_value=0.0, max_value=1e300))
def test_verdict_is_exactly_the_100_percent_threshold(x):
    assert check_mfu(x, 1.0).ok == (x <= 100.0)


def test_step_time_bounds():
    assert check_step_time(0.5) is None
    assert check_step_time(MIN_STEP_TIME_S) is None
    assert "impossible" in check_step_time(1e-300)
    assert "not finite" in check_step_time(math.inf)
    assert "not a number" in check_step_time("5.6x")
