"""JSONL run records: one ``run`` header line, one line per ``step``, and an optional ``end``.

Written line by line and flushed, so a run killed at any moment keeps every finished step;
reading tolerates a truncated last line for the same reason.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from trainperf.errors import InputFileError
from trainperf.records.run_record import RunRecord, StepRecord

SCHEMA_VERSION = 1


def _workload_dict(workload: Any) -> dict[str, Any] | None:
    if workload is None:
        return None
    from trainperf.specs.workload_file import workload_to_dict

    return workload_to_dict(workload)


class JsonlWriter:
    """Append-only writer: ``header()`` once, ``step()`` per step, ``end()`` at the end."""

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        if os.path.lexists(self.path) and not (self.path.is_file() and not self.path.is_symlink()):
            from trainperf.records.output_path import OutputPathError

            raise OutputPathError(f"run record {str(self.path)!r} exists and is not a regular file; "
                                  "refusing to write through it")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f: IO[str] = self.path.open("a", encoding="utf-8")
        self._fsync = fsync

    def _write(self, obj: dict[str, Any]) -> None:
        self._f.write(_line(obj))
        self._f.flush()
        if self._fsync:
            os.fsync(self._f.fileno())

    def header(self, run: RunRecord) -> None:
        self._write({"type": "run", "schema": SCHEMA_VERSION, "source": run.source,
                     "workload": _workload_dict(run.workload), "meta": run.meta})

    def step(self, step: StepRecord) -> None:
        self._write({"type": "step", **step.to_dict()})

    def end(self, **fields: Any) -> None:
        self._write({"type": "end", **fields})

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), default=str) + "\n"


def write_run(run: RunRecord, path: str | Path, *, force: bool = True, parents: bool = True,
              inputs: Iterable[str | Path | None] = (), what: str = "run record") -> Path:
    """Write a whole run record to ``path``, atomically (temporary file + rename).

    Goes through :mod:`trainperf.records.output_path`: a directory, FIFO, device, link or one
    of ``inputs`` at ``path`` is refused (one line); an existing regular file is replaced only
    with ``force``; missing parent directories are created only with ``parents``. The library
    default replaces a regular file and creates parents; the CLI passes its ``--force`` and
    ``--parents`` flags.
    """
    from trainperf.records.output_path import write_with

    def write(f: IO[str]) -> None:
        f.write(_line({"type": "run", "schema": SCHEMA_VERSION, "source": run.source,
                       "workload": _workload_dict(run.workload), "meta": run.meta}))
        for s in run.steps:
            f.write(_line({"type": "step", **s.to_dict()}))
        f.write(_line({"type": "end", "interrupted": run.interrupted}))

    return write_with(path, write, what=what, force=force, parents=parents, inputs=inputs)


def iter_lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("r", encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue  # a truncated last line of a killed run, or a stray line
            if isinstance(obj, dict):
                yield obj


def read_run(path: str | Path) -> RunRecord:
    """Read a trainperf JSONL run record. A run without an ``end`` line counts as interrupted."""
    p = Path(path)
    if p.is_dir():
        p = p / "steps.jsonl"
    if not p.is_file():
        raise InputFileError(f"run record {str(p)!r} does not exist")
    header: dict[str, Any] | None = None
    steps: list[StepRecord] = []
    end: dict[str, Any] | None = None
    for obj in iter_lines(p):
        kind = obj.get("type")
        if kind == "run" and header is None:
            header = obj
        elif kind == "step":
            try:
                steps.append(StepRecord.from_dict(obj))
            except (TypeError, ValueError):
                continue
        elif kind == "end":
            end = obj
    if header is None:
        raise InputFileError(f"{str(p)!r} is not a trainperf run record (no 'run' header line)")
    workload = None
    if header.get("workload"):
        from trainperf.specs.workload_file import workload_from_dict

        workload = workload_from_dict(header["workload"])
    meta = dict(header.get("meta") or {})
    if end is None:
        meta["interrupted"] = True
    else:
        meta.update({k: v for k, v in end.items() if k != "type"})
    meta.setdefault("path", str(p))
    return RunRecord(source=header.get("source", "bench"), steps=steps, workload=workload, meta=meta)
