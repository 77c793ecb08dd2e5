"""The planner against known-good published plans, its objectives, the inverse question and
its explanations.

Published plans (../shared/seeds):
* seed 003, MaxText Llama-2-70B bf16 on 64 H100, seq 4096, GBS 128: FSDP=64, MBS=2, 6.999 s/step;
* seed 002, torchtitan Llama-3.1-405B on 128 H100, seq 8192: 1-D FSDP ran out of memory; 2-D
  FSDP=16 x TP=8 (torchtitan's TP is sequence-parallel), local batch 2 (GBS 32), full AC ran.
"""

from __future__ import annotations

import pytest

from trainperf.plan.inverse import smallest_device_count
from trainperf.plan.search import Objective, search
from trainperf.plan.space import SearchSpace
from trainperf.predict import predict
from trainperf.specs.hardware import get_hardware
from trainperf.specs.parallel import ParallelPlan
from trainperf.specs.presets import get_model
from trainperf.specs.workload import Workload

H100 = get_hardware("h100-sxm")
L70 = get_model("llama2-70b")
L405 = get_model("llama3.1-405b")


@pytest.fixture(scope="module")
def maxtext70():
    return search(L70, H100, SearchSpace((64,), 8, 4096, (128,)), top_k=5)


@pytest.fixture(scope="module")
def titan405():
    return search(L405, H100, SearchSpace((128,), 8, 8192, (32,)), top_k=5)


def _w(model, n, seq, gbs, mbs, plan, ac):
    return Workload(model=model, hardware=H100, num_devices=n, seq_len=seq, global_batch=gbs, micro_batch=mbs,
                    plan=plan, devices_per_node=8, activation_checkpointing=ac)


def test_maxtext_llama2_70b_64_h100(maxtext70):
    r = maxtext70
    best = r.top[0]
    assert best.fits and best.memory_GiB <= best.capacity_GiB
    # the published plan (FSDP=64, MBS=2) is in the ranked list ...
    rank = r.rank_of(num_devices=64, dp=1, fsdp=64, tp=1, pp=1, cp=1, micro_batch=2)
    assert rank is not None
    row = r.ranked.row(rank - 1)
    published = predict(_w(L70, 64, 4096, 128, 2, ParallelPlan(fsdp=64), str(row["ac"])))
    assert published.fits
    assert r.step_time_s[rank - 1] == pytest.approx(published.step_time_s, rel=1e-6)
    # ... and the planner's choice is predicted no slower than it
    assert best.step_time_s <= published.step_time_s * (1 + 1e-9)
    assert r.top == sorted(r.top, key=lambda p: p.step_time_s)


def test_torchtitan_405b_128_h100_2d(titan405):
    r = titan405
    best = r.top[0]
    assert best.fits
    rank = r.rank_of(dp=1, fsdp=16, tp=8, sp=1, pp=1, cp=1, micro_batch=2, ac="full")
    assert rank is not None
    published = predict(_w(L405, 128, 8192, 32, 2, ParallelPlan(fsdp=16, tp=8, sequence_parallel=True), "full"))
    assert published.fits
    assert best.step_time_s <= published.step_time_s * (1 + 1e-9)


@pytest.mark.parametrize(("gbs", "mbs"), [(256, 2), (128, 1)])
def test_torchtitan_405b_1d_fsdp_does_not_fit(gbs, mbs):
    """1-D FSDP (fsdp=128) ran out of memory on 128 H100 (seed 002), whatever the checkpointing."""
    for ac in ("none", "selective", "full"):
        p = predict(_w(L405, 128, 8192, gbs, mbs, ParallelPlan(fsdp=128), ac))
        assert not p.fits and p.memory_over_GiB > 0
    r = search(L405, H100, SearchSpace((128,), 8, 8192, (gbs,)), top_k=1, rerank=2)
    assert r.rank_of(dp=1, fsdp=128, tp=1, pp=1, cp=1) is None  # rejected as not fitting
    assert r.rejected["oom"] > 0
    assert r.top and r.top[0].workload.plan.tp * r.top[0].workload.plan.pp > 1


def test_counts_add_up(titan405):
    r = titan405
    assert r.considered == r.feasible + sum(r.rejected.values())
    assert r.rejected["oom"] > 0 and r.rejected["tp_cross_node"] > 0


def test_rerank_matches_vectorised_ranking(titan405):
    for p in titan405.top:
        assert p.step_time_s == pytest.approx(p.vector_step_time_s, rel=1e-6)


def test_why_the_best_beats_the_runner_up(titan405):
    from trainperf.plan.explain import why_best

    text = why_best(titan405)
    a, b = titan405.top[0], titan405.top[1]
    assert a.label in text and b.label in text
    assert f"{a.step_time_s:.3f} s vs {b.step_time_s:.3f} s" in text
    assert "Memory per device" in text


def test_objectives_rank_differently_across_device_counts():
    space = SearchSpace((8, 16, 32), 8, 4096, (64,))
    m = get_model("llama3-8b")
    fast = search(m, H100, space, Objective("throughput"), rerank=50)
    cheap = search(m, H100, space, Objective("cost", train_tokens=1e12, usd_per_device_hour=2.0), rerank=50)
    soon = search(m, H100, space, Objective("time", train_tokens=1e12), rerank=50)
    assert fast.top[0].tokens_per_s >= max(p.tokens_per_s for p in cheap.top)
    def usd(p):
        return 1e12 / p.tokens_per_s / 3600 * p.workload.num_devices * 2.0

    assert cheap.top[0].cost_usd == pytest.approx(usd(cheap.top[0]))
    assert cheap.top[0].cost_usd <= min(usd(p) for p in soon.top + fast.top) * (1 + 1e-9)
    assert soon.top[0].workload.num_devices == fast.top[0].workload.num_devices
    assert soon.top[0].days_to_train == pytest.approx(1e12 / soon.top[0].tokens_per_s / 86400)
    # per-device efficiency falls with scale here, so the cheapest plan uses fewer devices
    assert cheap.top[0].workload.num_devices < fast.top[0].workload.num_devices


def test_objective_needs_its_inputs():
    from trainperf.errors import SpecError

    with pytest.raises(SpecError, match="train_tokens"):
        Objective("time")
    with pytest.raises(SpecError, match="usd_per_device_hour"):
        Objective("cost", train_tokens=1e12)


def test_inverse_smallest_device_count():
    m = get_model("llama3-8b")
    space = SearchSpace((8,), 8, 4096, (512,))
    tokens, days = 2e11, 10.0
    inv = smallest_device_count(m, H100, space, target_days=days, train_tokens=tokens, top_k=3)
    need = tokens / (days * 86400)
    n = inv.num_devices
    assert n is not None and n % 8 == 0
    assert inv.tried[n] >= need and inv.result.top[0].days_to_train <= days * (1 + 1e-9)
    # the bracket below the answer was checked and is too slow
    below = [k for k in inv.tried if k < n]
    assert below and all(inv.tried[k] < need for k in below if k >= n // 2)
    assert n - 8 in inv.tried or n == 8 or n // 2 in inv.tried
