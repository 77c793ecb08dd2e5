"""The bench's GPU check: one short script for a machine with one NVIDIA GPU and PyTorch.

Made for a GPU machine that has torch installed and no network: wheels of what it lacks travel
with the checkout (``--wheels DIR``): torchao for Float8, and any core dependency of trainperf
(numpy, tabulate, tomli-w, scipy) the machine's Python does not have (the check names them). It installs trainperf from this
checkout without dependencies (falling back to ``PYTHONPATH=src`` if pip cannot build it
offline), then runs, each with its own time limit:

1. the default bench (``trainperf bench``: the debug Llama, bf16 on a GPU);
2. a ~1B Llama (``llama3.2-1b``) at sequence 4096, eager;
3. the same with ``--compile``;
4. the same in Float8, tensorwise recipe (compiled, as torchtitan runs Float8);
5. the same in Float8, rowwise recipe;
6. ``debug-moe`` at full width on the one GPU (every expert local: no expert parallel);

and for each the matching ``trainperf predict RUN/workload.toml``; then, budget permitting
(and not with ``--only``), the memory probes (:data:`PROBES`: ``benchmarks/loss_memory.py`` and
``benchmarks/activation_memory.py`` with ``--device cuda``). Everything goes to one JSON
file (``OUT/gpu_check.json``, rewritten after every run, so a run cut short keeps what
finished): the device, torch and CUDA versions, and per run tokens/s, MFU against the
datasheet peak (and bf16's for Float8, torchtitan's convention), peak memory (CUDA max
allocated), the median step time, and the prediction's step time, MFU and memory.

``--dry-run`` prints the commands and writes nothing (works anywhere). The whole check takes
about 4-6 minutes on one H100/H200 (most of it compiling); each run stops at its own limit or
at ``--budget-s`` (default 450) from the start, whichever comes first, and a run with under
45 s of budget left is skipped (recorded as such).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ONE_B = ["--model", "llama3.2-1b", "--seq-len", "4096", "--micro-batch", "2", "--global-batch", "2",
         "--steps", "12", "--precision", "bf16"]
RUNS: list[tuple[str, list[str], int]] = [
    ("default", [], 120),
    ("llama1b-eager", [*ONE_B, "--no-compile"], 150),
    ("llama1b-compile", [*ONE_B, "--compile"], 240),
    ("llama1b-fp8-tensorwise", [*ONE_B[:-2], "--fp8-recipe", "tensorwise", "--compile"], 240),
    ("llama1b-fp8-rowwise", [*ONE_B[:-2], "--fp8-recipe", "rowwise", "--compile"], 240),
    ("debug-moe", ["--model", "debug-moe", "--micro-batch", "32", "--global-batch", "32", "--steps", "20"], 120),
]
"""(name, bench flags, time limit s): the order is the check's priority."""

PROBES: list[tuple[str, list[str], int]] = [
    ("loss-memory", ["benchmarks/loss_memory.py", "--device", "cuda", "--json"], 90),
    ("activation-memory", ["benchmarks/activation_memory.py", "--device", "cuda", "--json"], 120),
]
"""(name, script and flags, time limit s): what the memory model takes from CPU measurements
(bytes per logit at the loss, MLP-wide tensors a gated MLP keeps, eager and compiled), measured
again with CUDA's allocator after the bench runs, budget permitting."""


def _env(site: str | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    paths = [p for p in (site, env.get("PYTHONPATH")) if p]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def install(wheels: str | None, say) -> tuple[str | None, dict[str, Any]]:
    """Install trainperf (and the wheels) offline; returns (a site dir for PYTHONPATH, what was done)."""
    done: dict[str, Any] = {}
    site = None
    if wheels:
        site = "/tmp/trainperf-gpu-check-site"
        files = sorted(str(p) for p in Path(wheels).glob("*.whl"))
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                            "--upgrade", "--target", site, *files], capture_output=True, text=True, check=False)
        done["wheels"] = {"files": [Path(f).name for f in files], "rc": r.returncode, "stderr": r.stderr[-500:]}
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "-e", str(ROOT)], capture_output=True, text=True, check=False)
    done["pip_install_rc"] = r.returncode
    if r.returncode != 0:  # e.g. no setuptools >= 77 offline: run from the source tree
        done["pip_install_error"] = r.stderr.strip().splitlines()[-1:] if r.stderr.strip() else []
        src = str(ROOT / "src")
        site = os.pathsep.join(p for p in (site, src) if p)
        done["fallback"] = f"PYTHONPATH={src}"
    say(f"install: {json.dumps(done)[:300]}")
    return site, done


