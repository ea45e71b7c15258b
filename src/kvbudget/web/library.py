"""Thin adapter from the web to the calculator and planner libraries (CALC and PLAN).

Every call here is a call the CLI makes too; this module holds no KV arithmetic of its own.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

from kvbudget.capacity.budget import StructuralBudget, structural_budget
from kvbudget.capacity.dtypes import dtype_from_element_bytes
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError, SpecError
from kvbudget.spec.catalog import find_catalog_entry, list_catalog
from kvbudget.spec.layers import FullAttention
from kvbudget.spec.locate import ConfigSource
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import ResolvedModel, parse_overrides, resolve_config, resolve_model
from kvbudget.web.schemas import ModelRequest, count

#: label of a pasted config in the ledger
PASTED = "pasted config.json"
#: engines ``make_plan`` models (the others get the structural figures only)
PLAN_ENGINES = ("vllm", "sglang")
#: most points on the context-length chart
CHART_POINTS = 9

# Interim (until capacity/assumptions.py lands): the checklist of issue 2.
_ASSUMPTIONS: tuple[tuple[str, str, str], ...] = (
    ("full_attention", "All cached layers use full attention", "no MLA, no state layers"),
    ("identical_layers", "All layers are identical", "same KV heads and head dim in every layer"),
    ("independent_sequences", "Sequences share nothing", "no prefix sharing between sequences"),
    ("no_sliding_window", "No sliding window or local attention", "every token is kept"),
    ("no_hybrid_cache", "No hybrid or state cache", "no Mamba / linear-attention state"),
    ("no_quant_metadata", "No quantization metadata", "no scales or zero points per block"),
    ("no_block_padding", "No block padding", "engine blocks and alignment ignored"),
)


def assumption_catalog() -> list[dict[str, str]]:
    """The structural assumptions of the explicit mode: key, label, detail."""
    return [{"key": k, "label": label, "detail": detail} for k, label, detail in _ASSUMPTIONS]


@lru_cache(maxsize=1)
def catalog_models() -> list[dict[str, str]]:
    """Catalog ids for the model picker, with the layer kinds the resolver finds."""
    models = []
    for entry in list_catalog():
        resolved = resolve_model(entry.model_id)
        if resolved.spec is None:
            kinds = "not applicable"
        else:
            kinds = ", ".join(f"{n} {k}" for k, n in resolved.spec.kind_counts().items())
        models.append({"id": entry.model_id, "layer_kinds": kinds})
    return models


def element_bytes(raw: int | float | str) -> int:
    """``--dtype-bytes``: 1, 2 or 4 (validated by the library's dtype table)."""
    if isinstance(raw, str):
        raw = raw.strip()
        if not raw.replace(".", "", 1).isdigit():
            raise ConfigError(
                f"dtype_bytes: {raw!r} is not a number; use 1 (fp8), 2 (fp16/bf16) or 4 (fp32)",
                field="dtype_bytes",
            )
        raw = float(raw)
    if isinstance(raw, float):
        if not raw.is_integer():
            raise ConfigError(
                f"dtype_bytes: {raw} bytes per element is not supported; use 1 (fp8), 2 (fp16/bf16) or 4 (fp32)",
                field="dtype_bytes",
            )
        raw = int(raw)
    dtype_from_element_bytes(raw)
    return raw


@dataclass(frozen=True, slots=True)
class ExplicitResult:
    status: str
    bytes_per_token: int
    bytes_per_sequence: int
    total_bytes: int
    assumptions: list[dict[str, Any]]


def explicit_kv(
    *,
    layers: int,
    kv_heads: int,
    head_dim: int,
    dtype_bytes: int,
    tokens: int,
    seqs: int,
    assumptions: dict[str, bool],
) -> ExplicitResult:
    """Interim: to be replaced by capacity.kvbytes explicit mode."""
    unknown = sorted(set(assumptions) - {k for k, _, _ in _ASSUMPTIONS})
    if unknown:
        raise ConfigError(
            f"assumptions: unknown key {unknown[0]!r}; use one of "
            + ", ".join(k for k, _, _ in _ASSUMPTIONS),
            field="assumptions",
        )
    layer = FullAttention(layer_index=0, num_kv_heads=kv_heads, head_dim=head_dim)
    per_token = layer.bytes_per_token(dtype_bytes) * layers
    rows = [
        {"key": k, "label": label, "holds": bool(assumptions.get(k, False)), "why": detail}
        for k, label, detail in _ASSUMPTIONS
    ]
    status = "exact" if all(r["holds"] for r in rows) else "structural_reference"
    return ExplicitResult(status, per_token, per_token * tokens, per_token * tokens * seqs, rows)


@dataclass(frozen=True, slots=True)
class ModelInputs:
    """A model-mode request with its counts parsed by the CLI's parsers."""

    model: str | None
    config: dict[str, Any] | None
    engine: str
    kv_dtype: str
    tp: int
    pp: int
    gpu: str | None
    gpu_memory_utilization: float
    max_model_len: int | None
    seqs: int
    block_size: int | None
    overrides: tuple[str, ...] = ()

    @classmethod
    def from_request(cls, request: ModelRequest) -> ModelInputs:
        if (request.model is None) == (request.config is None):
            raise ConfigError(
                "model: give exactly one of 'model' (a catalog id) or 'config' (a pasted config.json)",
                field="model",
            )
        util = float(request.gpu_memory_utilization)
        if not 0.0 < util <= 1.0:
            raise ConfigError(
                f"gpu_memory_utilization: must be in (0, 1], got {util}; vLLM's default is 0.9",
                field="gpu_memory_utilization",
            )
        return cls(
            model=request.model,
            config=request.config,
            engine=request.engine,
            kv_dtype=request.kv_dtype,
            tp=count(request.tp, field="tp"),
            pp=count(request.pp, field="pp"),
            gpu=request.gpu,
            gpu_memory_utilization=util,
            max_model_len=None
            if request.max_model_len is None
            else count(request.max_model_len, field="max_model_len"),
            seqs=count(request.seqs, field="seqs"),
            block_size=None
            if request.block_size is None
            else count(request.block_size, field="block_size"),
            overrides=tuple(request.overrides),
        )


def resolve(inputs: ModelInputs) -> ResolvedModel:
    """A catalog id or a pasted config.json -> the resolver's verdict (no files, no network).

    Only bundled catalog ids are accepted by name: the server never opens a path or the
    Hugging Face cache on behalf of a browser. Anything else is pasted as config.json.
    """
    overrides = parse_overrides(inputs.overrides) if inputs.overrides else None
    if inputs.config is not None:
        text = json.dumps(inputs.config, sort_keys=True).encode()
        name = inputs.config.get("_name_or_path")
        source = ConfigSource(
            model_id=name if isinstance(name, str) and name else PASTED,
            path=Path(PASTED),
            origin="file",
            sha256=hashlib.sha256(text).hexdigest(),
            revision=None,
            raw=inputs.config,
        )
        return resolve_config(source, overrides=overrides)
    assert inputs.model is not None
    entry = find_catalog_entry(inputs.model)
    if entry is None:
        raise SpecError(
            f"model: {inputs.model!r} is not a bundled catalog id; pick one from the list "
            "(kvbudget models) or paste the model's config.json",
            field="model",
        )
    return resolve_model(entry.model_id, overrides=overrides)


def plan_request(inputs: ModelInputs, model_id: str, max_model_len: int | None) -> PlanRequest:
    """The PlanRequest the CLI would build from the same flags."""
    return PlanRequest(
        model=model_id,
        gpu=inputs.gpu,
        tp=inputs.tp,
        pp=inputs.pp,
        engine=cast(Any, inputs.engine),
        gpu_memory_utilization=inputs.gpu_memory_utilization,
        max_model_len=max_model_len,
        kv_dtype=inputs.kv_dtype,
        block_size=inputs.block_size,
    )


def plan(
    inputs: ModelInputs, spec: ModelSpec, model_id: str, max_model_len: int | None
) -> PlanResult | None:
    """``make_plan`` for vLLM and SGLang; None for engines the planner does not model."""
    if inputs.engine not in PLAN_ENGINES:
        return None
    return make_plan(plan_request(inputs, model_id, max_model_len), spec)


def context_lengths(max_model_len: int) -> list[int]:
    """Chart x values: powers of two from 1Ki up to ``max_model_len`` (which is always last)."""
    lengths = [1 << k for k in range(10, 25) if (1 << k) < max_model_len]
    lengths = lengths[-(CHART_POINTS - 1) :] if lengths else []
    return [*lengths, max_model_len]


def structural(
    inputs: ModelInputs, spec: ModelSpec, num_tokens: int, num_sequences: int
) -> StructuralBudget:
    """The structural budget (engine-neutral bytes) the planner reports."""
    return structural_budget(
        spec,
        kv_dtype=inputs.kv_dtype,
        engine=inputs.engine,
        num_tokens=num_tokens,
        num_sequences=num_sequences,
    )
