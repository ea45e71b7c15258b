"""Which step-time model prices a planned replica: ``--timing-model {auto,measured,roofline}``.

* ``auto`` (default): the measured model (:mod:`kvbudget.sim.measured`, aiconfigurator-core's
  silicon tables) where the GPU, the engine (vLLM), its tables and every op of the model are
  covered; otherwise the roofline, named ``roofline (auto: <one-line reason>)`` so every
  figure says why (not installed: the reason is how to install it).
* ``measured``: the measured model, or a one-line :class:`ConfigError` with the reason.
* ``roofline``: the roofline (:class:`~kvbudget.sim.timing.RooflineTiming`).

A calibrated profile (``--timing-profile``) is chosen before any of these (``fromplan``).
Where no choice is given (accept's sim target, ``serve --gpu``, the audit probe, a scenario
without ``timing_model``), the ``KVBUDGET_TIMING_MODEL`` environment variable gives it, else
``auto``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.errors import ConfigError
from kvbudget.sim.timing import RooflineTiming, StepTimeModel
from kvbudget.spec.resolve import ResolvedModel

TimingModelName = Literal["auto", "measured", "roofline"]
TIMING_MODELS: tuple[str, ...] = ("auto", "measured", "roofline")


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
        kv_dtype=request.kv_dtype,
        engine_version=request.engine_version or plan.engine_version,
        moe_tp=1 if expert_parallel else (ranks if dp > 1 else None),
        moe_ep=ranks if expert_parallel else None,
        attention_dp=dp,
    )
    return compile_measured(case, _cache_dir())


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
    :func:`measured_for`)."""
    if choice is None:
        choice = os.environ.get("KVBUDGET_TIMING_MODEL") or "auto"
        if choice not in TIMING_MODELS:
            raise ConfigError(
                f"KVBUDGET_TIMING_MODEL={choice}: not a timing model; set it to one of "
                f"{', '.join(TIMING_MODELS)} or unset it",
                field="timing_model",
            )
    if choice not in TIMING_MODELS:
        raise ConfigError(
            f"timing_model: {choice!r} is not a timing model; use one of "
            f"{', '.join(TIMING_MODELS)}",
            field="timing_model",
        )
    if choice == "roofline":
        return roofline, roofline.name
    from kvbudget.sim.aic import MeasuredUnavailable

    if plan.engine != "vllm":  # the simulator refuses other engines before this
        reason = f"engine {plan.engine}: aiconfigurator-core's tables are read for vLLM only"
    elif plan.pp > 1:
        reason = f"pp {plan.pp}: the measured model prices one pipeline stage only"
    else:
        try:
            timing = measured_for(request, plan, resolved, expert_parallel=expert_parallel)
            return timing, timing.name
        except MeasuredUnavailable as exc:
            reason = str(exc)
    if choice == "measured":
        raise ConfigError(
            f"--timing-model measured: {reason}; use --timing-model roofline or auto",
            field="timing_model",
        )
    name = f"roofline (auto: {reason})"
    roofline.name = name
    return roofline, name
