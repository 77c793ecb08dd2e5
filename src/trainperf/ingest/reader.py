"""Streaming input for the log parsers: a file, a directory of files, a ``.gz`` file or stdin (``-``).

Lines are read in 1 MiB chunks (constant memory in the log's size), decoded as UTF-8 with
``errors="replace"`` (mixed encodings become U+FFFD, never an error), with universal newlines so
a progress bar's ``\\r`` updates become separate lines. A line longer than
:data:`MAX_LINE_CHARS` is cut there (the rest up to the next newline is dropped and counted):
one 2 GB line of garbage must not take 2 GB of memory. A file whose first 64 KiB are mostly
binary (NUL and control bytes) is refused; binary garbage inside a text log is just skipped
by the parsers.
"""

from __future__ import annotations

import codecs
import io
import re
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from trainperf.errors import InputFileError, one_line

CHUNK_CHARS = 1 << 20
MAX_LINE_CHARS = 1 << 16
_BINARY_SNIFF_BYTES = 1 << 16
_TEXT_CONTROL = {9, 10, 12, 13, 27}
_RANK_FILE_RE = re.compile(r"(?:rank|node|worker|proc|host)[_\-.]?(\d+)", re.IGNORECASE)
_LOG_SUFFIXES = (".log", ".out", ".err", ".txt", ".jsonl", ".json", ".gz")


@dataclass
class ReadStats:
    """What the reader saw, for the parse report."""

    files: list[str] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)
    overlong_lines: int = 0
    truncated: bool = False
    """Reading stopped early: a truncated gzip stream or a read error."""


class PartialLine:
    """Marker yielded just before the last line of a file when that line has no newline: the
    writer may have been killed mid-line, so a number at its very end may be cut."""

    __slots__ = ()
    rank = None


PARTIAL = PartialLine()


@dataclass(frozen=True)
class LogLine:
    """Marker yielded between files of a directory: the default rank of the next file's lines."""

    file: str
    rank: int | None


def looks_binary(head: bytes) -> bool:
    """True when more than 30% of ``head``'s non-NUL bytes are non-text control bytes or not
    UTF-8 (random, compressed or executable data); a Latin-1 log has far fewer. NUL bytes are
    left out of the ratio: a crash on a network file system pads a text log with blocks of NULs.
    """
    n = len(head) - head.count(0)
    if n <= 0:
        return False
    bad = sum(1 for b in head if 0 < b < 32 and b not in _TEXT_CONTROL)
    bad += head.replace(b"\x00", b"").decode("utf-8", errors="replace").count("\ufffd")
    return bad / n > 0.30


