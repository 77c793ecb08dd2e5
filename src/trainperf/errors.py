"""The project's own error types.

Every user mistake raises a subclass of :class:`TrainperfError` with a one-line message that
names the field, the value and what would be valid. The CLI turns these into one line on
stderr and exit code 2; nothing else should ever reach the user as a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable


class TrainperfError(ValueError):
    """Base class: a user-facing, one-line error."""

    exit_code = 2


class SpecError(TrainperfError):
    """A field of a spec (model, hardware, plan, workload) has an invalid value."""

    def __init__(self, field: str, value: object, valid: str) -> None:
        self.field = field
        self.value = value
        self.valid = valid
        super().__init__(f"{field}={value!r} is invalid: {valid}")


class MissingFieldError(SpecError):
    """A field the command needs was given nowhere (no flag, no workload-file key)."""

    def __init__(self, field: str, how: str) -> None:
        self.field = field
        self.value = None
        self.valid = how
        TrainperfError.__init__(self, f"{field} is not given: {how}")


class UnknownNameError(TrainperfError):
    """A catalog id (device, model preset, convention, format...) that does not exist."""

    def __init__(self, field: str, value: str, known: Iterable[str], hint: str | None = None) -> None:
        known = sorted(known)
        if hint is None:
            import difflib  # only an error pays for it (a few ms of every start otherwise)

            close = difflib.get_close_matches(str(value).lower(), known, n=4, cutoff=0.5)
            if not close:
                close = [k for k in known if str(value).lower() in k or k in str(value).lower()][:4]
            hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(known)}"
        self.field = field
        self.value = value
        self.known = known
        super().__init__(f"{field}={value!r} is unknown; {hint}")


class InputFileError(TrainperfError):
    """A file given by the user is missing, unreadable or malformed."""


def one_line(message: str) -> str:
    """Collapse a message onto one line (parsers' messages may span several)."""
    return " ".join(str(message).split())


def note(message: str) -> None:
    """One line on stderr about something trainperf worked around on its own (a damaged cache
    it ignored and rebuilt): not an error, but not silent either."""
    import sys

    print(f"trainperf: note: {one_line(message)}", file=sys.stderr, flush=True)
