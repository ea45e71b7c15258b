"""Falcon-H1: every decoder layer holds attention K/V *and* a Mamba-2 state (parallel hybrid).

The config is the one recorded with vLLM 0.32's CPU engine (tests/peer/fixtures/
vllm_pools_0.32.0.json): 8 layers; attention 4 heads, 2 KV heads, head_dim 256 / 4 = 64, bf16;
Mamba-2 mamba_d_ssm 1024, 1 group, d_state 256, 128 heads of d_head 8, d_conv 4. By hand, per
layer:

* attention: 2 KV heads x (64 + 64) x 2 B = 512 B per token;
* conv channels: 1024 + 2 x 1 x 256 = 1,536;
* vLLM/SGLang conv state (d_conv - 1) x 1,536 x 2 B = 9,216; transformers keeps d_conv columns:
  1,536 x 4 x 2 B = 12,288;
* ssm state 128 x 8 x 256 = 262,144 elements: 524,288 B in bf16, 1,048,576 B in float32.

Expected figures below are worked from these by hand (never read from kvbudget).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.hf import hf_layout
from kvbudget.capacity.layouts.llamacpp import llamacpp_layout
from kvbudget.capacity.layouts.sglang import sglang_layout
from kvbudget.capacity.layouts.vllm import vllm_layout
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.capacity.weights import compute_weights
from kvbudget.errors import SpecError
from kvbudget.spec.layers import FullAttention, ParallelHybrid, cache_parts
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model
from kvbudget.spec.state_layers import StateLayer
from kvbudget.units import GiB

FIXTURE = Path(__file__).resolve().parents[2] / "peer" / "fixtures" / "vllm_pools_0.32.0.json"
CONFIG: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]["falcon_h1"][
    "config"
]


def spec_of(tmp_path: Path, **changes: Any) -> ModelSpec:
    config = {**CONFIG, **changes}
    for key in [k for k, v in changes.items() if v is ...]:
        del config[key]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    resolved = resolve_model(str(path))
    assert resolved.spec is not None, resolved.reason
    return resolved.spec


def test_every_decoder_layer_is_one_hybrid_layer_with_both_parts(tmp_path: Path) -> None:
    spec = spec_of(tmp_path)
    assert spec.num_layers == 8 and spec.kind_counts() == {"hybrid": 8}
    assert spec.rules_verified and spec.num_kv_heads() == 2
    layer = spec.layers[3]
    assert isinstance(layer, ParallelHybrid)
    assert layer.attention == FullAttention(3, 2, 64)
    assert layer.state == StateLayer(
        3,
        "mamba2",
        conv_kernel=4,
        intermediate_size=1024,
        state_size=256,
        n_groups=1,
        num_heads=128,
        head_dim=8,
    )
    moved = replace(layer, layer_index=5)  # both parts move with the decoder layer
    assert (moved.attention.layer_index, moved.state.layer_index) == (5, 5)
    parts = cache_parts(spec.layers)
    assert [p.kind for p in parts[:4]] == ["full", "state", "full", "state"]
    assert [p.layer_index for p in parts[:4]] == [0, 0, 1, 1]
    types = spec.ledger_entry("layer_types")
    assert types is not None and types.value == "hybrid x8"


def test_config_class_rules_for_omitted_and_auto_fields(tmp_path: Path) -> None:
    """FalconH1Config: mamba_d_ssm null -> mamba_expand x hidden_size (2 x 256 = 512);
    mamba_d_head "auto" -> 512 // 128 heads = 4; num_key_value_heads absent -> 8, null -> the
    query heads (16 here, head_dim 256 / 16 = 16)."""
    spec = spec_of(tmp_path, mamba_d_ssm=None, mamba_d_head="auto", num_attention_heads=16)
    layer = spec.layers[0]
    assert isinstance(layer, ParallelHybrid)
    assert (layer.state.intermediate_size, layer.state.head_dim) == (512, 4)
    assert layer.state.conv_channels() == 512 + 2 * 1 * 256
    assert layer.attention == FullAttention(0, 2, 16)
    absent = spec_of(tmp_path, num_attention_heads=16, num_key_value_heads=...)
    assert absent.num_kv_heads() == 8
    null = spec_of(tmp_path, num_attention_heads=16, num_key_value_heads=None)
    assert null.num_kv_heads() == 16


def test_kv_heads_that_do_not_divide_the_query_heads_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="num_key_value_heads: 3 does not divide"):
        spec_of(tmp_path, num_key_value_heads=3)


def test_hf_layout_counts_both_parts_of_each_layer(tmp_path: Path) -> None:
    # 8 x (512 x 48 + 12,288 + 1,048,576) = 8 x 1,085,440
    layout = hf_layout(spec_of(tmp_path), tokens=48, seqs=1)
    assert layout.total_bytes == 8 * (512 * 48 + 12_288 + 1_048_576) == 8_683_520
    groups = layout.stages[0].groups
    assert [(g.kind, g.num_layers) for g in groups] == [("full", 8), ("state", 8)]
    assert layout.stages[0].layer_end == 8  # decoder layers, not cache entries


def test_vllm_layout_raises_the_attention_block_and_pads_the_mamba_page(tmp_path: Path) -> None:
    # mamba page (conv bf16 + ssm in the model dtype): 9,216 + 524,288 = 533,504 B;
    # attention block 16 x cdiv(533,504, 16 x 512) = 16 x 66 = 1,056 tokens, page 540,672 B;
    # one sequence of 48 tokens: one attention block + one (padded) state page per layer.
    layout = vllm_layout(spec_of(tmp_path), tokens=48, seqs=1)
    assert layout.block_size == 1_056
    assert layout.total_bytes == 8 * 2 * 1_056 * 512 == 8_650_752
    assert [(g.kind, g.num_layers) for g in layout.stages[0].groups] == [
        ("full", 8),
        ("mamba", 8),
    ]


def test_sglang_layout_token_pool_and_state_pool(tmp_path: Path) -> None:
    # token pool 8 x 512 B x 48 = 196,608; state pool 8 x (9,216 + 1,048,576 float32)
    layout = sglang_layout(spec_of(tmp_path), tokens=48, seqs=1)
    assert layout.total_bytes == 8 * 512 * 48 + 8 * (9_216 + 1_048_576) == 8_658_944


def test_llamacpp_layout_kv_cells_and_f32_recurrent_state(tmp_path: Path) -> None:
    # -c pads to 256 cells; K and V f16 rows of 2 x 64 = 128 elements: 512 B per cell per layer;
    # recurrent f32: (3 x 1,536 + 262,144) x 4 B per layer
    layout = llamacpp_layout(spec_of(tmp_path), tokens=48, seqs=1)
    assert layout.total_bytes == 8 * 256 * 512 + 8 * (3 * 1_536 + 262_144) * 4 == 9_584_640


def _plan(tmp_path: Path, **fields: Any) -> Any:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG), encoding="utf-8")
    request = PlanRequest(
        model=str(path),
        gpu_memory_bytes=64 * GiB,
        kv_cache_memory_bytes=GiB,
        weights_bytes=0,
        max_model_len=4096,
        **fields,
    )
    return make_plan(request, resolve_model(str(path)).spec)


def test_vllm_plan_pipeline_stages_hold_both_parts_of_their_layers(tmp_path: Path) -> None:
    """pp=2: each worker holds 4 decoder layers, so 4 attention and 4 mamba specs; the two
    groups of 8 project to 4 layers each, and num_blocks = 1 GiB // page // 4. With vLLM 0.32
    the block is aligned to the CPU-style 128 given here: 128 x cdiv(533,504, 128 x 512) = 1,152
    tokens, page 1,152 x 512 = 589,824 B; 1,073,741,824 // 589,824 // 4 = 455."""
    plan = _plan(tmp_path, engine="vllm", engine_version="0.32.0", pp=2, block_size=128)
    assert [g.block_size for g in plan.groups] == [1_152, 1_152]
    assert [r.group_size for r in plan.ranks] == [4, 4]
    assert plan.num_blocks == 1_073_741_824 // 589_824 // 4 == 455


