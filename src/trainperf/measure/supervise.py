"""The launcher's side of a multi-process bench: start torchrun, own every process it starts.

:func:`run_workers` starts :mod:`trainperf.measure.agent` (torchrun) in a session of its own and
stays responsible for it and for every process below it:

* **Stop signals** (SIGTERM, SIGINT, SIGHUP) to the launcher are forwarded to torchrun, which
  forwards them to each worker; a worker finishes its step in progress, writes its ``end``
  line and exits (:mod:`trainperf.measure.stop`; its own deadline is ``grace_s``, torchrun's
  ``grace_s + 1``). ``grace_s +`` :data:`KILL_MARGIN_S` after the signal, whatever is left of the
  tree gets SIGKILL. The launcher then writes the summary from the steps kept.
* **Output**: torchrun's own messages (and tracebacks) go to ``torchrun.log`` in the run
  directory, each worker's stdout and stderr to ``rank<k>.log`` (the trainer redirects them);
  rank 0's progress lines come back through torchrun's stdout and are echoed here.
* **Leftovers**: every process of the tree carries an environment tag; on Linux the launcher is
  a child subreaper for the run, so orphans come back to it, and any tagged process still alive
  once torchrun has exited is killed and reaped. torchrun dies with the launcher and the workers
  with torchrun (``PR_SET_PDEATHSIG``), so a launcher killed by SIGKILL leaves no training behind.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import stat
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from trainperf.measure import procs
from trainperf.measure.failures import WorkerFailure, read_failure_report
from trainperf.measure.stop import DEFAULT_GRACE_S, STOP_SIGNALS

KILL_MARGIN_S = 3.0
"""Seconds after the workers' own deadline before the launcher kills what is left: torchrun's
deadline is one second later than the workers' and it needs a moment to exit."""
RANK_LOGS_ENV = "TRAINPERF_RANK_LOGS"
"""Set to 1 for the workers: each writes its stdout and stderr to ``rank<k>.log``."""
_POLL_S = 0.1
_SCAN_EVERY_S = 1.0


@dataclass
class WorkersOutcome:
    """How a torchrun of the bench ended."""

    exit_code: int
    """torchrun's exit code (128 + signal after a stop; -N if it was killed by signal N)."""
    stop_signal: int | None = None
    """The stop signal the launcher received and forwarded, else None."""
    failures: list[WorkerFailure] = field(default_factory=list)
    """Workers that failed, as torchrun reported them (``failures.json``)."""
    killed: list[int] = field(default_factory=list)
    """Pids the launcher had to kill with SIGKILL (nothing had stopped them in time)."""
    stop_to_end_s: float | None = None
    """Seconds from the stop signal to the last process of the tree gone."""


class _Forwarder:
    """Main-thread handlers that record stop signals for the supervising loop to forward."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.t_signal: float | None = None
        self.pending: list[int] = []
        self._prev: dict[int, Any] = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum, self.t_signal = signum, time.monotonic()
        self.pending.append(signum)

    def __enter__(self) -> _Forwarder:
        if threading.current_thread() is threading.main_thread():
            self._prev = {s: signal.getsignal(s) for s in STOP_SIGNALS}
            for s in STOP_SIGNALS:
                signal.signal(s, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._prev.items():
            signal.signal(s, h)


def _echo_lines(stream: BinaryIO, echo: Callable[[str], None]) -> None:
    for raw in iter(stream.readline, b""):
        with contextlib.suppress(Exception):  # a closed console must not stop the draining
            echo(raw.decode("utf-8", "replace").rstrip("\n"))
    stream.close()


def _open_log(path: Path) -> int:
    """torchrun's log file: created or appended, never through a link or into a FIFO/device."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        from trainperf.records.output_path import OutputPathError

        raise OutputPathError(f"{str(path)!r} is not a regular file; refusing to write torchrun's log into it")
    return fd


