"""The real run: reference model, parallelize, trainer, meter, launch, checkpoint, sinks.

The only layer that imports torch. Nothing is imported here at package import time; use the
submodules (``trainperf.measure.meter.ThroughputMeter``, ``trainperf.measure.trainer.train`` ...).
"""

from typing import Any

# Lazy exports: importing the package stays free of torch until one of these is used.
_EXPORTS = {
    "ThroughputMeter": "trainperf.measure.meter",
    "count_flops_per_token": "trainperf.measure.flop_count",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'trainperf.measure' has no attribute {name!r}")
