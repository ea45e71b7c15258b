"""Issue #34: DBRX (``dbrx``), whose KV heads live in ``attn_config.kv_n_heads``.

transformers 5.24: ``DbrxConfig`` maps ``d_model`` / ``n_heads`` / ``n_layers`` through its
``attribute_map`` and sets ``num_key_value_heads = attn_config.kv_n_heads``
(``configuration_dbrx.py`` line 153; ``DbrxAttentionConfig`` default 1); ``DbrxAttention`` uses
``head_dim = d_model // n_heads`` (``modeling_dbrx.py`` lines 172-181). vLLM 0.32 reads the same
(``model_executor/models/dbrx.py`` lines 197-200). Every layer is full attention. The defaults
below are ``DbrxConfig``'s (d_model 2048, n_heads 16, n_layers 24, kv_n_heads 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.capacity.layouts.hf import hf_layout
from kvbudget.capacity.layouts.vllm import vllm_layout
from kvbudget.errors import SpecError
from kvbudget.spec.resolve import resolve_model
from tests.unit.spec.config_file import spec_from_config

DEFAULT = {
    "model_type": "dbrx",
    "architectures": ["DbrxForCausalLM"],
    "d_model": 2048,
    "n_heads": 16,
    "n_layers": 24,
    "max_seq_len": 2048,
    "vocab_size": 32000,
    "attn_config": {"kv_n_heads": 1, "clip_qkv": None, "rope_theta": 10000.0},
    "ffn_config": {"ffn_hidden_size": 3584, "moe_num_experts": 4, "moe_top_k": 1},
    "torch_dtype": "bfloat16",
}


def test_transformers_default_hf(tmp_path: Path) -> None:
    """24 layers x 1 KV head x (2048 // 16 = 128) x K and V x 2 B x 100 tokens."""
    got = hf_layout(spec_from_config(tmp_path, DEFAULT), tokens=100, seqs=1, kv_dtype="bfloat16")
    assert got.total_bytes == 24 * 1 * 128 * 2 * 2 * 100 == 1_228_800


def test_vllm_pages_whole_blocks(tmp_path: Path) -> None:
    """vLLM: 16-token blocks, 7 for 100 tokens, the same per-token bytes."""
    got = vllm_layout(spec_from_config(tmp_path, DEFAULT), tokens=100, seqs=1, kv_dtype="auto")
    assert got.bytes_per_token == 24 * 128 * 2 * 2
    assert got.total_bytes == 7 * 16 * 24 * 128 * 2 * 2 == 1_376_256


def test_kv_n_heads_wins_over_a_top_level_field(tmp_path: Path) -> None:
    raw = {**DEFAULT, "attn_config": {"kv_n_heads": 8}, "num_key_value_heads": 4}
    spec = spec_from_config(tmp_path, raw)
    got = hf_layout(spec, tokens=10, seqs=1, kv_dtype="bfloat16").total_bytes
    assert got == 24 * 8 * 128 * 2 * 2 * 10


def test_tiny_dbrx_as_transformers_held_it_on_the_cpu(tmp_path: Path) -> None:
    """transformers cannot run DBRX on the meta device (tests/peer/test_hf_oracle.py META_FAIL);
    this tiny DBRX (rope_theta and clip_qkv given) ran on the CPU in bfloat16 for 2 sequences of
    10 tokens and its DynamicCache held K and V of [2, 2, 10, 64] on each of 3 layers: 30,720 B."""
    raw = {
        "model_type": "dbrx",
        "n_layers": 3,
        "d_model": 256,
        "n_heads": 4,
        "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
        "torch_dtype": "bfloat16",
    }
    got = hf_layout(
        spec_from_config(tmp_path, raw), tokens=10, seqs=2, kv_dtype="bfloat16"
    ).total_bytes
    assert got == 3 * 2 * (2 * 2 * 10 * 64) * 2 == 30_720


def test_attn_config_must_be_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**DEFAULT, "attn_config": 8}), encoding="utf-8")
    with pytest.raises(SpecError, match="attn_config: expected a mapping"):
        resolve_model(str(path))
