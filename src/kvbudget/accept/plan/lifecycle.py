"""The plan's ``lifecycle:`` section: one storage layer's deletion contract per entry.

The run's evidence for each layer (:func:`kvbudget.accept.lifecycle.lifecycle_rows`) is built
after the run; this module only reads what the plan declares.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kvbudget.accept.plan.lock import StrictModel

LayerName = Literal[
    "application_database",
    "object_store",
    "vector_store",
    "response_cache",
    "queues",
    "traces_and_logs",
    "engine_kv",
    "offload_tiers",
    "kvbudget_artifacts",
]


class LifecycleLayer(StrictModel):
    """One storage layer's deletion contract, declared in the plan."""

    layer: LayerName
    owner: str = Field(min_length=1, description="team or system responsible")
    trigger: str = Field(min_length=1, description="event that deletes (session delete, TTL, ...)")
    retention: str = Field(min_length=1, description="longest retention, e.g. '30 days'")
    verification: str = Field(min_length=1, description="how deletion is verified")
    escalation: str | None = Field(default=None, description="who is told when it fails")
