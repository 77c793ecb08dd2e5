"""Issue 31, the report a user reads after the first runs: what each run was, what differs, runs on
one axis, scaling only from a sweep, the published chart, warm-up and memory figures, and the page
in a real browser (headless Chromium; a DOM-level check where no browser is installed).
"""

from __future__ import annotations

import base64
import html.parser
import json
import math
import os
import struct
import time
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from trainperf.records import RunRecord, StepRecord
from trainperf.records.jsonl import write_run
from trainperf.report.series import RunSeries, warmup_text
from trainperf.specs.workload_file import workload_from_dict

INJECTED = '<marquee>x</marquee> & "q" <script>alert(1)</script>'
LAYOUTS = {  # the runs: one process, then two processes split four ways
    "one": ({}, 1, 8), "dp2": ({"dp": 2}, 2, 16), "fsdp2": ({"fsdp": 2}, 2, 16),
    "tp2": ({"tp": 2, "sequence_parallel": True}, 2, 8)}
PEAK = {"kind": "calibrated", "tflops": 0.2, "threads": 1,
        "label": "cpu bf16 calibrated matmul peak (Test CPU (2 cores, avx2), 1 thread(s), calibration 2026-01-01)"}


def _bench_record(path: Path, name: str, parallel: dict, n: int, gb: int, step_s: float = 0.5,
                  own_name: str | None = None) -> Path:
    w = workload_from_dict({"model": {"preset": "debug"},
                            "hardware": {"device": "cpu", "num_devices": n, "devices_per_node": n},
                            "parallel": parallel,
                            "training": {"seq_len": 256, "global_batch": gb, "micro_batch": 8, "precision": "bf16"}})
    steps = [StepRecord(step=i, step_time_s=3.0 if i == 1 else step_s, loss=5.6 - 0.01 * i,
                        memory_GiB=0.50 + 0.001 * (i % 3)) for i in range(1, 9)]
    meta = {"name": own_name or name, "warmup_steps": 1, "peaks": [PEAK], "parallelism": f"{name} layout",
            "command": f"/x/src/trainperf/__main__.py bench --out runs/{name}"}
    return write_run(RunRecord("bench", steps, w, meta), path)


@pytest.fixture(scope="module")
def adhoc(tmp_path_factory) -> tuple[Path, list[Path]]:
    root = tmp_path_factory.mktemp("adhoc")
    paths = [_bench_record(root / "runs" / f"{k}.jsonl", k, *v) for k, v in LAYOUTS.items()]
    return root, paths


def _build(paths, out, **kw):
    from trainperf.report import build_report

    return build_report(paths, out, use_predictor=False, **kw)


# --- the run panel: layout per run, machine, the runs' differences ----------------------------------
def test_each_run_says_how_it_was_split_and_what_differs(adhoc):
    root, paths = adhoc
    rep = _build(paths, root / "panel", use_published=False)
    cfg = {c.name: c.values for c in rep.configs}
    assert {k: v["layout"] for k, v in cfg.items()} == {
        "one": "single device", "dp2": "dp=2", "fsdp2": "fsdp=2", "tp2": "tp=2 sp"}
    assert cfg["dp2"]["machine"] == "CPU: Test CPU (2 cores, avx2), 1 thread(s) per process"
    assert cfg["dp2"]["devices"] == "2 (1 node)" and cfg["one"]["devices"] == "1 (1 node)"
    page = rep.html_path.read_text()
    assert '<h2 id="config">What ran</h2>' in page and "What differs between the runs" in page
    for layout in ("dp=2", "fsdp=2", "tp=2 sp", "single device"):
        assert f"<td class=\"l\">{layout}</td>" in page
    from trainperf.report.panel import differing, shared_text

    assert differing(rep.configs) == ["devices", "layout", "global batch"]
    assert shared_text(rep.configs).startswith("model debug; machine CPU: Test CPU")
    assert "debug, cpu ×2, fsdp=2" in page  # the summary's workload column says the layout too
    assert "Layout: dp=2 (dp2 layout). Command: trainperf bench --out runs/dp2." in page
    md = rep.markdown_path.read_text()
    assert "## What ran" in md and "| layout ≠ |" in md and "### What differs between the runs" in md


# --- scaling only from a sweep ----------------------------------------------------------------------
def test_runs_given_one_by_one_are_no_sweep_and_the_note_says_so(adhoc):
    root, paths = adhoc
    rep = _build(paths, root / "oneby", use_published=False)
    assert rep.sweeps == []
    note = next(n for n in rep.notes if n.startswith("no scaling sweep of "))
    assert "one, dp2, fsdp2, tp2" in note and "tp2: tp=2 sp" in note
    assert 'id="scaling"' not in rep.html_path.read_text()


