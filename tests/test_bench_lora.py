"""LoRA fine-tuning in the bench: frozen base, adapters in the optimizer, MFU under the ``lora``
convention checked against torch's FlopCounterMode, FSDP2 / TP runs, the CLI's errors and the
sweep's full-vs-LoRA comparison. Tiny models, few steps."""

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
pytest.importorskip("peft")

from trainperf.accounting.conventions import model_flops_per_token  # noqa: E402
from trainperf.cli.main import main  # noqa: E402
from trainperf.errors import SpecError  # noqa: E402
from trainperf.measure.flop_count import count_flops_per_token  # noqa: E402
from trainperf.measure.lora import apply_lora  # noqa: E402
from trainperf.measure.model import build_model  # noqa: E402
from trainperf.measure.testing import TINY_FLAGS, fake_calibration, tiny_workload_dict  # noqa: E402
from trainperf.records.jsonl import read_run  # noqa: E402
from trainperf.specs.lora import LoraSpec  # noqa: E402
from trainperf.specs.model import ModelSpec  # noqa: E402
from trainperf.specs.workload_file import load_workload  # noqa: E402

pytestmark = [pytest.mark.torch]

FP32 = [*TINY_FLAGS, "--precision", "fp32", "--seed", "3"]
TINY = ModelSpec.preset("debug").replace(layers=2, hidden=64, heads=4, kv_heads=2, ffn_hidden=128)