def run_workers(cmd: Sequence[str], *, out_dir: str | Path, echo: Callable[[str], None],
                env: dict[str, str] | None = None, grace_s: float = DEFAULT_GRACE_S,
                log_name: str = "torchrun.log", report_path: str | Path | None = None,
                pass_fds: Sequence[int] = ()) -> WorkersOutcome:
    """Run the agent command ``cmd`` to its end (module docstring); never leaves a process behind.

    ``echo`` receives rank 0's progress lines; ``pass_fds`` are kept open in torchrun (the run
    directory's lock, held while it lives); ``report_path`` is the agent's ``--report`` file
    (read back for :attr:`WorkersOutcome.failures`).
    """
    out = Path(out_dir)
    tag = uuid.uuid4().hex
    full_env = {**os.environ, **(env or {}), procs.TAG_ENV: tag, procs.LAUNCHER_PID_ENV: str(os.getpid()),
                RANK_LOGS_ENV: "1", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(math.ceil(grace_s) + 1),
                "PYTHONUNBUFFERED": "1"}
    log_fd = _open_log(out / log_name)
    seen: set[int] = set()
    killed: list[int] = []
    with procs.child_subreaper(), _Forwarder() as stop:
        try:
            proc = subprocess.Popen(list(cmd), env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=log_fd, start_new_session=True, pass_fds=tuple(pass_fds))
        finally:
            os.close(log_fd)
        assert proc.stdout is not None
        reader = threading.Thread(target=_echo_lines, args=(proc.stdout, echo), daemon=True)
        reader.start()
        forwarded = 0
        next_scan = time.monotonic()
        try:
            while proc.poll() is None:
                now = time.monotonic()
                if now >= next_scan:  # the tree's pids, to reap those that end as orphans
                    seen.update(procs.tagged_processes(tag))
                    seen.discard(proc.pid)
                    next_scan = now + _SCAN_EVERY_S
                while forwarded < len(stop.pending):
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(stop.pending[forwarded])
                    forwarded += 1
                if stop.t_signal is not None and now > stop.t_signal + grace_s + KILL_MARGIN_S:
                    killed += _kill_group(proc.pid) + procs.kill_all(_alive(tag, seen))
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=_POLL_S)
        except BaseException:  # an unexpected error here: take the whole tree down with it
            _kill_group(proc.pid)
            procs.kill_all(_alive(tag, seen))
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            raise
        seen.discard(proc.pid)  # reaped by Popen
        killed += _sweep(tag, seen, deadline=(stop.t_signal if stop.t_signal is not None else time.monotonic())
                         + grace_s + KILL_MARGIN_S)
        t_end = time.monotonic()
    reader.join(timeout=2.0)
    failures = read_failure_report(report_path) if report_path is not None else []
    return WorkersOutcome(exit_code=proc.returncode, stop_signal=stop.signum, failures=failures,
                          killed=sorted(set(killed)),
                          stop_to_end_s=(t_end - stop.t_signal) if stop.t_signal is not None else None)


def _kill_group(pgid: int) -> list[int]:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
        return [pgid]
    return []


def _alive(tag: str, seen: set[int]) -> list[int]:
    alive = [p for p in procs.tagged_processes(tag) if not procs.is_zombie(p)]
    seen.update(alive)
    return alive


def _sweep(tag: str, seen: set[int], *, deadline: float) -> list[int]:
    """After torchrun exited: wait (until ``deadline``) for the tagged processes still alive,
    then SIGKILL them; reap those that are this process's children. Returns the pids killed."""
    killed: list[int] = []
    while (alive := _alive(tag, seen)) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    if alive:
        killed = procs.kill_all(alive)
        end = time.monotonic() + 5.0  # SIGKILL is immediate unless a process sleeps in the kernel
        while _alive(tag, seen) and time.monotonic() < end:
            procs.reap(sorted(seen))
            time.sleep(_POLL_S)
    procs.reap(sorted(seen))
    return killed
