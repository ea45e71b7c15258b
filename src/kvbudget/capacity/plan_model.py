"""The model a plan is for: the request's ``--model`` resolved into layers (CALC's resolver)."""

from __future__ import annotations

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec


def resolve_spec(request: PlanRequest, spec: ModelSpec | None) -> ModelSpec:
    """``spec`` when given, else ``request.model`` resolved into layers, or a one-line refusal."""
    if spec is not None:
        return spec
    from kvbudget.spec.resolve import resolve_model  # CALC's resolver (L0)

    resolved = resolve_model(request.model)
    found: ModelSpec | None = getattr(resolved, "spec", None)
    if found is None:
        raise ConfigError(
            f"model: {request.model!r} could not be resolved into layers "
            f"({getattr(resolved, 'status', 'unknown')}); see 'kvbudget calc --model {request.model}'",
            field="model",
        )
    return found
