"""torchrun, run inside the launching process; ``python -m trainperf.measure.agent`` for one Slurm node.

:func:`run_torchrun` is torchrun itself -- its argument parser and ``elastic_launch`` (the agent
``python -m torch.distributed.run`` runs), its signal handling and its shutdown -- called in the
bench's own process, so that the launcher *is* torchrun: nothing stands between a stop signal
and torchrun's forwarding, and no process of its own has to be supervised. torchrun's features
do the launcher's work:

* **Stop signals**: torchrun's handlers (SIGTERM, SIGINT, SIGHUP, SIGQUIT) send the signal to
  every worker's process group, wait ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` (the stop grace + 1 s),
  then SIGKILL what is left (:mod:`trainperf.measure.stop` finishes the step in progress).
* **Logs** (:class:`RunDirLogs`, torchrun's ``LogsSpecs``, what ``--log-dir``/``--redirects``
  configure): each worker's stderr in ``rank<k>.log`` in the run directory; torchrun's own
  messages (and C++ warnings) in ``torchrun.log``.
* **Failures**: torchrun's ``ChildFailedError`` (rank, pid, exit code or signal) with the message
  the worker's ``@record`` wrote to its error file, kept as ``failures.json``
  (:mod:`trainperf.measure.failures`).

What torchrun does not do stays in the worker: asking the kernel to stop it when the launcher
dies (:func:`trainperf.measure.trainer.die_with_launcher`).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch.distributed.elastic.multiprocessing.api import LogsDest, LogsSpecs, Std

from trainperf.measure.failures import WorkerFailure, message_of, worker_log, write_failures
from trainperf.measure.stop import RunStopped, stop_signals_raise

if TYPE_CHECKING:
    from trainperf.measure.trainer import BenchConfig

LAUNCHER_PID_ENV = "TRAINPERF_LAUNCHER_PID"
"""Set for the workers to the pid of the process running torchrun (their parent)."""
_TORCHRUN_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


def _regular_file(path: Path, *, append: bool = False) -> int:
    """``path`` opened for writing (created if missing), never through a link or into a FIFO."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_APPEND if append else 0),
                 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        from trainperf.records.output_path import OutputPathError

        raise OutputPathError(f"{str(path)!r} is not a regular file; refusing to write a log into it")
    return fd


class RunDirLogs(LogsSpecs):
    """torchrun's log layout for a bench: each worker's stderr in ``OUT/rank<k>.log`` (``k`` its
    global rank, so the nodes of one run share a directory), its ``@record`` error file in
    ``errors_dir``.

    Why not torchrun's default layout (``--log-dir D --redirects 3``): it writes
    ``D/<run id>_<random>/attempt_0/<local rank>/{stdout,stderr}.log``, a path no one-line report
    can name beforehand, numbered by local rank, and two files a worker. Only stderr is redirected,
    because torchrun opens each redirected stream as a file of its own (two writers at two offsets
    of one file would overwrite each other): the worker joins its stdout to it, and rank 0 keeps
    the inherited stdout for its progress lines (``--tee`` would copy the whole stream, tracebacks
    included, to the terminal).
    """

    def __init__(self, out_dir: str | Path, errors_dir: str) -> None:
        super().__init__(log_dir=str(out_dir), redirects=Std.ERR)
        self.out_dir, self.errors_dir = Path(out_dir), errors_dir

    @property
    def root_log_dir(self) -> str:
        return str(self.out_dir)

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        """The files of each local rank; ``envs`` gets each worker's ``TORCHELASTIC_ERROR_FILE``.
        A log is created here, checked to be a regular file: torchrun opens it by its name."""
        dest = LogsDest()
        for local_rank, env in envs.items():
            rank = int(env["RANK"])
            log = worker_log(self.out_dir, rank)
            os.close(_regular_file(log))
            dest.stdouts[local_rank], dest.stderrs[local_rank] = "", str(log)  # "": inherited
            dest.error_files[local_rank] = env["TORCHELASTIC_ERROR_FILE"] = \
                os.path.join(self.errors_dir, f"rank{rank}.json")
        return dest


@contextlib.contextmanager
def _output_while_running(log: Path | None, *, quiet: bool) -> Iterator[None]:
    """This process's stderr (file descriptor 2) appended to ``log`` while torchrun runs in it:
    torchrun's messages and tracebacks, Python's and C++'s, go there as with ``torchrun 2> LOG``,
    and the terminal keeps the one-line report written afterwards. The workers inherit stdout,
    where rank 0 writes its progress lines: with ``quiet`` (``--json``: stdout is for the JSON)
    it is pointed at the terminal's stderr meanwhile."""
    sys.stdout.flush()  # the launcher's own lines first
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        if quiet:
            os.dup2(saved[1], 1)
        if log is not None:
            fd = _regular_file(log, append=True)
            os.dup2(fd, 2)
            os.close(fd)
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        for target, fd in enumerate(saved, 1):
            os.dup2(fd, target)
            os.close(fd)


