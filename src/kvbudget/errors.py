"""One exception tree for kvbudget.

The CLI prints ``Kind: message`` on one line and exits non-zero for every
:class:`KvbudgetError`; no traceback reaches the user. Messages name the field, the
value and the fix (what was asked, what it needs, what is available, which knob).
"""

from __future__ import annotations

import re

#: an echoed value (a flag's argument, a field's value) is shown to at most this many characters
MAX_SHOWN_CHARS = 60
#: any run of non-blank characters longer than this in an error line is cut (a value nobody
#: passed through :func:`shown_value`); paths, URLs and lists stay under it
MAX_RUN_CHARS = 200
_LONG_RUN = re.compile(rf"\S{{{MAX_RUN_CHARS + 1},}}")


def _cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with an ellipsis and the full length."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def shown_value(value: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """``repr(value)`` as an error message echoes it: at most ``limit`` characters, then
    ``...`` and the length (``'xxxx...' (5,000 characters)``), so a 5,000-character value is
    never echoed whole."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}... ({len(value):,} characters)"
    return _cut(repr(value), limit)


def cap_long_runs(text: str) -> str:
    """``text`` with every run of more than :data:`MAX_RUN_CHARS` non-blank characters cut
    (:func:`shown_value`'s form): the net under every one-line error."""
    return _LONG_RUN.sub(lambda m: _cut(m.group(0), MAX_SHOWN_CHARS), text)


def _kinds() -> set[str]:
    found: set[str] = set()
    todo: list[type[KvbudgetError]] = [KvbudgetError]
    while todo:
        cls = todo.pop()
        found.add(cls.kind)
        todo.extend(cls.__subclasses__())
    return found


def without_kind(text: str) -> str:
    """``text`` without leading ``Kind: `` prefixes, so a message built from another error's
    :meth:`KvbudgetError.one_line` is not printed as ``SpecError: SpecError: ...``."""
    kinds = _kinds()
    while True:
        head, sep, rest = text.partition(": ")
        if not sep or head not in kinds:
            return text
        text = rest


class KvbudgetError(Exception):
    """Base class of every error kvbudget raises on purpose."""

    kind = "Error"
    exit_code = 2

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def one_line(self) -> str:
        """The message as a single line, prefixed with its kind once (a kind the message itself
        begins with is dropped), long echoed values cut (:func:`cap_long_runs`)."""
        text = without_kind(" ".join(str(self).split()))
        return f"{self.kind}: {cap_long_runs(text)}"


class ConfigError(KvbudgetError):
    """Bad user input: flags, YAML plan files, scenario files."""

    kind = "ConfigError"


class SpecError(KvbudgetError):
    """A model could not be resolved into a spec (missing file, unknown id, bad config)."""

    kind = "SpecError"


class CapacityError(KvbudgetError):
    """The deployment does not fit (the engine would refuse to start)."""

    kind = "CapacityError"


class TargetError(KvbudgetError):
    """A load target (HTTP endpoint, embedded server) failed in a way that stops the run."""

    kind = "TargetError"


class SimulationError(KvbudgetError):
    """The simulator was given an impossible scenario."""

    kind = "SimulationError"


class ReportError(KvbudgetError):
    """A result document could not be read or rendered."""

    kind = "ReportError"


class RunFailedError(KvbudgetError):
    """A run went through but its requests failed (all, or more than the allowed fraction).

    Everything already recorded stays on disk; the message is one line from the first errors.
    """

    kind = "RunFailed"
    exit_code = 4
