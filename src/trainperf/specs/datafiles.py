"""Read a TOML catalog shipped inside the package (``<package>/data/<name>``), or a user's text file."""

from __future__ import annotations

import importlib
import os
import stat
import sys
from pathlib import Path
from typing import Any

from trainperf.errors import InputFileError, one_line


def read_package_bytes(package: str, *parts: str) -> bytes:
    """The bytes of ``<package>/<parts...>``, a data file shipped inside the package: read as a
    plain file beside the package's ``__init__`` (importing ``importlib.resources`` costs a cold
    command ~10 ms of zipfile, tempfile...), else through ``importlib.resources`` (a zip import).
    ``OSError`` when neither finds it."""
    module = sys.modules.get(package) or importlib.import_module(package)
    origin = getattr(module, "__file__", None)
    if origin is not None:
        try:
            return Path(origin).parent.joinpath(*parts).read_bytes()
        except OSError:
            pass  # not a plain file: the reader below finds it or raises
    from importlib import resources

    return resources.files(package).joinpath(*parts).read_bytes()


def read_package_toml(package: str, name: str, what: str) -> dict[str, Any]:
    """Parse ``data/<name>`` of ``package`` (``name`` may have ``/``-separated sub-directories);
    a missing or malformed file (a packaging bug) is one ``InputFileError`` line naming ``what``
    it holds."""
    # Imported here, not at the top: the catalogs usually come from the JSON cache
    # (trainperf.specs.catalog_cache), and a light command should not pay for these imports.
    import tomllib
    from importlib import resources

    ref = resources.files(package).joinpath("data", *name.split("/"))
    try:
        return tomllib.loads(ref.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputFileError(f"{ref}: cannot read the {what}: {exc}") from exc


USER_FILE_MAX_BYTES = 8 << 20
"""Largest JSON or CSV file a user may name (8 MiB), checked before it is read: a Hugging Face
config.json of an LLM is under 100 KB, a calibration file a few KB, and the packaged runs table
170 KB for 166 rows, so 8 MiB holds ~50x that table; a JSON file at the limit parses in ~2 s and
~100 MB (measured on a shared 2-core machine)."""
TOML_MAX_BYTES = 1 << 20
"""Largest TOML file a user may name (1 MiB): TOML is parsed in pure Python (~0.5-1 MB/s), the
packaged stack profiles are under 8 KB and a workload file ~1 KB, so 1 MiB is over 100x either
and parses in ~1-2.5 s and ~30 MB."""


def max_bytes_for(path: str | Path) -> int:
    """The size cap of a user file: :data:`TOML_MAX_BYTES` for ``.toml``, else :data:`USER_FILE_MAX_BYTES`."""
    return TOML_MAX_BYTES if Path(path).suffix.lower() == ".toml" else USER_FILE_MAX_BYTES


def _too_large(p: Path, what: str, size: int, max_bytes: int) -> InputFileError:
    return InputFileError(f"{what} {str(p)!r} is {size:,} bytes, more than trainperf reads "
                          f"({max_bytes:,} bytes); is it the right file?")


def read_user_bytes(path: str | Path, what: str, *, max_bytes: int | None = None) -> bytes:
    """The bytes of a file the user named, read only if it is a regular file of at most
    ``max_bytes`` (default :func:`max_bytes_for` the path; checked with ``stat`` first, then by a read of at most ``max_bytes + 1``
    bytes, for a file that grows meanwhile or whose size ``stat`` does not tell, as in /proc).
    A missing file, a directory, FIFO or device, an oversized or unreadable file is one
    ``InputFileError`` line naming ``what`` it should hold."""
    p = Path(path)
    max_bytes = max_bytes_for(p) if max_bytes is None else max_bytes
    try:
        st = os.stat(p)
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        st = None
    if st is None or not stat.S_ISREG(st.st_mode):
        raise InputFileError(f"{what} {str(p)!r} does not exist or is not a file")
    if st.st_size > max_bytes:
        raise _too_large(p, what, st.st_size, max_bytes)
    try:
        with open(p, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise InputFileError(f"{what} {str(p)!r} cannot be read: {one_line(e.strerror or str(e))}") from None
    if len(data) > max_bytes:
        raise _too_large(p, what, len(data), max_bytes)
    return data


def read_user_text(path: str | Path, what: str, *, max_bytes: int | None = None) -> str:
    """The UTF-8 text of a file the user named (:func:`read_user_bytes`, then decoded); an
    undecodable file is one ``InputFileError`` line as well."""
    data = read_user_bytes(path, what, max_bytes=max_bytes)
    try:  # newlines as text-mode open() gives them (\r\n and \r become \n)
        return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as e:
        raise InputFileError(f"{what} {str(path)!r} cannot be read: {one_line(str(e))}") from None


MAX_NESTING = 64
"""Deepest nesting of tables/arrays read from a user's TOML or JSON file: a workload is 2 levels
deep, a Hugging Face config of a multimodal model about 5; deeper is not a file trainperf reads
(and 5,000 levels would exhaust Python's recursion before any check)."""


def too_deep(obj: Any, limit: int = MAX_NESTING) -> bool:
    """Whether ``obj`` nests tables/arrays more than ``limit`` levels (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        o, depth = stack.pop()
        if isinstance(o, dict):
            children: Any = o.values()
        elif isinstance(o, list):
            children = o
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children)
    return False


def parse_user_data(text: str, path: str | Path, what: str, *, toml: bool) -> Any:
    """``text`` of the user's file ``path`` parsed as TOML (``toml``) or JSON, its nesting capped
    at :data:`MAX_NESTING`; malformed, too deep (a ``RecursionError`` included) or holding an
    integer of thousands of digits: one ``InputFileError`` line naming ``what`` it should hold."""
    import json

    p = str(path)
    try:
        if toml:
            import tomllib

            data = tomllib.loads(text)
        else:
            data = json.loads(text)
    except RecursionError:
        data = None
        deep = True
    except ValueError as e:  # TOMLDecodeError, JSONDecodeError, a > 4300-digit integer
        raise InputFileError(f"{what} {p!r} is malformed: {one_line(str(e))[:200]}") from None
    else:
        deep = too_deep(data)
    if deep:
        raise InputFileError(f"{what} {p!r} nests tables or arrays more than {MAX_NESTING} levels deep; "
                             "trainperf reads no such file")
    return data
