"""Accounting: FLOPs, MFU/HFU, throughput, time-to-train and scaling efficiency (pure functions).

The names below are loaded on first use (PEP 562), so importing one submodule, e.g.
``trainperf.accounting.conventions`` for ``trainperf flops``, does not also import the
hardware catalog that ``throughput`` needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOME = {
    "CONVENTIONS": "conventions", "DEFAULT_CONVENTION": "conventions", "all_conventions": "conventions",
    "hardware_flops_per_token": "conventions", "model_flops_per_token": "conventions",
    "FlopBreakdown": "flops", "forward_flops": "flops", "training_flops": "flops",
    "strong_scaling_efficiency": "scaling", "weak_scaling_efficiency": "scaling",
    "Peak": "throughput", "Throughput": "throughput", "resolve_peak": "throughput", "throughput": "throughput",
}

__all__ = [
    "CONVENTIONS", "DEFAULT_CONVENTION", "FlopBreakdown", "Peak", "Throughput", "all_conventions",
    "forward_flops", "hardware_flops_per_token", "model_flops_per_token", "resolve_peak",
    "strong_scaling_efficiency", "throughput", "training_flops", "weak_scaling_efficiency",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'trainperf.accounting' has no attribute {name!r}")
    return getattr(importlib.import_module(f"trainperf.accounting.{home}"), name)
