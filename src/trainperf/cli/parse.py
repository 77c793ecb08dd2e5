"""``trainperf parse``: read another framework's training log and recompute its metrics on one basis.

Formats are detected from the first lines (``--format`` overrides); what the log does not state
(model, device, device count, sequence length, batch) comes from a workload file or flags, and
the output says where each field came from. The summary excludes warm-up by a stated rule and
puts the log's own claims next to trainperf's figures with the ratio and the reason.
"""

from __future__ import annotations

import argparse
from typing import Any

from trainperf.cli.common import (
    add_convention_argument,
    add_json_argument,
    add_output_arguments,
    add_workload_arguments,
    overrides_from_args,
    print_json,
)
from trainperf.errors import InputFileError
from trainperf.numbers import fmt

HELP = "parse another framework's training log and recompute its metrics on one basis"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", metavar="LOG", help="log file, directory of log files, .gz, or - for stdin")
    add_workload_arguments(parser, architecture=True)
    parser.add_argument("--format", metavar="NAME", dest="log_format",
                        help="log format (default: detected): trainperf, maxtext, torchtitan, megatron, nemo, "
                             "composer, hf-trainer, nanogpt")
    add_convention_argument(parser)
    parser.add_argument("--warmup", type=int, metavar="N",
                        help="steps (log records) to exclude as warm-up, also after each restart "
                             "(default: the first 10%%, at least 1, at most 10)")
    parser.add_argument("--save", metavar="PATH",
                        help="also write the parsed run as trainperf JSONL (a new file; --force replaces one)")
    add_output_arguments(parser)
    add_json_argument(parser)


def parse_and_summarize(log: str, *, fmt_name: str | None, workload_path: str | None,
                        overrides: dict[str, Any], convention: str, warmup: int | None) -> dict[str, Any]:
    """Everything ``trainperf parse`` shows, as one dict (also used by ``trainperf compare``)."""
    from trainperf.accounting.conventions import get_convention
    from trainperf.accounting.summarize import summarize
    from trainperf.ingest.claims import compare_claims, conventions_table
    from trainperf.ingest.pipeline import parse_log

    get_convention(convention)
    parsed = parse_log(log, fmt=fmt_name, workload_path=workload_path, overrides=overrides, warmup=warmup)
    run = parsed.run
    meta = run.meta
    if not run.steps:
        raise InputFileError(
            f"no step lines for format {meta['format']} in {log!r} ({meta['lines_total']:,} lines read, "
            f"{meta['malformed_lines']:,} malformed)")
    summary = summarize(run, convention=convention, warmup=warmup)
    facts = parsed.facts.values
    run_claims = {k: v for k, v in facts.items() if k.startswith("claimed_")}
    claims = compare_claims(run, summary, claimed_convention=parsed.parser.claimed_convention,
                            claimed_peak_tflops=facts.get("claimed_peak_tflops"), run_claims=run_claims)
    warmup_rule = summary.warmup_rule
    if meta["restarts"]:
        warmup_rule += f"; after each of the {len(meta['restarts'])} restart(s) the same rule drops that segment's first steps"
    return {
        "format": meta["format"],
        "format_detection": meta["format_detection"],
        "log": meta["log"],
        "steps": summary.steps_measured,
        "steps_total": summary.steps_total,
        "warmup_steps": summary.warmup_steps,
        "warmup_rule": warmup_rule,
        "lines_total": meta["lines_total"],
        "skipped_lines": meta["skipped_lines"],
        "other_rank_lines": meta["other_rank_lines"],
        "malformed_lines": meta["malformed_lines"],
        "step_time_median_s": summary.step_time_median_s,
        "step_time_p10_s": summary.step_time_p10_s,
        "step_time_p90_s": summary.step_time_p90_s,
        "step_time_mean_s": summary.step_time_mean_s,
        "tokens_per_step": summary.tokens_per_step,
        "tokens_per_s": summary.tokens_per_s,
        "tokens_per_s_per_device": summary.tokens_per_s_per_device,
        "tflops_per_device": summary.tflops_per_device,
        "mfu_pct": summary.mfu_pct,
        "hfu_pct": summary.hfu_pct,
        "convention": summary.convention,
        "model_flops_per_token": summary.model_flops_per_token,
        "peak_tflops": summary.peak_tflops,
        "peak_source": summary.peak_source,
        "num_devices": summary.num_devices,
        "loss_last": summary.loss_last,
        "memory_max_GiB": summary.memory_max_GiB,
        "claimed": {**summary.claimed, **run_claims},
        "claims": claims,
        "by_convention": conventions_table(run, summary),
        "workload": run.workload.describe() if run.workload is not None else None,
        "workload_fields": meta["workload_fields"],
        "workload_missing": meta["workload_missing"],
        "workload_notes": meta["workload_notes"] + list(run.workload.notes if run.workload is not None else ()),
        "fields_in_log": meta["fields_in_log"],
        "fields_not_in_log": meta["fields_not_in_log"],
        "log_facts": meta["log_facts"],
        "log_fact_lines": meta["log_fact_lines"],
        "restarts": meta["restarts"],
        "superseded_steps": meta["superseded_steps"],
        "restart_warmup_dropped": meta["restart_warmup_dropped"],
        "rank_used": meta["rank_used"],
        "ranks_with_steps": meta["ranks_with_steps"],
        "other_rank_steps": meta["other_rank_steps"],
        "notes": meta["notes"] + meta["fact_conflicts"],
        "meta": meta,
        "_run": run,
        "_summary": summary,
    }


