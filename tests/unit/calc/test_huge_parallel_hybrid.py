"""Falcon-H1 at 100,000,000 layers: hybrid layers split into attention and state parts per run.

The config is the falcon_h1 case recorded with vLLM 0.32 (tests/peer/fixtures/
vllm_pools_0.32.0.json) with ``num_hidden_layers`` raised to 10^8. Per decoder layer, by hand
(as in test_calc_parallel_hybrid.py): attention 2 KV heads x (64 + 64) x 2 B = 512 B per token;
conv channels 1,024 + 2 x 256 = 1,536; vLLM/SGLang conv state 3 x 1,536 x 2 B = 9,216 B,
transformers' 4 x 1,536 x 2 B = 12,288 B; ssm state 128 x 8 x 256 = 262,144 elements (524,288 B
in bf16, 1,048,576 B in float32). Every expected figure is that arithmetic times the layer
count; the memory bound is tracemalloc's peak (Python allocations), never time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvbudget.capacity.kvbytes import calc_model
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from tests.unit.calc.helpers_calc import traced

N = 100_000_000
PEAK_LIMIT_BYTES = 4 * 1024 * 1024
FIXTURE = Path(__file__).resolve().parents[2] / "peer" / "fixtures" / "vllm_pools_0.32.0.json"
CONFIG: dict[str, Any] = {
    **json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]["falcon_h1"]["config"],
    "num_hidden_layers": N,
}
#: vLLM: attention block 16 x cdiv(9,216 + 524,288, 16 x 512) = 1,056 tokens; page 540,672 B,
#: the mamba page padded to it
VLLM_BLOCK = 16 * -(-(9_216 + 524_288) // (16 * 512))
VLLM_PAGE = VLLM_BLOCK * 512


def _config(tmp_path: Path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG), encoding="utf-8")
    return str(path)


def test_calc_splits_each_hybrid_run_into_both_parts_at_100m_layers(tmp_path: Path) -> None:
    path = _config(tmp_path)
    assert VLLM_BLOCK == 1_056
    expected = {
        # one 48-token sequence: one attention block and one padded state page per layer
        "vllm": (N * 2 * VLLM_PAGE, ["full", "mamba"]),
        # transformers: 48 tokens of K/V, its 4-column conv and a float32 ssm state
        "hf": (N * (512 * 48 + 12_288 + 1_048_576), ["full", "state"]),
        # token pool at full length; state pool bf16 conv + float32 ssm
        "sglang": (N * (512 * 48 + 9_216 + 1_048_576), ["full", "state"]),
        # 256 cells of 512 B; f32 recurrent conv (3 x 1,536) and state
        "llamacpp": (N * (256 * 512 + (3 * 1_536 + 262_144) * 4), ["full", "state"]),
    }
    for engine, (total, kinds) in expected.items():
        result, peak = traced(lambda e=engine: calc_model(path, engine=e, tokens=48))
        doc = result.to_dict()
        assert doc["total_bytes"] == total, engine
        assert [(g["kind"], g["num_layers"]) for g in doc["groups"]] == [(k, N) for k in kinds]
        assert [g["layer_ranges"] for g in doc["groups"]] == [[[0, N]], [[0, N]]], engine
        assert peak < PEAK_LIMIT_BYTES, (engine, peak)
    assert expected["hf"][0] == 108_544_000_000_000  # 10^8 x 1,085,440


def test_plan_vllm_and_sglang_hybrid_at_100m_layers(tmp_path: Path) -> None:
    # room for 1,000 blocks: each block is one page in each of the group_size layers
    kv_bytes = 1_000 * VLLM_PAGE * N
    request = PlanRequest(
        model=_config(tmp_path),
        gpu="H100-SXM",
        max_model_len=4096,
        kv_cache_memory_bytes=kv_bytes,
    )
    plan, peak = traced(lambda: make_plan(request))
    assert peak < PEAK_LIMIT_BYTES, peak
    doc = plan.to_dict()
    # vLLM groups the attention parts and the mamba parts separately: two buckets of 10^8,
    # group_size 10^8, one group each, no padding
    groups = [(g["kind"], g["num_layers"], g["num_padding_layers"]) for g in doc["groups"]]
    assert groups == [("full", N, 0), ("mamba", N, 0)]
    assert doc["group_size"] == N and doc["num_blocks"] == 1_000
    assert doc["kv_bytes_per_token_replica"] == N * 512
    # per layer: attention 196,608, Mamba-2 in_proj 688,128 and out_proj 262,144, MLP 393,216,
    # 2 norms of 256; embeddings and lm_head 2 x 1,024 x 256 and the final norm; bf16
    per_layer = 196_608 + 688_128 + 262_144 + 393_216 + 2 * 256
    assert doc["weights"]["total_bytes"] == 2 * (N * per_layer + 2 * 1024 * 256 + 256)
    sglang = make_plan(request.model_copy(update={"engine": "sglang"})).to_dict()
    # SGLang's token pool cell: 10^8 attention parts x 512 B per token, no hybrid block raise
    assert sglang["kv_bytes_per_token_replica"] == N * 512
    # SGLang 0.5.4 (the default; model_executor/model_runner.py lines 1433-1480) first gives the
    # mamba state pool rest x 0.9 / 1.9 in whole states of N x (9,216 + 1,048,576) B (bf16 conv,
    # float32 ssm): 5.40672e16 x 0.9 / 1.9 / 1.057792e14 = 242.1 -> 242 states; the token pool
    # gets (5.40672e16 - 242 x 1.057792e14) // (N x 512) = 2.84686336e16 // 5.12e10 = 556,028
    per_req = N * (9_216 + 1_048_576)
    assert kv_bytes == 54_067_200_000_000_000
    assert (kv_bytes - 242 * per_req) // (N * 512) == 556_028
    assert sglang["sglang"]["max_mamba_cache_size"] == 242
    assert sglang["kv_cache_tokens"] == 556_028
