"""Write a built :class:`~trainperf.report.build.Report` as one self-contained HTML page
(inline CSS, figures embedded as base64 PNG data URIs, no script, no network) and as Markdown
that links the PNGs beside it.

Names, paths, titles and notes come from the inputs, so every value goes through the output's
one escaper (:mod:`trainperf.safe_text`): :func:`_h` in HTML, :func:`_m` in Markdown. The page
also carries a Content-Security-Policy that forbids any script, so a name that reached the page
unescaped still could not run."""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainperf.numbers import fmt as _fmt
from trainperf.report.explain import Explanation
from trainperf.report.series import warmup_text
from trainperf.safe_text import REPORT_CSP, html_text, markdown_text

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0;
     background:#f6f7f9;color:#1d2330;line-height:1.45}
main{max-width:1680px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:1.6em;margin:0 0 4px}
h2{font-size:1.25em;margin:34px 0 10px;border-bottom:2px solid #d7dbe3;padding-bottom:4px}
h3{font-size:1.05em;margin:22px 0 8px}
.meta{color:#5a6372;font-size:.9em}
.tw{overflow-x:auto;max-width:100%;margin:8px 0 14px}
table{border-collapse:collapse;background:#fff;font-size:.82em}
th,td{border:1px solid #dde1e8;padding:3px 7px;text-align:right;white-space:nowrap}
th{background:#eef1f6;font-weight:600;white-space:normal;vertical-align:bottom}
td.l,th.l{text-align:left;white-space:normal;min-width:9em;max-width:22em;overflow-wrap:anywhere}
td.w{min-width:26em;max-width:48em}
figure{background:#fff;border:1px solid #dde1e8;border-radius:6px;margin:10px 0 18px;padding:10px}
figure img{max-width:100%;height:auto;display:block;margin:0 auto}
figcaption{color:#5a6372;font-size:.85em;margin-top:6px}
.notes li{margin:3px 0}
.tag{display:inline-block;background:#e4e9f2;border-radius:4px;padding:0 6px;font-size:.8em;margin-left:6px}
.warn{color:#a33}
nav a{margin-right:14px}
.pair{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:0 14px}
th.d{background:#fde9c8}
table.cfg td.l,table.cfg th.l{min-width:4em;max-width:16em}
"""

_DASH = "–"


def fmt(x: Any, digits: int = 4) -> str:
    """A number for humans (see :func:`trainperf.numbers.fmt`); ``–`` if missing."""
    return _fmt(x, digits, missing=_DASH)


def _claimed(value: Any, claimed: Any) -> str:
    if value is not None:
        return fmt(value)
    if claimed is not None:
        return f"{fmt(claimed)} (claimed)"
    return _DASH


def summary_table(report: Any) -> tuple[list[str], list[list[str]]]:
    headers = ["run", "workload", "steps (counted/ total)", "median step (s)",
               "p10–p90 step (s)", "tokens/s", "tokens/s/ device", "TFLOP/s/ device", "MFU %",
               "claimed MFU %", "peak mem (GiB)", "last loss", "status"]
    rows = []
    for sec in report.runs:
        s, run = sec.summary, sec.run
        w = run.workload
        workload = f"{w.model.name}, {w.hardware.id} ×{w.num_devices}, {w.plan.describe()}" if w is not None else _DASH
        rows.append([
            s.name, workload,
            f"{s.steps_measured}/{s.steps_total}", fmt(s.step_time_median_s),
            f"{fmt(s.step_time_p10_s)}–{fmt(s.step_time_p90_s)}",
            _claimed(s.tokens_per_s, s.claimed.get("tokens_per_s")),
            _claimed(s.tokens_per_s_per_device, s.claimed.get("tokens_per_s_per_device")),
            _claimed(s.tflops_per_device, s.claimed.get("tflops_per_device")),
            fmt(s.mfu_pct), fmt(s.claimed.get("mfu_pct")), fmt(s.memory_max_GiB), fmt(s.loss_last),
            "interrupted" if s.interrupted else _DASH,
        ])
    return _drop_empty_columns(headers, rows)


def _drop_empty_columns(headers: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """Leave out columns no run has a value for (e.g. claims when nothing claimed anything)."""
    keep = [i for i in range(len(headers)) if i == 0 or any(r[i] != _DASH for r in rows)]
    return [headers[i] for i in keep], [[r[i] for i in keep] for r in rows]


def explain_table(rows: list[Explanation]) -> tuple[list[str], list[list[str]]]:
    comps: list[str] = []
    for r in rows:
        comps += [k for k in r.components if k not in comps]
    headers = (["run", "measured (s)", "predicted (s)", "80% range (s)", "error %", "unexplained (s)"]
               + [f"{c} (s)" for c in comps])
    body = [[r.name, fmt(r.measured_step_time_s), fmt(r.predicted_step_time_s),
             f"{fmt(r.interval_s[0])}-{fmt(r.interval_s[1])}" if r.interval_s else _DASH, fmt(r.error_pct, 3),
             fmt(r.unexplained_s)] + [fmt(r.components.get(c)) for c in comps] for r in rows]
    return headers, body


def memory_table(rows: list[Explanation]) -> tuple[list[str], list[list[str]]] | None:
    """Predicted memory per device by category beside the recorded peak, or ``None``."""
    rows = [r for r in rows if r.predicted_memory_GiB is not None]
    if not rows:
        return None
    cats: list[str] = []
    for r in rows:
        cats += [k for k in r.memory_breakdown_GiB if k not in cats]
    headers = ["run", "measured peak (GiB)", "predicted (GiB)"] + [f"{c} (GiB)" for c in cats]
    body = [[r.name, fmt(r.measured_memory_GiB), fmt(r.predicted_memory_GiB)]
            + [fmt(r.memory_breakdown_GiB.get(c)) for c in cats] for r in rows]
    return headers, body


MEMORY_NOTE = ("Measured peak is what the run recorded per device: CUDA max allocated on GPUs, the "
               "process's RSS high-water mark on CPUs (which also counts the Python runtime and "
               "libraries).")


def sweep_table(sweep: Any) -> tuple[list[str], list[list[str]]]:
    headers = ["run", "devices", "global batch", "median step (s)", "tokens/s", "tokens/s/device",
               "TFLOP/s/device", "MFU %", f"{sweep.mode} scaling efficiency %"]
    body = [[p.name, fmt(p.num_devices), fmt(p.global_batch), fmt(p.step_time_s), fmt(p.tokens_per_s),
             fmt(p.tokens_per_s_per_device), fmt(p.tflops_per_device), fmt(p.mfu_pct), fmt(p.efficiency_pct, 3)]
            for p in sweep.points]
    return headers, body


def comparison_table(comp: Any) -> tuple[list[str], list[list[str]]]:
    headers = ["run", "source", "citation", "device", "devices", "seq", "tokens/s/ device",
               f"TFLOP/s/ device ({comp.convention})", f"MFU % ({comp.convention})",
               "claimed TFLOP/s/ device", "claimed MFU %"]
    body = [[r.name, "this report" if r.mine else "published catalog", r.citation or _DASH, r.device, fmt(r.num_devices), fmt(r.seq_len),
             fmt(r.tokens_per_s_per_device), fmt(r.tflops_per_device), fmt(r.mfu_pct),
             fmt(r.claimed_tflops_per_device), fmt(r.claimed_mfu_pct)] for r in comp.rows]
    return headers, body


def _peaks(report: Any) -> list[str]:
    """One line per distinct peak: its value, source and the runs using it."""
    by_peak: dict[tuple[float, str], list[str]] = {}
    for sec in report.runs:
        s = sec.summary
        if s.peak_tflops is not None:
            by_peak.setdefault((s.peak_tflops, str(s.peak_source)), []).append(s.name)
    if len(by_peak) == 1:
        (p, src), _ = next(iter(by_peak.items()))
        return [f"every run: {fmt(p)} TFLOP/s per device, {src}"]
    return [f"{fmt(p)} TFLOP/s per device, {src} ({', '.join(names)})"
            for (p, src), names in by_peak.items()]


def _left_out(comp: Any) -> str:
    if not comp.left_out:
        return ""
    return (f" {comp.left_out} more published result(s) of this class and precision are not shown (the run's "
            "device first, then the nearest device counts): `trainperf published` lists them.")


def _unused(sweep: Any) -> str:
    if not sweep.unused:
        return ""
    return f" Not in the sweep (an earlier run has the same device count): {', '.join(sweep.unused)}."


# ---------------------------------------------------------------------------------- HTML
def _h(x: Any) -> str:
    """The page's one escaper: every value (text or attribute) goes through it."""
    return html_text(x)


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1,
                wide: int | None = None) -> str:
    """A table; the first ``left`` columns are left-aligned text, column ``wide`` may grow wide."""
    def cls(i: int) -> str:
        return (' class="l w"' if i == wide else ' class="l"') if i < left else ""

    head = "".join(f"<th{cls(i)}>{_h(c)}</th>" for i, c in enumerate(headers))
    body = "".join("<tr>" + "".join(f"<td{cls(i)}>{_h(c)}</td>" for i, c in enumerate(r)) + "</tr>"
                   for r in rows)
    return f'<div class="tw"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _html_figure(fig: Any) -> str:
    data = base64.b64encode(Path(fig.path).read_bytes()).decode("ascii")
    cap = f"<figcaption>{_h(fig.caption)}</figcaption>" if fig.caption else ""
    return (f'<figure><img alt="{_h(fig.title)}" title="{_h(fig.title)}" '
            f'src="data:image/png;base64,{data}">{cap}</figure>')


def _layout_sentence(report: Any, name: str) -> str:
    """`` Layout: dp=2 (data parallel over 2 ranks ...); command: trainperf bench ...`` for a run."""
    c = next((c for c in report.configs if c.name == name), None)
    if c is None:
        return ""
    text = f" Layout: {c.values['layout']}" + (f" ({c.described})" if c.described else "") + "."
    return text + (f" Command: {c.command}." if c.command else "")


def _html_config(report: Any) -> list[str]:
    """The "What ran" panel: every run's configuration, the fields that differ highlighted, the
    differences alone, and what every run shares."""
    from trainperf.report.panel import config_table, diff_table, differing, shared_text

    if not report.configs:
        return []
    diff = set(differing(report.configs))
    headers, rows = config_table(report.configs)

    def th(h: str) -> str:
        return f'<th class="l d">{_h(h)} ≠</th>' if h in diff else f'<th class="l">{_h(h)}</th>'

    head = "".join(th(h) for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="l">{_h(c)}</td>' for c in r) + "</tr>" for r in rows)
    out = ['<h2 id="config">What ran</h2>',
           '<p>Each run\'s model, machine, parallel layout, batches, checkpointing, precision and software '
           "stack (≠: differs between the runs).</p>",
           f'<div class="tw"><table class="cfg"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>']
    d = diff_table(report.configs)
    if d is not None:
        out += ["<h3>What differs between the runs</h3>", _html_table(*d, left=len(d[0]))]
    if len(report.configs) > 1:
        out.append(f'<p class="meta">The same in every run: {_h(shared_text(report.configs)) or "nothing"}.</p>')
    return out


def render_html(report: Any) -> str:
    """The report as one self-contained HTML page (inline CSS and figures, no script)."""
    parts = [f"<h1>{_h(report.title)}</h1>",
             f'<p class="meta">Generated {_h(report.created_utc)} by trainperf. FLOP convention for '
             f"every TFLOP/s and MFU figure: <b>{_h(report.convention)}</b>. Warm-up steps are excluded from every "
             "statistic (shaded in the plots).</p>",
             _html_nav(report)]
    parts += _html_summary(report)
    parts += _html_config(report)
    if report.overlay_figures:
        parts += ['<h2 id="overlay">Runs overlaid</h2>', *(_html_figure(f) for f in report.overlay_figures)]
    parts += _html_runs(report)
    if report.explanations:
        parts += _html_predicted(report)
    if report.sweeps:
        parts += _html_sweeps(report)
    if report.comparisons:
        parts += _html_comparisons(report)
    if report.notes:
        parts.append('<h2 id="notes">Notes</h2><ul class="notes">'
                     + "".join(f"<li>{_h(n)}</li>" for n in report.notes) + "</ul>")
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{_h(REPORT_CSP)}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_h(report.title)}</title><style>{CSS}</style></head>"
            f"<body><main>{''.join(parts)}</main></body></html>\n")


def _html_nav(report: Any) -> str:
    """The page's links to its sections, only those the report has."""
    nav = ['<a href="#summary">summary</a>']
    if report.configs:
        nav.append('<a href="#config">what ran</a>')
    if report.overlay_figures:
        nav.append('<a href="#overlay">runs overlaid</a>')
    nav.append('<a href="#runs">runs</a>')
    if report.explanations:
        nav.append('<a href="#predicted">predicted vs measured</a>')
    if report.sweeps:
        nav.append('<a href="#scaling">scaling</a>')
    if report.comparisons:
        nav.append('<a href="#published">published</a>')
    if report.notes:
        nav.append('<a href="#notes">notes</a>')
    return f"<nav>{''.join(nav)}</nav>"


def _html_summary(report: Any) -> list[str]:
    """The summary table of every run, and the peaks MFU divides by."""
    h, rows = summary_table(report)
    out = ['<h2 id="summary">Summary</h2>', _html_table(h, rows, left=2)]
    peaks = _peaks(report)
    if peaks:
        out.append('<p class="meta">Peaks used for MFU: ' + "; ".join(_h(p) for p in peaks) + ".</p>")
    return out


def _html_runs(report: Any) -> list[str]:
    """The "Runs" section: one table of the runs without figures, then a panel per run with figures."""
    out = ['<h2 id="runs">Runs</h2>']
    plain = [sec for sec in report.runs if not sec.figures]
    if plain:
        out.append("<p>Runs with one figure each (published results, single-step records):</p>")
        out.append(_html_table(["run", "source", "from"],
                               [[sec.summary.name, sec.run.source, sec.loaded.origin] for sec in plain],
                               left=3, wide=2))
    for sec in report.runs:
        if sec.figures:
            out += _html_run(report, sec)
    return out


def _html_run(report: Any, sec: Any) -> list[str]:
    """One run's heading, origin and warm-up line, and its figures (the first alone, the rest paired)."""
    s = sec.summary
    tag = '<span class="tag warn">interrupted</span>' if s.interrupted else ""
    out = [f"<h3>{_h(s.name)}<span class=\"tag\">{_h(sec.run.source)}</span>{tag}</h3>",
           f'<p class="meta">From {_h(sec.loaded.origin)}. Warm-up excluded: '
           f"{_h(warmup_text(sec.series))} ({_h(s.warmup_rule)}).{_h(_layout_sentence(report, s.name))}</p>"]
    if sec.figures:
        out.append(_html_figure(sec.figures[0]))
    if len(sec.figures) > 1:
        out.append('<div class="pair">' + "".join(_html_figure(f) for f in sec.figures[1:]) + "</div>")
    return out


def _html_predicted(report: Any) -> list[str]:
    """The "Predicted vs measured" section: step-time breakdown, its notes, and memory per device."""
    out = ['<h2 id="predicted">Predicted vs measured step time</h2>',
           "<p>The predictor's breakdown of one step beside the measured steady-state median. "
           "<b>Unexplained</b> is measured − predicted: time the model does not account for "
           "(negative: it over-predicts).</p>"]
    if report.explain_figure is not None:
        out.append(_html_figure(report.explain_figure))
    h, rows = explain_table(report.explanations)
    out.append(_html_table(h, rows))
    for e in report.explanations:
        for n in e.notes:
            out.append(f'<p class="meta">{_h(e.name)}: {_h(n)}</p>')
    mem = memory_table(report.explanations)
    if mem is not None:
        out += ["<h3>Memory per device: predicted vs measured</h3>", _html_table(*mem),
                f'<p class="meta">{_h(MEMORY_NOTE)}</p>']
    return out


def _html_heading(title: str, fig: Any) -> list[str]:
    """A sweep's or comparison's heading, and its figure when there is one."""
    return [f"<h3>{_h(title)}</h3>"] + ([] if fig is None else [_html_figure(fig)])


def _html_sweeps(report: Any) -> list[str]:
    """The "Scaling" section: per sweep, its figure, table and efficiency basis."""
    out = ['<h2 id="scaling">Scaling</h2>']
    for sw, fig in report.sweeps:
        out += _html_heading(sw.title, fig)
        h, rows = sweep_table(sw)
        out.append(_html_table(h, rows))
        out.append(f'<p class="meta">Efficiency: {_h(sw.basis)}, relative to the '
                   f"{_h(sw.base.num_devices)}-device run.{_h(_unused(sw))}</p>")
    return out


def _html_comparisons(report: Any) -> list[str]:
    """The "Compared with published results" section: per comparison, its figure and table."""
    out = ['<h2 id="published">Compared with published results</h2>']
    for c, fig in report.comparisons:
        out += _html_heading(c.title, fig)
        h, rows = comparison_table(c)
        out.append(_html_table(h, rows, left=3, wide=2))
        out.append(f'<p class="meta">TFLOP/s and MFU recomputed for every row under {_h(c.convention)} '
                   "with each device's own peak; claimed columns are what each source reported "
                   f"under its own convention.{_h(_left_out(c))}</p>")
    return out


def write_html(report: Any, path: Path) -> Path:
    from trainperf.records.output_path import write_text_atomic

    write_text_atomic(path, render_html(report), what="--out", force=True)
    return path


# ------------------------------------------------------------------------------ Markdown
def _m(x: Any, line_start: bool = False) -> str:
    """report.md's one escaper: every value goes through it."""
    return markdown_text(x, line_start=line_start)


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    cell = _m
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |",
             "|" + "|".join(":---" if i == 0 else "---:" for i in range(len(headers))) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _md_figure(fig: Any, base: Path) -> str:
    try:
        rel = Path(fig.path).relative_to(base)
    except ValueError:
        rel = Path(fig.path)
    cap = f"\n\n*{_m(fig.caption)}*" if fig.caption else ""
    return f"![{_m(fig.title)}]({urllib.parse.quote(rel.as_posix())}){cap}"


def _md_config(report: Any) -> list[str]:
    """The "What ran" panel in Markdown (see :func:`_html_config`)."""
    from trainperf.report.panel import config_table, diff_table, differing, shared_text

    if not report.configs:
        return []
    diff = set(differing(report.configs))
    headers, rows = config_table(report.configs)
    out = ["## What ran", "", _md_table([f"{h} ≠" if h in diff else h for h in headers], rows), ""]
    d = diff_table(report.configs)
    if d is not None:
        out += ["### What differs between the runs", "", _md_table(*d), ""]
    if len(report.configs) > 1:
        out += [f"The same in every run: {_m(shared_text(report.configs) or 'nothing')}.", ""]
    return out


def render_markdown(report: Any) -> str:
    base = Path(report.out_dir)
    out = [f"# {_m(report.title)}", "",
           f"Generated {_m(report.created_utc)} by trainperf. FLOP convention for every TFLOP/s and MFU "
           f"figure: **{_m(report.convention)}**. Warm-up steps are excluded from every statistic.", "",
           "## Summary", ""]
    h, rows = summary_table(report)
    out += [_md_table(h, rows), ""]
    peaks = _peaks(report)
    if peaks:
        out += ["Peaks used for MFU: " + "; ".join(_m(p) for p in peaks) + ".", ""]
    out += _md_config(report)
    if report.overlay_figures:
        out += ["## Runs overlaid", ""] + [x for f in report.overlay_figures for x in (_md_figure(f, base), "")]
    out += ["## Runs", ""]
    plain = [sec for sec in report.runs if not sec.figures]
    if plain:
        out += ["Runs with one figure each (published results, single-step records):", "",
                _md_table(["run", "source", "from"], [[sec.summary.name, sec.run.source, sec.loaded.origin]
                                                      for sec in plain]), ""]
    for sec in report.runs:
        if not sec.figures:
            continue
        s = sec.summary
        out += [f"### {_m(s.name)} ({_m(sec.run.source)}{', interrupted' if s.interrupted else ''})", "",
                f"From {_m(sec.loaded.origin)}. Warm-up excluded: {_m(warmup_text(sec.series))} "
                f"({_m(s.warmup_rule)}).{_m(_layout_sentence(report, s.name))}", ""]
        out += [x for f in sec.figures for x in (_md_figure(f, base), "")]
    if report.explanations:
        out += ["## Predicted vs measured step time", "",
                "Unexplained = measured − predicted (negative: the model over-predicts).", ""]
        if report.explain_figure is not None:
            out += [_md_figure(report.explain_figure, base), ""]
        h, rows = explain_table(report.explanations)
        out += [_md_table(h, rows), ""]
        mem = memory_table(report.explanations)
        if mem is not None:
            out += ["### Memory per device: predicted vs measured", "", _md_table(*mem), "", MEMORY_NOTE, ""]
    if report.sweeps:
        out += ["## Scaling", ""]
        for sw, fig in report.sweeps:
            out += [f"### {_m(sw.title)}", ""]
            if fig is not None:
                out += [_md_figure(fig, base), ""]
            h, rows = sweep_table(sw)
            out += [_md_table(h, rows), "", f"Efficiency: {_m(sw.basis)}, relative to the "
                    f"{_m(sw.base.num_devices)}-device run.{_m(_unused(sw))}", ""]
    if report.comparisons:
        out += ["## Compared with published results", ""]
        for c, fig in report.comparisons:
            out += [f"### {_m(c.title)}", ""]
            if fig is not None:
                out += [_md_figure(fig, base), ""]
            h, rows = comparison_table(c)
            out += [_md_table(h, rows), ""]
    if report.notes:
        out += ["## Notes", ""] + [f"- {_m(n, line_start=True)}" for n in report.notes] + [""]
    return "\n".join(out)


def write_markdown(report: Any, path: Path) -> Path:
    from trainperf.records.output_path import write_text_atomic

    write_text_atomic(path, render_markdown(report), what="--out", force=True)
    return path
