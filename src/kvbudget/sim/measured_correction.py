"""The measured model corrected by a real engine's run (``kvbudget calibrate`` points).

``kvbudget calibrate`` measures, on the engine the user runs, cold prompts (``prefill_points``:
tokens, seconds for the whole prompt) and lockstep decode steps (``decode_points``: batch,
total context of the batch, seconds a step). This module prices the same steps with the
measured model (aiconfigurator-core's silicon tables, :mod:`kvbudget.sim.measured`) and derives
one multiplicative factor per phase:

* a cold prompt of ``L`` tokens is ``ceil(L / S)`` prefill steps of ``S`` tokens (the engine's
  ``max_num_batched_tokens`` read by calibrate, else 2048, vLLM's CPU default; the last step
  the remainder), each after the tokens before it;
* a decode point is one decode step of ``batch`` sequences attending ``context`` tokens;
* the factor ``f`` minimises the squared *relative* error ``sum ((f p_i - y_i) / y_i)^2`` of the
  priced ``p_i`` against the measured ``y_i`` (the weighting of ``calibrate``'s own fit, so a
  5 ms step counts as much as a 1 s prompt): ``f = sum r_i / sum r_i^2`` with ``r_i = p_i / y_i``.

:class:`CorrectedTiming` multiplies every step that computes prompt tokens (prefill and mixed
steps) by the prefill factor and every decode-only step by the decode factor.

aiconfigurator-core 0.12.0 has an online correction of its own
(``sdk/rust_engine_step.py`` ``RustForwardPassPerfModel.tune_with_fpms``): per-bucket factors
over a grid of prefill tokens / decode requests x KV tokens, learned from observed forward-pass
wall times, clamped to [0.5, 2] by default. It is not used here: its factors live inside the
Rust object (only their min / max / average can be read back, so they cannot be stored in a
profile), and it corrects its own forward-pass model, not the ``AicEngine`` step composition
kvbudget prices its scheduler's steps with. The two factors here are the one-bucket case of the
same idea, fitted to calibrate's isolated prefill and decode probes (which have no mixed
steps), and stored with their provenance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kvbudget.errors import ConfigError
from kvbudget.sim.roofline import BatchShape
from kvbudget.sim.timing import CalibrationProfile, MeasuredCorrection, StepTimeModel

#: tokens of a prefill step when the profile does not say (vLLM 0.32's CPU default)
DEFAULT_STEP_TOKENS = 2048

METHOD = (
    "one factor per phase minimising the squared relative error of the measured model's "
    "prices against the profile's points (prefill: cold prompts in max_num_batched_tokens "
    "steps; decode: one step each); prefill factor on every step with prompt tokens, decode "
    "factor on decode-only steps"
)


def step_tokens(profile: CalibrationProfile) -> int:
    """Tokens one prefill step computes on the calibrated engine."""
    settings = profile.engine_settings
    value = settings.get("max_num_batched_tokens") or settings.get("n_ubatch")
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 1:
        return DEFAULT_STEP_TOKENS
    return int(value)


def price_prefill_point(timing: StepTimeModel, tokens: int, step: int) -> float:
    """Seconds the model gives a cold prompt of ``tokens`` in steps of ``step`` tokens."""
    total, done = 0.0, 0
    while done < tokens:
        n = min(step, tokens - done)
        total += timing.prefill_time_s(n, done)
        done += n
    return total


def _factor(priced: Sequence[float], measured: Sequence[float]) -> float:
    ratios = [p / y for p, y in zip(priced, measured, strict=True)]
    return sum(ratios) / sum(r * r for r in ratios)


def _rms_rel(factor: float, priced: Sequence[float], measured: Sequence[float]) -> float:
    rel = [(factor * p - y) / y for p, y in zip(priced, measured, strict=True)]
    return math.sqrt(sum(r * r for r in rel) / len(rel))


def derive_correction(
    timing: StepTimeModel,
    profile: CalibrationProfile,
    *,
    measured_model: str,
    step: int | None = None,
) -> MeasuredCorrection:
    """The two factors of ``profile``'s points against ``timing`` (module docstring); ``step``:
    the tokens of one prefill step calibrate counted the prompts in (``None``: read from the
    profile, :func:`step_tokens`)."""
    step = step or step_tokens(profile)
    pre = [(t, s) for t, s in profile.prefill_points if t > 0 and s > 0]
    dec = [(b, c, s) for b, c, s in profile.decode_points if b > 0 and s > 0]
    if not pre or not dec:
        raise ConfigError(
            f"timing profile {profile.name}: needs positive prefill and decode points to "
            "correct the measured model; recalibrate",
            field="timing_profile",
        )
    pre_priced = [price_prefill_point(timing, t, step) for t, _ in pre]
    pre_measured = [s for _, s in pre]
    dec_priced = [timing.decode_time_s(b, c) for b, c, _ in dec]
    dec_measured = [s for _, _, s in dec]
    if min(pre_priced) <= 0 or min(dec_priced) <= 0:
        raise ConfigError(
            f"timing profile {profile.name}: the measured model prices some of its points at "
            "0 s; it cannot be corrected from them",
            field="timing_profile",
        )
    fp = _factor(pre_priced, pre_measured)
    fd = _factor(dec_priced, dec_measured)
    return MeasuredCorrection(
        measured_model=measured_model,
        profile=profile.name,
        engine=profile.engine,
        hardware=profile.hardware or profile.gpu,
        prefill_factor=fp,
        decode_factor=fd,
        num_prefill_points=len(pre),
        num_decode_points=len(dec),
        prefill_step_tokens=step,
        prefill_rms_rel_before=_rms_rel(1.0, pre_priced, pre_measured),
        prefill_rms_rel_after=_rms_rel(fp, pre_priced, pre_measured),
        decode_rms_rel_before=_rms_rel(1.0, dec_priced, dec_measured),
        decode_rms_rel_after=_rms_rel(fd, dec_priced, dec_measured),
        method=METHOD,
    )


class CorrectedTiming:
    """A step-time model whose prefill-bearing and decode-only steps are scaled."""

    def __init__(self, timing: StepTimeModel, correction: MeasuredCorrection) -> None:
        self.timing = timing
        self.correction = correction
        self.prefill_factor = correction.prefill_factor
        self.decode_factor = correction.decode_factor
        self.name = f"{timing.name} corrected by {correction.profile}"

    def step_time_s(self, shape: BatchShape) -> float:
        factor = self.prefill_factor if shape.num_prefill_tokens else self.decode_factor
        return self.timing.step_time_s(shape) * factor

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float:
        return self.timing.decode_time_s(num_seqs, context_tokens) * self.decode_factor

    def prefill_time_s(self, num_tokens: int, context_tokens: int = 0) -> float:
        return self.timing.prefill_time_s(num_tokens, context_tokens) * self.prefill_factor


def corrected(
    timing: StepTimeModel, profile: CalibrationProfile
) -> tuple[CorrectedTiming, list[str]]:
    """``timing`` corrected by ``profile``: its stored correction when that was derived against
    this very measured model (same label), else one derived now from its points; plus notes."""
    stored = profile.measured_correction
    if stored is not None and stored.measured_model == timing.name:
        return CorrectedTiming(timing, stored), []
    derived = derive_correction(timing, profile, measured_model=timing.name)
    why = (
        f"its stored correction is for {stored.measured_model}, not this model"
        if stored is not None
        else "it carries no stored correction (kvbudget calibrate --gpu)"
    )
    note = (
        f"profile {profile.name}: {why}; factors derived from its points: prefill x"
        f"{derived.prefill_factor:.3g}, decode x{derived.decode_factor:.3g}"
    )
    return CorrectedTiming(timing, derived), [note]
