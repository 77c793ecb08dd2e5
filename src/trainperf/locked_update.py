"""Update a file that several processes share (a cache), losing nobody's write.

:func:`update_file` is "lock, read, merge, write to a temporary file, fsync, rename": the lock
is an advisory ``flock`` on a lock file beside the target (``.NAME.lock``, never removed:
removing it would let two processes lock two different files), so two writers take turns;
each reads what the other wrote and merges into it; a reader without the lock sees the old file
or the new one, never half of one (the rename is atomic), and a writer killed mid-write leaves
the old file whole.

``fcntl.flock`` is POSIX (Linux, macOS, the BSDs; over NFS Linux maps it onto NFS byte-range
locks). On Windows ``msvcrt.locking`` takes its place. No third-party library: the core install
stays numpy + tabulate.

Pure standard library; the lowest layer (imported by ``specs`` and everything above).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from trainperf.errors import InputFileError, one_line

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt

_NO_LINK = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
"""Open flags that refuse a symbolic link (and do not block on a FIFO) where the OS has them."""

LOCK_TIMEOUT_S = 60.0
"""How long :func:`locked` waits for another process before giving up with one line. A cache
update holds the lock for milliseconds; a minute means a stuck process, not contention."""


def lock_path(path: str | os.PathLike[str]) -> Path:
    """The lock file of ``path``: ``.NAME.lock`` in the same directory."""
    p = Path(path)
    return p.with_name(f".{p.name}.lock")


def _try_lock(fd: int) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:  # pragma: no cover - Windows
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError as e:  # EWOULDBLOCK (POSIX), EACCES / EDEADLOCK (Windows): held by another process
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES, getattr(errno, "EDEADLOCK", errno.EDEADLK)):
            return False
        raise
    return True


def _unlock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
    else:  # pragma: no cover - Windows
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


@contextlib.contextmanager
def locked(path: str | os.PathLike[str], *, timeout_s: float = LOCK_TIMEOUT_S, what: str = "file") -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (see :func:`lock_path`) for the ``with`` block.

    Waits up to ``timeout_s`` (polling, backing off from 1 ms to 50 ms); then, or when the lock
    file cannot be created, one :class:`~trainperf.errors.InputFileError` line naming ``what``.
    The parent directory is created if missing. A link, FIFO or device at the lock's name is
    refused (one line), never opened through.
    """
    lp = lock_path(path)
    try:
        lp.parent.mkdir(parents=True, exist_ok=True)
        # never through a link, FIFO or device planted at the lock's name
        fd = os.open(lp, os.O_RDWR | os.O_CREAT | _NO_LINK, 0o666)
    except OSError as e:
        why = "it is a symbolic link" if e.errno == errno.ELOOP else e.strerror or e
        raise InputFileError(one_line(f"{what} {str(path)!r}: cannot create its lock file {str(lp)!r}: "
                                      f"{why}")) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputFileError(f"{what} {str(path)!r}: its lock file {str(lp)!r} is not a regular file; refusing "
                             "to use it (remove it)")
    try:
        deadline = time.monotonic() + timeout_s
        pause = 0.001
        while not _try_lock(fd):
            if time.monotonic() >= deadline:
                raise InputFileError(f"{what} {str(path)!r}: another process has held its lock {str(lp)!r} "
                                     f"for more than {timeout_s:g} s; retry, or remove the lock file if no "
                                     "trainperf process is running")
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        try:
            yield
        finally:
            _unlock(fd)
    finally:
        os.close(fd)


def new_file_mode(p: Path) -> int:
    """The replaced file's permissions, else what ``open()`` would give under the umask."""
    try:
        return stat.S_IMODE(os.stat(p).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_replace(p: Path, data: bytes) -> Path:
    """Write ``data`` to a temporary file beside ``p``, fsync it, rename it over ``p``, fsync the directory.

    The temporary file is created by :func:`tempfile.mkstemp`: a random name in ``p``'s directory,
    opened ``O_CREAT|O_EXCL`` (and ``O_NOFOLLOW`` where the OS has it), mode 0600 until it takes
    the replaced file's mode, so nothing planted beside ``p`` -- a link, a FIFO, another user's
    file -- is written through. A failed write removes it and leaves ``p`` as it was."""
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.chmod(tmp, new_file_mode(p))
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself durable; not every OS opens directories
        dfd = os.open(p.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return p


def update_file(path: str | os.PathLike[str], merge: Callable[[bytes | None], bytes | str], *,
                max_bytes: int | None = None, what: str = "file",
                timeout_s: float = LOCK_TIMEOUT_S) -> Path:
    """Lock ``path``, read it, ``merge`` its content into the new one, and replace it atomically.

    ``merge(old)`` receives the current bytes (``None`` when the file does not exist, or is
    larger than ``max_bytes``) and returns the new content (``str`` is written as UTF-8). It
    runs under the lock, so no other :func:`update_file` of the same path can slip a write in
    between the read and the rename. A symbolic link or anything but a regular file at ``path``
    is refused (one line), as is a failed write (the old file stays as it was).
    """
    p = Path(path)
    with locked(p, timeout_s=timeout_s, what=what):
        old: bytes | None = None
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise InputFileError(one_line(f"{what} {str(p)!r}: {e.strerror or e}")) from None
        if st is not None:
            if not stat.S_ISREG(st.st_mode):
                raise InputFileError(f"{what} {str(p)!r} is not a regular file; refusing to replace it")
            if max_bytes is None or st.st_size <= max_bytes:
                try:
                    with open(p, "rb") as f:
                        old = f.read() if max_bytes is None else f.read(max_bytes + 1)
                except OSError as e:
                    raise InputFileError(one_line(f"cannot read {what} {str(p)!r}: {e.strerror or e}")) from None
                if max_bytes is not None and len(old) > max_bytes:
                    old = None
        new = merge(old)
        data = new.encode("utf-8") if isinstance(new, str) else new
        try:
            write_replace(p, data)
        except OSError as e:
            raise InputFileError(one_line(f"cannot write {what} {str(p)!r}: {e.strerror or e}")) from None
    return p
