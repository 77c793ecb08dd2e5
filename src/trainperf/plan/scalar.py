"""The planner's single door into the predictor: knobs, layout templates, scalar predictions.

Everything the planner needs from :mod:`trainperf.predict` goes through these three functions,
so that a change in the predictor's interface is fixed in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from trainperf.predict import predict as _predict
from trainperf.predict.step import resolve_knobs
from trainperf.predict.step_model import layout_of
from trainperf.specs.hardware import Hardware
from trainperf.specs.model import ModelSpec
from trainperf.specs.parallel import ParallelPlan
from trainperf.specs.workload import Workload

if TYPE_CHECKING:
    from trainperf.predict.efficiency import KnobValues
    from trainperf.predict.step_model import Layout

GiB = float(1 << 30)


@dataclass(frozen=True)
class ScalarFigures:
    """What the planner shows of one scalar prediction."""

    step_time_s: float
    mfu_pct: float
    memory_GiB: float
    capacity_GiB: float
    fits: bool
    bottleneck: str
    breakdown_s: dict[str, float]
    memory_breakdown_GiB: dict[str, float]
    raw: Any = None
    """The predictor's own result object."""


def _single(model: ModelSpec, hardware: Hardware, seq_len: int, precision: str,
            stack: str | None = None) -> Workload:
    return Workload(model=model, hardware=hardware, num_devices=1, seq_len=seq_len, global_batch=1,
                    micro_batch=1, plan=ParallelPlan(), devices_per_node=1, precision=precision,
                    stack=str(stack or "generic"))


def knob_values(hardware: Hardware, calibration: Mapping[str, Mapping[str, float]] | None = None,
                model: ModelSpec | None = None, stack: Any = None) -> KnobValues:
    """The efficiency knob values :func:`trainperf.predict.predict` uses for ``hardware``
    (``calibration``: device id -> knob values, as :func:`~trainperf.predict.step.load_calibration`
    returns)."""

    w = _single(model or ModelSpec.preset("debug"), hardware, 8, "fp32" if hardware.kind == "cpu" else
                next(p for p in ("bf16", "fp16", "fp32") if hardware.supports(p)))
    return resolve_knobs(w, calibration, stack=stack).numbers()


@lru_cache(maxsize=64)
def representative(model: ModelSpec, hardware: Hardware, seq_len: int, precision: str,
                   stack: str | None = None) -> Layout:
    """The :class:`~trainperf.predict.step_model.layout.Layout` of a single-device workload under
    ``stack``: the model, precision, device and kernel physics; the planner replaces its mesh with
    the candidates' plans as arrays."""

    return layout_of(_single(model, hardware, seq_len, precision, stack))


def predict(w: Workload, calibration: Mapping[str, Mapping[str, float]] | None = None,
            convention: str | None = None) -> ScalarFigures:
    """The scalar predictor's figures for one workload (:func:`trainperf.predict.predict`)."""

    kw: dict[str, Any] = {"convention": convention} if convention else {}
    p = _predict(w, calibration=calibration, **kw)
    return ScalarFigures(p.step_time_s, p.mfu_pct, p.memory_per_device_GiB, p.memory_capacity_GiB,
                         p.fits, p.bottleneck, dict(p.breakdown), dict(p.memory_breakdown_GiB), p)
