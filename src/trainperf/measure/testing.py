"""Helpers for trainperf's own tests of the measure layer (hermetic, tiny, one thread)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trainperf.specs.cpu_calibration import CpuCalibration, cpu_model_name, save_calibration

FAKE_PEAKS = {"fp32": 0.1, "bf16": 0.4, "fp8": 0.05}
"""Calibrated TFLOP/s written by :func:`fake_calibration` (round numbers, so MFU is checkable)."""


def fake_calibration(cache_dir: str | Path, threads: int = 1) -> CpuCalibration:
    """Point ``TRAINPERF_CACHE_DIR`` at ``cache_dir`` and store a calibration for this CPU there."""
    os.environ["TRAINPERF_CACHE_DIR"] = str(cache_dir)
    cal = CpuCalibration(cpu_model=cpu_model_name(), threads=threads, peak_tflops=dict(FAKE_PEAKS),
                         memory_bandwidth_GB_per_s=10.0,
                         measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
                         method="fake calibration for tests")
    save_calibration(cal)
    return cal


TINY_FLAGS = ["--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn-hidden", "128",
              "--seq-len", "32", "--micro-batch", "2", "--threads", "1"]
"""CLI flags that shrink the debug preset to a model that trains a step in milliseconds."""


def tiny_workload_dict(**training: Any) -> dict[str, Any]:
    """A workload-file dict of the tiny model on one CPU process."""
    return {
        "model": {"preset": "debug", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn_hidden": 128},
        "hardware": {"device": "cpu", "num_devices": 1},
        "training": {"seq_len": 32, "micro_batch": 2, "global_batch": 2, "precision": "fp32", **training},
    }
