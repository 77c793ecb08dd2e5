"""Lightning integration: a ``Callback`` that meters every optimizer step with
:class:`trainperf.measure.meter.ThroughputMeter` and logs ``tokens_per_s``,
``tokens_per_s_per_device``, ``tflops_per_device``, ``mfu_pct`` and ``step_time_s`` through
``pl_module.log`` (so they reach every logger the Trainer has: CSV, TensorBoard, W&B...).

Usage::

    from trainperf.integrations.lightning import TrainperfLightningCallback

    trainer = L.Trainer(callbacks=[TrainperfLightningCallback(peak_tflops=989.0)], ...)

Tokens come from each training batch (``attention_mask`` ones, else the elements of
``input_ids``, of the batch tensor, or of the first tensor of a tuple), summed over the batches
of one optimizer step (gradient accumulation); an optimizer step is detected by
``trainer.global_step`` advancing. FLOPs per token are ``flops_per_token`` if given, else
counted once on the meta device for the first batch's sequence length, feeding the module the
batch's ``input_ids`` shape (give ``flops_per_token`` for modules whose forward takes something
else). Values are logged every ``log_every_n_steps`` optimizer steps as rates over the steps
since the previous log (warm-up excluded unless nothing else is in the window).

Works with ``lightning`` (``lightning.pytorch``) or the older ``pytorch_lightning`` package;
importing this module imports neither until the callback class is first used.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from trainperf.integrations.common import Window, batch_tokens, resolve_peak_tflops

_INSTALL_HINT = "the Lightning integration needs lightning: pip install lightning"


def _lightning_base() -> type:
    try:
        from lightning.pytorch.callbacks import Callback
    except ImportError:
        try:
            from pytorch_lightning.callbacks import Callback
        except ImportError as e:
            raise ImportError(f"{_INSTALL_HINT} ({e})") from e
    return Callback


class _Mixin:
    """The callback's logic (the class used is :class:`TrainperfLightningCallback`)."""

    def __init__(
        self,
        *,
        flops_per_token: float | None = None,
        peak_tflops: float | None = None,
        device: str | None = None,
        precision: str = "bf16",
        out: str | Path | None = None,
        warmup_steps: int | None = None,
        count_padding: bool = False,
        log_every_n_steps: int | None = None,
        prog_bar: bool = False,
    ) -> None:
        """
        Args:
            flops_per_token: training model FLOPs per token (forward + backward); ``None``:
                counted on the meta device at the first step.
            peak_tflops: dense peak TFLOP/s of one device for MFU; or give ``device``.
            device: trainperf catalog id whose ``precision`` peak to use.
            precision: training dtype, for the catalog peak.
            out: trainperf JSONL run record to write (rank 0).
            warmup_steps: steps left out of the rates (default: the meter's rule).
            count_padding: count padded positions as tokens.
            log_every_n_steps: optimizer steps between logs (default: the Trainer's
                ``log_every_n_steps``).
            prog_bar: also show the values in the progress bar.
        """
        self.flops_per_token = flops_per_token
        self.peak_tflops, self.peak_source = resolve_peak_tflops(peak_tflops, device, precision)
        self.out = out
        self.warmup_steps = warmup_steps
        self.count_padding = count_padding
        self.log_every_n_steps = log_every_n_steps
        self.prog_bar = prog_bar
        self.meter: Any = None
        self.window = Window()
        self.last_rates: dict[str, float] = {}
        self._tokens: Any = 0
        self._flops_tried = False
        self._seq_len: int | None = None
        self._last_global_step = 0

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        from trainperf.measure.meter import ThroughputMeter

        total = trainer.max_steps if getattr(trainer, "max_steps", -1) and trainer.max_steps > 0 else None
        self.meter = ThroughputMeter(
            self.out, flops_per_token=self.flops_per_token, peak_tflops=self.peak_tflops,
            peak_source=self.peak_source, total_steps=total, warmup_steps=self.warmup_steps,
            meta={"name": "lightning", "integration": "lightning.Callback"})
        if self.log_every_n_steps is None:
            self.log_every_n_steps = max(1, int(getattr(trainer, "log_every_n_steps", 50) or 1))
        self._last_global_step = trainer.global_step
        self._tokens = 0

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        n, seq = batch_tokens(batch, count_padding=self.count_padding)
        self._tokens = self._tokens + n
        if seq is not None and self._seq_len is None:
            self._seq_len = seq

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.meter is None or trainer.global_step == self._last_global_step:
            return  # a gradient-accumulation micro-batch: the optimizer step is not over
        steps_done = trainer.global_step - self._last_global_step
        self._last_global_step = trainer.global_step
        tokens = int(self._tokens)  # synchronises once per optimizer step, like the meter's clock
        self._tokens = 0
        if self.meter.flops_per_token is None and not self._flops_tried and self._seq_len:
            self._count_flops(pl_module, self._seq_len)  # inside meter.paused(): not part of the step's time
        rec = self.meter.step(tokens=tokens, **({"optimizer_steps": steps_done} if steps_done > 1 else {}))
        self.window.add(rec, self.meter.is_warmup(rec.step))
        if trainer.global_step % self.log_every_n_steps == 0:
            rates = self.window.rates(self.meter.num_devices, self.meter.flops_per_token, self.peak_tflops)
            self.window.clear()
            self.last_rates = rates
            for key, value in rates.items():
                pl_module.log(key, value, on_step=True, on_epoch=False, prog_bar=self.prog_bar,
                              rank_zero_only=True)

    def _count_flops(self, pl_module: Any, seq_len: int) -> None:
        from trainperf.measure.flop_count import count_flops_per_token

        self._flops_tried = True
        try:
            with self.meter.paused():  # counting is not part of any training step
                fc = count_flops_per_token(pl_module, seq_len)
        except Exception as e:  # a forward the meta device cannot run: rates without TFLOP/s
            warnings.warn(f"trainperf: FLOPs per token could not be counted on the meta device ({e}); "
                          "pass flops_per_token= to log TFLOP/s and MFU", stacklevel=2)
            return
        self.flops_per_token = fc.training_flops_per_token
        self.meter.flops_per_token = fc.training_flops_per_token

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.meter is not None:
            self.meter.close()


_CLASS: type | None = None


def __getattr__(name: str) -> Any:
    """Build ``TrainperfLightningCallback`` (a Lightning ``Callback``) on first access."""
    global _CLASS
    if name == "TrainperfLightningCallback":
        if _CLASS is None:
            _CLASS = type("TrainperfLightningCallback", (_Mixin, _lightning_base()),
                          {"__doc__": __doc__, "__module__": __name__})
        return _CLASS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
