"""Build a report: load runs, summarise them on one convention, draw the figures, write
``index.html`` (self-contained), ``report.md`` and the PNGs into one directory."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainperf.accounting.conventions import get_convention, lora_counted_in_full_note, run_convention
from trainperf.accounting.plausibility import check_mfu
from trainperf.accounting.summarize import summarize
from trainperf.errors import InputFileError, TrainperfError
from trainperf.records.run_record import RunRecord
from trainperf.records.summary import Summary
from trainperf.report.compare import Comparison, find_comparisons
from trainperf.report.explain import Explanation, explain_runs
from trainperf.report.load import LoadedRun, load_paths, load_published
from trainperf.report.panel import RunConfig, run_config
from trainperf.report.series import RunSeries, run_series, warmup_text
from trainperf.report.sweep import Sweep, find_sweeps


@dataclass
class FigureFile:
    """One PNG of the report."""

    title: str
    path: Path
    caption: str = ""


@dataclass
class RunSection:
    """Everything shown for one run."""

    loaded: LoadedRun
    summary: Summary
    series: RunSeries
    figures: list[FigureFile] = field(default_factory=list)

    @property
    def run(self) -> RunRecord:
        return self.loaded.run


@dataclass
class Report:
    """A built report: its content and the files written."""

    title: str
    convention: str
    out_dir: Path
    created_utc: str
    runs: list[RunSection] = field(default_factory=list)
    explanations: list[Explanation] = field(default_factory=list)
    explain_figure: FigureFile | None = None
    sweeps: list[tuple[Sweep, FigureFile | None]] = field(default_factory=list)
    comparisons: list[tuple[Comparison, FigureFile | None]] = field(default_factory=list)
    configs: list[RunConfig] = field(default_factory=list)
    """What each run with a workload was (the configuration panel and the runs' differences)."""
    overlay_figures: list[FigureFile] = field(default_factory=list)
    """Per model with two runs or more: their per-step curves on one axis per quantity."""
    notes: list[str] = field(default_factory=list)
    """What could not be shown, and why (missing predictor, no workload, no matplotlib...)."""
    html_path: Path | None = None
    markdown_path: Path | None = None

    @property
    def figures(self) -> list[FigureFile]:
        out = list(self.overlay_figures)
        out += [f for r in self.runs for f in r.figures]
        if self.explain_figure is not None:
            out.append(self.explain_figure)
        out += [f for _, f in self.sweeps if f is not None]
        out += [f for _, f in self.comparisons if f is not None]
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (for ``trainperf report --json``)."""
        return {
            "title": self.title, "convention": self.convention, "out_dir": str(self.out_dir),
            "index_html": str(self.html_path) if self.html_path else None,
            "report_md": str(self.markdown_path) if self.markdown_path else None,
            "figures": [str(f.path) for f in self.figures],
            "runs": [{"name": r.summary.name, "origin": r.loaded.origin, "reader": r.loaded.reader,
                      "summary": r.summary.to_dict()} for r in self.runs],
            "configs": [{"name": c.name, **c.values, "described": c.described, "command": c.command}
                        for c in self.configs],
            "predicted_vs_measured": [
                {"name": e.name, "measured_step_time_s": e.measured_step_time_s,
                 "predicted_step_time_s": e.predicted_step_time_s, "unexplained_s": e.unexplained_s,
                 "error_pct": e.error_pct, "components_s": e.components,
                 "predicted_interval_s": list(e.interval_s) if e.interval_s else None,
                 "within_predicted_range": e.within_range} for e in self.explanations],
            "sweeps": [{"title": s.title, "mode": s.mode, "basis": s.basis,
                        "points": [vars(p) for p in s.points]} for s, _ in self.sweeps],
            "comparisons": [{"title": c.title, "convention": c.convention, "rows": [vars(r) for r in c.rows]}
                            for c, _ in self.comparisons],
            "notes": list(self.notes),
        }


def slug(name: str) -> str:
    """A file-name-safe version of ``name``."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return s[:60] or "run"


def _summarize(run: RunRecord, convention: str, peak_tflops: float | None, warmup: int | None) -> Summary:
    """Summary of ``run``: warm-up and peak as given, else as the run itself recorded them.

    A bench run records the peak it measured MFU against (e.g. the calibrated CPU matmul rate
    scaled to its threads per process); the report uses that same peak, under its own label,
    rather than the catalog's, so the report and the run agree. ``--peak-tflops`` overrides.
    """
    own_warmup = warmup is None and isinstance(run.meta.get("warmup_steps"), int) and len(run.steps) > 1
    if own_warmup:
        warmup = run.meta["warmup_steps"]  # the rule the run itself used (the meter's flag)
    own_peak = run.meta.get("peak_tflops")
    if peak_tflops is None and run.workload is not None and isinstance(own_peak, int | float) \
            and not isinstance(own_peak, bool) and own_peak > 0:
        s = summarize(run, convention=convention, peak_tflops=float(own_peak), warmup=warmup)
        label = run.meta.get("peak_source") or "peak recorded by the run"
        s = dataclasses.replace(s, peak_source=f"{label} (as the run recorded it)")
    else:
        s = summarize(run, convention=convention, peak_tflops=peak_tflops, warmup=warmup)
    if own_warmup:
        s = dataclasses.replace(s, warmup_rule=f"first {s.warmup_steps} steps, the run's own warm-up")
    return s


def _draw_run(section: RunSection, fig_dir: Path, index: int) -> None:
    from trainperf.report import plots

    s, series = section.summary, section.series
    stem = f"run{index:02d}-{slug(s.name)}"
    where = (s.num_devices and f" on {s.num_devices} device{'s' if s.num_devices != 1 else ''}") or ""
    p = plots.plot_timeline(series, f"{s.name}{where}: step time, throughput, MFU",
                            fig_dir / f"{stem}-timeline.png")
    section.figures.append(FigureFile(f"{s.name}: per-step timeline", p,
                                      f"Warm-up shaded: {warmup_text(series)} ({s.warmup_rule}); dashed: "
                                      "steady-state median."))
    if RunSeries.has(series.loss):
        p = plots.plot_single(series, series.loss, title=f"{s.name}: training loss", ylabel="loss (nats/token)",
                              label="loss", path=fig_dir / f"{stem}-loss.png")
        section.figures.append(FigureFile(f"{s.name}: loss", p, "Loss as the run logged it."))
    if RunSeries.has(series.memory_GiB):
        p = plots.plot_single(series, series.memory_GiB, title=f"{s.name}: peak memory per device",
                              ylabel="memory (GiB)", label="peak memory per device", color="#8c564b",
                              path=fig_dir / f"{stem}-memory.png", from_zero=True)
        section.figures.append(FigureFile(f"{s.name}: memory", p,
                                          "Peak memory per device as recorded (CUDA max allocated or CPU RSS high-water)."))


def _default_title(loaded: list[LoadedRun]) -> str:
    if len(loaded) <= 3:
        return f"trainperf report: {', '.join(lr.run.name for lr in loaded)}"
    by_source: dict[str, int] = {}
    for lr in loaded:
        by_source[lr.run.source] = by_source.get(lr.run.source, 0) + 1
    return f"trainperf report: {len(loaded)} runs ({', '.join(f'{n} {k}' for k, n in by_source.items())})"


def build_report(
    paths: list[str | Path],
    out_dir: str | Path,
    *,
    convention: str | None = None,
    peak_tflops: float | None = None,
    warmup: int | None = None,
    workload: Any = None,
    published: list[RunRecord] | None = None,
    use_published: bool = True,
    use_predictor: bool = True,
    title: str | None = None,
    runs: list[LoadedRun] | None = None,
    calibration: Any = None,
    force: bool = True,
    parents: bool = True,
) -> Report:
    """Build the report of the runs at ``paths`` (or of ``runs``) into ``out_dir``.

    ``published`` replaces the published runs (``None``: the packaged published-runs table's
    mapped rows, :func:`trainperf.predict.runs_table.published_records`); ``use_published=False`` leaves comparisons
    out, ``use_predictor=False`` the predicted-vs-measured section. ``workload`` completes
    framework logs that do not state the model or device. ``calibration`` (a loaded
    ``trainperf calibrate-model`` file) is handed to the predictor. ``force`` allows replacing
    an earlier report's files in ``out_dir``; ``parents`` allows creating its missing parents
    (both true for library callers; the CLI passes its ``--force`` / ``--parents``).
    """
    from trainperf.records.output_path import check_output_dir, claim_run_dir

    if convention is not None:
        get_convention(convention)
    out = check_output_dir(out_dir, what="--out", parents=parents)
    inputs = [p for p in paths if not Path(p).is_dir()]  # a run directory may hold the report
    if out.is_dir():  # refuse before anything changes: an earlier report, an input, a FIFO...
        _check_replaceable(out, inputs, force)
    loaded = list(runs) if runs is not None else load_paths(list(paths), workload=workload)
    convention = report_convention(loaded, convention)
    # One writer: the directory's lock (the one runs take), so two reports cannot mix their files.
    with claim_run_dir(out, what="--out", parents=parents, run=False):
        _check_replaceable(out, inputs, force)
        report = _build(loaded, out, convention=convention, peak_tflops=peak_tflops, warmup=warmup,
                        published=published, use_published=use_published, use_predictor=use_predictor,
                        title=title, calibration=calibration)
        _write_aside_and_swap(report, out, inputs, force)
    return report


def report_convention(loaded: list[LoadedRun], convention: str | None) -> str:
    """The one convention of a report's figures: the one named, else ``lora`` when every run is a
    LoRA fine-tune (as each counted itself), else megatron
    (:func:`~trainperf.accounting.conventions.run_convention`)."""
    lora = bool(loaded) and all(getattr(lr.run.workload, "lora", None) is not None for lr in loaded)
    return run_convention(convention, lora)


def _build(loaded: list[LoadedRun], out: Path, *, convention: str, peak_tflops: float | None, warmup: int | None,
           published: list[RunRecord] | None, use_published: bool, use_predictor: bool, title: str | None,
           calibration: Any) -> Report:
    """The report's content (summaries, explanations, sweeps, comparisons, notes); no file yet."""
    report = Report(
        title=title or _default_title(loaded),
        convention=convention, out_dir=out,
        created_utc=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"))
    _add_runs(report, loaded, convention, peak_tflops, warmup)
    report.notes += [n for n in (lora_counted_in_full_note(r.summary.name, getattr(r.run.workload, "lora", None)
                                                           is not None, convention) for r in report.runs) if n]
    pairs = [(r.run, r.summary) for r in report.runs]
    report.configs = [c for c in (run_config(r.summary.name, r.run) for r in report.runs) if c is not None]
    if use_predictor:
        report.explanations, notes = explain_runs(pairs, calibration=calibration, convention=convention)
        report.notes += notes
    report.sweeps = [(s, None) for s in find_sweeps(pairs, [r.loaded.given for r in report.runs])]
    report.notes += _not_in_a_sweep(report)
    if use_published:
        _add_comparisons(report, pairs, published, convention)
    return report


def _add_runs(report: Report, loaded: list[LoadedRun], convention: str, peak_tflops: float | None,
              warmup: int | None) -> None:
    for lr in loaded:
        report.notes += lr.notes  # lines skipped in reading it, an interrupted run
        if not lr.run.steps:
            report.notes.append(f"{lr.run.name}: no steps recorded ({lr.origin}); left out")
            continue
        s = _summarize(lr.run, convention, peak_tflops, warmup)
        report.runs.append(RunSection(lr, s, run_series(lr.run, s)))
        if lr.run.workload is None:
            report.notes.append(f"{s.name}: no workload (model, device, batch) known, so rates are the "
                                "run's own claims and it is left out of predictions, sweeps and comparisons")
        elif s.mfu_pct is None and s.peak_source:
            report.notes.append(f"{s.name}: MFU not computed ({s.peak_source})")
        if s.mfu_pct is not None:
            verdict = check_mfu(s.mfu_pct, s.peak_tflops or 0.0, s.peak_source or "")
            if not verdict.ok:
                report.notes.append(f"{s.name}: {verdict.reason}")
    if not report.runs:
        raise InputFileError("none of the runs given has a recorded step")


def _add_comparisons(report: Report, pairs: list[tuple[RunRecord, Summary]], published: list[RunRecord] | None,
                     convention: str) -> None:
    if published is None:
        published, why = load_published()
        if why:
            report.notes.append(f"no comparison with published results: {why}")
    pub_pairs = []
    for r in published or []:
        if r.steps and r.workload is not None:
            try:
                pub_pairs.append((r, summarize(r, convention=convention, warmup=0)))
            except TrainperfError as e:
                report.notes.append(f"published {r.name}: left out ({e})")
    report.comparisons = [(c, None) for c in find_comparisons(pairs, pub_pairs)]
    if published and not report.comparisons and any(r.workload is not None for r, _ in pairs):
        report.notes.append("no published result of the same model class as these runs")


REPORT_MANIFEST = ".trainperf-report.json"
"""The files the last report wrote into its directory: what the next one replaces or removes
(never a file it did not write)."""


def _check_replaceable(out: Path, inputs: list[Any], force: bool) -> None:
    """Refuse (one line) before any work: an earlier report's files without ``force``, an input
    of this command, a link, FIFO or directory where a file of the report goes."""
    from trainperf.records.output_path import check_output_file

    earlier = _earlier_report(out)
    for name in dict.fromkeys(["index.html", "report.md", *(p.name for p in _own_figures(out)), *earlier]):
        check_output_file(out / name, what="--out", inputs=inputs, force=force)


def _earlier_report(out: Path) -> list[str]:
    """The files the earlier report's manifest lists (plain names), or none."""
    try:
        fd = os.open(out / REPORT_MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as f:
        raw = f.read(1 << 20) if stat.S_ISREG(os.fstat(f.fileno()).st_mode) else b""
    try:
        files = json.loads(raw.decode("utf-8")).get("files")
    except (ValueError, RecursionError, AttributeError):
        return []
    ok = isinstance(files, list) and all(isinstance(n, str) and "/" not in n and _REPORT_FILE.fullmatch(n)
                                         for n in files)
    return list(files) if ok else []


def _write_aside_and_swap(report: Report, out: Path, inputs: list[Any], force: bool) -> None:
    """Draw and write every file into a temporary directory inside ``out``, then rename them into
    place (figures first, the page last) and remove what only the earlier report had: a report
    that fails part-way (a full disk, a stop signal) leaves the earlier report whole and no
    temporary file behind."""
    from trainperf.locked_update import write_replace
    from trainperf.records.output_path import check_output_file
    from trainperf.report.plots import matplotlib_available
    from trainperf.report.render import write_html, write_markdown

    tmp = Path(tempfile.mkdtemp(dir=out, prefix=".trainperf-report-"))
    try:
        if matplotlib_available():
            _draw_all(report, tmp)
        else:
            report.notes.append("no figures: matplotlib is not installed (pip install 'trainperf[plot]')")
        report.out_dir = tmp
        write_markdown(report, tmp / "report.md")
        write_html(report, tmp / "index.html")
        names = [f.path.name for f in report.figures] + ["report.md", "index.html"]
        earlier = _earlier_report(out)
        for name in names:
            check_output_file(out / name, what="--out", inputs=inputs, force=force)
            os.replace(tmp / name, out / name)
        write_replace(out / REPORT_MANIFEST, json.dumps({"version": 1, "files": names}).encode("utf-8"))
        for name in set(earlier) - set(names):  # the earlier report's figures this one has not
            p = out / name
            if p.is_file() and not p.is_symlink():
                p.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        report.out_dir = out
        for f in report.figures:
            f.path = out / f.path.name
    report.markdown_path, report.html_path = out / "report.md", out / "index.html"


def _not_in_a_sweep(report: Report) -> list[str]:
    """A note naming the runs at other device counts that are in no sweep, and why."""
    runs = [r for r in report.runs if r.run.workload is not None]
    if len({r.run.workload.num_devices for r in runs}) < 2:
        return []
    swept = {p.name for sw, _ in report.sweeps for p in sw.points}
    left = [r for r in runs if r.summary.name not in swept]
    if not left:
        return []
    return [f"no scaling sweep of {', '.join(r.summary.name for r in left)}: a sweep is runs of one layout at "
            "several device counts given together as one directory of runs (as `trainperf sweep` writes); "
            "these were given one by one or differ in layout ("
            + ", ".join(f"{r.summary.name}: {r.run.workload.plan.describe()}" for r in left) + ")"]


# Names of the PNGs a report writes. An existing one is replaced only with --force; the earlier
# report's figures that the new one does not draw are removed (only those its manifest lists), so
# report.md never sits beside figures of other runs.
_OWN_PNG = re.compile(r"(run\d{2}-.*-(timeline|loss|memory)|sweep\d{2}|comparison\d{2}|predicted-vs-measured"
                      r"|runs-overlaid\d{2})\.png")
_REPORT_FILE = re.compile(rf"index\.html|report\.md|{_OWN_PNG.pattern}")


def _own_figures(out: Path) -> list[Path]:
    return [p for p in out.glob("*.png") if _OWN_PNG.fullmatch(p.name)]


def _draw_all(report: Report, out: Path) -> None:
    from trainperf.report import plots

    by_model: dict[str, list[tuple[str, RunSeries, int]]] = {}
    for r in report.runs:
        if len(r.run.steps) >= 2:
            model = r.run.workload.model.name if r.run.workload is not None else "model not known"
            by_model.setdefault(model, []).append((r.summary.name, r.series, r.summary.num_devices or 1))
    for i, (model, curves) in enumerate(((m, c) for m, c in by_model.items() if len(c) >= 2), 1):
        p = plots.plot_overlay(curves, out / f"runs-overlaid{i:02d}.png", title=f"{model}: runs overlaid")
        report.overlay_figures.append(FigureFile(f"{model}: runs overlaid", p, "Each run's steps on one axis per "
                                                 "quantity; dotted: its warm-up (excluded from every statistic)."))
    for i, section in enumerate(report.runs, 1):
        if len(section.run.steps) >= 2:  # one step (a published figure) has no curve to show
            _draw_run(section, out, i)
    if report.explanations:
        p = plots.plot_predicted_vs_measured(
            report.explanations, out / "predicted-vs-measured.png",
            "predicted step-time breakdown vs measured median step time")
        report.explain_figure = FigureFile("predicted vs measured step time", p,
                                           "Upper bar: predicted components stacked, then the unexplained "
                                           "remainder (measured − predicted) hatched. Lower bar: measured.")
    sweeps: list[tuple[Sweep, FigureFile | None]] = []
    for i, (sw, _) in enumerate(report.sweeps, 1):
        p = plots.plot_sweep(sw, out / f"sweep{i:02d}.png")
        sweeps.append((sw, FigureFile(sw.title, p, f"Dashed: ideal scaling from the {sw.base.num_devices}-device run.")))
    report.sweeps = sweeps
    comps: list[tuple[Comparison, FigureFile | None]] = []
    for i, (c, _) in enumerate(report.comparisons, 1):
        p = plots.plot_comparison(c, out / f"comparison{i:02d}.png")
        comps.append((c, FigureFile(c.title, p, f"All bars recomputed under the {c.convention} convention.")))
    report.comparisons = comps
