"""``trainperf parse``: read another framework's training log and recompute its metrics on one basis.

Formats are detected from the first lines (``--format`` overrides); what the log does not state
(model, device, device count, sequence length, batch) comes from a workload file or flags, and
the output says where each field came from. The summary excludes warm-up by a stated rule and
puts the log's own claims next to trainperf's figures with the ratio and the reason.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any

from trainperf.cli.common import (
    add_convention_argument,
    add_json_argument,
    add_output_arguments,
    add_workload_arguments,
    overrides_from_args,
    print_json,
    shown,
)
from trainperf.cli.common import table as common_table
from trainperf.errors import InputFileError
from trainperf.numbers import fmt

if TYPE_CHECKING:
    from trainperf.ingest.pipeline import ParsedLog

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
    from trainperf.ingest.pipeline import parse_log

    get_convention(convention)
    parsed = parse_log(log, fmt=fmt_name, workload_path=workload_path, overrides=overrides, warmup=warmup)
    run = parsed.run
    meta = run.meta
    if not run.steps:
        untimed = parsed.state.untimed
        raise InputFileError(
            f"no timed step lines for format {meta['format']} in {log!r} ({meta['lines_total']:,} lines read, "
            f"{meta['malformed_lines']:,} malformed)" + (f"; {untimed}" if untimed else ""))
    summary = summarize(run, convention=convention, warmup=warmup)
    if run.workload is None:
        summary = device_free_rates(summary, run, parsed.facts, workload_path, overrides, warmup)
    return _summary_dict(parsed, summary, _check_claims(parsed, summary))


@dataclasses.dataclass(frozen=True)
class _ClaimChecks:
    """The log's own claims set against trainperf's figures, per convention, and the reason an
    MFU is impossible (a list of at most one)."""

    run_claims: dict[str, Any]
    claims: list[dict[str, Any]]
    by_convention: list[dict[str, Any]]
    impossible: list[str]


def _check_claims(parsed: ParsedLog, summary: Any) -> _ClaimChecks:
    """Compare the log's claims with ``summary``, and check every MFU (ours, and each
    convention's) for being impossible."""
    from trainperf.ingest.claims import compare_claims, conventions_table

    run = parsed.run
    facts = parsed.facts.values
    run_claims = {k: v for k, v in facts.items() if k.startswith("claimed_")}
    claims = compare_claims(run, summary, claimed_convention=run.meta.get("claimed_convention"),
                            claimed_peak_tflops=facts.get("claimed_peak_tflops"), run_claims=run_claims)
    impossible = mfu_problems(summary)
    by_convention = conventions_table(run, summary)
    for row in by_convention:
        row["mfu_impossible"] = bool(mfu_problems_of(row.get("mfu_pct"), summary, f"mfu_pct[{row['convention']}]"))
    return _ClaimChecks(run_claims, claims, by_convention, impossible)


_LINE_KEYS = ("lines_total", "skipped_lines", "skipped_reasons", "damaged_lines", "other_rank_lines",
              "malformed_lines", "cut_lines", "cut_line_examples", "flagged_steps", "flag_reasons", "other_streams")
"""The parse's line and step bookkeeping, copied from the run's meta as it is."""

_RATE_KEYS = ("step_time_median_s", "step_time_p10_s", "step_time_p90_s", "step_time_mean_s", "tokens_per_step",
              "tokens_per_s", "tokens_per_s_per_device", "tflops_per_device", "mfu_pct", "hfu_pct", "convention",
              "model_flops_per_token", "peak_tflops", "peak_source", "num_devices", "loss_last", "memory_max_GiB")
"""The summary's figures, copied from the summary's attributes of the same names."""

_FACT_KEYS = ("fields_in_log", "fields_not_in_log", "log_facts", "log_fact_lines", "restarts", "superseded_steps",
              "restart_warmup_dropped", "rank_used", "ranks_with_steps", "other_rank_steps")
"""Where the workload facts came from, the restarts and the ranks, copied from the run's meta."""


def _summary_dict(parsed: ParsedLog, summary: Any, checks: _ClaimChecks) -> dict[str, Any]:
    """The dict :func:`parse_and_summarize` returns; its keys in the order ``--json`` prints them."""
    run, meta = parsed.run, parsed.run.meta
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
        **{k: meta[k] for k in _LINE_KEYS},
        **{k: getattr(summary, k) for k in _RATE_KEYS},
        "claimed": {**summary.claimed, **checks.run_claims},
        "claims": checks.claims,
        "by_convention": checks.by_convention,
        "mfu_impossible": checks.impossible[0] if checks.impossible else None,
        "workload": run.workload.describe() if run.workload is not None else None,
        "workload_fields": meta["workload_fields"],
        "workload_missing": meta["workload_missing"],
        "workload_notes": meta["workload_notes"] + list(run.workload.notes if run.workload is not None else ()),
        **{k: meta[k] for k in _FACT_KEYS},
        "notes": meta["notes"] + meta["fact_conflicts"] + checks.impossible,
        "meta": meta,
        "_run": run,
        "_summary": summary,
    }


