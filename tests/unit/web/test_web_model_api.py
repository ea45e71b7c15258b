"""Model mode and chart through the API. Expected bytes are worked by hand from the configs:

Llama-3.1-8B: 32 layers, 8 KV heads, head_dim 128, bf16 -> 2*32*8*128*2 = 131,072 B per token.
Gemma-2-9B: 42 layers alternating sliding (window 4096) / full, 8 KV heads, head_dim 256, bf16
-> 2*8*256*2 = 8,192 B per token per layer; 21 layers keep at most 4096 tokens.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from .conftest import post_ok as post

LLAMA = "meta-llama/Llama-3.1-8B"
LLAMA_TOKEN_BYTES = 2 * 32 * 8 * 128 * 2
GEMMA2_LAYER_TOKEN_BYTES = 2 * 8 * 256 * 2


def test_llama_vllm_figures(client: TestClient) -> None:
    body = post(
        client, "/api/model", model=LLAMA, engine="vllm", gpu="H100-SXM", max_model_len=8192, seqs=3
    )
    raw = body["raw"]
    assert body["status"] == "exact"  # dense GQA, bf16, no blocks padding at 8192 (= 512 x 16)
    calc = raw["calc"]
    assert calc["bytes_per_token"] == LLAMA_TOKEN_BYTES
    assert calc["total_bytes"] == 3 * LLAMA_TOKEN_BYTES * 8192
    figures = {row["key"]: row["bytes"] for row in body["figures"]}
    assert figures["total"] == 3 * LLAMA_TOKEN_BYTES * 8192
    assert raw["structural"]["bytes_per_token"] == LLAMA_TOKEN_BYTES
    assert raw["structural"]["bytes_per_sequence"] == LLAMA_TOKEN_BYTES * 8192
    assert raw["structural"]["total_bytes"] == 3 * LLAMA_TOKEN_BYTES * 8192
    plan = raw["plan"]
    assert plan["kv_bytes_per_token_per_rank"] == LLAMA_TOKEN_BYTES
    [group] = plan["groups"]
    assert group["kind"] == "full"
    assert group["num_layers"] == 32
    # one block of one layer: 16 tokens x 2 x 8 heads x 128 x 2 bytes
    assert group["page_size_bytes"] == 16 * 2 * 8 * 128 * 2
    assert plan["fits"] is True
    # displayed rows carry the same numbers
    names = [row["name"] for row in body["budgets"]]
    assert names[0].startswith("1. structural")
    assert names[1].startswith("2. engine cache pool")
    assert names[2].startswith("3. device peak")
    assert f"{3 * LLAMA_TOKEN_BYTES * 8192:,}" in body["budgets"][0]["value"]
    assert body["groups"]["rows"][0][1] == "full"
    ledger_fields = [row[0] for row in body["ledger"]["rows"]]
    assert "num_key_value_heads" in ledger_fields


@pytest.mark.parametrize(("tp", "heads_per_rank"), [(2, 4), (8, 1), (16, 1)])
def test_tensor_parallel_splits_or_replicates_kv_heads(
    client: TestClient, tp: int, heads_per_rank: int
) -> None:
    body = post(
        client, "/api/model", model=LLAMA, engine="vllm", gpu="H100-SXM", tp=tp, max_model_len=8192
    )
    assert body["raw"]["plan"]["kv_bytes_per_token_per_rank"] == 2 * 32 * heads_per_rank * 128 * 2


def test_engine_without_planner_gives_structural_only(client: TestClient) -> None:
    body = post(client, "/api/model", model=LLAMA, engine="llamacpp", max_model_len=4096)
    assert body["raw"]["plan"] is None
    assert body["raw"]["structural"]["bytes_per_sequence"] == LLAMA_TOKEN_BYTES * 4096
    assert body["pool"][0]["value"] == "not planned"
    chart = post(client, "/api/chart", model=LLAMA, engine="llamacpp", max_model_len=4096)
    assert chart["has_concurrency"] is False
    assert all(p["max_concurrency"] is None for p in chart["points"])


def test_chart_points_for_a_sliding_window_model(client: TestClient) -> None:
    body = post(
        client,
        "/api/chart",
        model="google/gemma-2-9b",
        engine="vllm",
        gpu="H100-SXM",
        max_model_len=8192,
    )
    points = {p["context_tokens"]: p for p in body["points"]}
    assert list(points)[-1] == 8192
    # at or below the window every layer keeps every token
    assert points[4096]["kv_bytes"] == 42 * GEMMA2_LAYER_TOKEN_BYTES * 4096
    # above it, the 21 sliding layers stop at 4096
    assert points[8192]["kv_bytes"] == 21 * GEMMA2_LAYER_TOKEN_BYTES * (8192 + 4096)
    concurrency = [p["max_concurrency"] for p in body["points"]]
    assert all(c is not None and c > 0 for c in concurrency)
    assert concurrency == sorted(concurrency, reverse=True)
    assert body["label"] == "computed"


def test_chart_for_dense_model_is_linear(client: TestClient) -> None:
    body = post(
        client, "/api/chart", model=LLAMA, engine="vllm", gpu="H100-SXM", max_model_len=16384
    )
    for point in body["points"]:
        assert point["kv_bytes"] == LLAMA_TOKEN_BYTES * point["context_tokens"]


def test_pasted_config_resolves_and_is_ledgered(client: TestClient) -> None:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "hidden_size": 512,
        "intermediate_size": 1024,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
        "torch_dtype": "float16",
    }
    body = post(client, "/api/model", config=config, engine="vllm", gpu="L4", max_model_len=2048)
    # head_dim derived = 512 / 8 = 64; 2 * 4 layers * 2 heads * 64 * 2 bytes
    assert body["raw"]["structural"]["bytes_per_token"] == 2 * 4 * 2 * 64 * 2
    head_dim = [row for row in body["ledger"]["rows"] if row[0] == "head_dim"]
    assert head_dim and head_dim[0][2] == "derived"


def test_unknown_architecture_is_not_applicable(client: TestClient) -> None:
    body = post(
        client, "/api/model", config={"model_type": "made_up_arch"}, engine="vllm", gpu="H100-SXM"
    )
    # an unknown model type is read by its fields (issue 14); with none, it names what to supply
    assert body["status"] == "not_applicable"
    assert "num_hidden_layers" in body["status_note"]
    assert body["budgets"] == []


def test_overrides_are_applied_like_set(client: TestClient) -> None:
    body = post(
        client,
        "/api/model",
        model=LLAMA,
        engine="vllm",
        gpu="H100-SXM",
        max_model_len=8192,
        overrides=["num_key_value_heads=4"],
    )
    assert body["raw"]["structural"]["bytes_per_token"] == LLAMA_TOKEN_BYTES // 2
    row = next(r for r in body["ledger"]["rows"] if r[0] == "num_key_value_heads")
    assert row[2] == "user"


@pytest.mark.parametrize(
    ("body", "field", "kind"),
    [
        ({"model": "no-such/model"}, "model", "SpecError"),
        ({"model": "/etc/passwd"}, "model", "SpecError"),
        ({"model": LLAMA, "config": {"model_type": "llama"}}, "model", "ConfigError"),
        ({}, "model", "ConfigError"),
        ({"model": LLAMA, "gpu": "Voodoo-5"}, "gpu", "ConfigError"),
        ({"model": LLAMA, "tp": 0}, "tp", "ConfigError"),
        ({"model": LLAMA, "gpu_memory_utilization": 1.5}, "gpu_memory_utilization", "ConfigError"),
        ({"model": LLAMA, "kv_dtype": "fp3"}, "kv_dtype", "ConfigError"),
        ({"model": LLAMA, "engine": "tgi"}, "engine", "ConfigError"),
        ({"model": LLAMA, "engine_version": "latest"}, "engine_version", "ConfigError"),
        ({"model": LLAMA, "gpu_memory": "eighty"}, "gpu_memory", "ConfigError"),
        ({"config": [1, 2]}, "config", "ConfigError"),
        ({"model": LLAMA, "overrides": ["novalue"]}, "overrides", "ConfigError"),
    ],
)
def test_bad_model_input_is_one_line_400(
    client: TestClient, body: dict[str, Any], field: str, kind: str
) -> None:
    payload = {"gpu": "H100-SXM", "max_model_len": 4096, **body}
    response = client.post("/api/model", json=payload)
    assert response.status_code == 400, response.text
    data = response.json()
    assert data["error"].startswith(f"{kind}: "), data
    assert data.get("field") == field, data
    assert "\n" not in data["error"]
    assert "root:" not in data["error"]


def test_meta_lists_catalog_gpus_and_dtypes(client: TestClient) -> None:
    meta = client.get("/api/meta").json()
    ids = [m["id"] for m in meta["models"]]
    assert LLAMA in ids
    assert any(g["id"] == "H100-SXM" for g in meta["gpus"])
    assert "fp8" in meta["kv_dtypes_by_engine"]["vllm"]
    assert "q8_0" in meta["kv_dtypes_by_engine"]["llamacpp"]
    labels = {choice["id"]: choice["label"] for choice in meta["engine_choices"]}
    assert labels == {
        "hf": "Hugging Face transformers",
        "vllm": "vLLM",
        "sglang": "SGLang",
        "llamacpp": "llama.cpp",
    }


def test_sliding_model_is_structural_reference_with_the_reason(client: TestClient) -> None:
    body = post(
        client,
        "/api/model",
        model="google/gemma-2-9b",
        engine="vllm",
        gpu="H100-SXM",
        max_model_len=8192,
    )
    assert body["status"] == "structural_reference"
    failing = {a["key"] for a in body["assumptions"] if not a["holds"]}
    assert "no_sliding_window" in failing
    assert "no_sliding_window" in body["status_note"]
    kinds = {row[1] for row in body["groups"]["rows"]}
    assert kinds == {"sliding", "full"}


def test_gpu_memory_override_reaches_the_plan(client: TestClient) -> None:
    body = post(
        client,
        "/api/model",
        model=LLAMA,
        engine="vllm",
        gpu="H100-SXM",
        gpu_memory="40GiB",
        max_model_len=8192,
    )
    assert body["raw"]["plan"]["gpu"]["memory_bytes"] == 40 * 2**30
    assert body["raw"]["plan"]["breakdown"][0]["total_bytes"] == 40 * 2**30


def _run_cli(line: str) -> dict[str, Any]:
    import json
    import shlex
    import subprocess
    import sys

    argv = shlex.split(line)
    assert argv[0] == "kvbudget"
    proc = subprocess.run(
        [sys.executable, "-m", "kvbudget", *argv[1:], "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def test_the_shown_command_lines_give_the_same_figures(client: TestClient) -> None:
    body = post(
        client,
        "/api/model",
        model="google/gemma-2-9b",
        engine="vllm",
        gpu="H100-SXM",
        tp=2,
        max_model_len=8192,
        seqs=4,
        gpu_memory_utilization=0.85,
    )
    calc_line, plan_line = body["cli"]
    calc_doc = _run_cli(calc_line)
    assert calc_doc["total_bytes"] == body["raw"]["calc"]["total_bytes"]
    assert calc_doc["status"] == body["status"]
    plan_doc = _run_cli(plan_line)
    plan = plan_doc.get("plan", plan_doc)
    assert plan["num_blocks"] == body["raw"]["plan"]["num_blocks"]
    assert plan["kv_cache_tokens"] == body["raw"]["plan"]["kv_cache_tokens"]


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        (
            {"model_type": "llama", "num_hidden_layers": 2**31, "hidden_size": 4096},
            "2,147,483,647",
        ),
        (
            {
                "model_type": "gemma3",
                "text_config": {"model_type": "gemma3_text", "num_hidden_layers": 1e18},
            },
            "positive integer",
        ),
    ],
)
def test_pasted_huge_layer_count_is_refused_in_one_line(
    client: TestClient, config: dict[str, Any], needle: str
) -> None:
    """Issue 16: a pasted 2^31-layer config is refused by its documented bound (docs/limits.md:
    2^31 - 1 decoder layers, like every model dimension); 10^8 layers are answered
    (tests/unit/calc/test_huge_layer_counts.py)."""
    payload = {
        "gpu": "H100-SXM",
        "max_model_len": 4096,
        "config": {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32, **config},
    }
    response = client.post("/api/model", json=payload)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert "num_hidden_layers" in error and needle in error and "\n" not in error
