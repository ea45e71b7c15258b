"""vLLM's pool for MiniMax-M3 (the published config, 60 layers): K/V plus the indexer's keys.

The tiny variants were started by vLLM 0.32.0's CPU engine and their logged pools are checked in
tests/peer/test_vllm_pool_oracle.py (cases ``minimax_m3``, ``minimax_m3_fp8``). The full-size
numbers here are worked by hand from vLLM 0.32.0's source (``site-packages/vllm/``):

* ``models/minimax_m3/nvidia/model.py`` lines 99-107: a layer is sparse where
  ``sparse_attention_freq`` is not 0; the published config lists 3 zeros then 57 ones.
* same file lines 356-364 (plain layers, ``Attention``) and 562-571 (sparse layers,
  ``FullAttentionSpec(num_kv_heads per rank, head_size = head_size_v = head_dim)``): every layer's
  page is ``block x kv_heads_per_rank x (128 + 128) x dtype bytes``; kv heads per rank
  ``max(1, 4 // tp)`` (lines 437-449 for the sparse layers).
* ``models/minimax_m3/common/indexer.py`` lines 145-153: each sparse layer's indexer cache is an
  ``MLAAttentionSpec(num_kv_heads=1, head_size=index_head_dim)`` in bf16 (``model.py`` lines
  505-509: ``resolve_indexer_kv_dtype("bf16")``; ``indexer.py`` lines 118-121), whatever
  ``--kv-cache-dtype`` and TP are: ``block x 128 x 2`` bytes.
* ``v1/core/single_type_kv_cache_manager.py`` lines 2685-2687 and ``v1/core/kv_cache_utils.py``
  lines 2189-2193: one ``UniformTypeKVCacheSpecs`` group whose page is the sum
  (``v1/kv_cache_interface.py`` lines 1252-1254); ``num_blocks = available // that sum``
  (kv_cache_utils.py lines 1520-1551, 1627); a request of L tokens needs ``cdiv(L, block)``.
* block 128: the sparse and indexer backends' only kernel block (``common/sparse_attention.py``
  lines 163-165, ``common/indexer.py`` lines 94-95); ``platforms/interface.py`` lines 700-745 raise
  the default 16 to it; a size that is not a multiple fails (``v1/worker/utils.py`` 538-561).
"""

from __future__ import annotations

from typing import Any

import pytest

from kvbudget.capacity.layouts.vllm import vllm_layout
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import GiB

MODEL = "MiniMaxAI/MiniMax-M3"
KV_BYTES = 10 * GiB  # 10,737,418,240
BLOCK = 128
# per block: 60 layers x 128 x 4 heads x 256 x 2 B = 15,728,640; 57 x 128 x 128 x 2 B = 1,867,776
BF16_BLOCK_BYTES = 17_596_416


def _plan(**extra: Any) -> Any:
    request = PlanRequest(
        model=MODEL,
        engine="vllm",
        engine_version="0.32.0",
        gpu="H200",
        kv_cache_memory_bytes=KV_BYTES,
        max_model_len=8192,
        **extra,
    )
    return make_plan(request)


def test_one_uniform_type_group_of_128_token_blocks() -> None:
    result = _plan()
    assert result.block_size == BLOCK  # vLLM raises its default 16 to the backends' 128
    assert len(result.groups) == 1
    group = result.groups[0]
    assert group.kind == "full" and group.num_layers == 60
    assert group.page_size_bytes == BF16_BLOCK_BYTES
    # 10,737,418,240 // 17,596,416 = 610 blocks; 8,192 tokens need 64: 9.53x, 78,080 tokens
    assert result.num_blocks == 610
    assert result.max_concurrency == pytest.approx(9.53125)
    assert result.kv_cache_tokens == 78_080


def test_indexer_keys_stay_bf16_under_fp8() -> None:
    # 60 x 128 x 4 x 256 x 1 B = 7,864,320 + 57 x 32,768 = 9,732,096 per block: 1,103 blocks
    result = _plan(kv_dtype="fp8")
    assert result.groups[0].page_size_bytes == 9_732_096
    assert result.num_blocks == 1103
    assert result.kv_cache_tokens == 141_184  # int(1103 / 64 x 8192)


