"""The Lightning Callback with the real Lightning Trainer on a tiny in-process model: the values
reach Lightning's own logger (CSVLogger), are positive, and agree with tokens, step time,
counted FLOPs and the given peak."""

from __future__ import annotations

import csv
import math

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning.pytorch", reason="lightning is not installed (dev extra)")

SEQ, BATCH, VOCAB, HIDDEN, PEAK = 16, 4, 64, 32, 0.25


class _TinyLM(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, HIDDEN)
        self.mlp = torch.nn.Linear(HIDDEN, HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids):
        return self.head(torch.relu(self.mlp(self.emb(input_ids))))

    def training_step(self, batch, batch_idx):
        logits = self(batch["input_ids"])
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["input_ids"].flatten())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader(n: int, pad: int = 0):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    mask = torch.ones(n, SEQ, dtype=torch.long)
    if pad:
        mask[:, -pad:] = 0
    rows = [{"input_ids": ids[i], "attention_mask": mask[i]} for i in range(n)]
    return torch.utils.data.DataLoader(rows, batch_size=BATCH)


def _fit(tmp_path, cb, *, steps: int, grad_accum: int = 1, pad: int = 0):
    from lightning.pytorch.loggers import CSVLogger

    torch.set_num_threads(1)
    logger = CSVLogger(str(tmp_path), name="lt", version=0)
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=logger, log_every_n_steps=2, callbacks=[cb],
                        accumulate_grad_batches=grad_accum, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(_TinyLM(), _loader(64, pad))
    with open(tmp_path / "lt" / "version_0" / "metrics.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if r.get("tokens_per_s")]


@pytest.mark.slow
def test_lightning_callback_logs_consistent_rates_into_its_logger(tmp_path):
    from trainperf.integrations.lightning import TrainperfLightningCallback
    from trainperf.records.jsonl import read_run

    cb = TrainperfLightningCallback(peak_tflops=PEAK, out=tmp_path / "steps.jsonl", warmup_steps=1)
    rows = _fit(tmp_path, cb, steps=6)
    assert len(rows) == 3  # logged at optimizer steps 2, 4, 6
    # counted on the meta device: forward 2 FLOPs per multiply-add of the two matmuls (mlp,
    # head); backward 2x that (weight gradients, and input gradients down to the embedding,
    # whose weight trains); the embedding lookup is a gather, not counted.
    fwd = 2 * (HIDDEN * HIDDEN + HIDDEN * VOCAB)
    assert cb.flops_per_token == pytest.approx(3 * fwd)
    for r in rows:
        v = {k: float(r[k]) for k in ("tokens_per_s", "tokens_per_s_per_device", "tflops_per_device",
                                      "mfu_pct", "step_time_s")}
        assert all(x > 0 and math.isfinite(x) for x in v.values()), v
        assert v["tokens_per_s"] * v["step_time_s"] == pytest.approx(BATCH * SEQ, rel=1e-6)
        assert v["tflops_per_device"] == pytest.approx(3 * fwd * v["tokens_per_s"] / 1e12, rel=1e-6)
        assert v["mfu_pct"] == pytest.approx(100 * v["tflops_per_device"] / PEAK, rel=1e-6)
    run = read_run(tmp_path / "steps.jsonl")
    assert len(run.steps) == 6 and not run.interrupted
    assert all(s.tokens == BATCH * SEQ for s in run.steps)


@pytest.mark.slow
def test_lightning_callback_sums_accumulated_batches_and_skips_padding(tmp_path):
    from trainperf.integrations.lightning import TrainperfLightningCallback

    cb = TrainperfLightningCallback(flops_per_token=1e3, warmup_steps=0)
    rows = _fit(tmp_path, cb, steps=4, grad_accum=2, pad=4)
    assert rows and all("mfu_pct" not in r or not r["mfu_pct"] for r in rows)  # no peak, no MFU
    for r in rows:
        assert float(r["tokens_per_s"]) * float(r["step_time_s"]) == pytest.approx(2 * BATCH * (SEQ - 4), rel=1e-6)
