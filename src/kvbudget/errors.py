"""One exception tree for kvbudget.

The CLI prints ``Kind: message`` on one line and exits non-zero for every
:class:`KvbudgetError`; no traceback reaches the user. Messages name the field, the
value and the fix (what was asked, what it needs, what is available, which knob).
"""

from __future__ import annotations


class KvbudgetError(Exception):
    """Base class of every error kvbudget raises on purpose."""

    kind = "Error"
    exit_code = 2

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def one_line(self) -> str:
        """The message as a single line, prefixed with its kind."""
        text = " ".join(str(self).split())
        return f"{self.kind}: {text}"


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
