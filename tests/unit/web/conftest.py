"""Shared fixtures of the web API tests: one TestClient per module and a JSON POST helper."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from kvbudget.web.app import create_app


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(), base_url="http://127.0.0.1:8765")


def post_ok(client: TestClient, path: str, **body: Any) -> dict[str, Any]:
    """POST ``body`` as JSON and require HTTP 200; the parsed answer."""
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data