def _gzip_text_chunks(raw: IO[bytes], stats: ReadStats) -> Iterator[str]:
    """Decompressed, decoded text of a (possibly multi-member, possibly truncated) gzip stream.

    Done by hand with zlib so that a stream cut off mid-way (a job killed while compressing)
    still yields everything before the cut; ``\r\n`` and ``\r`` become ``\n``.
    """
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    z = zlib.decompressobj(wbits=31)
    pending_cr = False
    while True:
        try:
            data = raw.read(CHUNK_CHARS // 4)
        except OSError:
            stats.truncated = True
            break
        if not data:
            if not z.eof:
                stats.truncated = True
            break
        while data:
            try:
                out = z.decompress(data)
            except zlib.error:
                stats.truncated = True
                return
            data = z.unused_data if z.eof else b""
            if z.eof and data:
                z = zlib.decompressobj(wbits=31)  # next gzip member
            text = dec.decode(out)
            if pending_cr:
                text = "\r" + text
            pending_cr = text.endswith("\r")
            if pending_cr:
                text = text[:-1]
            if text:
                yield text.replace("\r\n", "\n").replace("\r", "\n")
    text = dec.decode(b"", final=True) + ("\n" if pending_cr else "")
    if text:
        yield text


def _open_chunks(path: Path, stats: ReadStats) -> tuple[IO[bytes] | IO[str], Callable[[], Iterator[str]]]:
    try:
        with path.open("rb") as f:
            head = f.read(_BINARY_SNIFF_BYTES)
    except OSError as e:
        raise InputFileError(f"cannot read log {str(path)!r}: {one_line(e.strerror or str(e))}") from None
    if head[:2] == b"\x1f\x8b":
        raw = path.open("rb")
        return raw, lambda: _gzip_text_chunks(raw, stats)
    if looks_binary(head):
        raise InputFileError(f"{str(path)!r} looks like a binary file, not a text training log")
    text = path.open("r", encoding="utf-8", errors="replace")
    return text, lambda: _text_chunks(text, stats)


def _text_chunks(f: IO[str], stats: ReadStats) -> Iterator[str]:
    while True:
        try:
            chunk = f.read(CHUNK_CHARS)
        except OSError:
            stats.truncated = True
            break
        if not chunk:
            break
        yield chunk


def iter_chunked_lines(f: IO[str] | Iterator[str], stats: ReadStats,
                       mark_partial: bool = False) -> Iterator[str | PartialLine]:
    """Lines of ``f`` (a text stream or an iterator of text chunks) without their newline;
    overlong lines cut (see module doc). With ``mark_partial``, :data:`PARTIAL` comes before a
    last line that has no newline."""
    chunks = _text_chunks(f, stats) if hasattr(f, "read") else f  # type: ignore[arg-type]
    tail = ""
    skipping = False
    for chunk in chunks:
        if skipping:
            nl = chunk.find("\n")
            if nl < 0:
                continue
            chunk = chunk[nl + 1:]
            skipping = False
        if tail:
            chunk = tail + chunk
        lines = chunk.split("\n")
        tail = lines.pop()
        if len(tail) > MAX_LINE_CHARS:
            stats.overlong_lines += 1
            lines.append(tail[:MAX_LINE_CHARS])
            tail = ""
            skipping = True
        if lines and max(map(len, lines)) > MAX_LINE_CHARS:
            for i, line in enumerate(lines):
                if len(line) > MAX_LINE_CHARS:
                    stats.overlong_lines += 1
                    lines[i] = line[:MAX_LINE_CHARS]
        yield from lines
    if tail:
        if mark_partial:
            yield PARTIAL
        yield tail


def _dir_files(path: Path) -> list[Path]:
    files = sorted((p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")),
                   key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)])
    logs = [p for p in files if p.name.lower().endswith(_LOG_SUFFIXES)]
    return logs or files


class _Prefixed(io.RawIOBase):
    """A raw byte stream that replays ``head`` (already read to sniff the format) then ``rest``."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(b))
        b[:len(data)] = data
        return len(data)


def _stdin_chunks(stats: ReadStats) -> Iterator[str]:
    """Text chunks of stdin: gzip detected from its first bytes (``zcat`` not needed)."""
    raw = sys.stdin.buffer
    head = raw.read(2)
    stream = io.BufferedReader(_Prefixed(head, raw))
    if head[:2] == b"\x1f\x8b":
        yield from _gzip_text_chunks(stream, stats)
        return
    yield from _text_chunks(io.TextIOWrapper(stream, encoding="utf-8", errors="replace"), stats)


def iter_log(source: str | Path, stats: ReadStats | None = None) -> Iterator[str | LogLine | PartialLine]:
    """Lines of a log (``str``), with a :class:`LogLine` marker before each file of a directory.

    In a directory, files whose names carry a rank (``rank3.log``, ``node-1.out``) are per-rank
    logs: their unprefixed lines get that rank. Other files are read in name order as
    consecutive parts of one run (a job restarted into a new file).
    """
    stats = stats if stats is not None else ReadStats()
    if str(source) == "-":
        stats.files.append("<stdin>")
        yield from iter_chunked_lines(_stdin_chunks(stats), stats, mark_partial=True)
        return
    path = Path(source)
    if not path.exists():
        raise InputFileError(f"log {str(path)!r} does not exist")
    if path.is_dir():
        files = _dir_files(path)
        if not files:
            raise InputFileError(f"log directory {str(path)!r} contains no files")
        for p in files:
            try:
                handle, chunks = _open_chunks(p, stats)
            except InputFileError:
                stats.skipped_files.append(f"{p.name} (binary)")
                continue
            m = _RANK_FILE_RE.search(p.stem)
            stats.files.append(str(p))
            yield LogLine(str(p), int(m.group(1)) if m else None)
            with handle:
                yield from iter_chunked_lines(chunks(), stats, mark_partial=True)
        return
    if not path.is_file():
        raise InputFileError(f"log {str(path)!r} is not a regular file")
    stats.files.append(str(path))
    handle, chunks = _open_chunks(path, stats)
    with handle:
        yield from iter_chunked_lines(chunks(), stats, mark_partial=True)
