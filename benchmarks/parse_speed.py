"""Parse speed of ``trainperf parse`` for the MaxText and Megatron formats (goal: >= 1,000,000 lines/s).

Generates a 1,000,000-line log per format in a temporary directory (step lines with launcher
rank prefixes, plus the other lines real logs carry: warnings, memory reports, config dumps),
then times what ``trainperf parse`` computes end to end
(:func:`trainperf.cli.parse.parse_and_summarize`: read, detect, parse, keep one rank, restarts,
flags, then the summary: medians, percentiles, warm-up, claims) and, as a same-run baseline, a
bare ``for line in f`` over the same file, timed in the same repeat. Prints lines/s (median of ``--repeat`` runs) and
the ratio to the baseline, so a number taken on a loaded machine can still be compared; both in
wall time and in CPU time of the process (on a shared machine the short baseline tends to run in
one uncontended time slice while the long parse shares the core, which wall time penalises).
Every step line is parsed: there is no sampling, and by default the MaxText log has one host
(with ``--maxtext-hosts 2`` half its lines belong to a second host and are skipped unparsed, as
``trainperf parse`` keeps the lowest rank). The run asserts that every step line
became a step.

    python benchmarks/parse_speed.py [--lines 1000000] [--repeat 5] [--step-fraction 0.9]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from trainperf.accounting.conventions import DEFAULT_CONVENTION
from trainperf.cli.parse import parse_and_summarize

OTHER = [
    "0: 2024-12-10 08:02:11.000121: W external/xla/xla/service/gpu/gpu_hlo_schedule.cc:738] No profile found",
    "0: /opt/megatron/megatron/core/tensor_parallel/layers.py:290: UserWarning: async_grad_allreduce is deprecated",
    "0: [Rank 0] (after 10 iterations) memory (MB) | allocated: 21093.5 | max allocated: 50342.1 | reserved: 56020.0",
    "0:  saving checkpoint at iteration 1000 to /ckpt/run in torch_dist format",
]


HOSTS = 1


def maxtext_line(i: int, rng: random.Random) -> str:
    s = 7.9 + rng.random() * 0.02
    return (f"{i % HOSTS}: completed step: {i // HOSTS}, seconds: {s:.3f}, TFLOP/s/device: {3641.27 / s:.3f}, "
            f"Tokens/s/device: {8192 / s:.3f}, total_weights: 524288, loss: {2.0 + rng.random():.3f}")


def megatron_line(i: int, rng: random.Random) -> str:
    ms = 7450.0 + rng.random() * 40
    return (f"15:  [2024-06-11 19:21:40] iteration {i:8d}/ 1000000 | consumed samples: {i * 256:12d} | "
            f"elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {405.8:.1f} | "
            f"learning rate: 3.000000E-04 | global batch size:   256 | lm loss: {2 + rng.random():.6E} | "
            f"loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |")


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
            if rng.random() < step_fraction:
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


def time_baseline(path: Path) -> tuple[float, float]:
    """Wall and CPU seconds of a bare ``for line in f`` over the file."""
    t, c = time.perf_counter(), time.process_time()
    n = 0
    with path.open("r", encoding="utf-8", errors="replace") as f:
        for _ in f:
            n += 1
    return time.perf_counter() - t, time.process_time() - c


def time_parse(path: Path, kind: str, n_steps: int) -> tuple[float, float, int, int]:
    """Wall and CPU seconds of what ``trainperf parse LOG --json`` computes (parse and summary,
    :func:`trainperf.cli.parse.parse_and_summarize`), lines read, steps kept."""
    t, c = time.perf_counter(), time.process_time()
    out = parse_and_summarize(str(path), fmt_name=None, workload_path=None, overrides={},
                              convention=DEFAULT_CONVENTION, warmup=None)
    dt, dc = time.perf_counter() - t, time.process_time() - c
    meta = out["meta"]
    assert meta["format"] == kind, meta["format"]
    assert meta["step_lines_sampled_out"] == 0 and meta["steps_parsed"] == n_steps, (meta["steps_parsed"], n_steps)
    assert out["step_time_median_s"] is not None
    return dt, dc, meta["lines_total"], out["steps_total"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--step-fraction", type=float, default=0.9,
                    help="fraction of lines that are step lines (default 0.9; 1.0 is the worst case)")
    ap.add_argument("--maxtext-hosts", type=int, default=1,
                    help="MaxText host processes interleaved (default 1: every step line is parsed; with 2, as "
                         "srun --label prints them, the pipeline skips the higher rank's lines unparsed)")
    args = ap.parse_args()
    global HOSTS
    HOSTS = max(1, args.maxtext_hosts)
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("maxtext", "megatron"):
            path = Path(tmp) / f"{kind}.log"
            n_steps = generate(path, kind, args.lines, args.step_fraction)
            base, parse, base_cpu, parse_cpu = [], [], [], []
            lines = steps = 0
            for _ in range(args.repeat):
                bw, bc = time_baseline(path)
                dt, dc, lines, steps = time_parse(path, kind, n_steps)
                base.append(bw)
                base_cpu.append(bc)
                parse.append(dt)
                parse_cpu.append(dc)
            hosts = f" ({HOSTS} hosts)" if kind == "maxtext" else " (1 rank)"
            print(f"{kind:9s} {lines:,} lines{hosts} ({path.stat().st_size / 1e6:.0f} MB, {steps:,} steps, every "
                  "step line parsed), median of", args.repeat)
            for what, pv, bv in (("wall", parse, base), ("cpu ", parse_cpu, base_cpu)):
                p, b = statistics.median(pv), statistics.median(bv)
                ratios = sorted(x / y for x, y in zip(pv, bv, strict=True))
                print(f"  {what} parse {lines / p:,.0f} lines/s ({p:.2f} s); baseline `for line in f` {lines / b:,.0f} "
                      f"lines/s; ratio {p / b:.1f}x (per repeat {', '.join(f'{r:.1f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
