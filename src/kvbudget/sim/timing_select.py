"""Which step-time model prices a planned replica: a registry of timing models by name.

Every timing model is registered here (:func:`register_timing_model`) as a name and a
:class:`TimingBuilder`: given a :class:`TimingContext` (the plan request, the plan, the resolved
model, the replica's roofline and the options), a builder returns a :class:`BuiltTiming` (the
step-time model and its label) or a one-line reason it does not apply. The registered models:

* ``measured``: the measured model (:mod:`kvbudget.sim.measured`, aiconfigurator-core's
  silicon tables) where the GPU, the engine (vLLM), its tables and every op of the model are
  covered; chosen by name, a reason is a one-line :class:`ConfigError`.
* ``roofline``: the roofline (:class:`~kvbudget.sim.timing.RooflineTiming`).
* ``calibrated``: a calibrated profile (``--timing-profile``); not chosen by name: a profile
  replaces the choice (``fromplan``), except with ``measured`` chosen by name: then the profile
  corrects the measured model (:mod:`kvbudget.sim.measured_correction`).

``auto`` (the default) is not a model but the first of :data:`AUTO_ORDER` that applies
(``measured``, then ``roofline``), the roofline named ``roofline (auto: <one-line reason>)``
so every figure says why the measured model did not price it (not installed: the reason is
how to install it). ``--timing-model`` and the scenario's ``timing_model`` take ``auto`` and
the models chosen by name (:func:`timing_model_names`). Where no choice is given (accept's sim
target, ``serve --gpu``, the audit probe, a scenario without ``timing_model``), the
``KVBUDGET_TIMING_MODEL`` environment variable gives it, else ``auto``.

This module imports nothing heavy at import time (the CLI reads :func:`timing_model_names`
for ``--timing-model``'s choices); builders import what they price with when called.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kvbudget.engine_name import VLLM
from kvbudget.errors import ConfigError

if TYPE_CHECKING:
    from kvbudget.capacity.plan_types import PlanRequest, PlanResult
    from kvbudget.sim.timing import CalibrationProfile, RooflineTiming, StepTimeModel
    from kvbudget.spec.resolve import ResolvedModel

#: the choice that is no model: the first of these that applies
AUTO = "auto"
AUTO_ORDER: tuple[str, ...] = ("measured", "roofline")


@dataclass(frozen=True, slots=True)
class TimingContext:
    """What a timing model is built from: one planned replica and the options given."""

    request: PlanRequest
    plan: PlanResult
    resolved: ResolvedModel
    #: the replica's roofline (built first, whichever model is chosen: a GPU without roofline
    #: inputs is refused the same way for every model)
    roofline: RooflineTiming | None = None
    #: vLLM ``--enable-expert-parallel`` (:func:`measured_for`)
    expert_parallel: bool = False
    #: ``--timing-profile``: the calibrated profile
    profile: CalibrationProfile | None = None


@dataclass(frozen=True, slots=True)
class BuiltTiming:
    """A step-time model and the label every figure it prices carries."""

    timing: StepTimeModel
    label: str


class TimingBuilder(Protocol):
    """The step-price protocol: a step-time model for this replica, or a one-line reason it
    does not apply (``str``)."""

    def __call__(self, context: TimingContext) -> BuiltTiming | str: ...


@dataclass(frozen=True, slots=True)
class TimingModelEntry:
    """One registered timing model."""

    name: str
    build: TimingBuilder
    #: offered by ``--timing-model`` / scenario ``timing_model`` (``calibrated`` is chosen by
    #: giving a profile instead)
    by_name: bool = True


_REGISTRY: dict[str, TimingModelEntry] = {}


def register_timing_model(name: str, build: TimingBuilder, *, by_name: bool = True) -> None:
    """Register ``build`` as the timing model ``name`` (a new name; ``auto`` is reserved)."""
    if name == AUTO:
        raise ValueError(
            f"timing model {name!r} is reserved: the first of {AUTO_ORDER} that applies"
        )
    if name in _REGISTRY:
        raise ValueError(f"timing model {name!r} is already registered")
    _REGISTRY[name] = TimingModelEntry(name, build, by_name)


def timing_model_names() -> tuple[str, ...]:
    """The choices of ``--timing-model``: ``auto`` and the models chosen by name."""
    return (AUTO, *(entry.name for entry in _REGISTRY.values() if entry.by_name))


def build_timing(name: str, context: TimingContext) -> BuiltTiming | str:
    """The registered model ``name`` built for ``context``, or the reason it does not apply."""
    return _REGISTRY[name].build(context)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kvbudget" / "aic-configs"


def measured_for(
    request: PlanRequest,
    plan: PlanResult,
    resolved: ResolvedModel,
    *,
    expert_parallel: bool = False,
) -> StepTimeModel:
    """The measured timing of this plan, or ``MeasuredUnavailable`` (kvbudget.sim.aic).

    ``expert_parallel`` (vLLM ``--enable-expert-parallel``): the MoE layers' experts are split
    whole over the ``tp`` ranks (``moe_tp 1, moe_ep tp``, as vLLM's ``FusedMoEParallelConfig``
    makes them for one data-parallel rank) and priced by the tables' expert-parallel MoE kernels
    and all-to-all; without it the experts are tensor-sharded (``moe_tp tp, moe_ep 1``).
    ``request.data_parallel_size`` ``dp`` > 1 on a MoE model: the MoE layers span all ``dp x
    tp`` ranks (``FusedMoEParallelConfig.make`` flattens them) and each engine's step is priced
    as aiconfigurator-core prices attention data parallel (``attention_dp_size``: attention on
    the engine's own batch, the MoE layer on every engine's tokens, all engines equally loaded).
    """
    from kvbudget.sim.aic import MeasuredCase, compile_measured

    raw = resolved.source.raw if resolved.source is not None else {}
    # vLLM ignores the flag for a dense model (no FusedMoE layer to split)
    moe = resolved.spec is not None and bool(resolved.spec.num_experts)
    dp = request.data_parallel_size if moe else 1  # dense engines step on their own
    ranks = plan.tp * dp
    expert_parallel = expert_parallel and moe and ranks > 1
    case = MeasuredCase(
        model_id=plan.model_id,
        config=raw,
        gpu=plan.gpu.id,
        tp=plan.tp,
        quantization=request.quantization,
        # the dtype the plan stores (--kv-cache-dtype auto resolved: a ModelOpt checkpoint's
        # KV algo, DeepSeek-V4's fp8_ds_mla), not the flag as typed
        kv_dtype=plan.kv_dtype,
        engine_version=request.engine_version or plan.engine_version,
        moe_tp=1 if expert_parallel else (ranks if dp > 1 else None),
        moe_ep=ranks if expert_parallel else None,
        attention_dp=dp,
    )
    return compile_measured(case, _cache_dir())


def _measured(context: TimingContext) -> BuiltTiming | str:
    from kvbudget.sim.aic import MeasuredUnavailable

    plan = context.plan
    if plan.engine != VLLM:  # the simulator refuses other engines before this
        return f"engine {plan.engine}: aiconfigurator-core's tables are read for vLLM only"
    if plan.pp > 1:
        return f"pp {plan.pp}: the measured model prices one pipeline stage only"
    try:
        timing = measured_for(
            context.request, plan, context.resolved, expert_parallel=context.expert_parallel
        )
    except MeasuredUnavailable as exc:
        return str(exc)
    return BuiltTiming(timing, timing.name)


def _roofline(context: TimingContext) -> BuiltTiming | str:
    if context.roofline is None:
        return "no roofline: the plan has no GPU to price steps with"
    return BuiltTiming(context.roofline, context.roofline.name)


def _calibrated(context: TimingContext) -> BuiltTiming | str:
    from kvbudget.sim.timing import CalibratedTiming

    profile = context.profile
    if profile is None:
        return "no calibrated profile given (--timing-profile)"
    label = f"calibrated ({profile.name}: {profile.engine} on {profile.gpu})"
    return BuiltTiming(CalibratedTiming(profile), label)


register_timing_model("measured", _measured)
register_timing_model("roofline", _roofline)
register_timing_model("calibrated", _calibrated, by_name=False)


def resolve_timing_choice(choice: str | None) -> str:
    """``choice`` if it names ``auto`` or a model chosen by name (``None``: the
    ``KVBUDGET_TIMING_MODEL`` environment variable, else ``auto``); a one-line ConfigError
    otherwise."""
    names = timing_model_names()
    if choice is None:
        choice = os.environ.get("KVBUDGET_TIMING_MODEL") or AUTO
        if choice not in names:
            raise ConfigError(
                f"KVBUDGET_TIMING_MODEL={choice}: not a timing model; set it to one of "
                f"{', '.join(names)} or unset it",
                field="timing_model",
            )
    if choice not in names:
        raise ConfigError(
            f"timing_model: {choice!r} is not a timing model; use one of {', '.join(names)}",
            field="timing_model",
        )
    return choice


def choose_timing(
    choice: str | None,
    request: PlanRequest,
    plan: PlanResult,
    resolved: ResolvedModel,
    roofline: RooflineTiming,
    *,
    expert_parallel: bool = False,
) -> tuple[StepTimeModel, str]:
    """``(timing, name)`` for ``choice`` (module docstring; ``expert_parallel``:
    :func:`measured_for`): a registry lookup, ``auto`` the first of :data:`AUTO_ORDER` that
    applies."""
    choice = resolve_timing_choice(choice)
    context = TimingContext(
        request, plan, resolved, roofline=roofline, expert_parallel=expert_parallel
    )
    if choice != AUTO:
        built = build_timing(choice, context)
        if isinstance(built, str):
            raise ConfigError(
                f"--timing-model {choice}: {built}; use --timing-model roofline or auto",
                field="timing_model",
            )
        return built.timing, built.label
    reasons: list[str] = []
    for name in AUTO_ORDER:
        built = build_timing(name, context)
        if isinstance(built, str):
            reasons.append(built)
            continue
        if reasons:  # a fallback says why the earlier models did not price it
            built.timing.name = f"{name} (auto: {'; '.join(reasons)})"
            return built.timing, built.timing.name
        return built.timing, built.label
    raise ConfigError(f"timing_model auto: no timing model applies: {'; '.join(reasons)}")
