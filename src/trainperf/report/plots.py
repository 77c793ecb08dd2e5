"""The report's figures, drawn with matplotlib's object API on the Agg canvas.

matplotlib is imported inside each function (it is an optional extra, ``trainperf[plot]``),
and no pyplot state is touched: each figure is a standalone ``Figure`` on a
``FigureCanvasAgg``, saved as a PNG and closed with the function. Every figure has a title,
axis labels with units and a legend.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainperf.report.series import RunSeries, warmup_text

DPI = 110
WARMUP_COLOR = "#bbbbbb"
MEASURED_COLOR = "#333333"
UNEXPLAINED_COLOR = "#ffffff"


def matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(width_in: float, height_in: float, rows: int = 1, cols: int = 1, **kw: Any) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False, **kw)
    return fig, axes


def _inert_text(fig: Any) -> None:
    """Every text of ``fig`` (titles, labels, legends, ticks) as written: control characters
    shown (:func:`~trainperf.safe_text.terminal_text`, the figure's own line breaks kept) and
    no mathtext, so a run named ``$\\foo$`` is drawn as those characters, not parsed (and not
    refused by the math parser). Tick labels are drawn later, from their formatter: the
    functions give them as :func:`_tick` made them."""
    from matplotlib.text import Text

    from trainperf.safe_text import terminal_text

    for t in fig.findobj(Text):
        t.set_parse_math(False)
        text = t.get_text()
        if text:
            t.set_text(terminal_text(text, newlines=True))


def _tick(text: str) -> str:
    """A tick label made of a name: control characters shown (see :func:`_inert_text`)."""
    from trainperf.safe_text import terminal_text

    return terminal_text(text, newlines=True)


def _save(fig: Any, path: Path) -> Path:
    import matplotlib

    from trainperf.records.output_path import atomic_write

    _inert_text(fig)
    with atomic_write(path, what="figure", force=True, parents=True, mode="wb", encoding=None) as f, \
            matplotlib.rc_context({"text.parse_math": False}):  # the tick labels made while drawing
        fig.savefig(f, format="png", dpi=DPI, facecolor="white")
    return path


def _pairs(x: Sequence[int], y: Sequence[float | None]) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for a, b in zip(x, y, strict=False):
        if b is not None:
            xs.append(a)
            ys.append(b)
    return xs, ys


def _integer_steps(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _shade_warmup(ax: Any, s: RunSeries) -> None:
    """Shade the steps the warm-up covers: from the first recorded step to the last warm-up one
    (a log's record stands for the steps since the record before it)."""
    if s.warmup_steps <= 0 or not s.x:
        return
    k = min(s.warmup_steps, len(s.x))
    ax.axvspan(s.x[0] - 0.5, s.x[k - 1] + 0.5, color=WARMUP_COLOR, alpha=0.35, lw=0,
               label=f"warm-up: {warmup_text(s)}, excluded")


def _steady_median(s: RunSeries, ys: list[float | None]) -> float | None:
    import statistics

    vals = [v for v in ys[s.warmup_steps:] if v is not None]
    return statistics.median(vals) if vals else None


def _si_rate(values: list[float]) -> tuple[float, str]:
    top = max(values) if values else 0
    for div, unit in ((1e6, "M"), (1e3, "k")):
        if top >= 10 * div:
            return div, unit
    return 1.0, ""


def plot_timeline(s: RunSeries, title: str, path: Path) -> Path:
    """Step time, tokens/s and MFU (or TFLOP/s per device) over steps, warm-up shaded."""
    panels: list[tuple[str, list[float | None], str, float]] = [
        ("step time", list(s.step_time_s), "step time (s)", 1.0)]
    if RunSeries.has(s.tokens_per_s):
        div, unit = _si_rate([v for v in s.tokens_per_s if v is not None])
        panels.append(("tokens/s (global)", list(s.tokens_per_s), f"throughput ({unit}tokens/s)", div))
    if RunSeries.has(s.mfu_pct):
        panels.append((s.mfu_label, list(s.mfu_pct), "MFU (%)", 1.0))
    elif RunSeries.has(s.tflops_per_device):
        panels.append(("TFLOP/s per device", list(s.tflops_per_device), "TFLOP/s per device", 1.0))
    fig, axes = _figure(8.0, 1.2 + 1.55 * len(panels), rows=len(panels), sharex=True)
    colors = ("#1f77b4", "#2ca02c", "#d62728")
    for i, (label, ys, ylabel, div) in enumerate(panels):
        ax = axes[i][0]
        xs, vs = _pairs(s.x, ys)
        vs = [v / div for v in vs]
        ax.plot(xs, vs, marker="." if len(xs) <= 60 else None, lw=1.2, color=colors[i], label=label)
        _shade_warmup(ax, s)
        med = _steady_median(s, ys)
        if med is not None:
            ax.axhline(med / div, color="#555555", ls="--", lw=0.9,
                       label=f"steady median {med / div:.4g}")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    axes[-1][0].set_xlabel(s.x_label)
    _integer_steps(axes[-1][0])
    fig.suptitle(title)
    return _save(fig, path)


def plot_single(s: RunSeries, ys: list[float | None], *, title: str, ylabel: str, label: str,
                path: Path, color: str = "#9467bd", from_zero: bool = False) -> Path:
    """One per-step quantity (loss, memory) over steps, warm-up shaded; ``from_zero``: the axis
    starts at 0 (memory: a flat line must look flat, not zoomed to its noise)."""
    fig, axes = _figure(6.0, 3.4)
    ax = axes[0][0]
    xs, vs = _pairs(s.x, ys)
    ax.plot(xs, vs, lw=1.2, marker="." if len(xs) <= 60 else None, color=color, label=label)
    _shade_warmup(ax, s)
    ax.set_xlabel(s.x_label)
    _integer_steps(ax)
    ax.set_ylabel(ylabel)
    if from_zero:
        ax.set_ylim(0, max(vs) * 1.15 if vs and max(vs) > 0 else 1.0)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _save(fig, path)


OVERLAY_PANELS: tuple[tuple[str, str, bool], ...] = (
    ("step_time_s", "step time (s)", False), ("tokens_per_s_per_device", "tokens/s per device", True),
    ("loss", "loss (nats/token)", False), ("memory_GiB", "peak memory per device (GiB)", True))
"""The overlay's panels: series, axis label, whether the axis starts at 0."""


def plot_overlay(runs: list[tuple[str, RunSeries, int]], path: Path, title: str = "runs overlaid") -> Path:
    """Every run on one axis per quantity (step time, tokens/s per device, loss, memory), each
    run one colour, its warm-up drawn thin; ``runs`` are (name, series, devices)."""
    def values(s: RunSeries, key: str, n: int) -> list[float | None]:
        if key == "tokens_per_s_per_device":
            return [None if v is None else v / max(n, 1) for v in s.tokens_per_s]
        return list(getattr(s, key))

    panels = [p for p in OVERLAY_PANELS if any(RunSeries.has(values(s, p[0], n)) for _, s, n in runs)]
    fig, axes = _figure(11.0, 1.4 + 2.6 * ((len(panels) + 1) // 2), rows=(len(panels) + 1) // 2, cols=2)
    for i, (key, ylabel, from_zero) in enumerate(panels):
        ax = axes[i // 2][i % 2]
        top = 0.0
        for j, (name, s, n) in enumerate(runs):
            xs, vs = _pairs(s.x, values(s, key, n))
            k = min(s.warmup_steps, len(xs))
            color = f"C{j % 10}"
            ax.plot(xs[max(k - 1, 0):], vs[max(k - 1, 0):], lw=1.3, color=color, label=name)
            if k:
                ax.plot(xs[:k], vs[:k], lw=0.8, ls=":", color=color)
            top = max([top, *vs])
        if from_zero:
            ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
        ax.set_ylabel(ylabel)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        _integer_steps(ax)
    for i in range(len(panels), 2 * len(axes)):
        axes[i // 2][i % 2].set_visible(False)
    axes[0][0].legend(loc="best", fontsize=7)
    fig.suptitle(f"{title} (dotted: warm-up)")
    return _save(fig, path)


def _time_unit(values: list[float]) -> tuple[float, str]:
    top = max(values) if values else 1.0
    if top < 1e-2:
        return 1e6, "µs"
    if top < 2.0:
        return 1e3, "ms"
    return 1.0, "s"


def plot_predicted_vs_measured(rows: list[Any], path: Path, title: str) -> Path:
    """Per run, two horizontal bars: the predicted breakdown stacked, with the unexplained
    remainder (measured − predicted, when positive) hatched after it; and the measured median
    step time. ``rows`` are :class:`trainperf.report.explain.Explanation` objects."""
    import numpy as np
    from matplotlib import colormaps

    comps: list[str] = []
    for r in rows:
        comps += [k for k in r.components if k not in comps]
    scale, unit = _time_unit([max(r.measured_step_time_s, r.predicted_step_time_s) for r in rows])
    n = len(rows)
    fig, axes = _figure(10.0, max(3.0, 1.6 + 0.62 * n))
    ax = axes[0][0]
    y = np.arange(n, dtype=float)
    h = 0.38
    cmap = colormaps["tab20"]
    lefts = np.zeros(n)
    for ci, comp in enumerate(comps):
        vals = np.array([r.components.get(comp, 0.0) * scale for r in rows])
        if not vals.any():
            continue
        ax.barh(y - h / 2, vals, h, left=lefts, color=cmap(ci % 20), edgecolor="white", lw=0.5,
                label=f"predicted: {comp}")
        lefts += vals
    rem = np.array([max(0.0, r.unexplained_s) * scale for r in rows])
    if rem.any():
        ax.barh(y - h / 2, rem, h, left=lefts, color=UNEXPLAINED_COLOR, edgecolor="#d62728", hatch="///",
                lw=0.8, label="unexplained (measured − predicted)")
    ax.barh(y + h / 2, [r.measured_step_time_s * scale for r in rows], h, color=MEASURED_COLOR,
            label="measured (steady median)")
    top = max(max(r.measured_step_time_s, r.predicted_step_time_s) for r in rows) * scale
    for yi, r in zip(y, rows, strict=False):
        note = f"predicted {r.error_pct:+.1f}% vs measured"
        end = max(r.predicted_step_time_s, r.measured_step_time_s) * scale
        ax.text(end + 0.01 * top, yi - h / 2, note, va="center", fontsize=7,
                color="#d62728" if r.unexplained_s < 0 else "#333333")
    ax.set_yticks(y, [_tick(r.name) for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.3)
    ax.set_xlabel(f"step time ({unit})")
    ax.set_ylabel("run")
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    return _save(fig, path)


def plot_sweep(sweep: Any, path: Path) -> Path:
    """Global tokens/s and TFLOP/s per device against device count, with the ideal lines."""
    pts = sweep.points
    ns = [p.num_devices for p in pts]
    fig, axes = _figure(10.0, 4.2, rows=1, cols=2)
    ax = axes[0][0]
    div, unit = _si_rate([p.tokens_per_s for p in pts] + [sweep.ideal_tokens_per_s(n) for n in ns])
    ax.plot(ns, [sweep.ideal_tokens_per_s(n) / div for n in ns], ls="--", color="#777777",
            label="ideal (linear from the base run)")
    ax.plot(ns, [p.tokens_per_s / div for p in pts], marker="o", color="#1f77b4", label="measured")
    ax.set_xlabel("devices")
    ax.set_ylabel(f"global throughput ({unit}tokens/s)")
    ax.set_title("throughput vs device count")
    wide = max(ns) / min(ns) >= 8  # many doublings: log axes keep the points apart
    if wide:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax2 = axes[0][1]
    if all(p.tflops_per_device is not None for p in pts):
        ys = [p.tflops_per_device for p in pts]
        ylabel, what = f"TFLOP/s per device ({sweep.convention})", "TFLOP/s per device"
    else:
        ys = [p.tokens_per_s_per_device for p in pts]
        ylabel, what = "tokens/s per device", "tokens/s per device"
    ax2.plot(ns, [ys[0]] * len(ns), ls="--", color="#777777", label="ideal (constant per device)")
    ax2.plot(ns, ys, marker="o", color="#2ca02c", label="measured")
    ax2.set_xlabel("devices")
    ax2.set_ylabel(ylabel)
    ax2.set_title(f"{what} vs device count")
    if wide:
        ax2.set_xscale("log", base=2)
    ax2.set_xticks(ns, [str(n) for n in ns])
    ax2.set_ylim(0, 1.15 * max(ys))
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize=8)
    fig.suptitle(sweep.title)
    return _save(fig, path)


def plot_comparison(comp: Any, path: Path) -> Path:
    """MFU and TFLOP/s per device of the user's runs and the published ones, one convention."""
    rows = [r for r in comp.rows if r.mfu_pct is not None or r.tflops_per_device is not None]
    labels = [f"{_tick(r.name)}\n{_tick(r.device)} x{r.num_devices}" for r in rows]
    colors = ["#1f77b4" if r.mine else "#ff7f0e" for r in rows]
    fig, axes = _figure(10.0, 1.4 + 0.55 * len(rows), rows=1, cols=2, sharey=True)
    y = list(range(len(rows)))
    for ax, attr, xlabel in ((axes[0][0], "mfu_pct", f"MFU (%), {comp.convention}"),
                             (axes[0][1], "tflops_per_device", f"TFLOP/s per device, {comp.convention}")):
        vals = [getattr(r, attr) or 0.0 for r in rows]
        ax.barh(y, vals, color=colors)
        for yi, _v, r in zip(y, vals, rows, strict=False):
            if getattr(r, attr) is None:
                ax.text(0, yi, " n/a", va="center", fontsize=7)
        ax.set_xlabel(xlabel)
        ax.grid(True, axis="x", alpha=0.3)
        if attr == "tflops_per_device" and vals and max(vals) > 0 and min(v for v in vals if v > 0) * 100 < max(vals):
            ax.set_xscale("log")
    axes[0][0].set_yticks(y, labels, fontsize=7)
    axes[0][0].invert_yaxis()
    from matplotlib.patches import Patch

    axes[0][1].legend(handles=[Patch(color="#1f77b4", label="runs in this report"),
                               Patch(color="#ff7f0e", label="published catalog")], fontsize=8,
                      loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(comp.title)
    return _save(fig, path)
