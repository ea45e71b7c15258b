"""The typed id of one acceptance request, encoded once at the record boundary.

A request of an acceptance run is named by the cell it ran in, the repetition, and either the
workload generator's own id (``r000012``) or the quality checkpoint whose prompt it carries.
Records keep the id as text (``RequestRecord.request_id``); :meth:`RequestKey.encode` writes it
and :meth:`RequestKey.decode` is the one place that reads it back. The text forms are the ones
earlier runs wrote (so ``--resume`` reads their records)::

    short/single#0/r000012          cell short/single, repetition 0, generated request r000012
    short/single#1/quality:greeting cell short/single, repetition 1, checkpoint "greeting"
    warmup/r000003                  warm-up request (no repetition)

Cell ids are ``<input tier>/<concurrency tier>`` with literal tier names (no ``#``), so the first
``#`` ends the cell id.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the cell id of the unscored warm-up requests
WARMUP_CELL = "warmup"
_QUALITY = "quality:"


@dataclass(frozen=True, slots=True)
class RequestKey:
    """Cell, repetition and request (generated id or quality checkpoint) of one request."""

    cell_id: str
    #: None for the warm-up, which has no repetitions
    repetition: int | None
    #: the workload generator's id; empty when the request carries a checkpoint's prompt
    request: str = ""
    #: the quality checkpoint whose prompt this request carries, else None
    checkpoint: str | None = None

    @property
    def run_id(self) -> str:
        """``<cell>#<rep>``: one repetition of one cell (``warmup`` for the warm-up)."""
        return self.cell_id if self.repetition is None else f"{self.cell_id}#{self.repetition}"

    def quality(self, checkpoint: str) -> RequestKey:
        """The same slot carrying checkpoint ``checkpoint``'s prompt."""
        return RequestKey(self.cell_id, self.repetition, checkpoint=checkpoint)

    def encode(self) -> str:
        tail = self.request if self.checkpoint is None else _QUALITY + self.checkpoint
        return f"{self.run_id}/{tail}"

    @classmethod
    def decode(cls, text: str) -> RequestKey:
        """The key of an id written by :meth:`encode` (ValueError for any other text)."""
        if text.startswith(WARMUP_CELL + "/"):
            return cls(WARMUP_CELL, None, text[len(WARMUP_CELL) + 1 :])
        cell_id, sep, rest = text.partition("#")
        rep, slash, tail = rest.partition("/")
        if not sep or not slash or not rep.isdigit():
            raise ValueError(f"{text!r} is not an acceptance request id (<cell>#<rep>/<request>)")
        if tail.startswith(_QUALITY):
            return cls(cell_id, int(rep), checkpoint=tail[len(_QUALITY) :])
        return cls(cell_id, int(rep), tail)
