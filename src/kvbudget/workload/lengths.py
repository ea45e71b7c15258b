"""Token-length distributions for prompts (input) and completions (output).

Each distribution is a pydantic model (``extra="forbid"``, selected by ``kind``) with
``sample(rng, n) -> int64 array``. Draws are rounded to the nearest integer and clipped to
``[min_tokens, max_tokens]`` (``max_tokens`` optional) — clipping piles the clipped mass on
the bounds, it does not redraw.

- ``fixed``: ``value`` every time.
- ``uniform``: integers ``low .. high`` inclusive, equally likely.
- ``normal``: ``mean``, ``std``.
- ``lognormal``: ``median`` and ``sigma`` (standard deviation of ``ln(length)``):
  ``ln L ~ Normal(ln median, sigma)``; mean = ``median * exp(sigma**2 / 2)``.
- ``empirical``: a histogram: ``edges`` (n+1 increasing token counts) and ``weights`` (n,
  non-negative, any scale); a bin is picked by weight, then an integer uniformly in
  ``[edges[i], edges[i+1])``. With ``values`` instead of ``edges`` the histogram is discrete
  (each value drawn with its weight).
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvbudget.errors import ConfigError
from kvbudget.workload.draws import Stage, run_stages


class _LengthBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min_tokens: int = Field(1, ge=0, description="lower clip bound (tokens)")
    max_tokens: int | None = Field(None, ge=1, description="upper clip bound (tokens)")

    @model_validator(mode="after")
    def _bounds(self) -> _LengthBase:
        if self.max_tokens is not None and self.max_tokens < self.min_tokens:
            raise ValueError(
                f"max_tokens={self.max_tokens} is below min_tokens={self.min_tokens}; "
                "raise max_tokens or lower min_tokens"
            )
        return self

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lengths (int64), rounded and clipped to the bounds."""
        if n < 0:
            raise ConfigError(f"cannot sample n={n} lengths; n must be >= 0", field="n")
        return self.finish(self._raw(rng, n))

    def finish(self, raw: np.ndarray) -> np.ndarray:
        """Raw draws to lengths: rounded, clipped to the bounds, int64 (elementwise)."""
        rounded = np.rint(np.asarray(raw, dtype=np.float64))
        upper = np.inf if self.max_tokens is None else float(self.max_tokens)
        return np.clip(rounded, float(self.min_tokens), upper).astype(np.int64)

    def stages(self) -> tuple[Stage, ...]:
        """``_raw`` as the separate whole-array draws it makes, in order (streamed generation:
        :class:`kvbudget.workload.draws.Column`); the last stage gives the raw values."""
        return (lambda rng, n, _: self._raw(rng, n),)

    def mean_tokens(self) -> float:
        """Mean of the distribution before rounding and clipping."""
        raise NotImplementedError


class FixedLength(_LengthBase):
    kind: Literal["fixed"] = "fixed"
    value: int = Field(ge=0)

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.float64)

    def mean_tokens(self) -> float:
        return float(self.value)


class UniformLength(_LengthBase):
    kind: Literal["uniform"] = "uniform"
    low: int = Field(ge=0)
    high: int = Field(ge=0)

    @model_validator(mode="after")
    def _order(self) -> UniformLength:
        if self.high < self.low:
            raise ValueError(f"high={self.high} is below low={self.low}; swap them")
        return self

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.low, self.high + 1, size=n).astype(np.float64)

    def mean_tokens(self) -> float:
        return (self.low + self.high) / 2.0


class NormalLength(_LengthBase):
    kind: Literal["normal"] = "normal"
    mean: float = Field(ge=0)
    std: float = Field(ge=0)

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.normal(self.mean, self.std, size=n)

    def mean_tokens(self) -> float:
        return self.mean


class LognormalLength(_LengthBase):
    kind: Literal["lognormal"] = "lognormal"
    median: float = Field(gt=0)
    sigma: float = Field(ge=0)

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.lognormal(np.log(self.median), self.sigma, size=n)

    def mean_tokens(self) -> float:
        return float(self.median * np.exp(self.sigma**2 / 2.0))


class EmpiricalLength(_LengthBase):
    kind: Literal["empirical"] = "empirical"
    weights: list[float] = Field(min_length=1)
    edges: list[int] | None = None
    values: list[int] | None = None

    @model_validator(mode="after")
    def _shape(self) -> EmpiricalLength:
        if (self.edges is None) == (self.values is None):
            raise ValueError("give exactly one of edges (histogram bins) or values (discrete)")
        if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
            raise ValueError("weights must be >= 0 with a positive sum")
        if self.edges is not None:
            if len(self.edges) != len(self.weights) + 1:
                raise ValueError(
                    f"edges has {len(self.edges)} entries; it needs len(weights)+1 = "
                    f"{len(self.weights) + 1}"
                )
            if any(b <= a for a, b in zip(self.edges, self.edges[1:], strict=False)):
                raise ValueError("edges must be strictly increasing token counts")
        elif self.values is not None and len(self.values) != len(self.weights):
            raise ValueError(
                f"values has {len(self.values)} entries but weights has {len(self.weights)}"
            )
        return self

    def _probabilities(self) -> np.ndarray:
        w = np.asarray(self.weights, dtype=np.float64)
        return np.asarray(w / w.sum(), dtype=np.float64)

    def _raw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return run_stages(self.stages(), [rng] * 2, n)

    def stages(self) -> tuple[Stage, ...]:
        """A bin (or value) for every element, then the value inside each bin."""
        p = self._probabilities()

        def bins(rng: np.random.Generator, n: int, _: list[np.ndarray]) -> np.ndarray:
            return rng.choice(p.size, size=n, p=p)

        if self.values is not None:
            values = np.asarray(self.values, dtype=np.float64)

            def pick(rng: np.random.Generator, n: int, outs: list[np.ndarray]) -> np.ndarray:
                return np.asarray(values[outs[0]], dtype=np.float64)

            return (bins, pick)
        assert self.edges is not None
        edges = np.asarray(self.edges, dtype=np.int64)

        def inside(rng: np.random.Generator, n: int, outs: list[np.ndarray]) -> np.ndarray:
            idx = outs[0]
            return np.asarray(rng.integers(edges[idx], edges[idx + 1]), dtype=np.float64)

        return (bins, inside)

    def mean_tokens(self) -> float:
        p = self._probabilities()
        if self.values is not None:
            return float(np.dot(p, np.asarray(self.values, dtype=np.float64)))
        assert self.edges is not None
        e = np.asarray(self.edges, dtype=np.float64)
        return float(np.dot(p, (e[:-1] + e[1:] - 1.0) / 2.0))


LengthSpec = Annotated[
    FixedLength | UniformLength | NormalLength | LognormalLength | EmpiricalLength,
    Field(discriminator="kind"),
]
