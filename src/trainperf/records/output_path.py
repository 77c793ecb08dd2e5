"""Safe output paths: every file or directory the CLI writes goes through here.

Rules, the same for ``parse --save``, ``report --out``, ``calibrate-model -o``, ``bench --out``,
``slurm --out`` and any later writer:

* Never unlink, truncate or write through something that is not a regular file: a directory,
  a FIFO, a device node, a socket or a symbolic link at the output path is refused.
* Never overwrite an input of the same command (compared by device and inode, so another
  spelling of the same path, or a hard link, is caught too).
* An existing regular file is replaced only with ``force`` (the ``--force`` flag).
* Files are written to a temporary file in the same directory, flushed to disk and renamed
  into place: a reader sees the old file or the new one, never half of one, and a failed
  write leaves the old file untouched.
* No parent directory is created beyond the one named: a file's parent must exist; an output
  directory may be created, but its parent must exist -- unless ``parents`` (``--parents``).
* A run directory (``bench``/``sweep --out``, a report's ``--out``) has one writer: the run holds
  an exclusive lock on it for its whole life (:func:`claim_run_dir`), and a directory that holds
  an earlier run's record is not appended to; ``--force`` replaces that run's files -- only those
  its manifest (:data:`RUN_MANIFEST_NAME`) lists, never a file the run did not write.

Every refusal is an :class:`OutputPathError`: one line, exit code 2.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from trainperf.errors import TrainperfError, one_line
from trainperf.locked_update import new_file_mode

__all__ = [
    "OutputPathError",
    "RunDirClaim",
    "atomic_write",
    "check_output_dir",
    "check_output_file",
    "check_run_dir",
    "claim_run_dir",
    "make_output_dir",
    "write_text_atomic",
    "write_with",
]


class OutputPathError(TrainperfError):
    """An output path that would destroy or clobber something; one line, exit 2."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "not a regular file"


def _identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _input_identities(inputs: Iterable[str | os.PathLike[str] | None]) -> dict[tuple[int, int], str]:
    out: dict[tuple[int, int], str] = {}
    for p in inputs:
        if p is None or str(p) == "-":
            continue
        ident = _identity(p)
        if ident is not None:
            out[ident] = str(p)
    return out


def _inside_input_dir(p: Path, inputs: Iterable[str | os.PathLike[str] | None]) -> str | None:
    """The input directory (if any) that contains the existing file ``p`` (read as an input)."""
    real = os.path.realpath(p)
    for d in inputs:
        if d is None or str(d) == "-" or not os.path.isdir(d):
            continue
        root = os.path.realpath(d)
        if os.path.commonpath([root, real]) == root:
            return str(d)
    return None


def _check_parent(p: Path, what: str, parents: bool) -> None:
    parent = p.parent
    # The deepest ancestor that exists must be a directory; with ``parents`` the rest is created.
    ancestor = parent
    while not os.path.lexists(ancestor) and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputPathError(f"{what} {str(p)!r}: {str(ancestor)!r} exists and is not a directory")
    if ancestor != parent and not parents:
        raise OutputPathError(f"{what} {str(p)!r}: directory {str(parent)!r} does not exist "
                              "(create it, or give --parents)")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputPathError(f"{what} {str(p)!r}: directory {str(ancestor)!r} is not writable")


def _stat(p: Path, what: str, *, follow_links: bool) -> os.stat_result | None:
    """``os.stat``/``os.lstat`` of ``p``, None if it does not exist; any other failure is one line."""
    try:
        return os.stat(p) if follow_links else os.lstat(p)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise OutputPathError(f"{what} {str(p)!r}: a parent of it is a file, not a directory") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise OutputPathError(f"{what} {str(p)!r}: {one_line(getattr(e, 'strerror', None) or str(e))}") from None


