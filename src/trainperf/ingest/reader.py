"""Streaming input for the log parsers: a file, a directory of files, a ``.gz`` file or stdin (``-``).

The input is read as raw bytes in :data:`CHUNK_BYTES` chunks (constant memory in the log's size)
and handed on as *blocks*: ``bytes`` holding whole lines, each ending in ``\\n``, with ``\\r\\n``
and a lone ``\\r`` already turned into ``\\n`` (universal newlines: a progress bar's ``\\r``
updates become separate lines). :func:`iter_log_blocks` gives the blocks (the parse pipeline's
speed path reads them without decoding); :func:`iter_log` gives the same lines decoded. A line
is decoded as UTF-8 with ``errors="replace"``: a byte that is not UTF-8 becomes U+FFFD in that
line only (a newline is never part of a multi-byte sequence, so no error reaches the next line),
and a NUL byte is an ordinary character of its line; both are counted in :class:`ReadStats`.
A line longer than :data:`MAX_LINE_CHARS` characters is cut there (the rest up to the next
newline is dropped and counted): one 2 GB line of garbage must not take 2 GB of memory; such a
line comes as a ``str`` between blocks. A file whose first 64 KiB are mostly binary (NUL and
control bytes) is refused; binary garbage inside a text log is just skipped by the parsers.
"""

from __future__ import annotations

import io
import re
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from trainperf.errors import InputFileError, one_line

CHUNK_BYTES = 1 << 21
"""Raw bytes read at a time (a block holds the whole lines of one such read)."""
MAX_LINE_CHARS = 1 << 16
_MAX_LINE_BYTES = 4 * MAX_LINE_CHARS + 8
"""A UTF-8 character takes at most 4 bytes (an invalid byte becomes one character): a line this
long in bytes is certainly longer than :data:`MAX_LINE_CHARS` characters."""
_BINARY_SNIFF_BYTES = 1 << 16
_TEXT_CONTROL = {9, 10, 12, 13, 27}
_RANK_FILE_RE = re.compile(r"(?:rank|node|worker|proc|host)[_\-.]?(\d+)", re.IGNORECASE)
_LOG_SUFFIXES = (".log", ".out", ".err", ".txt", ".jsonl", ".json", ".gz")


@dataclass
class ReadStats:
    """What the reader saw, for the parse report."""

    files: list[str] = field(default_factory=list)
    skipped_files: list[str] = field(default_factory=list)
    """Files of a directory that were not read, each with the reason (``"core.bin (binary)"``)."""
    overlong_lines: int = 0
    """Lines longer than :data:`MAX_LINE_CHARS` characters, cut there (the rest dropped)."""
    non_utf8_lines: int = 0
    """Lines holding bytes that are not UTF-8 (each such byte read as U+FFFD; the line is kept)."""
    nul_lines: int = 0
    """Lines holding NUL bytes (kept as they are: a parser skips what it cannot read)."""
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


def _file_chunks(f: IO[bytes], stats: ReadStats) -> Iterator[bytes]:
    """Chunks of ``f``, each completed to the end of its last line when that is near (so that
    :func:`iter_blocks` seldom has to copy a block to split off a partial line)."""
    while True:
        try:
            data = f.read(CHUNK_BYTES)
            if data and data[-1] != 10 and hasattr(f, "readline"):
                data += f.readline(MAX_LINE_CHARS)
        except OSError:
            stats.truncated = True
            break
        if not data:
            break
        yield data


