"""Request bodies of the JSON API (pydantic, ``extra="forbid"``).

Counts arrive as JSON numbers or as the strings the CLI accepts (``"4096"``, ``"128k"``, ``"128K"``,
``"128Ki"``); they are read with :func:`kvbudget.units.parse_count`, the same parser the CLI
flags use, so the web and the command line refuse the same inputs with the same words.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from kvbudget.capacity.layouts.base import Layout
from kvbudget.errors import ConfigError
from kvbudget.units import parse_count

#: A count as JSON sends it: 4096, 4096.0 or "4K" (bools are refused).
RawCount = StrictInt | StrictFloat | StrictStr


def count(value: RawCount | None, *, field: str, minimum: int = 1) -> int:
    """Parse one count with the CLI's parser; a one-line ConfigError naming ``field``."""
    if value is None:
        raise ConfigError(f"{field}: missing; give an integer >= {minimum}", field=field)
    if isinstance(value, float):
        if not value.is_integer():
            raise ConfigError(
                f"{field}: {value!r} is not a whole number; give a positive integer", field=field
            )
        value = int(value)
    return parse_count(value, field=field, minimum=minimum)


class ExplicitCalcRequest(BaseModel):
    """The seed's explicit-input calculator (``kvbudget calc --layers ... --seqs ...``)."""

    model_config = ConfigDict(extra="forbid")

    layers: RawCount = Field(description="cached layers (positive integer)")
    kv_heads: RawCount = Field(description="KV heads per layer (not query heads)")
    head_dim: RawCount = Field(description="dimension of one head")
    dtype_bytes: StrictInt | StrictFloat | StrictStr = Field(
        description="bytes per element (e.g. 2 for fp16/bf16, 1 for fp8)"
    )
    tokens: RawCount = Field(description="tokens kept per sequence")
    seqs: RawCount = Field(default=1, description="sequences held at the same time")
    assumptions: dict[str, bool] = Field(
        default_factory=dict,
        description="assumption key -> confirmed by the user; a key left out is not confirmed",
    )


class ModelRequest(BaseModel):
    """Model mode: a catalog id or a pasted config.json, an engine and a deployment."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(default=None, description="catalog id, e.g. meta-llama/Llama-3.1-8B")
    config: dict[str, Any] | None = Field(
        default=None, description="a pasted Hugging Face config.json (JSON object)"
    )
    engine: Layout = "vllm"
    kv_dtype: str = "auto"
    tp: RawCount = 1
    pp: RawCount = 1
    gpu: str | None = Field(default=None, description="GPU catalog id (see /api/meta)")
    gpu_memory: StrictInt | StrictStr | None = Field(
        default=None,
        description="device memory per GPU replacing the catalog value, e.g. '80GiB' (the CLI's --gpu-memory)",
    )
    engine_version: str | None = Field(
        default=None, description="engine version whose log figures to mirror (default: kvbudget's)"
    )
    gpu_memory_utilization: StrictFloat | StrictInt = 0.9
    max_model_len: RawCount | None = Field(
        default=None,
        description="tokens per request; defaults to the model's own maximum; 'auto' (or -1) = "
        "vLLM's auto-fit: the largest length that fits the KV pool (the CLI's --max-model-len auto)",
    )
    kv_cache_memory: StrictInt | StrictStr | None = Field(
        default=None,
        description="KV-cache bytes per GPU, e.g. '20GiB', replacing the gpu_memory_utilization "
        "arithmetic (vLLM/SGLang; the CLI's --kv-cache-memory)",
    )
    seqs: RawCount = 1
    block_size: RawCount | None = None
    overrides: list[str] = Field(
        default_factory=list,
        description="config overrides as key=value, like the CLI's --set (recorded as user-supplied)",
    )


class DocumentRequest(BaseModel):
    """A result document pasted or uploaded into the viewer."""

    model_config = ConfigDict(extra="forbid")

    document: Any = Field(description="the parsed JSON of a report.json / sim / bench document")