CORE_DEPENDENCIES = ("numpy", "tabulate", "tomli_w", "scipy")
"""What ``pip install trainperf`` brings (pyproject.toml's dependencies), by import name: installed
here with ``--no-deps``, each must already be there or travel in ``--wheels``."""


def missing_dependencies(env: dict[str, str]) -> list[str]:
    names = ", ".join(repr(m) for m in CORE_DEPENDENCIES)
    code = f"import importlib.util as u; print(','.join(m for m in ({names},) if u.find_spec(m) is None))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    return [m for m in r.stdout.strip().split(",") if m]


def device_info(env: dict[str, str]) -> dict[str, Any]:
    code = ("import json, torch, importlib.util as u; c = torch.cuda.is_available(); "
            "ao = u.find_spec('torchao') is not None; "
            "print(json.dumps({'torch': torch.__version__, 'torchao_importable': ao, "
            "'cuda': torch.version.cuda, 'gpu': torch.cuda.get_device_name() if c else None, "
            "'capability': list(torch.cuda.get_device_capability()) if c else None, "
            "'memory_GiB': torch.cuda.get_device_properties(0).total_memory / 2**30 if c else None}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    try:
        info = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        info = {"error": (r.stderr or r.stdout)[-500:]}
    return info


def _json_tail(text: str) -> dict[str, Any] | None:
    start = text.find("{")
    try:
        return json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError:
        return None


def bench_command(name: str, flags: list[str], out: Path) -> list[str]:
    return [sys.executable, "-m", "trainperf", "bench", *flags, "--out", str(out / "runs" / name),
            "--parents", "--force", "--json"]


def run_one(name: str, flags: list[str], limit_s: int, out: Path, env: dict[str, str], say) -> dict[str, Any]:
    """One bench run and its prediction; the figures the check reports."""
    cmd = bench_command(name, flags, out)
    say(f"--- {name}: {shlex.join(cmd[3:])}")
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=limit_s, check=False)
        rc, stdout, stderr = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        rc, stdout, stderr = 124, (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), \
            (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    row: dict[str, Any] = {"name": name, "flags": flags, "rc": rc, "wall_s": round(time.perf_counter() - t0, 1)}
    summary = _json_tail(stdout)
    if rc != 0 or summary is None:
        row["error"] = (stderr or stdout)[-1500:]
        say(f"    FAILED rc={rc}: {row['error'][-400:]}")
        return row
    row.update({k: summary.get(k) for k in ("precision", "parallelism", "step_time_median_s", "tokens_per_s",
                                            "tokens_per_s_per_device", "tflops_per_device", "mfu_pct",
                                            "peak_source", "memory_max_GiB", "loss_last", "fp8", "moe")})
    row["mfu_by_peak"] = summary.get("mfu_by_peak")
    row["prediction"] = predict(out / "runs" / name / "workload.toml", env)
    pred = row["prediction"]
    say(f"    {row['tokens_per_s']:,.0f} tokens/s, MFU {row['mfu_pct']}%, {row['memory_max_GiB']:.2f} GiB, "
        f"step {row['step_time_median_s']:.4f} s; predicted {pred.get('step_time_s')} s, "
        f"{pred.get('memory_per_device_GiB')} GiB")
    return row


def run_probe(name: str, argv: list[str], limit_s: int, env: dict[str, str], say) -> dict[str, Any]:
    """One memory probe (:data:`PROBES`): its JSON, or why there is none."""
    say(f"--- {name}: {shlex.join(argv)}")
    try:
        r = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=limit_s, check=False)
    except subprocess.TimeoutExpired:
        return {"name": name, "rc": 124, "error": f"over its {limit_s} s limit"}
    got = _json_tail(r.stdout)
    if r.returncode != 0 or got is None:
        return {"name": name, "rc": r.returncode or 1, "error": (r.stderr.strip().splitlines() or ["no JSON"])[-1]}
    say(f"    {json.dumps(got)}")
    return {"name": name, "rc": 0, **got}


