"""Time and peak memory of ``trainperf parse LOG --json`` on a generated Megatron (or MaxText) log,
against the code before the columnar byte path, measured in the same run (issue 17, item 7).

Goal: a 1 GB Megatron log (about 2.8M iterations) in <= 256 MB peak RSS and at least 2x faster
than the 16.7 s the code before took on this machine (the issue's figures: 16.7 s, 768 MB).

The log is generated on disk in a temporary directory (deleted afterwards): Megatron-LM
``training_log`` lines behind an ``srun --label`` prefix, with the variety of a real run (step
times that spike past 10 s, a grad norm and a TFLOP/s that change width, a learning rate that
decays from E-04 to E-05, a loss that falls from E+01 to E+00), and, with ``--step-fraction``
below 1, other lines between them. Both implementations then run ``trainperf parse LOG --json``
as a child process, alternating, ``--repeat`` times each: wall time (interpreter start
included), CPU time and peak RSS of that child (``os.wait4``). Every line is read and every step
line parsed by both; the run checks that both report the same steps and statistics.

The baseline is the source tree at ``--baseline`` (default: the last commit before this change),
taken from git into the temporary directory; without git it is skipped and only the issue's
figures are printed. On a shared machine, timings vary with the load: the load average is
printed, medians are reported, and the ratio of medians measured in the same run is the figure
to compare.

    python benchmarks/parse_speed.py [--size-mb 1000] [--repeat 3] [--format megatron] [--step-fraction 1.0]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE_REF = "20b7596"
"""The last commit before the columnar byte path: parsing kept lists of boxed values per step."""
ISSUE_SECONDS, ISSUE_RSS_MB, GOAL_RSS_MB = 16.7, 768, 256

OTHER = [
    "0: 2024-12-10 08:02:11.000121: W external/xla/xla/service/gpu/gpu_hlo_schedule.cc:738] No profile found",
    "0: /opt/megatron/megatron/core/tensor_parallel/layers.py:290: UserWarning: async_grad_allreduce is deprecated",
    "0: [Rank 0] (after 10 iterations) memory (MB) | allocated: 21093.5 | max allocated: 50342.1 | reserved: 56020.0",
    "0:  saving checkpoint at iteration 1000 to /ckpt/run in torch_dist format",
]
HOSTS = 1


def maxtext_line(i: int, rng: random.Random) -> str:
    s = 7.9 + rng.random() * 0.02
    if rng.random() < 0.005:
        s *= 1.5 + rng.random() * 2  # a slow step: more digits in the rates
    return (f"{i % HOSTS}: completed step: {i // HOSTS}, seconds: {s:.3f}, TFLOP/s/device: {3641.27 / s:.3f}, "
            f"Tokens/s/device: {8192 / s:.3f}, total_weights: 524288, loss: {2.0 + rng.random():.3f}")


def megatron_line(i: int, rng: random.Random, total: int = 1_000_000) -> str:
    ms = 7450.0 + rng.random() * 40
    if rng.random() < 0.005:
        ms *= 1.5 + rng.random() * 2  # a slow step (checkpoint, straggler): past 10 s, one more digit
    frac = min(1.0, i / max(total, 1))
    lr = 3e-5 + 2.7e-4 * 0.5 * (1 + math.cos(math.pi * frac))  # cosine decay: E-04 then E-05
    loss = 2 + 9 * math.exp(-i / 2000) + rng.random()  # E+01 early, E+00 after
    gn = math.exp(rng.gauss(0.0, 1.2))  # 0.05 .. 30: the width changes
    return (f"15:  [2024-06-11 19:{i // 60 % 60:02d}:{i % 60:02d}] iteration {i:8d}/ {total:8d} | consumed samples: "
            f"{i * 256:12d} | elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): "
            f"{405.8 * 7470 / ms:.1f} | learning rate: {lr:.6E} | global batch size:   256 | lm loss: {loss:.6E} | "
            f"loss scale: 1.0 | grad norm: {gn:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |")


def generate(path: Path, kind: str, n_lines: int, step_fraction: float) -> int:
    """Write the log; return the number of step lines of the rank that is kept (host 0)."""
    rng = random.Random(0)
    make = maxtext_line if kind == "maxtext" else megatron_line
    head = (["0: Config param max_target_length: 4096", "0: Config param global_batch_size_to_train_on: 128"]
            if kind == "maxtext" else ["15:   seq_length ...................................... 4096",
                                       "15:   world_size ...................................... 16"])
    step = 0
    with path.open("w", encoding="utf-8") as f:
        f.write("\n".join(head) + "\n")
        buf = []
        for _ in range(n_lines - len(head)):
            if step_fraction >= 1 or rng.random() < step_fraction:
                step += 1
                buf.append(make(step, rng))
            else:
                buf.append(rng.choice(OTHER))
            if len(buf) >= 10_000:
                f.write("\n".join(buf) + "\n")
                buf = []
        if buf:
            f.write("\n".join(buf) + "\n")
    return sum(1 for i in range(1, step + 1) if kind != "maxtext" or i % HOSTS == 0)


def generate_size(path: Path, kind: str, size_mb: float, step_fraction: float) -> tuple[int, int]:
    """A log of about ``size_mb`` MB (1 MB = 1e6 bytes): (lines, steps)."""
    probe = path.with_suffix(".probe")
    generate(probe, kind, 20_000, step_fraction)
    per_line = probe.stat().st_size / 20_000
    probe.unlink()
    n = max(10, int(size_mb * 1e6 / per_line))
    return n, generate(path, kind, n, step_fraction)


def baseline_tree(ref: str, dest: Path) -> Path | None:
    """The package source at git ``ref``, extracted under ``dest`` (its ``src``), or None."""
    try:
        data = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src/trainperf"], check=True,
                              capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=data, check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return dest / "src"


def run_child(src: Path, log: Path, out: Path) -> dict:
    """``trainperf parse LOG --json`` with ``src`` first on the path: wall and CPU seconds, peak
    RSS (MB) of that process, and its output."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    t = time.perf_counter()
    with out.open("w") as f:
        p = subprocess.Popen([sys.executable, "-m", "trainperf.cli.main", "parse", str(log), "--json"],
                             stdout=f, stderr=subprocess.PIPE, env=env)
        _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode() if p.stderr else ""
    if p.returncode != 0:
        raise SystemExit(f"parse failed ({p.returncode}) with {src}: {err.strip()[-500:]}")
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024,
            "out": json.loads(out.read_text())}


