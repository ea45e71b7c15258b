"""The engine's final resolved values, read back from the running server.

What an engine reports about itself after start-up — not what it was asked for:

* vLLM: ``/version`` (``{"version": "0.32.0"}``), ``/v1/models`` (``max_model_len``, ``root``)
  and the labels of ``vllm:cache_config_info`` on ``/metrics``: the ``CacheConfig`` after the
  engine resolved it (vLLM 0.32.0 ``vllm/config/cache.py`` ``metrics_info`` writes every field
  as a string; ``vllm/v1/engine/core_client.py`` fills ``num_gpu_blocks``, ``block_size``,
  ``kv_cache_size_tokens`` and ``kv_cache_max_concurrency`` from the engine core's handshake).
* llama.cpp: ``/props`` (``total_slots``, ``default_generation_settings.n_ctx``, ``build_info``,
  ``model_path``).
* kvbudget serve: ``/v1/models`` (``owned_by: kvbudget``) and the ``kvbudget:num_total_blocks``
  gauge on ``/metrics`` (its simulated pool, counted as vLLM's ``num_gpu_blocks``).
* SGLang: ``/get_server_info`` (the server args plus ``version``; ``page_size``,
  ``max_total_num_tokens``, ``kv_cache_dtype``, ``context_length``, ``disable_radix_cache``,
  ``mem_fraction_static``).

Every value keeps where it was read (``sources``), so a lock can say "confirmed by
``vllm:cache_config_info``". Reading never raises: a missing endpoint leaves fields ``None``.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict, Field

from kvbudget.engine_name import KVBUDGET_SERVE, LLAMACPP, REPORTED
from kvbudget.load.client import OpenAIClient

CACHE_INFO = "vllm:cache_config_info"

#: EngineReport field -> cache_config_info label (vLLM 0.32.0 CacheConfig attribute names)
_VLLM_LABELS: dict[str, str] = {
    "block_size": "block_size",
    "cache_dtype": "cache_dtype",
    "num_gpu_blocks": "num_gpu_blocks",
    "num_gpu_blocks_override": "num_gpu_blocks_override",
    "kv_cache_size_tokens": "kv_cache_size_tokens",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "kv_cache_max_concurrency": "kv_cache_max_concurrency",
    "enable_prefix_caching": "enable_prefix_caching",
    "prefix_caching_hash_algo": "prefix_caching_hash_algo",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "sliding_window": "sliding_window",
    "mamba_cache_dtype": "mamba_cache_dtype",
    "mamba_ssm_cache_dtype": "mamba_ssm_cache_dtype",
    "mamba_block_size": "mamba_block_size",
}
_INT_FIELDS = (
    "block_size",
    "num_gpu_blocks",
    "num_gpu_blocks_override",
    "kv_cache_size_tokens",
    "kv_cache_memory_bytes",
    "sliding_window",
    "mamba_block_size",
    "max_model_len",
    "total_slots",
)
_FLOAT_FIELDS = ("kv_cache_max_concurrency", "gpu_memory_utilization")
_BOOL_FIELDS = ("enable_prefix_caching",)


class EngineReport(BaseModel):
    """Values the running engine reports about itself, each with its source."""

    model_config = ConfigDict(extra="forbid")

    engine: str | None = None
    engine_version: str | None = None
    model_id: str | None = None
    #: the served model's path or hub id (vLLM ``/v1/models`` ``root``)
    model_root: str | None = None
    max_model_len: int | None = None
    block_size: int | None = None
    cache_dtype: str | None = None
    num_gpu_blocks: int | None = None
    num_gpu_blocks_override: int | None = None
    kv_cache_size_tokens: int | None = None
    kv_cache_memory_bytes: int | None = None
    kv_cache_max_concurrency: float | None = None
    enable_prefix_caching: bool | None = None
    prefix_caching_hash_algo: str | None = None
    gpu_memory_utilization: float | None = None
    sliding_window: int | None = None
    mamba_cache_dtype: str | None = None
    mamba_ssm_cache_dtype: str | None = None
    mamba_block_size: int | None = None
    #: llama.cpp ``/props`` ``total_slots`` (parallel sequences)
    total_slots: int | None = None
    #: field -> where it was read ("/v1/models", "/metrics vllm:cache_config_info", ...)
    sources: dict[str, str] = Field(default_factory=dict)
    #: every label of vllm:cache_config_info as the engine wrote it (strings)
    cache_config_labels: dict[str, str] = Field(default_factory=dict)

    def reported(self) -> dict[str, tuple[Any, str]]:
        """Every field the engine reported: name -> (value, source)."""
        return {
            name: (getattr(self, name), source)
            for name, source in self.sources.items()
            if getattr(self, name) is not None
        }


def _convert(name: str, raw: Any) -> Any:
    if raw is None:
        return None
    text = str(raw).strip()
    if text in ("", "None", "null"):
        return None
    try:
        if name in _INT_FIELDS:
            return int(float(text))
        if name in _FLOAT_FIELDS:
            return float(text)
    except ValueError:
        return None
    if name in _BOOL_FIELDS:
        if isinstance(raw, bool):
            return raw
        return text.lower() in ("true", "1", "yes")
    return text


def cache_config_labels(metrics_text: str) -> dict[str, str]:
    """Labels of ``vllm:cache_config_info`` (engine 0) in an exposition text, or {}."""
    try:
        families = list(text_string_to_metric_families(metrics_text))
    except ValueError:
        return {}
    for fam in families:
        if fam.name == CACHE_INFO:
            samples = sorted(fam.samples, key=lambda s: s.labels.get("engine", ""))
            if samples:
                return dict(samples[0].labels)
    return {}


#: kvbudget serve's pool gauge: every block of the simulated pool, the null block included, as
#: vLLM's ``num_gpu_blocks`` counts them (serve builds its pool from the same plan)
SERVE_TOTAL_BLOCKS = "kvbudget:num_total_blocks"


def gauge_value(metrics_text: str, name: str) -> float | None:
    """The first sample of gauge ``name`` (engine 0 first) in an exposition text, or None."""
    try:
        families = list(text_string_to_metric_families(metrics_text))
    except ValueError:
        return None
    for fam in families:
        if fam.name == name and fam.samples:
            first = sorted(fam.samples, key=lambda s: s.labels.get("engine", ""))[0]
            return float(first.value)
    return None


def build_engine_report(
    *,
    models: Any = None,
    version: Any = None,
    metrics_text: str | None = None,
    props: Any = None,
    server_info: Any = None,
) -> EngineReport:
    """An EngineReport from the raw answers of the engine's endpoints (any may be None)."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def put(name: str, raw: Any, source: str) -> None:
        value = _convert(name, raw)
        if value is not None:
            values[name] = value
            sources[name] = source

    engine: str | None = None
    if isinstance(models, dict) and isinstance(models.get("data"), list) and models["data"]:
        first = models["data"][0]
        if isinstance(first, dict):
            put("model_id", first.get("id"), "/v1/models id")
            put("model_root", first.get("root"), "/v1/models root")
            put("max_model_len", first.get("max_model_len"), "/v1/models max_model_len")
            owner = first.get("owned_by")
            engine = {
                "vllm": "vllm",
                "sglang": "sglang",
                "llamacpp": REPORTED[LLAMACPP],
                "kvbudget": KVBUDGET_SERVE,
            }.get(str(owner))
    if isinstance(version, dict) and version.get("version"):
        put("engine_version", version["version"], "/version")
        engine = engine or "vllm"
    labels = cache_config_labels(metrics_text) if metrics_text else {}
    if labels:
        engine = "vllm"
        for name, label in _VLLM_LABELS.items():
            put(name, labels.get(label), f"/metrics {CACHE_INFO} {label}")
    elif metrics_text and engine == KVBUDGET_SERVE:
        put(
            "num_gpu_blocks",
            gauge_value(metrics_text, SERVE_TOTAL_BLOCKS),
            f"/metrics {SERVE_TOTAL_BLOCKS}",
        )
    if isinstance(props, dict) and ("build_info" in props or "total_slots" in props):
        engine = engine or REPORTED[LLAMACPP]
        put("engine_version", props.get("build_info"), "/props build_info")
        put("total_slots", props.get("total_slots"), "/props total_slots")
        put("model_root", props.get("model_path"), "/props model_path")
        settings = props.get("default_generation_settings")
        if isinstance(settings, dict):
            # n_ctx per slot: the longest sequence one request may reach
            put("max_model_len", settings.get("n_ctx"), "/props default_generation_settings.n_ctx")
    if isinstance(server_info, dict) and (
        "page_size" in server_info or "max_total_num_tokens" in server_info
    ):
        engine = "sglang"
        src = "/get_server_info"
        put("engine_version", server_info.get("version"), f"{src} version")
        put("model_root", server_info.get("model_path"), f"{src} model_path")
        put("block_size", server_info.get("page_size"), f"{src} page_size")
        put(
            "kv_cache_size_tokens",
            server_info.get("max_total_num_tokens"),
            f"{src} max_total_num_tokens",
        )
        put("max_model_len", server_info.get("context_length"), f"{src} context_length")
        put("cache_dtype", server_info.get("kv_cache_dtype"), f"{src} kv_cache_dtype")
        put(
            "gpu_memory_utilization",
            server_info.get("mem_fraction_static"),
            f"{src} mem_fraction_static",
        )
        if "disable_radix_cache" in server_info:
            put(
                "enable_prefix_caching",
                not bool(server_info["disable_radix_cache"]),
                f"{src} disable_radix_cache",
            )
        if server_info.get("sliding_window_size") is not None:
            put(
                "sliding_window",
                server_info.get("sliding_window_size"),
                f"{src} sliding_window_size",
            )
    if engine is not None:
        values["engine"] = engine
        sources["engine"] = "/v1/models owned_by, /version, /metrics, /props or /get_server_info"
    return EngineReport(**values, sources=sources, cache_config_labels=labels)


async def read_engine_report(client: OpenAIClient, metrics_url: str | None = None) -> EngineReport:
    """Read the endpoints of the server behind ``client`` (best effort; never raises)."""
    _, models, _ = await client.get_json("/v1/models")
    status, version, _ = await client.get_json("/version")
    metrics_text = None
    if metrics_url or status == 200:
        metrics_text = await client.get_text(metrics_url or "/metrics")
    status, props, _ = await client.get_json("/props")
    server_info = None
    if status != 200:
        _, server_info, _ = await client.get_json("/get_server_info")
    return build_engine_report(
        models=models,
        version=version if isinstance(version, dict) else None,
        metrics_text=metrics_text,
        props=props if status == 200 else None,
        server_info=server_info,
    )
