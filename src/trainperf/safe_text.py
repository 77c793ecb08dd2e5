"""One escaping rule per output: text that came from an input (a run's name, a log's path, a
title, a note quoting a value) is inert in every place trainperf writes it.

* **HTML** (the report page): :func:`html_text` for every piece of text and attribute value, and
  :data:`REPORT_CSP`, the page's Content-Security-Policy, which forbids scripts, plugins, frames,
  forms and every network fetch even if something escaped the escaper (figures are ``data:``
  images, the style sheet is inline).
* **Markdown** (``report.md``): :func:`markdown_text` escapes the characters that would start
  markup (emphasis, links, images, inline HTML, table cells) and flattens lines, so a name shows
  as written and never becomes a tag, a link or a new table row.
* **Terminal**: :func:`terminal_text` shows control characters (escape sequences that retitle a
  window, clear the screen or move the cursor; a carriage return or newline that forges a line;
  bidirectional overrides that reorder what is shown) as visible escapes such as ``\\x1b``
  instead of sending them. :class:`TerminalStream` applies the rule to everything a command
  prints (newlines and tabs of the command's own layout pass), and table cells and one-line
  messages apply it with newlines too.

Pure standard library; the lowest layer (imported by every layer above).
"""

from __future__ import annotations

import html
import re
from typing import IO, Any

__all__ = ["REPORT_CSP", "TerminalStream", "html_text", "markdown_text", "terminal_text"]

REPORT_CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'none'; "
              "object-src 'none'; frame-src 'none'; base-uri 'none'; form-action 'none'")
"""The report page's Content-Security-Policy (a ``<meta http-equiv>`` tag): no script of any
origin, inline or not; images only from ``data:`` URIs (the embedded figures); inline styles
only; nothing fetched, framed, embedded or submitted."""


def _visible(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


# C0 controls, DEL, C1 controls (0x9b is a one-byte CSI on some terminals), and the format
# characters that reorder or break lines as they are displayed.
_CONTROL = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F),
            *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C]
_SHOWN: dict[int, str] = {c: _visible(c) for c in _CONTROL}
_SHOWN[ord("\n")] = "\\n"
_SHOWN[ord("\r")] = "\\r"
_SHOWN[ord("\t")] = "\\t"
_VALUE_TABLE = str.maketrans(_SHOWN)
"""A value: every control character shown, newlines and tabs too (one value, one line)."""
_STREAM_TABLE = str.maketrans({c: s for c, s in _SHOWN.items() if chr(c) not in "\n\t"})
"""A command's output: its own newlines and tabs pass, every other control character is shown."""


def terminal_text(value: Any, *, newlines: bool = False) -> str:
    """``str(value)`` with control characters shown as escapes (``\\x1b``, ``\\n``, ``\\u202e``)
    instead of sent to the terminal; ``newlines=True`` lets newlines and tabs through."""
    return str(value).translate(_STREAM_TABLE if newlines else _VALUE_TABLE)


class TerminalStream:
    """A text stream that writes through :func:`terminal_text` (newlines kept): what a command
    prints cannot send an escape sequence, whatever the names in it. Everything else
    (``flush``, ``fileno``, ``encoding``...) is the wrapped stream's."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(text.translate(_STREAM_TABLE))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def html_text(value: Any) -> str:
    """``str(value)`` for HTML text or a quoted attribute value: ``& < > " '`` as entities, control
    characters shown (:func:`terminal_text`) -- the report's one HTML escaper."""
    return html.escape(terminal_text(value), quote=True)


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|!~&$])")
_MD_LINE_START = re.compile(r"^(\s*)([-+=]|\d+(?=[.)]))")


def markdown_text(value: Any, *, line_start: bool = False) -> str:
    """``str(value)`` as literal Markdown text, on one line: every character that could start
    markup (``\\ ` * _ { } [ ] < > # | ! ~ & $``) backslash-escaped, so it shows as written and
    never opens a tag, link, image, emphasis or table cell; control characters shown
    (:func:`terminal_text`). ``line_start``: the text begins a block (a list item, a
    paragraph), so a leading list marker (``-``, ``+``, ``1.``) is escaped too."""
    text = _MD_SPECIAL.sub(r"\\\1", terminal_text(value))
    if not line_start:
        return text
    return _MD_LINE_START.sub(lambda m: f"{m.group(1)}\\{m.group(2)}" if not m.group(2).isdigit()
                              else f"{m.group(1)}{m.group(2)}\\", text, count=1)
