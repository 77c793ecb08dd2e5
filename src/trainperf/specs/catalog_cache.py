"""The packaged TOML catalogs, parsed once per catalog content and kept as JSON.

``tomllib`` is pure Python: the hardware catalog (about 50 kB, a source string beside every
number) takes about 10 ms to parse and the model catalog about 2 ms, a large share of what a
light command (``trainperf mfu``) spends beyond starting the interpreter. :func:`read_catalog`
keeps the parsed table in ``$TRAINPERF_CACHE_DIR/catalogs/`` (default ``~/.cache/trainperf``,
the directory of the CPU calibration cache) as JSON, which the C ``json`` module reads back in
well under a millisecond.

The cache file is named after a CRC-32 and the length of the catalog's bytes, so an edited or
upgraded catalog is parsed afresh and never served stale; the newest four contents of each
catalog are kept. A cache that cannot be read or
written (read-only home, corrupt file, a race with another process) only costs the parse: the
file is replaced atomically, and any failure falls back to :func:`read_package_toml`, which
also reports a missing or malformed catalog.
"""

from __future__ import annotations

import contextlib
import json
import os
import zlib
from pathlib import Path
from typing import Any

from trainperf.specs.datafiles import read_package_bytes, read_package_toml

FORMAT = 1
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
        try:
            data = json.loads(cached.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
        else:
            if isinstance(data, dict):
                return data
    data = read_package_toml(package, name, what)
    if cached is not None:
        _write(cached, data)
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    """Write ``path`` atomically (temporary file, then rename); give up silently on any error."""
    try:
        text = json.dumps(data, allow_nan=True)
    except (TypeError, ValueError):
        return  # a TOML value JSON cannot hold (dates): no cache for this catalog
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        # Other contents of this catalog ("<package>.<name>.<FORMAT>-*"): keep the newest few, so
        # that two installed versions (or checkouts) in use side by side do not evict each other.
        stem = path.name.rsplit("-", 2)[0]
        others = sorted((p for p in path.parent.glob(f"{stem}-*.json") if p != path),
                        key=lambda p: p.stat().st_mtime, reverse=True)
        for old in others[_KEEP - 1:]:
            old.unlink(missing_ok=True)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
