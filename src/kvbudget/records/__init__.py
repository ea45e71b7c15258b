"""L0: per-request records, metric samples and versioned result documents.

* :class:`RequestRecord` — one per request, simulated or measured over HTTP.
* :class:`MetricSample` — one value of one server-side series on the run's timeline.
* :class:`ResultDocument` — base of every JSON result (schema version, tool version, created,
  provenance: ``computed`` / ``simulated`` / ``measured``, labelled figures).
* :class:`JsonlWriter` / :func:`read_jsonl` — append-and-flush JSON Lines that survive SIGKILL.
"""

from kvbudget.records.document import (
    FIGURE_KINDS,
    SCHEMA_VERSION,
    Figure,
    FigureKind,
    Provenance,
    ResultDocument,
    read_document,
    utc_now_iso,
    write_document,
)
from kvbudget.records.jsonl import (
    JsonlReadResult,
    JsonlWriter,
    read_jsonl,
    read_jsonl_dicts,
    repair_tail,
)
from kvbudget.records.request import (
    ERROR_KINDS,
    REQUEST_STATUSES,
    ErrorKind,
    RecordSource,
    RequestRecord,
    RequestStatus,
    at_one_instant,
    derive_latencies,
    excerpt,
    sha256_text,
)
from kvbudget.records.samples import MetricSample

__all__ = [
    "ERROR_KINDS",
    "FIGURE_KINDS",
    "REQUEST_STATUSES",
    "SCHEMA_VERSION",
    "ErrorKind",
    "Figure",
    "FigureKind",
    "JsonlReadResult",
    "JsonlWriter",
    "MetricSample",
    "Provenance",
    "RecordSource",
    "RequestRecord",
    "RequestStatus",
    "ResultDocument",
    "at_one_instant",
    "derive_latencies",
    "excerpt",
    "read_document",
    "read_jsonl",
    "read_jsonl_dicts",
    "repair_tail",
    "sha256_text",
    "utc_now_iso",
    "write_document",
]