def _gzip_chunks(raw: IO[bytes], stats: ReadStats) -> Iterator[bytes]:
    """Decompressed bytes of a (possibly multi-member, possibly truncated) gzip stream.

    Done by hand with zlib so that a stream cut off mid-way (a job killed while compressing)
    still yields everything before the cut."""
    z = zlib.decompressobj(wbits=31)
    while True:
        try:
            data = raw.read(CHUNK_BYTES // 4)
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
            if out:
                yield out


def decode_line(line: bytes, stats: ReadStats) -> str:
    """``line`` (no newline) as text, cut at :data:`MAX_LINE_CHARS` (counted as overlong)."""
    text = line.decode("utf-8", errors="replace")
    if len(text) > MAX_LINE_CHARS:
        stats.overlong_lines += 1
        text = text[:MAX_LINE_CHARS]
    return text


def _count_damage(block: bytes, stats: ReadStats) -> None:
    """Count the lines of ``block`` with NUL bytes or bytes that are not UTF-8 (a pure-ASCII,
    NUL-free block, the usual case, costs two C scans)."""
    if b"\x00" in block:
        stats.nul_lines += sum(1 for x in block.split(b"\n") if b"\x00" in x)
    if not block.isascii():
        try:
            block.decode("utf-8")
        except UnicodeDecodeError:
            for x in block.split(b"\n"):
                try:
                    x.decode("utf-8")
                except UnicodeDecodeError:
                    stats.non_utf8_lines += 1


def _split_long(block: bytes, stats: ReadStats) -> Iterator[bytes | str]:
    """``block`` as is when no line of it is longer than :data:`MAX_LINE_CHARS` bytes (checked
    with one ``find`` per half-line window: such a line spans a whole window); else its runs
    of short lines as blocks and each long line as decoded text (cut if overlong)."""
    w = MAX_LINE_CHARS // 2
    if all(block.find(b"\n", s, s + w) >= 0 for s in range(0, len(block) - w, w)):
        yield block
        return
    lines = block.split(b"\n")
    lines.pop()
    run: list[bytes] = []
    for line in lines:
        if len(line) <= MAX_LINE_CHARS:
            run.append(line)
            continue
        if run:
            yield b"\n".join(run) + b"\n"
            run = []
        yield decode_line(line, stats)
    if run:
        yield b"\n".join(run) + b"\n"


def iter_blocks(chunks: Iterator[bytes], stats: ReadStats, mark_partial: bool = True
                ) -> Iterator[bytes | str | PartialLine]:
    """Blocks of whole lines from raw ``chunks`` (see module doc); a line too long for a block
    comes as ``str``. With ``mark_partial``, :data:`PARTIAL` comes before a last line that has
    no newline (that line as ``str``)."""
    pending = b""
    skipping = False
    cr = False
    for data in chunks:
        if cr:
            data = b"\r" + data
        cr = data.endswith(b"\r")  # maybe the first half of \r\n: wait for the next chunk
        if cr:
            data = data[:-1]
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if skipping:
            nl = data.find(b"\n")
            if nl < 0:
                continue
            data = data[nl + 1:]
            skipping = False
        if pending:
            data = pending + data
        k = data.rfind(b"\n") + 1
        block, pending = (data, b"") if k == len(data) else (data[:k], data[k:])
        if block:
            _count_damage(block, stats)
            yield from _split_long(block, stats)
        if len(pending) > _MAX_LINE_BYTES:  # no newline in sight: cut the line, skip its rest
            _count_damage(pending[:_MAX_LINE_BYTES], stats)
            yield decode_line(pending[:_MAX_LINE_BYTES], stats)
            pending = b""
            skipping = True
    if cr and not skipping:
        pending += b"\n"
    if pending.endswith(b"\n"):
        _count_damage(pending, stats)
        yield from _split_long(pending, stats)
    elif pending:
        _count_damage(pending, stats)
        if mark_partial:
            yield PARTIAL
        yield decode_line(pending, stats)


def block_lines(block: bytes) -> list[str]:
    """The lines of a block (see :func:`iter_blocks`) as text, without their newlines."""
    lines = block.decode("utf-8", errors="replace").split("\n")
    lines.pop()
    return lines


def _open_chunks(path: Path, stats: ReadStats) -> tuple[IO[bytes], Callable[[], Iterator[bytes]]]:
    try:
        with path.open("rb") as f:
            head = f.read(_BINARY_SNIFF_BYTES)
    except OSError as e:
        raise InputFileError(f"cannot read log {str(path)!r}: {one_line(e.strerror or str(e))}") from None
    raw = path.open("rb")
    if head[:2] == b"\x1f\x8b":
        return raw, lambda: _gzip_chunks(raw, stats)
    if looks_binary(head):
        raw.close()
        raise InputFileError(f"{str(path)!r} looks like a binary file, not a text training log")
    return raw, lambda: _file_chunks(raw, stats)


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


def _stdin_chunks(stats: ReadStats) -> Iterator[bytes]:
    """Raw chunks of stdin: gzip detected from its first bytes (``zcat`` not needed)."""
    raw = sys.stdin.buffer
    head = raw.read(2)
    stream = io.BufferedReader(_Prefixed(head, raw))
    if head[:2] == b"\x1f\x8b":
        yield from _gzip_chunks(stream, stats)
        return
    yield from _file_chunks(stream, stats)


def iter_log_blocks(source: str | Path, stats: ReadStats | None = None
                    ) -> Iterator[bytes | str | LogLine | PartialLine]:
    """A log as blocks of whole lines (``bytes``, see :func:`iter_blocks`) and single lines
    (``str``), with a :class:`LogLine` marker before each file of a directory.

    In a directory, files whose names carry a rank (``rank3.log``, ``node-1.out``) are per-rank
    logs: their unprefixed lines get that rank. Other files are read in name order as
    consecutive parts of one run (a job restarted into a new file). A file of a directory that
    looks binary is skipped and named in ``stats.skipped_files``.
    """
    stats = stats if stats is not None else ReadStats()
    if str(source) == "-":
        stats.files.append("<stdin>")
        yield from iter_blocks(_stdin_chunks(stats), stats)
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
                yield from iter_blocks(chunks(), stats)
        return
    if not path.is_file():
        raise InputFileError(f"log {str(path)!r} is not a regular file")
    stats.files.append(str(path))
    handle, chunks = _open_chunks(path, stats)
    with handle:
        yield from iter_blocks(chunks(), stats)


def iter_log(source: str | Path, stats: ReadStats | None = None) -> Iterator[str | LogLine | PartialLine]:
    """The lines of a log (``str``, no newline) with the markers of :func:`iter_log_blocks`."""
    for item in iter_log_blocks(source, stats):
        if item.__class__ is bytes:
            yield from block_lines(item)
        else:
            yield item  # type: ignore[misc]
