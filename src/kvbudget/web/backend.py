"""What the API handlers call: the kvbudget library, and nothing of its own arithmetic.

Every number the page shows comes from the same functions the CLI calls (``calc`` and
``plan``); this module only adapts request bodies to their arguments and their results to
display rows (:mod:`kvbudget.web.views`).
"""

from __future__ import annotations

from typing import Any

from kvbudget import __version__
from kvbudget.capacity.dtypes import ENGINE_DTYPES
from kvbudget.errors import ConfigError, SpecError
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
    inputs = library.ModelInputs.from_request(request)
    resolved = library.resolve(inputs)
    result = structural = None
    if resolved.spec is not None:
        spec = resolved.spec
        result = library.plan(inputs, spec, resolved.model_id, inputs.max_model_len)
        length = result.max_model_len if result is not None else inputs.max_model_len
        length = length or spec.max_position_embeddings
        if length is None:
            raise ConfigError(
                "max_model_len: the config has no max_position_embeddings; give a max model length",
                field="max_model_len",
            )
        structural = library.structural(inputs, spec, length, inputs.seqs)
    return views.model_view(resolved, result, inputs.engine, structural)


def chart(request: ModelRequest) -> dict[str, Any]:
    """KV bytes per sequence and max concurrency over a ladder of context lengths.

    Each point is one library call: the structural bytes of one sequence of that length, and
    ``make_plan`` with ``max_model_len`` set to it (the engine's own "Maximum concurrency").
    """
    inputs = library.ModelInputs.from_request(request)
    resolved = library.resolve(inputs)
    if resolved.spec is None:
        raise SpecError(f"model: {resolved.reason}", field="model")
    spec = resolved.spec
    base = library.plan(inputs, spec, resolved.model_id, inputs.max_model_len)
    top = base.max_model_len if base is not None else inputs.max_model_len
    top = top or spec.max_position_embeddings or 4096
    points = []
    for num_tokens in library.context_lengths(top):
        seq_bytes = library.structural(inputs, spec, num_tokens, 1).bytes_per_sequence
        result = library.plan(inputs, spec, resolved.model_id, num_tokens)
        concurrency = None if result is None or not result.fits else result.max_concurrency
        points.append(views.chart_point(num_tokens, seq_bytes, concurrency))
    return views.chart_view(points, has_concurrency=base is not None, model_id=spec.model_id)


def inspect_document(raw: Any) -> dict[str, Any]:
    return documents.inspect_document(raw)
