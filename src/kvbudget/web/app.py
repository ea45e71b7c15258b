"""The FastAPI application: the page, its static assets and the JSON API.

Security posture: the page loads nothing from another origin (a strict Content-Security-Policy
says so to the browser), the interactive docs are a local page (FastAPI's default ``/docs``
pulls Swagger UI from a CDN, so it is disabled), only loopback Host headers (and the bound
address) are answered and request bodies are capped one by one and in total
(:mod:`kvbudget.web.guards`), and every error is one JSON line
``{"error": "Kind: message", "field": ...}`` with status 400 (bad input) or 500.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from kvbudget import __version__
from kvbudget.errors import KvbudgetError, cap_long_runs, shown_value
from kvbudget.web.api import router
from kvbudget.web.guards import MAX_BODY_BYTES, BodyBudget, allowed_hosts, host_name

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'none'; object-src 'none'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)

#: library field names -> the API field that carries them (the CLI's --set is "overrides" here)
FIELD_ALIASES: dict[str, str] = {"set": "overrides", "dtype-bytes": "dtype_bytes"}

SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}


def static_dir() -> Path:
    """The shipped page assets (package data ``kvbudget/web/static``)."""
    return Path(str(resources.files("kvbudget.web") / "static"))


def error_response(status_code: int, line: str, field: str | None = None) -> JSONResponse:
    """The API's one error shape."""
    body: dict[str, Any] = {"error": cap_long_runs(" ".join(line.split()))}
    if field:
        body["field"] = field
    return JSONResponse(body, status_code=status_code)


def _short(value: Any, limit: int = 80) -> str:
    """``repr`` of a user value, cut to ``limit`` characters (errors stay one short line)."""
    return shown_value(value, limit)


def validation_line(exc: RequestValidationError) -> tuple[str, str | None]:
    """First pydantic error as a CLI-style one-liner naming the field, the value and the fix."""
    errors = exc.errors()
    if not errors:
        return "ConfigError: request body is not valid; send a JSON object", None
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    field = ".".join(loc) if loc else None
    kind = str(first.get("type", ""))
    value = first.get("input")
    if kind == "missing":
        text = f"{field}: missing; add it to the request (see /docs)"
    elif kind == "extra_forbidden":
        text = f"{field}: unknown field (value {_short(value)}); remove it or check the spelling in /docs"
    elif kind == "json_invalid":
        text = "request body: not valid JSON; send Content-Type: application/json with {...}"
        loc = []
    elif kind in {"model_attributes_type", "dict_type"} and not loc:
        text = "request body: not a JSON object; send Content-Type: application/json with {...}"
    else:
        msg = str(first.get("msg", "invalid"))
        where = field or "request body"
        text = f"{where}: {msg}, got {_short(value)}; fix the value (see /docs for the type)"
    more = f" ({len(errors)} problems; first shown)" if len(errors) > 1 else ""
    return f"ConfigError: {text}{more}", (loc[0] if loc else None)


def create_app(bind_host: str = "127.0.0.1", extra_hosts: Iterable[str] = ()) -> FastAPI:
    """Build the app (one per server; tests build their own). It answers requests whose Host
    is a loopback name, ``bind_host`` or one of ``extra_hosts``."""
    hosts = allowed_hosts(bind_host, extra_hosts)
    budget = BodyBudget()
    app = FastAPI(
        title="kvbudget web API",
        version=__version__,
        description=(
            "JSON API behind the kvbudget calculator page. Every figure is computed by the same "
            "library functions as the kvbudget CLI. Errors: HTTP 400 with "
            '{"error": "ConfigError: ...", "field": "..."}.'
        ),
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )

    @app.middleware("http")
    async def guard(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        length = request.headers.get("content-length")
        reserved = 0
        host = request.headers.get("host")
        if host is None or host_name(host) not in hosts:
            shown = "no Host header" if host is None else f"Host {_short(host, 60)}"
            response: Response = error_response(
                421,
                f"ConfigError: {shown} is not this server's; kvbudget web answers only "
                "127.0.0.1, localhost, [::1] and the address it was started with (--host, "
                "--allowed-host): open the page by one of those names",
            )
        elif length is None and request.method in ("POST", "PUT", "PATCH"):
            response = error_response(
                411,
                "ConfigError: request body without Content-Length; send the JSON body with its "
                "length (chunked uploads are not accepted)",
            )
        elif length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            response = error_response(
                413,
                f"ConfigError: request body of {length} bytes is larger than the "
                f"{MAX_BODY_BYTES // (1024 * 1024)} MiB limit; send a smaller document",
            )
        elif not budget.reserve(int(length or 0)):
            response = error_response(
                503,
                f"ConfigError: request bodies being handled at once would pass "
                f"{budget.limit_bytes // (1024 * 1024)} MiB; retry when the others are done",
            )
            response.headers["Retry-After"] = "1"
        else:
            reserved = int(length or 0)
            try:
                response = await call_next(request)
            except Exception as exc:  # last resort: never a traceback to the client
                response = error_response(
                    500,
                    f"InternalError: {type(exc).__name__}: {exc} (this is a kvbudget bug)",
                )
            finally:
                budget.release(reserved)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if request.url.path.startswith("/api/"):
            response.headers.setdefault("Cache-Control", "no-store")
        return response

    @app.exception_handler(KvbudgetError)
    async def kvbudget_error(request: Request, exc: KvbudgetError) -> JSONResponse:
        field = FIELD_ALIASES.get(exc.field or "", exc.field)
        return error_response(400, exc.one_line(), field)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # the documented shape everywhere, never FastAPI's {"detail": ...}
        detail = exc.detail if isinstance(exc.detail, str) else "request refused"
        kind = "ConfigError" if exc.status_code < 500 else "InternalError"
        hint = {
            404: "; see /docs for the API paths",
            405: "; see /docs for each path's method",
        }.get(exc.status_code, "; send a JSON object body (see /docs)")
        return error_response(exc.status_code, f"{kind}: {request.url.path}: {detail}{hint}")

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        line, field = validation_line(exc)
        return error_response(400, line, field)

    app.include_router(router)

    assets = static_dir()

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(assets / "index.html", media_type="text/html; charset=utf-8")

    @app.get("/docs", include_in_schema=False)
    async def docs_page() -> FileResponse:
        return FileResponse(assets / "api.html", media_type="text/html; charset=utf-8")

    app.mount("/static", StaticFiles(directory=assets), name="static")
    return app
