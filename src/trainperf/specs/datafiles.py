"""Read a TOML catalog shipped inside the package (``<package>/data/<name>``)."""

from __future__ import annotations

import tomllib
from importlib import resources
from typing import Any

from trainperf.errors import InputFileError


def read_package_toml(package: str, name: str, what: str) -> dict[str, Any]:
    """Parse ``data/<name>`` of ``package``; a missing or malformed file (a packaging bug) is one
    ``InputFileError`` line naming ``what`` it holds."""
    ref = resources.files(package).joinpath("data", name)
    try:
        return tomllib.loads(ref.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputFileError(f"{ref}: cannot read the {what}: {exc}") from exc