def test_a_directory_of_runs_gives_one_sweep_per_layout(adhoc):
    root, _ = adhoc
    rep = _build([root / "runs"], root / "dir", use_published=False)
    titles = sorted(sw.title for sw, _ in rep.sweeps)
    assert titles == ["debug on cpu, bf16, seq 256: weak scaling (dp)",
                      "debug on cpu, bf16, seq 256: weak scaling (fsdp)"]
    for sw, _ in rep.sweeps:
        assert sw.points[0].name == "one" and len(sw.points) == 2
        # weak: (X_2 / X_1) / (2 / 1) with X = 16 x 256 / 0.5 and 8 x 256 / 0.5 -> 100%
        assert sw.points[1].efficiency_pct == pytest.approx(100.0)
    assert any(n.startswith("no scaling sweep of tp2") for n in rep.notes)


# --- the published chart ---------------------------------------------------------------------------
def test_published_chart_is_one_class_one_precision_labelled_and_without_duplicates(tmp_path):
    from trainperf.report.load import load_published

    published, why = load_published()
    if why:
        pytest.skip(why)
    w = workload_from_dict({"model": {"preset": "llama3-8b"}, "hardware": {"device": "h100-sxm", "num_devices": 8},
                            "parallel": {"fsdp": 8}, "training": {"seq_len": 8192, "global_batch": 8,
                                                                   "precision": "bf16"}})
    steps = [StepRecord(step=i, step_time_s=1.2) for i in range(1, 6)]
    path = write_run(RunRecord("bench", steps, w, {"name": "mine"}), tmp_path / "mine.jsonl")
    rep = _build([path], tmp_path / "out")
    (comp, fig), = rep.comparisons
    theirs = [r for r in comp.rows if not r.mine]
    assert comp.title.startswith("llama3-8b class") and ", bf16:" in comp.title
    assert 0 < len(theirs) <= 12 and fig is not None
    assert not any(r.name.startswith("row:") for r in theirs)  # "NeMo 24.09 llama3-8b bf16, table row 23"
    by_name = {r.name: r for r in comp.rows}
    for r in theirs:
        run = next(p for p in published if p.name == r.name or r.name.endswith(f"table row {p.name[4:]}"))
        assert run.workload.precision == "bf16" and not run.workload.model.is_moe
    keys = [(r.device, r.num_devices, r.seq_len, round(r.tokens_per_s_per_device or 0, -1)) for r in theirs]
    assert len(keys) == len(set(keys))  # one bar per measurement
    assert "mine" in by_name


# --- warm-up label and memory axis ----------------------------------------------------------------------
def test_a_logs_warm_up_is_named_by_the_steps_it_covers():
    log = RunSeries(x=[1, 10, 20, 30], x_label="step", warmup_steps=2, step_time_s=[9.0, 1.0, 1.0, 1.0])
    assert warmup_text(log) == "2 logged steps (steps 1–10)"
    assert warmup_text(RunSeries(x=[1, 2, 3], x_label="step", warmup_steps=2, step_time_s=[1, 1, 1])) == "steps 1–2"
    assert warmup_text(RunSeries(x=[1, 2, 3], x_label="step", warmup_steps=1, step_time_s=[1, 1, 1])) == "step 1"

    from trainperf.report import plots

    spans = []

    class Ax:
        def axvspan(self, left, right, **kw):
            spans.append((left, right, kw["label"]))

    plots._shade_warmup(Ax(), log)
    assert spans == [(0.5, 10.5, "warm-up: 2 logged steps (steps 1–10), excluded")]


def test_memory_plots_start_at_zero(tmp_path, monkeypatch):
    from trainperf.report import plots

    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.append(fig) or path)
    s = RunSeries(x=[1, 2, 3, 4], x_label="step", warmup_steps=1, step_time_s=[1, 1, 1, 1],
                  memory_GiB=[0.50, 0.56, 0.55, 0.56])
    plots.plot_single(s, s.memory_GiB, title="m", ylabel="GiB", label="m", path=tmp_path / "m.png", from_zero=True)
    bottom, top = figs[0].axes[0].get_ylim()
    assert bottom == 0 and top == pytest.approx(0.56 * 1.15)


# --- runs overlaid -----------------------------------------------------------------------------------
def test_runs_of_one_model_are_overlaid_on_one_axis(adhoc):
    root, paths = adhoc
    rep = _build(paths, root / "overlay", use_published=False)
    (fig,) = rep.overlay_figures
    assert fig.title == "debug: runs overlaid" and fig.path.name == "runs-overlaid01.png"
    page = rep.html_path.read_text()
    assert '<h2 id="overlay">Runs overlaid</h2>' in page and 'alt="debug: runs overlaid"' in page


