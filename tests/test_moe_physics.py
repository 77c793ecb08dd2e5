"""MoE physics: token dispatch/combine by kernel family and link level, grouped GEMMs by tokens per
expert, router and permutation bytes, load imbalance, MTP modules and MLA widths.

Every expected value is derived by hand from the formulas the docstrings state and from the
measurements of ``tools/kernel_fitting/data/moe.csv`` (their sources in the CSV).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from trainperf.errors import SpecError, TrainperfError
from trainperf.predict import predict
from trainperf.predict.kernels import expert_dispatch as ed
from trainperf.predict.step_model import layout_of, step_costs
from trainperf.predict.step_model.collectives import fabric_of
from trainperf.predict.step_model.compute import (
    MOE_HOST_SYNC_LAUNCHES,
    ROUTER_BYTES_PER_SCORE,
    expert_rows,
    moe_launches,
    router_bytes,
)
from trainperf.predict.step_model.expert_parallel import call_s
from trainperf.predict.step_model.layout import REPLICA
from trainperf.predict.step_model.stage import busiest_stage
from trainperf.specs.model import ModelSpec
from trainperf.specs.workload_file import workload_from_dict, workload_to_dict


def _w(model: str = "mixtral-8x7b", device: str = "h100-sxm", n: int = 16, parallel: dict | None = None,
       **training) -> object:
    return workload_from_dict({
        "model": {"preset": model} if isinstance(model, str) else model,
        "hardware": {"device": device, "num_devices": n},
        "parallel": parallel or {"dp": n, "ep": 8},
        "training": {"seq_len": 4096, "global_batch": n, "micro_batch": 1, "precision": "bf16",
                     "stack": "megatron-core", **training}})


# ------------------------------------------------------------------------------ kernel class
def test_distinct_destinations():
    assert ed.distinct(8, 8) == pytest.approx(8 * (1 - (7 / 8) ** 8))  # 5.2509
    assert ed.distinct(2, 8) == pytest.approx(2 * (1 - 0.5 ** 8))
    assert ed.distinct(64, 1) == pytest.approx(1.0)


def test_copies_per_token_nccl_and_deduplicating():
    # NCCL: topk copies, (k-1)/n of them to the own domain's other ranks, (N-1)/N across domains
    assert ed.copies_per_token(False, 16, 8, 2, 8) == pytest.approx((8, 8 * 7 / 16, 8 / 2))
    held, local, cross = ed.copies_per_token(True, 16, 8, 2, 8)
    d16 = 16 * (1 - (15 / 16) ** 8)
    assert (held, local) == pytest.approx((d16, d16 * 7 / 16))
    assert cross == pytest.approx(2 * (1 - 0.5 ** 8) / 2)  # one per remote node: ~1, not 4


def test_measured_efficiencies_are_the_curated_rows():
    # DeepEP V1 on H800 within a node: 153 GB/s of received NVLink bytes (the rank's own 1/8
    # included) over the catalog's 200 GB/s per direction
    assert ed.efficiency("hopper", "deepep", "dispatch", "scale-up", 8) == pytest.approx(153 * 7 / 8 / 200, rel=1e-3)
    # across nodes, RDMA bytes over the 50 GB/s CX7: 43 (EP16), 58 (EP32), 51 (EP64) GB/s after PR #130
    assert ed.efficiency("hopper", "deepep", "dispatch", "scale-out", 16) == pytest.approx(43 / 50, rel=1e-3)
    assert ed.efficiency("hopper", "deepep", "dispatch", "scale-out", 32) == pytest.approx(58 / 50, rel=1e-3)
    # between measured groups: linear in log2(ranks); beyond them: flat
    t = math.log2(24) - 4.0
    assert ed.efficiency("hopper", "deepep", "dispatch", "scale-out", 24) == pytest.approx(
        43 / 50 + t * (58 / 50 - 43 / 50), rel=1e-3)
    assert ed.efficiency("hopper", "deepep", "dispatch", "scale-out", 256) == pytest.approx(51 / 50, rel=1e-3)
    # NCCL all-to-all busbw within an NVL72 domain at 8 ranks: GB200 (657.81, 662.27), GB300 (679.65,
    # 685.06), B300 (675.55) GB/s over 900
    mean8 = sum(x / 900 for x in (657.81, 662.27, 679.65, 685.06, 675.55)) / 5
    assert ed.efficiency("blackwell", "nccl", "dispatch", "scale-up", 8) == pytest.approx(mean8, rel=1e-3)
    # NCCL across GB200 racks: 2 racks of 64, algbw 89.33 / 90.4 GB/s, half of it through the 50 GB/s NIC
    assert ed.efficiency("blackwell", "nccl", "combine", "scale-out", 128) == pytest.approx(
        (89.33 + 90.4) / 2 / 2 / 50, rel=1e-3)


def test_an_xgmi_group_smaller_than_measured_uses_fewer_links():
    full = ed.efficiency("cdna3", "mori", "dispatch", "scale-up", 8)
    assert ed.efficiency("cdna3", "mori", "dispatch", "scale-up", 4) == pytest.approx(full * 3 / 7)


def test_fallbacks_are_flagged_and_say_whose_value_they_take():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the developer tools
    from tools.kernels_table import describe

    facts = {f.quantity: f for f in describe("hopper") if f.kernel_class == "expert_dispatch"}
    assert facts["dispatch[deepep scale-up ranks=8]"].measured
    hybrid = facts["dispatch[hybrid-ep scale-up ranks=8]"]
    assert not hybrid.measured and "deepep" in hybrid.source and hybrid.value == facts[
        "dispatch[deepep scale-up ranks=8]"].value
    nccl = facts["dispatch[nccl scale-up ranks=8]"]  # no NCCL all-to-all on hopper in moe.csv: the collectives'
    assert not nccl.measured and "all-to-all" in nccl.source
    # DeepEP needs Hopper or later: on ampere its entries are the NCCL all-to-all
    amp = ed.dispatch_model("ampere", "deepep")
    assert amp.up.dispatch == ed.dispatch_model("ampere", "nccl").up.dispatch
    with pytest.raises(TrainperfError, match="MoE dispatcher"):
        ed.dispatch_model("hopper", "nvshmem")


def test_the_dense_gemm_law_matches_deepgemm_grouped_rows_at_few_tokens_per_expert():
    """Grouped GEMMs are priced at the dense law at their rows per expert, so efficiency falls as
    tokens per expert fall. DeepGEMM's fp8 grouped GEMMs on H800 (deepseek-ai/DeepGEMM@55ab91f
    README; shared gemm.csv lines 73 and 79, not fitted: one stack's custom kernels) run 1346 TFLOP/s
    at 4096 rows per group and 932 at 256 (N=4096, K=7168): 0.692; the hopper law gives s(256)/s(4096)."""
    from trainperf.predict.kernels import gemm

    h = gemm.half_dim("hopper", "fp8")
    law = (256 / (256 + h)) / (4096 / (4096 + h))
    assert law == pytest.approx(932 / 1346, rel=0.05)


# --------------------------------------------------------------------------- dispatch / combine
def test_one_call_within_a_node_by_hand():
    """Mixtral 8x7B, ep 8 within one H100 node, NCCL: 4096 tokens x 2 copies x 4096 x 2 bytes; 7/8
    of them cross NVLink at the all-to-all efficiency, under the size law of the node's buffer."""
    w = _w()
    lay = layout_of(w)
    fab = fabric_of(lay, 1.0)
    g = fab.group(8.0, 1.0)
    t, b = call_s(lay, fab, g, "dispatch", 4096.0)
    up = ed.dispatch_model("hopper", "nccl").up
    size = 4096 * 2 * 4096 * 2.0
    want = size * 7 / 8 * (size + up.half_bytes) / (size * up.dispatch[0] * 450e9)
    assert t == pytest.approx(max(want, up.latency_us * 1e-6), rel=1e-12)
    assert b == pytest.approx(size * 7 / 8)


