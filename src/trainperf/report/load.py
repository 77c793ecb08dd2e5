"""Find and load the runs a report shows.

A path given to ``trainperf report`` may be:

* a trainperf JSONL run record (first line ``{"type": "run", ...}``), read with
  :func:`trainperf.records.jsonl.read_run`;
* a bench output directory (``steps.jsonl``, ``summary.json``, ``workload.toml``); the workload
  file fills in the workload when the record's header has none;
* a directory of such directories or records (a sweep): each one is a run;
* ``published:KEY``: rows of the packaged published-runs table: a row or table id, a device,
  a vendor, or a shell-style pattern over the rows' names (``published:row:1?``,
  :func:`trainperf.predict.runs_table.published_records`);
* any other file or directory: a framework log, parsed by :func:`trainperf.ingest.parse_log`.

Published results come from :mod:`trainperf.predict.runs_table` when it exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainperf.errors import InputFileError, TrainperfError
from trainperf.records.jsonl import describe_skipped, is_trainperf_jsonl, read_run
from trainperf.records.run_record import RunRecord

WORKLOAD_FILES = ("workload.toml", "workload.json")
PUBLISHED_PREFIX = "published:"
"""A path starting with this selects rows of the published-runs table."""


@dataclass
class LoadedRun:
    """A run record and where it came from."""

    run: RunRecord
    origin: str
    """The path (or catalog entry) it was read from."""
    reader: str
    """How it was read: ``trainperf-jsonl``, ``bench-dir``, ``log:<format>`` or ``published``."""
    given: str = ""
    """The argument it was found under (runs found under one directory argument were given
    together: they may form a sweep); empty for runs handed to the report directly."""

    @property
    def notes(self) -> list[str]:
        """What a reader of this run should know (:func:`reading_notes`)."""
        return reading_notes(self.run, self.origin)


def reading_notes(run: RunRecord, origin: str) -> list[str]:
    """One line per thing left out or unusual in reading ``run`` from ``origin``: the lines
    skipped (count and reason, for trainperf records and parsed logs alike) and an interrupted
    run (no ``end`` line: the steps it recorded are kept, the rest never ran)."""
    meta, notes = run.meta, []
    skipped = describe_skipped(meta.get("skip_reasons") or {})
    if skipped:
        notes.append(f"{run.name}: {origin}: {skipped}")
    bad = {k: meta.get(k) or 0 for k in ("malformed_lines", "cut_lines")}
    if any(bad.values()):  # a parsed log: damaged step lines, as `trainperf parse` counts them
        notes.append(f"{run.name}: {origin}: {bad['malformed_lines']:,} malformed and {bad['cut_lines']:,} "
                     "cut step line(s) skipped")
    if run.interrupted:
        notes.append(f"{run.name}: interrupted (no end line); its {len(run.steps):,} recorded step(s) are kept")
    return notes


def _natural_key(p: Path) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]


def read_record(path: str | Path) -> LoadedRun:
    """A trainperf run record: a bench output directory (its ``steps.jsonl``) or a JSONL file.

    The workload file beside the record (``workload.toml`` / ``workload.json``) fills in the
    workload when the record's header has none. The run is named after its directory (a bench
    output directory, or the directory of a ``steps.jsonl``) or file, unless it names itself.
    """
    p = Path(path)
    is_dir = p.is_dir()
    run = read_run(p)
    where = p if is_dir else p.parent
    if run.workload is None:
        for name in WORKLOAD_FILES:
            if (where / name).is_file():
                from trainperf.specs.workload_file import load_workload

                run.workload = load_workload(where / name)
                break
    if not run.meta.get("name"):
        run.meta["name"] = p.name if is_dir else (p.stem if p.stem != "steps" else p.parent.name)
    return LoadedRun(run, str(p), "bench-dir" if is_dir else "trainperf-jsonl")


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


def _select_published(key: str) -> list[LoadedRun]:
    """Rows of the published-runs table ``key`` names (all for an empty key)."""
    try:
        from trainperf.predict.runs_table import published_records
    except ImportError as e:
        raise InputFileError(f"{PUBLISHED_PREFIX}{key}: no published-runs table ({e})") from None
    return [LoadedRun(r, f"published: {r.meta.get('citation', r.name)}", "published") for r in published_records(key)]


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
            return [read_record(p)]
        return [_read_log(p, workload)]
    if (p / "steps.jsonl").is_file():
        return [read_record(p)]
    found: list[LoadedRun] = []
    for child in sorted(p.iterdir(), key=_natural_key):
        if child.name.startswith("."):
            continue
        if is_trainperf_jsonl(child) and (child.is_dir() or child.suffix == ".jsonl"):
            found.append(read_record(child))
    if found:
        return found
    return [_read_log(p, workload)]


def load_paths(paths: list[str | Path], *, workload: Any = None) -> list[LoadedRun]:
    """Runs of every path, in order, with unique names (a repeated name gets ``#2``, ``#3``...)."""
    if not paths:
        raise InputFileError("no run given: pass run records, bench output directories or logs")
    runs: list[LoadedRun] = []
    for path in paths:
        found = load_path(path, workload=workload)
        for lr in found:
            lr.given = str(path)
        runs.extend(found)
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
    """Published results as run records (the packaged table's mapped rows), and why there are
    none when the table is absent."""
    try:
        from trainperf.predict.runs_table import published_records
    except ImportError as e:
        return [], f"no published-runs table (trainperf.predict.runs_table not available: {e})"
    try:
        return published_records(), None
    except TrainperfError as e:
        return [], f"the published-runs table could not be loaded: {e}"