# --- the page in a browser ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def page(adhoc, tmp_path_factory):
    """A report with every section: the four runs, a run whose name carries markup, a published
    comparison (llama3-8b on 8 H100s) and a torchtitan log."""
    root, paths = adhoc
    extra = root / "extra"
    w = workload_from_dict({"model": {"preset": "llama3-8b"}, "hardware": {"device": "h100-sxm", "num_devices": 8},
                            "parallel": {"fsdp": 8}, "training": {"seq_len": 8192, "global_batch": 8}})
    named = write_run(RunRecord("bench", [StepRecord(step=i, step_time_s=1.2 + 0.01 * i) for i in range(1, 9)], w,
                                {"name": INJECTED}), extra / "named.jsonl")
    log = Path(__file__).parent / "fixtures" / "logs" / "torchtitan_llama3_8b_8xh100.log"
    return _build([*paths, named, log], tmp_path_factory.mktemp("page") / "out")


def _chromium() -> str | None:
    from test_report_browser import _find_chromium

    return _find_chromium()


def _measure_in_chromium(exe: str, index: Path, profile: Path) -> dict:
    from test_report_browser import Cdp, _console_errors

    cdp = Cdp(exe, profile)
    try:
        target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            cdp.send(f"{domain}.enable", session=session)
        cdp.send("Emulation.setDeviceMetricsOverride", {"width": 1400, "height": 1000, "deviceScaleFactor": 1,
                                                        "mobile": False}, session=session)
        cdp.send("Page.navigate", {"url": index.resolve().as_uri()}, session=session)
        cdp.wait_event("Page.loadEventFired", timeout_s=60)
        deadline = time.monotonic() + 30
        while True:  # every image decoded
            res = cdp.send("Runtime.evaluate", {"expression": "Array.from(document.images).every(i => i.complete)",
                                                "returnByValue": True}, session=session)
            if res["result"]["value"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        js = ("JSON.stringify({width: window.innerWidth, text: document.body.innerText,"
              " injected: document.querySelectorAll('marquee, script').length,"
              " imgs: Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]),"
              " tables: Array.from(document.querySelectorAll('table')).map(t => {"
              "   const box = t.closest('.tw') || t.parentElement, r = t.getBoundingClientRect(),"
              "         m = document.querySelector('main').getBoundingClientRect();"
              "   return [t.scrollWidth, box.clientWidth, r.right, m.right, t.rows[0].cells[0].innerText]; })})")
        res = cdp.send("Runtime.evaluate", {"expression": js, "returnByValue": True}, session=session)
        out = json.loads(res["result"]["value"])
        out["errors"] = _console_errors(cdp.events)
        return out
    finally:
        cdp.close()


class _Dom(html.parser.HTMLParser):
    """What the DOM-level check needs: tags opened, text, images, and each table's container."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []
        self.imgs: list[str] = []
        self.tables_in_scroller = 0
        self.tables = 0
        self._open: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "img":
            self.imgs.append(a.get("src") or "")
        if tag == "table":
            self.tables += 1
            self.tables_in_scroller += any(t == "div" and c == "tw" for t, c in self._open)
        if tag not in ("img", "meta", "br"):
            self._open.append((tag, a.get("class") or ""))

    def handle_endtag(self, tag):
        while self._open and self._open.pop()[0] != tag:
            pass

    def handle_data(self, data):
        self.text.append(data)


def _png_size(src: str) -> tuple[int, int]:
    assert src.startswith("data:image/png;base64,")
    data = base64.b64decode(src.split(",", 1)[1])
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.slow
def test_the_page_has_no_cut_off_table_no_unescaped_text_and_every_figure(page, tmp_path):
    index = page.html_path
    exe = None if os.environ.get("TRAINPERF_TEST_NO_BROWSER") else _chromium()  # =1: the DOM-level check
    if exe is not None:
        got = _measure_in_chromium(exe, index, tmp_path / "profile")
        assert got["width"] == 1400
        assert got["errors"] == []
        assert got["injected"] == 0 and INJECTED in got["text"]
        assert len(got["imgs"]) == len(page.figures) > 0
        for complete, w, h in got["imgs"]:
            assert complete and w > 0 and h > 0
        for scroll_w, box_w, right, main_right, first in got["tables"]:
            assert scroll_w <= box_w + 1, f"table {first!r} is cut off: {scroll_w} px in a {box_w} px box"
            assert right <= main_right + 1, first
        return
    # no browser here: the same promises, checked on the DOM the page's HTML builds
    dom = _Dom()
    dom.feed(index.read_text(encoding="utf-8"))
    assert "marquee" not in dom.tags and "script" not in dom.tags
    assert INJECTED in "".join(dom.text)
    assert dom.tables > 0 and dom.tables_in_scroller == dom.tables  # a wide table scrolls, never cut off
    assert len(dom.imgs) == len(page.figures) > 0
    for src in dom.imgs:
        w, h = _png_size(src)
        assert w > 0 and h > 0 and math.isfinite(w / h)
