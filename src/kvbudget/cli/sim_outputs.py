"""``kvbudget sim``'s output files: paths checked before a run, the samples CSV written as
it runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kvbudget.errors import ConfigError

OUTPUT_FLAGS = ("trace_out", "records_out", "samples_out")


def check_output_path(flag: str, raw: str) -> None:
    """Refuse an output path that cannot be written, before any simulation runs.

    Missing parent directories are created (as writing would need them anyway).
    """
    path = Path(raw)
    if path.is_dir():
        raise ConfigError(
            f"{flag} {raw}: is a directory; give a file path (e.g. {path / 'out.json'})",
            field=flag,
        )
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(
            f"{flag} {raw}: directory {parent} cannot be created ({reason}); "
            "give a path in a writable directory",
            field=flag,
        ) from None
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{flag} {raw}: directory {parent} is not writable; "
            "give a path in a writable directory",
            field=flag,
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(
            f"{flag} {raw}: file is not writable; give another path or fix its permissions",
            field=flag,
        )
    from kvbudget.safety.outlock import lock_out_file

    lock_out_file(path, flag=flag)  # two sims never write one file at once


class SampleWriter:
    """The samples CSV, written as samples come (rows of one time sorted by replica name)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._batch: list[Any] = []

    def __enter__(self) -> SampleWriter:
        self._fh = self.path.open("w")
        self._fh.write("time_s,replica,kv_usage,num_running,num_waiting\n")
        return self

    def write(self, x: Any) -> None:
        if self._batch and self._batch[0].time_s != x.time_s:
            self._flush()
        self._batch.append(x)

    def _flush(self) -> None:
        for x in sorted(self._batch, key=lambda x: x.replica):
            self._fh.write(
                f"{x.time_s:.6f},{x.replica},{x.kv_usage:.6f},{x.num_running},{x.num_waiting}\n"
            )
        self._batch.clear()

    def __exit__(self, *exc: object) -> None:
        self._flush()
        self._fh.close()
