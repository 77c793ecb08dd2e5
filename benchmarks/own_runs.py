"""The predictor on this machine's own bench runs: measured step time against ``trainperf predict``
of each run's ``workload.toml``.

Runs ``trainperf bench`` on this CPU in the configurations a user first tries -- the default
(auto precision), fp32, FSDP over 2 processes, TP over 2, PP over 2, a ~100M-parameter model,
a LoRA fine-tune, the MoE preset with expert parallel over 2 and context parallel over 2 --
``--repeats`` times each (interleaved, so that load from other processes hits every
configuration alike), then predicts each run from the ``workload.toml`` it wrote and prints the
median measured step time, the spread of the repeats ((max - min) / median: above 10% the machine
was not quiet, and the summary says so), the prediction and the signed error (negative:
predicted faster).

    python benchmarks/own_runs.py                 # all, 3 repeats (several minutes)
    python benchmarks/own_runs.py --only default,fp32 --repeats 1
    python benchmarks/own_runs.py --reuse DIR     # the runs an earlier --out DIR kept, predicted again

``--calibrate-only`` also predicts each run as a user would before running it: from an empty
calibration cache filled by ``trainperf calibrate WORKLOAD.toml --quick`` alone (this CPU's
kernels at the workload's shapes, and with several processes gloo between them), not by the
bench run itself.

Timing needs a quiet machine: the script prints the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HUNDRED_M = ["--model", "debug", "--layers", "12", "--hidden", "768", "--heads", "12", "--kv-heads", "12",
             "--ffn-hidden", "2048"]
"""The debug preset grown to 85M parameters (GPT-2 small's width and depth, a byte vocabulary)."""
RUNS: dict[str, list[str]] = {
    "default": [],
    "fp32": ["--precision", "fp32"],
    "fsdp2": ["--nproc", "2", "--fsdp", "2"],
    "tp2": ["--nproc", "2", "--tp", "2", "--sequence-parallel"],
    "pp2": ["--nproc", "2", "--pp", "2", "--global-batch", "16", "--micro-batch", "4"],
    "100m": [*HUNDRED_M, "--seq-len", "256", "--micro-batch", "4", "--global-batch", "4"],
    "lora": [*HUNDRED_M, "--seq-len", "256", "--micro-batch", "4", "--global-batch", "4", "--lora-rank", "8"],
    "moe-ep2": ["--model", "debug-moe", "--nproc", "2", "--ep", "2"],
    "cp2": ["--nproc", "2", "--cp", "2", "--seq-len", "1024", "--micro-batch", "2", "--global-batch", "2"],
}
"""Name -> bench flags (on top of ``--steps``)."""

NOISY_SPREAD = 0.10
"""Repeats of one configuration further apart than this ((max - min) / median) say the machine
was busy while they ran: the summary says so."""


def _trainperf(*argv: str, timeout: float = 900, cache: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **({"TRAINPERF_CACHE_DIR": str(cache)} if cache else {}))
    return subprocess.run([sys.executable, "-m", "trainperf", *argv], capture_output=True, text=True,
                          timeout=timeout, check=False, env=env)


def bench(name: str, flags: list[str], out: Path, steps: int) -> float | None:
    """Median step time of one run (warm-up excluded), or None if it failed."""
    r = _trainperf("bench", *flags, "--steps", str(steps), "--out", str(out), "--json")
    if r.returncode != 0:
        print(f"  {name}: bench failed ({r.returncode}): {r.stderr.strip().splitlines()[-1:]}", flush=True)
        return None
    return json.loads(r.stdout)["step_time_median_s"]


def predict(workload: Path, cache: Path | None = None) -> float | None:
    r = _trainperf("predict", str(workload), "--json", timeout=120, cache=cache)
    if r.returncode != 0:
        print(f"  predict {workload}: {r.stderr.strip().splitlines()[-1:]}", flush=True)
        return None
    return json.loads(r.stdout).get("step_time_s")


def predict_from_calibrate(workload: Path) -> float | None:
    """The prediction from an empty cache that ``trainperf calibrate WORKLOAD --quick`` alone filled."""
    with tempfile.TemporaryDirectory(prefix="own-runs-cache-") as cache:
        r = _trainperf("calibrate", str(workload), "--quick", cache=Path(cache))
        if r.returncode != 0:
            print(f"  calibrate {workload}: {r.stderr.strip().splitlines()[-1:]}", flush=True)
            return None
        return predict(workload, Path(cache))


def reused(root: Path, names: list[str]) -> dict[str, list[float]]:
    """Median step times of the runs an earlier ``--out`` kept (``<name>-<k>/summary.json``)."""
    times: dict[str, list[float]] = {n: [] for n in names}
    for n in names:
        for summary in sorted(root.glob(f"{n}-*/summary.json")):
            times[n].append(json.loads(summary.read_text())["step_time_median_s"])
    return times


def report(times: dict[str, list[float]], preds: dict[str, float | None]) -> list[str]:
    """The table (median measured, spread of the repeats, predicted, signed error) and the summary
    lines: mean absolute error, how many within 15%, and a word when the repeats spread so far
    that the machine was not quiet (:data:`NOISY_SPREAD`)."""
    lines = [f"{'run':10} {'measured s':>11} {'spread':>7} {'predicted s':>12} {'error':>8}  flags"]
    errors, spreads = [], []
    for n, ts in times.items():
        if not ts:
            continue
        measured = statistics.median(ts)
        spread = (max(ts) - min(ts)) / measured
        spreads.append(spread)
        pred = preds.get(n)
        err = f"{100 * (pred / measured - 1):+.1f}%" if pred else "n/a"
        if pred:
            errors.append(abs(pred / measured - 1))
        lines.append(f"{n:10} {measured:11.4f} {100 * spread:6.1f}% {pred or float('nan'):12.4f} {err:>8}  "
                     f"{shlex.join(RUNS.get(n, []))}")
    if errors:
        lines.append(f"\nmean absolute error {100 * statistics.mean(errors):.1f}% over {len(errors)} configurations; "
                     f"within 15%: {sum(e <= 0.15 for e in errors)} of {len(errors)}")
    if spreads and max(spreads) > NOISY_SPREAD:
        lines.append(f"the repeats of a configuration spread by up to {100 * max(spreads):.0f}% ((max - min) / median): "
                     "the machine was not quiet, and the errors carry that noise (the calibrations were timed then too)")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", help="comma-separated names (default: all): " + ", ".join(RUNS))
    p.add_argument("--repeats", type=int, default=3, help="runs of each configuration (default 3)")
    p.add_argument("--steps", type=int, default=12, help="steps per run (default 12)")
    p.add_argument("--out", help="keep the runs here (default: a temporary directory)")
    p.add_argument("--reuse", metavar="DIR", help="run nothing: the runs an earlier --out DIR kept")
    p.add_argument("--calibrate-only", action="store_true",
                   help="also predict each run from `trainperf calibrate WORKLOAD --quick` alone (empty cache)")
    a = p.parse_args(argv)
    names = [n for n in RUNS if not a.only or n in a.only.split(",")]
    root = Path(a.reuse or a.out or tempfile.mkdtemp(prefix="own-runs-"))
    times = reused(root, names) if a.reuse else _run_all(names, root, a.repeats, a.steps)
    preds = {n: predict(root / f"{n}-1" / "workload.toml") for n in names if times[n]}
    print("\n" + "\n".join(report(times, preds)))
    if a.calibrate_only:
        before = {n: predict_from_calibrate(root / f"{n}-1" / "workload.toml") for n in names if times[n]}
        print("\npredicted before any bench run, from `trainperf calibrate WORKLOAD --quick` alone:\n"
              + "\n".join(report(times, before)))
    return 0


def _run_all(names: list[str], root: Path, repeats: int, steps: int) -> dict[str, list[float]]:
    """Each configuration ``repeats`` times, interleaved; their median step times."""
    root.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {os.getloadavg()[0]:.2f}; runs in {root}", flush=True)
    times: dict[str, list[float]] = {n: [] for n in names}
    for k in range(repeats):
        for n in names:
            t = bench(n, RUNS[n], root / f"{n}-{k + 1}", steps)
            if t is not None:
                times[n].append(t)
                print(f"  {n} run {k + 1}: {t:.4f} s", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return times


if __name__ == "__main__":
    sys.exit(main())
