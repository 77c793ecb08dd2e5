"""Absurd inputs cost nothing: each of issue 17's absurd values, run as a whole ``trainperf``
process, must exit 2 with one line on stderr in under 2 s and under 200 MB peak RSS.

For every case it prints the exit code, the stderr line count, the median wall time and the
peak resident set size (``ru_maxrss`` of the child, from ``os.wait4``) of ``--repeats`` runs,
and their ratio to a baseline measured in the same run: ``trainperf flops --model llama3-8b``,
the cheapest command that builds a model (interpreter start-up plus imports). The machine may be
shared, so the ratios matter more than the absolute times.

``--before SRC`` runs the same cases against another source tree (e.g. ``/work/main/src``) once
each, with a ``--before-timeout`` (default 30 s) and a 4 GiB address-space limit, for a
before/after table.

Exit status 1 if any case misses its target (exit 2, one line, < 2 s, < 200 MB).

Usage: ``python benchmarks/absurd_inputs.py [--repeats 3] [--only plan] [--before /work/main/src]``
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
TIME_LIMIT_S = 2.0
RSS_LIMIT_MB = 200.0

PLAN = ["plan", "--model", "llama3-8b", "--device", "h100-sxm", "--seq-len", "4096"]
WORKLOAD = ["--model", "llama3-8b", "--device", "h100-sxm", "--num-devices", "8", "--seq-len", "4096",
            "--global-batch", "8"]


def cases(tmp: Path) -> list[tuple[str, list[str]]]:
    """(name, argv after ``trainperf``) for every absurd value of the issue, and a few more."""
    big = tmp / "huge"
    big.mkdir(exist_ok=True)
    files = {}
    for name in ("workload.toml", "config.json", "stack.toml", "cal.json", "runs.csv"):
        p = big / name
        with open(p, "wb") as f:
            f.truncate(1 << 30)  # sparse: 1 GB to stat, nothing on disk
        files[name] = str(p)
    for name, text in {"neg_batch.toml": "[training]\nglobal_batch = -4\n",
                       "nan_peak.toml": "[hardware]\npeak_tflops = nan\n",
                       "zero_devices.toml": "[hardware]\nnum_devices = 0\n"}.items():
        (tmp / name).write_text('[model]\npreset = "llama3-8b"\n' + text)
    return [
        ("plan --num-devices 1e12", [*PLAN, "--global-batch", "128", "--num-devices", "1000000000000"]),
        ("plan --num-devices 963,761,198,400", [*PLAN, "--global-batch", "128", "--num-devices", "963761198400"]),
        ("plan --global-batch 10^38", [*PLAN, "--num-devices", "64", "--global-batch", str(10**38)]),
        # within the device bound, but with 288 divisors: 1.18M ways to factor it into a mesh
        ("plan --num-devices 1,441,440 (divisors)", [*PLAN, "--num-devices", "1441440", "--global-batch", "1000000"]),
        ("plan --global-batch 1-1e12 (range)", [*PLAN, "--num-devices", "64", "--global-batch", "1-1000000000000"]),
        ("plan --max-micro-batch 1e12", [*PLAN, "--num-devices", "64", "--global-batch", "128",
                                         "--max-micro-batch", "1000000000000"]),
        ("predict --seq-len 1e15", ["predict", *WORKLOAD, "--seq-len", "1000000000000000"]),
        ("predict --num-devices 1e12", ["predict", *WORKLOAD, "--num-devices", "1000000000000"]),
        ("predict --hidden 1e40", ["predict", *WORKLOAD, "--hidden", str(10**40)]),
        ("predict --peak-tflops nan", ["predict", *WORKLOAD, "--peak-tflops", "nan"]),
        ("mfu --global-batch 0", ["mfu", *WORKLOAD, "--step-time", "1", "--global-batch", "0"]),
        ("flops --global-batch -1", ["flops", "--model", "llama3-8b", "--global-batch", "-1"]),
        ("flops workload global_batch = -4", ["flops", str(tmp / "neg_batch.toml")]),
        ("flops workload peak_tflops = nan", ["flops", str(tmp / "nan_peak.toml")]),
        ("flops workload num_devices = 0", ["flops", str(tmp / "zero_devices.toml")]),
        ("bench --global-batch 1e12", ["bench", "--model", "debug", "--device", "cpu", "--steps", "1",
                                       "--global-batch", "1000000000000", "--out", str(tmp / "bench-out")]),
        ("predict 1 GB workload file", ["predict", files["workload.toml"]]),
        ("flops 1 GB HF config", ["flops", "--hf-config", files["config.json"]]),
        ("predict 1 GB stack profile", ["predict", *WORKLOAD, "--stack", files["stack.toml"]]),
        ("predict 1 GB calibration file", ["predict", *WORKLOAD, "--calibration", files["cal.json"]]),
        ("validate 1 GB runs table", ["validate", "--data", files["runs.csv"], "--no-loto"]),
    ]


def run_once(argv: list[str], src: Path, timeout_s: float, cache: Path) -> dict:
    """One whole process: exit code, stderr lines, wall seconds, peak RSS in MB."""
    env = {**os.environ, "PYTHONPATH": str(src), "TRAINPERF_CACHE_DIR": str(cache)}

    def limit() -> None:  # a runaway case must not take the machine with it
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen([sys.executable, "-m", "trainperf.cli.main", *argv], env=env,
                             stdout=subprocess.DEVNULL, stderr=err, preexec_fn=limit)
        deadline = t0 + timeout_s
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                p.kill()
                pid, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.005)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    timed_out = wall >= timeout_s
    return {"code": "timeout" if timed_out else p.returncode, "lines": text.count("\n"), "wall_s": wall,
            "rss_MB": usage.ru_maxrss / 1024, "first": (text.strip().splitlines() or [""])[-1][:160]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", metavar="TEXT", help="run only the cases whose name contains TEXT")
    ap.add_argument("--before", metavar="SRC", type=Path, help="also run each case once against this src tree")
    ap.add_argument("--before-timeout", type=float, default=30.0)
    ap.add_argument("--show", action="store_true", help="print each case's error line")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cache = tmp / "cache"
        base = [run_once(["flops", "--model", "llama3-8b"], SRC, 60, cache) for _ in range(args.repeats)]
        base_wall = statistics.median(r["wall_s"] for r in base)
        base_rss = statistics.median(r["rss_MB"] for r in base)
        print(f"baseline `trainperf flops --model llama3-8b`: {base_wall:.2f} s, {base_rss:.0f} MB "
              f"(median of {args.repeats})\n")
        head = f"{'case':<36} {'exit':>5} {'lines':>5} {'wall s':>7} {'x base':>6} {'RSS MB':>7} {'x base':>6}  ok"
        if args.before:
            head += f"  | before: {'exit':>7} {'wall s':>7} {'RSS MB':>7}"
        print(head)
        failed = []
        for name, argv in cases(tmp):
            if args.only and args.only not in name:
                continue
            runs = [run_once(argv, SRC, 60, cache) for _ in range(args.repeats)]
            wall = statistics.median(r["wall_s"] for r in runs)
            rss = statistics.median(r["rss_MB"] for r in runs)
            last = runs[-1]
            ok = (all(r["code"] == 2 and r["lines"] == 1 for r in runs) and wall < TIME_LIMIT_S
                  and rss < RSS_LIMIT_MB)
            line = (f"{name:<36} {last['code']!s:>5} {last['lines']:>5} {wall:>7.2f} {wall / base_wall:>6.2f} "
                    f"{rss:>7.0f} {rss / base_rss:>6.2f}  {'yes' if ok else 'NO'}")
            if args.before:
                b = run_once(argv, args.before, args.before_timeout, cache)
                line += f"  |         {b['code']!s:>7} {b['wall_s']:>7.2f} {b['rss_MB']:>7.0f}"
            print(line, flush=True)
            if args.show:
                print(f"    {last['first']}")
            if not ok:
                failed.append(name)
        print(f"\ntargets: exit 2, one line, < {TIME_LIMIT_S:g} s, < {RSS_LIMIT_MB:g} MB peak RSS per case")
        if failed:
            print(f"missed: {', '.join(failed)}")
            return 1
        print("all cases met the targets")
        return 0


if __name__ == "__main__":
    sys.exit(main())
