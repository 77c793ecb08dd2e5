"""A bench run's ``summary.json`` and its console summary, computed from ``steps.jsonl`` alone.

The JSONL header carries what the summary needs (convention, peaks and their labels, warm-up
steps), so the summary can be written by the launching process after torchrun exits, after a
crash, or by the sbatch script (``python -m trainperf.measure.results OUT_DIR``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from trainperf.accounting.plausibility import check_mfu
from trainperf.accounting.summarize import WARMUP_RULE, default_warmup_steps, summarize
from trainperf.errors import TrainperfError
from trainperf.records import RunRecord
from trainperf.records.jsonl import read_run


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def build_summary(out_dir: str | Path, *, exit_code: int = 0) -> dict[str, Any]:
    """The summary of the run recorded in ``out_dir/steps.jsonl`` (see the module docstring).

    ``interrupted`` is true when the record has no ``end`` line, says so, or the processes
    exited non-zero; ``interrupted_at_step`` is then the first step that did not finish.
    """
    out = Path(out_dir)
    run = read_run(out / "steps.jsonl")
    meta = run.meta
    convention = meta.get("convention", "megatron")
    peaks: list[dict[str, Any]] = list(meta.get("peaks") or [])
    primary = peaks[0] if peaks else None
    warmup, rule = _warmup(run)
    measured = run if warmup < len(run.steps) else dataclasses.replace(run, steps=[])
    s = summarize(measured, convention=convention, peak_tflops=primary["tflops"] if primary else None,
                  warmup=warmup if measured is run else 0)
    d = s.to_dict()
    for key in ("train_tokens", "days_to_train"):  # a default token count the bench never asked about
        d.pop(key, None)
    d.update(steps_total=len(run.steps), warmup_steps=min(warmup, len(run.steps)), warmup_rule=rule)
    d["step_time_spread"] = spread(d.get("step_time_p10_s"), d.get("step_time_p90_s"))
    interrupted = bool(run.interrupted or exit_code != 0 or meta.get("interrupted"))
    last = run.steps[-1].step if run.steps else None
    first = int(meta.get("first_step") or 1)
    d.update(
        steps_completed=len(run.steps), last_step=last, interrupted=interrupted,
        interrupted_at_step=(meta.get("interrupted_at_step") or ((last + 1) if last is not None else first))
        if interrupted else None,
        exit_code=exit_code, stop_signal=meta.get("stop_signal") if interrupted else None,
    )
    if primary is not None:
        d["peak_source"] = primary["label"]
    elif d.get("peak_source") is None:
        d["peak_source"] = "no peak: MFU unavailable"
    d["mfu_by_peak"] = [_checked({**p, "mfu_pct": (100.0 * d["tflops_per_device"] / p["tflops"])
                                  if d.get("tflops_per_device") else None}, p["tflops"], p["label"])
                        for p in peaks]
    if primary is not None and d.get("mfu_pct") is not None:
        verdict = check_mfu(d["mfu_pct"], primary["tflops"], primary["label"])
        if not verdict.ok:
            d.update(mfu_pct=None, hfu_pct=None, mfu_invalid=verdict.reason)
    choice = meta.get("precision") or {}
    d["precision"] = run.workload.precision if run.workload is not None else choice.get("precision")
    d["precision_requested"] = choice.get("requested")
    d["precision_reason"] = choice.get("reason")
    d["parallelism"] = meta.get("parallelism")
    d["data"] = meta.get("data")
    d["fp8"] = meta.get("fp8")
    d["moe"] = _moe_summary(meta.get("moe"), measured.steps[warmup:] if measured is run else [])
    d["workload"] = run.workload.describe() if run.workload is not None else None
    return _clean(d)


SPREAD_WARNING = 1.5
"""p90 / p10 of the measured step times above which the summary warns that the steps varied
(a quiet machine keeps them within a few percent)."""


def spread(p10: float | None, p90: float | None) -> float | None:
    """p90 / p10 of the measured step times (``None`` when either is missing or p10 is 0)."""
    return p90 / p10 if p10 and p90 is not None and p10 > 0 else None


def _spread_line(d: dict[str, Any]) -> str | None:
    """The warning a wide spread of step times deserves, or ``None``."""
    r = d.get("step_time_spread")
    if r is None or r <= SPREAD_WARNING:
        return None
    return (f"warning: step times varied widely (p90 is {r:.2f}x p10): other processes were likely using this "
            "machine's cores; the median is the figure to quote, and a quiet machine runs faster and steadier "
            "(rerun, or give --steps more steps)")


def _per_process_line(d: dict[str, Any], p: dict[str, Any]) -> str | None:
    """Why a multi-process CPU run's MFU is per process: each process is one device with its
    share of the cores, and its peak is that share's (``None`` for one process or a GPU)."""
    threads, n = p.get("threads"), d.get("num_devices") or 1
    if not threads or n <= 1:
        return None
    return (f"  MFU per device: each of the {n} processes is one device running {threads} thread(s), and its peak "
            f"is the calibrated matmul rate of {threads} thread(s), not of the whole CPU; a run with another "
            "--nproc is measured against another peak, so compare --nproc settings by global tokens/s, not MFU")


