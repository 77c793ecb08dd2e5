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

Every refusal is an :class:`OutputPathError`: one line, exit code 2.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

from trainperf.errors import TrainperfError, one_line

__all__ = [
    "OutputPathError",
    "atomic_write",
    "check_output_dir",
    "check_output_file",
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
            os.chmod(tmp, _new_file_mode(p))
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


def _new_file_mode(p: Path) -> int:
    """The replaced file's permissions, else what ``open()`` would give under the umask."""
    try:
        return stat.S_IMODE(os.stat(p).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


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
