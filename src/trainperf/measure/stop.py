"""Stopping a run on a signal: finish the step in progress, keep it, stop within a bounded time.

SIGTERM (what Slurm, Kubernetes and ``timeout`` send), SIGINT (Ctrl-C) and SIGHUP (a closed
terminal) all mean "stop". During the training loop (:class:`GracefulStop`) the first one only
asks: the step in progress finishes and is recorded, the run record gets its ``end`` line, and
the loop ends; if the step has not finished ``grace_s`` seconds later, KeyboardInterrupt is
raised in the loop (the steps already finished are kept all the same). Outside the loop
(:func:`stop_signals_raise`: model building, calibration) there is nothing to finish, and a
stop signal raises :class:`RunStopped` at once.

Signal handlers belong to the main thread: both helpers do nothing in another thread.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    s for s in (getattr(signal, n, None) for n in ("SIGTERM", "SIGINT", "SIGHUP")) if s is not None)
"""The signals that stop a run."""

DEFAULT_GRACE_S = 8.0
"""Seconds a stopped run's step in progress may take to finish (``bench --stop-grace``). torchrun
kills a worker still running 1 s later, so a stopped ``bench --nproc N`` is gone within ~9 s,
under the 15 s of issue 17 and well under Slurm's default KillWait of 30 s."""


def signal_name(signum: int | None) -> str:
    """``SIGTERM`` for 15 (``signal N`` for a number Python does not name)."""
    if signum is None:
        return "no signal"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class RunStopped(KeyboardInterrupt):
    """The run was stopped by ``signum``; every finished step is in its record.

    A KeyboardInterrupt, so that whatever does not know it stops as on Ctrl-C; the CLI exits
    with :attr:`exit_code` (128 + the signal's number, the shell's convention).
    """

    def __init__(self, signum: int, detail: str = "") -> None:
        self.signum = int(signum)
        self.summary: dict[str, Any] | None = None
        """The run's summary, written before the stop propagated (None if no step finished)."""
        super().__init__(f"stopped by {signal_name(signum)}" + (f": {detail}" if detail else ""))

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """While active (main thread), SIGTERM, SIGINT and SIGHUP raise :class:`RunStopped`."""
    if not _main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise RunStopped(signum)

    prev = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in prev.items():
            signal.signal(s, h)


class GracefulStop:
    """While active (a context manager, main thread only), a stop signal is a request.

    The first stop signal sets :attr:`signum` (the loop checks :attr:`requested` after each
    step) and arms a ``grace_s`` timer (``SIGALRM``) whose expiry raises KeyboardInterrupt in the
    loop. With ``escalate`` (an interactive run, no launcher above it), a second signal raises
    at once, as a second Ctrl-C is expected to. Workers of a distributed run do not escalate:
    Slurm signals every process of a job step and torchrun forwards the same signal again.
    """

    def __init__(self, grace_s: float = DEFAULT_GRACE_S, *, escalate: bool = False) -> None:
        self.grace_s = float(grace_s)
        self.escalate = escalate
        self.signum: int | None = None
        """The first stop signal received, else None."""
        self._prev: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def request(self, signum: int) -> None:
        """What a stop signal does (also callable directly, e.g. by a test)."""
        if self.signum is None:
            self.signum = signum
            if self._prev and hasattr(signal, "setitimer"):
                signal.setitimer(signal.ITIMER_REAL, self.grace_s)
        elif self.escalate:
            raise RunStopped(signum, "signalled again: stopping without finishing the step")

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.request(signum)

    def _on_deadline(self, signum: int, frame: Any) -> None:
        raise RunStopped(self.signum or signal.SIGTERM,
                         f"the step in progress did not finish within {self.grace_s:g} s")

    def __enter__(self) -> GracefulStop:
        if not _main_thread():
            return self
        sigs = list(STOP_SIGNALS) + ([signal.SIGALRM] if hasattr(signal, "SIGALRM") else [])
        self._prev = {s: signal.getsignal(s) for s in sigs}
        for s in STOP_SIGNALS:
            signal.signal(s, self._on_signal)
        if hasattr(signal, "SIGALRM"):
            signal.signal(signal.SIGALRM, self._on_deadline)
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._prev:
            return
        if hasattr(signal, "setitimer"):
            signal.setitimer(signal.ITIMER_REAL, 0)
        for s, h in self._prev.items():
            signal.signal(s, h)
        self._prev = {}