@pytest.fixture
def calibrated(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    return fake_calibration(tmp_path / "cache")


def _main(*argv: str) -> int:
    n = torch.get_num_threads()
    try:
        return main(list(argv))
    finally:
        torch.set_num_threads(n)


def _losses(out: Path) -> list[float]:
    return [s.loss for s in read_run(out / "steps.jsonl").steps]


# --- the spec and the accounting (no training) ------------------------------------------------
def test_lora_spec_counts_and_validates():
    lo = LoraSpec(rank=8)
    assert lo.alpha == 8.0 and lo.scaling == 1.0 and lo.targets == ("q", "k", "v", "o", "gate", "up", "down")
    # r * (in + out) per adapted matrix: q, o 64x64; k, v 64x32; gate, up, down 64x128
    per_layer = 8 * (2 * 128 + 2 * 96 + 3 * 192)
    assert lo.adapter_params(TINY) == 2 * per_layer
    assert LoraSpec(4, alpha=16, targets="v, q").targets == ("q", "v")
    assert LoraSpec.from_dict({"rank": 4, "targets": ["q", "v"]}) == LoraSpec(4, targets=("q", "v"))
    for bad in ({"rank": 0}, {"rank": -2}, {"rank": 2.5}, {"rank": 4, "alpha": 0}, {"rank": 4, "targets": "q,x"},
                {"rank": 4, "targets": ""}, {"rank": 4, "bias": True}, {"alpha": 8}):
        with pytest.raises(SpecError):
            LoraSpec.from_dict(bad)
    with pytest.raises(SpecError, match="gate"):
        LoraSpec(4, targets="gate").adapter_params(TINY.replace(mlp="gelu"))


@pytest.mark.parametrize("spec, seq, targets", [
    (TINY, 32, "q,k,v,o,gate,up,down"),
    (TINY, 32, "gate,up,down"),       # no adapter in attention: layer 0's attention has no backward
    (TINY, 32, "o"),
    (ModelSpec.preset("debug"), 64, "q,k,v,o,gate,up,down"),
    (ModelSpec.preset("debug"), 64, "q,v"),
])
def test_lora_convention_matches_flop_counter(spec, seq, targets):
    """The base's forward and activation gradients, the adapters' three passes, the attention
    core: the lora convention per matmul equals torch's FlopCounterMode on the real step."""
    lo = LoraSpec(8, targets=targets)
    model = build_model(spec, seq_len=seq)
    assert apply_lora(model, lo) == lo.adapter_params(spec)
    counted = count_flops_per_token(model, seq, batch=2).training_flops_per_token
    convention = model_flops_per_token(spec, seq, "lora", lora=lo)
    # Exact, except where the meta-device SDPA (math path) skips dK or dQ of the first layer.
    assert convention == pytest.approx(counted, rel=0.02)
    if "k" in targets or "q" not in targets:
        assert convention == counted
    # The short form (adapter fraction only) also counts activation gradients nothing needs.
    short = model_flops_per_token(spec, seq, "lora", lo.trainable_fraction(spec))
    assert short >= convention
    full = count_flops_per_token(build_model(spec, seq_len=seq), seq, batch=2).training_flops_per_token
    assert counted < full  # no weight gradients for the frozen base


# --- one process ----------------------------------------------------------------------------------
def test_base_stays_bit_identical_while_adapters_train(tmp_path):
    from trainperf.measure.trainer import BenchConfig, BenchRun

    n = torch.get_num_threads()
    try:
        cfg = BenchConfig(workload={**tiny_workload_dict(), "lora": {"rank": 4}}, steps=3, lr=1e-2, threads=1,
                          out_dir=str(tmp_path / "run"), quiet=True)
        run = BenchRun(cfg, say=lambda m: None)
        before = {k: v.detach().clone() for k, v in run.model.state_dict().items()}
        for step in (1, 2, 3):
            run.train_step(step)
        run.meter.close()
    finally:
        torch.set_num_threads(n)
    after = run.model.state_dict()
    adapters = {name for name, p in run.model.named_parameters() if p.requires_grad}
    assert adapters and all(".lora_A." in a or ".lora_B." in a for a in adapters)
    assert len(adapters) == 2 * 7 * 2  # A and B x 7 projections x 2 layers
    for name, value in before.items():
        if name in adapters:
            assert not torch.equal(value, after[name]), name  # every adapter matrix moved
        else:
            assert torch.equal(value, after[name]), name  # bit-identical base
    # The optimizer holds the adapters only, and so does its state.
    ids = {id(p): name for name, p in run.model.named_parameters()}
    held = {ids[id(p)] for g in run.opt.param_groups for p in g["params"]}
    assert held == adapters
    assert {ids[id(p)] for p in run.opt.state} == adapters


def test_lora_bench_reports_mfu_under_the_lora_convention(tmp_path, calibrated, capsys):
    out = tmp_path / "run"
    assert _main("bench", *FP32, "--lora-rank", "8", "--lora-alpha", "16", "--steps", "3", "--out", str(out)) == 0
    text = capsys.readouterr().out
    assert "LoRA r=8 alpha=16" in text and "convention lora" in text
    s = json.loads((out / "summary.json").read_text())
    assert s["convention"] == "lora" and "LoRA r=8" in s["workload"]
    w = load_workload(out / "workload.toml")  # the [lora] table round-trips
    assert w.lora == LoraSpec(8, alpha=16)
    model = build_model(w.model, seq_len=w.seq_len)
    apply_lora(model, w.lora)
    counted = count_flops_per_token(model, w.seq_len, batch=2).training_flops_per_token
    assert s["model_flops_per_token"] == pytest.approx(counted, rel=0.02)
    # The bench runs the same check itself, prints it and keeps it in the run's metadata.
    assert "by torch's FlopCounterMode (+0.00%)" in text
    assert read_run(out / "steps.jsonl").meta["lora"]["flop_counter_flops_per_token"] == counted
    mfu_counted = 100 * s["tokens_per_s_per_device"] * counted / 1e12 / s["peak_tflops"]
    assert s["mfu_pct"] == pytest.approx(mfu_counted, rel=0.02)
    # predict and report count the run's FLOPs as the run did: lora unless another is named
    assert _main("predict", str(out / "workload.toml"), "--json") == 0
    p = json.loads(capsys.readouterr().out)
    assert p["convention"] == "lora"
    assert p["tflops_per_device"] * 1e12 / p["tokens_per_s_per_device"] == pytest.approx(
        s["model_flops_per_token"], rel=1e-9)
    assert _main("predict", str(out / "workload.toml"), "--convention", "megatron", "--json") == 0
    assert json.loads(capsys.readouterr().out)["convention"] == "megatron"
    assert _main("report", str(out), "--out", str(tmp_path / "rep")) == 0
    assert "FLOP convention for every TFLOP/s and MFU figure: **lora**" in (tmp_path / "rep" / "report.md").read_text()
    # compare counts every run under one convention (megatron unless named), and says what that
    # does to a LoRA run's MFU
    assert _main("compare", str(out)) == 0
    assert "run is a LoRA fine-tune: megatron counts weight gradients its frozen base" in capsys.readouterr().out
    assert _main("compare", str(out), "--convention", "lora") == 0
    assert "LoRA fine-tune" not in capsys.readouterr().out
    # parse's table of conventions counts the adapters per matmul too: the run's own figure is lora's
    assert _main("parse", str(out / "steps.jsonl"), "--json") == 0
    lora_row = next(r for r in json.loads(capsys.readouterr().out)["by_convention"] if r["convention"] == "lora")
    assert lora_row["flops_per_token"] == s["model_flops_per_token"] and lora_row["claimed_over_this"] == pytest.approx(1.0, abs=0.02)


@pytest.mark.parametrize("flags, field", [
    (["--lora-rank", "0"], "lora.rank"),
    (["--lora-rank", "-4"], "lora.rank"),
    (["--lora-rank", "8", "--lora-targets", "q,attn"], "lora.targets"),
    (["--lora-rank", "8", "--lora-alpha", "0"], "lora.alpha"),
    (["--lora-alpha", "16"], "lora.rank"),
])
def test_bad_lora_flags_are_one_line_errors(tmp_path, calibrated, capsys, flags, field):
    out = tmp_path / "never"
    assert _main("bench", *FP32, *flags, "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainperf bench: error: ") and field in err[0], err
    assert not out.exists()


@pytest.mark.slow
def test_lora_loss_falls_on_real_text(tmp_path, calibrated):
    """Adapters on a frozen, randomly initialised base still learn byte statistics (less than a
    full fine-tune can: the frozen head and norms bound the logits)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in ("argparse.py", "dataclasses.py", "functools.py", "inspect.py"):
        shutil.copy(stdlib / name, corpus / name)
    out = tmp_path / "run"
    assert _main("bench", "--layers", "2", "--hidden", "128", "--heads", "4", "--kv-heads", "2",
                 "--ffn-hidden", "384", "--seq-len", "128", "--micro-batch", "8", "--threads", "1",
                 "--precision", "fp32", "--lr", "1e-2", "--lora-rank", "8", "--data", str(corpus),
                 "--steps", "20", "--out", str(out)) == 0
    losses = _losses(out)
    last = sum(losses[-5:]) / 5
    assert last < 0.9 * math.log(256) and last < losses[0] - 0.5, losses


# --- several processes ----------------------------------------------------------------------------
@pytest.fixture
def env(tmp_path):
    fake_calibration(tmp_path / "cache")
    e = dict(os.environ, TRAINPERF_CACHE_DIR=str(tmp_path / "cache"), PYTHONUNBUFFERED="1")
    e.pop("WORLD_SIZE", None)
    return e


def _bench_subprocess(env, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainperf.cli.main", "bench", *argv], env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_lora_under_fsdp_and_tp_matches_one_process(tmp_path, env, calibrated):
    """Same seed and sequences: FSDP2 over 2 ranks and TP+SP over 2 ranks train the same
    adapters as one process (fp32), so the losses agree."""
    lora = [*FP32, "--lora-rank", "8", "--lr", "1e-2", "--steps", "3"]
    assert _main("bench", *lora, "--global-batch", "4", "--out", str(tmp_path / "one4")) == 0
    fsdp = _bench_subprocess(env, *lora, "--nproc", "2", "--fsdp", "2", "--out", str(tmp_path / "fsdp"))
    assert fsdp.returncode == 0, fsdp.stderr[-3000:]
    s = json.loads((tmp_path / "fsdp" / "summary.json").read_text())
    assert "FSDP2 over 2 ranks" in s["parallelism"] and s["convention"] == "lora"
    assert _losses(tmp_path / "fsdp") == pytest.approx(_losses(tmp_path / "one4"), rel=1e-4)

    assert _main("bench", *lora, "--out", str(tmp_path / "one2")) == 0
    tp = _bench_subprocess(env, *lora, "--nproc", "2", "--tp", "2", "--sequence-parallel",
                           "--out", str(tmp_path / "tp"))
    assert tp.returncode == 0, tp.stderr[-3000:]
    assert "TP=2 +SP" in json.loads((tmp_path / "tp" / "summary.json").read_text())["parallelism"]
    assert _losses(tmp_path / "tp") == pytest.approx(_losses(tmp_path / "one2"), rel=1e-4)


def test_sweep_compares_lora_with_full_fine_tune(tmp_path, calibrated, capsys, monkeypatch):
    """The command's plan and table (the runs themselves are faked: the bench is tested above)."""
    import trainperf.measure.runner as runner

    calls = []

    def fake_execute(workload, cfg, launch, say, **kwargs):
        calls.append((workload.lora, cfg.convention, launch.own_process))
        lora = workload.lora is not None
        return {"step_time_median_s": 2.0 if lora else 3.0, "tokens_per_s": 30.0 if lora else 20.0,
                "tokens_per_s_per_device": 30.0 if lora else 20.0, "tflops_per_device": 1.0, "mfu_pct": 1.0,
                "memory_max_GiB": 1.0 if lora else 4.0, "convention": cfg.convention}, 0

    monkeypatch.setattr(runner, "execute", fake_execute)
    assert _main("sweep", *FP32, "--nproc", "1", "--compare-lora", "4", "--repeats", "3", "--steps", "2",
                 "--out", str(tmp_path / "sw")) == 0
    text = capsys.readouterr().out
    assert "LoRA r=4 runs at 1.50x the full fine-tune's tokens/s and 0.25x the peak memory" in text
    assert "medians of 3 runs" in text
    # full, LoRA, full, LoRA...: interleaved, each in its own process, each under its convention
    assert calls == [(None, "megatron", True), (LoraSpec(4), "lora", True)] * 3
