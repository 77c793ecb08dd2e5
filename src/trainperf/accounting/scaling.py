"""Weak and strong scaling efficiency between a base run and a larger one.

Definitions (as used by Databricks' MI250 blog, 2023, for LLM Foundry, and by ORNL's Frontier
study, Dash et al. 2023):

* strong scaling (global batch fixed): E = (T_base * N_base) / (T_N * N), where T is the time
  per step and N the device count; equivalently speedup / (N / N_base), or, since the work per
  step is fixed, the ratio of per-device throughput (tokens/s/device or TFLOP/s/device).
* weak scaling (per-device batch fixed): E = (X_N / X_base) / (N / N_base) for global
  throughput X; with the work per device fixed this is T_base / T_N.
"""

from __future__ import annotations

from trainperf.errors import SpecError


def _pos(name: str, v: float) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0 or v == float("inf"):
        raise SpecError(name, v, "a positive, finite number")
    return float(v)


def strong_scaling_efficiency(base_devices: int, base_step_time_s: float,
                              devices: int, step_time_s: float) -> float:
    """Fraction (0..1+) of ideal speed-up at fixed global batch: T_b*N_b / (T_N*N)."""
    return (_pos("base_step_time_s", base_step_time_s) * _pos("base_devices", base_devices)) / (
        _pos("step_time_s", step_time_s) * _pos("devices", devices))


def weak_scaling_efficiency(base_devices: int, base_tokens_per_s: float,
                            devices: int, tokens_per_s: float) -> float:
    """Fraction of ideal at fixed per-device batch: (X_N / X_b) / (N / N_b), X global tokens/s."""
    return (_pos("tokens_per_s", tokens_per_s) / _pos("base_tokens_per_s", base_tokens_per_s)) / (
        _pos("devices", devices) / _pos("base_devices", base_devices))


def per_device_efficiency(base_per_device: float, per_device: float) -> float:
    """Ratio of per-device throughput (e.g. TFLOP/s/GPU), the form Databricks' MI250 blog
    reports (166 -> 159)."""
    return _pos("per_device", per_device) / _pos("base_per_device", base_per_device)
