"""Who answered: server identity for the environment lock.

Reads ``/v1/models`` (every OpenAI-compatible server), vLLM's ``/version``, llama.cpp's
``/props`` and SGLang's ``/get_server_info`` (a few fields each), plus non-secret response
headers of the first streamed request. Nothing secret is kept: authorization and cookie
headers are dropped.
"""

from __future__ import annotations

from typing import Any

from kvbudget.engine_name import KVBUDGET_SERVE, LLAMACPP, REPORTED
from kvbudget.load.client import OpenAIClient
from kvbudget.safety.redact import redact_url

_PROPS_KEYS = ("build_info", "model_path", "total_slots", "n_ctx", "chat_template_caps")
_SGLANG_KEYS = ("version", "model_path", "tp_size", "dp_size", "page_size", "max_total_num_tokens")
_SECRET_HEADERS = ("authorization", "cookie", "set-cookie", "proxy-authorization", "x-api-key")


def safe_headers(headers: dict[str, str] | None) -> dict[str, str]:
    """Response headers worth recording (server, x-*), without secrets."""
    if not headers:
        return {}
    keep: dict[str, str] = {}
    for key, value in headers.items():
        low = key.lower()
        if low in _SECRET_HEADERS:
            continue
        if low == "server" or low.startswith("x-"):
            keep[low] = value[:200]
    return keep


async def server_identity(client: OpenAIClient) -> dict[str, Any]:
    """Identity fields of the server behind ``client`` (best effort; never raises)."""
    ident: dict[str, Any] = {
        "base_url": redact_url(client.base_url),
        "engine": None,
        "engine_version": None,
    }
    status, body, headers = await client.get_json("/v1/models")
    ident["models_status"] = status
    if status != 200:
        ident["models_error"] = " ".join(str(body if body is not None else "").split())[:200]
    if isinstance(body, dict) and isinstance(body.get("data"), list):
        ident["model_ids"] = [
            str(m["id"]) for m in body["data"][:1000] if isinstance(m, dict) and "id" in m
        ]
        models = []
        for m in body["data"][:8]:
            if isinstance(m, dict):
                models.append(
                    {k: m[k] for k in ("id", "owned_by", "max_model_len", "root") if k in m}
                )
        ident["models"] = models
        owners = {m.get("owned_by") for m in models}
        if "vllm" in owners:
            ident["engine"] = "vllm"
        elif "kvbudget" in owners:
            ident["engine"] = KVBUDGET_SERVE
        elif "sglang" in owners:
            ident["engine"] = "sglang"
        elif "llamacpp" in owners:
            ident["engine"] = REPORTED[LLAMACPP]
    ident["headers"] = safe_headers(headers)
    status, body, _ = await client.get_json("/version")
    if status == 200 and isinstance(body, dict):
        ident["version"] = {k: str(v)[:100] for k, v in body.items()}
        ident["engine_version"] = str(body.get("version", "")) or None
        if body.get("engine"):
            ident["engine"] = str(body["engine"])
        elif ident["engine"] is None:
            ident["engine"] = "vllm"
    status, body, _ = await client.get_json("/props")
    if status == 200 and isinstance(body, dict):
        ident["props"] = {k: body[k] for k in _PROPS_KEYS if k in body}
        settings = body.get("default_generation_settings")
        if isinstance(settings, dict) and "n_ctx" in settings:
            ident["props"]["n_ctx"] = settings["n_ctx"]
        ident["engine"] = ident["engine"] or REPORTED[LLAMACPP]
        if ident["engine_version"] is None and "build_info" in body:
            ident["engine_version"] = str(body["build_info"])
    if ident["engine"] in (None, "sglang"):
        status, body, _ = await client.get_json("/get_server_info")
        if status == 200 and isinstance(body, dict):
            ident["server_info"] = {k: body[k] for k in _SGLANG_KEYS if k in body}
            ident["engine"] = "sglang"
            if "version" in body:
                ident["engine_version"] = str(body["version"])
    return ident
