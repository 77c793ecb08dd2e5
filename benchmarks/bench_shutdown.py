"""How fast a stopped or broken ``trainperf bench --nproc 2`` ends, and what a refused number costs.

Three measurements, each a fresh ``trainperf bench`` of the tiny test model on the CPU (gloo):

1. **stop**: SIGTERM to the launcher once ``--after`` steps are recorded; the seconds until every
   process it started (both workers; torchrun runs in the launcher) is gone and the launcher has
   exited with the summary written. Goal (issue 17): within 15 s; the design bound is the stop
   grace (8 s) plus torchrun's 1 s before SIGKILL. Before this change the launcher died at once and torchrun and the
   workers went on training (45 s later still running; no summary): there is no finite baseline.
2. **dead worker**: SIGKILL to rank 1 (what the OOM killer sends); the seconds until the launcher
   has exited, and the lines it printed on stderr (goal: one; before: ~90 lines of tracebacks).
3. **refusal**: ``bench`` given an absurd number (``--global-batch 1e12``, ``--steps 1e8``, ...):
   the wall time and peak RSS of the whole process (goal: under 2 s and 200 MB; torch alone
   takes ~220 MB, so a refusal must come before it is imported). The baseline, measured here,
   is ``python -c "import torch"``.

    python benchmarks/bench_shutdown.py               # 5 runs of each, ~5 minutes on 2 busy cores
    python benchmarks/bench_shutdown.py --runs 3

Exit code 1 if a goal is missed (2 if a run misbehaves).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TINY = ["--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn-hidden", "128",
        "--seq-len", "32", "--micro-batch", "2", "--threads", "1"]
ABSURD = [["--global-batch", "1000000000000"], ["--steps", "100000000"], ["--nproc", "1000000000000"],
          ["--seq-len", "1000000000000000"], ["--micro-batch", "100000000000"]]
STOP_GOAL_S, REFUSAL_GOAL_S, REFUSAL_GOAL_MB = 15.0, 2.0, 200.0


def _descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(p.name))
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def _rank_pid(pids: list[int], rank: int) -> int | None:
    for pid in pids:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"LOCAL_RANK={rank}".encode() in env:
            return pid
    return None


def _start(env: dict[str, str], out: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "trainperf.cli.main", "bench", *TINY, "--steps", "100000", "--nproc", "2",
           "--fsdp", "2", "--out", str(out)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_steps(out: Path, n: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    t = time.monotonic()
    while time.monotonic() - t < timeout:
        f = out / "steps.jsonl"
        if f.exists() and f.read_text().count('"type":"step"') >= n:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"bench exited early ({proc.returncode}): {proc.stderr.read()}")
        time.sleep(0.1)
    raise RuntimeError("no steps in time")


def _ended(proc: subprocess.Popen, tree: list[int], timeout: float = 120) -> float:
    """Seconds until ``proc`` exited and no pid of ``tree`` exists (a zombie counts as existing)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None and not [p for p in tree if os.path.exists(f"/proc/{p}")]:
            return time.monotonic() - t0
        time.sleep(0.02)
    raise RuntimeError(f"still running {timeout} s later")


def one_stop(env: dict[str, str], root: Path, k: int, after: int) -> float:
    out = root / f"stop{k}"
    proc = _start(env, out)
    try:
        _wait_steps(out, after, proc)
        tree = _descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        took = _ended(proc, tree)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    s = json.loads((out / "summary.json").read_text())
    if not (s["interrupted"] and s["steps_completed"] >= after and proc.returncode == 143):
        raise RuntimeError(f"stop run {k}: summary {s.get('steps_completed')} steps, exit {proc.returncode}")
    return took


def one_kill(env: dict[str, str], root: Path, k: int, after: int) -> tuple[float, int]:
    out = root / f"kill{k}"
    proc = _start(env, out)
    try:
        _wait_steps(out, after, proc)
        tree = _descendants(proc.pid)
        victim = _rank_pid(tree, 1)
        if victim is None:
            raise RuntimeError("rank 1 not found")
        os.kill(victim, signal.SIGKILL)
        took = _ended(proc, tree)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return took, len(err.strip().splitlines())


def one_refusal(env: dict[str, str], argv: list[str]) -> tuple[float, float, int]:
    """(seconds, peak RSS in MB, exit code) of one process running ``argv``."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return took, usage.ru_maxrss / 1024, proc.returncode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="runs of each measurement (default 5)")
    p.add_argument("--after", type=int, default=3, help="steps recorded before the signal (default 3)")
    a = p.parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("needs Linux (/proc)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        from trainperf.measure.testing import fake_calibration

        fake_calibration(root / "cache")
        env = dict(os.environ, TRAINPERF_CACHE_DIR=str(root / "cache"), TRAINPERF_NATIVE_BF16="0")
        stops = [one_stop(env, root, k, a.after) for k in range(a.runs)]
        kills = [one_kill(env, root, k, a.after) for k in range(a.runs)]
        base = [one_refusal(env, [sys.executable, "-c", "import torch"]) for _ in range(a.runs)]
        refusals = {" ".join(x): [one_refusal(env, [sys.executable, "-m", "trainperf.cli.main", "bench", *x,
                                                    "--out", str(root / "never")]) for _ in range(a.runs)]
                    for x in ABSURD}
    ok = True
    print(f"1. SIGTERM to bench --nproc 2 -> every process gone ({a.runs} runs): median {statistics.median(stops):.2f} s, "
          f"max {max(stops):.2f} s; goal {STOP_GOAL_S:g} s (max/goal {max(stops) / STOP_GOAL_S:.2f}); "
          "before: never (the workers kept training)")
    ok &= max(stops) < STOP_GOAL_S
    times, lines = [t for t, _ in kills], [n for _, n in kills]
    print(f"2. SIGKILL to rank 1 -> launcher exited: median {statistics.median(times):.2f} s, max {max(times):.2f} s; "
          f"stderr lines: {sorted(set(lines))} (goal: 1; before: ~90)")
    ok &= set(lines) == {1}
    bt = statistics.median(t for t, _, _ in base)
    bm = statistics.median(m for _, m, _ in base)
    print(f"3. refusals (median of {a.runs}; baseline `import torch`: {bt:.2f} s, {bm:.0f} MB):")
    for what, rs in refusals.items():
        t = statistics.median(x[0] for x in rs)
        m = max(x[1] for x in rs)
        codes = sorted({x[2] for x in rs})
        print(f"   bench {what:<32} {t:5.2f} s ({t / bt:.2f}x torch's import)  peak {m:5.0f} MB "
              f"({m / bm:.2f}x)  exit {codes}")
        ok &= t < REFUSAL_GOAL_S and m < REFUSAL_GOAL_MB and codes == [2]
    print("all goals met" if ok else "A GOAL IS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
