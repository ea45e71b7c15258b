"""An OpenAI-compatible server's URLs: the root of a base URL given with or without ``/v1``, each
route on it with the base URL's query kept, and the two generation endpoints' paths."""

from __future__ import annotations

ENDPOINT_PATHS: dict[str, str] = {
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}


def api_root(url: str) -> str:
    """The server root of an OpenAI-compatible URL, with or without the OpenAI SDK's ``/v1``.

    ``http://h:8000``, ``http://h:8000/``, ``http://h:8000/v1`` and ``http://h:8000/v1/`` (and a
    full ``.../v1/completions`` or ``.../v1/chat/completions``) all give ``http://h:8000``:
    routes are added to the root (``/v1/completions``, and ``/tokenize``, ``/metrics``,
    ``/version`` which vLLM serves outside ``/v1``).
    """
    root = url.strip().split("?", 1)[0].split("#", 1)[0].rstrip("/")
    for suffix in ("/v1/chat/completions", "/v1/completions", "/v1"):
        if root.endswith(suffix):
            return root.removesuffix(suffix)
    return root


def url_query(url: str) -> str:
    """The query string of ``url`` (``api-version=...`` for some gateways), kept on every route."""
    return url.strip().split("#", 1)[0].partition("?")[2]


def base_with_query(url: str) -> str:
    """:func:`api_root` with ``url``'s query kept after it (``http://h?api-version=1``)."""
    query = url_query(url)
    return f"{api_root(url)}?{query}" if query else api_root(url)


def route_url(base_url: str, path: str) -> str:
    """``path`` on ``base_url``'s root, the base URL's query after it."""
    query = url_query(base_url)
    return f"{api_root(base_url)}{path}?{query}" if query else f"{api_root(base_url)}{path}"
