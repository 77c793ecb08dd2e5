"""Owning a process tree on Linux: children that die with their parent, orphans that come back.

torchrun starts each worker in a session of its own, so no process group holds the whole tree
and a killed torchrun leaves its workers running. Three Linux facilities close the gaps:

* ``PR_SET_PDEATHSIG`` (:func:`die_with_parent`): a process asks the kernel for a signal when
  its parent dies (torchrun when the launcher dies, a worker when torchrun dies);
* ``PR_SET_CHILD_SUBREAPER`` (:func:`child_subreaper`): orphans of the launcher's tree are
  re-parented to the launcher instead of init, so it can reap them (no zombie outlives it);
* an environment tag inherited by every process of the tree (:func:`tagged_processes`), read
  from ``/proc/<pid>/environ``, finds them all whatever their session or parent.

Elsewhere these are no-ops (returning False / nothing): the launcher then relies on torchrun's
own shutdown.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

TAG_ENV = "TRAINPERF_RUN_TAG"
"""Environment variable carrying the tag of one bench run's processes."""
LAUNCHER_PID_ENV = "TRAINPERF_LAUNCHER_PID"
"""The launching process's pid, so a child can tell that its parent died before it asked to
die with it."""

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def _prctl(option: int, arg: int | ctypes.c_int | object) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):  # pragma: no cover - no prctl in this libc
        return False


def die_with_parent(signum: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``signum`` to this process when its parent dies (Linux)."""
    return _prctl(_PR_SET_PDEATHSIG, int(signum))


def parent_gone(expected_parent: int | None) -> bool:
    """True when this process's parent is no longer ``expected_parent`` (it died and this
    process was re-parented), e.g. before :func:`die_with_parent` took effect."""
    return expected_parent is not None and os.getppid() != expected_parent


@contextlib.contextmanager
def child_subreaper() -> Iterator[bool]:
    """While active, orphaned descendants are re-parented to this process (Linux); yields
    whether that holds. The previous setting is restored on exit."""
    prev = ctypes.c_int(0)
    had = _prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(prev))
    on = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    try:
        yield on
    finally:
        if on and had and not prev.value:
            _prctl(_PR_SET_CHILD_SUBREAPER, 0)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # fields after the command name (which may hold spaces)


def is_zombie(pid: int) -> bool:
    f = _stat_fields(pid)
    return bool(f and f[0] == "Z")


def parent_of(pid: int) -> int | None:
    f = _stat_fields(pid)
    return int(f[1]) if f else None


def tagged_processes(tag: str) -> list[int]:
    """Pids of the live processes whose environment holds ``TAG_ENV=tag`` (Linux, same user)."""
    needle = f"{TAG_ENV}={tag}".encode()
    me = os.getpid()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            env = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.append(int(name))
    return found


def reap(pids: list[int]) -> None:
    """Collect the exit status of those of ``pids`` that are this process's (zombie) children."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def kill_all(pids: list[int], signum: int = signal.SIGKILL) -> list[int]:
    """Send ``signum`` to every live, non-zombie process of ``pids``; returns those signalled."""
    hit = []
    for pid in pids:
        if is_zombie(pid):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
            hit.append(pid)
    return hit
