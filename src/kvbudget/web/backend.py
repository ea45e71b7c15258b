"""What the API handlers call: the kvbudget library, and nothing of its own arithmetic.

Every number the page shows comes from the same functions the CLI calls (``calc`` and
``plan``); this module only adapts request bodies to their arguments and their results to
display rows (:mod:`kvbudget.web.views`).
"""

from __future__ import annotations

from typing import Any

from kvbudget import __version__
from kvbudget.capacity.dtypes import ENGINE_DTYPES
from kvbudget.spec.hardware import load_gpu_catalog
from kvbudget.units import format_bytes
from kvbudget.web import documents, library, views
from kvbudget.web.schemas import ExplicitCalcRequest, ModelRequest, count

DEFAULT_MODEL = "meta-llama/Llama-3.1-8B"
DEFAULT_GPU = "H100-SXM"


def meta() -> dict[str, Any]:
    """Choices for the page's forms, read from the library's own catalogs."""
    gpus = [
        {
            "id": gpu.id,
            "label": f"{gpu.id} ({format_bytes(gpu.memory_bytes)})",
            "memory_bytes": gpu.memory_bytes,
        }
        for gpu in load_gpu_catalog()
    ]
    return {
        "version": __version__,
        "assumptions": library.assumption_catalog(),
        "models": library.catalog_models(),
        "default_model": DEFAULT_MODEL,
        "gpus": gpus,
        "default_gpu": DEFAULT_GPU,
        "engines": list(ENGINE_DTYPES),
        "kv_dtypes": ENGINE_DTYPES["vllm"],
        "kv_dtypes_by_engine": {name: list(names) for name, names in ENGINE_DTYPES.items()},
    }


def explicit_calc(request: ExplicitCalcRequest) -> dict[str, Any]:
    """The explicit calculator through the library's explicit mode."""
    result = library.explicit_kv(
        layers=count(request.layers, field="layers"),
        kv_heads=count(request.kv_heads, field="kv_heads"),
        head_dim=count(request.head_dim, field="head_dim"),
        dtype_bytes=library.element_bytes(request.dtype_bytes),
        tokens=count(request.tokens, field="tokens"),
        seqs=count(request.seqs, field="seqs"),
        assumptions=request.assumptions,
    )
    return views.explicit_view(result)


def model_plan(request: ModelRequest) -> dict[str, Any]:
    """Model mode: resolve, calculate and plan with the library; display rows."""
    calc_doc, plan_doc = library.model_documents(library.ModelInputs.from_request(request))
    return views.model_view(calc_doc, plan_doc)


def chart(request: ModelRequest) -> dict[str, Any]:
    """KV bytes per sequence and max concurrency over a ladder of context lengths."""
    return views.chart_view(library.context_ladder(library.ModelInputs.from_request(request)))


def inspect_document(raw: Any) -> dict[str, Any]:
    return documents.inspect_document(raw)
