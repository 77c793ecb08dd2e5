"""Rows of a runs table built by hand in a test, read as `validate --data` reads a file."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainperf.predict.runs_table import parse_runs

FIXTURE = Path(__file__).parent / "fixtures" / "runs_tables" / "messy_runs.csv"
"""A runs table with the packaged columns (its header is what the hand-built rows fill)."""


def parse_hand_rows(rows: Sequence[Mapping[str, str]]) -> tuple[Any, ...]:
    """Each of ``rows`` (cells by column; the columns a row leaves out are blank) written under
    the fixture's header and read back: one ``TableRun`` per row."""
    header = list(csv.DictReader(FIXTURE.open()).fieldnames or [])
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=header)
    w.writeheader()
    w.writerows({**dict.fromkeys(header, ""), **row} for row in rows)
    return parse_runs(buf.getvalue(), "hand.csv")
