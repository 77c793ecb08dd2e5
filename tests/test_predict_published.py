"""The published catalog (every seed table row as data) and `validate` against it."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainperf.predict.published import get_published, load_published_runs, published_claims, published_runs
from trainperf.predict.validate import validate

SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"


def test_catalog_covers_every_seed_table():
    runs = published_runs()
    ids = {r.id for r in runs}
    assert sum(r.id.startswith("maxtext-llama2-70b-bf16") for r in runs) == 7  # 6 table + example
    assert sum(r.id.startswith("maxtext-llama2-70b-fp8") for r in runs) == 6
    assert sum(r.id.startswith("torchtitan-") for r in runs) == 6
    assert sum(r.id.startswith("llmfoundry-mpt-7b") for r in runs) == 2
    assert "jax-eager-llama3.1-405b-lora-8xmi300x" in ids
    assert {c["seed"][:3] for c in published_claims()} == {"004"}
    assert len(ids) == len(runs)


def test_published_numbers_and_derivations():
    assert get_published("maxtext-llama2-70b-bf16-64xh100-example").step_time_s == 7.908
    assert get_published("maxtext-llama2-70b-fp8-2048xh100").step_time_s == 4.93
    r = get_published("torchtitan-llama3-8b-selective-layer-64xa100")
    assert r.derived_from and r.step_time_s == pytest.approx(64 * 8192 / (2904 * 64))
    r = get_published("torchtitan-llama3.1-405b-bf16-128xh100-94gb")
    assert r.step_time_s == pytest.approx(32 * 8192 / (109 * 128))
    assert r.workload.hardware.id == "h100-sxm-hbm2e" and r.workload.plan.tp == 8
    # MPT-7B: 166 TFLOP/s per MI250 card (2 GCD ranks) under LLM Foundry's 6N + 12*L*h*s count
    r = get_published("llmfoundry-mpt-7b-1node-4xmi250")
    m = r.workload.model
    per_token = 6 * m.total_params + 12 * m.layers * m.hidden * 2048
    assert r.step_time_s == pytest.approx(1536 * 2048 * per_token / (166e12 * 4), rel=1e-3)


def test_rows_reproduce_their_own_claims():
    # the seed's own tokens/s agrees with its step time and batch (a check on the data entry)
    for r in published_runs():
        tps = r.claimed.get("tokens_per_s")
        if tps and r.derived_from is None and r.validate:
            assert r.workload.tokens_per_step / r.step_time_s == pytest.approx(tps, rel=2e-3), r.id


@pytest.mark.skipif(not SEEDS.is_dir(), reason="seed documents not next to the repository")
def test_source_lines_hold_the_numbers():
    for r in published_runs():
        lines = (SEEDS / r.seed).read_text(encoding="utf-8").splitlines()
        text = lines[r.line - 1]
        if r.derived_from is None:
            assert f"{r.step_time_s:g}" in text, r.id
        else:
            num = r.derived_from.split("=")[1].split()[0]
            assert num in text, (r.id, num)


def test_run_records():
    runs = load_published_runs()
    assert all(r.source == "published" and r.workload is not None for r in runs)
    assert all(r.meta["citation"] and r.steps[0].step_time_s > 0 for r in runs)


def test_validate_meets_the_target():
    v = validate()
    assert v.mape_pct <= 10.0
    assert v.worst.abs_pct_error <= 25.0
    assert len(v.included) >= 20
    assert set(v.by_vendor()) == {"nvidia", "amd"}
    d = v.to_dict()
    for row in d["rows"]:
        assert {"source", "predicted_step_time_s", "published_step_time_s", "abs_pct_error"} <= set(row)
    # every validated workload is one that ran, so it must fit
    assert all(r.fits for r in v.included)
    # at most a handful of fitted knobs per device
    assert all(len(k) <= 4 for k in v.knobs_per_device.values())
