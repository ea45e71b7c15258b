"""Planning scenarios (the seed's procurement table): conservative, neutral and high load.

Each scenario has a length distribution (tokens a sequence holds at its peak: prompt + output),
a peak concurrency (sequences active at once), a duration and a quality gate. From a
:class:`~kvbudget.capacity.plan_types.PlanResult` it yields the per-replica capacity (sequences
that fit in the pool at the p95 length, capped by ``max_num_seqs``), the replicas and GPUs
needed, the headroom, and the host memory a CPU KV tier of a given size needs.

Lengths are a log-normal fixed by its median and p95 (``sigma = ln(p95/median) / 1.6449``),
evaluated on a deterministic quantile grid (no random draws), clamped to ``[1, max_model_len]``.
Scenario figures are *planning assumptions*, not measurements, and are labelled so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy.stats import norm

from kvbudget.capacity.plan_types import PlanResult
from kvbudget.units import cdiv

#: the seed's stop conditions (停止条件), used when a scenario names none
DEFAULT_STOP_CONDITIONS = (
    "a key quality sample fails",
    "any cross-tenant prefix-cache hit",
    "any unexpected OOM",
    "tail latency above the business threshold",
    "error rate persistently above the limit",
    "host memory or transfer bandwidth anomaly",
    "rollback cannot restore within the target time",
)
Z95 = float(norm.ppf(0.95))
GRID_POINTS = 512


class LengthDistribution(BaseModel):
    """Tokens per sequence at its peak (prompt + output): median and p95 of a log-normal."""

    model_config = ConfigDict(extra="forbid")

    median_tokens: int = Field(ge=1)
    p95_tokens: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> LengthDistribution:
        if self.p95_tokens < self.median_tokens:
            raise ValueError(
                f"p95_tokens ({self.p95_tokens}) must be >= median_tokens ({self.median_tokens})"
            )
        return self

    def grid(self, max_model_len: int) -> np.ndarray:
        """Deterministic quantile grid of lengths, clamped to ``[1, max_model_len]``."""
        sigma = math.log(self.p95_tokens / self.median_tokens) / Z95
        q = (np.arange(GRID_POINTS) + 0.5) / GRID_POINTS
        lengths = self.median_tokens * np.exp(sigma * norm.ppf(q))
        clipped: np.ndarray = np.clip(np.ceil(lengths), 1, max_model_len).astype(np.int64)
        return clipped


class Scenario(BaseModel):
    """One load level of the procurement table."""

    model_config = ConfigDict(extra="forbid")

    name: str
    lengths: LengthDistribution
    concurrency: int = Field(ge=1, description="peak sequences active at once")
    duration_s: float = Field(gt=0, description="how long the peak lasts")
    quality_gate: str = Field(description="what output quality must hold to pass")
    cpu_kv_tokens: int = Field(default=0, ge=0, description="CPU KV tier size per replica, tokens")
    stop_conditions: list[str] = Field(
        default_factory=lambda: list(DEFAULT_STOP_CONDITIONS),
        description="conditions that stop the run (written before it starts)",
    )
    label: str = "planning assumption (not measured)"


def default_scenarios(max_model_len: int) -> list[Scenario]:
    """Three illustrative levels, clamped to the model length; replace them with your own data."""

    def clamp(n: int) -> int:
        return max(1, min(n, max_model_len))

    gate = "fixed canary set: facts, format, long-range reference and tool arguments unchanged vs baseline"
    return [
        Scenario(
            name="conservative",
            lengths=LengthDistribution(median_tokens=clamp(1024), p95_tokens=clamp(4096)),
            concurrency=16,
            duration_s=600,
            quality_gate=gate,
        ),
        Scenario(
            name="neutral",
            lengths=LengthDistribution(median_tokens=clamp(2048), p95_tokens=clamp(8192)),
            concurrency=64,
            duration_s=1800,
            quality_gate=gate,
        ),
        Scenario(
            name="high",
            lengths=LengthDistribution(median_tokens=clamp(4096), p95_tokens=clamp(32768)),
            concurrency=256,
            duration_s=3600,
            quality_gate=gate,
            cpu_kv_tokens=clamp(32768) * 64,
        ),
    ]


@dataclass(frozen=True, slots=True)
class LengthConcurrency:
    """How many sequences fit in one replica's pool for a length mix."""

    median_tokens: int
    p95_tokens: int
    blocks_at_median: int
    blocks_at_p95: int
    seqs_at_median: int
    seqs_at_p95: int
    seqs_for_mix: int
    tail_waste_fraction: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "median_tokens": self.median_tokens,
            "p95_tokens": self.p95_tokens,
            "blocks_at_median": self.blocks_at_median,
            "blocks_at_p95": self.blocks_at_p95,
            "seqs_at_median": self.seqs_at_median,
            "seqs_at_p95": self.seqs_at_p95,
            "seqs_for_mix": self.seqs_for_mix,
            "tail_waste_fraction": round(self.tail_waste_fraction, 4),
        }