def check_output_file(path: str | os.PathLike[str], *, what: str = "output",
                      inputs: Iterable[str | os.PathLike[str] | None] = (), force: bool = False,
                      parents: bool = False) -> Path:
    """Refuse (one line) an output file path that is unsafe to write; return it as a Path.

    ``what`` names the flag in messages (``"--save"``); ``inputs`` are the command's input
    paths (files or directories); ``force`` allows replacing an existing regular file;
    ``parents`` allows creating missing parent directories (done by :func:`atomic_write`).
    Nothing on disk is changed by this check.
    """
    p = Path(path)
    inputs = list(inputs)
    if not str(path):
        raise OutputPathError(f"{what}: an empty path")
    st = _stat(p, what, follow_links=False)
    ident = _identity(p) if st is not None else None
    sources = _input_identities(inputs)
    if ident is not None and ident in sources:
        raise OutputPathError(f"{what} {str(p)!r} is an input of this command ({sources[ident]!r}); "
                              "refusing to overwrite it")
    if st is not None:
        inside = _inside_input_dir(p, inputs)
        if inside is not None:
            raise OutputPathError(f"{what} {str(p)!r} is a file of the input directory {inside!r} of this "
                                  "command; refusing to overwrite it")
        if not stat.S_ISREG(st.st_mode):
            raise OutputPathError(f"{what} {str(p)!r} is {_kind(st.st_mode)}; refusing to replace it "
                                  "(give the path of a regular file)")
        if not force:
            raise OutputPathError(f"{what} {str(p)!r} already exists; give --force to replace it")
    _check_parent(p, what, parents)
    return p


def check_output_dir(path: str | os.PathLike[str], *, what: str = "output directory",
                     inputs: Iterable[str | os.PathLike[str] | None] = (), parents: bool = False) -> Path:
    """Refuse (one line) an output directory that is unsafe; return it as a Path.

    An existing directory is accepted (the writer then checks the files it puts there); a
    missing one may be created one level deep (its parent must exist) unless ``parents``.
    Anything else at the path (a file, a FIFO, a link to a non-directory) is refused, as is
    a directory that is one of ``inputs``' files. Nothing on disk is changed.
    """
    p = Path(path)
    if not str(path):
        raise OutputPathError(f"{what}: an empty path")
    st = _stat(p, what, follow_links=True)
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            raise OutputPathError(f"{what} {str(p)!r} exists and is {_kind(st.st_mode)}, not a directory")
        sources = _input_identities(inputs)
        if (st.st_dev, st.st_ino) in sources:
            raise OutputPathError(f"{what} {str(p)!r} is an input of this command "
                                  f"({sources[(st.st_dev, st.st_ino)]!r}); give another directory")
        if not os.access(p, os.W_OK | os.X_OK):
            raise OutputPathError(f"{what} {str(p)!r} is not writable")
        return p
    if os.path.islink(p):
        raise OutputPathError(f"{what} {str(p)!r} is a dangling symbolic link")
    _check_parent(p, what, parents)
    return p


