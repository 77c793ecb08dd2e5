"""Where the meter's steps go besides the JSONL record: the console and TensorBoard.

The console line has the shape of MaxText's (``MaxText/metric_logger.py``) plus MFU::

    completed step: 12, seconds: 0.412, TFLOP/s/device: 0.118, Tokens/s/device: 4975.2, loss: 5.412, mfu: 9.8%
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

from trainperf.errors import SpecError
from trainperf.records import StepRecord


def _num(x: float | None, fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def step_line(rec: StepRecord, warmup: bool = False) -> str:
    """One step in MaxText's ``completed step:`` shape, MFU appended (``n/a`` without a peak)."""
    mfu = "n/a" if rec.claimed_mfu_pct is None else f"{rec.claimed_mfu_pct:.2f}%"
    line = (f"completed step: {rec.step}, seconds: {rec.step_time_s:.3f}, "
            f"TFLOP/s/device: {_num(rec.claimed_tflops_per_device, '.3f')}, "
            f"Tokens/s/device: {_num(rec.claimed_tokens_per_s_per_device, '.1f')}, "
            f"loss: {_num(rec.loss, '.4f')}, mfu: {mfu}")
    return line + moe_fields(rec.extra or {}) + ("  (warm-up, not in the summary)" if warmup else "")


def moe_fields(extra: dict[str, Any]) -> str:
    """An MoE step's figures for the step line: the experts' load (max / mean assignments,
    mean over layers), the share of the step in all-to-all, dropped assignments if any."""
    if "moe_imbalance" not in extra:
        return ""
    text = f", experts max/mean: {extra['moe_imbalance']:.2f}"
    if "moe_all_to_all_pct" in extra:
        text += f", all-to-all: {extra['moe_all_to_all_pct']:.1f}%"
    if extra.get("moe_dropped_pct"):
        text += f", dropped: {extra['moe_dropped_pct']:.2f}%"
    return text


class ConsoleSink:
    """Prints :func:`step_line` for every step (to stdout by default)."""

    def __init__(self, stream: TextIO | None = None, printer: Callable[[str], Any] | None = None) -> None:
        self._stream = stream
        self._printer = printer

    def write(self, record: StepRecord, warmup: bool) -> None:
        line = step_line(record, warmup)
        if self._printer is not None:
            self._printer(line)
        else:
            print(line, file=self._stream or sys.stdout, flush=True)

    def close(self) -> None:
        pass


def tensorboard_available() -> bool:
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        return False
    return True


class TensorBoardSink:
    """Scalars per step, tags carrying their unit as torchtitan's do (``mfu(%)``...); see :data:`TAGS`."""

    TAGS = ("time/step(s)", "throughput/tokens_per_s", "throughput/tokens_per_s_per_device",
            "throughput/tflops_per_device", "mfu(%)", "hfu(%)", "loss", "grad_norm", "memory/max(GiB)")
    """Every tag written (a step lacking a value, e.g. MFU without a peak, skips that tag)."""

    def __init__(self, log_dir: str) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise SpecError("--tensorboard", log_dir, "needs the tensorboard package (pip install tensorboard)") from None
        self._w = SummaryWriter(log_dir=log_dir)

    def write(self, record: StepRecord, warmup: bool) -> None:
        values = dict(zip(self.TAGS, (
            record.step_time_s, record.claimed_tokens_per_s, record.claimed_tokens_per_s_per_device,
            record.claimed_tflops_per_device, record.claimed_mfu_pct, (record.extra or {}).get("hfu_pct"),
            record.loss, record.grad_norm, record.memory_GiB), strict=True))
        for key, v in values.items():
            if v is not None:
                self._w.add_scalar(key, v, record.step)
        self._w.flush()

    def close(self) -> None:
        self._w.close()
