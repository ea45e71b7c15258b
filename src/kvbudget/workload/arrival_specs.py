"""Pydantic arrival specifications (the ``arrivals:`` block of a workload YAML).

Each model is selected by ``kind`` and turns into times with
``times(rng, num_requests, duration_s)``; the maths lives in :mod:`.arrivals`.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from kvbudget.errors import ConfigError
from kvbudget.safety.limits import MAX_RATE_PER_S, MIN_RATE_PER_S
from kvbudget.workload import arrivals as arr


class _ArrivalBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @property
    def closed_loop(self) -> bool:
        return False

    def times(
        self, rng: np.random.Generator, num_requests: int | None, duration_s: float | None
    ) -> np.ndarray:
        raise NotImplementedError


class PoissonArrivals(_ArrivalBase):
    kind: Literal["poisson"] = "poisson"
    rate_per_s: float = Field(ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S)

    def times(
        self, rng: np.random.Generator, num_requests: int | None, duration_s: float | None
    ) -> np.ndarray:
        return arr.poisson_arrivals(
            rng, self.rate_per_s, num_requests=num_requests, duration_s=duration_s
        )


class GammaArrivals(_ArrivalBase):
    kind: Literal["gamma"] = "gamma"
    rate_per_s: float = Field(ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S)
    cv: float = Field(gt=0, description="coefficient of variation of the gaps (burstiness)")

    def times(
        self, rng: np.random.Generator, num_requests: int | None, duration_s: float | None
    ) -> np.ndarray:
        return arr.gamma_arrivals(
            rng, self.rate_per_s, self.cv, num_requests=num_requests, duration_s=duration_s
        )


class ConstantArrivals(_ArrivalBase):
    kind: Literal["constant"] = "constant"
    rate_per_s: float = Field(ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S)

    def times(
        self, rng: np.random.Generator, num_requests: int | None, duration_s: float | None
    ) -> np.ndarray:
        return arr.constant_arrivals(
            self.rate_per_s, num_requests=num_requests, duration_s=duration_s
        )


class BurstArrivals(_ArrivalBase):
    kind: Literal["burst"] = "burst"
    at_s: float = Field(0.0, ge=0)

    def times(
        self, rng: np.random.Generator, num_requests: int | None, duration_s: float | None
    ) -> np.ndarray:
        if num_requests is None:
            raise ConfigError(
                "arrivals.kind=burst sends every request at once and needs num_requests; "
                "set num_requests",
                field="num_requests",
            )
        return arr.burst_arrivals(num_requests, at_s=self.at_s)


class RampStage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rate_per_s: float = Field(ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S)
    duration_s: float = Field(gt=0)


class RampArrivals(_ArrivalBase):
    kind: Literal["ramp"] = "ramp"
    stages: list[RampStage] = Field(min_length=1)
    process: Literal["poisson", "constant"] = "poisson"

    def times(
        self, rng: np.random.Generator, num_requests: int | None, duration_s: float | None
    ) -> np.ndarray:
        stages = [(s.rate_per_s, s.duration_s) for s in self.stages]
        out = arr.ramp_arrivals(rng, stages, process=self.process, num_requests=num_requests)
        return out if duration_s is None else out[out < duration_s]


class TraceArrivals(_ArrivalBase):
    kind: Literal["trace"] = "trace"
    timestamps_s: list[float] = Field(min_length=1)
    speedup: float = Field(1.0, gt=0)

    def times(
        self, rng: np.random.Generator, num_requests: int | None, duration_s: float | None
    ) -> np.ndarray:
        return arr.trace_arrivals(
            self.timestamps_s,
            speedup=self.speedup,
            num_requests=num_requests,
            duration_s=duration_s,
        )


class ClosedLoopArrivals(_ArrivalBase):
    """Closed loop: the runner keeps ``concurrency`` requests in flight; arrivals are 0."""

    kind: Literal["closed"] = "closed"
    concurrency: int = Field(ge=1)

    @property
    def closed_loop(self) -> bool:
        return True

    def times(
        self, rng: np.random.Generator, num_requests: int | None, duration_s: float | None
    ) -> np.ndarray:
        if num_requests is None:
            raise ConfigError(
                "arrivals.kind=closed plans a fixed list of requests and needs num_requests "
                "(the runner also stops at duration_s); set num_requests, e.g. "
                f"{self.concurrency * 50}",
                field="num_requests",
            )
        return np.zeros(num_requests, dtype=np.float64)


ArrivalSpec = Annotated[
    PoissonArrivals
    | GammaArrivals
    | ConstantArrivals
    | BurstArrivals
    | RampArrivals
    | TraceArrivals
    | ClosedLoopArrivals,
    Field(discriminator="kind"),
]