def test_deepep_sends_a_token_once_per_remote_node():
    """Across nodes DeepEP's NIC bytes are one copy per distinct remote node, NCCL's topk (N-1)/N."""
    w_n = _w("deepseek-v3", n=128, parallel={"dp": 128, "ep": 64}, seq_len=4096)
    w_d = workload_from_dict({**workload_to_dict(w_n), "training": {**workload_to_dict(w_n)["training"],
                                                                      "moe_dispatcher": "deepep"}})
    cn, cd = step_costs(layout_of(w_n), _knobs(w_n)), step_costs(layout_of(w_d), _knobs(w_d))
    n, k, nodes, topk = 64.0, 8.0, 8.0, 8.0
    nccl = topk * (k - 1) / n + topk * (nodes - 1) / nodes
    _, loc, cross = ed.copies_per_token(True, n, k, nodes, topk)
    assert cd.ep.dispatch.comm.bytes_per_device / cn.ep.dispatch.comm.bytes_per_device == pytest.approx(
        (loc + cross) / nccl, rel=1e-9)
    assert cd.ep.exposed_s < cn.ep.exposed_s


def _knobs(w):
    from trainperf.predict.step import resolve_knobs

    return resolve_knobs(w).numbers()


def test_imbalance_scales_the_busiest_ranks_experts_and_traffic():
    w1 = _w(n=64, parallel={"dp": 64, "ep": 8}, seq_len=8192)
    w2 = workload_from_dict({**workload_to_dict(w1), "training": {**workload_to_dict(w1)["training"],
                                                                    "moe_imbalance": 1.5}})
    l1, l2 = layout_of(w1), layout_of(w2)
    assert expert_rows(l2, busiest_stage(l2)) == pytest.approx(1.5 * expert_rows(l1, busiest_stage(l1)))
    c1, c2 = step_costs(l1, _knobs(w1)), step_costs(l2, _knobs(w2))
    assert c2.ep.dispatch.comm.bytes_per_device == pytest.approx(1.5 * c1.ep.dispatch.comm.bytes_per_device)
    assert c2.grouped_gemm_s > 1.4 * c1.grouped_gemm_s  # 1.5x the rows at a slightly better shape factor
    assert c2.step_time_s > c1.step_time_s
    with pytest.raises(SpecError, match="moe_imbalance"):
        _w(moe_imbalance=0.9)


