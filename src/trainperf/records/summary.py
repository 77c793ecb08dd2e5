"""Summary: the figures shown for a run, with the FLOP convention and peak that made them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Summary:
    """Steady-state figures of a run. Rates are ``None`` when the inputs they need are unknown."""

    name: str
    source: str
    steps_total: int
    """Steps in the record."""
    steps_measured: int
    """Steps that count (warm-up excluded)."""
    warmup_steps: int
    warmup_rule: str
    """How the warm-up steps were chosen, in words."""
    step_time_median_s: float | None
    step_time_p10_s: float | None
    step_time_p90_s: float | None
    step_time_mean_s: float | None
    tokens_per_step: int | None
    tokens_per_s: float | None
    """Global tokens per second at the median step time."""
    tokens_per_s_per_device: float | None
    tflops_per_device: float | None
    """Model TFLOP/s per device under ``convention``."""
    mfu_pct: float | None
    hfu_pct: float | None
    convention: str
    model_flops_per_token: float | None
    peak_tflops: float | None
    peak_source: str | None
    """What the peak is: catalog datasheet entry, calibration, or user override."""
    precision: str | None
    num_devices: int | None
    interrupted: bool = False
    train_tokens: float | None = None
    days_to_train: float | None = None
    loss_last: float | None = None
    memory_max_GiB: float | None = None
    claimed: dict[str, Any] = field(default_factory=dict)
    """What the source itself reported (median over measured steps), for comparison."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