def predict(workload: Path, env: dict[str, str]) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "trainperf", "predict", str(workload), "--json"],
                       capture_output=True, text=True, env=env, timeout=120, check=False)
    d = _json_tail(r.stdout)
    if r.returncode != 0 or d is None:
        return {"error": (r.stderr or r.stdout)[-500:]}
    return {k: d.get(k) for k in ("step_time_s", "step_time_interval_s", "tokens_per_s", "mfu_pct",
                                  "memory_per_device_GiB", "breakdown", "bottleneck")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="gpu-check", help="output directory (default ./gpu-check)")
    p.add_argument("--wheels", help="directory of extra wheels to install offline (e.g. torchao)")
    p.add_argument("--only", help="comma-separated run names (default: all)")
    p.add_argument("--budget-s", type=float, default=450.0,
                   help="seconds for the whole check: runs are cut at it, and skipped with under 45 s left "
                        "(default 450)")
    p.add_argument("--dry-run", action="store_true", help="print what would run; run nothing")
    a = p.parse_args(argv)
    runs = [r for r in RUNS if not a.only or r[0] in a.only.split(",")]
    out = Path(a.out).resolve()
    if a.dry_run:
        print(f"would install trainperf from {ROOT} (pip --no-deps --no-build-isolation, else PYTHONPATH=src)"
              + (f" and the wheels in {a.wheels}" if a.wheels else ""))
        for name, flags, limit in runs:
            print(f"{name} (limit {limit} s): {shlex.join(bench_command(name, flags, out)[1:])}")
            print(f"    then: trainperf predict {out / 'runs' / name / 'workload.toml'} --json")
        for name, argv, limit in PROBES:
            print(f"{name} (limit {limit} s): python {shlex.join(argv)}")
        print(f"results: {out / 'gpu_check.json'}")
        return 0
    start = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - start:6.1f} s] {msg}", flush=True)

    out.mkdir(parents=True, exist_ok=True)
    site, installed = install(a.wheels, say)
    env = _env(site)
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "device": device_info(env),
                              "install": installed, "runs": []}
    say(f"device: {json.dumps(result['device'])}")
    missing = missing_dependencies(env)
    if missing:
        result["missing_dependencies"] = missing
        say(f"missing: {', '.join(missing)} (core dependencies of trainperf): put their wheels in --wheels "
            f"(pip download --no-deps --only-binary=:all: NAME on a machine with a network)")
    path = out / "gpu_check.json"
    for name, flags, limit in runs:
        left = a.budget_s - (time.perf_counter() - start)
        if left < 45:  # not enough for a run to start, warm up and measure
            result["runs"].append({"name": name, "skipped": f"{left:.0f} s left of the {a.budget_s:g} s budget"})
            say(f"--- {name}: skipped (budget)")
            continue
        result["runs"].append(run_one(name, flags, int(min(limit, left)), out, env, say))
        path.write_text(json.dumps(result, indent=2) + "\n")
    result["probes"] = []
    for name, argv, limit in PROBES if not a.only else []:
        left = a.budget_s - (time.perf_counter() - start)
        if left < 30:
            result["probes"].append({"name": name, "skipped": f"{left:.0f} s left of the {a.budget_s:g} s budget"})
            continue
        result["probes"].append(run_probe(name, argv, int(min(limit, left)), env, say))
        path.write_text(json.dumps(result, indent=2) + "\n")
    result["wall_s"] = round(time.perf_counter() - start, 1)
    path.write_text(json.dumps(result, indent=2) + "\n")
    failed = [r["name"] for r in result["runs"] + result["probes"] if r.get("rc", 0) != 0]
    say(f"done in {result['wall_s']} s: {path}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
