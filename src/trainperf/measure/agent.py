"""torchrun as trainperf runs it: ``python -m trainperf.measure.agent --report FILE -- TORCHRUN_ARGS``.

The same launcher as ``python -m torch.distributed.run TORCHRUN_ARGS`` (its own argument parser
and ``run``), with three differences:

* it dies with the launcher (``PR_SET_PDEATHSIG``: a SIGTERM, which it forwards to its workers
  like any stop signal), so even a launcher killed by SIGKILL leaves no training behind;
* a worker that fails is written to ``--report`` (rank, pid, exit code or signal, the exception's
  message; :mod:`trainperf.measure.failures`) instead of torchrun's ``ChildFailedError``
  traceback, so the launcher can say it in one line;
* a stop signal ends it with 128 + the signal's number after torchrun has stopped the workers
  (torchrun re-raises it as an exception).

``{host}`` in ``--report`` is replaced by this machine's host name (one report per node).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from typing import Any

from trainperf.measure import procs
from trainperf.measure.stop import STOP_SIGNALS


def _exit_now(signum: int, frame: Any) -> None:
    # Before torchrun installs its own handlers (when the workers start) there is nothing to stop.
    raise SystemExit(128 + signum)


def _failures(err: Any) -> list[Any]:
    """torchrun's ChildFailedError as :class:`~trainperf.measure.failures.WorkerFailure` s."""
    from trainperf.measure.failures import WorkerFailure, message_of

    host = socket.gethostname()
    out = []
    for rank, f in sorted(err.failures.items()):
        out.append(WorkerFailure(rank=int(rank), exit_code=int(f.exitcode), pid=int(f.pid) if f.pid else None,
                                 local_rank=int(f.local_rank), host=host, message=message_of(_recorded(f)),
                                 timestamp=float(f.timestamp) if f.timestamp else None))
    return out


def _recorded(f: Any) -> str | None:
    """``Type: message`` of the exception a worker recorded (``@record``'s error file), else None."""
    if not (f.error_file and os.path.isfile(f.error_file)):
        return None
    msg = (f.error_file_data or {}).get("message")
    if isinstance(msg, dict):
        msg = msg.get("message")
    return msg if isinstance(msg, str) else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m trainperf.measure.agent",
                                description="torchrun, reporting failed workers to a file")
    p.add_argument("--report", required=True, help="JSON file for failed workers ({host}: this host's name)")
    p.add_argument("torchrun_args", nargs=argparse.REMAINDER, help="-- then torchrun's arguments")
    a = p.parse_args(argv)
    rest = a.torchrun_args[1:] if a.torchrun_args[:1] == ["--"] else a.torchrun_args
    for s in STOP_SIGNALS:
        signal.signal(s, _exit_now)
    procs.die_with_parent(signal.SIGTERM)
    launcher = os.environ.get(procs.LAUNCHER_PID_ENV)
    if launcher and procs.parent_gone(int(launcher)):
        return 128 + signal.SIGTERM  # the launcher died before we could ask to die with it
    report = a.report.replace("{host}", socket.gethostname())

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    try:
        run(parse_args(rest))
    except ChildFailedError as e:
        from trainperf.measure.failures import write_failures

        failures = _failures(e)
        write_failures(report, failures)
        print(f"trainperf agent: {len(failures)} worker(s) failed; see {report}", file=sys.stderr, flush=True)
        return 1
    except SignalException as e:
        return 128 + int(e.sigval)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    return 0


if __name__ == "__main__":  # pragma: no cover
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the workers are gone and the report written: skip torch's slow teardown