def device_free_rates(summary: Any, run: Any, facts: Any, workload_path: str | None,
                      overrides: dict[str, Any], warmup: int | None) -> Any:
    """``summary`` with the rates that need neither the model nor the device filled in.

    Tokens per step are the steady steps' own token counts (median), else seq_len x global
    batch from the log, the workload file or the flags; tokens/s is that over the median step
    time, and per device when the device count is known. Nothing else is assumed.
    """
    import dataclasses
    import statistics

    from trainperf.accounting.summarize import steady_columns, steady_steps
    from trainperf.ingest.workload_facts import resolve_workload

    med = summary.step_time_median_s
    if not med or summary.tokens_per_s is not None:
        return summary
    cols = steady_columns(run, warmup)
    res = resolve_workload(facts, workload_path, overrides, run.meta.get("tokens_per_step_in_log"))
    if cols is not None:  # the steps' own counts, on the arrays
        from trainperf.accounting.summarize import _tokens_median

        own = _tokens_median(cols[0]["tokens"], 0, 0, None)
        tokens = int(own) if own is not None else res.tokens_per_step
    else:
        steady, _, _ = steady_steps(run, warmup)
        own_list = [s.tokens for s in steady if s.tokens]
        tokens = int(statistics.median(own_list)) if own_list else res.tokens_per_step
    if not tokens:
        return summary
    tps = tokens / med
    return dataclasses.replace(summary, tokens_per_step=tokens, tokens_per_s=tps, num_devices=res.num_devices,
                               tokens_per_s_per_device=tps / res.num_devices if res.num_devices else None)


def mfu_problems_of(mfu_pct: float | None, summary: Any, field: str = "mfu_pct") -> list[str]:
    """``[reason]`` when ``mfu_pct`` is above 100% of the summary's peak, else ``[]``.

    A non-finite figure raises a one-line :class:`~trainperf.errors.SpecError` (exit 2).
    """
    from trainperf.accounting.plausibility import check_mfu

    if mfu_pct is None:
        return []
    verdict = check_mfu(mfu_pct, summary.peak_tflops or 0.0, summary.peak_source or "", field=field)
    return [] if verdict.ok else [verdict.reason]


def mfu_problems(summary: Any) -> list[str]:
    """The one-line reason when the MFU (else the HFU, which counts more) of ``summary`` is
    impossible, as a list of at most one (see :func:`mfu_problems_of`)."""
    return mfu_problems_of(summary.mfu_pct, summary) or mfu_problems_of(summary.hfu_pct, summary, "hfu_pct")


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


WRAP_COLUMN = 72
"""Characters of a long text column (a field's origin, a ratio's reason) per line."""


def table(rows: Any, headers: list[str], wrap: int | None = None) -> str:
    """A plain table of already formatted cells (no re-parsing of numbers), every text cell
    through the terminal's escaper; the last column wrapped at ``wrap`` characters (at word
    boundaries) when given (the only newlines in a cell are then the wrap's)."""
    if not wrap:
        return common_table(rows, headers, floatfmt="g", numparse=False)
    import textwrap

    from tabulate import tabulate

    from trainperf.cli.common import shown

    safe = [[shown(c) if isinstance(c, str) else c for c in r] for r in rows]
    safe = [[*r[:-1], "\n".join(textwrap.wrap(str(r[-1]), wrap, break_on_hyphens=False)) or str(r[-1])]
            for r in safe]
    return tabulate(safe, headers=[shown(h) for h in headers], disable_numparse=True)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}%"


def _mfu_cell(x: float | None, impossible: bool) -> str:
    """An MFU table cell; an impossible one (> 100%) is never shown as a plain figure."""
    return "impossible (> 100%, see note)" if impossible else _pct(x)


def _print_human(o: dict[str, Any]) -> None:
    """The report of ``trainperf parse`` (``o``: :func:`parse_and_summarize`'s dict) as text."""
    _print_reading(o)
    _print_steps(o)
    print()
    _print_workload(o)
    print()
    _print_summary(o)
    _print_claims(o)
    for n in o["notes"]:
        print(f"note: {shown(n)}")