def test_sglang_plan_cell_is_per_token_not_the_raised_vllm_block(tmp_path: Path) -> None:
    """SGLang's token pool cell is 8 layers x 512 B = 4,096 B per token, whatever block vLLM's
    hybrid rule would give the attention layers. Before it, SGLang (0.5.4, the default,
    ``model_executor/model_runner.py`` lines 1433-1480) gives the mamba state pool
    ``rest x 0.9 / 1.9`` = 508,614,548.2 B in whole states of 8 x (9,216 + 1,048,576) =
    8,462,336 B (bf16 conv, float32 ssm): 60 states, 507,740,160 B; the token pool gets
    (1,073,741,824 - 507,740,160) // 4,096 = 566,001,664 // 4,096 = 138,184 tokens; K is
    138,184 x 8 x 256 B = 283,000,832 B = 0.26 GiB (SGLang prints GiB as "GB")."""
    plan = _plan(tmp_path, engine="sglang")
    assert plan.kv_bytes_per_token_per_rank == 4_096
    assert plan.sglang is not None
    assert plan.sglang.mamba_state_bytes_per_request == 8 * (9_216 + 1_048_576)
    assert plan.sglang.max_mamba_cache_size == 60
    assert (GiB - 60 * 8_462_336) // 4_096 == 138_184
    assert plan.kv_cache_tokens == 138_184
    assert "K size: 0.26 GB, V size: 0.26 GB" in plan.sglang.log_line


def test_weights_count_both_branches(tmp_path: Path) -> None:
    """Per layer: attention q 256x256, k and v 256x128, o 256x256 = 196,608; Mamba-2 in_proj
    256 x (2 x 1024 + 2 x 1 x 256 + 128) = 688,128 and out_proj 1024 x 256 = 262,144; MLP
    3 x 256 x 512 = 393,216; 2 norms of 256. Embeddings and lm_head 2 x 1024 x 256 plus the
    final norm. Conv1d, A_log, D and dt_bias are left out (approximated, like other Mamba)."""
    weights = compute_weights(spec_of(tmp_path))
    per_layer = 196_608 + 688_128 + 262_144 + 393_216 + 2 * 256
    assert weights.num_params == 8 * per_layer + 2 * 1024 * 256 + 256
    assert weights.source == "estimated"