def test_tensor_parallel_splits_kv_heads_not_the_indexer() -> None:
    # TP 4: 1 KV head per rank: 60 x 128 x 1 x 256 x 2 = 3,932,160 + 1,867,776 = 5,799,936
    result = _plan(tp=4)
    assert result.groups[0].page_size_bytes == 5_799_936
    assert result.num_blocks == 1851


def test_a_larger_multiple_of_128_is_taken() -> None:
    result = _plan(block_size=256)  # 2 x 17,596,416 per block: 305 blocks, 32 per request
    assert result.num_blocks == 305
    assert result.max_concurrency == pytest.approx(305 / 32)


def test_a_block_size_vllm_refuses_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"block_size: 16 for MiniMax-M3.*--block-size 128"):
        _plan(block_size=16)


def test_kv_dtypes_with_scales_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"kv_dtype: .* for MiniMax-M3 is not modelled"):
        _plan(kv_dtype="fp8_per_token_head")


def test_pipeline_parallel_is_refused_for_mixed_pages() -> None:
    with pytest.raises(ConfigError, match="--pp 1"):
        _plan(pp=2)


def test_calc_vllm_layout_counts_the_indexer() -> None:
    """``calc --engine vllm``: one sequence of 100 tokens holds one 128-token block per layer."""
    resolved = resolve_model(MODEL)
    assert resolved.spec is not None
    layout = vllm_layout(resolved.spec, tokens=100, seqs=1)
    assert layout.block_size == BLOCK
    assert sum(g.bytes_total for s in layout.stages for g in s.groups) == BF16_BLOCK_BYTES


def test_mtp_modules_join_the_one_group() -> None:
    """``--speculative-config`` method mtp, vLLM 0.32.0: ``models/minimax_m3/nvidia/mtp.py`` lines
    100-112 build ``num_mtp_modules`` (7 in the published config) layers, each (lines 58-64)
    ``MiniMaxM3DecoderLayer(force_sparse_attn=True)``: a sparse layer's K/V page plus its bf16
    indexer page (``model.py`` lines 707-716, 562-571; ``common/indexer.py`` lines 145-153), in
    the same uniform-type group (``v1/core/kv_cache_utils.py`` lines 1997-2012, 2189-2193).
    Per block: 7 x (128 x 4 x 256 x 2 + 128 x 128 x 2) = 7 x 294,912 = 2,064,384 more:
    19,660,800; 10,737,418,240 // 19,660,800 = 546 blocks; 8,192 tokens need 64: 8.53125x,
    int(546 / 64 x 8192) = 69,888 tokens."""
    result = _plan(speculative_config='{"method": "mtp", "num_speculative_tokens": 3}')
    assert BF16_BLOCK_BYTES + 7 * (128 * 4 * 256 * 2 + 128 * 128 * 2) == 19_660_800
    assert result.num_blocks == KV_BYTES // 19_660_800 == 546
    assert result.max_concurrency == pytest.approx(546 / 64)
    assert result.kv_cache_tokens == 69_888
    # the drafter's weights are sized (test_plan_mtp_weights_vllm.py works them by hand)
    assert not any("leave the MTP drafter out" in note for note in result.notes)


def test_mtp_of_an_unread_drafter_is_refused() -> None:
    request = PlanRequest(
        model="Qwen/Qwen3-Next-80B-A3B-Thinking",  # vLLM's qwen3_next_mtp drafter: not read
        engine="vllm",
        engine_version="0.32.0",
        gpu="H200",
        tp=8,
        kv_cache_memory_bytes=KV_BYTES,
        max_model_len=8192,
        # num_speculative_tokens given: without it vLLM 0.32 raises first (speculative.py 1819-1824)
        speculative_config='{"method": "mtp", "num_speculative_tokens": 1}',
    )
    with pytest.raises(ConfigError, match=r"^speculative_config: method mtp is priced for"):
        make_plan(request)
