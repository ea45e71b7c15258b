"""Schemathesis against the web API's own OpenAPI document (seeded, bounded).

Every generated request, valid or not, gets an answer below 500, and every refusal has the
documented shape ``{"error": "Kind: ...", "field": ...}`` (never FastAPI's ``{"detail": ...}``).
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings

from kvbudget.web.app import create_app

# schemathesis's ASGI client sends Host: testserver; the app answers only the names it is told
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(extra_hosts=["testserver"]))


@schema.parametrize()
@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_answer_is_below_500_and_errors_have_the_documented_shape(case: Any) -> None:
    response = case.call()
    assert response.status_code < 500, response.text[:300]
    if response.status_code >= 400:
        body = response.json()
        assert isinstance(body, dict) and isinstance(body.get("error"), str), response.text[:300]
        assert set(body) <= {"error", "field"}, body
        assert "\n" not in body["error"]
        assert "InternalError" not in body["error"]
