"""``trainperf report``: what the report computes and writes, checked against hand-derived
numbers on synthetic runs (no torch needed)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from trainperf.accounting.throughput import throughput
from trainperf.records import RunRecord, StepRecord
from trainperf.records.jsonl import JsonlWriter, write_run
from trainperf.specs.workload_file import dump_workload_toml, workload_from_dict

SEQ = 4096
# weak-scaling sweep: 2 sequences per device per step; steady step time per device count
STEADY_S = {8: 1.0, 16: 1.25, 32: 1.6}
STEPS = 20


def workload(n: int, device: str = "h100-sxm", model: str = "llama3-8b", gb_per_device: int = 2):
    return workload_from_dict({
        "model": {"preset": model}, "hardware": {"device": device, "num_devices": n},
        "parallel": {"fsdp": n},
        "training": {"seq_len": SEQ, "global_batch": gb_per_device * n, "micro_batch": min(2, gb_per_device),
                     "precision": "bf16"}})


def bench_steps(steady_s: float, n_steps: int = STEPS) -> list[StepRecord]:
    # two slow warm-up steps, then a constant steady state (the median is exact)
    times = [3.0, 2.0] + [steady_s] * (n_steps - 2)
    return [StepRecord(step=i + 1, step_time_s=t, loss=8.0 - 0.1 * i, memory_GiB=30.0 + min(i, 3))
            for i, t in enumerate(times)]


def make_sweep(root: Path) -> Path:
    """Bench output directories as the bench writes them: steps.jsonl (header without the
    workload, to exercise the workload.toml fallback for one of them) + workload.toml."""
    sweep = root / "sweep"
    for n, t in STEADY_S.items():
        d = sweep / f"n{n}"
        d.mkdir(parents=True)
        w = workload(n)
        header_workload = None if n == 16 else w
        write_run(RunRecord("bench", bench_steps(t), header_workload, {"name": f"llama3-8b-n{n}"}),
                  d / "steps.jsonl")
        (d / "workload.toml").write_text(dump_workload_toml(w))
        (d / "summary.json").write_text("{}")
    return sweep


def published_record() -> RunRecord:
    w = workload(64, device="a100-sxm-80gb", gb_per_device=1)
    return RunRecord("published", [StepRecord(step=0, step_time_s=2.0, claimed_mfu_pct=41.0)], w,
                     {"name": "pub-llama3-8b-64xa100", "citation": "synthetic table row"})


_SHARED: dict[int, tuple] = {}


def shared_report(tmp_path_factory) -> tuple:
    """The sweep report (3 bench runs + 1 published record), built once per test session and
    shared by the report test modules (drawing the figures is the slow part)."""
    from trainperf.report import build_report

    key = id(tmp_path_factory)
    if key not in _SHARED:
        root = tmp_path_factory.mktemp("report")
        rep = build_report([make_sweep(root)], root / "out", published=[published_record()])
        _SHARED[key] = (rep, root)
    return _SHARED[key]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return shared_report(tmp_path_factory)


def test_summaries_exclude_warmup_and_use_the_workload(built):
    rep, _ = built
    by = {r.summary.name: r.summary for r in rep.runs}
    assert list(by) == ["llama3-8b-n8", "llama3-8b-n16", "llama3-8b-n32"]
    for n, t in STEADY_S.items():
        s = by[f"llama3-8b-n{n}"]
        assert s.warmup_steps == 2 and s.steps_measured == STEPS - 2  # 10% of 20 steps
        assert s.step_time_median_s == t
        assert s.tokens_per_s == 2 * n * SEQ / t
        exp = throughput(workload(n), step_time_s=t, convention="megatron")
        assert s.mfu_pct == pytest.approx(exp.mfu_pct, rel=1e-12)
        assert s.memory_max_GiB == 33.0 and s.loss_last == pytest.approx(8.0 - 0.1 * (STEPS - 1))


def test_weak_scaling_sweep_efficiency(built):
    rep, _ = built
    assert len(rep.sweeps) == 1
    sweep, fig = rep.sweeps[0]
    assert sweep.mode == "weak"
    assert [p.num_devices for p in sweep.points] == [8, 16, 32]
    # (X_N / X_8) / (N / 8) with X = 2N*SEQ/T  ->  T_8 / T_N
    assert [p.efficiency_pct for p in sweep.points] == pytest.approx([100.0, 80.0, 62.5])
    assert sweep.ideal_tokens_per_s(32) == pytest.approx(4 * 16 * SEQ / 1.0)
    assert fig is not None and fig.path.is_file()


def test_strong_scaling_when_global_batch_is_fixed(tmp_path):
    from trainperf.report import build_report

    runs = tmp_path / "strong"  # a sweep is given as one directory of runs
    runs.mkdir()
    for n, t in ((8, 2.0), (16, 1.25)):
        w = workload(n, gb_per_device=32 // n)  # global batch 32 in both
        write_run(RunRecord("bench", bench_steps(t), w, {"name": f"s{n}"}), runs / f"s{n}.jsonl")
    rep = build_report([runs], tmp_path / "out", use_published=False, use_predictor=False)
    sweep = rep.sweeps[0][0]
    assert sweep.mode == "strong"
    assert sweep.points[1].efficiency_pct == pytest.approx(100 * 2.0 * 8 / (1.25 * 16))  # 80%


def test_comparison_with_published_is_on_one_convention(built):
    rep, _ = built
    assert len(rep.comparisons) == 1
    comp, fig = rep.comparisons[0]
    assert comp.convention == "megatron" and fig is not None
    pub = [r for r in comp.rows if not r.mine]
    assert [r.name for r in pub] == ["pub-llama3-8b-64xa100"]
    exp = throughput(workload(64, device="a100-sxm-80gb", gb_per_device=1), step_time_s=2.0, convention="megatron")
    assert pub[0].mfu_pct == pytest.approx(exp.mfu_pct, rel=1e-12)
    assert pub[0].tflops_per_device == pytest.approx(exp.tflops_per_device, rel=1e-12)
    assert pub[0].claimed_mfu_pct == 41.0
    assert len([r for r in comp.rows if r.mine]) == 3


def test_files_written_and_markdown_mirrors_the_page(built):
    rep, root = built
    out = root / "out"
    assert rep.html_path == out / "index.html" and rep.markdown_path == out / "report.md"
    names = sorted(p.name for p in out.glob("*.png"))
    assert names == sorted(f.path.name for f in rep.figures)
    # 3 runs x (timeline, loss, memory) + the runs overlaid + sweep + comparison (+ predicted vs measured)
    assert len(names) == 12 + (1 if rep.explanations else 0)
    md = rep.markdown_path.read_text()
    for name in names:
        assert f"]({name})" in md
    assert "| llama3-8b-n16 |" in md and "| 80.0 |" in md and "| 62.5 |" in md
    assert "65,536" in md  # tokens/s of the 8-device run: 16 x 4096 / 1.0 s


def test_html_is_one_self_contained_page(built):
    rep, _ = built
    html = rep.html_path.read_text()
    assert "<script" not in html and "<link" not in html and "url(" not in html
    srcs = re.findall(r'<img[^>]*\ssrc="([^"]+)"', html)
    assert len(srcs) == len(rep.figures)
    assert not re.search(r'\s(?:src|href)="(?!data:|#)', html)  # nothing fetched from anywhere
    for src, fig in zip(srcs, rep.figures, strict=True):
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == fig.path.read_bytes()


def test_predicted_vs_measured_names_the_unexplained_remainder(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import trainperf.report.explain as explain
    from trainperf.report import build_report

    def fake_predict(w, **kw):
        n = w.num_devices  # 8: 0.6 s itemised of a 0.7 s step; 16: items overlap (sum 2.0 > 1.0)
        if n == 8:
            return SimpleNamespace(step_time_s=0.7, breakdown={"compute": 0.5, "exposed all-gather": 0.1})
        return SimpleNamespace(step_time_s=1.0, breakdown={"compute": 1.5, "all-gather": 0.5})

    monkeypatch.setattr(explain, "predictor", lambda: (fake_predict, None))
    sweep = make_sweep(tmp_path)
    rep = build_report([sweep / "n8", sweep / "n16"], tmp_path / "out", use_published=False)
    e8, e16 = rep.explanations
    assert e8.components == {"compute": 0.5, "exposed all-gather": 0.1, explain.OTHER: pytest.approx(0.1)}
    assert e8.unexplained_s == pytest.approx(1.0 - 0.7) and e8.error_pct == pytest.approx(-30.0)
    assert sum(e16.components.values()) == pytest.approx(1.0) and e16.notes  # scaled, and said so
    assert e16.unexplained_s == pytest.approx(0.25)
    assert rep.explain_figure is not None and rep.explain_figure.path.is_file()
    md = rep.markdown_path.read_text()
    assert "unexplained (s)" in md and "| 0.3000 |" in md


def test_predicted_vs_measured_with_the_real_predictor(built):
    pred = pytest.importorskip("trainperf.predict")
    if not callable(getattr(pred, "predict", None)):
        pytest.skip("trainperf.predict has no predict() yet")
    rep, _ = built
    assert len(rep.explanations) == 3
    for e, n in zip(rep.explanations, STEADY_S, strict=True):
        p = pred.predict(workload(n))
        assert e.predicted_step_time_s == pytest.approx(p.step_time_s)
        assert sum(e.components.values()) == pytest.approx(e.predicted_step_time_s)
        assert e.unexplained_s == pytest.approx(STEADY_S[n] - p.step_time_s)


def test_run_without_workload_shows_its_claims_and_an_interrupted_run_says_so(tmp_path):
    from trainperf.report import build_report

    path = tmp_path / "meter.jsonl"
    with JsonlWriter(path) as w:  # killed before the end line
        w.header(RunRecord("meter", meta={"name": "my-loop", "warmup_steps": 1}))
        for i in range(6):
            w.step(StepRecord(step=i + 1, step_time_s=0.5 if i else 2.0, tokens=1000,
                              claimed_tokens_per_s=2000.0 if i else 500.0, claimed_mfu_pct=10.0 if i else 2.5))
    rep = build_report([path], tmp_path / "out", use_published=False)
    (sec,) = rep.runs
    assert sec.summary.interrupted and sec.summary.warmup_steps == 1  # the meter's own warm-up
    assert sec.summary.claimed["tokens_per_s"] == 2000.0 and sec.summary.mfu_pct is None
    assert sec.series.mfu_label == "MFU (as the log claimed)" and sec.series.mfu_pct[1] == 10.0
    assert sec.series.tokens_per_s == [500.0] + [2000.0] * 5  # tokens / step time per step
    assert any("no workload" in n for n in rep.notes)
    md = rep.markdown_path.read_text()
    assert "2,000 (claimed)" in md and "interrupted" in md
    assert [f.path.name for f in sec.figures] == ["run01-my-loop-timeline.png"]  # no loss, no memory


def test_report_without_matplotlib_still_writes_tables(tmp_path, monkeypatch):
    import trainperf.report.plots as plots
    from trainperf.report import build_report

    monkeypatch.setattr(plots, "matplotlib_available", lambda: False)
    rep = build_report([make_sweep(tmp_path)], tmp_path / "out", use_published=False, use_predictor=False)
    assert rep.figures == [] and not list((tmp_path / "out").glob("*.png"))
    assert any("matplotlib" in n for n in rep.notes)
    assert "| 62.5 |" in rep.markdown_path.read_text() and "<img" not in rep.html_path.read_text()


def test_published_selector_builds_the_seed_weak_scaling_table(tmp_path):
    from trainperf.predict.runs_table import published_records
    from trainperf.report import build_report

    table = "table:DGXC-v24.11.1-maxtext-llama2-70b-bf16"
    chosen = published_records(table)
    assert len(chosen) == 6  # 64 to 2,048 H100
    rep = build_report([f"published:{table}"], tmp_path / "out", use_predictor=False, use_published=False)
    sweep = rep.sweeps[0][0]
    base = min(chosen, key=lambda r: r.workload.num_devices)
    x_b = base.workload.tokens_per_step / base.steps[0].step_time_s
    for p in sweep.points:
        r = next(r for r in chosen if r.name == p.name)
        x = r.workload.tokens_per_step / r.steps[0].step_time_s
        assert p.efficiency_pct == pytest.approx(100 * (x / x_b) / (p.num_devices / base.workload.num_devices))
    assert all(not sec.figures for sec in rep.runs)  # one-step records: a table row, no curve


def test_cli_report_json_and_one_line_errors(tmp_path, capsys):
    from trainperf.cli.main import main

    sweep = make_sweep(tmp_path)
    rc = main(["report", str(sweep), "--out", str(tmp_path / "out"), "--json", "--no-published", "--no-predict"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert Path(d["index_html"]).is_file() and len(d["figures"]) == 11
    assert [p["efficiency_pct"] for p in d["sweeps"][0]["points"]] == pytest.approx([100, 80, 62.5])
    assert main(["report", str(tmp_path / "missing"), "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err.strip()
    assert "does not exist" in err and len(err.splitlines()) == 1
    assert main(["report", str(sweep), "--out", str(tmp_path / "o3"), "--convention", "megatorn"]) == 2
    err = capsys.readouterr().err.strip()
    assert "did you mean megatron" in err and len(err.splitlines()) == 1


def test_framework_log_is_parsed_and_completed_by_a_workload_file(tmp_path):
    ingest = pytest.importorskip("trainperf.ingest")
    if not callable(getattr(ingest, "parse_log", None)):
        pytest.skip("trainperf.ingest has no parse_log yet")
    from trainperf.report import build_report

    log = tmp_path / "train.log"
    tokens = 2 * 16 * SEQ  # the workload's tokens per step, as MaxText's total_weights
    lines = [f"completed step: {i}, seconds: {t:.3f}, TFLOP/s/device: 400.0, Tokens/s/device: "
             f"{tokens / t / 16:.3f}, total_weights: {tokens}, loss: {9 - 0.1 * i:.3f}"
             for i, t in enumerate([9.0, 4.0, 4.0, 4.0, 4.0], 1)]
    log.write_text("\n".join(["I0101 some startup noise", *lines]) + "\n")
    rep = build_report([log], tmp_path / "out", workload=workload(16), use_published=False, use_predictor=False)
    (sec,) = rep.runs
    assert sec.loaded.reader == "log:maxtext"
    assert sec.run.workload is not None and sec.summary.step_time_median_s == 4.0
    assert sec.summary.tokens_per_s == pytest.approx(2 * 16 * SEQ / 4.0)