def _fit(usable: int, blocks: int) -> int:
    return usable // blocks if blocks > 0 else 0


def concurrency_for_lengths(
    plan: PlanResult,
    lengths: np.ndarray,
    *,
    median_tokens: int | None = None,
    p95_tokens: int | None = None,
) -> LengthConcurrency:
    """Sequences that fit at the median, at p95 and for the whole mix (block tails counted).

    ``seqs = (num_blocks - 1) // blocks_for_tokens(length)`` (the null block is not usable);
    the mix figure divides by the mean blocks per sequence. ``median_tokens`` / ``p95_tokens``
    replace the sample's own quantiles when the distribution defines them exactly. Tail waste is the share of
    allocated token slots of full-attention groups left empty in each sequence's last block.
    """
    if lengths.size == 0:
        raise ValueError("lengths: empty length sample")
    usable = plan.num_usable_blocks
    median = median_tokens or int(np.ceil(np.median(lengths)))
    p95 = p95_tokens or int(np.ceil(np.quantile(lengths, 0.95)))
    median, p95 = min(median, plan.max_model_len), min(p95, plan.max_model_len)
    blocks = np.array([plan.blocks_for_tokens(int(n)) for n in lengths], dtype=np.int64)
    mean_blocks = float(blocks.mean())
    full_groups = [g for g in plan.groups if g.kind in ("full", "mla")] or list(plan.groups)
    allocated = 0
    waste = 0
    for g in full_groups:
        slots = np.array(
            [cdiv(int(n), g.block_size) * g.block_size for n in lengths], dtype=np.int64
        )
        allocated += int(slots.sum())
        waste += int((slots - lengths).sum())
    return LengthConcurrency(
        median_tokens=median,
        p95_tokens=p95,
        blocks_at_median=plan.blocks_for_tokens(median),
        blocks_at_p95=plan.blocks_for_tokens(p95),
        seqs_at_median=_fit(usable, plan.blocks_for_tokens(median)),
        seqs_at_p95=_fit(usable, plan.blocks_for_tokens(p95)),
        seqs_for_mix=int(usable // mean_blocks) if mean_blocks > 0 else 0,
        tail_waste_fraction=waste / allocated if allocated else 0.0,
    )


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    scenario: Scenario
    lengths: LengthConcurrency
    per_replica_capacity: int
    replicas_needed: int | None
    gpus_needed: int | None
    headroom_fraction: float | None
    cpu_kv_host_bytes: int
    limited_by: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.model_dump(),
            "lengths": self.lengths.to_dict(),
            "per_replica_capacity": self.per_replica_capacity,
            "limited_by": self.limited_by,
            "replicas_needed": self.replicas_needed,
            "gpus_needed": self.gpus_needed,
            "headroom_fraction": None
            if self.headroom_fraction is None
            else round(self.headroom_fraction, 4),
            "cpu_kv_host_bytes": self.cpu_kv_host_bytes,
            "figure": "computed",
            "label": self.scenario.label,
        }


def cpu_tier_host_bytes(plan: PlanResult, num_tokens: int) -> int:
    """Host memory for a CPU KV tier of ``num_tokens`` per replica: whole blocks x bytes per token of all ranks."""
    if num_tokens <= 0:
        return 0
    return cdiv(num_tokens, plan.block_size) * plan.block_size * plan.kv_bytes_per_token_replica


def evaluate_scenario(plan: PlanResult, scenario: Scenario) -> ScenarioResult:
    """Per-replica capacity at the scenario's p95 length, replicas and GPUs for its peak."""
    dist = scenario.lengths
    lengths = concurrency_for_lengths(
        plan,
        dist.grid(plan.max_model_len),
        median_tokens=dist.median_tokens,
        p95_tokens=dist.p95_tokens,
    )
    by_pool = lengths.seqs_at_p95
    capacity = min(by_pool, plan.max_num_seqs) if plan.fits else 0
    limited_by = "max_num_seqs" if plan.max_num_seqs < by_pool else "KV pool at p95 length"
    if not plan.fits:
        limited_by = "does not start: one max-length request does not fit"
    replicas = cdiv(scenario.concurrency, capacity) if capacity > 0 else None
    gpus = replicas * plan.num_gpus if replicas is not None else None
    headroom = replicas * capacity / scenario.concurrency - 1 if replicas is not None else None
    return ScenarioResult(
        scenario=scenario,
        lengths=lengths,
        per_replica_capacity=capacity,
        replicas_needed=replicas,
        gpus_needed=gpus,
        headroom_fraction=headroom,
        cpu_kv_host_bytes=cpu_tier_host_bytes(plan, scenario.cpu_kv_tokens),
        limited_by=limited_by,
    )
