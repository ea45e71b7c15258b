"""The nine-cell load matrix: input tiers (short/medium/long) x concurrency tiers
(single/normal/peak).

Cell ids are ``"<input tier>/<concurrency tier>"`` (``"short/single"`` …). Cells run in the
declared ``order`` (default: input tiers in declared order, each with its concurrency tiers
in declared order — ``short/single, short/normal, short/peak, medium/single, …``).

Every tier states where its numbers come from: ``source: real_data`` (with a
``source_note``) or ``source: planning_scenario`` — the default, and what a report must
show as "planning scenario, not user behaviour" (the seed's rule: without production data a
tier is an assumption and says so).

A concurrency tier fixes its concurrency, duration and arrival mode:

- ``closed`` (default): keep ``concurrency`` requests in flight for ``duration_s``; the cell
  plans ``num_requests`` (default ``concurrency * requests_per_slot``) and the runner stops at
  whichever of count or duration comes first.
- ``burst``: ``num_requests`` (default ``concurrency``) all at once.
- ``constant`` / ``poisson`` / ``gamma``: open loop at ``rate_per_s`` (gamma also ``cv``)
  for ``duration_s``; ``concurrency`` is then the expected ceiling used for protection.
- ``ramp``: open-loop step ramp over ``stages``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvbudget.safety.limits import (
    MAX_CONCURRENCY,
    MAX_DURATION_S,
    MAX_RATE_PER_S,
    MAX_REQUEST_TOKENS,
    MAX_REQUESTS,
    MIN_RATE_PER_S,
)
from kvbudget.workload.arrival_specs import (
    ArrivalSpec,
    BurstArrivals,
    ClosedLoopArrivals,
    ConstantArrivals,
    GammaArrivals,
    PoissonArrivals,
    RampArrivals,
    RampStage,
)
from kvbudget.workload.lengths import FixedLength, LengthSpec, UniformLength
from kvbudget.workload.prefixes import PrefixSpec, TenantSpec
from kvbudget.workload.spec import WorkloadSpec

InputTierName = Literal["short", "medium", "long"]
ConcurrencyTierName = Literal["single", "normal", "peak"]
Source = Literal["planning_scenario", "real_data"]
INPUT_TIER_NAMES: tuple[str, ...] = ("short", "medium", "long")
CONCURRENCY_TIER_NAMES: tuple[str, ...] = ("single", "normal", "peak")


class InputTier(BaseModel):
    """An input-length tier: prompts of ``min_tokens .. max_tokens`` (uniform) or ``lengths``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: InputTierName
    min_tokens: int = Field(ge=1, le=MAX_REQUEST_TOKENS)
    max_tokens: int = Field(ge=1, le=MAX_REQUEST_TOKENS)
    lengths: LengthSpec | None = Field(None, description="overrides the uniform range")
    source: Source = "planning_scenario"
    source_note: str | None = None

    @model_validator(mode="after")
    def _range(self) -> InputTier:
        if self.max_tokens < self.min_tokens:
            raise ValueError(
                f"input tier {self.name}: max_tokens={self.max_tokens} is below "
                f"min_tokens={self.min_tokens}"
            )
        if self.source == "real_data" and not self.source_note:
            raise ValueError(
                f"input tier {self.name}: source=real_data needs source_note saying which data"
            )
        return self

    def length_spec(self) -> LengthSpec:
        if self.lengths is not None:
            return self.lengths
        return UniformLength(low=self.min_tokens, high=self.max_tokens, min_tokens=1)


