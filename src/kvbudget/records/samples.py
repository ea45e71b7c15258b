"""Samples of server-side metrics (Prometheus series) on the client's timeline."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MetricSample(BaseModel):
    """One value of one series at one moment.

    ``timestamp_s`` is on the run's monotonic timeline (same clock as
    :class:`~kvbudget.records.request.RequestRecord` times). ``name`` is either the engine's
    raw series name or kvbudget's unified vocabulary name (see ``docs/metrics-mapping.md``).
    """

    model_config = ConfigDict(extra="forbid")

    timestamp_s: float
    name: str
    value: float
    labels: dict[str, str] = Field(default_factory=dict)
    #: the engine's own series name this sample was mapped from (None if ``name`` is raw)
    raw_name: str | None = None
