"""Find and load the runs a report shows.

A path given to ``trainperf report`` may be:

* a trainperf JSONL run record (first line ``{"type": "run", ...}``), read with
  :func:`trainperf.records.jsonl.read_run`;
* a bench output directory (``steps.jsonl``, ``summary.json``, ``workload.toml``); the workload
  file fills in the workload when the record's header has none;
* a directory of such directories or records (a sweep): each one is a run;
* ``published:PATTERN``: runs of the published catalog whose id matches the shell-style
  pattern (``published:maxtext-llama2-70b-bf16-*``);
* any other file or directory: a framework log, parsed by :func:`trainperf.ingest.parse_log`.

Published results come from :mod:`trainperf.predict.published` when it exists.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainperf.errors import InputFileError, TrainperfError, UnknownNameError
from trainperf.records.jsonl import read_run
from trainperf.records.run_record import RunRecord

WORKLOAD_FILES = ("workload.toml", "workload.json")
PUBLISHED_PREFIX = "published:"
"""A path starting with this selects runs of the published catalog by id (shell-style pattern)."""


@dataclass
class LoadedRun:
    """A run record and where it came from."""

    run: RunRecord
    origin: str
    """The path (or catalog entry) it was read from."""
    reader: str
    """How it was read: ``trainperf-jsonl``, ``bench-dir``, ``log:<format>`` or ``published``."""


def _natural_key(p: Path) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]


def is_trainperf_jsonl(path: Path) -> bool:
    """True when the first non-empty line of ``path`` is a trainperf ``run`` header."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.strip():
                    obj = json.loads(line)
                    return isinstance(obj, dict) and obj.get("type") == "run"
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return False
    return False


def _read_bench_dir(path: Path) -> LoadedRun:
    run = read_run(path / "steps.jsonl")
    if run.workload is None:
        for name in WORKLOAD_FILES:
            if (path / name).is_file():
                from trainperf.specs.workload_file import load_workload

                run.workload = load_workload(path / name)
                break
    if not run.meta.get("name"):
        run.meta["name"] = path.name
    return LoadedRun(run, str(path), "bench-dir")


def _read_jsonl(path: Path) -> LoadedRun:
    run = read_run(path)
    if run.workload is None:
        for name in WORKLOAD_FILES:
            if (path.parent / name).is_file():
                from trainperf.specs.workload_file import load_workload

                run.workload = load_workload(path.parent / name)
                break
    if not run.meta.get("name"):
        run.meta["name"] = path.stem if path.stem != "steps" else path.parent.name
    return LoadedRun(run, str(path), "trainperf-jsonl")


def _read_log(path: Path, workload: Any = None) -> LoadedRun:
    try:
        from trainperf.ingest import parse_log
    except ImportError as e:
        raise InputFileError(
            f"{str(path)!r} is not a trainperf run record or bench directory, and the log parsers "
            f"are not available ({e})") from None
    parsed = parse_log(str(path), workload=workload)
    run = parsed.run
    if not run.meta.get("name"):
        run.meta["name"] = path.stem if path.is_file() else path.name
    return LoadedRun(run, str(path), f"log:{parsed.format or 'detected'}")


def _select_published(pattern: str) -> list[LoadedRun]:
    """Catalog runs whose id matches the shell-style ``pattern`` (``maxtext-llama2-70b-bf16-*``)."""
    runs, why = load_published()
    if why:
        raise InputFileError(f"{PUBLISHED_PREFIX}{pattern}: {why}")
    chosen = [r for r in runs if fnmatch.fnmatchcase(r.name, pattern or "*")]
    if not chosen:
        raise UnknownNameError("published run", pattern, [r.name for r in runs])
    return [LoadedRun(r, f"published catalog: {r.meta.get('citation', r.name)}", "published") for r in chosen]


def load_path(path: str | Path, *, workload: Any = None) -> list[LoadedRun]:
    """Every run found at ``path`` (see the module docstring for what a path may be).

    ``workload`` completes framework logs that do not state the model or device.
    """
    if str(path).startswith(PUBLISHED_PREFIX):
        return _select_published(str(path)[len(PUBLISHED_PREFIX):])
    p = Path(path)
    if not p.exists():
        raise InputFileError(f"run {str(p)!r} does not exist")
    if p.is_file():
        if is_trainperf_jsonl(p):
            return [_read_jsonl(p)]
        return [_read_log(p, workload)]
    if (p / "steps.jsonl").is_file():
        return [_read_bench_dir(p)]
    found: list[LoadedRun] = []
    for child in sorted(p.iterdir(), key=_natural_key):
        if child.name.startswith("."):
            continue
        if child.is_dir() and (child / "steps.jsonl").is_file():
            found.append(_read_bench_dir(child))
        elif child.is_file() and child.suffix == ".jsonl" and is_trainperf_jsonl(child):
            found.append(_read_jsonl(child))
    if found:
        return found
    return [_read_log(p, workload)]


def load_paths(paths: list[str | Path], *, workload: Any = None) -> list[LoadedRun]:
    """Runs of every path, in order, with unique names (a repeated name gets ``#2``, ``#3``...)."""
    if not paths:
        raise InputFileError("no run given: pass run records, bench output directories or logs")
    runs: list[LoadedRun] = []
    for path in paths:
        runs.extend(load_path(path, workload=workload))
    seen: dict[str, int] = {}
    for lr in runs:
        name = lr.run.name
        if name in seen:
            seen[name] += 1
            lr.run.meta["name"] = f"{name}#{seen[name]}"
        else:
            seen[name] = 1
    return runs


def load_published() -> tuple[list[RunRecord], str | None]:
    """Published results as run records, and why there are none when the catalog is absent."""
    try:
        from trainperf.predict.published import load_published_runs
    except ImportError as e:
        return [], f"no published catalog (trainperf.predict.published not available: {e})"
    try:
        return list(load_published_runs()), None
    except TrainperfError as e:
        return [], f"the published catalog could not be loaded: {e}"