def _moe_summary(options: dict[str, Any] | None, steps: list[Any]) -> dict[str, Any] | None:
    """An MoE run's router options and the medians of its measured steps' MoE figures."""
    if options is None:
        return None
    out = dict(options)
    for key in ("moe_imbalance", "moe_imbalance_max", "moe_rank_imbalance", "moe_dropped_pct", "moe_aux_loss",
                "moe_all_to_all_pct"):
        values = [s.extra[key] for s in steps if isinstance((s.extra or {}).get(key), int | float)]
        out[key.removeprefix("moe_") + "_median"] = statistics.median(values) if values else None
    return out


def _warmup(run: RunRecord) -> tuple[int, str]:
    """The warm-up steps the run's own meter flagged, and the rule that made them.

    The meter decides from the planned run length (``--warmup``, else 10% of the planned steps,
    at least 1, at most 10) and writes it in the header, so an interrupted run leaves out the
    same steps it flagged while running, never one that was flagged warm-up. Records without it
    (older ones) fall back to the rule on the steps present.
    """
    meta = run.meta
    given = meta.get("warmup_given")
    flagged = meta.get("warmup_steps")
    if isinstance(flagged, int) and not isinstance(flagged, bool) and flagged >= 0:
        if given is not None:
            return flagged, f"first {flagged} steps (given)"
        planned = meta.get("planned_steps")
        of = f" of the {planned:,} planned" if isinstance(planned, int) and planned > 0 else " planned"
        return flagged, f"first {flagged} steps, the run's own warm-up: {WARMUP_RULE.removeprefix('first ')}{of}"
    if isinstance(given, int) and given >= 0:
        return given, f"first {given} steps (given)"
    k = default_warmup_steps(len(run.steps))
    return k, WARMUP_RULE


def _checked(p: dict[str, Any], peak: float, label: str) -> dict[str, Any]:
    """``p`` with its ``mfu_pct`` replaced by None and ``mfu_invalid`` set when above 100%."""
    if p.get("mfu_pct") is None:
        return p
    verdict = check_mfu(p["mfu_pct"], peak, label)
    return p if verdict.ok else {**p, "mfu_pct": None, "mfu_invalid": verdict.reason}


def write_summary(out_dir: str | Path, *, exit_code: int = 0) -> dict[str, Any]:
    """Build the summary and write ``out_dir/summary.json``; returns it."""
    d = build_summary(out_dir, exit_code=exit_code)
    from trainperf.records.output_path import write_text_atomic

    write_text_atomic(Path(out_dir) / "summary.json", json.dumps(d, indent=2) + "\n", what="--out", force=True)
    return d


