"""What the framework callbacks share: counting a batch's tokens, resolving FLOPs per token and
the peak, and turning the meter's per-step records into the rates of one logging window."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainperf.accounting.plausibility import check_mfu
from trainperf.errors import SpecError
from trainperf.records import StepRecord


def batch_tokens(batch: Any, *, count_padding: bool = False) -> tuple[Any, int | None]:
    """Tokens in ``batch`` and its sequence length.

    Counts the ``attention_mask``'s ones when there is one (padding is not training data) unless
    ``count_padding``, else the elements of ``input_ids`` (or of the batch tensor itself, or of
    the first tensor of a tuple/list). Returns the count as a 0-d tensor where it comes from a
    device tensor, so reading it does not synchronise the device mid-step; ``(0, None)`` for a
    batch with no token ids.
    """
    ids = mask = None
    if isinstance(batch, Mapping):
        ids, mask = batch.get("input_ids"), batch.get("attention_mask")
    elif hasattr(batch, "shape") and hasattr(batch, "numel"):
        ids = batch
    elif isinstance(batch, list | tuple):
        ids = next((x for x in batch if hasattr(x, "shape") and hasattr(x, "numel")), None)
    if ids is None:
        return 0, None
    seq = int(ids.shape[-1]) if len(ids.shape) else 1
    if mask is not None and not count_padding:
        return mask.sum(), seq
    return int(ids.numel()), seq


def resolve_peak_tflops(peak_tflops: float | None, device: str | None, precision: str) -> tuple[float | None, str | None]:
    """The dense peak per device for MFU: given, or the catalog's for ``device`` and ``precision``."""
    if peak_tflops is not None:
        if isinstance(peak_tflops, bool) or not peak_tflops > 0:
            raise SpecError("peak_tflops", peak_tflops, "a positive number of TFLOP/s")
        return float(peak_tflops), "given by the user"
    if device is None:
        return None, None
    from trainperf.accounting.throughput import resolve_peak
    from trainperf.specs.hardware import get_hardware

    peak = resolve_peak(get_hardware(device), precision)
    return peak.tflops, peak.source


@dataclass
class Window:
    """Steps recorded since the last log: their rates over the window (total tokens / total time).

    Warm-up steps are left out, unless the window holds nothing else (then they are used, so a
    log at the first step still carries figures). An MFU above 100% (impossible: the peak or
    the token count is wrong) is not logged; the meter has already printed why, once.
    """

    steps: list[tuple[StepRecord, bool]] = field(default_factory=list)

    def add(self, record: StepRecord, warmup: bool) -> None:
        self.steps.append((record, warmup))

    def rates(self, num_devices: int, flops_per_token: float | None, peak_tflops: float | None) -> dict[str, float]:
        recs = [r for r, warm in self.steps if not warm] or [r for r, _ in self.steps]
        if not recs:
            return {}
        seconds = sum(r.step_time_s for r in recs)
        tokens = sum(r.tokens or 0 for r in recs)
        tps = tokens / seconds
        out = {"tokens_per_s": tps, "tokens_per_s_per_device": tps / num_devices,
               "step_time_s": seconds / len(recs)}
        if flops_per_token:
            tflops = flops_per_token * tps / num_devices / 1e12
            out["tflops_per_device"] = tflops
            if peak_tflops and check_mfu(100.0 * tflops / peak_tflops, peak_tflops).ok:
                out["mfu_pct"] = 100.0 * tflops / peak_tflops
        return out

    def clear(self) -> None:
        self.steps.clear()