# -------------------------------------------------------------------------- compute of a block
def test_router_bytes_and_launches_by_hand():
    assert router_bytes(4096.0, 256.0) == 4096 * 256 * ROUTER_BYTES_PER_SCORE
    # Qwen3-30B-A3B (128 experts, ep 8: 16 local), Megatron-Core's TE GroupedLinear: one GEMM per local
    # expert for fc1 and fc2 and an activation; no shared expert; less the dense MLP's 3 GEMMs and act
    lay = layout_of(_w("qwen3-30b-a3b"))
    extra, sync = moe_launches(lay, busiest_stage(lay))
    assert extra == pytest.approx((2 * 16 + 1) - (3 + 1))
    assert sync == MOE_HOST_SYNC_LAUNCHES  # the alltoall dispatcher reads its counts on the host
    # torchtitan: torch._grouped_mm, one kernel per weight matrix; a compiled JAX stack does not sync
    lay_t = layout_of(_w("qwen3-30b-a3b", stack="torchtitan"))
    assert moe_launches(lay_t, busiest_stage(lay_t))[0] == pytest.approx(3 + 1 - 4)
    lay_m = layout_of(_w(stack="maxtext"))
    assert moe_launches(lay_m, busiest_stage(lay_m))[1] == 0.0


def test_the_breakdown_names_dispatch_combine_grouped_gemms_and_routing(capsys):
    from trainperf.cli.main import main

    w = _w("deepseek-v3", n=256, parallel={"pp": 4, "ep": 64, "dp": 64}, seq_len=4096)
    p = predict(w)
    assert p.breakdown["ep dispatch"] > 0 and p.breakdown["ep combine"] > 0
    assert p.compute_breakdown["grouped GEMMs (routed experts)"] > 0
    assert p.compute_breakdown["router + permute/unpermute"] > 0
    assert {c.name for c in p.collectives} >= {"ep dispatch", "ep combine"}
    assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s, rel=1e-9)
    # a plan that fits (one that does not is shown its memory, not a breakdown)
    rc = main(["predict", "--model", "deepseek-v3", "--device", "h100-sxm", "--num-devices", "1024", "--tp", "2",
               "--sequence-parallel", "--pp", "16", "--ep", "64", "--etp", "1", "--seq-len", "4096",
               "--global-batch", "8192", "--precision", "fp8", "--activation-checkpointing", "full",
               "--stack", "megatron-core", "--moe-dispatcher", "deepep"])
    out = capsys.readouterr().out
    assert rc == 0
    for words in ("ep dispatch", "ep combine", "grouped GEMMs (routed experts)", "router + permute/unpermute",
                  "DeepEP"):
        assert words in out


