"""A plan validator's error that names the field below its own location.

A model validator checks several fields at once; :func:`field_error` names the one at fault
(``ttft_s``, ``comparisons.0.cells``), relative to the validated model, and
:func:`kvbudget.accept.plan.planfile.format_validation_error` appends it to the error's location.
"""

from __future__ import annotations

from pydantic_core import PydanticCustomError

#: the pydantic error type of :func:`field_error`
PLAN_FIELD_ERROR = "plan_field"


def field_error(field: str, text: str) -> PydanticCustomError:
    """``field: text`` once formatted; raise it from a validator."""
    return PydanticCustomError(PLAN_FIELD_ERROR, "{text}", {"field": field, "text": text})