SAME = ("steps", "steps_total", "lines_total", "malformed_lines", "step_time_median_s", "step_time_p10_s",
        "step_time_p90_s", "step_time_mean_s", "tokens_per_step", "tokens_per_s", "loss_last", "claimed")


def _load() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=1000, help="size of the generated log in MB (default 1000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each implementation (default 3)")
    ap.add_argument("--format", choices=["megatron", "maxtext"], default="megatron")
    ap.add_argument("--step-fraction", type=float, default=1.0,
                    help="fraction of lines that are step lines (default 1.0: the issue's 2.8M iterations per GB)")
    ap.add_argument("--baseline", default=BASELINE_REF, help=f"git ref of the code to compare with (default "
                    f"{BASELINE_REF}, the last commit before this change); 'none' to skip")
    ap.add_argument("--tmp", default=None, help="directory for the generated log (default: the system's)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="parse_speed_", dir=args.tmp))
    try:
        log = tmp / f"{args.format}.log"
        t = time.perf_counter()
        n_lines, n_steps = generate_size(log, args.format, args.size_mb, args.step_fraction)
        size = log.stat().st_size
        print(f"{args.format} log: {size / 1e6:,.0f} MB, {n_lines:,} lines, {n_steps:,} step lines (generated in "
              f"{time.perf_counter() - t:.0f} s under {tmp}, deleted afterwards)")
        print(f"machine: {os.cpu_count()} CPUs; load average (1/5/15 min) {_load()} at the start")
        impls = {"this code": ROOT / "src"}
        if args.baseline != "none":
            base = baseline_tree(args.baseline, tmp)
            if base is None:
                print(f"baseline {args.baseline}: not available (no git checkout); only the issue's figures below")
            else:
                impls = {f"before ({args.baseline})": base, **impls}
        runs: dict[str, list[dict]] = {k: [] for k in impls}
        for _ in range(args.repeat):  # alternate, so that both see the same load over time
            for name, src in impls.items():
                runs[name].append(run_child(src, log, tmp / "out.json"))
        print(f"load average at the end {_load()}; medians of {args.repeat} runs each (wall includes the interpreter "
              "start):")
        print(f"  {'':22s} {'wall s':>8s} {'cpu s':>8s} {'peak RSS MB':>12s}   wall per run")
        med = {}
        for name, rs in runs.items():
            med[name] = {k: statistics.median(r[k] for r in rs) for k in ("wall", "cpu", "rss_mb")}
            m = med[name]
            per_run = ", ".join(f"{r['wall']:.1f}" for r in rs)
            print(f"  {name:22s} {m['wall']:8.2f} {m['cpu']:8.2f} {m['rss_mb']:12.0f}   {per_run}")
        new = med["this code"]
        outs = [rs[0]["out"] for rs in runs.values()]
        assert outs[-1]["steps_total"] == n_steps and outs[-1]["lines_total"] == n_lines, "not every line was read"
        for key in SAME:
            assert all(o[key] == outs[0][key] for o in outs), f"the implementations differ in {key}"
        if len(impls) == 2:
            old = med[next(iter(impls))]
            print(f"  ratio (before / this): wall {old['wall'] / new['wall']:.2f}x faster, cpu "
                  f"{old['cpu'] / new['cpu']:.2f}x, peak RSS {old['rss_mb'] / new['rss_mb']:.2f}x smaller; same steps "
                  "and statistics")
        print(f"  the issue's figures for the code before (1 GB): {ISSUE_SECONDS} s, {ISSUE_RSS_MB} MB; against them this "
              f"code's wall is {ISSUE_SECONDS / new['wall']:.2f}x, its CPU time {ISSUE_SECONDS / new['cpu']:.2f}x (on a "
              "loaded machine the wall time waits for the CPU: compare the ratios measured in this run)")
        print(f"  goal: peak RSS <= {GOAL_RSS_MB} MB: {'met' if new['rss_mb'] <= GOAL_RSS_MB else 'NOT met'}; "
              f">= 2x faster: {'met' if (len(impls) == 2 and old['wall'] / new['wall'] >= 2) else 'see ratio'}"
              if args.size_mb >= 900 else "  (the goal is stated for a 1 GB log: --size-mb 1000)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
