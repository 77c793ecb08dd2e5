"""Hugging Face ``transformers`` integration: a ``TrainerCallback`` that meters every optimizer
step with :class:`trainperf.measure.meter.ThroughputMeter` and logs ``tokens_per_s``,
``tokens_per_s_per_device``, ``tflops_per_device``, ``mfu_pct`` and ``step_time_s`` into the
Trainer's own logs.

Usage::

    from trainperf.integrations.hf import TrainperfCallback

    cb = TrainperfCallback(peak_tflops=989.0)            # or device="h100-sxm", precision="bf16"
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[cb])
    trainer.train()
    # trainer.state.log_history entries now carry tokens_per_s, tflops_per_device, mfu_pct...

How it counts:

* tokens: a forward pre-hook on the model reads each training micro-batch's ``attention_mask``
  (its ones; padding is not training data) or ``input_ids`` (all elements); the tokens of every
  micro-batch of a gradient-accumulation step are summed. This process's tokens are multiplied
  by the data-parallel size (the world size) for the global figure.
* step time: ``on_step_begin`` to ``on_step_end`` is not what is timed; the meter times from one
  optimizer step's end to the next (data loading included), synchronising the device first.
* FLOPs per token: ``flops_per_token`` if given, else counted once on the meta device for the
  first batch's sequence length with :func:`trainperf.measure.flop_count.count_flops_per_token`
  (matmul/attention FLOPs, forward + backward, full attention matrix; elementwise ops left out).
* logged values are rates over the steps since the previous log (total tokens / total seconds),
  warm-up steps excluded unless nothing else is in the window.

The Trainer hands ``logs`` to the callbacks in order, after it has appended its own copy to
``state.log_history``; this callback adds its keys to both. Reporting integrations that run
before it (``report_to``: TensorBoard, W&B...) see them only if it runs first: use
:func:`install` (``install(trainer, cb)``) instead of ``callbacks=[cb]`` for that.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from trainperf.integrations.common import Window, batch_tokens, resolve_peak_tflops

_INSTALL_HINT = "the Hugging Face integration needs transformers: pip install transformers accelerate"


def _transformers_base() -> type:
    try:
        from transformers import TrainerCallback
    except ImportError as e:
        raise ImportError(f"{_INSTALL_HINT} ({e})") from e
    return TrainerCallback


def _unwrap(model: Any) -> Any:
    while hasattr(model, "module") and model.module is not model:
        model = model.module
    return model


class _Mixin:
    """The callback's logic (the class used is :class:`TrainperfCallback`, built on first access
    so that importing this module does not import transformers)."""

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
    ) -> None:
        """
        Args:
            flops_per_token: training model FLOPs per token (forward + backward); ``None``:
                counted on the meta device from the model at the first step.
            peak_tflops: dense peak TFLOP/s of one device for MFU; or give ``device``.
            device: trainperf catalog id (``h100-sxm``...) whose ``precision`` peak to use.
            precision: training dtype, for the catalog peak.
            out: trainperf JSONL run record to write (rank 0), readable by ``trainperf report``.
            warmup_steps: steps left out of the rates (default: the meter's rule).
            count_padding: count padded positions as tokens (default: attention-mask ones only).
        """
        self.flops_per_token = flops_per_token
        self.peak_tflops, self.peak_source = resolve_peak_tflops(peak_tflops, device, precision)
        self.out = out
        self.warmup_steps = warmup_steps
        self.count_padding = count_padding
        self.meter: Any = None
        self.window = Window()
        self.last_rates: dict[str, float] = {}
        self._tokens: Any = 0
        self._flops_tried = False
        self._counting = False
        self._seq_len: int | None = None
        self._hook: Any = None
        self._model: Any = None

    # -- token counting -------------------------------------------------------------------
    def _pre_hook(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not module.training or self._counting:
            return  # evaluation forwards are not training tokens, nor is the meta-device count
        batch = kwargs if ("input_ids" in kwargs or "attention_mask" in kwargs) else (args[0] if args else None)
        n, seq = batch_tokens(batch, count_padding=self.count_padding)
        self._tokens = self._tokens + n
        if seq is not None and self._seq_len is None:
            self._seq_len = seq

    # -- Trainer events -------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        from trainperf.measure.meter import ThroughputMeter

        self._model = _unwrap(model) if model is not None else None
        if self._model is not None and self._hook is None:
            self._hook = self._model.register_forward_pre_hook(self._pre_hook, with_kwargs=True)
        total = state.max_steps if getattr(state, "max_steps", 0) and state.max_steps > 0 else None
        self.meter = ThroughputMeter(
            self.out, flops_per_token=self.flops_per_token, peak_tflops=self.peak_tflops,
            peak_source=self.peak_source, total_steps=total, warmup_steps=self.warmup_steps,
            meta={"name": "hf-trainer", "integration": "transformers.TrainerCallback"})
        self._tokens = 0

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.meter is None:
            return
        # int() of a device tensor synchronises: once per optimizer step, just before the meter
        # synchronises for its clock anyway.
        tokens = int(self._tokens)
        self._tokens = 0
        if self.meter.flops_per_token is None and not self._flops_tried and self._model is not None \
                and self._seq_len:
            self._count_flops(self._seq_len)  # inside meter.paused(): not part of the step's time
        rec = self.meter.step(tokens=tokens)
        self.window.add(rec, self.meter.is_warmup(rec.step))

    def _count_flops(self, seq_len: int) -> None:
        from trainperf.measure.flop_count import count_flops_per_token

        self._flops_tried = True
        try:
            self._counting = True
            with self.meter.paused():  # counting is not part of any training step
                fc = count_flops_per_token(self._model, seq_len)
        except Exception as e:  # a model the meta device cannot run: rates without TFLOP/s
            warnings.warn(f"trainperf: FLOPs per token could not be counted on the meta device ({e}); "
                          "pass flops_per_token= to log TFLOP/s and MFU", stacklevel=2)
            return
        finally:
            self._counting = False
        self.flops_per_token = fc.training_flops_per_token
        self.meter.flops_per_token = fc.training_flops_per_token

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if self.meter is None or logs is None or not self.window.steps:
            return
        rates = self.window.rates(self.meter.num_devices, self.meter.flops_per_token, self.peak_tflops)
        self.window.clear()
        self.last_rates = rates
        logs.update(rates)
        hist = getattr(state, "log_history", None)
        if hist and hist[-1].get("step") == state.global_step:
            hist[-1].update(rates)  # the Trainer appended its copy of ``logs`` before calling us

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self.meter is not None:
            self.meter.close()


def install(trainer: Any, callback: Any = None, **kwargs: Any) -> Any:
    """Add a :class:`TrainperfCallback` (``callback``, or one built from ``kwargs``) to
    ``trainer`` right after its flow callback, so every reporting integration sees the keys."""
    cb = callback if callback is not None else __getattr__("TrainperfCallback")(**kwargs)
    trainer.callback_handler.callbacks.insert(1, cb)
    return cb


_CLASS: type | None = None


def __getattr__(name: str) -> Any:
    """Build ``TrainperfCallback`` (a ``transformers.TrainerCallback``) on first access."""
    global _CLASS
    if name == "TrainperfCallback":
        if _CLASS is None:
            _CLASS = type("TrainperfCallback", (_Mixin, _transformers_base()),
                          {"__doc__": __doc__, "__module__": __name__})
        return _CLASS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
