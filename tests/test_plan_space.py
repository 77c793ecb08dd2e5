"""Candidate enumeration: every candidate is an executable Workload, counts add up, options
appear only where they apply, and rejection reasons are the right ones."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainperf.plan.search import workload_of
from trainperf.plan.space import REASONS, SearchSpace, divisors, enumerate_candidates
from trainperf.specs.hardware import get_hardware
from trainperf.specs.presets import get_model

H100 = get_hardware("h100-sxm")


def test_divisors():
    assert divisors(1) == [1]
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(16384) == [2**i for i in range(15)]


def test_mesh_multiplies_to_devices_and_respects_the_model():
    m = get_model("llama3.1-405b")  # 128 heads, 8 kv heads, 126 layers
    c = enumerate_candidates(m, H100, SearchSpace((128, 256), 8, 8192, (64,)))
    prod = c["dp"] * c["fsdp"] * c["tp"] * c["pp"] * c["cp"]
    assert np.array_equal(prod, c["num_devices"])
    assert (c["tp"] <= 8).all() and (m.heads % c["tp"] == 0).all()
    assert (c["pp"] <= m.layers).all()
    local = c["global_batch"] // (c["dp"] * c["fsdp"])
    assert (c["global_batch"] % (c["dp"] * c["fsdp"]) == 0).all() and (local % c["micro_batch"] == 0).all()
    inter = (c["vpp"] > 1) | (c["slots"] > 0)
    # Megatron's embedding and loss slots, or a first or last stage lighter by d layers (the
    # others hold (layers + d) / pp): either way the other ranks hold whole chunks
    slots = (c["slots"] & 1) + ((c["slots"] >> 1) & 1) + ((c["slots"] >> 2) & 63) + (c["slots"] >> 8)
    assert ((m.layers + slots[inter]) % (c["pp"][inter] * c["vpp"][inter]) == 0).all()
    assert (c["slots"][inter] > 0).any()  # 126 + 2 = 128 chunks: the NVIDIA 405B layouts
    # options only where they apply
    assert (c["sp"][c["tp"] == 1] == 0).all() and (c["sp"][c["tp"] > 1] == 1).any()
    assert (c["zero"][c["dp"] == 1] == 0).all() and (c["zero"][c["dp"] > 1] == 2).any()
    assert (c["vpp"][c["pp"] == 1] == 1).all()
    assert (c["ep"] == 1).all()


def test_counts_add_up_and_reasons_are_named():
    m = get_model("llama2-70b")
    c = enumerate_candidates(m, H100, SearchSpace((64,), 8, 4096, (128,)))
    assert c.considered == len(c) + sum(c.rejected.values())
    assert set(c.rejected) <= set(REASONS)
    assert c.rejected["tp_cross_node"] > 0 and c.rejected["mbs_local"] > 0


def test_counts_match_a_brute_force_enumeration():
    """considered / valid / per-reason counts equal plain nested loops over every option
    (the generic stack's whole space, Megatron's embedding/loss slots, DualPipe and DualPipeV
    included)."""
    import itertools
    from collections import Counter

    m = get_model("debug")  # 4 layers, 8 heads, 4 kv heads
    n, dpn, seq, gbs_opts, max_mbs, max_vpp = 16, 4, 256, (8, 32), 4, 4
    c = enumerate_candidates(m, H100, SearchSpace((n,), dpn, seq, gbs_opts, max_micro_batch=max_mbs,
                                                  max_vpp=max_vpp, require_stack=False))
    considered, valid, reasons = 0, 0, Counter()
    ds = divisors(n)
    for tp, pp, cp, fsdp in itertools.product(ds, ds, ds, ds):
        if n % (tp * pp * cp * fsdp):
            continue
        dp = n // (tp * pp * cp * fsdp)
        vmax = min(max_vpp, max(1, (m.layers + 2) // pp)) if pp > 1 else 1
        for gbs, mbs in itertools.product(gbs_opts, range(1, max_mbs + 1)):
            # the stack's own schedules by (vpp, slots), then DualPipe (even pp) and DualPipeV (2 pp <= layers)
            options = [(vpp, slots, 0) for vpp, slots in itertools.product(range(1, vmax + 1),
                                                                            range(4) if pp > 1 else (0,))]
            options += [(1, 0, 1)] if pp > 1 and pp % 2 == 0 else []
            options += [(2, 0, 2)] if pp > 1 and 2 * pp <= m.layers else []
            for vpp, slots, sched in options:
                e, lo = slots & 1, slots >> 1
                per_rank = (m.layers + e + lo) // pp
                pair_ok = sched > 0 or (vpp == 1 and slots == 0) or (
                    (m.layers + e + lo) % (pp * vpp) == 0 and per_rank - e >= 1 and per_rank - lo >= 1)
                k = (2 if tp > 1 else 1) * (3 if dp > 1 else 1) * 3  # sp x zero x checkpointing
                considered += k
                accum = gbs // (dp * fsdp * mbs) if gbs % (dp * fsdp * mbs) == 0 else 0
                why = ("tp_cross_node" if tp > dpn else "tp_heads" if m.heads % tp else
                       "tp_kv_heads" if m.kv_heads % tp and tp % m.kv_heads else
                       "tp_ffn" if m.ffn_hidden % tp else "pp_layers" if pp > m.layers else
                       "cp_seq" if seq % cp else "batch_dp" if gbs % (dp * fsdp) else
                       "mbs_local" if (gbs // (dp * fsdp)) % mbs else
                       "vpp_layers" if not pair_ok else
                       "vpp_microbatches" if sched == 0 and vpp > 1 and accum % pp else
                       "dualpipe_microbatches" if sched and accum < 2 * pp else None)
                if why:
                    reasons[why] += k
                else:
                    valid += k
    assert len(c) == valid
    assert c.considered == considered
    assert dict(c.rejected) == dict(reasons)


def test_without_a_stack_every_plan_is_one_some_stack_runs():
    from trainperf.plan.search import workload_of
    from trainperf.predict.stack_capabilities import stacks_for

    m = get_model("llama2-70b")
    space = SearchSpace((64,), 8, 4096, (128,), max_micro_batch=2)
    c = enumerate_candidates(m, H100, space)
    wide = enumerate_candidates(m, H100, dataclasses.replace(space, require_stack=False))
    assert 0 < len(c) < len(wide) and c.rejected["no_stack"] == len(wide) - len(c)
    for i in np.random.default_rng(0).choice(len(c), 40, replace=False):
        assert stacks_for(workload_of(m, H100, space, c, int(i)))


@pytest.mark.parametrize("stack", ["megatron-core", "llm-foundry", "torchtitan", "maxtext", "deepspeed"])
def test_a_named_stack_bounds_the_space(stack):
    from trainperf.plan.search import workload_of
    from trainperf.predict.stack_capabilities import capabilities_of, plan_refusal

    m = get_model("mixtral-8x7b")
    space = SearchSpace((64,), 8, 4096, (256,), max_micro_batch=2, stack=stack,
                        checkpointing=("none", "selective", "full"))
    c = enumerate_candidates(m, H100, space)
    caps = capabilities_of(stack)
    assert len(c)
    for i in np.random.default_rng(1).choice(len(c), min(60, len(c)), replace=False):
        w = workload_of(m, H100, space, c, int(i))
        assert plan_refusal(caps, w) is None, w.describe()
    if stack == "llm-foundry":  # FSDP (and its replicas), and MegaBlocks' expert parallelism
        assert (c["tp"] == 1).all() and (c["pp"] == 1).all() and (c["cp"] == 1).all() and (c["ep"] > 1).any()
        assert (c["fsdp"] > 1).any() and (c["zero"] == 0).all()
    if stack == "megatron-core":  # no FSDP; the distributed optimizer is ZeRO-1
        assert (c["fsdp"] == 1).all() and set(np.unique(c["zero"]).tolist()) <= {0, 1}


def test_megatron_slots_hold_nvidias_405b_layouts():
    """126 layers + embedding + loss = 128 slots: pp 8 x vpp 8 (2 per chunk) and pp 16 x vpp 8."""
    m = get_model("llama3.1-405b")
    for n, pp in ((512, 8), (2048, 16)):
        c = enumerate_candidates(m, H100, SearchSpace((n,), 8, 8192, (n // 2,), stack="megatron-core",
                                                      fixed=(("tp", 8), ("pp", pp), ("vpp", 8), ("slots", 3))))
        assert len(c) and (c["slots"] == 3).all()


def test_fixed_degrees():
    m = get_model("llama2-70b")
    free = enumerate_candidates(m, H100, SearchSpace((64,), 8, 4096, (128,)))
    c = enumerate_candidates(m, H100, SearchSpace((64,), 8, 4096, (128,), fixed=(("tp", 8), ("micro_batch", 1))))
    assert len(c) and (c["tp"] == 8).all() and (c["micro_batch"] == 1).all()
    assert c.considered == free.considered
    assert len(c) == int(((free["tp"] == 8) & (free["micro_batch"] == 1)).sum())
    # the fix is applied first: every other reason counts plans that have the fixed values
    assert "tp_cross_node" not in c.rejected and "mbs_local" not in c.rejected
    assert c.rejected["fixed"] > c.considered // 2


def test_cross_node_tp_flag():
    m = get_model("llama2-70b")
    a = enumerate_candidates(m, H100, SearchSpace((64,), 8, 4096, (128,)))
    b = enumerate_candidates(m, H100, SearchSpace((64,), 8, 4096, (128,), allow_cross_node_tp=True))
    assert a["tp"].max() == 8 and b["tp"].max() == 64
    assert a.considered == b.considered and "tp_cross_node" not in b.rejected


def test_moe_expert_parallel_options():
    m = get_model("mixtral-8x7b")  # 8 experts
    c = enumerate_candidates(m, H100, SearchSpace((64,), 8, 4096, (256,), max_micro_batch=2))
    assert set(np.unique(c["ep"]).tolist()) == {1, 2, 4, 8}
    # experts split like the dense layers (etp = tp) fold over dp x fsdp x cp; unsplit ones
    # (etp = 1, Megatron-Core's MoE folding) over tp as well
    split = c["etp"] == c["tp"]
    assert ((c["dp"] * c["fsdp"] * c["cp"])[split] % c["ep"][split] == 0).all()
    assert (c["etp"][~split] == 1).all() and (c["tp"][~split] > 1).all()
    assert ((c["dp"] * c["fsdp"] * c["cp"] * c["tp"])[~split] % c["ep"][~split] == 0).all()
    assert ((c["dp"] * c["fsdp"] * c["cp"])[~split] % c["ep"][~split] != 0).any()  # only etp = 1 reaches


def test_tp_beyond_kv_heads_is_allowed_as_replication():
    m = get_model("llama2-70b").replace(kv_heads=4)
    c = enumerate_candidates(m, H100, SearchSpace((8,), 8, 4096, (8,)))
    assert 8 in c["tp"].tolist()


@settings(max_examples=15, deadline=None)
@given(nodes=st.sampled_from([1, 2, 3, 4, 6, 8]), gbs_mult=st.integers(1, 8),
       name=st.sampled_from(["llama2-70b", "mixtral-8x7b", "llama3-8b", "deepseek-v3"]),
       seq=st.sampled_from([2048, 4096]), seed=st.integers(0, 2**16))
def test_every_candidate_is_an_executable_workload(nodes, gbs_mult, name, seq, seed):
    m = get_model(name)
    n = 8 * nodes
    space = SearchSpace((n,), 8, seq, (n * gbs_mult,), max_micro_batch=4, max_vpp=4)
    c = enumerate_candidates(m, H100, space)
    assert c.considered == len(c) + sum(c.rejected.values())
    if not len(c):
        return
    rng = np.random.default_rng(seed)
    for i in rng.choice(len(c), min(8, len(c)), replace=False):
        w = workload_of(m, H100, space, c, int(i))  # raises if the plan cannot be executed
        assert w.num_devices == n


def test_search_space_validation():
    from trainperf.errors import SpecError

    with pytest.raises(SpecError, match="num_devices"):
        SearchSpace((0,), 8, 4096, (8,))
    with pytest.raises(SpecError, match="global_batch"):
        SearchSpace((8,), 8, 4096, ())
    with pytest.raises(SpecError, match="activation_checkpointing"):
        SearchSpace((8,), 8, 4096, (8,), checkpointing=("partial",))


def test_a_lighter_last_stage_makes_room_for_a_large_vocabulary():
    """Llama-3-8B (32 layers, 128K vocabulary: an LM head worth ~2.4 layers) on pp 4: the last
    stage may hold d = 4 layers fewer (9, 9, 9, 5: Megatron's num_layers_in_last_pipeline_stage),
    the model says that beats the even 8/8/8/8 split, and the plan carries the split; stacks that
    cannot set stage sizes never get it."""
    from trainperf.plan.search import search
    from trainperf.plan.space import SLOT_LIGHTER_SHIFT, head_layers_bound, lighter_last_options

    m = get_model("llama3-8b")
    assert head_layers_bound(m) == 5
    assert lighter_last_options(32, 4, 1, 5) == [4] and lighter_last_options(32, 4, 2, 5) == []  # 9 per rank
    assert lighter_last_options(126, 16, 8, 2) == []  # 126 + d over 16 ranks of 8-layer multiples
    space = SearchSpace((32,), 8, 8192, (256,), stack="megatron-core", fixed=(("tp", 2), ("pp", 4)))
    res = search(m, H100, space)
    w = workload_of(m, H100, space, res.ranked, 0)
    assert w.plan.last_stage_layers == 5 and w.plan.stage_layers(32) == (9, 9, 5)
    even = search(m, H100, dataclasses.replace(space, uneven_stages=False))
    assert res.step_time_s[0] < even.step_time_s[0]
    for stack in ("torchtitan", "deepspeed", "megatron-lm-2021"):
        c = enumerate_candidates(m, H100, dataclasses.replace(space, stack=stack, fixed=(("pp", 4),)))
        assert not (c["slots"] >> SLOT_LIGHTER_SHIFT).any(), stack


def test_a_lighter_first_stage_relieves_the_rank_holding_the_most_micro_batches():
    """Under plain 1F1B rank 0 holds pp micro-batches and rank 1 pp - 1: Llama-3-70B (80 layers)
    on tp 8 x pp 4 can put 17 layers on the first stage and 21 on the others (Megatron's
    num_layers_in_first_pipeline_stage), which the model says needs less memory than 20 each;
    the shift is bounded by where rank 1 becomes the peak (ceil(20 / 4) = 5 layers), offered
    only without interleaving and only by stacks that can set stage sizes."""
    from trainperf.plan.search import search
    from trainperf.plan.space import SLOT_FIRST_SHIFT, first_layers_bound

    assert first_layers_bound(80, 4) == 5 and first_layers_bound(80, 2) == 14 and first_layers_bound(126, 16) == 1
    m = get_model("llama3-70b")
    space = SearchSpace((32,), 8, 8192, (128,), stack="megatron-core", fixed=(("tp", 8), ("pp", 4)),
                        checkpointing=("none",), max_micro_batch=1)
    c = enumerate_candidates(m, H100, space)
    first = c["slots"] >> SLOT_FIRST_SHIFT
    assert set(first[first > 0].tolist()) == {4} and (c["vpp"][first > 0] == 1).all()
    res = search(m, H100, space)
    plans = [workload_of(m, H100, space, res.ranked, i) for i in range(len(res.ranked))]
    lighter = next(w for w in plans if w.plan.first_stage_layers is not None)
    even = next(w for w in plans if w.plan.first_stage_layers is None and w.plan.last_stage_layers is None
                and w.plan.vpp == 1 and not w.plan.account_for_embedding_in_pipeline_split
                and not w.plan.account_for_loss_in_pipeline_split)
    assert lighter.plan.stage_layers(80) == (17, 21, 21)
    from trainperf.predict import predict

    assert predict(lighter).memory_per_device_GiB < predict(even).memory_per_device_GiB
    assert predict(lighter).step_time_s > predict(even).step_time_s  # the other ranks carry more
    c2 = enumerate_candidates(m, H100, dataclasses.replace(space, stack="torchtitan"))
    assert not (c2["slots"] >> SLOT_FIRST_SHIFT).any()


def test_each_pipeline_split_is_listed_once():
    """A last (first) stage one layer lighter is the split Megatron's loss (embedding) slot gives;
    the planner lists it once, as the slot, where the stack has slots, and as the lighter stage
    where it has only uneven stages."""
    import numpy as np

    from trainperf.plan.space import SLOT_EMBEDDING, SLOT_LOSS, slot_stages, vpp_slot_pairs
    from trainperf.specs.parallel import stage_layer_split

    all_slots = (0, SLOT_EMBEDDING, SLOT_LOSS, SLOT_EMBEDDING | SLOT_LOSS)
    for layers, pp in ((61, 2), (61, 31), (95, 4), (126, 16), (80, 3)):
        pairs = vpp_slot_pairs(layers, pp, 8, all_slots, lighter_last=20, lighter_first=20)
        pp_col = np.full(len(pairs), pp)
        splits = np.stack([pairs[:, 0], *stage_layer_split(float(layers), pp_col.astype(float),
                                                           *slot_stages(layers, pp_col, pairs[:, 1]))], axis=1)
        assert len(np.unique(splits, axis=0)) == len(splits), (layers, pp)
    # a last stage 1 lighter: the loss slot's split where the stack has slots, kept where it has none
    from trainperf.plan.space import SLOT_LIGHTER_SHIFT

    one_lighter = (1, 1 << SLOT_LIGHTER_SHIFT)
    assert one_lighter in map(tuple, vpp_slot_pairs(61, 2, 1, (0,), lighter_last=4).tolist())
    assert one_lighter not in map(tuple, vpp_slot_pairs(61, 2, 1, all_slots, lighter_last=4).tolist())
    assert (1, SLOT_LOSS) in map(tuple, vpp_slot_pairs(61, 2, 1, all_slots, lighter_last=4).tolist())
