"""Accounting: FLOPs, MFU/HFU, throughput, time-to-train and scaling efficiency (pure functions)."""

from trainperf.accounting.conventions import (
    CONVENTIONS,
    DEFAULT_CONVENTION,
    all_conventions,
    hardware_flops_per_token,
    model_flops_per_token,
)
from trainperf.accounting.flops import FlopBreakdown, forward_flops, training_flops
from trainperf.accounting.scaling import strong_scaling_efficiency, weak_scaling_efficiency
from trainperf.accounting.throughput import Peak, Throughput, resolve_peak, throughput

__all__ = [
    "CONVENTIONS", "DEFAULT_CONVENTION", "FlopBreakdown", "Peak", "Throughput", "all_conventions",
    "forward_flops", "hardware_flops_per_token", "model_flops_per_token", "resolve_peak",
    "strong_scaling_efficiency", "throughput", "training_flops", "weak_scaling_efficiency",
]
