"""Model mode's ``max_model_len: auto`` and ``kv_cache_memory`` against ``kvbudget plan --json``.

Expected figures come from running the CLI in a subprocess with the same flags, written out
here by hand (not the command line the web shows), plus one hand-worked auto-fit length.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from fastapi.testclient import TestClient

from .conftest import post_ok as post

LLAMA = "meta-llama/Llama-3.1-8B"
#: K and V x 32 layers x 8 KV heads x head dim 128 x 2 bytes (bf16)
LLAMA_TOKEN_BYTES = 2 * 32 * 8 * 128 * 2
GiB = 2**30
PLAN_KEYS = (
    "max_model_len",
    "num_blocks",
    "kv_cache_tokens",
    "max_concurrency",
    "available_kv_bytes",
    "fits",
    "log_lines",
)


def cli_plan(*flags: str) -> dict[str, Any]:
    """``kvbudget plan ... --json`` in a subprocess; the plan figures."""
    proc = subprocess.run(
        [sys.executable, "-m", "kvbudget", "plan", *flags, "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def same_plan(web: dict[str, Any], cli: dict[str, Any]) -> None:
    for key in PLAN_KEYS:
        assert web[key] == cli[key], key


def pool_row(body: dict[str, Any], prefix: str) -> dict[str, Any]:
    rows = [row for row in body["pool"] if row["name"].startswith(prefix)]
    assert len(rows) == 1, body["pool"]
    row: dict[str, Any] = rows[0]
    return row


def test_auto_fit_with_kv_cache_memory_matches_the_cli(client: TestClient) -> None:
    body = post(
        client,
        "/api/model",
        model=LLAMA,
        engine="vllm",
        gpu="H100-SXM",
        max_model_len="auto",
        kv_cache_memory="4GiB",
    )
    cli = cli_plan(
        "--model",
        LLAMA,
        "--engine",
        "vllm",
        "--gpu",
        "H100-SXM",
        "--max-model-len",
        "auto",
        "--kv-cache-memory",
        "4GiB",
    )
    same_plan(body["raw"]["plan"], cli)
    # by hand: 4 GiB of KV at 128 KiB per token holds 32,768 tokens < the model's 131,072
    assert 4 * GiB // LLAMA_TOKEN_BYTES == 32768
    assert body["max_model_len"] == 32768
    assert body["max_model_len_source"] == "auto"
    assert body["kv_memory_source"] == "kv_cache_memory"
    length = pool_row(body, "max model length")
    assert length["name"] == "max model length (auto-fitted)"
    assert length["value"] == "32,768 tokens"
    assert "131072" in length["note"]
    memory = pool_row(body, "KV memory")
    assert "--kv-cache-memory" in memory["note"]
    assert f"{4 * GiB:,}" in memory["value"]
    plan_line = body["cli"][1]
    assert "--max-model-len auto" in plan_line
    assert f"--kv-cache-memory {4 * GiB}" in plan_line


def test_shown_plan_line_reproduces_the_auto_fit(client: TestClient) -> None:
    import shlex

    body = post(
        client,
        "/api/model",
        model=LLAMA,
        engine="vllm",
        gpu="H100-SXM",
        gpu_memory="24GiB",
        max_model_len="auto",
    )
    argv = shlex.split(body["cli"][1])
    assert argv[:2] == ["kvbudget", "plan"]
    shown = cli_plan(*argv[2:])
    independent = cli_plan(
        "--model", LLAMA, "--gpu", "H100-SXM", "--gpu-memory", "24GiB", "--max-model-len", "auto"
    )
    same_plan(body["raw"]["plan"], independent)
    same_plan(shown, independent)
    assert body["kv_memory_source"] == "gpu_memory_utilization"
    assert independent["max_model_len"] < 131072  # the 24 GiB card forces a shorter length
    assert pool_row(body, "max model length")["value"] == f"{independent['max_model_len']:,} tokens"


def test_model_maximum_kept_when_it_fits(client: TestClient) -> None:
    body = post(client, "/api/model", model=LLAMA, gpu="H100-SXM", max_model_len="-1")
    cli = cli_plan("--model", LLAMA, "--gpu", "H100-SXM", "--max-model-len", "auto")
    same_plan(body["raw"]["plan"], cli)
    assert cli["max_model_len"] == 131072
    assert body["max_model_len_source"] == "auto"
    assert "kept" in pool_row(body, "max model length")["note"]


def test_sglang_kv_cache_memory_matches_the_cli(client: TestClient) -> None:
    body = post(
        client,
        "/api/model",
        model=LLAMA,
        engine="sglang",
        gpu="H100-SXM",
        max_model_len=8192,
        kv_cache_memory="8GiB",
    )
    cli = cli_plan(
        "--model",
        LLAMA,
        "--engine",
        "sglang",
        "--gpu",
        "H100-SXM",
        "--max-model-len",
        "8192",
        "--kv-cache-memory",
        "8GiB",
    )
    same_plan(body["raw"]["plan"], cli)
    assert body["kv_memory_source"] == "kv_cache_memory"
    assert "--kv-cache-memory 8589934592" in body["cli"][1]
    assert "--gpu-memory-utilization" not in body["cli"][1]  # plan refuses it with sglang


def test_chart_ends_at_the_auto_fitted_length(client: TestClient) -> None:
    chart = post(
        client,
        "/api/chart",
        model=LLAMA,
        engine="vllm",
        gpu="H100-SXM",
        max_model_len="auto",
        kv_cache_memory="4GiB",
    )
    points = {p["context_tokens"]: p for p in chart["points"]}
    assert max(points) == 32768
    for num_tokens in (16384, 32768):
        cli = cli_plan(
            "--model",
            LLAMA,
            "--gpu",
            "H100-SXM",
            "--max-model-len",
            str(num_tokens),
            "--kv-cache-memory",
            "4GiB",
        )
        assert points[num_tokens]["max_concurrency"] == cli["max_concurrency"]
        assert points[num_tokens]["kv_bytes"] == num_tokens * LLAMA_TOKEN_BYTES


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kv_cache_memory": "lots"}, "kv_cache_memory"),
        ({"kv_cache_memory": "0"}, "kv_cache_memory"),
        ({"kv_cache_memory": "8GiB", "engine": "llamacpp"}, "kv_cache_memory"),
        ({"max_model_len": "auto", "engine": "sglang"}, "max_model_len"),
        ({"max_model_len": "auto", "engine": "hf"}, "max_model_len"),
        ({"max_model_len": "automatic"}, "max_model_len"),
    ],
)
def test_bad_auto_or_kv_memory_is_one_line_400(
    client: TestClient, body: dict[str, Any], field: str
) -> None:
    payload = {"model": LLAMA, "gpu": "H100-SXM", "max_model_len": 4096, **body}
    for path in ("/api/model", "/api/chart"):
        response = client.post(path, json=payload)
        assert response.status_code == 400, response.text
        data = response.json()
        assert data["error"].startswith("ConfigError: "), data
        assert data.get("field") == field, data
        assert field in data["error"]
        assert "\n" not in data["error"]