def run(args: argparse.Namespace) -> int:
    if args.save:  # refuse an unsafe --save before reading anything (one line, exit 2)
        from trainperf.records.output_path import check_output_file

        check_output_file(args.save, what="--save", inputs=[args.log, args.workload],
                          force=args.force, parents=args.parents)
    out = parse_and_summarize(args.log, fmt_name=args.log_format, workload_path=args.workload,
                              overrides=overrides_from_args(args), convention=args.convention,
                              warmup=args.warmup)
    run_record = out.pop("_run")
    out.pop("_summary")
    if args.save:
        from trainperf.records.jsonl import write_run

        write_run(run_record, args.save, what="--save", inputs=[args.log, args.workload],
                  force=args.force, parents=args.parents)
    if args.json:
        out.pop("meta")
        print_json(out)
        return 0
    _print_human(out)
    return 0


def table(rows: Any, headers: list[str]) -> str:
    """A plain table of already formatted cells (no re-parsing of numbers)."""
    from tabulate import tabulate

    return tabulate(list(rows), headers=headers, disable_numparse=True)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}%"


def _print_human(o: dict[str, Any]) -> None:
    m = o["meta"]
    print(f"log: {o['log']}")
    print(f"format: {o['format']} ({o['format_detection']})")
    other = f", {m['other_rank_lines']:,} of other ranks not parsed" if m["other_rank_lines"] else ""
    print(f"lines: {o['lines_total']:,} read, {m['lines_used']:,} used, {o['skipped_lines']:,} skipped "
          f"({o['malformed_lines']:,} malformed step lines){other}")
    ranks = o["ranks_with_steps"]
    rank_txt = f"rank {o['rank_used']} kept of ranks {ranks}" if len(ranks) > 1 else (
        f"rank {o['rank_used']}" if o["rank_used"] is not None else "single stream")
    print(f"steps: {m['steps_parsed']:,} parsed ({rank_txt}); {o['steps_total']:,} kept, "
          f"{o['steps']:,} counted after warm-up")
    for r in o["restarts"]:
        print(f"  restart at line {r['line']}: step {r['from_step']} -> {r['to_step']}")
    if o["restarts"]:
        print(f"  {o['superseded_steps']} repeated step(s) replaced by the resumed run's; "
              f"warm-up dropped after restarts: steps {o['restart_warmup_dropped']}")
    print(f"warm-up: {o['warmup_steps']} excluded ({o['warmup_rule']})")
    print()
    print(f"the log states: {', '.join(o['fields_in_log']) or 'none of the workload facts'}; "
          f"not in the log: {', '.join(o['fields_not_in_log']) or '-'}")
    print(f"workload: {o['workload'] or 'unknown -- rates need ' + '; '.join(o['workload_missing'])}")
    if o["workload_fields"]:
        print(table(sorted(o["workload_fields"].items()), ["field", "from"]))
    for n in o["workload_notes"]:
        print(f"  note: {n}")
    print()
    rows = [
        ("step time median (s)", fmt(o["step_time_median_s"])),
        ("step time p10 / p90 (s)", f"{fmt(o['step_time_p10_s'])} / {fmt(o['step_time_p90_s'])}"),
        ("tokens per step", fmt(o["tokens_per_step"])),
        ("tokens/s (global)", fmt(o["tokens_per_s"], 6)),
        ("tokens/s per device", fmt(o["tokens_per_s_per_device"], 6)),
        (f"TFLOP/s per device ({o['convention']})", fmt(o["tflops_per_device"], 5)),
        (f"MFU ({o['convention']})", _pct(o["mfu_pct"])),
        ("peak", f"{fmt(o['peak_tflops'])} TFLOP/s: {o['peak_source']}" if o["peak_tflops"] else
         (o["peak_source"] or "-")),
        ("loss (last)", fmt(o["loss_last"])),
    ]
    print(table(rows, ["summary (trainperf)", "value"]))
    if o["claims"]:
        print()
        print(table([(c["metric"], fmt(c["trainperf"], 5), fmt(c["claimed"], 5),
                      "-" if c["ratio"] is None else f"x{c['ratio']:.4f}", c["reason"]) for c in o["claims"]],
                    ["claimed by the log", "trainperf", "log", "log/trainperf", "why"]))
    if o["by_convention"]:
        print()
        print(table([(r["convention"], f"{r['flops_per_token']:.4e}", fmt(r["tflops_per_device"], 5),
                      _pct(r["mfu_pct"]), "-" if r["claimed_over_this"] is None else f"x{r['claimed_over_this']:.4f}")
                     for r in o["by_convention"]],
                    ["convention", "FLOPs/token", "TFLOP/s/device", "MFU", "log TFLOP/s / this"]))
    for n in o["notes"]:
        print(f"note: {n}")