def _f(x: Any, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def summary_text(d: dict[str, Any], out_dir: str | Path | None = None) -> str:
    """The summary for a person: what ran, steady-state rates, the peak and convention used."""
    lines = []
    if d.get("workload"):
        lines.append(f"run: {d['workload']}")
    if d.get("parallelism"):
        lines.append(f"parallelism: {d['parallelism']}; data: {d.get('data')}")
    if d.get("precision_reason"):
        lines.append(f"precision: {d.get('precision')} ({d['precision_reason']})")
    if d["steps_completed"] == 0:
        lines.append("no step finished: nothing to summarise")
    elif not d.get("steps_measured"):
        lines.append(f"steps: {d['steps_completed']} completed, none measured: the run stopped within its "
                     f"warm-up ({d['warmup_rule']}); no steady-state figure")
    else:
        lines.append(f"steps: {d['steps_completed']} completed, {d['steps_measured']} measured "
                     f"({d['warmup_steps']} warm-up excluded: {d['warmup_rule']})")
        lines.append(f"step time: median {_f(d['step_time_median_s'], '.4f')} s, p10 "
                     f"{_f(d['step_time_p10_s'], '.4f')} s, p90 {_f(d['step_time_p90_s'], '.4f')} s")
        lines += [x for x in (_spread_line(d),) if x]
        lines.append(f"tokens/s: {_f(d['tokens_per_s'], ',.1f')} global, "
                     f"{_f(d['tokens_per_s_per_device'], ',.1f')} per device "
                     f"({d.get('num_devices')} device(s), {_f(d.get('tokens_per_step'), ',')} tokens/step)")
        active = ", active parameters: top-k + shared experts" if d.get("moe") else ""
        lines.append(f"model TFLOP/s per device: {_f(d['tflops_per_device'], '.4f')} "
                     f"(convention {d['convention']}, {_f(d.get('model_flops_per_token'), '.4g')} FLOPs/token{active})")
        if d["mfu_by_peak"]:
            for p in d["mfu_by_peak"]:
                if p.get("mfu_invalid"):
                    lines.append(f"MFU: invalid ({p['mfu_invalid']})")
                else:
                    lines.append(f"MFU: {_f(p['mfu_pct'], '.2f')}% of {p['tflops']:.4g} TFLOP/s ({p['label']})")
                    lines += [x for x in (_per_process_line(d, p),) if x]
        else:
            lines.append(f"MFU: unavailable ({d.get('peak_source')})")
        if d.get("hfu_pct") is not None and d.get("hfu_pct") != d.get("mfu_pct"):
            lines.append(f"HFU (with recompute): {d['hfu_pct']:.2f}%")
        lines += _feature_lines(d)
        lines.append(f"loss (last): {_f(d.get('loss_last'), '.4f')}; peak memory per process: "
                     f"{_f(d.get('memory_max_GiB'), '.3f')} GiB")
    if d.get("interrupted"):
        by = f"stopped by {d['stop_signal']}; " if d.get("stop_signal") else ""
        lines.append(f"INTERRUPTED at step {d.get('interrupted_at_step')} "
                     f"({by}every finished step is in the run record; exit code {d.get('exit_code')})")
    if out_dir is not None:
        lines.append(f"files: {Path(out_dir) / 'steps.jsonl'}, summary.json, workload.toml")
    return "\n".join(lines)


def _feature_lines(d: dict[str, Any]) -> list[str]:
    """Float8 and MoE lines of the summary (none for a plain run)."""
    lines = []
    fp8 = d.get("fp8")
    if fp8:
        from trainperf.measure.fp8 import group_names

        kept = ", ".join(group_names(fp8.get("kept_16bit") or {})) or "none"
        lines.append(f"Float8: {fp8.get('recipe')} recipe (torchao {fp8.get('torchao')}), "
                     f"{fp8.get('converted_linears')} linears converted; kept in 16-bit: {kept}")
    moe = d.get("moe")
    if moe:
        a2a = moe.get("all_to_all_pct_median")
        how = "grouped GEMMs (torch._grouped_mm)" if moe.get("experts_gemm") == "grouped" else "a loop over experts"
        lines.append(f"MoE: experts as {how}; load max/mean (median over steps) "
                     f"{_f(moe.get('imbalance_median'), '.2f')} (worst layer {_f(moe.get('imbalance_max_median'), '.2f')})"
                     + (f"; all-to-all {a2a:.1f}% of the step" if a2a is not None else "")
                     + (f"; dropped {moe['dropped_pct_median']:.2f}% of assignments"
                        if moe.get("capacity_factor") is not None and moe.get("dropped_pct_median") is not None
                        else "; dropless"))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainperf.measure.results",
                                description="write summary.json for a bench output directory")
    p.add_argument("out_dir")
    p.add_argument("--exit-code", type=int, default=0, help="the training processes' exit code")
    a = p.parse_args(argv)
    from trainperf.measure.failures import failure_line, read_failures

    failures = read_failures(a.out_dir)
    try:
        d = write_summary(a.out_dir, exit_code=a.exit_code)
    except TrainperfError as e:
        if failures:
            print(failure_line(failures, a.out_dir, steps_kept=0, last_step=None), file=sys.stderr)
        print(f"error: {e}", file=sys.stderr)
        return 2
    if failures:
        print(failure_line(failures, a.out_dir, steps_kept=d["steps_completed"], last_step=d["last_step"]),
              file=sys.stderr)
    print(summary_text(d, a.out_dir))
    from trainperf.records.output_path import record_run_files

    with contextlib.suppress(OSError, TrainperfError):  # the job's rank logs and failure reports: its own
        record_run_files(a.out_dir)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
