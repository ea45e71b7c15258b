"""Prepare a command's ``--out`` directory before any work starts."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kvbudget.errors import ConfigError
from kvbudget.safety.outlock import lock_out_dir


def prepare_out_dir(out_dir: Path, stale_names: Iterable[str], *, flag: str = "--out") -> None:
    """Create ``out_dir`` and remove a previous run's files ``stale_names``, so a run that stops
    early never leaves an older, complete-looking result beside its own partial output.

    The directory is locked for this process first (:mod:`kvbudget.safety.outlock`): a second
    run on the same directory refuses in one line instead of mixing or deleting records. An
    unwritable directory is a one-line :class:`ConfigError` before the run, not after it."""
    lock_out_dir(out_dir, flag=flag)
    try:
        for name in stale_names:
            (out_dir / name).unlink(missing_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"{flag}: cannot write to directory {str(out_dir)!r} ({exc.strerror or exc}); "
            "give a writable directory",
            field=flag.strip("-").replace("-", "_"),
        ) from exc
