"""Safe output writing (issue 12, item 1): no command destroys an input, a device, a FIFO or a
directory; an existing file is replaced only with --force, atomically; no parent directory is
created beyond the one named unless --parents. Each refusal is one line, exit 2, nothing changed."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from trainperf.cli.main import main
from trainperf.records.output_path import (
    OutputPathError,
    check_output_dir,
    check_output_file,
    write_text_atomic,
)

NANOGPT_LOG = """\
tokens per iteration will be: 491,520
iter 0: loss 10.9, time 9000.00ms, mfu -100.00%
iter 1: loss 10.1, time 420.00ms, mfu -100.00%
iter 2: loss 9.8, time 421.00ms, mfu -100.00%
iter 3: loss 9.5, time 419.00ms, mfu -100.00%
iter 4: loss 9.3, time 420.50ms, mfu -100.00%
"""


def _snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` with its type, size, mtime and (for files) contents."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            st = os.lstat(p)
            body = p.read_bytes() if stat.S_ISREG(st.st_mode) else None
            out[str(p.relative_to(root))] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ino, body)
    return out


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "victim.log").write_text(NANOGPT_LOG)
    return tmp_path


def _refused(capsys, argv: list[str], root: Path, needle: str) -> str:
    before = _snapshot(root)
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert needle in err, err
    assert _snapshot(root) == before, "a refused write changed something on disk"
    return err


def test_save_onto_its_own_input_is_refused(workdir, capsys):
    _refused(capsys, ["parse", "victim.log", "--save", "victim.log"], workdir, "is an input of this command")
    # --force does not make an input writable, nor does another spelling or a hard link of it
    _refused(capsys, ["parse", "victim.log", "--save", "./victim.log", "--force"], workdir, "input")
    os.link(workdir / "victim.log", workdir / "alias.log")
    _refused(capsys, ["parse", "victim.log", "--save", "alias.log", "--force"], workdir, "input")


def test_save_inside_an_input_directory_onto_a_log_is_refused(workdir, capsys):
    d = workdir / "logs"
    d.mkdir()
    (d / "a.log").write_text(NANOGPT_LOG)
    (d / "b.log").write_text("not a log\n")
    _refused(capsys, ["parse", "logs", "--save", "logs/b.log", "--force"], workdir, "input directory")


def test_save_onto_a_fifo_is_refused(workdir, capsys):
    os.mkfifo(workdir / "pipe")
    _refused(capsys, ["parse", "victim.log", "--save", "pipe", "--force"], workdir, "FIFO")


def test_save_onto_a_directory_is_refused(workdir, capsys):
    (workdir / "d").mkdir()
    _refused(capsys, ["parse", "victim.log", "--save", "d", "--force"], workdir, "is a directory")


def test_save_under_a_file_is_refused(workdir, capsys):
    _refused(capsys, ["parse", "victim.log", "--save", "victim.log/x.jsonl"], workdir, "not a directory")


def test_save_into_a_missing_directory_is_refused(workdir, capsys):
    _refused(capsys, ["parse", "victim.log", "--save", "no/such/dir/x.jsonl"], workdir, "--parents")
    assert not (workdir / "no").exists()


def test_save_onto_an_existing_file_needs_force(workdir, capsys):
    (workdir / "old.jsonl").write_text("precious\n")
    _refused(capsys, ["parse", "victim.log", "--save", "old.jsonl"], workdir, "--force")
    assert (workdir / "old.jsonl").read_text() == "precious\n"


def test_save_onto_a_device_node_is_refused(workdir, capsys):
    if not os.path.exists("/dev/null"):
        pytest.skip("no /dev/null")
    before = os.stat("/dev/null")
    rc = main(["parse", "victim.log", "--save", "/dev/null", "--force"])
    err = capsys.readouterr().err
    assert rc == 2 and "device node" in err and len(err.strip().splitlines()) == 1
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


def test_save_onto_a_symlink_is_refused(workdir, capsys):
    (workdir / "target.txt").write_text("keep\n")
    os.symlink("target.txt", workdir / "link.jsonl")
    _refused(capsys, ["parse", "victim.log", "--save", "link.jsonl", "--force"], workdir, "symbolic link")


def test_save_with_force_replaces_a_regular_file_atomically(workdir, capsys):
    old = workdir / "old.jsonl"
    old.write_text("precious\n")
    os.chmod(old, 0o640)
    assert main(["parse", "victim.log", "--save", "old.jsonl", "--force"]) == 0
    lines = old.read_text().splitlines()
    assert json.loads(lines[0])["type"] == "run" and json.loads(lines[-1])["type"] == "end"
    assert stat.S_IMODE(old.stat().st_mode) == 0o640  # the replaced file's permissions are kept
    assert sorted(p.name for p in workdir.iterdir()) == ["old.jsonl", "victim.log"]  # no temp file left


def test_save_new_file_and_parents(workdir, capsys):
    assert main(["parse", "victim.log", "--save", "new.jsonl"]) == 0
    assert (workdir / "new.jsonl").is_file()
    assert main(["parse", "victim.log", "--save", "a/b/c.jsonl", "--parents"]) == 0
    assert (workdir / "a" / "b" / "c.jsonl").is_file()


def test_refusal_comes_before_parsing(workdir, capsys):
    """An unsafe --save is refused even when the log itself would fail to parse."""
    (workdir / "empty.log").write_text("")
    _refused(capsys, ["parse", "empty.log", "--save", "empty.log"], workdir, "is an input")


def test_failed_write_leaves_the_old_file(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text("old\n")
    with pytest.raises(RuntimeError):
        from trainperf.records.output_path import atomic_write

        with atomic_write(p, force=True) as f:
            f.write("half")
            raise RuntimeError("killed mid-write")
    assert p.read_text() == "old\n"
    assert [x.name for x in tmp_path.iterdir()] == ["f.txt"]


def test_library_checks(tmp_path):
    with pytest.raises(OutputPathError):
        check_output_file(tmp_path)
    with pytest.raises(OutputPathError):
        check_output_dir(tmp_path / "x" / "y")
    assert check_output_dir(tmp_path / "x") == tmp_path / "x" and not (tmp_path / "x").exists()
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(OutputPathError, match="not a directory"):
        check_output_dir(f)
    write_text_atomic(tmp_path / "n.txt", "hi")
    assert (tmp_path / "n.txt").read_text() == "hi"


def test_calibrate_model_output_is_checked(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "calibration.json").write_text("{}\n")
    _refused(capsys, ["calibrate-model", "published:mi250-gcd", "--knobs", "matmul_fraction"],
             tmp_path, "--force")
    os.mkfifo(tmp_path / "fifo.json")
    _refused(capsys, ["calibrate-model", "published:mi250-gcd", "-o", "fifo.json", "--force"], tmp_path, "FIFO")


def test_report_out_is_checked(workdir, capsys):
    (workdir / "afile").write_text("x\n")
    _refused(capsys, ["report", "victim.log", "--out", "afile"], workdir, "not a directory")
    _refused(capsys, ["report", "victim.log", "--out", "no/such/out"], workdir, "--parents")
    d = workdir / "rep"
    d.mkdir()
    (d / "index.html").write_text("an earlier report\n")
    _refused(capsys, ["report", "victim.log", "--out", "rep", "--no-published", "--no-predict"], workdir, "--force")


def test_bench_out_is_checked_before_anything_runs(tmp_path, capsys):
    pytest.importorskip("torch")
    (tmp_path / "afile").write_text("x\n")
    _refused(capsys, ["bench", "--steps", "1", "--out", str(tmp_path / "afile")], tmp_path, "not a directory")
    _refused(capsys, ["bench", "--steps", "1", "--out", str(tmp_path / "no" / "such")], tmp_path, "--parents")


def test_slurm_out_files_need_force(tmp_path, capsys):
    out = tmp_path / "job"
    assert main(["slurm", "--nodes", "2", "--device", "h100-sxm", "--out", str(out)]) == 0
    capsys.readouterr()
    (out / "bench.sbatch").write_text("# edited by hand\n")
    _refused(capsys, ["slurm", "--nodes", "2", "--device", "h100-sxm", "--out", str(out)], tmp_path, "--force")
    assert main(["slurm", "--nodes", "2", "--device", "h100-sxm", "--out", str(out), "--force"]) == 0
    assert "edited by hand" not in (out / "bench.sbatch").read_text()


def test_a_nul_byte_in_the_path_is_one_line(workdir, capsys):
    _refused(capsys, ["parse", "victim.log", "--save", "a\x00b"], workdir, "null byte")
