"""The load section of an acceptance plan: three input tiers x three concurrency tiers.

Seed step 3 ("准备负载"): input tiers come from real, de-identified length distributions or are
marked as a planning scenario; concurrency tiers carry a duration and a fixed arrival mode;
sample prompts are kept as hashes with token counts and the template version.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from kvbudget.accept.plan.errors import field_error
from kvbudget.accept.plan.lock import StrictModel
from kvbudget.safety.limits import (
    MAX_CONCURRENCY,
    MAX_DURATION_S,
    MAX_RATE_PER_S,
    MAX_REQUEST_TOKENS,
    MAX_REQUESTS,
    MIN_RATE_PER_S,
)

INPUT_TIERS: tuple[str, ...] = ("short", "medium", "long")
CONCURRENCY_TIERS: tuple[str, ...] = ("single", "normal", "peak")
DataSource = Literal["real_data", "planning_scenario"]
ArrivalMode = Literal["closed", "poisson", "constant", "burst"]


class InputTier(StrictModel):
    """Prompt lengths (server-side tokens, template included) and the output length."""

    min_tokens: int = Field(ge=1, le=MAX_REQUEST_TOKENS)
    max_tokens: int = Field(ge=1, le=MAX_REQUEST_TOKENS)
    output_tokens: int = Field(
        ge=1, le=MAX_REQUEST_TOKENS, description="max_tokens asked of the engine (ignore_eos)"
    )
    source: DataSource = "planning_scenario"
    data_ref: str | None = Field(
        default=None, description="where the real distribution came from (required for real_data)"
    )

    @model_validator(mode="after")
    def _check(self) -> InputTier:
        if self.max_tokens < self.min_tokens:
            raise field_error(
                "max_tokens",
                f"must be >= min_tokens (got {self.max_tokens} < {self.min_tokens}); "
                "fix the tier range",
            )
        if self.source == "real_data" and not self.data_ref:
            raise field_error(
                "data_ref",
                "source 'real_data' needs data_ref (which log, which dates); "
                "otherwise mark the tier source: planning_scenario",
            )
        return self


class ConcurrencyTier(StrictModel):
    """How many requests are in flight and how they arrive."""

    concurrency: int = Field(
        ge=1, le=MAX_CONCURRENCY, description="clients in flight (closed) or the in-flight cap"
    )
    duration_s: float = Field(gt=0, le=MAX_DURATION_S, description="how long the tier is held")
    arrival: ArrivalMode = "closed"
    rate_per_s: float | None = Field(
        default=None, ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S, description="for poisson/constant"
    )
    source: DataSource = "planning_scenario"
    data_ref: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ConcurrencyTier:
        if self.arrival in ("poisson", "constant") and self.rate_per_s is None:
            raise field_error(
                "rate_per_s",
                f"arrival '{self.arrival}' needs rate_per_s (requests per second); "
                "give it or use arrival: closed",
            )
        if self.source == "real_data" and not self.data_ref:
            raise field_error(
                "data_ref", "source 'real_data' needs data_ref; otherwise mark it planning_scenario"
            )
        return self


class SamplePrompt(StrictModel):
    """A de-identified sample prompt: never its text, only the hash and counts."""

    tier: Literal["short", "medium", "long"]
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    prompt_tokens: int = Field(ge=1, le=MAX_REQUEST_TOKENS)
    template_version: str
    tokenizer: str | None = None


class Warmup(StrictModel):
    requests: int = Field(
        default=8, ge=0, le=MAX_REQUESTS, description="uniform warm-up requests, not scored"
    )
    input_tokens: int = Field(default=256, ge=1, le=MAX_REQUEST_TOKENS)
    output_tokens: int = Field(default=32, ge=1, le=MAX_REQUEST_TOKENS)


class SharedPrefix(StrictModel):
    """Shared system prompt / tool definitions placed before the varying part."""

    tokens: int = Field(default=0, ge=0, le=MAX_REQUEST_TOKENS)
    num_groups: int = Field(default=1, ge=1, le=MAX_CONCURRENCY)
    num_tenants: int = Field(default=1, ge=1, le=MAX_CONCURRENCY)


class LoadPlan(StrictModel):
    tiers: dict[Literal["short", "medium", "long"], InputTier]
    concurrency: dict[Literal["single", "normal", "peak"], ConcurrencyTier]
    order: list[str] | None = Field(
        default=None,
        description="cells as 'input/concurrency' in run order; default row by row, "
        "single -> normal -> peak",
    )
    repetitions: int = Field(default=2, ge=1, le=1000)
    max_requests_per_cell: int = Field(
        default=200, ge=1, le=MAX_REQUESTS, description="hard cap per repetition"
    )
    template_version: str = "unspecified"
    warmup: Warmup = Field(default_factory=Warmup)
    shared_prefix: SharedPrefix = Field(default_factory=SharedPrefix)
    samples: list[SamplePrompt] = Field(default_factory=list)
    cancel_fraction: float = Field(
        default=0.0, ge=0, le=0.5, description="share of requests the client cancels mid-stream"
    )
    cancel_after_tokens: int = Field(default=8, ge=1, le=MAX_REQUEST_TOKENS)

    @model_validator(mode="after")
    def _check(self) -> LoadPlan:
        if not self.tiers:
            raise field_error(
                "tiers", "no input tier; declare one, two or three of short, medium and long"
            )
        for name in CONCURRENCY_TIERS:
            if name not in self.concurrency:
                raise field_error(
                    "concurrency", f"missing tier '{name}'; declare single, normal and peak"
                )
        if self.order is not None:
            valid = {f"{i}/{c}" for i in self.input_tiers for c in CONCURRENCY_TIERS}
            for cell in self.order:
                tier = cell.split("/", 1)[0]
                if tier in INPUT_TIERS and tier not in self.tiers:
                    raise field_error(
                        "order",
                        f"cell {cell!r}: input tier '{tier}' is not declared in load.tiers; "
                        "declare it or drop the cell",
                    )
                if cell not in valid:
                    raise field_error(
                        "order",
                        f"unknown cell {cell!r}; write 'input/concurrency' such as 'short/single'",
                    )
            if len(set(self.order)) != len(self.order):
                raise field_error("order", "a cell is listed twice; list each cell at most once")
        return self

    @property
    def input_tiers(self) -> tuple[str, ...]:
        """The declared input tiers, short -> medium -> long (a plan may declare one, two or
        three; the others are not run and are no part of the verdict)."""
        return tuple(name for name in INPUT_TIERS if name in self.tiers)

    def cell_order(self) -> list[tuple[str, str]]:
        """(input tier, concurrency tier) in run order; unlisted cells follow, row by row."""
        default = [(i, c) for i in self.input_tiers for c in CONCURRENCY_TIERS]
        if not self.order:
            return default
        listed = [tuple(cell.split("/", 1)) for cell in self.order]
        rest = [cell for cell in default if cell not in listed]
        return [(a, b) for a, b in listed] + rest
