"""Routes on a base URL that carries a query (``?api-version=...`` gateways, or a key): the
query stays after each route instead of the route being appended to the query."""

from __future__ import annotations

import pytest

from kvbudget.load.client import OpenAIClient
from kvbudget.load.urls import api_root


@pytest.mark.parametrize(
    ("base", "root", "completions"),
    [
        ("http://h:8000", "http://h:8000", "http://h:8000/v1/completions"),
        ("http://h:8000/v1/", "http://h:8000", "http://h:8000/v1/completions"),
        (
            "http://h/v1?api_key=K",
            "http://h",
            "http://h/v1/completions?api_key=K",
        ),
        (
            "https://gw/openai/v1?api-version=2024-10-21",
            "https://gw/openai",
            "https://gw/openai/v1/completions?api-version=2024-10-21",
        ),
    ],
)
def test_routes_keep_the_query_after_the_path(base: str, root: str, completions: str) -> None:
    assert api_root(base) == root
    client = OpenAIClient(base, concurrency=1, timeout_s=1.0)
    assert client.route("/v1/completions") == completions
