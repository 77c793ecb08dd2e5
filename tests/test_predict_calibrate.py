"""Knob fitting: the optimiser, and recovering a known knob from synthetic runs."""

from __future__ import annotations

import pytest

from trainperf.predict.calibrate import Observation, fit_knobs, nelder_mead, predict_with
from trainperf.predict.efficiency import vendor_knobs
from trainperf.specs.workload_file import workload_from_dict


def test_nelder_mead_finds_a_quadratic_minimum():
    x, fx, _ = nelder_mead(lambda v: (v[0] - 1.5) ** 2 + 3 * (v[1] + 0.5) ** 2, [0.0, 0.0])
    assert x[0] == pytest.approx(1.5, abs=1e-3) and x[1] == pytest.approx(-0.5, abs=1e-3)
    assert fx < 1e-6


def _w(hidden, batch):
    return workload_from_dict({
        "model": {"preset": "llama3-8b", "hidden": hidden, "heads": hidden // 128, "kv_heads": 8},
        "hardware": {"device": "h100-sxm", "num_devices": 8}, "parallel": {"fsdp": 8},
        "training": {"seq_len": 4096, "global_batch": batch, "micro_batch": batch // 8}})


def test_fit_recovers_the_knob_that_generated_the_data():
    truth = vendor_knobs("nvidia").replace(matmul_fraction=0.65, op_overhead_us=20.0)
    ws = [_w(4096, 8), _w(2048, 16), _w(3072, 8)]
    times = predict_with(truth, [Observation(str(i), w, 1.0) for i, w in enumerate(ws)])
    obs = [Observation(str(i), w, t) for i, (w, t) in enumerate(zip(ws, times, strict=True))]
    res = fit_knobs(obs, vendor_knobs("nvidia"), ["matmul_fraction", "op_overhead_us"],
                    prior_weight=0.0)
    assert res.knobs.matmul_fraction == pytest.approx(0.65, rel=0.02)
    assert res.mape_pct < 0.5
    assert "fitted" in res.knobs.sources["matmul_fraction"]


@pytest.mark.parametrize("statistic", ["median", "p10", "min"])
def test_a_run_without_a_steady_state_step_is_a_one_line_error(statistic):
    from trainperf.errors import SpecError
    from trainperf.predict.calibrate import observation_from_run
    from trainperf.records.run_record import RunRecord, StepRecord

    steps = [StepRecord(step=i, step_time_s=1.0, tokens=8 * 4096, flag="outlier") for i in range(1, 10)]
    run = RunRecord(source="bench", steps=steps, workload=_w(4096, 8), meta={"name": "flagged"})
    with pytest.raises(SpecError, match=r"run\.steps=9 .*not flagged in run 'flagged'"):
        observation_from_run(run, statistic=statistic)
