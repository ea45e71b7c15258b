"""Least-squares fit of the step-time model from measured intervals.

Every measured interval (a prompt's processing time, a run of decode steps) is a sum of engine
steps whose shapes are known, so its duration is *linear* in the five coefficients of
:class:`kvbudget.sim.timing.StepFit`::

    seconds = step_overhead_s            * num_steps
            + prefill_per_token_s        * prefill_tokens
            + prefill_per_pair_s         * prefill_pairs      (sum of n * (c + (n + 1) / 2))
            + decode_per_seq_s           * decode_seq_steps   (sum over steps of the batch size)
            + decode_per_context_token_s * decode_context     (sum over steps and seqs of context)

Repeats of one probe (identical features) are first reduced to their median duration. The
coefficients are found by non-negative least squares (``scipy.optimize.nnls``) on rows
weighted by ``1 / seconds``, i.e. minimising the *relative* error, so that a 5 ms decode step
counts as much as a 1 s prefill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from kvbudget.errors import ConfigError
from kvbudget.sim.timing import StepFit

COEFFICIENTS = (
    "step_overhead_s",
    "prefill_per_token_s",
    "prefill_per_pair_s",
    "decode_per_seq_s",
    "decode_per_context_token_s",
)


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured interval: its step features, its duration and the ranges it covers."""

    kind: Literal["prefill", "decode"]
    num_steps: float
    prefill_tokens: float
    prefill_pairs: float
    decode_seq_steps: float
    decode_context_tokens: float
    seconds: float
    #: largest prompt (new + cached tokens), context per sequence and batch size involved
    prompt_tokens: int
    context_tokens: int
    batch_size: int
    source: str = "engine"

    def features(self) -> tuple[float, float, float, float, float]:
        return (
            self.num_steps,
            self.prefill_tokens,
            self.prefill_pairs,
            self.decode_seq_steps,
            self.decode_context_tokens,
        )


def prefill_observation(
    new_tokens: int, cached_tokens: int, seconds: float, *, n_ubatch: int, source: str = "engine"
) -> Observation:
    """A lone prompt of ``new_tokens`` after ``cached_tokens`` reused ones, in ubatches."""
    if new_tokens < 1 or n_ubatch < 1:
        raise ConfigError(
            f"prefill observation: new_tokens {new_tokens} and n_ubatch {n_ubatch} must be >= 1",
            field="new_tokens",
        )
    pairs = new_tokens * (cached_tokens + (new_tokens + 1) / 2)
    return Observation(
        kind="prefill",
        num_steps=float(math.ceil(new_tokens / n_ubatch)),
        prefill_tokens=float(new_tokens),
        prefill_pairs=pairs,
        decode_seq_steps=0.0,
        decode_context_tokens=0.0,
        seconds=seconds,
        prompt_tokens=new_tokens + cached_tokens,
        context_tokens=new_tokens + cached_tokens,
        batch_size=1,
        source=source,
    )


def decode_observation(
    batch_size: int,
    start_context_tokens: int,
    num_steps: int,
    seconds: float,
    *,
    source: str = "engine",
) -> Observation:
    """``num_steps`` lockstep decode steps of ``batch_size`` sequences, each starting at context
    ``start_context_tokens`` and growing by one token a step; ``seconds`` is the time of one
    sequence's run of steps (they all share the same steps)."""
    if batch_size < 1 or num_steps < 1:
        raise ConfigError(
            f"decode observation: batch_size {batch_size} and num_steps {num_steps} must be >= 1",
            field="num_steps",
        )
    ctx_per_seq = num_steps * start_context_tokens + num_steps * (num_steps - 1) / 2
    return Observation(
        kind="decode",
        num_steps=float(num_steps),
        prefill_tokens=0.0,
        prefill_pairs=0.0,
        decode_seq_steps=float(batch_size * num_steps),
        decode_context_tokens=batch_size * ctx_per_seq,
        seconds=seconds,
        prompt_tokens=start_context_tokens,
        context_tokens=start_context_tokens + num_steps,
        batch_size=batch_size,
        source=source,
    )


@dataclass(frozen=True, slots=True)
class FitResult:
    fit: StepFit
    #: rms_rel, max_rel (relative), rms_s (absolute), per kind; num_points
    residuals: dict[str, float]
    valid_ranges: dict[str, tuple[float, float]]

    def predict_s(self, obs: Observation) -> float:
        coef = [getattr(self.fit, name) for name in COEFFICIENTS]
        return float(np.dot(coef, obs.features()))


def fit_step_model(observations: list[Observation]) -> FitResult:
    """Fit the five non-negative coefficients; needs prefill and decode points."""
    from scipy.optimize import nnls

    kinds = {o.kind for o in observations}
    good = [o for o in observations if o.seconds > 0 and math.isfinite(o.seconds)]
    if len(good) < len(COEFFICIENTS) or kinds != {"prefill", "decode"}:
        raise ConfigError(
            f"calibration fit: got {len(good)} usable points ({sorted(kinds)}), needs at least "
            f"{len(COEFFICIENTS)} with both prefill and decode points; run a longer series",
            field="observations",
        )
    good = _median_of_repeats(good)
    x = np.array([o.features() for o in good], dtype=float)
    y = np.array([o.seconds for o in good], dtype=float)
    weight = 1.0 / y
    # scale columns so nnls is well conditioned (pair counts reach 1e6, step counts 1)
    scale = np.maximum(np.abs(x).max(axis=0), 1e-30)
    coef_scaled, _ = nnls(x / scale * weight[:, None], y * weight)
    coef = coef_scaled / scale
    fit = StepFit(**{name: float(c) for name, c in zip(COEFFICIENTS, coef, strict=True)})
    predicted = x @ coef
    rel = (predicted - y) / y
    residuals: dict[str, float] = {
        "num_points": float(len(good)),
        "rms_rel": float(np.sqrt(np.mean(rel**2))),
        "max_rel": float(np.max(np.abs(rel))),
        "rms_s": float(np.sqrt(np.mean((predicted - y) ** 2))),
    }
    for kind in ("prefill", "decode"):
        mask = np.array([o.kind == kind for o in good])
        residuals[f"{kind}_rms_rel"] = float(np.sqrt(np.mean(rel[mask] ** 2)))
    ranges = {
        "prompt_tokens": _span([o.prompt_tokens for o in good if o.kind == "prefill"]),
        "context_tokens": _span([o.context_tokens for o in good]),
        "batch_size": _span([o.batch_size for o in good if o.kind == "decode"]),
    }
    return FitResult(fit=fit, residuals=residuals, valid_ranges=ranges)


def _median_of_repeats(obs: list[Observation]) -> list[Observation]:
    """Repeated identical probes (same features) become one point at their median duration:
    a shared, busy CPU gives occasional slow outliers that would otherwise drag the fit."""
    groups: dict[tuple[str, tuple[float, ...]], list[Observation]] = {}
    for o in obs:
        groups.setdefault((o.kind, o.features()), []).append(o)
    out: list[Observation] = []
    for group in groups.values():
        seconds = float(np.median([o.seconds for o in group]))
        out.append(replace(group[0], seconds=seconds))
    return out


def _span(values: list[int]) -> tuple[float, float]:
    return (float(min(values)), float(max(values))) if values else (0.0, 0.0)
