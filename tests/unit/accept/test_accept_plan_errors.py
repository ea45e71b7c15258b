"""A validator names the field below its own location with a typed error, not a text prefix."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError, model_validator

from kvbudget.accept.plan.errors import field_error
from kvbudget.accept.plan.planfile import format_validation_error


class Inner(BaseModel):
    low: int
    high: int

    @model_validator(mode="after")
    def _check(self) -> Inner:
        if self.high < self.low:
            raise field_error("high", f"must be >= low (got {self.high} < {self.low})")
        if self.low < 0:
            raise ValueError("@low: a message that only looks like the old convention")
        return self


class Outer(BaseModel):
    tier: Inner


def test_field_error_is_appended_to_the_location() -> None:
    with pytest.raises(ValidationError) as info:
        Outer.model_validate({"tier": {"low": 5, "high": 3}})
    assert format_validation_error(info.value) == "tier.high: must be >= low (got 3 < 5)"


def test_text_starting_with_at_is_not_read_as_a_field() -> None:
    with pytest.raises(ValidationError) as info:
        Outer.model_validate({"tier": {"low": -1, "high": 3}})
    line = format_validation_error(info.value)
    assert line.startswith("tier: ") and "@low: a message" in line
