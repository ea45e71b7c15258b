"""JSON Lines: an append-and-flush writer and a reader that survives SIGKILL.

The writer emits each record as one unbuffered ``write()`` of a complete line (``O_APPEND``),
so a process killed with SIGKILL leaves every finished record on disk and at most one partial
last line. The reader keeps every complete, valid line and reports what it skipped; the writer
reopened on the same file first cuts such a partial tail so appending continues cleanly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from kvbudget.safety.redact import redact_bytes

ModelT = TypeVar("ModelT", bound=BaseModel)
ItemT = TypeVar("ItemT")


def repair_tail(path: Path) -> int:
    """Cut a partial last line (no trailing newline); return the bytes removed."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return 0
        # scan back in blocks for the last newline
        pos = size
        block = 65536
        keep = 0
        while pos > 0:
            start = max(0, pos - block)
            fh.seek(start)
            chunk = fh.read(pos - start)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                keep = start + idx + 1
                break
            pos = start
        fh.truncate(keep)
        return size - keep


class JsonlWriter:
    """Append one JSON object per line, one ``write()`` each (``fsync`` optional).

    Safe to share one file between processes (``O_APPEND``).
    """

    def __init__(self, path: Path, *, fsync: bool = False) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.repaired_bytes = repair_tail(path)
        # O_APPEND + one write() per line: lines from several processes never interleave
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._fsync = fsync
        self.num_written = 0

    def write(self, item: BaseModel | dict[str, Any]) -> None:
        if self._fd is None:
            raise ValueError(f"JsonlWriter for {self.path} is closed")
        if isinstance(item, BaseModel):
            line = item.model_dump_json()
        else:
            line = json.dumps(item, separators=(",", ":"), sort_keys=True)
        data = redact_bytes((line + "\n").encode("utf-8"))  # no echoed API key on disk
        written = os.write(self._fd, data)
        while written < len(data):  # rare on regular files; keep the line whole anyway
            written += os.write(self._fd, data[written:])
        if self._fsync:
            os.fsync(self._fd)
        self.num_written += 1

    def write_many(self, items: Iterable[BaseModel | dict[str, Any]]) -> None:
        for item in items:
            self.write(item)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@dataclass
class JsonlReadResult(Generic[ItemT]):
    """Records read from a JSONL file and what was skipped (1-based line numbers)."""

    items: list[ItemT] = field(default_factory=list)
    skipped_lines: list[int] = field(default_factory=list)
    #: the file ended in a partial line (typical of a SIGKILL mid-write)
    truncated_tail: bool = False


def _complete_lines(path: Path) -> tuple[list[bytes], bool]:
    """The complete lines of a file, and whether a partial last line was dropped."""
    if not path.exists():
        return [], False
    lines = path.read_bytes().split(b"\n")
    tail = lines.pop()  # after the last newline: complete only if empty
    return lines, bool(tail.strip())


def read_jsonl_dicts(path: Path) -> JsonlReadResult[dict[str, Any]]:
    """Every complete line that parses as a JSON object (as plain dicts)."""
    lines, truncated = _complete_lines(path)
    result: JsonlReadResult[dict[str, Any]] = JsonlReadResult(truncated_tail=truncated)
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            result.skipped_lines.append(lineno)
            continue
        if isinstance(obj, dict):
            result.items.append(obj)
        else:
            result.skipped_lines.append(lineno)
    if truncated:
        result.skipped_lines.append(len(lines) + 1)
    return result


def read_jsonl(path: Path, model: type[ModelT]) -> JsonlReadResult[ModelT]:
    """Every complete line that validates as ``model``; the rest are counted as skipped."""
    lines, truncated = _complete_lines(path)
    result: JsonlReadResult[ModelT] = JsonlReadResult(truncated_tail=truncated)
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            result.items.append(model.model_validate_json(raw))
        except ValidationError:
            result.skipped_lines.append(lineno)
    if truncated:
        result.skipped_lines.append(len(lines) + 1)
    return result
