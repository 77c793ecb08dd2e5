"""``trainperf compare``: several runs side by side in one table, on one FLOP convention.

A RUN is a trainperf JSONL run record, a bench output directory (``steps.jsonl`` plus
``workload.toml``), another framework's log (parsed as by ``trainperf parse``; append
``@WORKLOAD.toml`` to complete what the log does not state), or ``published`` /
``published:KEY`` for rows of the packaged published-runs table (a row or table id, a device,
a vendor or a pattern: :func:`~trainperf.predict.runs_table.published_records`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from trainperf.accounting.conventions import lora_counted_in_full_note
from trainperf.accounting.plausibility import check_mfu
from trainperf.cli.common import add_convention_argument, add_json_argument, print_json, shown
from trainperf.cli.common import table as common_table
from trainperf.errors import InputFileError
from trainperf.numbers import fmt
from trainperf.records.jsonl import is_trainperf_jsonl
from trainperf.report.load import read_record, reading_notes

HELP = "several runs (logs, trainperf runs, published records) side by side"
_WORKLOAD_SUFFIXES = (".toml", ".json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="trainperf JSONL / bench dir / framework log[@WORKLOAD.toml] / published:ROW")
    add_convention_argument(parser)
    parser.add_argument("--warmup", type=int, metavar="N", help="steps to exclude as warm-up (default: 10%%)")
    add_json_argument(parser)


def _split_workload(arg: str) -> tuple[str, str | None]:
    if "@" in arg:
        path, _, wl = arg.rpartition("@")
        if wl.lower().endswith(_WORKLOAD_SUFFIXES) and path:
            return path, wl
    return arg, None


def _published(key: str) -> list[Any]:
    """Published run records: every mapped row of the packaged table, or those ``key`` names
    (:func:`~trainperf.predict.runs_table.published_records`)."""
    from trainperf.predict.runs_table import published_records

    return published_records(key)


def _mfu_warning(name: str, mfu_pct: float | None, peak: float | None, source: str | None,
                 what: str = "mfu_pct") -> str | None:
    """One line if ``mfu_pct`` is above 100% of its peak (impossible), else None."""
    if mfu_pct is None:
        return None
    verdict = check_mfu(mfu_pct, peak or 0.0, source or "", field=what)
    return None if verdict.ok else f"{name}: {verdict.reason}"


def _row_from_summary(run: Any, s: Any, kind: str, claimed: dict[str, Any],
                      notes: list[str] | None = None) -> dict[str, Any]:
    from trainperf.cli.parse import mfu_problems

    w = run.workload
    lora_note = lora_counted_in_full_note(run.name, getattr(w, "lora", None) is not None, s.convention)
    notes = [*(notes or ()), *([lora_note] if lora_note else [])]
    impossible = mfu_problems(s)  # a non-finite MFU is a one-line error (exit 2)
    # the summary's own MFU is judged by mfu_problems; a claim above 100% is flagged here
    warnings = [m for m in (_mfu_warning(run.name, claimed.get("mfu_pct"), None, "the run's own claim"),) if m]
    return {
        "run": run.name, "source": kind,
        "model": w.model.name if w is not None else None,
        "device": w.hardware.id if w is not None else None,
        "num_devices": s.num_devices, "steps": s.steps_measured,
        "step_time_median_s": s.step_time_median_s, "tokens_per_s": s.tokens_per_s,
        "tokens_per_s_per_device": s.tokens_per_s_per_device, "tflops_per_device": s.tflops_per_device,
        "mfu_pct": s.mfu_pct, "convention": s.convention,
        "mfu_impossible": impossible[0] if impossible else None,
        "claimed_tflops_per_device": claimed.get("tflops_per_device"),
        "claimed_mfu_pct": claimed.get("mfu_pct"),
        "warnings": warnings,
        "interrupted": run.interrupted,
        "skipped_lines": run.meta.get("skipped_lines", 0),
        "skip_reasons": dict(run.meta.get("skip_reasons") or {}),
        "notes": notes,
        "no_mfu_because": None if s.mfu_pct is not None else (
            "workload unknown (append @WORKLOAD.toml to a log)" if w is None
            else f"MFU not computed ({s.peak_source})" if s.peak_source else "no peak for this device"),
    }


def load_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    from trainperf.accounting.summarize import summarize
    from trainperf.cli.parse import parse_and_summarize

    rows: list[dict[str, Any]] = []
    for arg in args.runs:
        if arg == "published" or arg.startswith("published:"):
            for run in _published(arg.partition(":")[2]):
                s = summarize(run, convention=args.convention, warmup=args.warmup)
                rows.append(_row_from_summary(run, s, "published", s.claimed))
            continue
        path, wl = _split_workload(arg)
        p = Path(path)
        if not p.exists():
            raise InputFileError(f"run {path!r} does not exist")
        if wl is None and is_trainperf_jsonl(p):
            loaded = read_record(p)
            run = loaded.run
            run.meta["name"] = _label(p, run.name)
            s = summarize(run, convention=args.convention, warmup=args.warmup)
            rows.append(_row_from_summary(run, s, run.source, s.claimed, loaded.notes))
            continue
        out = parse_and_summarize(path, fmt_name=None, workload_path=wl, overrides={},
                                  convention=args.convention, warmup=args.warmup)
        run = out["_run"]
        rows.append(_row_from_summary(run, out["_summary"], f"log:{out['format']}", out["claimed"],
                                      reading_notes(run, path)))
    return _unique(rows)


def _label(path: Path, own_name: str) -> str:
    """A run's row label: the directory the user named, the record's own name when it is its
    file's, else the file and the record's name (a parsed log saved as ``titan.jsonl`` is
    ``titan.jsonl (run of titan_llama3_8b_8xh100.log)``)."""
    if path.is_dir() or own_name in ("", "bench"):
        return path.name
    if own_name in (path.name, path.stem):
        return own_name
    return f"{path.name} (run of {own_name})"


def _unique(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with distinct labels: a label met again gets ``#2``, ``#3``..."""
    seen: dict[str, int] = {}
    for r in rows:
        seen[r["run"]] = seen.get(r["run"], 0) + 1
        if seen[r["run"]] > 1:
            r["run"] = f"{r['run']}#{seen[r['run']]}"
    return rows


