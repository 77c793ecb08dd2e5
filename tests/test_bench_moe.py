"""The bench's mixture-of-experts layer: routing, capacity, grouped GEMMs against a loop, the
auxiliary losses and the step statistics, on hand-derived values; and expert-parallel runs
over 2 processes (gloo) that train exactly what one process trains."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from trainperf.measure.model import build_model, num_params  # noqa: E402
from trainperf.measure.moe import (  # noqa: E402
    MoE,
    MoEOptions,
    MoEStats,
    end_step,
    grouped_mm_runs,
    route,
)
from trainperf.measure.testing import fake_calibration  # noqa: E402
from trainperf.records.jsonl import read_run  # noqa: E402
from trainperf.specs.model import ModelSpec  # noqa: E402
from trainperf.specs.workload_file import load_workload  # noqa: E402

pytestmark = [pytest.mark.torch]

SMALL_MOE = ["--model", "debug-moe", "--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2",
             "--ffn-hidden", "128", "--seq-len", "32", "--threads", "1"]
"""debug-moe shrunk: one dense layer, one MoE layer of 8 experts (top-2) + 1 shared."""


def _spec(**kw) -> ModelSpec:
    base = {"name": "t", "layers": 2, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn_hidden": 64, "vocab": 64,
            "moe_experts": 4, "moe_topk": 2, "moe_expert_ffn": 16, "moe_dense_layers": 1}
    return ModelSpec(**{**base, **kw})


def test_route_sorts_by_expert_and_applies_capacity():
    # 4 tokens, top-1: experts 0, 0, 1, 0 -> sorted (token order kept within an expert): 0, 1, 3 | 2
    idx = torch.tensor([[0], [0], [1], [0]])
    w = torch.tensor([[0.9], [0.8], [0.7], [0.6]])
    d = route(w, idx, experts=2, capacity_factor=None)
    assert d.token.tolist() == [0, 1, 3, 2] and d.counts.tolist() == [3, 1] and int(d.dropped) == 0
    assert d.weight.tolist() == pytest.approx([0.9, 0.8, 0.6, 0.7])
    # capacity ceil(1.0 * 4 * 1 / 2) = 2: expert 0 keeps tokens 0 and 1, drops token 3
    d = route(w, idx, experts=2, capacity_factor=1.0)
    assert d.token.tolist() == [0, 1, 2] and d.counts.tolist() == [2, 1] and d.routed.tolist() == [3, 1]
    assert int(d.dropped) == 1


def test_uniform_router_has_aux_loss_one():
    """E * sum_i f_i P_i with every P_i = 1/E is sum_i f_i = 1, whatever the choice."""
    layer = MoE(_spec(), layer_id=1)
    torch.nn.init.zeros_(layer.router.gate.weight)
    _, idx, aux = layer.router(torch.randn(10, 32))
    assert float(aux.detach()) == pytest.approx(1.0) and idx.shape == (10, 2)


def test_grouped_gemm_matches_the_loop_forward_and_backward():
    assert grouped_mm_runs(torch.device("cpu"), torch.float32)[0]
    torch.manual_seed(0)
    layer = MoE(_spec(moe_shared_experts=1), layer_id=1)
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.1)
    x = torch.randn(3, 7, 32)
    results = []
    for grouped in (True, False):
        layer.zero_grad()
        layer.experts.use_grouped = grouped
        y = layer(x)
        y.square().sum().backward()
        results.append((y.detach(), [p.grad.clone() for p in layer.parameters()]))
    (y1, g1), (y2, g2) = results
    assert torch.allclose(y1, y2, atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(g1, g2, strict=True))


def test_aux_loss_gradient_reaches_the_router_only_when_weighted():
    torch.manual_seed(0)
    layer = MoE(_spec(), layer_id=1)
    x = torch.randn(8, 32)
    grads = []
    for coef in (0.0, 1.0):
        layer.zero_grad()
        layer.options = MoEOptions(aux_loss_coef=coef)
        (layer(x).sum() * 0).backward()  # only the auxiliary loss sends a gradient
        grads.append(layer.router.gate.weight.grad)
    assert grads[0] is None or float(grads[0].abs().max()) == 0.0
    assert float(grads[1].abs().max()) > 0


def test_model_counts_and_layer_placement():
    spec = ModelSpec.preset("debug-moe")
    model = build_model(spec)
    assert num_params(model) == spec.total_params
    assert [b.moe is not None for b in model.layers] == [False, True, True, True]
    biased = _spec(moe_router_bias=True)
    m = build_model(biased)
    buffers = sum(b.numel() for n, b in m.named_buffers() if n.endswith("expert_bias"))
    assert num_params(m) + buffers == biased.total_params and buffers == biased.buffer_params
    maverick = ModelSpec.preset("llama4-maverick")  # interleave_moe_layer_step 2: every second layer
    assert [maverick.layer_is_moe(i) for i in range(4)] == [False, True, False, True]


def test_step_statistics_and_aux_free_bias_update():
    """Loads [6, 2] on one layer: max/mean = 6/4 = 1.5; the bias moves +rate toward the light
    expert and -rate away from the heavy one (DeepSeek's sign rule)."""
    layer = MoE(_spec(moe_experts=2, moe_topk=1, moe_router_bias=True), layer_id=1)
    stats = MoEStats()
    stats.tokens_per_expert[1] = torch.tensor([6, 2])
    stats.dropped[1] = torch.tensor(0)
    stats.aux_loss[1] = torch.tensor(1.25)
    opts = MoEOptions(bias_update_rate=0.1)
    s = end_step([layer], stats, total_layers=2, micro_batches=1, options=opts, device=torch.device("cpu"))
    assert s.imbalance == pytest.approx(1.5) and s.imbalance_max == pytest.approx(1.5)
    assert s.dropped_pct == 0 and s.aux_loss == pytest.approx(1.25) and s.all_to_all_s == 0
    assert layer.router.expert_bias.tolist() == pytest.approx([-0.1, 0.1])
    assert not stats.tokens_per_expert  # reset for the next step
    assert s.rank_imbalance == 1.0  # one expert-parallel rank holds both


def test_rank_imbalance_sums_the_experts_a_rank_holds():
    """Loads [6, 2, 1, 3] over two ranks holding experts {0, 1} and {2, 3}: ranks receive 8 and 4,
    max/mean = 8/6; per expert 6/3 = 2."""
    layer = MoE(_spec(moe_experts=4, moe_topk=1), layer_id=1)
    layer.ep_size = 2
    stats = MoEStats()
    stats.tokens_per_expert[1] = torch.tensor([6, 2, 1, 3])
    s = end_step([layer], stats, total_layers=2, micro_batches=1, options=MoEOptions(), device=torch.device("cpu"))
    assert s.imbalance == pytest.approx(2.0) and s.rank_imbalance == pytest.approx(8 / 6)


def test_options_are_validated():
    with pytest.raises(Exception, match="moe-capacity-factor"):
        MoEOptions(capacity_factor=-1.0)
    assert MoEOptions.for_model(ModelSpec.preset("deepseek-v3")).bias_update_rate == 0.001
    assert MoEOptions.for_model(ModelSpec.preset("debug-moe")).bias_update_rate == 0.0


# ------------------------------------------------------------------------- multi-process runs

@pytest.fixture
def env(tmp_path):
    fake_calibration(tmp_path / "cache")
    e = dict(os.environ, TRAINPERF_CACHE_DIR=str(tmp_path / "cache"), PYTHONUNBUFFERED="1")
    e.pop("WORLD_SIZE", None)
    return e


def _bench(env, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainperf.cli.main", "bench", *argv], env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def _steps(out: Path) -> list:
    return read_run(out / "steps.jsonl").steps


@pytest.mark.slow
def test_expert_parallel_trains_what_one_process_trains(tmp_path, env):
    """fp32, same seed and sequences: one process, --ep 2 (data-parallel replicas) and --ep 2
    --fsdp 2 give the same losses and gradient norms; each rank holds half the experts; the
    steps carry the experts' load and the all-to-all share."""
    flags = [*SMALL_MOE, "--precision", "fp32", "--micro-batch", "2", "--global-batch", "4", "--steps", "3"]
    runs = {"one": [], "ep": ["--nproc", "2", "--ep", "2"], "ep_fsdp": ["--nproc", "2", "--ep", "2", "--fsdp", "2"]}
    for name, extra in runs.items():
        r = _bench(env, *flags, *extra, "--out", str(tmp_path / name))
        assert r.returncode == 0, r.stderr[-3000:]
    one = _steps(tmp_path / "one")
    for name in ("ep", "ep_fsdp"):
        steps = _steps(tmp_path / name)
        assert [s.loss for s in steps] == pytest.approx([s.loss for s in one], rel=1e-5)
        assert [s.grad_norm for s in steps] == pytest.approx([s.grad_norm for s in one], rel=1e-5)
        assert all(s.extra["moe_imbalance"] >= 1.0 and 0 < s.extra["moe_all_to_all_pct"] < 100 for s in steps)
        assert all(s.breakdown["moe_all_to_all"] > 0 for s in steps)
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        assert "EP=2" in summary["parallelism"] and summary["moe"]["experts_gemm"] == "grouped"
        held = summary["moe"]["expert_params_per_rank"]
        spec = ModelSpec.preset("debug-moe").replace(layers=2, hidden=64, heads=4, kv_heads=2, ffn_hidden=128)
        assert held == [spec.moe_layers * spec.moe_experts * spec.expert_params // 2] * 2
    assert "all-to-all" in _bench(env, *flags, "--nproc", "2", "--ep", "2", "--steps", "1",
                                  "--out", str(tmp_path / "line")).stdout


@pytest.mark.slow
def test_expert_parallel_loss_falls_on_real_text(tmp_path, env):
    """Python's standard library as text (bytes far from uniform): the MoE model learns under EP."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in ("argparse.py", "dataclasses.py", "functools.py"):
        shutil.copy(stdlib / name, corpus / name)
    r = _bench(env, *SMALL_MOE, "--nproc", "2", "--ep", "2", "--micro-batch", "8", "--global-batch", "16",
               "--steps", "12", "--lr", "1e-2", "--data", str(corpus), "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr[-3000:]
    losses = [s.loss for s in _steps(tmp_path / "run")]
    assert losses[-1] < losses[0] - 1.0 and all(math.isfinite(x) for x in losses)
    # the run states the load it had, for `predict` on its workload.toml
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    stated = load_workload(tmp_path / "run" / "workload.toml").moe_imbalance
    assert stated == pytest.approx(summary["moe"]["rank_imbalance_median"], abs=1e-4) and 1.0 <= stated <= 2.0


@pytest.mark.slow
def test_expert_parallel_checkpoint_resumes_where_it_stopped(tmp_path, env):
    """Each expert group is saved under its own names (``experts_ep0of2``...): stopped after step
    2 and resumed, steps 3-4 are those of the uninterrupted run (fp32)."""
    flags = [*SMALL_MOE, "--precision", "fp32", "--micro-batch", "2", "--nproc", "2", "--ep", "2",
             "--checkpoint-dir", str(tmp_path / "ck")]
    full = _bench(env, *flags[:-2], "--steps", "4", "--out", str(tmp_path / "full"))
    first = _bench(env, *flags, "--steps", "2", "--checkpoint-every", "2", "--out", str(tmp_path / "first"))
    assert full.returncode == 0 and first.returncode == 0, first.stderr[-3000:]
    resumed = _bench(env, *flags, "--steps", "4", "--resume", "--out", str(tmp_path / "resumed"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    losses = {s.step: s.loss for s in _steps(tmp_path / "full")}
    again = {s.step: s.loss for s in _steps(tmp_path / "resumed")}
    assert sorted(again) == [3, 4] and [again[k] for k in (3, 4)] == pytest.approx([losses[3], losses[4]], rel=1e-6)
