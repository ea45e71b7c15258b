"""Issue 16: model mode works per run of layers, so a 10^8-layer config is exact and cheap.

The config is Gemma 3's shape (1 KV head of 256, bf16, sliding window 512, every 6th layer full)
with 100,000,000 layers: 16,666,666 full layers (i + 1 divisible by 6) and 83,333,334 sliding.
Every expected figure below is worked by hand from those counts; the memory bound is on
tracemalloc's peak (Python allocations), never on time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from kvbudget.capacity.kvbytes import calc_model
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.sim.fromplan import build_replica
from kvbudget.web.app import create_app
from tests.unit.calc.helpers_calc import traced

N = 100_000_000
NUM_FULL = N // 6  # 16,666,666
NUM_SLIDING = N - NUM_FULL  # 83,333,334
ROW = 2 * 256 * 2  # K + V of one KV head of 256 in bf16: 1,024 B per token per layer
# nothing may be allocated per layer: one byte per layer is already 100 MB, and the pure-Python
# build of the simulator's replica peaks near 6 MB where the compiled one stays under 4 MB
PEAK_LIMIT_BYTES = 16 * 1024 * 1024

CONFIG: dict[str, Any] = {
    "model_type": "gemma3_text",
    "architectures": ["Gemma3ForCausalLM"],
    "num_hidden_layers": N,
    "hidden_size": 1152,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "sliding_window": 512,
    "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16",
    "vocab_size": 262144,
    "intermediate_size": 6912,
    "max_position_embeddings": 32768,
}


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("huge") / "config.json"
    path.write_text(json.dumps(CONFIG), encoding="utf-8")
    yield path


def test_calc_vllm_hf_sglang_exact_at_100m_layers(config_path: Path) -> None:
    # vLLM, 4,096 tokens, block 16: a full layer holds 256 blocks of 16 x 1,024 B = 4,194,304 B;
    # a sliding layer frees (4096 - 512) // 16 = 224 blocks and holds 32 = 524,288 B
    vllm_bytes = NUM_FULL * 256 * 16 * ROW + NUM_SLIDING * 32 * 16 * ROW
    # transformers keeps window - 1 = 511 tokens in a sliding layer; SGLang counts full length
    hf_bytes = NUM_FULL * 4096 * ROW + NUM_SLIDING * 511 * ROW
    sglang_bytes = N * 4096 * ROW
    for engine, expected in (("vllm", vllm_bytes), ("hf", hf_bytes), ("sglang", sglang_bytes)):
        result, peak = traced(lambda e=engine: calc_model(str(config_path), engine=e, tokens=4096))
        doc = result.to_dict()
        assert doc["total_bytes"] == expected, engine
        assert [(g["kind"], g["num_layers"]) for g in doc["groups"]] == [
            ("sliding", NUM_SLIDING),
            ("full", NUM_FULL),
        ]
        assert peak < PEAK_LIMIT_BYTES, (engine, peak)
        assert len(json.dumps(doc)) < 100_000
    assert vllm_bytes == 113_595_730_886_656


def test_calc_layer_ranges_are_strided_not_listed(config_path: Path) -> None:
    doc = calc_model(str(config_path), engine="hf", tokens=16).to_dict()
    full = next(g for g in doc["groups"] if g["kind"] == "full")
    # layers 5, 11, ..., 99,999,995 (100,000,000 is 4 past a multiple of 6: the last 4 slide)
    assert full["layer_ranges"] == [[5, 99_999_996, 6]]  # stop: last member + 1
    sliding = next(g for g in doc["groups"] if g["kind"] == "sliding")
    assert sliding["layer_ranges"][:5] == [[j, 99_999_991 + j, 6] for j in range(5)]
    assert sliding["layer_ranges"][5:] == [[99_999_996, 100_000_000]]


def test_plan_vllm_and_sglang_at_100m_layers(config_path: Path) -> None:
    request = PlanRequest(model=str(config_path), gpu="H100-SXM", max_model_len=4096)
    plan, peak = traced(lambda: make_plan(request))
    doc = plan.to_dict()
    assert peak < PEAK_LIMIT_BYTES, peak
    # one layer: q 1152x1024, k and v 1152x256, o 1024x1152, gate_up 1152x13824, down 6912x1152,
    # two norms of 1152; bf16; tied embeddings (one 262,144 x 1,152 copy) and the final norm
    per_layer = 1152 * 1024 * 2 + 1152 * 256 * 2 + 3 * 1152 * 6912 + 2 * 1152
    assert doc["weights"]["total_bytes"] == 2 * (N * per_layer + 262144 * 1152 + 1152)
    assert doc["kv_bytes_per_token_replica"] == N * ROW
    # vLLM's grouping: group_size = the smaller bucket (16,666,666 full layers); the sliding
    # bucket splits strided into cdiv(83,333,334, 16,666,666) = 6 groups of 13,888,889 layers
    groups = [(g["kind"], g["num_layers"], g["num_padding_layers"]) for g in doc["groups"]]
    assert groups == [("sliding", 13_888_889, 2_777_777)] * 6 + [("full", NUM_FULL, 0)]
    assert doc["group_size"] == NUM_FULL and doc["num_padding_layers"] == 6 * 2_777_777
    assert doc["groups"][0]["layer_indices"] is None  # too long to list; ranges instead
    # strided group 0 of the sliding bucket (position k is layer 6 * (k // 5) + k % 5): positions
    # 0, 6, 12, 18, 24 are layers 0, 7, 14, 21, 28, and every 30 positions add 36 layers; the
    # last of 0 + 36m below 99,999,996 is 99,999,972
    assert doc["groups"][0]["layer_ranges"][:2] == [[0, 99_999_973, 36], [7, 99_999_980, 36]]
    assert not doc["fits"]  # 5.4 PB of weights
    sglang = make_plan(request.model_copy(update={"engine": "sglang"})).to_dict()
    assert sglang["kv_bytes_per_token_replica"] == N * ROW


def test_sim_replica_from_a_100m_layer_plan(config_path: Path) -> None:
    page = 16 * ROW  # one block of one layer
    request = PlanRequest(
        model=str(config_path),
        gpu="H100-SXM",
        max_model_len=512,
        kv_cache_memory_bytes=1000 * page * NUM_FULL,  # 1,000 blocks of group_size layers
        weights_bytes=1,
    )
    built, peak = traced(lambda: build_replica(request))
    # one 512-token request holds 32 blocks of the full group and 33 of each sliding one
    assert built.config.num_gpu_blocks == 1000
    assert peak < PEAK_LIMIT_BYTES, peak


def test_web_api_model_at_100m_layers() -> None:
    client = TestClient(create_app(), base_url="http://127.0.0.1:8765")
    payload = {"gpu": "H100-SXM", "max_model_len": 4096, "config": CONFIG}
    response, peak = traced(lambda: client.post("/api/model", json=payload))
    assert response.status_code == 200, response.text
    body = response.json()
    assert (
        body["raw"]["calc"]["total_bytes"]
        == NUM_FULL * 256 * 16 * ROW + NUM_SLIDING * 32 * 16 * ROW
    )
    assert peak < 64 * 1024 * 1024, peak  # the app's own request handling included (< 1 B a layer)


def test_layer_count_bound_is_the_model_dimension_bound(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIG, "num_hidden_layers": 2**31}), encoding="utf-8")
    with pytest.raises(
        Exception, match=r"num_hidden_layers: 2147483648 is beyond the limit of 2,147,483,647"
    ):
        calc_model(str(path), engine="vllm", tokens=16)


def test_jamba_attention_every_8th_at_100m_layers(tmp_path: Path) -> None:
    # Jamba's defaults: attention where i % 8 == 4 (12,500,000 layers), Mamba elsewhere
    config = {
        "model_type": "jamba",
        "architectures": ["JambaForCausalLM"],
        "num_hidden_layers": N,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "torch_dtype": "bfloat16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    result, peak = traced(lambda: calc_model(str(path), engine="hf", tokens=4096))
    # transformers: K + V of 8 heads x 128 in bf16 = 4,096 B per token per attention layer; a
    # Mamba layer keeps a bf16 conv (8,192 channels x kernel 4) and an fp32 state (8,192 x 16)
    attention, mamba = N // 8, N - N // 8
    expected = attention * 4096 * 4096 + mamba * (8192 * 4 * 2 + 8192 * 16 * 4)
    assert result.to_dict()["total_bytes"] == expected
    assert peak < PEAK_LIMIT_BYTES, peak


def test_falcon_h1_parallel_hybrid_at_100m_layers(tmp_path: Path) -> None:
    catalog = Path(__file__).resolve().parents[3] / "src" / "kvbudget" / "spec" / "catalog"
    raw = json.loads((catalog / "models" / "transformers-defaults--falcon_h1.json").read_text())
    config = {**raw.get("config", raw), "num_hidden_layers": N}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    result, peak = traced(lambda: calc_model(str(path), engine="hf", tokens=4096))
    # every layer: K + V of 8 heads x 128 in bf16 (4,096 B per token) and a Mamba-2 state: bf16
    # conv of (1,024 + 2 x 1 x 256) channels x kernel 4, fp32 ssm of 128 heads x 8 x 256
    per_layer = 4096 * 4096 + (1024 + 2 * 256) * 4 * 2 + 128 * 8 * 256 * 4
    assert result.to_dict()["total_bytes"] == N * per_layer
    assert peak < PEAK_LIMIT_BYTES, peak
    # vLLM splits each hybrid run into its attention and mamba specs per run: mamba page
    # 3 x 1,536 x 2 + 128 x 8 x 256 x 2 = 533,504 B raises the attention block to
    # 16 x cdiv(533,504, 16 x 4,096) = 144 tokens (page 589,824 B, the mamba page padded to it);
    # 4,096 tokens hold cdiv(4,096, 144) = 29 attention blocks and one state page per layer
    vllm, peak = traced(lambda: calc_model(str(path), engine="vllm", tokens=4096))
    assert vllm.to_dict()["total_bytes"] == N * (29 + 1) * 144 * 4096
    assert peak < PEAK_LIMIT_BYTES, peak
