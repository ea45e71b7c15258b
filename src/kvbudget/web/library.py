"""Thin adapter from the web to the calculator and planner libraries (CALC and PLAN).

Every call here is a call the CLI makes too; this module holds no KV arithmetic of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kvbudget.capacity.dtypes import dtype_from_element_bytes
from kvbudget.errors import ConfigError
from kvbudget.spec.catalog import list_catalog
from kvbudget.spec.layers import FullAttention
from kvbudget.web.schemas import ModelRequest, count

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
    """Catalog ids for the model picker."""
    return [{"id": entry.model_id, "layer_kinds": entry.status} for entry in list_catalog()]


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
        )


def model_documents(inputs: ModelInputs) -> tuple[dict[str, Any], dict[str, Any]]:
    """Interim until resolve_model and make_plan land."""
    raise ConfigError("model: model mode is not wired yet", field="model")


def context_ladder(inputs: ModelInputs) -> list[dict[str, Any]]:
    """Interim until make_plan lands."""
    raise ConfigError("model: chart is not wired yet", field="model")
