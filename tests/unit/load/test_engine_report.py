"""EngineReport from recorded engine answers.

Independent sources: the fixture files are answers recorded from the engines themselves
(``vllm-0.32.0-cpu-*``: a live vLLM 0.32.0 CPU server started with
``--num-gpu-blocks-override 64 --enable-prefix-caching --max-model-len 4096`` and
``VLLM_CPU_KVCACHE_SPACE=1``, whose log said ``Overriding num_gpu_blocks=8192 with
num_gpu_blocks_override=64`` and ``CPU KV cache size: 8,192 tokens, Maximum concurrency for 4,096
tokens per request: 2.00x``; ``sglang-*``: fields of a recorded SGLang ``/get_server_info``).
The expected values below are read off those logs and files by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvbudget.accept.targets.engine_pool import pool_side_by_side
from kvbudget.accept.targets.http import observed_lock_fields
from kvbudget.load.engine_report import build_engine_report, cache_config_labels

FIX = Path(__file__).parent / "fixtures"


def vllm_report():  # type: ignore[no-untyped-def]
    return build_engine_report(
        models=json.loads((FIX / "vllm-0.32.0-cpu-v1-models.json").read_text()),
        version=json.loads((FIX / "vllm-0.32.0-cpu-version.json").read_text()),
        metrics_text=(FIX / "vllm-0.32.0-cpu-metrics-excerpt.prom").read_text(),
    )


def test_vllm_final_resolved_values_match_its_log() -> None:
    r = vllm_report()
    assert r.engine == "vllm" and r.engine_version == "0.32.0"
    assert r.model_id == "tiny" and r.model_root == "/tmp/i13/tiny-llama"
    assert r.max_model_len == 4096
    # "Overriding num_gpu_blocks=8192 with num_gpu_blocks_override=64"
    assert r.num_gpu_blocks == 64 and r.num_gpu_blocks_override == 64
    # "CPU KV cache size: 8,192 tokens, Maximum concurrency for 4,096 tokens per request: 2.00x"
    assert r.kv_cache_size_tokens == 8192 and r.kv_cache_max_concurrency == 2.0
    assert r.block_size == 128  # the CPU backend's default block size
    assert r.kv_cache_memory_bytes == 1 << 30  # VLLM_CPU_KVCACHE_SPACE=1 (GiB)
    assert r.cache_dtype == "auto" and r.enable_prefix_caching is True
    assert r.prefix_caching_hash_algo == "sha256"
    assert r.sliding_window is None  # label "None": not reported as a value
    assert r.sources["num_gpu_blocks"] == "/metrics vllm:cache_config_info num_gpu_blocks"
    assert r.sources["max_model_len"] == "/v1/models max_model_len"


def test_lock_fields_confirmed_from_the_engine_name_their_source() -> None:
    observed = observed_lock_fields(vllm_report())
    assert observed["block_size"][0] == 128
    assert observed["kv_dtype"][0] == "auto"
    assert observed["prefix_caching.enabled"][0] is True
    assert observed["max_model_len"] == (4096, "engine-reported (/v1/models max_model_len)")


def test_pool_side_by_side_blocks_on_a_different_pool() -> None:
    engine = vllm_report().model_dump(mode="json", exclude_none=True)
    planned = {"block_size": 128, "num_blocks": 64, "kv_cache_tokens": 8192, "max_concurrency": 2.0}
    rows, blocking = pool_side_by_side(planned, engine)
    assert [r["match"] for r in rows][:4] == [True] * 4  # kv_dtype, max_model_len: not planned
    assert blocking == []
    rows, blocking = pool_side_by_side({**planned, "num_blocks": 8192}, engine)
    (line,) = blocking
    assert "8192" in line and "64" in line and "num_blocks" in line


def test_sglang_server_info_recorded() -> None:
    info = json.loads((FIX / "sglang-get-server-info-excerpt.json").read_text())
    r = build_engine_report(server_info=info)
    assert r.engine == "sglang"
    assert r.block_size == 1 and r.kv_cache_size_tokens == 20480
    assert r.gpu_memory_utilization == 0.836 and r.enable_prefix_caching is True
    assert r.cache_dtype == "auto" and r.model_root == "qwen/qwen2.5-0.5b-instruct"
    assert r.max_model_len is None  # context_length null: not reported


def test_llamacpp_props() -> None:
    props = {
        "build_info": "b1-0c1e570",
        "total_slots": 4,
        "model_path": "/m/tiny.gguf",
        "default_generation_settings": {"n_ctx": 2048},
    }
    r = build_engine_report(props=props)
    assert r.engine == "llama.cpp" and r.engine_version == "b1-0c1e570"
    assert r.max_model_len == 2048 and r.total_slots == 4


def test_garbage_is_not_a_report() -> None:
    assert cache_config_labels("not prometheus {{{") == {}
    r = build_engine_report(models={"data": "x"}, version=None, metrics_text="")
    assert r.engine is None and r.reported() == {}


def serve_report():  # type: ignore[no-untyped-def]
    """Answers recorded from ``kvbudget serve --model meta-llama/Llama-3.1-8B --gpu h100-sxm``
    (the ``kvbudget-serve-*`` fixtures)."""
    return build_engine_report(
        models=json.loads((FIX / "kvbudget-serve-v1-models.json").read_text()),
        version=json.loads((FIX / "kvbudget-serve-version.json").read_text()),
        metrics_text=(FIX / "kvbudget-serve-metrics-excerpt.prom").read_text(),
    )


def test_kvbudget_serve_reports_its_pool() -> None:
    """Issue #32 item 4: the report showed no engine pool for kvbudget serve although it exports
    ``kvbudget:num_total_blocks`` (26,640 in the recorded answer, the null block included)."""
    r = serve_report()
    assert r.engine == "kvbudget-serve"  # not "vllm": its /version names itself
    assert r.num_gpu_blocks == 26640
    assert r.sources["num_gpu_blocks"] == "/metrics kvbudget:num_total_blocks"


def test_a_served_pool_other_than_the_plans_blocks_acceptance() -> None:
    engine = serve_report().model_dump(mode="json", exclude_none=True)
    rows, blocking = pool_side_by_side({"num_blocks": 27579}, engine)
    assert rows[0]["engine_reported"] == 26640 and rows[0]["match"] is False
    (line,) = blocking
    assert "27579" in line and "26640" in line and "kvbudget:num_total_blocks" in line