def _print_reading(o: dict[str, Any]) -> None:
    """The log, its format, and how many of its lines were read, used, skipped or damaged."""
    m = o["meta"]
    print(f"log: {o['log']}")
    print(f"format: {o['format']} ({o['format_detection']})")
    other = f", {m['other_rank_lines']:,} of other ranks not parsed" if m["other_rank_lines"] else ""
    print(f"lines: {o['lines_total']:,} read, {m['lines_used']:,} used, {o['skipped_lines']:,} skipped "
          f"({o['malformed_lines']:,} malformed step lines){other}")
    damage = m["damaged_lines"]
    bits = [f"{damage['non_utf8_lines']:,} with bytes that are not UTF-8 (read as U+FFFD)" if damage["non_utf8_lines"]
            else "", f"{damage['nul_lines']:,} with NUL bytes" if damage["nul_lines"] else "",
            f"{damage['overlong_lines']:,} longer than 65,536 characters (cut)" if damage["overlong_lines"] else ""]
    if any(bits):
        print(f"  damaged lines (each read as far as it goes, never more than that line lost): "
              f"{'; '.join(b for b in bits if b)}")
    if m["skipped_files"]:
        print(f"  files not read: {', '.join(m['skipped_files'])}")


def _print_steps(o: dict[str, Any]) -> None:
    """The steps parsed and kept (the rank kept, the restarts) and the warm-up excluded."""
    m = o["meta"]
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


def _print_workload(o: dict[str, Any]) -> None:
    """Which workload facts the log states, the workload, and where each of its fields came from."""
    print(f"the log states: {', '.join(o['fields_in_log']) or 'none of the workload facts'}; "
          f"not in the log: {', '.join(o['fields_not_in_log']) or '-'}")
    need = "the TFLOP/s and MFU rates need " if o["tokens_per_s"] is not None else "rates need "
    print(f"workload: {o['workload'] or 'unknown -- ' + need + '; '.join(o['workload_missing'])}")
    if o["workload_fields"]:
        print(table(sorted(o["workload_fields"].items()), ["field", "from"], wrap=WRAP_COLUMN))
    for n in o["workload_notes"]:
        print(f"  note: {shown(n)}")


def _print_summary(o: dict[str, Any]) -> None:
    """trainperf's own figures: step time, tokens/s, TFLOP/s and MFU, the peak, the last loss, and
    the largest device memory the log reports where it reports one."""
    rows = [
        ("step time median (s)", fmt(o["step_time_median_s"])),
        ("step time p10 / p90 (s)", f"{fmt(o['step_time_p10_s'])} / {fmt(o['step_time_p90_s'])}"),
        ("tokens per step", fmt(o["tokens_per_step"])),
        ("tokens/s (global)", fmt(o["tokens_per_s"], 6)),
        ("tokens/s per device", fmt(o["tokens_per_s_per_device"], 6)),
        (f"TFLOP/s per device ({o['convention']})", fmt(o["tflops_per_device"], 5)),
        (f"MFU ({o['convention']})", _mfu_cell(o["mfu_pct"], bool(o["mfu_impossible"]))),
        ("peak", f"{fmt(o['peak_tflops'])} TFLOP/s: {o['peak_source']}" if o["peak_tflops"] else
         (o["peak_source"] or "-")),
        ("loss (last)", fmt(o["loss_last"])),
    ]
    if o["memory_max_GiB"] is not None:
        rows.append(("peak memory per device (GiB)", fmt(o["memory_max_GiB"])))
    print(table(rows, ["summary (trainperf)", "value"], wrap=WRAP_COLUMN + 14))


def _print_claims(o: dict[str, Any]) -> None:
    """The log's claims next to trainperf's figures, and the rates under every convention."""
    if o["claims"]:
        print()
        print(table([(c["metric"], fmt(c["trainperf"], 5), fmt(c["claimed"], 5),
                      "-" if c["ratio"] is None else f"x{c['ratio']:.4f}", c["reason"]) for c in o["claims"]],
                    ["claimed by the log", "trainperf", "log", "log/trainperf", "why"], wrap=WRAP_COLUMN - 16))
    if o["by_convention"]:
        print()
        print(table([(r["convention"], f"{r['flops_per_token']:.4e}", fmt(r["tflops_per_device"], 5),
                      _mfu_cell(r["mfu_pct"], r["mfu_impossible"]), "-" if r["claimed_over_this"] is None else f"x{r['claimed_over_this']:.4f}")
                     for r in o["by_convention"]],
                    ["convention", "FLOPs/token", "TFLOP/s/device", "MFU", "log TFLOP/s / this"]))
