"""What the API handlers call: the kvbudget library, and nothing of its own arithmetic.

Every number the page shows comes from the same functions the CLI calls (``calc`` and
``plan``); this module only adapts request bodies to their arguments and their results to
display rows (:mod:`kvbudget.web.views`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvbudget import __version__
from kvbudget.capacity.dtypes import ENGINE_DTYPES
from kvbudget.capacity.engines.registry import layout_names, registered_engines
from kvbudget.capacity.plan_types import PlanResult
from kvbudget.errors import ConfigError, SpecError
from kvbudget.spec.hardware import load_gpu_catalog
from kvbudget.spec.model import ModelSpec
from kvbudget.units import format_bytes
from kvbudget.web import documents, library, views
from kvbudget.web.schemas import ExplicitCalcRequest, ModelRequest

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
        "engines": list(layout_names()),  # the registered engines (calc's layouts)
        "engine_choices": engine_choices(),
        "kv_dtypes_by_engine": {name: list(ENGINE_DTYPES.get(name, ())) for name in layout_names()},
    }


def engine_choices() -> list[dict[str, Any]]:
    """The page's engine menu, read from the engine registry (an engine added as a folder
    appears with its own traits; the page compares no engine name): its label, whether
    ``plan`` models its pool (``kv_cache_memory`` applies), whether ``max_model_len`` may be
    ``auto``, its default version and the first version accepting each KV dtype."""
    return [
        {
            "id": name,
            "label": engine.label or name,
            "plans": engine.planner is not None,
            "auto_fit": engine.auto_fit,
            "default_version": engine.default_version,
            "kv_dtype_since": dict(engine.kv_dtype_since),
        }
        for name, engine in registered_engines().items()
    ]


def explicit_calc(request: ExplicitCalcRequest) -> dict[str, Any]:
    """The explicit calculator: ``calc_explicit``, as ``kvbudget calc --layers ...``."""
    result = library.explicit(request)
    view = views.explicit_view(result)
    view["cli"] = [library.explicit_command(request, result)]
    return view


def model_plan(request: ModelRequest) -> dict[str, Any]:
    """Model mode: resolve, ``calc_model`` at max_model_len, ``make_plan``, three budgets."""
    inputs = library.ModelInputs.from_request(request)
    resolved = library.resolve(inputs)
    spec = resolved.spec
    if spec is None:
        calc = library.calc(inputs, resolved, inputs.max_model_len or 1, inputs.seqs)
        view = views.model_view(calc, None, None, None)
        view["cli"] = library.model_commands(inputs, resolved.model_id, inputs.max_model_len or 1)
        return view
    result = library.plan(inputs, spec, resolved.model_id, inputs.max_model_len)
    length = _length(inputs, spec, result)
    calc = library.calc(inputs, resolved, length, inputs.seqs)
    structural = library.structural(inputs, spec, length, inputs.seqs)
    view = views.model_view(
        calc, result, structural, views.budgets_for(result, spec), auto_fit=inputs.auto_fit
    )
    if not inputs.auto_fit:
        view["max_model_len_source"] = "given" if inputs.max_model_len else "model maximum"
    view["cli"] = library.model_commands(inputs, resolved.model_id, length)
    return view


def _length(inputs: library.ModelInputs, spec: ModelSpec, result: PlanResult | None) -> int:
    """Tokens per request: the plan's max_model_len, the request's, or the model's maximum."""
    if result is not None:
        return result.max_model_len
    length = inputs.max_model_len or spec.max_position_embeddings
    if length is None:
        raise ConfigError(
            "max_model_len: the config has no max_position_embeddings; give a max model length",
            field="max_model_len",
        )
    return length


def chart(request: ModelRequest) -> dict[str, Any]:
    """KV bytes per sequence and max concurrency over a ladder of context lengths.

    Each point is library calls only: ``calc_model`` for one sequence of that length under the
    chosen engine layout, and ``make_plan`` with ``max_model_len`` set to it (the engine's own
    "Maximum concurrency"; None when one request of that length does not fit).
    """
    inputs = library.ModelInputs.from_request(request)
    resolved = library.resolve(inputs)
    spec = resolved.spec
    if spec is None:
        raise SpecError(f"model: {resolved.reason}", field="model")
    base = library.plan(inputs, spec, resolved.model_id, inputs.max_model_len)
    # the ladder ends at the (auto-fitted) length; each point is planned at exactly its length
    fixed = replace(inputs, auto_fit=False)
    points = []
    for num_tokens in library.context_lengths(_length(inputs, spec, base)):
        calc = library.calc(inputs, resolved, num_tokens, 1)
        if calc.bytes_per_sequence is None:
            raise SpecError(f"model: {'; '.join(calc.reasons)}", field="model")
        result = library.plan(fixed, spec, resolved.model_id, num_tokens)
        concurrency = None if result is None or not result.fits else result.max_concurrency
        points.append(views.chart_point(num_tokens, calc.bytes_per_sequence, concurrency))
    return views.chart_view(
        points, has_concurrency=base is not None, model_id=spec.model_id, engine=inputs.engine
    )


def inspect_document(raw: Any) -> dict[str, Any]:
    return documents.inspect_document(raw)
