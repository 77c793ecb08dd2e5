"""The packaged TOML catalogs, parsed once per catalog content and kept as JSON.

``tomllib`` is pure Python: the hardware catalog (about 50 kB, a source string beside every
number) takes about 10 ms to parse and the model catalog about 2 ms, a large share of what a
light command (``trainperf mfu``) spends beyond starting the interpreter. :func:`read_catalog`
keeps the parsed table in ``$TRAINPERF_CACHE_DIR/catalogs/`` (default ``~/.cache/trainperf``,
the directory of the CPU calibration cache) as JSON, which the C ``json`` module reads back in
well under a millisecond.

The cache file is named after a CRC-32 and the length of the catalog's bytes, so an edited or
upgraded catalog is parsed afresh and never served stale; the newest four contents of each
catalog are kept. The file holds the SHA-256 of the catalog it was made from beside the parsed
table, and is used only when that matches: anything else at its name
(a ``{}``, a truncated write, a link) is ignored and rebuilt, with one line on stderr saying so.
A cache that cannot be read or written (read-only home, a race with another process) only costs
the parse: the file is written under a random name beside it (``O_CREAT|O_EXCL``, never
through a link) and renamed into place, and any failure falls back to
:func:`read_package_toml`, which also reports a missing or malformed catalog.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import zlib
from pathlib import Path
from typing import Any

from trainperf.errors import note
from trainperf.specs.datafiles import read_package_bytes, read_package_toml

FORMAT = 2
"""Bumped when the cached layout changes (part of the file name)."""
_KEEP = 4
"""Cached contents kept per catalog (the newest)."""


def cache_dir() -> Path:
    """``$TRAINPERF_CACHE_DIR/catalogs``, default ``~/.cache/trainperf/catalogs``."""
    base = os.environ.get("TRAINPERF_CACHE_DIR")
    return (Path(base).expanduser() if base else Path.home() / ".cache" / "trainperf") / "catalogs"


def read_catalog(package: str, name: str, what: str) -> dict[str, Any]:
    """``data/<name>`` of ``package`` parsed, as :func:`~trainperf.specs.datafiles.read_package_toml`
    returns it, from the JSON cache when that holds this exact content (``name`` may name a file
    in a sub-directory of ``data``: ``stacks/generic.toml``)."""
    try:
        raw: bytes | None = read_package_bytes(package, "data", *name.split("/"))
    except OSError:
        raw = None  # the reader below reports it
    cached = None
    if raw is not None:
        flat = name.replace("/", ".")
        cached = cache_dir() / f"{package}.{flat}.{FORMAT}-{zlib.crc32(raw):08x}-{len(raw)}.json"
        digest = hashlib.sha256(raw).hexdigest()
        data = _read_cached(cached, digest)
        if data is not None:
            return data
    data = read_package_toml(package, name, what)
    if cached is not None:
        _write(cached, {"format": FORMAT, "sha256": digest, "catalog": data})
    return data


_MAX_CACHE_BYTES = 16 << 20


def _read_cached(path: Path, digest: str) -> dict[str, Any] | None:
    """The catalog cached at ``path`` if it is one this version wrote for the catalog whose
    SHA-256 is ``digest``; else None, with one line saying why when something was there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:  # a link (ELOOP), unreadable: rebuilt
        why = "a symbolic link" if e.errno == errno.ELOOP else (e.strerror or str(e))
        return _invalid(path, why)
    try:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return _invalid(path, "not a regular file")
            raw = f.read(_MAX_CACHE_BYTES + 1)
        entry = json.loads(raw.decode("utf-8")) if len(raw) <= _MAX_CACHE_BYTES else None
    except (OSError, ValueError, RecursionError):
        entry = None
    if not (isinstance(entry, dict) and set(entry) == {"format", "sha256", "catalog"} and entry["format"] == FORMAT
            and entry["sha256"] == digest and isinstance(entry["catalog"], dict)):
        return _invalid(path, "not a cache trainperf wrote for this catalog")
    return entry["catalog"]


def _invalid(path: Path, why: str) -> dict[str, Any] | None:
    """None (rebuild the cache), after one line saying why."""
    note(f"catalog cache {str(path)!r} is {why}; ignored and rebuilt")
    return None


def _write(path: Path, data: dict[str, Any]) -> None:
    """Write ``path`` atomically (a temporary file under a random name, then rename); give up
    silently on any error (the cache only saves time)."""
    from trainperf.locked_update import write_replace

    try:
        text = json.dumps(data, allow_nan=True)
    except (TypeError, ValueError):
        return  # a TOML value JSON cannot hold (dates): no cache for this catalog
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_replace(path, text.encode("utf-8"))
        # Other contents of this catalog ("<package>.<name>.<FORMAT>-*"): keep the newest few, so
        # that two installed versions (or checkouts) in use side by side do not evict each other.
        stem = path.name.rsplit("-", 2)[0]
        others = sorted((p for p in path.parent.glob(f"{stem}-*.json") if p != path and p.is_file()
                         and not p.is_symlink()), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in others[_KEEP - 1:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
