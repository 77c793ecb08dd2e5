"""Cold start of the light commands, as whole processes (goal: median under 150 ms: issue 28 let
them rise from 100 ms for a step model built of typed records).

Starts a fresh interpreter (``sys.executable``, not a shim on PATH) for ``trainperf --help``,
``flops``, ``mfu`` and ``predict`` exactly as the ``trainperf`` console script does (import
``trainperf.cli.main`` and call ``main()``), several times each, interleaved with
``python -c pass`` so a loaded machine slows the baseline too. Prints the median and spread
of each command's wall time, its ratio to the baseline's median, its time above the baseline,
its CPU time (user + system; less sensitive than wall time to other processes on a shared
machine) and PASS/FAIL against the goal (wall-time medians). Every command's output is checked (exit 0, non-empty), so a
fast failure cannot pass. The first (untimed) run of each command writes the bytecode caches
(``__pycache__``, as ``pip install`` does), even where ``PYTHONDONTWRITEBYTECODE`` is set.

    python benchmarks/cold_start.py [--runs 15] [--src OLD/src --src src] [--goal-ms 150]

``--src`` picks the source tree to time (default: this checkout's ``src``); given twice, both
trees are timed in one sitting, their runs interleaved, so load on the machine hits both alike. ``--importtime CMD`` prints the 15
slowest imports of one command (``python -X importtime``; ``--importtime=--help`` for the
help) instead of timing.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS: dict[str, list[str]] = {
    "--help": ["--help"],
    "flops": ["flops", "--model", "llama2-70b", "--seq-len", "4096"],
    "mfu": ["mfu", "--model", "llama2-70b", "--device", "h100-sxm", "--num-devices", "64", "--fsdp", "64",
            "--seq-len", "4096", "--global-batch", "128", "--micro-batch", "2", "--step-time", "7.908"],
    "predict": ["predict", "--model", "llama3.1-405b", "--device", "h100-sxm", "--num-devices", "128",
                "--fsdp", "16", "--tp", "8", "--sequence-parallel", "--seq-len", "8192", "--global-batch", "32",
                "--micro-batch", "2", "--activation-checkpointing", "full"],
}
# What the `trainperf` console script runs.
ENTRY = "import sys; from trainperf.cli.main import main; sys.exit(main())"


def _env(src: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(src)
    env.pop("PYTHONSTARTUP", None)
    # An installed wheel has its bytecode compiled (pip does it); a checkout run with
    # PYTHONDONTWRITEBYTECODE set would recompile every module on every start instead.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _time_once(argv: list[str], env: dict[str, str], check: bool) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one process."""
    c0, t0 = _children_cpu_s(), time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True, text=True)
    dt, dc = time.perf_counter() - t0, _children_cpu_s() - c0
    if check and (p.returncode != 0 or not p.stdout.strip()):
        raise SystemExit(f"{' '.join(argv[3:])} failed (exit {p.returncode}): {p.stderr.strip()[-300:]}")
    return dt, dc


def _importtime(name: str, env: dict[str, str]) -> int:
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", ENTRY, *COMMANDS[name]], env=env,
                       capture_output=True, text=True)
    rows = []
    for line in p.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), int(parts[0].split(":")[1]), parts[2].rstrip()))
    for cum, own, mod in sorted(rows, reverse=True)[:15]:
        print(f"{cum / 1e3:8.1f} ms cumulative {own / 1e3:7.1f} ms own  {mod}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="runs per command (median reported)")
    ap.add_argument("--src", type=Path, action="append",
                    help="source tree to time (PYTHONPATH); give it twice to compare two trees, "
                         "measured interleaved (default: this checkout's src)")
    ap.add_argument("--goal-ms", type=float, default=150.0)
    ap.add_argument("--importtime", choices=sorted(COMMANDS), help="show where one command's imports go")
    args = ap.parse_args()
    trees = [p.resolve() for p in (args.src or [Path(__file__).resolve().parents[1] / "src"])]
    if args.importtime:
        return _importtime(args.importtime, _env(trees[0]))

    base_argv = [sys.executable, "-c", "pass"]
    names = ["python -c pass", *COMMANDS]
    walls = {(t, n): [] for t in trees for n in names}  # type: dict[tuple[Path, str], list[float]]
    cpus = {k: [] for k in walls}  # type: dict[tuple[Path, str], list[float]]
    for tree in trees:
        for name in COMMANDS:  # warm the OS file cache and write __pycache__ once
            _time_once([sys.executable, "-c", ENTRY, *COMMANDS[name]], _env(tree), check=True)
    for _ in range(args.runs):
        for tree in trees:
            env = _env(tree)
            for name in names:
                argv = base_argv if name not in COMMANDS else [sys.executable, "-c", ENTRY, *COMMANDS[name]]
                wall, cpu = _time_once(argv, env, check=name in COMMANDS)
                walls[tree, name].append(wall)
                cpus[tree, name].append(cpu)

    failed = []
    print(f"{sys.executable} (Python {sys.version.split()[0]}), {args.runs} runs each, interleaved")
    for tree in trees:
        base = statistics.median(walls[tree, "python -c pass"])
        base_cpu = statistics.median(cpus[tree, "python -c pass"])
        print(f"\nsrc={tree}")
        print(f"{'command':16s} {'wall median':>11s} {'p10-p90':>15s} {'x baseline':>10s} {'above baseline':>14s} "
              f"{'CPU median':>10s} {'CPU above':>9s}")
        for name in names:
            ts = sorted(walls[tree, name])
            med, cpu = statistics.median(ts), statistics.median(cpus[tree, name])
            lo, hi = ts[len(ts) // 10], ts[(len(ts) * 9) // 10 - (1 if len(ts) >= 10 else 0)]
            print(f"{name:16s} {med * 1e3:9.1f}ms {lo * 1e3:6.1f}-{hi * 1e3:6.1f}ms {med / base:9.2f}x "
                  f"{(med - base) * 1e3:+12.1f}ms {cpu * 1e3:8.1f}ms {(cpu - base_cpu) * 1e3:+7.1f}ms")
            if tree == trees[-1] and name in COMMANDS and med * 1e3 >= args.goal_ms:
                failed.append(name)
    verdict = "PASS" if not failed else f"FAIL ({', '.join(failed)})"
    print(f"\ngoal (last tree): every command's median under {args.goal_ms:.0f} ms: {verdict}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
