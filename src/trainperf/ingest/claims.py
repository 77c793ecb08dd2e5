"""What a log claimed next to trainperf's recomputation, with the reason for each difference.

A claimed TFLOP/s per device differs from trainperf's by two factors, reported separately:

* convention factor = (FLOPs per token the log counts) / (FLOPs per token of the chosen
  convention). The log's count is implied by its own figures: claimed TFLOP/s per device /
  claimed tokens/s per device (or trainperf's tokens/s per device when the log gives no rate;
  Megatron computes both from the same iteration time). The nearest named convention is given.
* throughput factor = the rest: timing basis (the log's window or last step vs trainperf's
  steady median), warm-up, tokens per step.

A claimed MFU adds the peak factor = trainperf's peak / the log's peak (the log's peak is
implied by claimed TFLOP/s / claimed MFU, or stated in the log, or documented for the
framework). Scope: a tokens/s figure ~N times trainperf's per-device one is a global figure.
"""

from __future__ import annotations

from typing import Any

from trainperf.accounting.conventions import CONVENTIONS, model_flops_per_token
from trainperf.records.run_record import RunRecord
from trainperf.records.summary import Summary


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def conventions_table(run: RunRecord, summary: Summary) -> list[dict[str, Any]]:
    """Per convention: FLOPs per token, TFLOP/s per device and MFU at trainperf's measured rate,
    and the log's claimed TFLOP/s divided by it (1.00 marks the log's own convention)."""
    w = run.workload
    if w is None or not summary.tokens_per_s_per_device:
        return []
    claimed = summary.claimed.get("tflops_per_device")
    rows = []
    for name in CONVENTIONS:
        if name == "lora" and getattr(w, "lora", None) is None:
            continue  # LoRA's count is for fine-tunes; this run trains every parameter
        fpt = model_flops_per_token(w.model, w.seq_len, name, lora=getattr(w, "lora", None))
        tflops = fpt * summary.tokens_per_s_per_device / 1e12
        rows.append({
            "convention": name, "flops_per_token": fpt, "tflops_per_device": tflops,
            "mfu_pct": 100.0 * tflops / summary.peak_tflops if summary.peak_tflops else None,
            "claimed_over_this": _ratio(claimed, tflops),
        })
    return rows


def implied_flops_per_token(summary: Summary) -> tuple[float | None, str]:
    c = summary.claimed
    tf = c.get("tflops_per_device")
    if tf is None:
        return None, ""
    if c.get("tokens_per_s_per_device"):
        return tf * 1e12 / c["tokens_per_s_per_device"], "claimed TFLOP/s per device / claimed tokens/s per device"
    if c.get("tokens_per_s") and summary.num_devices:
        return tf * 1e12 * summary.num_devices / c["tokens_per_s"], "claimed TFLOP/s per device / (claimed tokens/s / devices)"
    if summary.tokens_per_s_per_device:
        return tf * 1e12 / summary.tokens_per_s_per_device, "claimed TFLOP/s per device / trainperf tokens/s per device"
    return None, ""


def nearest_convention(run: RunRecord, fpt: float) -> tuple[str, float] | None:
    """The named convention(s) closest to ``fpt`` FLOPs per token (several names when they give
    the same count for this model, e.g. palm and nemo-legacy for Llama 2), and the relative gap."""
    w = run.workload
    if w is None:
        return None
    # a LoRA run's adapters counted per matmul, as the bench counts them
    counts = {n: model_flops_per_token(w.model, w.seq_len, n, lora=getattr(w, "lora", None)) for n in CONVENTIONS}
    best = min(counts, key=lambda n: abs(counts[n] / fpt - 1))
    same = [n for n in counts if abs(counts[n] / counts[best] - 1) < 1e-4]
    return " / ".join(same), fpt / counts[best] - 1


_RATE_REASON = ("timing basis: the log's rate is its own (per-line window or last interval); trainperf's is "
                "tokens per step / steady median step time")


def _rate_row(metric: str, ours: float | None, claimed: float | None, per_device: bool,
              n: int | None) -> dict[str, Any] | None:
    """The row of a claimed rate (``None`` when the log claims none), its reason read from the
    ratio: same basis, a scope mismatch over ``n`` devices, or the timing basis."""
    if claimed is None:
        return None
    r = _ratio(claimed, ours)
    if r is None:
        reason = "no trainperf figure (workload unknown)"
    elif abs(r - 1) <= 0.01:
        reason = "same basis (within 1%)"
    elif per_device and n and n > 1 and abs(r / n - 1) <= 0.05:
        reason = f"scope: the log's figure is global (all {n} devices), trainperf's is per device"
    elif not per_device and n and n > 1 and abs(r * n - 1) <= 0.05:
        reason = f"scope: the log's figure is per device, trainperf's is global ({n} devices)"
    else:
        reason = f"{_RATE_REASON}; differs by {r - 1:+.1%}"
    return {"metric": metric, "trainperf": ours, "claimed": claimed, "ratio": r, "reason": reason}