@contextlib.contextmanager
def _torchrun_state(env: dict[str, str]) -> Iterator[None]:
    """``env`` in ``os.environ`` (the workers inherit it) and the signal handlers as they were,
    once torchrun is done: it sets handlers and variables for its run and leaves them."""
    keys = [*env, "TORCHELASTIC_SIGNALS_TO_HANDLE"]
    before = {k: os.environ.get(k) for k in keys}
    main = threading.current_thread() is threading.main_thread()
    sigs = [getattr(signal, n) for n in _TORCHRUN_SIGNALS if hasattr(signal, n)] if main else []
    handlers = {s: signal.getsignal(s) for s in sigs}
    os.environ.update(env)
    try:
        yield
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _failures(err: Any) -> list[WorkerFailure]:
    """torchrun's ``ChildFailedError`` as :class:`~trainperf.measure.failures.WorkerFailure` s,
    each with the ``Type: message`` its ``@record`` wrote (not torchrun's stand-in text)."""
    host = socket.gethostname()
    out = []
    for rank, f in sorted(err.failures.items()):
        msg = (f.error_file_data or {}).get("message") if os.path.isfile(f.error_file) else None
        msg = msg.get("message") if isinstance(msg, dict) else msg
        out.append(WorkerFailure(rank=int(rank), exit_code=int(f.exitcode), pid=int(f.pid) if f.pid else None,
                                 local_rank=int(f.local_rank), host=host,
                                 message=message_of(msg if isinstance(msg, str) else None),
                                 timestamp=float(f.timestamp) if f.timestamp else None))
    return out


def run_torchrun(args: list[str], cfg: BenchConfig, *, report: Path,
                 log: Path | None) -> tuple[int | None, int, list[WorkerFailure]]:
    """torchrun's command line ``args`` (what follows ``torchrun``) run to its end in this process
    (module docstring); returns (the stop signal it forwarded or None, exit code: 0, 1 after a
    failed worker, 128 + the signal's number after a stop, the failed workers). ``report``: where
    failed workers are written; ``log``: torchrun's own messages (None: this process's stderr).
    A stop signal before the workers start raises :class:`~trainperf.measure.stop.RunStopped`."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, parse_args

    ns = parse_args(args)
    if ns.standalone:  # as torchrun's run() does: a c10d store on a free local port
        ns.rdzv_backend, ns.rdzv_endpoint, ns.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    env = {"OMP_NUM_THREADS": str(cfg.threads or 1), LAUNCHER_PID_ENV: str(os.getpid()),
           "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(math.ceil(cfg.stop_grace_s) + 1)}
    errors = tempfile.mkdtemp(prefix="trainperf-errors-")
    try:
        with _torchrun_state(env), stop_signals_raise(), _output_while_running(log, quiet=cfg.quiet):
            config, cmd, cmd_args = config_from_args(ns)
            config.logs_specs = RunDirLogs(cfg.out_dir, errors)
            try:
                elastic_launch(config, cmd)(*cmd_args)
            except ChildFailedError as e:
                failures = _failures(e)
                write_failures(report, failures)
                return None, 1, failures
    except SignalException as e:  # torchrun's handler: it has stopped the workers
        return int(e.sigval), 128 + int(e.sigval), []
    finally:
        shutil.rmtree(errors, ignore_errors=True)
    return None, 0, []


def main(argv: list[str] | None = None) -> int:
    """``python -m trainperf.measure.agent --report FILE -- TORCHRUN_ARGS``: one node of a Slurm job
    (``TORCHRUN_ARGS`` end with ``-m trainperf.measure.trainer CONFIG``); ``{host}`` in ``FILE``
    is this machine's host name. Exit code 0, 1 after a failed worker, 128 + N after signal N."""
    import argparse

    from trainperf.measure.trainer import BenchConfig

    p = argparse.ArgumentParser(prog="python -m trainperf.measure.agent",
                                description="torchrun for the bench, logs in its run directory")
    p.add_argument("--report", required=True, help="JSON file for failed workers ({host}: this host's name)")
    p.add_argument("torchrun_args", nargs=argparse.REMAINDER, help="-- then torchrun's arguments")
    a = p.parse_args(argv)
    rest = a.torchrun_args[1:] if a.torchrun_args[:1] == ["--"] else a.torchrun_args
    report = Path(a.report.replace("{host}", socket.gethostname()))
    cfg = BenchConfig.from_json(Path(rest[-1]).read_text())
    try:
        _, code, failures = run_torchrun(rest, cfg, report=report, log=None)
    except RunStopped as e:
        return e.exit_code
    if failures:
        print(f"trainperf agent: {len(failures)} worker(s) failed; see {report}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":  # pragma: no cover
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the workers are gone and the report written: skip torch's slow teardown