def test_a_dispatcher_the_stack_does_not_run_is_refused():
    with pytest.raises(SpecError, match="torchtitan runs: nccl"):
        predict(_w(stack="torchtitan", moe_dispatcher="deepep"))
    with pytest.raises(SpecError, match="moe_dispatcher"):
        _w(moe_dispatcher="nvshmem")
    from trainperf.predict.stack_capabilities import capabilities_of

    caps = capabilities_of("megatron-core")
    assert "deepep" in caps.moe_dispatchers and "deepep" not in caps.as_of("NeMo 24.09").moe_dispatchers


# ------------------------------------------------------------------------------------ MTP, MLA
def test_mtp_parameters_by_hand_and_against_the_paper():
    v3 = ModelSpec.preset("deepseek-v3")
    mtp = v3.replace(mtp_layers=1)
    h = 7168
    attn = (h * 1536 + 1536 * 128 * 192 + h * 576 + 512 * 128 * 256 + 128 * 128 * h) + 512 + 1536
    moe = h * 256 + 256 + (256 + 1) * 3 * h * 2048
    block = attn + 2 * h + moe + 2 * h * h + 3 * h
    assert mtp.total_params - v3.total_params == block
    # DeepSeek-AI 2024 (arXiv:2412.19437): the MTP module has 14B parameters with its copies of the
    # embedding and head (the checkpoint stores them; training shares them)
    assert (block + 2 * 129280 * h) / 14e9 == pytest.approx(1.0, abs=0.05)
    assert mtp.buffer_params - v3.buffer_params == 256  # its router's correction bias


def test_mtp_flops_are_one_more_block_projection_and_head():
    from trainperf.accounting.flops import forward_flops

    v3 = ModelSpec.preset("deepseek-v3")
    s, h = 4096, 7168
    f0, f1 = forward_flops(v3, s), forward_flops(v3.replace(mtp_layers=1), s)
    per_moe_layer = (f0.ops["attn_qkv"] + f0.ops["attn_out"]) / v3.layers + (
        f0.ops["moe_router"] + f0.ops["moe_experts"]) / v3.moe_layers
    core = (f0.ops["attn_scores"] + f0.ops["attn_values"]) / v3.layers
    assert f1.ops["mtp"] == pytest.approx(per_moe_layer + core + s * 2 * 2 * h * h + s * 2 * h * 129280, rel=1e-12)
    assert f1.matmul - f0.matmul == pytest.approx(f1.ops["mtp"])


def test_mtp_runs_on_the_last_stage():
    base = _w("deepseek-v3", n=256, parallel={"pp": 4, "ep": 64, "dp": 64}, seq_len=4096)
    d = workload_to_dict(base)
    d["model"] = {**d["model"], "mtp_layers": 1}
    with_mtp = workload_from_dict(d)
    c0, c1 = step_costs(layout_of(base), _knobs(base)), step_costs(layout_of(with_mtp), _knobs(with_mtp))
    assert c1.compute.head_on == 2.0 and c1.compute.layers == c0.compute.layers + 1
    assert c1.step_time_s > c0.step_time_s
    assert c1.memory.logits_bytes == pytest.approx(2 * c0.memory.logits_bytes)


def test_mla_widths_and_replicated_down_projections():
    lay = layout_of(_w("deepseek-v3", n=16, parallel={"tp": 2, "ep": 8}))
    ms = lay.model
    assert ms.kv_dim == 128 * (192 + 128) / 2  # up-projected K (192 a head) and V (128) kept
    assert (ms.rope_q, ms.rope_k) == (128 * 64, 64)
    splits = dict(zip(ms.attn_names, (m.split for m in ms.attn_mats), strict=True))
    assert splits["q_down"] == REPLICA and splits["kv_down"] == REPLICA
    st = busiest_stage(lay)
    assert st.kv_local == pytest.approx(ms.kv_dim / 2) and st.rope_k_local == 64


def test_workload_file_round_trip_of_the_moe_fields():
    w = _w(moe_dispatcher="deepep", moe_imbalance=1.25)
    d = workload_to_dict(w)
    assert d["training"]["moe_dispatcher"] == "deepep" and d["training"]["moe_imbalance"] == 1.25
    assert workload_from_dict(d) == w


def test_moe_rows_are_their_own_group_in_validate():
    from trainperf.predict.validate_runs import validate_runs

    d = validate_runs(loto=False).to_dict()
    moe = d["per_architecture"]["moe"]["in_sample"]
    assert moe["rows"] == 18  # the Grok-1 tables
    assert d["per_architecture"]["dense"]["in_sample"]["rows"] + moe["rows"] == d["rows_predicted"]
