"""Prediction ranges from held-out residuals (predict/intervals.py)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest

from trainperf.cli.main import main
from trainperf.predict import intervals
from trainperf.predict.holdout import Prediction
from trainperf.specs.workload_file import workload_from_dict


def _w(device: str = "h100-sxm", n: int = 8, seq: int = 4096, precision: str = "bf16", preset: str = "llama3-8b"):
    return workload_from_dict({"model": {"preset": preset}, "hardware": {"device": device, "num_devices": n},
                               "training": {"seq_len": seq, "global_batch": n, "precision": precision}})


@dataclass(frozen=True)
class _Row:
    name: str
    stack: str
    generation: str
    workload: object
    table: str = "t"
    measured_step_time_s: float = 1.0


def test_quantiles_are_the_split_conformal_order_statistics():
    # 0..10 (n = 11): the floor(12 * 0.1) = 1st and ceil(12 * 0.9) = 11th smallest
    assert intervals._quantiles([float(i) for i in range(11)]) == (0.0, 10.0)
    # 0..98 (n = 99): the 10th and 90th smallest, i.e. 9 and 89
    assert intervals._quantiles([float(i) for i in range(99)]) == (9.0, 89.0)
    # two residuals: the range is their span
    assert intervals._quantiles([1.0, 0.0]) == (0.0, 1.0)


def test_balanced_quantiles_weigh_each_group_as_one():
    # a big group of zeros and four small groups at -4..-1 and +1..+4: pooled over rows the big
    # group sets both ends; balanced, each group is a fifth of the weight
    grouped = [("big", 0.0)] * 96 + [("m2", -2.0), ("m1", -1.0), ("p1", 1.0), ("p2", 2.0)]
    assert intervals._quantiles([x for _, x in grouped]) == (0.0, 0.0)
    # cumulative weights (each small group 1, the big one 1 in all): -2 (1), -1 (2), the zeros (3),
    # 1 (4), 2 (5): the ends are the first to reach 10% and 90% of 5, i.e. 0.5 and 4.5
    assert intervals._balanced_quantiles(grouped) == (-2.0, 2.0)
    assert intervals.range_quantiles(grouped) == (-2.0, 2.0)
    # the hull: a wide pooled view is kept where the balanced one is narrower
    many = [("a", float(i)) for i in range(-50, 51)] + [("b", 0.0)]
    lo, hi = intervals.range_quantiles(many)
    assert (lo, hi) == (min(intervals._quantiles([x for _, x in many])[0], intervals._balanced_quantiles(many)[0]),
                        max(intervals._quantiles([x for _, x in many])[1], intervals._balanced_quantiles(many)[1]))
    assert lo <= -40.0 and hi >= 40.0


def test_widening_names_each_reason_and_multiplies():
    dom = intervals.Domain.of([_Row("a", "megatron-core", "hopper", _w(n=64, seq=4096))])
    f, why = intervals.widening(dom, "hopper", _w(n=64, seq=4096))
    assert f == 1.0 and why == ()
    f, why = intervals.widening(dom, "hopper", _w(n=64, seq=4096, precision="fp8"))
    assert f == pytest.approx(intervals.WIDEN["precision"]) and "fp8" in why[0]
    # 4x the longest fitted sequence: +25% per doubling of the log-width, two doublings
    f, why = intervals.widening(dom, "hopper", _w(n=64, seq=16384))
    assert f == pytest.approx(1.0 + 2 * intervals.WIDEN["seq_per_doubling"]) and "16,384" in why[0]
    f, why = intervals.widening(dom, "blackwell", _w(device="b200", n=64))
    assert f == pytest.approx(intervals.WIDEN["unseen_silicon"]) and "blackwell" in why[0]


def test_interval_uses_group_out_for_every_pair():
    # a fitted pair's new table is a new source (every pair's tables share one): the same basis
    dom = intervals.Domain.of([_Row("a", "megatron-core", "hopper", _w())])
    m = intervals.IntervalModel(group_out=(-0.2, 0.3), table_out=(-0.1, 0.1), domain=dom)
    iv = m.interval(2.0, _w(), "hopper")
    assert iv.basis == intervals.BASIS == "leave-one-(stack, silicon)-out"
    assert (iv.low_s, iv.high_s) == pytest.approx((2.0 * math.exp(-0.2), 2.0 * math.exp(0.3)))
    assert iv.contains(2.0) and not iv.contains(3.0)
    wide = m.interval(2.0, _w(device="b200"), "blackwell")
    f = intervals.WIDEN["unseen_silicon"]
    assert (wide.low_s, wide.high_s) == pytest.approx((2.0 * math.exp(-0.2 * f), 2.0 * math.exp(0.3 * f)))
    back = intervals.IntervalModel.from_dict(json.loads(json.dumps(m.to_dict())))
    assert back == m and back.interval(2.0, _w(), "hopper") == iv


def test_novelty_is_the_spread_of_held_out_groups_over_held_out_tables():
    assert intervals.novelty_factor((-0.3, 0.3), (-0.1, 0.1)) == pytest.approx(3.0)
    # never narrower than the group-out ends, and 1 without a table-out spread
    assert intervals.novelty_factor((-0.1, 0.1), (-0.2, 0.2)) == 1.0
    assert intervals.novelty_factor((-0.1, 0.1), (0.0, 0.0)) == 1.0
    dom = intervals.Domain.of([_Row("a", "megatron-core", "hopper", _w())])
    m = intervals.IntervalModel(group_out=(-0.2, 0.3), table_out=(-0.1, 0.1), domain=dom, novelty=1.5)
    iv = m.interval(2.0, _w(), "hopper")
    assert (iv.low_s, iv.high_s) == pytest.approx((2.0 * math.exp(-0.3), 2.0 * math.exp(0.45)))
    assert iv.widened_by == ("a source no fitted table comes from (x1.50: the spread of held-out groups over that "
                             "of held-out tables)",)
    # it multiplies the domain's own widening
    wide = m.interval(2.0, _w(device="b200"), "blackwell")
    f = intervals.WIDEN["unseen_silicon"] * 1.5
    assert (wide.low_s, wide.high_s) == pytest.approx((2.0 * math.exp(-0.2 * f), 2.0 * math.exp(0.3 * f)))
    assert intervals.IntervalModel.from_dict(json.loads(json.dumps(m.to_dict()))) == m


def test_packaged_novelty_is_fitted_from_the_held_out_ends():
    m = intervals.packaged_model()
    assert m is not None and m.novelty == pytest.approx(intervals.novelty_factor(m.group_out, m.table_out))
    assert 1.2 < m.novelty < 2.0


def test_coverage_with_table_out_is_nested_for_the_novelty_too():
    # group a's table-out residuals are wide, b's narrow: b's novelty comes from a's only
    rows, go, to = [], [], []
    for g, gres, tres in (("a", [0.0, 0.3], [-0.2, 0.2]), ("b", [0.0, 0.1], [-0.01, 0.01])):
        for i, (r, t) in enumerate(zip(gres, tres, strict=True)):
            row = _Row(f"{g}{i}", g, "hopper", _w())
            rows.append(row)
            go.append(Prediction(row.name, "t", g, 1.0, math.exp(-r), "hopper"))
            to.append(Prediction(row.name, "t", g, 1.0, math.exp(-t), "hopper"))
    cov = intervals.group_out_coverage(rows, go, to)
    # b's range from a's group-out (0, 0.3) x novelty 0.3 / 0.4 -> at least 1: (0, 0.3) holds 0 and 0.1
    assert cov["per_group"]["b@hopper"]["coverage_pct"] == pytest.approx(100.0)
    # a's range from b's (0, 0.1) x novelty 0.1 / 0.02 = 5: (0, 0.5) holds 0 and 0.3; unwidened, 0.3 misses
    assert cov["per_group"]["a@hopper"]["coverage_pct"] == pytest.approx(100.0)
    assert cov["quantile_coverage_pct"] == pytest.approx(75.0) and cov["coverage_pct"] == pytest.approx(100.0)


def test_group_out_coverage_is_nested_per_group():
    # two groups of residuals; each group's range comes from the other group only
    rows, preds = [], []
    for g, residuals in (("a", [0.0, 0.01, -0.01, 0.02, 0.5]), ("b", [0.0, 0.01, 0.02, -0.01, -0.02])):
        for i, r in enumerate(residuals):
            row = _Row(f"{g}{i}", g, "hopper", _w())
            rows.append(row)
            preds.append(Prediction(row.name, "t", g, 1.0, math.exp(-r), "hopper"))
    cov = intervals.group_out_coverage(rows, preds)
    lo_b, hi_b = intervals.range_quantiles([("b", x) for x in [-0.02, -0.01, 0.0, 0.01, 0.02]])
    lo_a, hi_a = intervals.range_quantiles([("a", x) for x in [0.0, 0.01, -0.01, 0.02, 0.5]])
    want_a = sum(lo_b <= r <= hi_b for r in [0.0, 0.01, -0.01, 0.02, 0.5])
    want_b = sum(lo_a <= r <= hi_a for r in [0.0, 0.01, 0.02, -0.01, -0.02])
    assert cov["per_group"]["a@hopper"]["coverage_pct"] == pytest.approx(100 * want_a / 5)
    assert cov["per_group"]["b@hopper"]["coverage_pct"] == pytest.approx(100 * want_b / 5)
    assert cov["coverage_pct"] == pytest.approx(100 * (want_a + want_b) / 10)
    assert cov["group_balanced_coverage_pct"] == pytest.approx((100 * want_a / 5 + 100 * want_b / 5) / 2)


def test_predict_json_carries_the_range_and_why_it_is_wide(capsys):
    base = ["predict", "--model", "llama3-8b", "--num-devices", "8", "--seq-len", "8192", "--global-batch", "8",
            "--json"]
    assert main([*base, "--device", "h100-sxm", "--stack", "megatron-core"]) == 0
    d = json.loads(capsys.readouterr().out)
    iv = d["step_time_interval_s"]
    assert iv["low_s"] < d["step_time_s"] < iv["high_s"] and iv["level"] == pytest.approx(0.8)
    # a fitted (stack, silicon) pair: widened only for a new source
    assert iv["basis"] == "leave-one-(stack, silicon)-out" and len(iv["widened_by"]) == 1
    assert "source no fitted table" in iv["widened_by"][0]
    hopper = iv["high_s"] / iv["low_s"]
    assert main([*base, "--device", "b200", "--stack", "megatron-core"]) == 0
    d = json.loads(capsys.readouterr().out)
    iv = d["step_time_interval_s"]
    assert iv["basis"] == "leave-one-(stack, silicon)-out" and any("blackwell" in w for w in iv["widened_by"])
    assert math.log(iv["high_s"] / iv["low_s"]) == pytest.approx(intervals.WIDEN["unseen_silicon"] * math.log(hopper))


def test_validate_reports_group_out_coverage_near_the_nominal_level(capsys):
    assert main(["validate", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    cov = d["leave_one_group_out_interval_coverage_pct"]
    balanced = d["leave_one_group_out_interval_group_balanced_coverage_pct"]
    # the ranges are the hull of the row-pooled and group-balanced views: above the nominal level
    # over rows, near it over groups (each group weighing one)
    assert 80.0 <= cov <= 95.0 and 75.0 <= balanced <= 90.0
    # the ranges as predict gives them are widened for a new source: never less coverage than the quantiles'
    assert cov >= d["leave_one_group_out_quantile_coverage_pct"] >= 80.0
    assert balanced >= d["leave_one_group_out_quantile_group_balanced_coverage_pct"] >= 75.0
    assert d["interval_level_pct"] == pytest.approx(80.0)
    inside = [r for r in d["rows"] if r["included"] and r["interval_s"] is not None]
    assert inside and all(r["interval_s"][0] < r["predicted_step_time_s"] < r["interval_s"][1] for r in inside)
