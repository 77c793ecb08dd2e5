"""Dead workers: what torchrun knows about them, kept in the run directory, said in one line.

:mod:`trainperf.measure.agent` writes the failures torchrun reports (rank, pid, exit code or
signal, the exception's message when the worker recorded one with ``@record``) to
``failures.json`` (``failures-<host>.json`` with several nodes); the launcher (or ``python -m
trainperf.measure.results`` after a Slurm job) says which rank died, how, what was kept and
where the full log is, in one line. torchrun's own report, its ``ChildFailedError``, is a
traceback of ~30 lines per node, and its error file (the reply file) holds only the first
failure's exception: none for a worker killed by a signal.
"""

from __future__ import annotations

import json
import math
import signal
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainperf.errors import one_line
from trainperf.measure.stop import STOP_SIGNALS, signal_name

_MESSAGE_CHARS = 300


@dataclass(frozen=True)
class WorkerFailure:
    """One worker process that ended badly, as torchrun saw it."""

    rank: int
    """Global rank."""
    exit_code: int
    """The process's exit status; negative: killed by signal ``-exit_code`` (subprocess's convention)."""
    pid: int | None = None
    local_rank: int | None = None
    host: str | None = None
    message: str | None = None
    """``Type: message`` of the exception the worker recorded, if it raised one."""
    timestamp: float | None = None
    """When torchrun saw it fail (seconds since the epoch)."""

    @property
    def signum(self) -> int | None:
        return -self.exit_code if self.exit_code < 0 else None

    @property
    def graceful(self) -> bool:
        """Exited by itself after a stop signal (128 + SIGTERM/SIGINT/SIGHUP), its step finished."""
        return self.exit_code - 128 in {int(s) for s in STOP_SIGNALS}

    def how(self) -> str:
        """``was killed by SIGKILL``, ``exited with code 1 (RuntimeError: ...)``, ..."""
        if self.signum is not None:
            extra = " (another process, or the kernel's out-of-memory killer)" if self.signum == signal.SIGKILL else ""
            return f"was killed by {signal_name(self.signum)}{extra}"
        if self.graceful:
            return f"stopped on {signal_name(self.exit_code - 128)} (exit code {self.exit_code})"
        msg = f" ({self.message})" if self.message else ""
        return f"exited with code {self.exit_code}{msg}"

    def short(self) -> str:
        """``killed by SIGKILL``, ``exit code 1``, ``stopped on SIGTERM``."""
        if self.signum is not None:
            return f"killed by {signal_name(self.signum)}"
        if self.graceful:
            return f"stopped on {signal_name(self.exit_code - 128)}"
        return f"exit code {self.exit_code}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WorkerFailure:
        known = {k: d.get(k) for k in ("rank", "exit_code", "pid", "local_rank", "host", "message", "timestamp")}
        return cls(**known)  # type: ignore[arg-type]


def first_failure(failures: list[WorkerFailure]) -> WorkerFailure:
    """The failure that most likely caused the others, by kind: killed by a signal that is not a
    stop signal (SIGKILL from the OOM killer or a user, SIGSEGV...); then exited with an error
    (an exception: the cause, or a peer's collective failing after a rank died); then killed by
    a stop signal (torchrun sends SIGTERM to the survivors); then stopped after its step. Within a
    kind: the earliest, then the lowest rank."""
    stops = {int(s) for s in STOP_SIGNALS}

    def key(f: WorkerFailure) -> tuple[int, float, int]:
        if f.signum is not None:
            kind = 2 if f.signum in stops and not f.message else 0
        else:
            kind = 3 if f.graceful else 1
        ts = f.timestamp if f.timestamp is not None and math.isfinite(f.timestamp) else math.inf
        return kind, ts, f.rank
    return min(failures, key=key)


def write_failures(path: str | Path, failures: list[WorkerFailure]) -> None:
    """Write the report (atomically; a regular file only, never through a link)."""
    from trainperf.records.output_path import write_text_atomic

    text = json.dumps({"failures": [f.to_dict() for f in failures]}, indent=2) + "\n"
    write_text_atomic(path, text, what="failure report", force=True, parents=True)


def read_failure_report(path: str | Path) -> list[WorkerFailure]:
    """The failures in one report; none if it is missing, damaged or not a regular file."""
    p = Path(path)
    try:
        if not p.is_file() or p.is_symlink() or p.stat().st_size > 1 << 20:
            return []
        data = json.loads(p.read_text(encoding="utf-8"))
        return [WorkerFailure.from_dict(d) for d in data.get("failures", [])]
    except (OSError, ValueError, TypeError, AttributeError):
        return []


def read_failures(out_dir: str | Path) -> list[WorkerFailure]:
    """Every failure reported in ``out_dir`` (``failures*.json``, one per node)."""
    return [f for p in sorted(Path(out_dir).glob("failures*.json")) for f in read_failure_report(p)]


def worker_log(out_dir: str | Path, rank: int) -> Path:
    """Where a worker's stdout and stderr go (:mod:`trainperf.measure.trainer`)."""
    return Path(out_dir) / f"rank{rank}.log"


def failure_line(failures: list[WorkerFailure], out_dir: str | Path, *, steps_kept: int,
                 last_step: int | None) -> str:
    """One line: which rank died and how, what the run record kept, where the full log is."""
    f = first_failure(failures)
    where = f" on {f.host}" if f.host and f.host != socket.gethostname() else ""
    pid = f" (pid {f.pid}{where})" if f.pid else where
    kept = (f"{steps_kept} step(s) kept (last step {last_step}) in {Path(out_dir) / 'steps.jsonl'}"
            if steps_kept else "no step finished")
    others = [g for g in failures if g is not f]
    also = ""
    if others:
        shown = ", ".join(f"rank {g.rank} {g.short()}" for g in sorted(others, key=lambda g: g.rank)[:3])
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        also = f"; after it: {shown}{more}"
    line = (f"worker rank {f.rank}{pid} {f.how()}{also}; {kept}; "
            f"full worker log: {worker_log(out_dir, f.rank)}")
    return one_line(line)


def message_of(error_text: str | None) -> str | None:
    """A worker's recorded exception message, on one line and at most ~300 characters."""
    if not error_text:
        return None
    msg = one_line(error_text)
    return msg if len(msg) <= _MESSAGE_CHARS else msg[:_MESSAGE_CHARS - 3] + "..."