def make_output_dir(path: str | os.PathLike[str], *, what: str = "output directory",
                    parents: bool = False) -> Path:
    """:func:`check_output_dir`, then create the directory (only the levels it allows)."""
    p = check_output_dir(path, what=what, parents=parents)
    try:
        p.mkdir(parents=parents, exist_ok=True)
    except OSError as e:
        raise OutputPathError(f"{what} {str(p)!r} cannot be created: {one_line(e.strerror or str(e))}") from None
    return p


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], *, what: str = "output", force: bool = False,
                 inputs: Iterable[str | os.PathLike[str] | None] = (), parents: bool = False,
                 mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success flush, fsync and rename it into place.

    The path is checked by :func:`check_output_file` first (and the target again right before
    the rename, so a FIFO or directory that appeared meanwhile is not replaced). On any error
    the temporary file is removed and the old file, if any, is untouched.
    """
    inputs = list(inputs)
    p = check_output_file(path, what=what, inputs=inputs, force=force, parents=parents)
    if parents and not p.parent.exists():
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputPathError(f"{what} {str(p)!r}: cannot create {str(p.parent)!r}: "
                                  f"{one_line(e.strerror or str(e))}") from None
    try:
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    except OSError as e:
        raise OutputPathError(f"{what} {str(p)!r}: cannot write in {str(p.parent)!r}: "
                              f"{one_line(e.strerror or str(e))}") from None
    try:
        with os.fdopen(fd, mode, encoding=encoding if "b" not in mode else None) as f:
            os.chmod(tmp, new_file_mode(p))
            yield f
            f.flush()
            os.fsync(f.fileno())
        check_output_file(p, what=what, inputs=inputs, force=force, parents=parents)
        os.replace(tmp, p)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, TrainperfError):
            raise OutputPathError(f"{what} {str(p)!r} could not be written: "
                                  f"{one_line(e.strerror or str(e))}") from None
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str, **kwargs: object) -> Path:
    """Write ``text`` to ``path`` by :func:`atomic_write` (same keyword arguments)."""
    with atomic_write(path, **kwargs) as f:  # type: ignore[arg-type]
        f.write(text)
    return Path(path)


def write_with(path: str | os.PathLike[str], writer: Callable[[IO], None], **kwargs: object) -> Path:
    """Call ``writer(file)`` on a temporary file and rename it into place (see :func:`atomic_write`)."""
    with atomic_write(path, **kwargs) as f:  # type: ignore[arg-type]
        writer(f)
    return Path(path)


# --------------------------------------------------------------------------- run directories
RUN_LOCK_NAME = ".trainperf-run.lock"
"""The lock file of a run directory (kept after the run: removing it would let two runs lock
two different files of the same name)."""
RUN_RECORD_NAMES = ("steps.jsonl", "summary.json")
"""Files whose presence means the directory holds a run (finished or interrupted)."""
RUN_OWN_NAMES = ("steps.jsonl", "summary.json", "workload.toml", "run_config.json", "bench.sbatch", "torchrun.log")
"""The files a run writes under fixed names (listed in its manifest when it takes the directory)."""
RUN_FILE_PATTERNS = (*RUN_OWN_NAMES, "torchrun*.log", "rank*.log", "failures*.json")
"""Every file a run may write into its directory. Those that appear while the run holds the
directory, and were not there when it took it, are added to its manifest when it lets go."""
RUN_MANIFEST_NAME = ".trainperf-run.json"
"""The run's manifest: the names of the files it wrote (``files``) and of the files matching
:data:`RUN_FILE_PATTERNS` that were there before it (``before``, never its own). ``--force``
removes what ``files`` lists and nothing else."""
_MANIFEST_MAX_BYTES = 1 << 20
_HOLDER_BYTES = 4096


@dataclass
class RunDirClaim:
    """A run directory held by this process (:func:`claim_run_dir`); ``release()`` lets it go.

    The lock is a kernel lock (``flock``) on :data:`RUN_LOCK_NAME`: it dies with the last
    process holding its file descriptor, so a run killed by SIGKILL leaves no stale lock.
    Pass ``fd`` to child processes (``pass_fds``) to keep the directory held while they live.
    """

    path: Path
    fd: int | None
    """The lock file's descriptor; None where the filesystem or platform has no locks."""
    shared: bool = False
    """Held shared (the nodes of one multi-node run share a directory) instead of exclusive."""
    run: bool = True
    """Held by a run (its files are added to the run manifest when it lets go), not a report."""

    def release(self) -> None:
        """Add the files the run wrote to its manifest (:func:`record_run_files`), then let the
        directory go."""
        if self.fd is not None:
            if self.run:
                with contextlib.suppress(OSError, TrainperfError):
                    record_run_files(self.path)
            with contextlib.suppress(OSError):
                os.close(self.fd)  # closing the last descriptor releases the flock
            self.fd = None

    def check_still_there(self, what: str = "--out") -> None:
        """One line if the directory was removed or replaced while the run held it (its record
        then went with it), rather than a run "failed before its first step"."""
        if self.fd is None:
            return
        try:
            st = os.stat(self.path / RUN_LOCK_NAME, follow_symlinks=False)
            held = os.fstat(self.fd)
        except OSError:
            st = None
        if st is None or (st.st_dev, st.st_ino) != (held.st_dev, held.st_ino):
            raise OutputPathError(f"{what} {str(self.path)!r} was removed (or replaced) while the run was using it; "
                                  "the run's record went with it")

    def __enter__(self) -> RunDirClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _pattern_files(p: Path) -> set[str]:
    """The names in directory ``p`` matching :data:`RUN_FILE_PATTERNS` (regular files or not)."""
    return {f.name for pattern in RUN_FILE_PATTERNS for f in p.glob(pattern)}


def _plain_name(name: object) -> bool:
    return (isinstance(name, str) and bool(name) and "/" not in name and "\0" not in name
            and name not in (".", "..", RUN_LOCK_NAME, RUN_MANIFEST_NAME) and len(name) <= 255)


