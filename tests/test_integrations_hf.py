"""The Hugging Face TrainerCallback, with the real transformers Trainer on a tiny Llama built
in-process (no download): the keys land in the Trainer's own log history, are positive, and
agree with the tokens per step, the step time, the counted FLOPs and the given peak."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="transformers is not installed (dev extra)")
pytest.importorskip("accelerate", reason="the transformers Trainer needs accelerate (dev extra)")

SEQ, BATCH, STEPS, PEAK = 32, 2, 6, 0.5


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg)


class _Data(torch.utils.data.Dataset):
    def __init__(self, n: int, pad: int = 0) -> None:
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, 128, (n, SEQ), generator=g)
        self.pad = pad

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        mask = torch.ones(SEQ, dtype=torch.long)
        if self.pad:
            mask[-self.pad:] = 0
        return {"input_ids": self.ids[i], "attention_mask": mask, "labels": self.ids[i]}


def _train(tmp_path, cb, *, pad: int = 0, grad_accum: int = 1, install: bool = False):
    from transformers import Trainer, TrainingArguments

    from trainperf.integrations import hf

    torch.set_num_threads(1)
    args = TrainingArguments(
        output_dir=str(tmp_path / "hf"), max_steps=STEPS, per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=grad_accum, logging_steps=2, report_to=[], use_cpu=True,
        save_strategy="no", disable_tqdm=True, dataloader_num_workers=0, learning_rate=1e-3)
    trainer = Trainer(model=_tiny_llama(), args=args, train_dataset=_Data(64, pad),
                      callbacks=None if install else [cb])
    if install:  # right after the flow callback, before every reporting integration
        hf.install(trainer, cb)
        assert trainer.callback_handler.callbacks[1] is cb
    trainer.train()
    return trainer


@pytest.mark.slow
def test_hf_callback_logs_consistent_rates_into_trainer_logs(tmp_path):
    from trainperf.integrations.hf import TrainperfCallback
    from trainperf.measure.flop_count import count_flops_per_token
    from trainperf.records.jsonl import read_run

    cb = TrainperfCallback(peak_tflops=PEAK, out=tmp_path / "steps.jsonl", warmup_steps=1)
    trainer = _train(tmp_path, cb)
    logged = [h for h in trainer.state.log_history if "tokens_per_s" in h]
    assert [h["step"] for h in logged] == [2, 4, 6]
    for h in logged:
        for key in ("tokens_per_s", "tokens_per_s_per_device", "tflops_per_device", "mfu_pct", "step_time_s"):
            assert h[key] > 0 and math.isfinite(h[key]), (key, h)
        assert "loss" in h  # the Trainer's own keys are still there, in the same entry
        # tokens per optimizer step: batch x seq (all attention-mask ones), one process
        assert h["tokens_per_s"] * h["step_time_s"] == pytest.approx(BATCH * SEQ, rel=1e-9)
        assert h["tokens_per_s_per_device"] == pytest.approx(h["tokens_per_s"])
        assert h["mfu_pct"] == pytest.approx(100 * h["tflops_per_device"] / PEAK, rel=1e-9)

    # FLOPs per token were counted on the meta device from the model itself
    expected = count_flops_per_token(_tiny_llama(), SEQ).training_flops_per_token
    assert cb.flops_per_token == pytest.approx(expected)
    for h in logged:
        assert h["tflops_per_device"] == pytest.approx(expected * h["tokens_per_s"] / 1e12, rel=1e-9)

    # the JSONL run record has every step, marked complete, readable by `trainperf report`
    run = read_run(tmp_path / "steps.jsonl")
    assert [s.step for s in run.steps] == list(range(1, STEPS + 1))
    assert all(s.tokens == BATCH * SEQ for s in run.steps) and not run.interrupted
    window = run.steps[2:4]  # steps 3 and 4 were logged at step 4
    assert logged[1]["tokens_per_s"] == pytest.approx(
        sum(s.tokens for s in window) / sum(s.step_time_s for s in window), rel=1e-9)


@pytest.mark.slow
def test_hf_callback_counts_attention_mask_tokens_over_accumulation(tmp_path):
    from trainperf.integrations.hf import TrainperfCallback

    cb = TrainperfCallback(flops_per_token=1e6, warmup_steps=0)
    trainer = _train(tmp_path, cb, pad=8, grad_accum=2, install=True)
    logged = [h for h in trainer.state.log_history if "tokens_per_s" in h]
    assert logged and "mfu_pct" not in logged[0]  # no peak given: no MFU, never a made-up one
    # 2 micro-batches x 2 sequences x (32 - 8 padded) tokens per optimizer step
    for h in logged:
        assert h["tokens_per_s"] * h["step_time_s"] == pytest.approx(2 * BATCH * (SEQ - 8), rel=1e-9)
        assert h["tflops_per_device"] == pytest.approx(1e6 * h["tokens_per_s"] / 1e12, rel=1e-9)


def test_hf_module_imports_without_transformers_and_says_how_to_install(monkeypatch):
    import builtins
    import importlib

    import trainperf.integrations.hf as hf

    real_import = builtins.__import__

    def no_transformers(name, *a, **k):
        if name.split(".")[0] == "transformers":
            raise ImportError("No module named 'transformers'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_transformers)
    monkeypatch.setattr(hf, "_CLASS", None)
    with pytest.raises(ImportError, match="pip install transformers"):
        _ = hf.TrainperfCallback
    monkeypatch.undo()
    importlib.reload(hf)
