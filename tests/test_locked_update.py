"""Shared caches under a file lock: lock, read, merge, write to a temporary file, fsync, rename."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainperf.errors import InputFileError
from trainperf.locked_update import lock_path, locked, update_file
from trainperf.specs.cpu_calibration import CpuCalibration, load_calibration, save_calibration

SRC = Path(__file__).resolve().parents[1] / "src"


def _cal(model: str, threads: int = 1) -> CpuCalibration:
    return CpuCalibration(cpu_model=model, threads=threads, peak_tflops={"fp32": 0.1},
                          memory_bandwidth_GB_per_s=10.0, measured_at="2026-01-01T00:00:00+00:00")


def test_two_processes_saving_200_calibrations_each_keep_all_400(tmp_path):
    path = tmp_path / "calibration.json"
    code = textwrap.dedent(f"""
        import sys
        from trainperf.specs.cpu_calibration import CpuCalibration, save_calibration
        who = sys.argv[1]
        sys.stdin.readline()  # start together
        for i in range(200):
            save_calibration(CpuCalibration(cpu_model=f"CPU {{who}} {{i}}", threads=1,
                             peak_tflops={{"fp32": 0.1}}, memory_bandwidth_GB_per_s=10.0,
                             measured_at="2026-01-01T00:00:00+00:00"), {str(path)!r})
    """)
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    procs = [subprocess.Popen([sys.executable, "-c", code, who], stdin=subprocess.PIPE, env=env,
                              stderr=subprocess.PIPE, text=True) for who in ("a", "b")]
    for p in procs:  # both are importing by now; release them at once
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    entries = json.loads(path.read_text())["entries"]
    assert len(entries) == 400
    assert {e["cpu_model"] for e in entries.values()} == {f"CPU {w} {i}" for w in "ab" for i in range(200)}
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary file left


def test_save_keeps_other_entries_and_replaces_a_corrupt_cache(tmp_path):
    path = tmp_path / "c" / "calibration.json"  # the directory is created
    save_calibration(_cal("A"), path)
    save_calibration(_cal("B", threads=2), path)
    assert load_calibration(path, cpu_model="A") == _cal("A")
    assert load_calibration(path, cpu_model="B").threads == 2
    path.write_text("{not json")
    assert load_calibration(path, cpu_model="A") is None  # ignored, with one line on stderr
    save_calibration(_cal("C"), path)
    assert list(json.loads(path.read_text())["entries"]) == ["C [1 thread]"]
    assert lock_path(path).name == ".calibration.json.lock" and lock_path(path).exists()


def test_update_merges_under_the_lock_and_keeps_the_mode(tmp_path):
    path = tmp_path / "cache.json"
    seen = []

    def add(key):
        def merge(old):
            seen.append(old)
            data = json.loads(old) if old is not None else {}
            data[key] = len(data)
            return json.dumps(data)
        return merge

    update_file(path, add("x"))
    os.chmod(path, 0o640)
    update_file(path, add("y"))
    assert seen[0] is None and json.loads(seen[1]) == {"x": 0}
    assert json.loads(path.read_text()) == {"x": 0, "y": 1}
    assert (path.stat().st_mode & 0o777) == 0o640


def test_a_failed_merge_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "cache.json"
    path.write_text("old")

    def boom(old):
        raise RuntimeError("killed mid-update")

    with pytest.raises(RuntimeError):
        update_file(path, boom)
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".cache.json.lock", "cache.json"]


def test_a_cache_too_large_reads_as_absent(tmp_path):
    path = tmp_path / "cache.json"
    path.write_bytes(b"x" * 100)
    got = []
    update_file(path, lambda old: got.append(old) or "new", max_bytes=99)
    assert got == [None] and path.read_text() == "new"


def test_a_held_lock_times_out_in_one_line(tmp_path):
    path = tmp_path / "cache.json"
    with locked(path), pytest.raises(InputFileError, match="held its lock") as e:
        update_file(path, lambda old: "x", timeout_s=0.2, what="test cache")
    assert "\n" not in str(e.value) and not path.exists()
    update_file(path, lambda old: "x")  # released
    assert path.read_text() == "x"


@pytest.mark.parametrize("kind", ["symlink", "dir", "fifo"])
def test_only_a_regular_file_is_replaced(tmp_path, kind):
    path = tmp_path / "cache.json"
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    if kind == "symlink":
        path.symlink_to(target)
    elif kind == "dir":
        path.mkdir()
    else:
        os.mkfifo(path)
    with pytest.raises(InputFileError, match="not a regular file"):
        update_file(path, lambda old: "x")
    assert target.read_text() == "keep"
    assert path.is_symlink() if kind == "symlink" else path.exists()