def _tflops_row(run: RunRecord, summary: Summary, tf_claim: float) -> tuple[dict[str, Any], float | None]:
    """The claimed TFLOP/s per device row, split into convention and throughput factors, and the
    convention factor implied by the log's own figures (``None`` when they do not imply one)."""
    conv_factor = None
    r = _ratio(tf_claim, summary.tflops_per_device)
    fpt, how = implied_flops_per_token(summary)
    parts = []
    if fpt and summary.model_flops_per_token:
        conv_factor = fpt / summary.model_flops_per_token
        near = nearest_convention(run, fpt)
        named = f" = the {near[0]} convention ({near[1]:+.2%})" if near and abs(near[1]) < 0.015 else (
            f", nearest named: {near[0]} ({near[1]:+.2%})" if near else "")
        parts.append(f"convention: the log counts {fpt:.4g} FLOPs/token ({how}){named}; trainperf's "
                     f"{summary.convention} counts {summary.model_flops_per_token:.4g} "
                     f"(factor {conv_factor:.4f})")
        if r is not None:
            parts.append(f"throughput/timing factor {r / conv_factor:.4f}")
    elif r is None:
        parts.append("no trainperf figure (workload unknown)")
    row = {"metric": "tflops_per_device", "trainperf": summary.tflops_per_device, "claimed": tf_claim,
           "ratio": r, "reason": "; ".join(parts) or "-"}
    return row, conv_factor


def _log_peak(tf_claim: float | None, mfu_claim: float,
              claimed_peak_tflops: float | None) -> tuple[float | None, str]:
    """The peak TFLOP/s the log divides by, and how it is known: implied by its claimed TFLOP/s
    and MFU when it gives both, else the stated or documented one."""
    if tf_claim and mfu_claim:
        return tf_claim / (mfu_claim / 100.0), "claimed TFLOP/s / claimed MFU"
    return claimed_peak_tflops, "stated in the log or documented for the framework"


def _mfu_row(run: RunRecord, summary: Summary, mfu_claim: float, tf_claim: float | None,
             conv_factor: float | None, claimed_convention: str | None,
             claimed_peak_tflops: float | None) -> dict[str, Any]:
    """The claimed MFU row, split into peak, convention and throughput factors (the convention
    factor from the log's figures, else from the framework's documented convention)."""
    r = _ratio(mfu_claim, summary.mfu_pct)
    parts = []
    peak, peak_how = _log_peak(tf_claim, mfu_claim, claimed_peak_tflops)
    if peak and summary.peak_tflops:
        pf = summary.peak_tflops / peak
        parts.append(f"peak: the log divides by {peak:.4g} TFLOP/s ({peak_how}), trainperf by "
                     f"{summary.peak_tflops:.4g} ({summary.peak_source}) (factor {pf:.4f})")
        if conv_factor is None and claimed_convention and run.workload is not None and summary.model_flops_per_token:
            conv_factor = model_flops_per_token(run.workload.model, run.workload.seq_len,
                                                claimed_convention) / summary.model_flops_per_token
            parts.append(f"convention: the framework documents {claimed_convention} "
                         f"(factor {conv_factor:.4f})")
        elif conv_factor is not None:
            parts.append(f"convention factor {conv_factor:.4f}")
        if r is not None and conv_factor:
            parts.append(f"throughput/timing factor {r / (pf * conv_factor):.4f}")
    elif r is None:
        parts.append("no trainperf figure (workload or peak unknown)")
    return {"metric": "mfu_pct", "trainperf": summary.mfu_pct, "claimed": mfu_claim, "ratio": r,
            "reason": "; ".join(parts) or "-"}


def _run_mean_row(summary: Summary, run_claims: dict[str, Any]) -> dict[str, Any] | None:
    """The step time row of a run-level steps/s claim (``None`` without one)."""
    if not run_claims.get("claimed_train_steps_per_second"):
        return None
    mean_t = 1.0 / run_claims["claimed_train_steps_per_second"]
    return {"metric": "step_time_s (run mean)", "trainperf": summary.step_time_median_s,
            "claimed": mean_t, "ratio": _ratio(mean_t, summary.step_time_median_s),
            "reason": "the log's is train_runtime / steps over the whole run (start-up, warm-up, "
                      "evaluation, checkpointing included); trainperf's is the steady median"}


def compare_claims(run: RunRecord, summary: Summary, *, claimed_convention: str | None = None,
                   claimed_peak_tflops: float | None = None,
                   run_claims: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rows ``{metric, trainperf, claimed, ratio (claimed / trainperf), reason}``."""
    c = summary.claimed
    n = summary.num_devices
    rows: list[dict[str, Any]] = []
    for row in (_rate_row("tokens_per_s", summary.tokens_per_s, c.get("tokens_per_s"), False, n),
                _rate_row("tokens_per_s_per_device", summary.tokens_per_s_per_device,
                          c.get("tokens_per_s_per_device"), True, n)):
        if row is not None:
            rows.append(row)

    conv_factor = None
    tf_claim = c.get("tflops_per_device")
    if tf_claim is not None:
        tf_row, conv_factor = _tflops_row(run, summary, tf_claim)
        rows.append(tf_row)

    mfu_claim = c.get("mfu_pct")
    if mfu_claim is not None:
        rows.append(_mfu_row(run, summary, mfu_claim, tf_claim, conv_factor, claimed_convention,
                             claimed_peak_tflops))

    mean_row = _run_mean_row(summary, run_claims or {})
    if mean_row is not None:
        rows.append(mean_row)
    return rows
