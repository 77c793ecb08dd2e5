"""Throughput, MFU, HFU, time and cost to train: the arithmetic every report shares.

MFU = model FLOPs per second per device / peak FLOP/s of one device (Chowdhery et al. 2022,
appendix B). HFU adds the FLOPs of activation recomputation to the numerator. The peak is the
dense peak of one named device variant for the run's dtype (catalog datasheet, local
calibration, or a value the user gave), and its source is always returned with the result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from trainperf.accounting.conventions import (
    DEFAULT_CONVENTION,
    get_convention,
    model_flops_per_token,
    recompute_flops_per_token,
)
from trainperf.errors import SpecError
from trainperf.specs.hardware import Hardware

SECONDS_PER_DAY = 86_400.0
DEFAULT_TRAIN_TOKENS = 1e12


@dataclass(frozen=True)
class Peak:
    """Peak FLOP/s of one device for one dtype, and where the number comes from."""

    tflops: float
    precision: str
    device: str
    source: str

    @property
    def flops(self) -> float:
        return self.tflops * 1e12


def resolve_peak(hardware: Hardware, precision: str, override_tflops: float | None = None) -> Peak:
    """The peak to divide by: ``override_tflops`` if given, else the catalog/calibrated value."""
    if override_tflops is not None:
        if isinstance(override_tflops, bool) or not override_tflops > 0:
            raise SpecError("peak_tflops", override_tflops, "a positive number of TFLOP/s")
        return Peak(float(override_tflops), precision, hardware.id, "given by the user (--peak-tflops)")
    flops = hardware.peak_flops(precision)  # raises with the supported dtypes / calibration hint
    src = hardware.sources.get(f"peak_tflops.{precision}", "catalog")
    if "given by the user" in src:
        return Peak(flops / 1e12, precision, hardware.id, f"{hardware.id} {precision} peak {src}")
    kind = "calibrated" if hardware.calibrated else "datasheet dense"
    title = src.split(", http")[0].split(". ")[0]  # the citation's title; `trainperf hw` shows it all
    return Peak(flops / 1e12, precision, hardware.id, f"{hardware.id} {precision} {kind} peak ({title})")


def _positive(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0 or v != v or v == float("inf"):
        raise SpecError(name, v, "a positive, finite number")
    return float(v)


@dataclass(frozen=True)
class Throughput:
    """Rates of one run (or one step) under a named convention and peak."""

    step_time_s: float
    tokens_per_step: int
    tokens_per_s: float
    tokens_per_s_per_device: float
    model_flops_per_token: float
    model_flops_per_seq: float
    hardware_flops_per_token: float
    tflops_per_device: float
    """Model TFLOP/s per device (the MFU numerator)."""
    hardware_tflops_per_device: float
    mfu_pct: float
    hfu_pct: float
    convention: str
    peak_tflops: float
    peak_source: str
    precision: str
    num_devices: int
    train_tokens: float
    days_to_train: float
    cost_usd: float | None = None
    usd_per_device_hour: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def throughput(
    workload: Any,
    *,
    step_time_s: float | None = None,
    tokens_per_s: float | None = None,
    tokens_per_s_per_device: float | None = None,
    convention: str = DEFAULT_CONVENTION,
    model_flops_per_seq: float | None = None,
    peak_tflops: float | None = None,
    train_tokens: float = DEFAULT_TRAIN_TOKENS,
    usd_per_device_hour: float | None = None,
    lora_fraction: float = 0.0,
) -> Throughput:
    """Rates of ``workload`` given exactly one of step time, global or per-device tokens/s.

    ``model_flops_per_seq`` overrides the convention's count (to reproduce a publication's own
    rounding, e.g. the 1.82e15 of NVIDIA's MaxText Llama2 70B recipe); the convention is then reported as ``given``.
    """
    _check_one_rate(step_time_s, tokens_per_s, tokens_per_s_per_device)
    n = workload.num_devices
    tokens_step = workload.tokens_per_step
    t = _step_time(tokens_step, n, step_time_s, tokens_per_s, tokens_per_s_per_device)
    tps = tokens_step / t
    tps_dev = tps / n
    seq = workload.seq_len
    flops = _flops_per_token(workload, seq, convention, model_flops_per_seq, lora_fraction)
    per_token = flops.model
    hw_per_token = per_token + flops.recompute
    peak = resolve_peak(workload.hardware, workload.precision, peak_tflops)
    tflops_dev = per_token * tps_dev / 1e12
    hw_tflops_dev = hw_per_token * tps_dev / 1e12
    train_tokens = _positive("train_tokens", train_tokens)
    days = train_tokens / tps / SECONDS_PER_DAY
    cost = None
    if usd_per_device_hour is not None:
        cost = _positive("usd_per_device_hour", usd_per_device_hour) * n * days * 24.0
    return Throughput(
        step_time_s=t, tokens_per_step=tokens_step, tokens_per_s=tps, tokens_per_s_per_device=tps_dev,
        model_flops_per_token=per_token, model_flops_per_seq=per_token * seq,
        hardware_flops_per_token=hw_per_token, tflops_per_device=tflops_dev,
        hardware_tflops_per_device=hw_tflops_dev, mfu_pct=100.0 * tflops_dev / peak.tflops,
        hfu_pct=100.0 * hw_tflops_dev / peak.tflops, convention=flops.convention, peak_tflops=peak.tflops,
        peak_source=peak.source, precision=workload.precision, num_devices=n,
        train_tokens=train_tokens, days_to_train=days, cost_usd=cost, usd_per_device_hour=usd_per_device_hour,
    )


def _check_one_rate(step_time_s: float | None, tokens_per_s: float | None,
                    tokens_per_s_per_device: float | None) -> None:
    """Reject a call that gives none, or more than one, of the three rates."""
    given = [x is not None for x in (step_time_s, tokens_per_s, tokens_per_s_per_device)]
    if sum(given) != 1:
        raise SpecError("rate", f"{sum(given)} given",
                        "exactly one of --step-time, --tokens-per-s, --tokens-per-s-per-device")


def _step_time(tokens_step: int, num_devices: int, step_time_s: float | None, tokens_per_s: float | None,
               tokens_per_s_per_device: float | None) -> float:
    """Seconds per step from the one rate given: tokens per step / (global) tokens per second."""
    if step_time_s is not None:
        return _positive("step_time_s", step_time_s)
    if tokens_per_s is not None:
        return tokens_step / _positive("tokens_per_s", tokens_per_s)
    return tokens_step / (_positive("tokens_per_s_per_device", tokens_per_s_per_device) * num_devices)


@dataclass(frozen=True)
class _FlopsPerToken:
    """Model FLOPs per token (the MFU numerator's), the recomputation FLOPs HFU adds, and the
    name of the convention that counted them."""

    model: float
    recompute: float
    convention: str


def _flops_per_token(workload: Any, seq: int, convention: str, model_flops_per_seq: float | None,
                     lora_fraction: float) -> _FlopsPerToken:
    """FLOPs per token under ``convention`` (or the given per-sequence count / ``seq``), plus the
    activation recomputation's (:mod:`trainperf.accounting.conventions`)."""
    if model_flops_per_seq is not None:
        per_token = _positive("model_flops_per_seq", model_flops_per_seq) / seq
        conv_name = f"given ({model_flops_per_seq:.6g} per sequence)"
    else:
        get_convention(convention)
        # A LoRA fine-tune's adapters are counted as they run (an explicit fraction wins).
        lora = getattr(workload, "lora", None) if not lora_fraction else None
        per_token = model_flops_per_token(workload.model, seq, convention, lora_fraction, lora)
        conv_name = convention
    recompute = recompute_flops_per_token(workload.model, seq, workload.activation_checkpointing, convention,
                                          workload.plan.pp * workload.plan.vpp)
    return _FlopsPerToken(per_token, recompute, conv_name)


def mfu_pct(model_flops_per_token: float, tokens_per_s_per_device: float, peak_tflops: float) -> float:
    """MFU in percent from its three ingredients."""
    return 100.0 * model_flops_per_token * tokens_per_s_per_device / (peak_tflops * 1e12)


def days_to_train(train_tokens: float, tokens_per_s: float) -> float:
    """(total tokens) / (tokens per second) / 86400 (the time-to-train formula of NVIDIA's
    MaxText Llama2 70B recipe)."""
    return _positive("train_tokens", train_tokens) / _positive("tokens_per_s", tokens_per_s) / SECONDS_PER_DAY


@dataclass(frozen=True)
class TimeAndCost:
    """How long and how much: ``train_tokens`` at ``tokens_per_s`` on ``num_devices`` devices.

    ``days = train_tokens / tokens_per_s / 86400``; ``device_hours = days x 24 x num_devices``;
    ``cost_usd = device_hours x usd_per_device_hour`` (``None`` without a price);
    ``usd_per_billion_tokens`` is the price of 1e9 tokens at that rate (``None`` without a price).
    """

    train_tokens: float
    tokens_per_s: float
    num_devices: int
    days: float
    device_hours: float
    usd_per_device_hour: float | None = None
    cost_usd: float | None = None
    usd_per_billion_tokens: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def sentence(self) -> str:
        """One line: ``1.5e+13 tokens in 89.37 days on 2,048 devices = 4,392,960 device-hours =
        $10,982,400 at $2.50 per device-hour``."""
        text = (f"{self.train_tokens:.3g} tokens in {self.days:,.2f} days on {self.num_devices:,} "
                f"device{'s' if self.num_devices != 1 else ''} = {self.device_hours:,.0f} device-hours")
        if self.cost_usd is not None:
            text += f" = ${self.cost_usd:,.0f} at ${self.usd_per_device_hour:,.2f} per device-hour"
        return text


def time_and_cost(train_tokens: float, tokens_per_s: float, num_devices: int,
                  usd_per_device_hour: float | None = None) -> TimeAndCost:
    """The :class:`TimeAndCost` of training ``train_tokens`` at ``tokens_per_s`` (global) on
    ``num_devices`` devices, priced at ``usd_per_device_hour`` when given."""
    days = days_to_train(train_tokens, tokens_per_s)
    hours = days * 24.0 * num_devices
    price = None if usd_per_device_hour is None else _positive("usd_per_device_hour", usd_per_device_hour)
    return TimeAndCost(
        train_tokens=train_tokens, tokens_per_s=tokens_per_s, num_devices=num_devices, days=days,
        device_hours=hours, usd_per_device_hour=price, cost_usd=None if price is None else hours * price,
        usd_per_billion_tokens=None if price is None else price * num_devices * 1e9 / tokens_per_s / 3600.0)
