"""JSONL run records: one ``run`` header line, one line per ``step``, and an optional ``end``.

Written line by line and flushed, so a run killed at any moment keeps every finished step;
reading tolerates a truncated last line for the same reason.
"""

from __future__ import annotations

import contextlib
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
    """Append-only writer: ``header()`` once, ``step()`` per step, ``end()`` at the end.

    Each line is written whole or not at all: a write that fails part-way (a full disk, a file
    size limit) is cut back to the end of the previous line, and the failure is one
    :class:`~trainperf.records.output_path.OutputPathError` line saying what is kept, so the
    record never ends in half a step."""

    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        from trainperf.records.output_path import OutputPathError

        self.path = Path(path)
        if os.path.lexists(self.path) and not (self.path.is_file() and not self.path.is_symlink()):
            raise OutputPathError(f"run record {str(self.path)!r} exists and is not a regular file; "
                                  "refusing to write through it")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        self._fsync = fsync
        self.lines = 0
        """Lines written whole."""

    def _write(self, obj: dict[str, Any]) -> None:
        from trainperf.records.output_path import OutputPathError

        if self._fd is None:
            raise OutputPathError(f"run record {str(self.path)!r} is closed")
        data = _line(obj).encode("utf-8")
        start = os.fstat(self._fd).st_size
        try:
            done = 0
            while done < len(data):
                done += os.write(self._fd, data[done:])
            if self._fsync:
                os.fsync(self._fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)  # no half line: the record ends with the last whole one
            raise OutputPathError(f"run record {str(self.path)!r} could not be written ({e.strerror or e}); the "
                                  f"{self.lines} line(s) before are kept whole; once there is space, "
                                  f"`python -m trainperf.measure.results {str(self.path.parent)!r}` writes the "
                                  "summary") from None
        self.lines += 1

    def header(self, run: RunRecord) -> None:
        self._write({"type": "run", "schema": SCHEMA_VERSION, "source": run.source,
                     "workload": _workload_dict(run.workload), "meta": run.meta})

    def step(self, step: StepRecord) -> None:
        self._write({"type": "step", **step.to_dict()})

    def end(self, **fields: Any) -> None:
        self._write({"type": "end", **fields})

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

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


MAX_LINE_BYTES = 1 << 20
"""Longest line read (1 MiB): a step line is ~300 bytes and the run header with its workload a
few KB; a longer "line" is damage (a NUL-filled block, a binary file) and is skipped unread."""

SKIP_REASONS: dict[str, str] = {
    "truncated": "cut short (a killed run's last line)",
    "not_json": "not JSON",
    "nul": "with NUL bytes",
    "not_utf8": "not UTF-8",
    "too_long": f"over {MAX_LINE_BYTES:,} bytes",
    "not_object": "not a JSON object",
    "bad_step": "steps with invalid fields",
    "extra_header": "a second run header (another run's lines?)",
    "unknown_type": "of an unknown type",
}
"""Why a line of a run record was skipped: key -> what the reader says about it."""


def _raw_lines(f: IO[bytes], skipped: dict[str, int]) -> Iterator[tuple[bytes, bool]]:
    """``(line, ends_with_newline)`` of a binary file, each at most :data:`MAX_LINE_BYTES`
    (longer ones are counted as ``too_long`` and read past in bounded chunks)."""
    while True:
        raw = f.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES:
            while raw and not raw.endswith(b"\n"):
                raw = f.readline(MAX_LINE_BYTES + 1)
            skipped["too_long"] = skipped.get("too_long", 0) + 1
            continue
        yield raw, raw.endswith(b"\n")


def iter_lines(path: Path, skipped: dict[str, int] | None = None) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL file, one per line, reading bytes so damage costs at most its line.

    Each line is decoded on its own: a line with a NUL byte, bytes that are not UTF-8, or text
    that is not a JSON object is skipped and counted in ``skipped`` under a key of
    :data:`SKIP_REASONS` (a cut last line -- a run killed mid-write -- as ``truncated``). NUL
    bytes at either end of a line (the zero-filled block a crash can leave before the next
    write) are dropped first, so the line after them is kept. Blank lines are not counted.
    """
    skipped = {} if skipped is None else skipped

    def skip(why: str) -> None:
        skipped[why] = skipped.get(why, 0) + 1

    with path.open("rb") as f:
        for raw, complete in _raw_lines(f, skipped):
            line = raw.strip(b" \t\r\n\0")
            if not line:
                continue
            if b"\0" in line:
                skip("nul")
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                skip("not_utf8")
                continue
            try:
                obj = json.loads(text)
            except (ValueError, RecursionError):  # JSONDecodeError, a 4300-digit integer, deep nesting
                skip("not_json" if complete else "truncated")
                continue
            if isinstance(obj, dict):
                yield obj
            else:
                skip("not_object")


def describe_skipped(skipped: dict[str, int]) -> str:
    """``"3 lines skipped: 2 not JSON, 1 with NUL bytes"``; empty when nothing was skipped."""
    n = sum(skipped.values())
    if not n:
        return ""
    why = ", ".join(f"{k:,} {SKIP_REASONS.get(r, r)}" for r, k in sorted(skipped.items(), key=lambda kv: -kv[1]))
    return f"{n:,} line{'s' if n != 1 else ''} skipped: {why}"


def is_trainperf_jsonl(path: str | Path) -> bool:
    """True when the first non-blank line of ``path`` (at most :data:`MAX_LINE_BYTES` read) is a
    trainperf ``run`` header; a directory counts when it holds ``steps.jsonl``."""
    p = Path(path)
    if p.is_dir():
        return (p / "steps.jsonl").is_file()
    try:
        with p.open("rb") as f:
            for raw, _ in _raw_lines(f, {}):
                line = raw.strip(b" \t\r\n\0")
                if line:
                    obj = json.loads(line.decode("utf-8"))
                    return isinstance(obj, dict) and obj.get("type") == "run"
    except (OSError, ValueError, RecursionError):
        return False
    return False


def read_run(path: str | Path) -> RunRecord:
    """Read a trainperf JSONL run record. A run without an ``end`` line counts as interrupted.

    ``meta["skipped_lines"]`` counts the lines that were not used and ``meta["skip_reasons"]``
    says why (keys of :data:`SKIP_REASONS`; see :func:`describe_skipped`), so every reader can
    say what it left out.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "steps.jsonl"
    if not p.is_file():
        raise InputFileError(f"run record {str(p)!r} does not exist")
    header: dict[str, Any] | None = None
    steps: list[StepRecord] = []
    end: dict[str, Any] | None = None
    skipped: dict[str, int] = {}
    for obj in iter_lines(p, skipped):
        kind = obj.get("type")
        if kind == "run":
            if header is None:
                header = obj
            else:
                skipped["extra_header"] = skipped.get("extra_header", 0) + 1
        elif kind == "step":
            try:
                steps.append(StepRecord.from_dict(obj))
            except (TypeError, ValueError):
                skipped["bad_step"] = skipped.get("bad_step", 0) + 1
        elif kind == "end":
            end = obj
        else:
            skipped["unknown_type"] = skipped.get("unknown_type", 0) + 1
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
    meta["skipped_lines"] = sum(skipped.values())
    meta["skip_reasons"] = dict(skipped)
    return RunRecord(source=header.get("source", "bench"), steps=steps, workload=workload, meta=meta)