def table(rows: Any, headers: list[str]) -> str:
    """A plain table of already formatted cells (no re-parsing of numbers)."""
    return common_table(rows, headers, floatfmt="g", numparse=False)


def run(args: argparse.Namespace) -> int:
    rows = load_rows(args)
    if args.json:
        print_json({"convention": args.convention, "runs": rows})
        return 0
    print(f"convention: {args.convention} (MFU against each run's own device peak)")
    print(table([(r["run"] + (" (interrupted)" if r["interrupted"] else ""), r["source"], r["model"] or "-", f"{r['num_devices'] or '-'}x {r['device'] or '?'}",
                  str(r["steps"]), fmt(r["step_time_median_s"]), fmt(r["tokens_per_s"], 6),
                  fmt(r["tokens_per_s_per_device"], 6), fmt(r["tflops_per_device"], 5),
                  "-" if r["mfu_pct"] is None else ("impossible (> 100%)" if r["mfu_impossible"]
                                                    else f"{r['mfu_pct']:.2f}%"),
                  fmt(r["claimed_tflops_per_device"], 5),
                  "-" if r["claimed_mfu_pct"] is None else f"{r['claimed_mfu_pct']:.2f}%"
                  + (" (impossible)" if r["claimed_mfu_pct"] > 100 else "")) for r in rows],
                ["run", "source", "model", "devices", "steps", "step s (median)", "tokens/s", "tokens/s/dev",
                 "TFLOP/s/dev", "MFU", "claimed TFLOP/s", "claimed MFU"]))
    for r in rows:
        if r["mfu_impossible"]:
            print(f"note: {shown(r['run'])}: {shown(r['mfu_impossible'])}")
        for w in r.get("warnings") or ():
            print(f"warning: {w}")
    for r in rows:
        for n in r["notes"]:
            print(f"note: {shown(n)}")
    missing: dict[str, list[str]] = {}
    for r in rows:
        if r["mfu_pct"] is None:
            missing.setdefault(r["no_mfu_because"], []).append(r["run"])
    for why, names in missing.items():
        print(f"note: no MFU for {', '.join(names)}: {why}")
    return 0