def read_run_manifest(p: Path, what: str = "--out") -> dict[str, list[str]] | None:
    """The manifest of the run that wrote directory ``p`` (None when there is none); one line if
    it is not one trainperf wrote (a link, not JSON, a name with a ``/``)."""
    path = p / RUN_MANIFEST_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise OutputPathError(f"{what} {str(p)!r}: its run manifest {str(path)!r} cannot be read "
                              f"({one_line(e.strerror or str(e))}; a link is refused)") from None
    with os.fdopen(fd, "rb") as f:
        raw = f.read(_MANIFEST_MAX_BYTES + 1) if stat.S_ISREG(os.fstat(f.fileno()).st_mode) else b""
    try:
        data = json.loads(raw.decode("utf-8")) if len(raw) <= _MANIFEST_MAX_BYTES else None
    except (ValueError, RecursionError):
        data = None
    if not (isinstance(data, dict) and all(isinstance(data.get(k), list) and all(map(_plain_name, data[k]))
                                           for k in ("files", "before"))):
        raise OutputPathError(f"{what} {str(p)!r}: {str(path)!r} is not a run manifest trainperf wrote; remove "
                              "the earlier run's files yourself (and that file), or give another directory")
    return {"files": list(data["files"]), "before": list(data["before"])}


def _write_run_manifest(p: Path, files: set[str], before: set[str] | None) -> None:
    """Merge ``files`` into the manifest of ``p`` (``before`` kept from the first writer; the
    nodes of a multi-node run share one), under its lock, atomically, never through a link."""
    from trainperf.locked_update import update_file

    def merge(old: bytes | None) -> str:
        try:
            earlier = json.loads(old.decode("utf-8")) if old else {}
        except (ValueError, RecursionError):
            earlier = {}
        if not isinstance(earlier, dict):
            earlier = {}
        kept = [n for n in earlier.get("files", []) if _plain_name(n)] if isinstance(earlier.get("files"), list) \
            else []
        was: list[Any] = earlier["before"] if isinstance(earlier.get("before"), list) else sorted(before or ())
        return json.dumps({"version": 1, "files": sorted(set(kept) | files), "before": sorted(set(was))},
                          indent=1) + "\n"

    update_file(p / RUN_MANIFEST_NAME, merge, max_bytes=_MANIFEST_MAX_BYTES, what="run manifest")


def record_run_files(path: str | os.PathLike[str]) -> None:
    """Add to the manifest of run directory ``path`` every file matching :data:`RUN_FILE_PATTERNS`
    that is there now and was not when the run took the directory: the files the run wrote
    (rank logs, failure reports). Called when a run lets its directory go, and by the summary
    step of a Slurm job."""
    p = Path(path)
    manifest = read_run_manifest(p)
    if manifest is None:
        return
    before = set(manifest["before"])
    mine = {n for n in _pattern_files(p) if n not in before and (p / n).is_file() and not (p / n).is_symlink()}
    if not mine <= set(manifest["files"]):
        _write_run_manifest(p, mine, None)


