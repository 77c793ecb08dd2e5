"""Files trainperf did not write are neither read as its own nor written through nor removed
(issue 30): a checkpoint is resumed only if its signed manifest matches, cache and temporary
files are created under random names and never through a link, a cache that fails validation is
rebuilt, ``--force`` removes only what the earlier run's manifest lists, and a report is built
aside and swapped in under the directory's one-writer lock."""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path

import pytest

from trainperf.cli.main import main
from trainperf.measure.checkpoint_manifest import (
    MANIFEST,
    CheckpointError,
    check_checkpoint_dir,
    key_path,
    verify,
    write_manifest,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="O_NOFOLLOW, flock as on Linux")


class _Payload:
    """Unpickling this creates the file ``marker``: what a crafted ``.metadata`` could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _checkpoint(root: Path, step: int = 3) -> Path:
    """A checkpoint as a save leaves it: shards, metadata, the signed manifest."""
    d = root / "ck" / f"step-{step}"
    d.mkdir(parents=True)
    (d / ".metadata").write_bytes(pickle.dumps({"state": [1, 2, 3]}))
    (d / "__0_0.distcp").write_bytes(os.urandom(4096))
    write_manifest(d, step)
    (d / ".done").write_text(f"{step}\n")
    return d


# ------------------------------------------------------------------------------ checkpoints
def test_a_checkpoint_trainperf_wrote_verifies(tmp_path, cache):
    d = _checkpoint(tmp_path)
    verify(d, 3)
    check_checkpoint_dir(str(d.parent), resume=True)
    key = key_path()
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32
    listed = {e["path"] for e in json.loads((d / MANIFEST).read_text())["files"]}
    assert listed == {".metadata", "__0_0.distcp"}


@pytest.mark.parametrize("damage", ["metadata", "extra", "missing", "link", "manifest", "forged", "no_key",
                                    "key_mode", "step"])
def test_a_changed_or_foreign_checkpoint_is_refused_before_it_is_read(tmp_path, cache, damage):
    d = _checkpoint(tmp_path)
    marker = tmp_path / "PWNED"
    m = json.loads((d / MANIFEST).read_text())
    if damage == "metadata":
        (d / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    elif damage == "extra":
        (d / "__1_0.distcp").write_bytes(b"x")
    elif damage == "missing":
        (d / "__0_0.distcp").unlink()
    elif damage == "link":
        (d / ".metadata").unlink()
        (tmp_path / "elsewhere").write_bytes(pickle.dumps(_Payload(marker)))
        (d / ".metadata").symlink_to(tmp_path / "elsewhere")
    elif damage == "manifest":
        (d / MANIFEST).unlink()
    elif damage == "forged":  # a manifest listing the crafted file, signed with another key
        (d / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
        key_path().unlink()
        write_manifest(d, 3)
        key_path().unlink()
        key_path().write_bytes(os.urandom(32))
        key_path().chmod(0o600)
    elif damage == "no_key":
        key_path().unlink()
    elif damage == "key_mode":
        key_path().chmod(0o644)
    elif damage == "step":
        (d / MANIFEST).write_text(json.dumps({**m, "step": 2}))
    with pytest.raises(CheckpointError) as e:
        verify(d, 3)
    assert "\n" not in str(e.value) and str(d) in str(e.value)
    with pytest.raises(CheckpointError):
        check_checkpoint_dir(str(d.parent), resume=True)
    assert not marker.exists()


def test_bench_resume_refuses_a_crafted_metadata_in_one_line_and_never_unpickles_it(tmp_path, cache, capsys):
    d = _checkpoint(tmp_path)
    marker = tmp_path / "PWNED"
    (d / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    argv = ["bench", "--steps", "4", "--checkpoint-dir", str(d.parent), "--resume", "--out", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "changed since trainperf wrote it" in err
    assert not marker.exists() and not (tmp_path / "run").exists()


def test_checkpoint_load_verifies_before_torch_reads(tmp_path, cache):
    torch = pytest.importorskip("torch")
    from trainperf.measure import checkpoint as ckpt

    d = _checkpoint(tmp_path)
    marker = tmp_path / "PWNED"
    (d / MANIFEST).unlink()
    (d / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    model = torch.nn.Linear(2, 2)
    with pytest.raises(CheckpointError, match="has no trainperf manifest"):
        ckpt.load(d.parent, 3, model, torch.optim.AdamW(model.parameters()))
    assert not marker.exists()


def test_checkpoint_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    for extra in (["--checkpoint-every", "1"], ["--resume"]):
        assert main(["bench", "--steps", "1", "--checkpoint-dir", str(f), *extra, "--out", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--checkpoint-dir=" in err and "is not one" in err


# ------------------------------------------------------------------------------ run records
def test_a_failed_write_never_leaves_half_a_line(tmp_path, monkeypatch):
    """Issue 30: a full disk cut steps.jsonl mid-line. A write that fails part-way is cut back to
    the last whole line and is one line naming what is kept."""
    import errno

    from trainperf.records import RunRecord, StepRecord
    from trainperf.records.jsonl import JsonlWriter, read_run
    from trainperf.records.output_path import OutputPathError

    w = JsonlWriter(tmp_path / "steps.jsonl")
    w.header(RunRecord("bench", meta={"name": "x"}))
    w.step(StepRecord(step=1, step_time_s=1.0))
    real_write = os.write

    def full_disk(fd, data):
        real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OutputPathError, match=r"No space left on device\); the 2 line\(s\) before are kept whole"):
        w.step(StepRecord(step=2, step_time_s=1.0))
    monkeypatch.setattr(os, "write", real_write)
    w.close()
    text = (tmp_path / "steps.jsonl").read_text()
    assert text.endswith("}\n") and text.count("\n") == 2
    run = read_run(tmp_path / "steps.jsonl")
    assert [s.step for s in run.steps] == [1] and run.meta["skipped_lines"] == 0


@pytest.mark.slow
def test_bench_on_a_full_disk_is_one_line_and_keeps_whole_lines(tmp_path):
    """The whole bench with every file capped at 6 kB (what a full disk looks like to write())."""
    import resource
    import signal
    import subprocess

    from trainperf.measure.testing import TINY_FLAGS

    def cap() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (6000, 6000))

    env = {**os.environ, "TRAINPERF_CACHE_DIR": str(tmp_path / "cache"), "TRAINPERF_NATIVE_BF16": "0"}
    from trainperf.measure.testing import fake_calibration

    fake_calibration(tmp_path / "cache")
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "trainperf", "bench", *TINY_FLAGS, "--precision", "fp32",
                        "--steps", "40", "--out", str(out)], preexec_fn=cap, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    assert p.stderr.count("\n") == 1 and "could not be written" in p.stderr and "Traceback" not in p.stderr
    text = (out / "steps.jsonl").read_text()
    assert text.endswith("}\n") and all(json.loads(line) for line in text.splitlines())


def test_a_run_directory_removed_mid_run_is_said_so(tmp_path):
    from trainperf.records.output_path import OutputPathError, claim_run_dir

    run = tmp_path / "run"
    with claim_run_dir(run) as claim:
        claim.check_still_there()
        import shutil

        shutil.rmtree(run)
        with pytest.raises(OutputPathError, match=r"was removed .* while the run was using it"):
            claim.check_still_there()


# ------------------------------------------------------------------------------ reports
def _two_runs(root: Path) -> list[Path]:
    from trainperf.records import RunRecord, StepRecord
    from trainperf.records.jsonl import write_run

    out = []
    for name in ("a", "b"):
        d = root / name
        d.mkdir(parents=True)
        steps = [StepRecord(step=k, step_time_s=1.0 + 0.01 * k, tokens=1000) for k in range(1, 6)]
        write_run(RunRecord("bench", steps, None, {"name": name}), d / "steps.jsonl")
        out.append(d)
    return out


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file() and p.name != ".trainperf-run.lock"}


@pytest.fixture
def earlier_report(tmp_path):
    pytest.importorskip("matplotlib")
    runs = _two_runs(tmp_path / "runs")
    out = tmp_path / "rep"
    argv = ["report", *map(str, runs), "--out", str(out), "--no-published", "--no-predict"]
    assert main(argv) == 0
    (out / "sweep07.png").write_bytes(b"the user's own figure")  # a report's name, not this report's file
    (out / "notes.txt").write_text("mine")
    return runs, out, argv


def test_a_report_that_fails_part_way_leaves_the_earlier_one_whole(earlier_report, monkeypatch, capsys):
    """Issue 30: a report --force that failed (disk full) left the old index.html beside the new
    report.md and figures."""
    import errno

    from trainperf.report import render

    runs, out, argv = earlier_report
    before = _files(out)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(render, "write_html", full)
    capsys.readouterr()
    with pytest.raises(OSError):
        main([*argv[:1], str(runs[0]), *argv[3:], "--force"])
    assert _files(out) == before
    assert not [p for p in out.iterdir() if p.name.startswith(".trainperf-report-")]


def test_a_second_report_into_the_same_directory_is_refused_while_one_is_written(earlier_report, capsys):
    from trainperf.records.output_path import claim_run_dir

    _runs, out, argv = earlier_report
    before = _files(out)
    with claim_run_dir(out, run=False):  # a report being written
        assert main([*argv, "--force"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "in use by another run" in err
    assert _files(out) == before


def test_force_replaces_only_what_the_earlier_report_wrote(earlier_report, capsys):
    runs, out, _argv = earlier_report
    first = set(json.loads((out / ".trainperf-report.json").read_text())["files"])
    assert {"index.html", "report.md"} <= first and any(n.endswith("-timeline.png") for n in first)
    # one run now: the second run's figures go, the user's files stay
    assert main(["report", str(runs[0]), "--out", str(out), "--no-published", "--no-predict", "--force"]) == 0
    second = set(json.loads((out / ".trainperf-report.json").read_text())["files"])
    names = {p.name for p in out.iterdir() if not p.name.startswith(".")}
    assert names == second | {"sweep07.png", "notes.txt"}
    assert (out / "sweep07.png").read_bytes() == b"the user's own figure"
    assert not [p for p in out.iterdir() if p.name.startswith(".trainperf-report-")]


# ------------------------------------------------------------------------------ stop signals
def test_sigterm_during_parse_save_leaves_no_temporary_file(tmp_path, monkeypatch, capsys):
    """Issue 30: SIGTERM during `parse --save` left hidden .NAME.*.tmp files (up to 27 MB)."""
    import signal

    from trainperf.records import jsonl

    log = Path(__file__).parent / "fixtures" / "logs" / "maxtext_llama2_70b_64xh100.log"
    out = tmp_path / "run.jsonl"
    out.write_text("the earlier record\n")
    real_line, written = jsonl._line, []

    def line_then_stop(obj):
        written.append(obj)
        if len(written) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_line(obj)

    monkeypatch.setattr(jsonl, "_line", line_then_stop)
    assert main(["parse", str(log), "--device", "h100-sxm", "--save", str(out), "--force"]) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "stopped by SIGTERM" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]
    assert out.read_text() == "the earlier record\n"


def test_sigterm_during_report_leaves_the_earlier_report_and_no_temporary_directory(earlier_report, monkeypatch,
                                                                                   capsys):
    import signal

    from trainperf.report import render

    _runs, out, argv = earlier_report
    before = _files(out)
    real = render.render_markdown

    def stop(report):
        os.kill(os.getpid(), signal.SIGTERM)
        return real(report)

    monkeypatch.setattr(render, "render_markdown", stop)
    capsys.readouterr()
    assert main([*argv, "--force"]) == 128 + signal.SIGTERM
    assert "stopped by SIGTERM" in capsys.readouterr().err
    assert _files(out) == before
    assert not [p for p in out.iterdir() if p.name.startswith(".trainperf-report-")]