class ConcurrencyTier(BaseModel):
    """A load tier: concurrency, duration and arrival mode (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ConcurrencyTierName
    concurrency: int = Field(ge=1, le=MAX_CONCURRENCY)
    duration_s: float = Field(gt=0, le=MAX_DURATION_S)
    arrival: Literal["closed", "burst", "constant", "poisson", "gamma", "ramp"] = "closed"
    rate_per_s: float | None = Field(None, ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S)
    cv: float = Field(1.0, gt=0, le=1e6)
    stages: list[RampStage] | None = None
    num_requests: int | None = Field(None, ge=1, le=MAX_REQUESTS)
    requests_per_slot: int = Field(10, ge=1, le=MAX_REQUESTS)
    source: Source = "planning_scenario"
    source_note: str | None = None

    @model_validator(mode="after")
    def _mode(self) -> ConcurrencyTier:
        if self.arrival in ("constant", "poisson", "gamma") and self.rate_per_s is None:
            raise ValueError(
                f"concurrency tier {self.name}: arrival={self.arrival} needs rate_per_s"
            )
        if self.arrival == "ramp" and not self.stages:
            raise ValueError(f"concurrency tier {self.name}: arrival=ramp needs stages")
        if self.source == "real_data" and not self.source_note:
            raise ValueError(f"concurrency tier {self.name}: source=real_data needs source_note")
        return self

    def arrival_spec(self) -> ArrivalSpec:
        if self.arrival == "closed":
            return ClosedLoopArrivals(concurrency=self.concurrency)
        if self.arrival == "burst":
            return BurstArrivals()
        if self.arrival == "ramp":
            assert self.stages is not None
            return RampArrivals(stages=self.stages)
        assert self.rate_per_s is not None
        if self.arrival == "constant":
            return ConstantArrivals(rate_per_s=self.rate_per_s)
        if self.arrival == "gamma":
            return GammaArrivals(rate_per_s=self.rate_per_s, cv=self.cv)
        return PoissonArrivals(rate_per_s=self.rate_per_s)

    def planned_requests(self) -> int | None:
        if self.num_requests is not None:
            return self.num_requests
        if self.arrival == "closed":
            return self.concurrency * self.requests_per_slot
        if self.arrival == "burst":
            return self.concurrency
        return None


@dataclass(frozen=True, slots=True)
class Cell:
    """One cell of the matrix."""

    cell_id: str
    index: int
    input_tier: InputTier
    concurrency_tier: ConcurrencyTier

    @property
    def planning_scenario(self) -> bool:
        """True when either tier is an assumption rather than real data."""
        return (
            self.input_tier.source == "planning_scenario"
            or self.concurrency_tier.source == "planning_scenario"
        )


def _default_input_tiers() -> list[InputTier]:
    return [
        InputTier(name="short", min_tokens=128, max_tokens=512),
        InputTier(name="medium", min_tokens=1024, max_tokens=4096),
        InputTier(name="long", min_tokens=8192, max_tokens=16384),
    ]


def _default_concurrency_tiers() -> list[ConcurrencyTier]:
    return [
        ConcurrencyTier(name="single", concurrency=1, duration_s=60.0),
        ConcurrencyTier(name="normal", concurrency=16, duration_s=120.0),
        ConcurrencyTier(name="peak", concurrency=64, duration_s=120.0),
    ]


class MatrixSpec(BaseModel):
    """The nine-cell matrix (three input tiers x three concurrency tiers)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_tiers: list[InputTier] = Field(default_factory=_default_input_tiers)
    concurrency_tiers: list[ConcurrencyTier] = Field(default_factory=_default_concurrency_tiers)
    output_tokens: LengthSpec = Field(default_factory=lambda: FixedLength(value=256))
    prefix: PrefixSpec = Field(default_factory=PrefixSpec)
    tenants: TenantSpec = Field(default_factory=TenantSpec)
    order: list[str] | None = Field(None, description="cell ids in run order")
    vocab_size: int = Field(32_000, ge=7)

    @model_validator(mode="after")
    def _nine(self) -> MatrixSpec:
        names_in = [t.name for t in self.input_tiers]
        names_cc = [t.name for t in self.concurrency_tiers]
        if sorted(names_in) != sorted(INPUT_TIER_NAMES):
            raise ValueError(
                f"input_tiers must be exactly short, medium and long once each, got {names_in}"
            )
        if sorted(names_cc) != sorted(CONCURRENCY_TIER_NAMES):
            raise ValueError(
                "concurrency_tiers must be exactly single, normal and peak once each, "
                f"got {names_cc}"
            )
        if self.order is not None:
            expected = {f"{i}/{c}" for i in names_in for c in names_cc}
            if len(self.order) != 9 or set(self.order) != expected:
                raise ValueError(
                    f"order must list the nine cell ids once each ({sorted(expected)}), "
                    f"got {self.order}"
                )
        return self


def cells(matrix: MatrixSpec) -> list[Cell]:
    """The nine cells in declared run order."""
    by_id: dict[str, Cell] = {}
    for it in matrix.input_tiers:
        for ct in matrix.concurrency_tiers:
            cid = f"{it.name}/{ct.name}"
            by_id[cid] = Cell(cell_id=cid, index=0, input_tier=it, concurrency_tier=ct)
    ids = matrix.order if matrix.order is not None else list(by_id)
    return [
        Cell(
            cell_id=c,
            index=i,
            input_tier=by_id[c].input_tier,
            concurrency_tier=by_id[c].concurrency_tier,
        )
        for i, c in enumerate(ids)
    ]


def cell_workload(matrix: MatrixSpec, cell: Cell) -> WorkloadSpec:
    """The ``WorkloadSpec`` of one cell (generate it with ``workload.spec.generate``)."""
    ct = cell.concurrency_tier
    return WorkloadSpec(
        name=cell.cell_id,
        cell_id=cell.cell_id,
        num_requests=ct.planned_requests(),
        duration_s=ct.duration_s,
        arrivals=ct.arrival_spec(),
        input_tokens=cell.input_tier.length_spec(),
        output_tokens=matrix.output_tokens,
        prefix=matrix.prefix,
        tenants=matrix.tenants,
        vocab_size=matrix.vocab_size,
    )