def _holder(lock_path: Path) -> str:
    """Who holds the lock, from the lock file's text (``pid ... on host ... since ...``)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return "another process"
    try:
        text = os.read(fd, _HOLDER_BYTES).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    finally:
        os.close(fd)
    return one_line(text.splitlines()[0]) if text else "another process"


def _open_lock(p: Path, what: str, *, create: bool) -> int | None:
    """The lock file's descriptor (a regular file, never through a link, FIFO or device)."""
    lock_path = p / RUN_LOCK_NAME
    st = _stat(lock_path, what, follow_links=False)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputPathError(f"{what} {str(p)!r}: {str(lock_path)!r} is {_kind(st.st_mode)}; refusing to use it "
                              "as the run's lock (remove it)")
    if st is None and not create:
        return None
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_CREAT if create else 0)
    try:
        fd = os.open(lock_path, flags, 0o644)
    except OSError as e:
        raise OutputPathError(f"{what} {str(p)!r}: cannot open {str(lock_path)!r}: "
                              f"{one_line(e.strerror or str(e))}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the lstat and the open
        os.close(fd)
        raise OutputPathError(f"{what} {str(p)!r}: {str(lock_path)!r} is not a regular file; refusing to use it")
    return fd


def _try_lock(fd: int, shared: bool) -> bool | None:
    """flock ``fd`` without waiting: True if taken, False if another process holds it, None if
    this filesystem or platform has no locks."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return None
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return None
        raise
    return True


def _busy(p: Path, what: str) -> OutputPathError:
    return OutputPathError(f"{what} {str(p)!r} is in use by another run ({_holder(p / RUN_LOCK_NAME)}); "
                           "give another directory, or wait for that run to end")


def _earlier_run(p: Path) -> str | None:
    for name in RUN_RECORD_NAMES:
        if os.path.lexists(p / name):
            return name
    return None


def check_run_dir(path: str | os.PathLike[str], *, what: str = "--out",
                  inputs: Iterable[str | os.PathLike[str] | None] = (), parents: bool = False,
                  force: bool = False, shared: bool = False) -> Path:
    """:func:`check_output_dir` for a run directory, plus: no run holds it now, and it holds no
    earlier run's record unless ``force``. Nothing on disk is changed (a run directory is taken
    for real by :func:`claim_run_dir`; this check lets a command refuse before any work)."""
    p = check_output_dir(path, what=what, inputs=inputs, parents=parents)
    if not p.is_dir():
        return p
    fd = _open_lock(p, what, create=False)
    if fd is not None:
        try:
            if _try_lock(fd, shared) is False:
                raise _busy(p, what)
        finally:
            os.close(fd)  # also releases the probe's lock
    _check_earlier_run(p, what, force)
    return p


def _check_earlier_run(p: Path, what: str, force: bool) -> list[Path]:
    """The earlier run's files to remove (``force``): those its manifest lists that are still
    there. Refused (one line): an earlier run without ``force``; with ``force``, a record
    without a manifest (nothing says which files that run wrote), a manifest trainperf did not
    write, or a listed name that is not a regular file."""
    name = _earlier_run(p)
    if name is not None and not force:
        raise OutputPathError(f"{what} {str(p)!r} holds an earlier run ({name}); give a new or empty directory, "
                              "or --force to replace that run")
    if not force:
        return []
    manifest = read_run_manifest(p, what)
    if manifest is None:
        if name is None:
            return []
        raise OutputPathError(f"{what} {str(p)!r} holds an earlier run ({name}) but no manifest of the files it "
                              f"wrote ({RUN_MANIFEST_NAME}); --force removes only what a manifest lists: remove that "
                              "run's files yourself, or give another directory")
    files = [p / n for n in manifest["files"] if os.path.lexists(p / n)]
    for f in files:
        st = _stat(f, what, follow_links=False)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise OutputPathError(f"{what} {str(f)!r} is {_kind(st.st_mode)}; refusing to replace it "
                                  "(remove it, or give another directory)")
    return files


def claim_run_dir(path: str | os.PathLike[str], *, what: str = "--out",
                  inputs: Iterable[str | os.PathLike[str] | None] = (), parents: bool = False,
                  force: bool = False, shared: bool = False, run: bool = True) -> RunDirClaim:
    """Create (if needed) and take the run directory ``path`` for this process; one line if not.

    Refused (:class:`OutputPathError`, nothing changed): an unsafe path (:func:`check_output_dir`),
    a directory another run holds now, or one holding an earlier run's record (``steps.jsonl``
    or ``summary.json``) unless ``force``. With ``force`` the earlier run's files -- those its
    manifest lists, regular files only -- are removed once the directory is held; then this
    run's manifest is written (:data:`RUN_MANIFEST_NAME`).
    ``shared``: the nodes of one multi-node run each hold it shared; a single-node run, which
    holds it exclusively, then cannot enter it (and the reverse). ``run=False`` takes only the
    one-writer lock, for another writer into the directory (a report): no earlier run is
    looked for and no run manifest written.
    """
    check_output_dir(path, what=what, inputs=inputs, parents=parents)
    if run and Path(path).is_dir():
        _check_earlier_run(Path(path), what, force)  # refuse before creating the lock file
    p = make_output_dir(path, what=what, parents=parents)
    fd = _open_lock(p, what, create=True)
    assert fd is not None
    try:
        taken = _try_lock(fd, shared)
        if taken is False:
            raise _busy(p, what)
        if run:
            for f in _check_earlier_run(p, what, force):  # again, now that no other run can enter
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f)
            # the files this run writes under fixed names; the others when it lets the directory go
            _write_run_manifest(p, set(RUN_OWN_NAMES), _pattern_files(p) - set(RUN_OWN_NAMES))
        if taken and not shared:
            holder = (f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}: "
                      f"{' '.join(sys.argv)[:200]}\n")
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder.encode("utf-8", "replace"), 0)
    except BaseException:
        os.close(fd)
        raise
    if not taken:  # a filesystem without locks: the meter's exclusive creation of the record remains
        os.close(fd)
        return RunDirClaim(path=p, fd=None, shared=shared, run=run)
    return RunDirClaim(path=p, fd=fd, shared=shared, run=run)
