"""Read a TOML catalog shipped inside the package (``<package>/data/<name>``), or a user's text file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainperf.errors import InputFileError, one_line


def read_package_toml(package: str, name: str, what: str) -> dict[str, Any]:
    """Parse ``data/<name>`` of ``package``; a missing or malformed file (a packaging bug) is one
    ``InputFileError`` line naming ``what`` it holds."""
    # Imported here, not at the top: the catalogs usually come from the JSON cache
    # (trainperf.specs.catalog_cache), and a light command should not pay for these imports.
    import tomllib
    from importlib import resources

    ref = resources.files(package).joinpath("data", name)
    try:
        return tomllib.loads(ref.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputFileError(f"{ref}: cannot read the {what}: {exc}") from exc


def read_user_text(path: str | Path, what: str) -> str:
    """The UTF-8 text of a file the user named; a missing, unreadable or undecodable file is one
    ``InputFileError`` line naming ``what`` it should hold (``"workload file"``, ``"runs file"``)."""
    p = Path(path)
    if not p.is_file():
        raise InputFileError(f"{what} {str(p)!r} does not exist or is not a file")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputFileError(f"{what} {str(p)!r} cannot be read: {one_line(str(e))}") from None
