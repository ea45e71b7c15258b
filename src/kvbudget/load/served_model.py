"""The model name a load run sends, checked against the server's ``GET /v1/models``, and the API
key read from the environment."""

from __future__ import annotations

from typing import Any

from kvbudget.errors import TargetError
from kvbudget.load.config import RunConfig
from kvbudget.load.urls import route_url
from kvbudget.safety.redact import secret_from_env


def read_api_key(cfg: RunConfig) -> str | None:
    """The API key from the environment variable named in the config (never stored)."""
    return secret_from_env(cfg.api_key_env, flag="--api-key-env")


def served_model(cfg: RunConfig, ident: dict[str, Any]) -> str:
    """:func:`check_served_model` for a load run."""
    return check_served_model(
        cfg.base_url, cfg.model, ident, connect_timeout_s=cfg.connect_timeout_s
    )


def check_served_model(
    base_url: str, model: str | None, ident: dict[str, Any], *, connect_timeout_s: float = 10.0
) -> str:
    """The model name to send, checked against ``GET /v1/models`` before any request.

    ``ident`` is :func:`~kvbudget.load.identity.server_identity`'s answer. An empty ``model``
    takes the first served model (as ``vllm bench serve`` does). A name the server does not
    serve, an unreachable server or a ``/v1/models`` that is not an OpenAI model list stops
    the run here, in one line, with nothing sent.
    """
    url = route_url(base_url, "/v1/models")
    status = ident.get("models_status")
    if status == 0:
        raise TargetError(
            f"--base-url: cannot reach {url} (connection refused, or no answer within "
            f"{connect_timeout_s:g} s); check --base-url and that the server is up"
        )
    if status != 200:
        hint = (
            "give the key's variable with --api-key-env"
            if status in (401, 403)
            else "check --base-url: the server root, e.g. http://127.0.0.1:8000 (or its /v1)"
        )
        said = ident.get("models_error") or ""
        raise TargetError(
            f"GET {url} answered HTTP {status}" + (f" ({said})" if said else "") + f"; {hint}"
        )
    ids: list[str] = list(ident.get("model_ids") or [])
    if not ids:
        raise TargetError(
            f"GET {url} lists no models; is this an OpenAI-compatible server? check --base-url"
        )
    if not model:
        return ids[0]
    if model not in ids:
        shown = ", ".join(ids[:8]) + (f" (+{len(ids) - 8} more)" if len(ids) > 8 else "")
        raise TargetError(
            f"--model {model}: {base_url} does not serve it; it serves {shown}; give "
            "one of those (or leave --model out for the first); nothing was sent"
        )
    return model
