"""The planned KV pool beside the pool the engine reports it allocated.

Planned: ``plan``'s vLLM pool for the locked deployment (the capacity ledger's ``pool``,
computed). Engine-reported: the engine's final resolved values read back over HTTP
(:mod:`kvbudget.load.engine_report`: vLLM ``vllm:cache_config_info``, ``/v1/models``; SGLang
``/get_server_info``; llama.cpp ``/props``). A number both sides give that differs means the
plan does not describe the running engine: it is on the blocking list, with both values.
"""

from __future__ import annotations

from typing import Any

#: (row name, ledger pool key, EngineReport key)
POOL_ROWS: tuple[tuple[str, str, str], ...] = (
    ("block_size", "block_size", "block_size"),
    ("num_blocks", "num_blocks", "num_gpu_blocks"),
    ("kv_cache_tokens", "kv_cache_tokens", "kv_cache_size_tokens"),
    ("max_concurrency", "max_concurrency", "kv_cache_max_concurrency"),
    ("max_model_len", "max_model_len", "max_model_len"),
    ("kv_dtype", "kv_dtype", "cache_dtype"),
)
#: rows whose difference blocks (the pool itself; dtype names differ in spelling across tools)
BLOCKING_ROWS = ("block_size", "num_blocks", "kv_cache_tokens", "max_model_len")


def _same(planned: Any, reported: Any) -> bool:
    if isinstance(planned, float) or isinstance(reported, float):
        # vLLM logs and labels concurrency with 2 decimals
        return round(float(planned), 2) == round(float(reported), 2)
    return bool(planned == reported)


def pool_side_by_side(
    planned_pool: dict[str, Any], engine_report: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows ``{field, planned, engine_reported, source, match}`` and blocking lines."""
    sources = engine_report.get("sources") or {}
    rows: list[dict[str, Any]] = []
    blocking: list[str] = []
    for name, plan_key, report_key in POOL_ROWS:
        planned = planned_pool.get(plan_key)
        reported = engine_report.get(report_key)
        if planned is None and reported is None:
            continue
        match = None if planned is None or reported is None else _same(planned, reported)
        rows.append(
            {
                "field": name,
                "planned": planned,
                "engine_reported": reported,
                "source": sources.get(report_key),
                "match": match,
            }
        )
        if match is False and name in BLOCKING_ROWS:
            blocking.append(
                f"pool.{name}: plan computes {planned!r} but the engine reports {reported!r} "
                f"({sources.get(report_key)}); the plan does not describe the running engine"
            )
    return rows, blocking
