"""The JSON API under ``/api/...`` (documented in docs/web-api.md, schema at /openapi.json).

Handlers are thin: parse the body (pydantic), call :mod:`kvbudget.web.backend`, which calls the
same library functions as the CLI, and return its JSON. Errors are raised as
:class:`~kvbudget.errors.KvbudgetError` and turned into ``400 {"error": "Kind: message"}`` by
the app.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from kvbudget import __version__
from kvbudget.web import backend
from kvbudget.web.schemas import DocumentRequest, ExplicitCalcRequest, ModelRequest

router = APIRouter(prefix="/api")

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {
        "description": 'Bad input: {"error": "ConfigError: <field>: <problem and fix>", "field": "<field>"}'
    }
}


@router.get("/health")
def health() -> dict[str, str]:
    """Liveness probe."""
    return {"status": "ok", "version": __version__}


@router.get("/meta")
def meta() -> dict[str, Any]:
    """What the page needs to build its forms: assumptions, models, GPUs, engines, KV dtypes."""
    return backend.meta()


@router.post("/calc/explicit", responses=ERROR_RESPONSES)
def calc_explicit(request: ExplicitCalcRequest) -> dict[str, Any]:
    """The seed's explicit calculator: per token, per sequence and total bytes, MiB and GiB."""
    return backend.explicit_calc(request)


@router.post("/model", responses=ERROR_RESPONSES)
def model(request: ModelRequest) -> dict[str, Any]:
    """Model mode: layer groups, ledger, the three budgets, blocks, tokens, max concurrency."""
    return backend.model_plan(request)


@router.post("/chart", responses=ERROR_RESPONSES)
def chart(request: ModelRequest) -> dict[str, Any]:
    """KV bytes per sequence and maximum concurrency at a ladder of context lengths."""
    return backend.chart(request)


@router.post("/document", responses=ERROR_RESPONSES)
def document(request: DocumentRequest) -> dict[str, Any]:
    """Check a result document's header (kind, schema, provenance, figures) for the viewer."""
    return backend.inspect_document(request.document)
